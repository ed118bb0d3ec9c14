"""``vectors/codeword.json``: codewords (spec §7)."""

from __future__ import annotations

from typing import Any

import numpy as np

from uvsdk.bundle import Bundle
from uvsdk.codeword import (
    bipolar,
    code_fingerprint,
    encode,
    new_message,
    pack_generator,
    unpack_generator,
    user_id_bits,
)

from .shared import CONFORMANCE, bits, document, outcome


class _FixedBits:
    """Stands in for :mod:`secrets` so a message's random bits are the vector's."""

    def __init__(self, value: int) -> None:
        self.value = value

    def randbits(self, count: int) -> int:
        return self.value & ((1 << count) - 1)


def generate() -> dict[str, Any]:
    import uvsdk.codeword as module

    code = Bundle(CONFORMANCE / "bundles/voice-codeword.uvb").manifest.code
    hamming = np.array(
        [
            [1, 0, 0, 0, 1, 1, 0],
            [0, 1, 0, 0, 1, 0, 1],
            [0, 0, 1, 0, 0, 1, 1],
            [0, 0, 0, 1, 1, 1, 1],
        ],
        np.uint8,
    )
    codes = {
        "bch-127-64": (code.generator, code.id_bits),
        "hamming-7-4": (hamming, 2),
    }
    cases = []
    rng = np.random.default_rng(3)
    for name, (generator, id_bits) in codes.items():
        k, n = generator.shape
        for user_id, random_value in [
            (0, 0),
            (1, 1),
            (2**id_bits - 1, (1 << (k - id_bits)) - 1),
            (5 % 2**id_bits, int(rng.integers(0, 2**31))),
            (123456 % 2**id_bits, int(rng.integers(0, 2**31))),
        ]:
            saved = module.secrets
            module.secrets = _FixedBits(random_value)  # type: ignore[assignment]
            try:
                message = new_message(user_id, id_bits, k)
            finally:
                module.secrets = saved
            word = encode(message, generator)
            cases.append(
                {
                    "code": name,
                    "user_id": user_id,
                    "random_bits": bits(message[id_bits:]),
                    "message": bits(message),
                    "codeword": bits(word),
                    "bipolar_first8": [float(x) for x in bipolar(word)[:8]],
                }
            )
    generators = {
        name: {
            "k": int(g.shape[0]),
            "n": int(g.shape[1]),
            "id_bits": id_bits,
            "generator": pack_generator(g),
            "fingerprint": code_fingerprint(g),
        }
        for name, (g, id_bits) in codes.items()
    }
    singular_real_full = np.array([[1, 1, 0], [0, 1, 1], [1, 0, 1]], np.uint8)
    refused = []
    for name, encoded, k, n in [
        ("rank-2-over-GF(2)", pack_generator(singular_real_full), 3, 3),
        ("repeated-row", pack_generator(np.array([[1, 0, 1, 1], [1, 0, 1, 1]], np.uint8)), 2, 4),
        ("too-few-bits", pack_generator(hamming)[:-4], 4, 7),
        ("not-base64", "****", 4, 7),
    ]:
        _, error = outcome(lambda e=encoded, kk=k, nn=n: unpack_generator(e, kk, nn))
        assert error is not None, name
        refused.append({"name": name, "generator": encoded, "k": k, "n": n, "error": error.code})
    out_of_range = []
    for user_id, id_bits in ((2**32, 32), (-1, 32), (4, 2)):
        _, error = outcome(lambda u=user_id, b=id_bits: user_id_bits(u, b))
        assert error is not None, user_id
        out_of_range.append({"user_id": user_id, "id_bits": id_bits, "error": error.code})
    return document(
        "codeword",
        "m = id (id_bits bits, most significant first) || random bits; c = m G mod 2; "
        "v = 1 - 2c. Generators are numpy.packbits of the row-major k x n matrix (big-endian "
        "bit order), base64; the fingerprint is SHA-256 over 'kxn:' and those packed bytes. A "
        "generator must have rank k over GF(2) (spec §7).",
        codes=generators,
        cases=cases,
        refused_generators=refused,
        user_ids_out_of_range=out_of_range,
    )
