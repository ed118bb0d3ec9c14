"""Adaptive score normalisation (AS-norm) against an impostor cohort shipped in the bundle.

A raw cosine says how alike two recordings are, and how alike two strangers' recordings are
depends on the recording conditions: over a telephone line, in one language, with sentences
instead of single words, strangers score far higher than the people a threshold was calibrated
on. Adaptive symmetric normalisation (AS-norm; Matějka et al., "Analysis of Score Normalization
in Multilingual Speaker Recognition", Interspeech 2017; the normalisation WeSpeaker and
SpeechBrain ship) measures that on the spot. The bundle carries a *cohort*: vectors of many
recordings of people who are not the user, under many recording conditions (a model output, not
a secret). For a vector ``x`` the ``top_k`` largest cosines of ``x`` with the cohort give a mean
``μ(x)`` and a standard deviation ``σ(x)``: how strangers who sound most like ``x`` score
against it. The normalised score of a test vector ``t`` against a user's prototype ``p`` is

    s_norm = ½ · ((s − μ(p)) / σ(p) + (s − μ(t)) / σ(t)),      s = cos(p, t)

so a telephone clip, whose cohort neighbours are the cohort's telephone clips, is measured
against how telephone strangers score, and the threshold (calibrated on normalised scores,
:mod:`uvsdk.calibration`) means the same FAR across conditions. docs/spec.md §6.7 is the rule.

The manifest's ``cohort`` names the member and binds it::

    "cohort": {"file": "cohort.f32", "count": N, "top_k": K, "sha256": "<hex of the member>"}

``cohort.f32`` holds ``N × dim`` little-endian float32 values, row-major (one vector per row);
the signature over the manifest covers it through ``sha256``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import BundleError

COHORT_FILE = "cohort.f32"
MAX_COHORT_COUNT = 16384
"""At most this many cohort vectors (a cohort of 16,384 × 256 is 16 MiB)."""
MAX_COHORT_BYTES = 16 * 1024 * 1024
"""The member's size limit, checked before it is read."""
MIN_STD = 1e-6
"""σ is floored here, so a degenerate cohort (identical vectors) cannot divide by zero."""
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class CohortSpec:
    """The manifest's ``cohort`` object, validated."""

    count: int
    top_k: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": COHORT_FILE,
            "count": self.count,
            "top_k": self.top_k,
            "sha256": self.sha256,
        }

    @classmethod
    def from_dict(cls, data: Any) -> CohortSpec:
        if not isinstance(data, dict):
            raise BundleError("manifest: cohort must be an object")
        unknown = sorted(set(data) - {"file", "count", "top_k", "sha256"})
        if unknown:
            raise BundleError(f"manifest: cohort has an unknown key {unknown[0]!r}")
        if data.get("file") != COHORT_FILE:
            raise BundleError(f"manifest: cohort.file must be {COHORT_FILE!r}")
        count = _integer(data.get("count"), "cohort.count", 2, MAX_COHORT_COUNT)
        top_k = _integer(data.get("top_k"), "cohort.top_k", 2, count)
        sha = data.get("sha256")
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            raise BundleError("manifest: cohort.sha256 is not 64 lowercase hex digits")
        return cls(count, top_k, sha)


def _integer(value: Any, name: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise BundleError(f"manifest: {name} must be an integer in [{low}, {high}]")
    return value


class Cohort:
    """The cohort's unit vectors and ``top_k``: the statistics of :func:`statistics`."""

    def __init__(self, vectors: np.ndarray, top_k: int) -> None:
        vectors = np.asarray(vectors, dtype=np.float64)
        lengths = np.linalg.norm(vectors, axis=1, keepdims=True)
        self.vectors = vectors / np.maximum(lengths, 1e-12)
        self.top_k = int(top_k)

    @classmethod
    def from_member(cls, data: bytes, spec: CohortSpec, dim: int, bundle: str) -> Cohort:
        """Check ``cohort.f32`` against the manifest (digest first, then size and values)."""
        if hashlib.sha256(data).hexdigest() != spec.sha256:
            raise BundleError(
                f"{bundle}: cohort.f32 does not match the manifest's cohort.sha256 "
                "(the bundle was modified or damaged)",
                code="bundle.digest-mismatch",
            )
        if len(data) != 4 * spec.count * dim:
            raise BundleError(
                f"{bundle}: cohort.f32 is {len(data)} bytes, not count x dim x 4 = "
                f"{4 * spec.count * dim}",
                code="bundle.member-invalid",
            )
        vectors = np.frombuffer(data, dtype="<f4").reshape(spec.count, dim)
        if not np.all(np.isfinite(vectors)) or np.any(np.linalg.norm(vectors, axis=1) == 0):
            raise BundleError(
                f"{bundle}: cohort.f32 holds a non-finite or zero vector",
                code="bundle.member-invalid",
            )
        return cls(vectors, spec.top_k)

    def statistics(
        self, vectors: np.ndarray, exclude: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(μ, σ)`` per row of ``vectors``: mean and (population) standard deviation of its
        ``top_k`` largest cosines with the cohort, σ floored at :data:`MIN_STD`.

        ``exclude`` (``[rows, count]`` booleans) leaves cohort vectors out per row: calibration
        uses it so that nobody is normalised against their own recordings."""
        units = np.asarray(vectors, dtype=np.float64)
        units = units / np.maximum(np.linalg.norm(units, axis=-1, keepdims=True), 1e-12)
        scores = np.atleast_2d(units) @ self.vectors.T
        if exclude is not None:
            scores = np.where(exclude, -np.inf, scores)
        k = min(self.top_k, scores.shape[1])
        top = -np.partition(-scores, k - 1, axis=1)[:, :k]
        if not np.all(np.isfinite(top)):
            raise ValueError(f"fewer than top_k = {k} cohort vectors left after exclusion")
        mean = top.mean(axis=1)
        std = np.sqrt(np.mean((top - mean[:, None]) ** 2, axis=1))
        return mean, np.maximum(std, MIN_STD)


def as_norm(
    scores: np.ndarray,
    enrolled: tuple[np.ndarray | float, np.ndarray | float],
    tested: tuple[np.ndarray | float, np.ndarray | float],
) -> np.ndarray:
    """``½ ((s − μe)/σe + (s − μt)/σt)`` elementwise (broadcasting the statistics)."""
    scores = np.asarray(scores, dtype=np.float64)
    (mean_e, std_e), (mean_t, std_t) = enrolled, tested
    return 0.5 * ((scores - mean_e) / std_e + (scores - mean_t) / std_t)
