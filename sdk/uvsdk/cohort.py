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

The manifest's ``cohort`` names the member and binds it, and its ``score_norm`` (as WeSpeaker
names it) declares the rule, one of two::

    "cohort": {"file": "cohort.f32", "count": N, "sha256": "<hex of the member>"}
    "score_norm": {"method": "as-norm", "top_k": K}     # adaptive: the K nearest (2 <= K <= N)
    "score_norm": {"method": "s-norm"}                  # symmetric: all N cohort vectors

``cohort.f32`` holds ``N × dim`` little-endian float32 values, row-major (one vector per row);
the signature over the manifest covers it through ``sha256``, and the rule as a manifest field.
A bundle has both or neither (docs/spec.md §3.9).

``score_norm`` may also carry a **centre** (spec version 9, :class:`Centre`): the mean unit
embedding of the people of the recording chain the bundle is deployed on, taken out of every
prototype-mode vector before it is scored, so that strangers who share the chain no longer
score alike for it (docs/model-card.md measured the stated FAR hold on every held-out chain
with it). With a centre and no cohort the rule is ``{"method": "cosine", "centre": {...}}``::

    "score_norm": {"method": "cosine", "centre": {"file": "centre.f32", "people": P,
                                                  "sha256": "<hex of the member>"}}
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .errors import BundleError

COHORT_FILE = "cohort.f32"
CENTRE_FILE = "centre.f32"
MAX_CENTRE_BYTES = 4 * 65536
"""``centre.f32``'s size limit (one vector of at most 65,536 float32 values), checked before
it is read."""
MAX_CENTRE_PEOPLE = 2**31 - 1
MAX_COHORT_COUNT = 16384
"""At most this many cohort vectors (a cohort of 16,384 × 256 is 16 MiB)."""
MAX_COHORT_BYTES = 16 * 1024 * 1024
"""The member's size limit, checked before it is read."""
MIN_STD = 1e-6
"""σ is floored here, so a degenerate cohort (identical vectors) cannot divide by zero."""
RESCALE_EPSILON = 1e-12
"""The least norm a vector is rescaled by (docs/spec.md §6.1); a cohort vector must reach it."""
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

Statistics = tuple[np.ndarray | float, np.ndarray | float]
"""``(μ, σ)`` of vectors against the cohort (per row, or one vector's)."""


class ScoreRule:
    """A score rule (docs/spec.md §6.7): a name and a parameter, and how a raw cosine becomes the
    score a threshold is set on. The rules are the objects of :data:`SCORE_RULES`; adding one is
    one subclass here (and its twin in ``js/src/cohort.ts``), its manifest spelling in spec §3.9
    and §6.7, and a conformance bundle made under it."""

    name: ClassVar[str]
    """``score_norm.method`` in the manifest, and the ``score`` of a calibration table."""
    uses_cohort: ClassVar[bool] = True
    """Whether it normalises against the bundle's cohort (every rule but the raw cosine)."""
    threshold_range: ClassVar[tuple[float, float]] = (-1e3, 1e3)
    """Where a calibrated threshold on these scores may lie."""

    def top_k(self, data: Mapping[str, Any], count: int) -> int | None:
        """The rule's parameter from the manifest's ``score_norm``, validated for a cohort of
        ``count``: how many nearest cohort vectors it takes (``None``: not a parameter of it)."""
        raise NotImplementedError

    def nearest(self, top_k: int | None) -> int | None:
        """How many of the highest cohort cosines each statistic takes (``None``: every one)."""
        return top_k

    def describe(self, top_k: int | None, count: int) -> str:
        """One plain phrase for ``uvsdk info``."""
        raise NotImplementedError

    def normalise(self, scores: np.ndarray, enrolled: Statistics, tested: Statistics) -> np.ndarray:
        """The scores from the raw cosines and the cohort statistics of both sides."""
        return as_norm(scores, enrolled, tested)


class RawCosine(ScoreRule):
    """No normalisation: the cosine itself (a bundle without a cohort)."""

    name = "cosine"
    uses_cohort = False
    threshold_range = (-1.0, 1.0 + 1e-6)

    def top_k(self, data: Mapping[str, Any], count: int) -> int | None:
        return None

    def describe(self, top_k: int | None, count: int) -> str:
        return "raw cosines"

    def normalise(self, scores: np.ndarray, enrolled: Statistics, tested: Statistics) -> np.ndarray:
        return np.asarray(scores, dtype=np.float64)


class AdaptiveSymmetricNorm(ScoreRule):
    """AS-norm: each side's statistics over its ``top_k`` nearest cohort vectors."""

    name = "as-norm"

    def top_k(self, data: Mapping[str, Any], count: int) -> int | None:
        return _integer(data.get("top_k"), "score_norm.top_k", 2, count)

    def describe(self, top_k: int | None, count: int) -> str:
        return f"AS-norm over the {top_k:,} nearest of {count:,} cohort vectors"


class SymmetricNorm(ScoreRule):
    """S-norm: AS-norm over the whole cohort (WeSpeaker's ``top_n`` at the cohort's size)."""

    name = "s-norm"

    def top_k(self, data: Mapping[str, Any], count: int) -> int | None:
        if "top_k" in data:
            raise BundleError("manifest: score_norm.top_k is for as-norm (s-norm uses all)")
        return None

    def nearest(self, top_k: int | None) -> int | None:
        return None

    def describe(self, top_k: int | None, count: int) -> str:
        return f"S-norm over all {count:,} cohort vectors"


SCORE_RULES: dict[str, ScoreRule] = {
    rule.name: rule for rule in (RawCosine(), AdaptiveSymmetricNorm(), SymmetricNorm())
}
"""Every score rule by name: what a calibration table's prototype ``score`` may be."""
SCORE_NORMS = tuple(name for name, rule in SCORE_RULES.items() if rule.uses_cohort)
"""The score normalisations a bundle may declare (``score_norm.method``)."""


@dataclass(frozen=True)
class CohortSpec:
    """The manifest's ``cohort`` object, validated."""

    count: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": COHORT_FILE, "count": self.count, "sha256": self.sha256}

    @classmethod
    def from_dict(cls, data: Any) -> CohortSpec:
        if not isinstance(data, dict):
            raise BundleError("manifest: cohort must be an object")
        if "top_k" in data:
            raise BundleError(
                "manifest: cohort.top_k is score_norm.top_k since spec version 4 "
                "(re-calibrate the bundle with uvexport calibrate)"
            )
        unknown = sorted(set(data) - {"file", "count", "sha256"})
        if unknown:
            raise BundleError(f"manifest: cohort has an unknown key {unknown[0]!r}")
        if data.get("file") != COHORT_FILE:
            raise BundleError(f"manifest: cohort.file must be {COHORT_FILE!r}")
        count = _integer(data.get("count"), "cohort.count", 2, MAX_COHORT_COUNT)
        sha = data.get("sha256")
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            raise BundleError("manifest: cohort.sha256 is not 64 lowercase hex digits")
        return cls(count, sha)


@dataclass(frozen=True)
class ScoreNorm:
    """The manifest's ``score_norm``: how prototype scores are normalised against the cohort.

    ``as-norm`` takes each vector's ``top_k`` nearest cohort vectors, ``s-norm`` all of them
    (``top_k`` is then absent from the manifest; :meth:`k` gives the count); ``cosine`` (no
    cohort) only with a ``centre``, which any rule may carry."""

    method: str
    top_k: int | None = None
    centre: CentreSpec | None = None
    """The recording chain's mean taken out of every vector first (``None``: none)."""

    @property
    def rule(self) -> ScoreRule:
        """The score rule it names."""
        return SCORE_RULES[self.method]

    def k(self, count: int) -> int:
        """How many cohort vectors each statistic uses, of a cohort of ``count``."""
        return count if self.top_k is None else self.top_k

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"method": self.method}
        if self.top_k is not None:
            data["top_k"] = self.top_k
        if self.centre is not None:
            data["centre"] = self.centre.to_dict()
        return data

    def describe(self, count: int) -> str:
        """One plain phrase for ``uvsdk info``."""
        return self.rule.describe(self.top_k, count)

    @classmethod
    def from_dict(cls, data: Any, cohort: CohortSpec | None) -> ScoreNorm:
        """Validate ``score_norm`` against the manifest's ``cohort`` (required with it): with a
        cohort, ``as-norm`` or ``s-norm``; without one, only ``cosine`` with a ``centre``."""
        if not isinstance(data, dict):
            raise BundleError("manifest: score_norm must be an object")
        unknown = sorted(set(data) - {"method", "top_k", "centre"})
        if unknown:
            raise BundleError(f"manifest: score_norm has an unknown key {unknown[0]!r}")
        centre = CentreSpec.from_dict(data["centre"]) if "centre" in data else None
        method = data.get("method")
        if cohort is None:
            if centre is None:
                raise BundleError("manifest: score_norm needs a cohort to normalise against")
            if method != RawCosine.name:
                raise BundleError(
                    f"manifest: score_norm.method must be {RawCosine.name!r} without a cohort, "
                    f"not {method!r}"
                )
            if "top_k" in data:
                raise BundleError("manifest: score_norm.top_k is for as-norm (cosine has none)")
            return cls(method, None, centre)
        if method not in SCORE_NORMS:
            raise BundleError(
                f"manifest: score_norm.method must be one of {', '.join(SCORE_NORMS)}, "
                f"not {method!r}"
            )
        return cls(method, SCORE_RULES[method].top_k(data, cohort.count), centre)


@dataclass(frozen=True)
class CentreSpec:
    """``score_norm.centre``, validated: the member's digest and how many people its mean is of."""

    people: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": CENTRE_FILE, "people": self.people, "sha256": self.sha256}

    @classmethod
    def from_dict(cls, data: Any) -> CentreSpec:
        if not isinstance(data, dict):
            raise BundleError("manifest: score_norm.centre must be an object")
        unknown = sorted(set(data) - {"file", "people", "sha256"})
        if unknown:
            raise BundleError(f"manifest: score_norm.centre has an unknown key {unknown[0]!r}")
        if data.get("file") != CENTRE_FILE:
            raise BundleError(f"manifest: score_norm.centre.file must be {CENTRE_FILE!r}")
        people = _integer(data.get("people"), "score_norm.centre.people", 1, MAX_CENTRE_PEOPLE)
        sha = data.get("sha256")
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            raise BundleError("manifest: score_norm.centre.sha256 is not 64 lowercase hex digits")
        return cls(people, sha)


class Centre:
    """A recording chain's mean unit embedding, taken out of prototype-mode vectors
    (docs/spec.md §6.8): ``c(z) = rescale(rescale(z, 1) − m, 1)``."""

    def __init__(self, mean: np.ndarray) -> None:
        self.mean = np.asarray(mean, dtype=np.float64)

    @classmethod
    def from_member(cls, data: bytes, spec: CentreSpec, dim: int, bundle: str) -> Centre:
        """Check ``centre.f32`` against the manifest (digest first, then size and values): ``dim``
        finite float32 values whose norm, in double, is below 1 (a mean of unit vectors that is
        not one vector repeated)."""
        if hashlib.sha256(data).hexdigest() != spec.sha256:
            raise BundleError(
                f"{bundle}: centre.f32 does not match the manifest's score_norm.centre.sha256 "
                "(the bundle was modified or damaged)",
                code="bundle.digest-mismatch",
            )
        if len(data) != 4 * dim:
            raise BundleError(
                f"{bundle}: centre.f32 is {len(data)} bytes, not dim x 4 = {4 * dim}",
                code="bundle.member-invalid",
            )
        mean = np.frombuffer(data, dtype="<f4").astype(np.float64)
        if not np.all(np.isfinite(mean)):
            raise BundleError(
                f"{bundle}: centre.f32 holds a non-finite value", code="bundle.member-invalid"
            )
        if not np.linalg.norm(mean) < 1.0:
            raise BundleError(
                f"{bundle}: centre.f32 is not a mean of unit vectors (its norm is not below 1)",
                code="bundle.member-invalid",
            )
        return cls(mean)

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        """Each row (or the vector) unit-normalised, the mean taken out, normalised again."""
        units = np.asarray(vectors, dtype=np.float64)
        units = units / np.maximum(np.linalg.norm(units, axis=-1, keepdims=True), RESCALE_EPSILON)
        centred = units - self.mean
        lengths = np.linalg.norm(centred, axis=-1, keepdims=True)
        return centred / np.maximum(lengths, RESCALE_EPSILON)


def _integer(value: Any, name: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise BundleError(f"manifest: {name} must be an integer in [{low}, {high}]")
    return value


class Cohort:
    """The cohort's unit vectors and its rule: the statistics of :meth:`statistics` use each
    vector's ``top_k`` nearest cohort vectors, or all of them (the rule's
    :meth:`ScoreRule.nearest`)."""

    def __init__(self, vectors: np.ndarray, top_k: int, method: str = "as-norm") -> None:
        if method not in SCORE_NORMS:
            raise ValueError(f"unknown score normalisation {method!r}")
        vectors = np.asarray(vectors, dtype=np.float64)
        lengths = np.linalg.norm(vectors, axis=1, keepdims=True)
        self.vectors = vectors / np.maximum(lengths, 1e-12)
        self.method = method
        self.rule = SCORE_RULES[method]
        nearest = self.rule.nearest(int(top_k))
        self.top_k = len(vectors) if nearest is None else nearest

    @classmethod
    def from_member(
        cls, data: bytes, spec: CohortSpec, norm: ScoreNorm, dim: int, bundle: str
    ) -> Cohort:
        """Check ``cohort.f32`` against the manifest (digest first, then size and values); its
        statistics follow ``norm``."""
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
        if not np.all(np.isfinite(vectors)):
            raise BundleError(
                f"{bundle}: cohort.f32 holds a non-finite value", code="bundle.member-invalid"
            )
        # In double, as scoring rescales it (docs/spec.md §6.1): a vector shorter than the
        # rescale epsilon (zero, or subnormal float32 values) cannot be made unit length.
        if np.any(np.linalg.norm(vectors.astype(np.float64), axis=1) < RESCALE_EPSILON):
            raise BundleError(
                f"{bundle}: cohort.f32 holds a vector too short to normalise (zero or "
                f"subnormal: norm below {RESCALE_EPSILON:g})",
                code="bundle.member-invalid",
            )
        return cls(vectors, norm.k(spec.count), norm.method)

    def statistics(
        self, vectors: np.ndarray, exclude: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(μ, σ)`` per row of ``vectors``: mean and (population) standard deviation of its
        ``top_k`` largest cosines with the cohort (a rule that takes every vector: of all of
        them), σ floored at :data:`MIN_STD`.

        ``exclude`` (``[rows, count]`` booleans) leaves cohort vectors out per row: calibration
        uses it so that nobody is normalised against their own recordings (a rule that takes
        every vector then takes every vector left)."""
        units = np.asarray(vectors, dtype=np.float64)
        units = units / np.maximum(np.linalg.norm(units, axis=-1, keepdims=True), 1e-12)
        scores = np.atleast_2d(units) @ self.vectors.T
        if self.rule.nearest(self.top_k) is None:
            kept = np.ones(scores.shape, dtype=bool) if exclude is None else ~exclude
            kept = np.broadcast_to(kept, scores.shape)
            counts = kept.sum(axis=1)
            if np.any(counts < 2):
                raise ValueError("fewer than 2 cohort vectors left after exclusion")
            mean = np.where(kept, scores, 0.0).sum(axis=1) / counts
            spread = np.where(kept, (scores - mean[:, None]) ** 2, 0.0).sum(axis=1) / counts
            return mean, np.maximum(np.sqrt(spread), MIN_STD)
        if exclude is not None:
            scores = np.where(exclude, -np.inf, scores)
        k = min(self.top_k, scores.shape[1])
        top = -np.partition(-scores, k - 1, axis=1)[:, :k]
        if not np.all(np.isfinite(top)):
            raise ValueError(f"fewer than top_k = {k} cohort vectors left after exclusion")
        mean = top.mean(axis=1)
        std = np.sqrt(np.mean((top - mean[:, None]) ** 2, axis=1))
        return mean, np.maximum(std, MIN_STD)

    def normalise(
        self, scores: np.ndarray | float, reference: np.ndarray, vectors: np.ndarray
    ) -> np.ndarray:
        """Raw cosines of ``vectors`` against ``reference`` as the rule scores them."""
        return self.rule.normalise(
            np.asarray(scores, dtype=np.float64),
            self.statistics(reference),
            self.statistics(vectors),
        )


def as_norm(
    scores: np.ndarray,
    enrolled: tuple[np.ndarray | float, np.ndarray | float],
    tested: tuple[np.ndarray | float, np.ndarray | float],
) -> np.ndarray:
    """``½ ((s − μe)/σe + (s − μt)/σt)`` elementwise (broadcasting the statistics)."""
    scores = np.asarray(scores, dtype=np.float64)
    (mean_e, std_e), (mean_t, std_t) = enrolled, tested
    return 0.5 * ((scores - mean_e) / std_e + (scores - mean_t) / std_t)
