"""BCH codes for FedUV: the paper's three shipped, any other built with galois once and cached.

galois compiles with numba on first use (13 s a process on the 2-core development machine, idle),
so the generator matrix of each (n, k) is kept as the bundle stores it (packed bits, base64): the
FedUV paper's codes (127, 255, 511) ship with the package (``uvtrain/bch/``, each checked against
galois by tests/sdk/test_codeword.py), and any other is built with galois on first use and cached
in the user's cache folder. The SDK's :func:`uvsdk.codeword.encode` makes the codewords, so
trainer and device share one encoder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from uvsdk.bundle import Code
from uvsdk.codeword import pack_generator, unpack_generator

from .errors import ConfigError
from .io import atomic_write

#: The FedUV paper's codes: length n, message length k (minimum distance in the comment).
PAPER_CODES = {127: 64, 255: 71, 511: 67}  # d_min 21, 59, 175
ID_BITS = 32
#: The generators shipped with the package: the paper's codes, ``bch_{n}_{k}.json``.
SHIPPED_CODES = Path(__file__).parent / "bch"


class CodeError(ConfigError, ValueError):
    """A code length with no default message length (a :class:`ValueError` too, as it was)."""


def cache_dir() -> Path:
    """``$UVTRAIN_CACHE``, else the platform's user cache folder for uvtrain."""
    if os.environ.get("UVTRAIN_CACHE"):
        return Path(os.environ["UVTRAIN_CACHE"])
    import platformdirs

    return Path(platformdirs.user_cache_dir("uvtrain", appauthor=False))


def bch_code(n: int, k: int | None = None, *, id_bits: int = ID_BITS) -> Code:
    """The binary BCH(n, k) code with its systematic generator matrix (galois, cached).

    ``k`` defaults to the FedUV paper's message length for ``n`` (127 → 64, 255 → 71, 511 → 67).
    """
    if k is None:
        if n not in PAPER_CODES:
            raise CodeError(f"no default message length for n = {n}: give k")
        k = PAPER_CODES[n]
    name = f"bch_{n}_{k}.json"
    path = cache_dir() / "codes" / name
    for known in (SHIPPED_CODES / name, path):
        try:
            spec = json.loads(known.read_text())
            generator = unpack_generator(spec["generator"], k, n)
            return Code("bch", n, k, int(spec["d_min"]), id_bits, generator)
        except (OSError, ValueError, KeyError):
            continue
    import galois

    bch = galois.BCH(n, k)
    generator = np.asarray(bch.G, dtype=np.uint8)
    spec = {"n": n, "k": k, "d_min": int(bch.d), "generator": pack_generator(generator)}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(spec))
    return Code("bch", n, k, int(bch.d), id_bits, generator)
