"""FedUV codewords on the device, from the generator matrix shipped in the bundle.

A user's message is ``m = b ‖ r``: ``b`` is the user id as ``id_bits`` bits (most significant bit
first, assigned by the server so that codewords are distinct), ``r`` is ``k − id_bits`` bits from
:mod:`secrets`. The codeword is ``c = m·G mod 2`` and its ±1 form is ``v = 1 − 2c`` (FedUV, Hosseini
et al., Sec. 4.2, "Choosing Unique Codewords"). No galois on the device: ``G`` comes from the bundle, built by the exporter.
"""

from __future__ import annotations

import base64
import hashlib
import secrets

import numpy as np

from .errors import BundleError, UvsdkError


def pack_generator(generator: np.ndarray) -> str:
    """Base64 of ``numpy.packbits(G, axis=None)`` for a binary ``k × n`` matrix (row-major)."""
    bits = np.asarray(generator, dtype=np.uint8)
    if bits.ndim != 2 or np.any(bits > 1):
        raise ValueError("the generator must be a binary k × n matrix")
    return base64.b64encode(np.packbits(bits, axis=None).tobytes()).decode("ascii")


def unpack_generator(encoded: str, k: int, n: int) -> np.ndarray:
    """Inverse of :func:`pack_generator`: a ``uint8`` ``k × n`` matrix of zeros and ones."""
    try:
        packed = np.frombuffer(base64.b64decode(encoded, validate=True), dtype=np.uint8)
    except (ValueError, TypeError) as error:
        raise BundleError(f"the code's generator is not valid base64 ({error})") from None
    if packed.size != (k * n + 7) // 8:
        raise BundleError(
            f"the code's generator holds {packed.size * 8} bits, a {k} × {n} matrix needs {k * n}"
        )
    generator = np.unpackbits(packed, count=k * n).reshape(k, n)
    if gf2_rank(generator) < k:
        raise BundleError("the code's generator matrix is not of full rank over GF(2)")
    return generator


def gf2_rank(matrix: np.ndarray) -> int:
    """The rank of a binary matrix over GF(2) (Gaussian elimination with XOR).

    A generator must have ``k`` independent rows over GF(2), not over the reals: the rows
    ``110, 011, 101`` are independent over the reals but sum to zero mod 2, and such a "code"
    maps two messages to every codeword.
    """
    rows = np.array(matrix, dtype=np.uint8) & 1
    rank = 0
    for column in range(rows.shape[1]):
        pivots = np.flatnonzero(rows[rank:, column]) + rank
        if pivots.size == 0:
            continue
        pivot = pivots[0]
        rows[[rank, pivot]] = rows[[pivot, rank]]
        others = np.flatnonzero(rows[:, column])
        others = others[others != rank]
        rows[others] ^= rows[rank]
        rank += 1
        if rank == rows.shape[0]:
            break
    return rank


def code_fingerprint(generator: np.ndarray) -> str:
    """A hex SHA-256 naming the code (its shape and generator), to bind a codeword to its code."""
    bits = np.asarray(generator, dtype=np.uint8)
    digest = hashlib.sha256(f"{bits.shape[0]}x{bits.shape[1]}:".encode())
    digest.update(np.packbits(bits, axis=None).tobytes())
    return digest.hexdigest()


def user_id_bits(user_id: int, id_bits: int) -> np.ndarray:
    """The user id as ``id_bits`` bits, most significant first."""
    if not 0 <= user_id < 2**id_bits:
        raise UvsdkError(
            f"user id {user_id} is out of range: it must be in [0, 2^{id_bits})",
            code="codeword.user-id",
        )
    return np.array([(user_id >> shift) & 1 for shift in range(id_bits - 1, -1, -1)], np.uint8)


def random_user_id(id_bits: int) -> int:
    """A user id drawn with :mod:`secrets`, for devices that no server assigned one to."""
    return secrets.randbits(id_bits)


def new_message(user_id: int, id_bits: int, k: int) -> np.ndarray:
    """``m = b ‖ r``: the id bits followed by ``k − id_bits`` bits from :mod:`secrets`."""
    if not 0 < id_bits < k:
        raise UvsdkError(
            f"the code has {k} message bits, too few for {id_bits} id bits", code="argument.invalid"
        )
    random_bits = secrets.randbits(k - id_bits)
    tail = np.array([(random_bits >> i) & 1 for i in range(k - id_bits)], dtype=np.uint8)
    return np.concatenate([user_id_bits(user_id, id_bits), tail])


def encode(message: np.ndarray, generator: np.ndarray) -> np.ndarray:
    """Codeword bits ``c = m·G mod 2`` (``uint8``, length n)."""
    message = np.asarray(message, dtype=np.int64)
    generator = np.asarray(generator, dtype=np.int64)
    if message.shape != (generator.shape[0],):
        raise ValueError(f"message of shape {message.shape} for a {generator.shape} generator")
    return ((message @ generator) % 2).astype(np.uint8)


def bipolar(codeword_bits: np.ndarray) -> np.ndarray:
    """The ±1 vector ``v = 1 − 2c`` as float32."""
    return (1.0 - 2.0 * np.asarray(codeword_bits, dtype=np.float32)).astype(np.float32)
