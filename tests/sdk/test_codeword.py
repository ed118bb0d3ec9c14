"""Codewords on the device: equal to galois' BCH encoding, distinct ids at distance >= d_min, and
the shipped codes checked as BCH codes by arithmetic in GF(2^m) written here (not galois).

galois compiles each field with numba on first use (13 s for GF(2^7), 16 s more for GF(2^8) and
GF(2^9) on the 2-core machine), so it builds only BCH(127, 64) here; the longer codes are checked
by the algebra below, which does not depend on galois at all."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from uvsdk.codeword import (
    bipolar,
    code_fingerprint,
    encode,
    new_message,
    pack_generator,
    unpack_generator,
    user_id_bits,
)
from uvsdk.errors import BundleError, UvsdkError

from ..conftest import SHIPPED_CODES

CODES = [(127, 64, 21), (255, 71, 59), (511, 67, 175)]
#: the primitive polynomial of GF(2^m) that each code is built over, bit i = x^i: galois' choice
#: for these fields (x^7 + x^3 + 1, x^8 + x^4 + x^3 + x^2 + 1, x^9 + x^4 + 1)
PRIMITIVE = {7: 0b10001001, 8: 0b100011101, 9: 0b1000010001}


@pytest.fixture(scope="module")
def galois_bch127() -> object:
    galois = pytest.importorskip("galois")  # dev extra only: compiles with numba on first use
    return galois.BCH(127, 64)


def shipped_generator(n: int, k: int) -> np.ndarray:
    spec = json.loads((SHIPPED_CODES / f"bch_{n}_{k}.json").read_text())
    return unpack_generator(spec["generator"], k, n)


def gf_multiply(a: int, b: int, m: int) -> int:
    """a·b in GF(2^m) (bit i = the coefficient of x^i), reduced by :data:`PRIMITIVE`."""
    product = 0
    while b:
        if b & 1:
            product ^= a
        b >>= 1
        a <<= 1
        if a >> m:
            a ^= PRIMITIVE[m]
    return product


def polynomial_remainder(dividend: np.ndarray, divisor: np.ndarray) -> np.ndarray:
    """The remainder of two polynomials over GF(2), coefficients highest degree first."""
    remainder = dividend.astype(np.uint8).copy()
    for start in range(len(remainder) - len(divisor) + 1):
        if remainder[start]:
            remainder[start : start + len(divisor)] ^= divisor
    return remainder[len(remainder) - len(divisor) + 1 :]


@pytest.mark.parametrize(("n", "k", "d_min"), CODES)
def test_the_shipped_codes_are_narrow_sense_bch_codes(n: int, k: int, d_min: int) -> None:
    """Each shipped generator matrix is the systematic one, [I_k | P], of the cyclic code whose
    generator polynomial g(x) (its last row) has degree n − k, divides x^n − 1, and has the roots
    α, α², ..., α^(d_min − 1) for α a root of the field's primitive polynomial: the narrow-sense
    BCH code of designed distance d_min (the BCH bound), each row a multiple of g(x)."""
    m = n.bit_length()
    generator = shipped_generator(n, k)
    assert generator.shape == (k, n)
    np.testing.assert_array_equal(generator[:, :k], np.eye(k, dtype=np.uint8))
    g = generator[-1, k - 1 :]  # the row of x^(n-k): g(x) itself, highest degree first
    assert g[0] == 1 and g[-1] == 1 and len(g) == n - k + 1
    x_n_minus_1 = np.zeros(n + 1, np.uint8)
    x_n_minus_1[[0, -1]] = 1
    assert not polynomial_remainder(x_n_minus_1, g).any()
    for row in generator:
        assert not polynomial_remainder(row, g).any()
    alpha_power = 1
    for _ in range(1, d_min):
        alpha_power = gf_multiply(alpha_power, 0b10, m)
        value = 0
        for coefficient in g:  # Horner's rule at α^i
            value = gf_multiply(value, alpha_power, m) ^ int(coefficient)
        assert value == 0


def test_encoding_equals_galois(galois_bch127: object) -> None:
    n, k, d_min = CODES[0]
    bch = galois_bch127
    assert (bch.n, bch.k, bch.d) == (n, k, d_min)
    generator = unpack_generator(pack_generator(np.asarray(bch.G, np.uint8)), k, n)
    rng = np.random.default_rng(n)
    for user_id in (0, 1, 12345, 2**32 - 1):
        message = new_message(user_id, 32, k)
        ours = encode(message, generator)
        theirs = np.asarray(bch.encode(bch.field(message)), dtype=np.uint8)
        np.testing.assert_array_equal(ours, theirs)
        assert not np.any(bch.detect(bch.field(ours)))  # a valid codeword of the code
    message = rng.integers(0, 2, k).astype(np.uint8)
    np.testing.assert_array_equal(
        encode(message, generator), np.asarray(bch.encode(bch.field(message)), np.uint8)
    )


@pytest.mark.parametrize(("n", "k", "d_min"), CODES)
def test_distinct_ids_give_distinct_codewords_at_distance_d_min(n: int, k: int, d_min: int) -> None:
    generator = shipped_generator(n, k)
    words = [encode(new_message(user_id, 32, k), generator) for user_id in range(40)]
    distances = [int(np.sum(a != b)) for a, b in itertools.combinations(words, 2)]
    assert min(distances) >= d_min


def test_the_shipped_bch127_is_galois_generator(galois_bch127: object) -> None:
    """The generators uvtrain ships (``uvtrain/bch/``): the paper's three codes, which every
    FedUV run and the SDK tests' BCH(127, 64) read instead of compiling galois. BCH(127, 64)
    equals galois' own; all three are checked by the algebra above."""
    for n, k, d_min in CODES:
        spec = json.loads((SHIPPED_CODES / f"bch_{n}_{k}.json").read_text())
        assert (spec["n"], spec["k"], spec["d_min"]) == (n, k, d_min)
    np.testing.assert_array_equal(shipped_generator(127, 64), np.asarray(galois_bch127.G, np.uint8))


def test_the_trainers_codes_are_built_with_galois_once_then_read_from_the_cache(
    galois_bch127: object, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A code uvtrain does not ship is built by ``uvtrain.codes.bch_code`` with galois on an
    empty cache (a fresh machine) and cached; the next call reads the cache without galois.
    (The shipped folder is emptied here so that BCH(127, 64) stands for such a code.)"""
    import sys

    from uvtrain import codes

    monkeypatch.setenv("UVTRAIN_CACHE", str(tmp_path))
    monkeypatch.setattr(codes, "SHIPPED_CODES", tmp_path / "nothing shipped")
    built = codes.bch_code(127)
    assert (built.n, built.k, built.d_min, built.id_bits) == (127, 64, 21, 32)
    np.testing.assert_array_equal(built.generator, np.asarray(galois_bch127.G, np.uint8))
    assert (tmp_path / "codes" / "bch_127_64.json").is_file()
    monkeypatch.setitem(sys.modules, "galois", None)  # importing galois now fails
    cached = codes.bch_code(127)
    assert cached.d_min == 21
    np.testing.assert_array_equal(cached.generator, built.generator)


def test_the_papers_codes_need_no_galois_and_no_cache(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh machine's first FedUV run reads the paper's codes from the package: no galois
    (13 s of numba compilation a process), nothing written to the cache."""
    import sys

    from uvtrain.codes import bch_code

    monkeypatch.setenv("UVTRAIN_CACHE", str(tmp_path))
    monkeypatch.setitem(sys.modules, "galois", None)  # importing galois now fails
    for n, k, d_min in CODES:
        code = bch_code(n)
        assert (code.n, code.k, code.d_min) == (n, k, d_min)
        assert code.generator.shape == (k, n)
    assert not (tmp_path / "codes").exists()


def test_message_is_id_bits_msb_first_then_fresh_random_bits() -> None:
    np.testing.assert_array_equal(user_id_bits(5, 4), [0, 1, 0, 1])
    first, second = new_message(5, 4, 64), new_message(5, 4, 64)
    np.testing.assert_array_equal(first[:4], [0, 1, 0, 1])
    assert first.shape == (64,) and set(np.unique(first)) <= {0, 1}
    assert not np.array_equal(first[4:], second[4:])  # 60 random bits: equal with p = 2^-60


def test_out_of_range_id_is_refused() -> None:
    with pytest.raises(UvsdkError, match="out of range"):
        user_id_bits(2**32, 32)
    with pytest.raises(UvsdkError):
        user_id_bits(-1, 32)


def test_bipolar_and_fingerprint(bch127) -> None:
    np.testing.assert_array_equal(bipolar(np.array([0, 1, 1])), [1.0, -1.0, -1.0])
    other = bch127.generator.copy()
    other[0, -1] ^= 1
    assert code_fingerprint(bch127.generator) != code_fingerprint(other)


def test_generator_that_does_not_fit_is_refused() -> None:
    with pytest.raises(BundleError, match="bits"):
        unpack_generator(pack_generator(np.eye(4, 8, dtype=np.uint8)), 5, 8)
    with pytest.raises(BundleError, match="base64"):
        unpack_generator("not base64!", 4, 8)
    with pytest.raises(BundleError, match="rank"):
        unpack_generator(pack_generator(np.zeros((4, 8), np.uint8)), 4, 8)
