"""Scores and the warm-up threshold, as pure functions on arrays.

Codeword mode (FedUV, Hosseini et al., eq. 5; Sec. 4.2 and Algorithm 2): the score of an output ``z`` against
the user's ±1 codeword ``v`` is ``e = v · rescale(z) / n`` with ``rescale`` to norm √n, so
``e ∈ [−1, 1]``. Prototype mode: the reference is the normalised mean of the enrollment vectors and
the score is the cosine. The threshold is the paper's warm-up rule: τ is the ⌊n(1 − q)⌋-th smallest
of n warm-up scores, q the target true-positive rate; verification accepts iff ``e ≥ τ``.
"""

from __future__ import annotations

import math

import numpy as np

_EPSILON = 1e-12


def rescale(vectors: np.ndarray, norm: float) -> np.ndarray:
    """Scale each row (or the vector) to the given L2 norm."""
    vectors = np.asarray(vectors, dtype=np.float64)
    lengths = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(lengths, _EPSILON) * norm


def codeword_scores(codeword: np.ndarray, outputs: np.ndarray) -> np.ndarray:
    """``e = v · rescale(z) / n`` for each row ``z`` of ``outputs`` (``v`` is the ±1 codeword).

    One codeword ``[n]`` gives ``[N]`` scores; a stack of codewords ``[U, n]`` gives ``[N, U]``.
    """
    codeword = np.asarray(codeword, dtype=np.float64)
    n = codeword.shape[-1]
    return rescale(outputs, math.sqrt(n)) @ codeword.T / n


def cosine_scores(reference: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Cosine of each row of ``vectors`` with ``reference`` (``[d]`` → ``[N]``; ``[U, d]`` →
    ``[N, U]``)."""
    return rescale(vectors, 1.0) @ rescale(reference, 1.0).T


def prototype(vectors: np.ndarray) -> np.ndarray:
    """The enrollment reference: normalised mean of the L2-normalised vectors."""
    return rescale(rescale(vectors, 1.0).mean(axis=0), 1.0)


def leave_one_out_scores(vectors: np.ndarray) -> np.ndarray:
    """Each vector's cosine with the normalised mean of all the others (prototype warm-up)."""
    units = rescale(vectors, 1.0)
    if units.shape[0] < 2:
        raise ValueError("leave-one-out needs at least two vectors")
    others = units.sum(axis=0, keepdims=True) - units
    return np.sum(rescale(others, 1.0) * units, axis=1)


def warmup_threshold(scores: np.ndarray, target_tpr: float) -> float:
    """The warm-up threshold τ: the ⌊n(1 − q)⌋-th smallest of the n scores (1-based).

    When ⌊n(1 − q)⌋ is 0 (few samples, high q) the smallest score is taken, so every warm-up
    sample is accepted. A tiny tolerance keeps ``n(1 − q)`` from flooring one too low through
    rounding (``100 · (1 − 0.9)`` is ``9.999…`` in floating point).
    """
    scores = np.sort(np.asarray(scores, dtype=np.float64).ravel())
    if scores.size == 0:
        raise ValueError("the warm-up needs at least one score")
    if not 0.0 < target_tpr <= 1.0:
        raise ValueError(f"target TPR must be in (0, 1], not {target_tpr}")
    rank = max(1, math.floor(scores.size * (1.0 - target_tpr) + 1e-9))
    return float(scores[rank - 1])


def acceptance_rate(scores: np.ndarray, threshold: float) -> float:
    """The fraction of scores at or above the threshold."""
    scores = np.asarray(scores, dtype=np.float64)
    return float(np.mean(scores >= threshold)) if scores.size else float("nan")
