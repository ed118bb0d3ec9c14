"""Calibrated thresholds: what a bundle's impostors score, measured on people it never saw,
under every recording condition the calibration simulated.

The warm-up rule (FedUV, Sec. 4.2, Algorithm 2) sets a user's threshold from their own enrollment
samples only: with 5 samples and q = 0.95 it is the lowest of their leave-one-out scores, an
extreme statistic that says nothing of impostors and that a consistent owner's next attempt often
misses. A bundle can carry a *calibration*: on a calibration set of real people, each person is
enrolled exactly as the SDK enrolls (:func:`measure`), their other samples are genuine trials and
everyone else's samples impostor trials, and this is repeated under each recording condition the
exporter simulates (telephone codecs, noise, reverberation, long utterances:
:mod:`uvexport.conditions`). The manifest keeps, for each FAR target, the threshold at which at
most that fraction of the impostor trials is accepted **in every condition** (the worst
condition's threshold), the pooled FRR there, and the trials behind it (:class:`Calibration`,
manifest key ``calibration``).

A bundle with a cohort (:mod:`uvsdk.cohort`) normalises prototype scores by its ``score_norm``
(AS-norm or S-norm), and its prototype table is measured on those normalised scores (``score:
"as-norm"`` or ``"s-norm"``), so the threshold
follows how strangers score against this user in these conditions. A user's threshold
(:func:`user_threshold`):

- a table with genuine trials (``prototype``): the table's threshold at the requested FAR; the
  warm-up scores only count how many of the user's own samples it would reject (advice);
- a table without genuine trials (``codeword``: calibration people hold no trained codeword):
  ``max(warm-up threshold, calibrated threshold)``, the table floors the paper's rule;
- no table for the mode, or no FAR requested: the warm-up rule alone.

A row exists for a FAR target only when, in every condition, ``far × impostor_trials >=``
:data:`MIN_FALSE_ACCEPTS`: a FAR the trials cannot resolve is not stated. A requested FAR between
rows takes the stricter row (the largest tabled FAR not above it).
"""

from __future__ import annotations

import dataclasses
import decimal
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .cohort import Cohort, as_norm
from .errors import BundleError, CalibrationError
from .scoring import (
    codeword_scores,
    cosine_scores,
    leave_one_out_scores,
    prototype,
    warmup_threshold,
)

VERSION = 2
DEFAULT_FAR = 0.01
MAX_FAR = 0.5
FAR_GRID = (
    0.5,
    0.2,
    0.1,
    0.05,
    0.02,
    0.01,
    0.005,
    0.002,
    0.001,
    5e-4,
    2e-4,
    1e-4,
    5e-5,
    2e-5,
    1e-5,
)
"""The FAR targets a calibration measures (three per decade), as far as its trials allow."""
MIN_FALSE_ACCEPTS = 10
"""A row needs ``far × impostor_trials`` of at least this: a FAR backed by fewer expected false
accepts is too uncertain to state (10 errors: a relative standard error of about 30 %)."""
DEFAULT_ENROLL_SAMPLES = 5
CODEWORDS_PER_PERSON = 16
MODES = ("prototype", "codeword")
TABLE_SCORES = {"prototype": ("cosine", "as-norm", "s-norm"), "codeword": ("codeword",)}
"""What a table's thresholds are on: raw or normalised cosines (prototype), codeword scores."""
SCORE_RANGES = {
    "cosine": (-1.0, 1.0 + 1e-6),
    "codeword": (-1.0, 1.0 + 1e-6),
    "as-norm": (-1e3, 1e3),
    "s-norm": (-1e3, 1e3),
}
"""The thresholds a table of each score may hold."""
MAX_CONDITIONS = 32
CONDITION_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")


def check_far(far: float) -> float:
    """``far`` as a float in (0, :data:`MAX_FAR`], else a one-line :class:`CalibrationError`."""
    try:
        value = float(far)
    except (TypeError, ValueError):
        raise CalibrationError(
            f"the FAR must be a number in (0, {MAX_FAR}], not {far!r}",
            code="calibration.far-invalid",
        ) from None
    if not (math.isfinite(value) and 0.0 < value <= MAX_FAR):
        raise CalibrationError(
            f"the FAR must be in (0, {MAX_FAR}], not {far}", code="calibration.far-invalid"
        )
    return value


@dataclass(frozen=True)
class Row:
    """One FAR target: the threshold, what it measured there, and the trials behind it."""

    far: float
    threshold: float
    false_accepts: int
    frr: float | None
    false_rejects: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "far": self.far,
            "threshold": self.threshold,
            "false_accepts": self.false_accepts,
            "frr": self.frr,
            "false_rejects": self.false_rejects,
        }


@dataclass(frozen=True)
class HeldOutRow:
    """What one row's threshold did on recording chains it was not fitted on: pooled counts
    over the chains, and the lowest and highest rate of a single chain."""

    far: float
    false_accepts: int
    impostor_trials: int
    far_low: float
    far_high: float
    false_rejects: int
    genuine_trials: int
    frr_low: float
    frr_high: float

    @property
    def far_measured(self) -> float:
        return self.false_accepts / self.impostor_trials

    @property
    def frr(self) -> float:
        return self.false_rejects / self.genuine_trials

    def to_dict(self) -> dict[str, Any]:
        return {
            "far": self.far,
            "false_accepts": self.false_accepts,
            "impostor_trials": self.impostor_trials,
            "far_low": self.far_low,
            "far_high": self.far_high,
            "false_rejects": self.false_rejects,
            "genuine_trials": self.genuine_trials,
            "frr_low": self.frr_low,
            "frr_high": self.frr_high,
        }


@dataclass(frozen=True)
class HeldOut:
    """A prototype table's held-out figures (``held_out``): each recording chain left out in
    turn, the thresholds fitted on the others as the table's are, then applied to the left-out
    chain's people (impostors: pairs within that chain; genuine: its clips of at least
    ``min_seconds``). What a user of a chain the bundle never saw can expect, not the in-sample
    rows."""

    chains: int
    min_seconds: float
    rows: tuple[HeldOutRow, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "chains": self.chains,
            "min_seconds": self.min_seconds,
            "rows": [row.to_dict() for row in self.rows],
        }

    def row_for(self, far: float) -> HeldOutRow | None:
        """The held-out figures of the table row stating ``far`` (``None``: not measured)."""
        for row in self.rows:
            if abs(row.far - far) <= 1e-12 * max(1.0, far):
                return row
        return None


@dataclass(frozen=True)
class Table:
    """The calibration of one enrollment mode."""

    mode: str
    people: int
    enroll_samples: int
    genuine_trials: int
    impostor_trials: int
    rows: tuple[Row, ...]
    score: str = "cosine"
    conditions: tuple[str, ...] = ("clean",)
    held_out: HeldOut | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {
            "people": self.people,
            "enroll_samples": self.enroll_samples,
            "genuine_trials": self.genuine_trials,
            "impostor_trials": self.impostor_trials,
            "score": self.score,
            "conditions": list(self.conditions),
            "rows": [row.to_dict() for row in self.rows],
        }
        if self.held_out is not None:
            data["held_out"] = self.held_out.to_dict()
        return data

    @property
    def states_frr(self) -> bool:
        """Whether the table has genuine trials: its threshold is then the user's threshold."""
        return self.genuine_trials > 0

    @property
    def fars(self) -> tuple[float, ...]:
        return tuple(row.far for row in self.rows)

    def row_for(self, far: float) -> Row:
        """The row a requested FAR uses: the largest tabled FAR not above it (the stricter
        side). A FAR below every row is a :class:`CalibrationError`."""
        far = check_far(far)
        usable = [row for row in self.rows if row.far <= far * (1 + 1e-9)]
        if not usable:
            smallest = min(self.fars)
            raise CalibrationError(
                f"the bundle's {self.mode} calibration states FAR down to {smallest:g} "
                f"({self.impostor_trials} impostor trials); a FAR of {far:g} cannot be "
                "stated: choose a larger --far, or calibrate on more people"
            )
        return max(usable, key=lambda row: row.far)

    def expected(self, threshold: float) -> tuple[str, str | None]:
        """The FAR and FRR the calibration expects at ``threshold``, as short text.

        Between two rows both are interpolated (FAR log-linearly) in the threshold; above the
        strictest row the FAR is only bounded (``< 0.0005``)."""
        rows = sorted(self.rows, key=lambda row: row.threshold)
        for row in reversed(rows):  # a row's own threshold (a calibrated user's): its rates
            if threshold == row.threshold:
                return f"{row.far:g}", None if row.frr is None else f"{row.frr:.3f}"
        if threshold >= rows[-1].threshold:
            last = rows[-1]
            frr = None if last.frr is None else f">= {last.frr:.3f}"
            return f"< {last.far:g}" if threshold > last.threshold else f"{last.far:g}", frr
        if threshold <= rows[0].threshold:
            first = rows[0]
            frr = None if first.frr is None else f"<= {first.frr:.3f}"
            return f">= {first.far:g}", frr
        for low, high in zip(rows, rows[1:], strict=False):
            if low.threshold <= threshold <= high.threshold:
                span = high.threshold - low.threshold
                t = 0.0 if span <= 0 else (threshold - low.threshold) / span
                far = math.exp((1 - t) * math.log(low.far) + t * math.log(high.far))
                frr = None
                if low.frr is not None and high.frr is not None:
                    frr = f"{(1 - t) * low.frr + t * high.frr:.3f}"
                return f"{far:.2g}", frr
        raise AssertionError("unreachable: rows bracket the threshold")


@dataclass(frozen=True)
class Calibration:
    """The manifest's ``calibration``: the data it was measured on and a table per mode."""

    data: str
    tables: Mapping[str, Table]
    version: int = VERSION

    @property
    def sha256(self) -> str:
        """Names this calibration (a template records which one set its threshold): the hex
        SHA-256 of its RFC 8785 canonical JSON (:func:`canonical_json`), which any language
        reproduces (docs/spec.md)."""
        return hashlib.sha256(canonical_json(self.to_dict()).encode("utf-8")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "data": self.data,
            **{mode: table.to_dict() for mode, table in self.tables.items()},
        }

    @classmethod
    def from_dict(
        cls, data: Any, *, output_kind: str = "embedding", prototype_score: str = "cosine"
    ) -> Calibration:
        """Validate the manifest's ``calibration``; a problem is a :class:`BundleError`.

        ``prototype_score`` is what the bundle's prototype scores are (its ``score_norm``'s
        method, ``cosine`` without one): a prototype table measured on another score is
        refused."""
        if not isinstance(data, dict):
            raise BundleError("manifest: calibration must be an object")
        if data.get("version") != VERSION:
            raise BundleError(
                f"manifest: calibration version {data.get('version')!r} is not {VERSION}",
                code="bundle.unsupported",
            )
        description = data.get("data")
        if not isinstance(description, str):
            raise BundleError("manifest: calibration.data must be a string")
        unknown = set(data) - {"version", "data", *MODES}
        if unknown:
            raise BundleError(f"manifest: calibration has unknown key(s) {sorted(unknown)}")
        tables = {}
        for mode in MODES:
            if mode in data:
                if mode == "codeword" and output_kind != "codeword":
                    raise BundleError(
                        "manifest: calibration.codeword needs a codeword bundle (output.kind)"
                    )
                expected = prototype_score if mode == "prototype" else "codeword"
                tables[mode] = _parse_table(mode, data[mode], expected)
        if not tables:
            raise BundleError("manifest: calibration has no table (prototype or codeword)")
        return cls(description, tables)


def canonical_json(value: Any) -> str:
    """RFC 8785 (JSON Canonicalization Scheme) text of a JSON value: object keys sorted, no
    whitespace, strings escaped as ECMAScript's ``JSON.stringify`` escapes them, and numbers
    written as ECMAScript's ``Number.prototype.toString`` writes them (``1`` for 1.0, ``0.00001``
    for 1e-05, ``1e+21``), so a port in JavaScript gets the same bytes from ``JSON.stringify``
    with sorted keys. Non-finite numbers are not JSON and raise :class:`ValueError`."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int | float):
        return _ecmascript_number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        items = sorted(value.items(), key=lambda item: item[0].encode("utf-16-be"))
        return "{" + ",".join(f"{canonical_json(k)}:{canonical_json(v)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(canonical_json(item) for item in value) + "]"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _ecmascript_number(number: float) -> str:
    """``Number.prototype.toString`` (ECMA-262 Number::toString, radix 10) of a finite number."""
    if not math.isfinite(number):
        raise ValueError("non-finite numbers have no JSON form")
    if number == 0:
        return "0"
    if number < 0:
        return "-" + _ecmascript_number(-number)
    # the shortest digits that round-trip (Python's repr), as value = 0.DIGITS x 10^n
    sign, digits, exponent = decimal.Decimal(repr(float(number))).normalize().as_tuple()
    text = "".join(map(str, digits))
    k, n = len(text), len(text) + int(exponent)
    if k <= n <= 21:
        return text + "0" * (n - k)
    if 0 < n <= 21:
        return text[:n] + "." + text[n:]
    if -6 < n <= 0:
        return "0." + "0" * -n + text
    power = f"{'+' if n - 1 > 0 else '-'}{abs(n - 1)}"
    return (text if k == 1 else text[0] + "." + text[1:]) + "e" + power


def _count(value: Any, name: str, *, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BundleError(f"manifest: {name} must be an integer >= {minimum}, not {value!r:.40}")
    return value


def _number(value: Any, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BundleError(f"manifest: {name} must be a number, not {value!r:.40}")
    value = float(value)
    if not (math.isfinite(value) and low <= value <= high):
        raise BundleError(f"manifest: {name} must be finite and in [{low:g}, {high:g}]")
    return value


def _parse_conditions(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not 0 < len(value) <= MAX_CONDITIONS:
        raise BundleError(f"manifest: {where}.conditions must be a list of 1 to {MAX_CONDITIONS}")
    for name in value:
        if not isinstance(name, str) or not CONDITION_NAME.fullmatch(name):
            raise BundleError(f"manifest: {where}.conditions: {name!r:.40} is not a condition name")
    if len(set(value)) != len(value):
        raise BundleError(f"manifest: {where}.conditions names a condition twice")
    return tuple(value)


def _parse_table(mode: str, spec: Any, expected_score: str) -> Table:
    where = f"calibration.{mode}"
    if not isinstance(spec, dict):
        raise BundleError(f"manifest: {where} must be an object")
    score = spec.get("score")
    if score not in TABLE_SCORES[mode]:
        raise BundleError(
            f"manifest: {where}.score must be one of {', '.join(TABLE_SCORES[mode])}, "
            f"not {score!r:.40}"
        )
    if score != expected_score:
        raise BundleError(
            f"manifest: {where} is calibrated on {score} scores, and this bundle's "
            f"{mode} scores are {expected_score} (its score_norm)"
        )
    conditions = _parse_conditions(spec.get("conditions"), where)
    low, high = SCORE_RANGES[score]
    people = _count(spec.get("people"), f"{where}.people", minimum=2)
    enroll = _count(spec.get("enroll_samples"), f"{where}.enroll_samples")
    genuine = _count(spec.get("genuine_trials"), f"{where}.genuine_trials")
    impostor = _count(spec.get("impostor_trials"), f"{where}.impostor_trials", minimum=1)
    if mode == "prototype" and (enroll < 2 or genuine < 1):
        raise BundleError(f"manifest: {where} needs enroll_samples >= 2 and genuine trials")
    raw_rows = spec.get("rows")
    if not isinstance(raw_rows, list) or not raw_rows:
        raise BundleError(f"manifest: {where}.rows must be a non-empty list")
    rows = []
    for number, raw in enumerate(raw_rows):
        at = f"{where}.rows[{number}]"
        if not isinstance(raw, dict):
            raise BundleError(f"manifest: {at} must be an object")
        far = _number(raw.get("far"), f"{at}.far", 0.0, MAX_FAR)
        if far <= 0.0:
            raise BundleError(f"manifest: {at}.far must be > 0")
        threshold = _number(raw.get("threshold"), f"{at}.threshold", low, high)
        accepts = _count(raw.get("false_accepts"), f"{at}.false_accepts")
        if accepts > far * impostor + 1e-9:
            raise BundleError(
                f"manifest: {at}: {accepts} false accepts of {impostor} trials exceed FAR {far:g}"
            )
        if far * impostor < MIN_FALSE_ACCEPTS - 1e-9:
            raise BundleError(
                f"manifest: {at}: FAR {far:g} of {impostor} impostor trials is fewer than "
                f"{MIN_FALSE_ACCEPTS} expected false accepts"
            )
        frr, rejects = raw.get("frr"), raw.get("false_rejects")
        if genuine:
            frr = _number(frr, f"{at}.frr", 0.0, 1.0)
            rejects = _count(rejects, f"{at}.false_rejects")
            if rejects > genuine or abs(rejects / genuine - frr) > 1e-6:
                raise BundleError(f"manifest: {at}: frr and false_rejects disagree")
        elif frr is not None or rejects is not None:
            raise BundleError(f"manifest: {at}: an FRR without genuine trials")
        rows.append(Row(far, threshold, accepts, frr, rejects))
    for before, after in zip(rows, rows[1:], strict=False):
        if not after.far < before.far:
            raise BundleError(f"manifest: {where}.rows must have strictly decreasing FAR")
        if after.threshold < before.threshold:
            raise BundleError(f"manifest: {where}.rows: thresholds must not fall as the FAR falls")
        if after.frr is not None and before.frr is not None and after.frr < before.frr:
            raise BundleError(f"manifest: {where}.rows: the FRR must not fall as the FAR falls")
    held_out = None
    if spec.get("held_out") is not None:
        if mode != "prototype":
            raise BundleError(f"manifest: {where}.held_out is for the prototype table")
        held_out = _parse_held_out(spec["held_out"], f"{where}.held_out", [r.far for r in rows])
    return Table(mode, people, enroll, genuine, impostor, tuple(rows), score, conditions, held_out)


MAX_MIN_SECONDS = 60.0
"""``held_out.min_seconds`` at most this."""


def _parse_held_out(spec: Any, where: str, fars: list[float]) -> HeldOut:
    """The table's ``held_out`` (docs/spec.md §3.6): each row names a FAR of the table's rows,
    in the same order; counts within their trials; each pooled rate within its chains' range."""
    if not isinstance(spec, dict):
        raise BundleError(f"manifest: {where} must be an object")
    unknown = sorted(set(spec) - {"chains", "min_seconds", "rows"})
    if unknown:
        raise BundleError(f"manifest: {where} has an unknown key {unknown[0]!r}")
    chains = _count(spec.get("chains"), f"{where}.chains", minimum=2)
    min_seconds = _number(spec.get("min_seconds"), f"{where}.min_seconds", 0.0, MAX_MIN_SECONDS)
    raw_rows = spec.get("rows")
    if not isinstance(raw_rows, list) or not raw_rows:
        raise BundleError(f"manifest: {where}.rows must be a non-empty list")
    rows = []
    for number, raw in enumerate(raw_rows):
        at = f"{where}.rows[{number}]"
        if not isinstance(raw, dict):
            raise BundleError(f"manifest: {at} must be an object")
        unknown = sorted(set(raw) - set(HeldOutRow.__dataclass_fields__))
        if unknown:
            raise BundleError(f"manifest: {at} has an unknown key {unknown[0]!r}")
        far = _number(raw.get("far"), f"{at}.far", 0.0, MAX_FAR)
        if far not in fars:
            raise BundleError(f"manifest: {at}.far {far:g} is not a FAR of the table's rows")
        values: dict[str, Any] = {"far": far}
        for rate, errors, trials in (("far", "false_accepts", "impostor_trials"),
                                     ("frr", "false_rejects", "genuine_trials")):  # fmt: skip
            total = _count(raw.get(trials), f"{at}.{trials}", minimum=1)
            count = _count(raw.get(errors), f"{at}.{errors}")
            if count > total:
                raise BundleError(f"manifest: {at}.{errors} exceeds {trials}")
            low = _number(raw.get(f"{rate}_low"), f"{at}.{rate}_low", 0.0, 1.0)
            high = _number(raw.get(f"{rate}_high"), f"{at}.{rate}_high", 0.0, 1.0)
            if not low - 1e-9 <= count / total <= high + 1e-9:
                raise BundleError(
                    f"manifest: {at}: the pooled {rate} is not within {rate}_low..{rate}_high"
                )
            values.update({errors: count, trials: total, f"{rate}_low": low, f"{rate}_high": high})
        rows.append(HeldOutRow(**values))
    order = [fars.index(row.far) for row in rows]
    if order != sorted(set(order)):
        raise BundleError(f"manifest: {where}.rows must follow the table's rows, each once")
    return HeldOut(chains, min_seconds, tuple(rows))


# -- measuring ----------------------------------------------------------------------------


def far_threshold(impostor: np.ndarray, far: float) -> float:
    """The smallest threshold that accepts at most ``far × len(impostor)`` of these impostor
    scores (accept iff ``score >= threshold``)."""
    descending = np.sort(np.asarray(impostor, np.float64).ravel())[::-1]
    allowed = math.floor(far * descending.size + 1e-9)
    # strictly above the (allowed + 1)-th highest impostor score: at most `allowed` accepted
    return float(np.nextafter(descending[allowed], np.inf))


def table_from_scores(
    mode: str,
    trials: Mapping[str, tuple[np.ndarray, np.ndarray]],
    *,
    people: int,
    enroll_samples: int,
    score: str,
    grid: Sequence[float] = FAR_GRID,
) -> Table:
    """A table from each condition's ``(genuine, impostor)`` trial scores: for each FAR that
    every condition's trials resolve, the smallest threshold that accepts at most ``far`` of
    the impostor trials in **every** condition (the worst condition decides); the false accepts
    and the FRR there are pooled over the conditions."""
    scores = {
        name: (np.asarray(g, np.float64).ravel(), np.asarray(i, np.float64).ravel())
        for name, (g, i) in trials.items()
    }
    for genuine, impostor in scores.values():
        if not (np.all(np.isfinite(genuine)) and np.all(np.isfinite(impostor))):
            raise ValueError("calibration scores must be finite")
    genuine = np.concatenate([g for g, _ in scores.values()])
    impostor = np.concatenate([i for _, i in scores.values()])
    fewest = min(i.size for _, i in scores.values())
    rows: list[Row] = []
    for far in sorted(grid, reverse=True):
        if far > MAX_FAR or far * fewest < MIN_FALSE_ACCEPTS:
            continue
        threshold = max(far_threshold(i, far) for _, i in scores.values())
        if rows:  # identical scores can only make a stricter FAR need a higher threshold
            threshold = max(threshold, rows[-1].threshold)
        accepts = int(np.count_nonzero(impostor >= threshold))
        frr = rejects = None
        if genuine.size:
            rejects = int(np.count_nonzero(genuine < threshold))
            frr = rejects / genuine.size
        rows.append(Row(far, threshold, accepts, frr, rejects))
    if not rows:
        raise ValueError(
            f"{fewest} impostor trials in a condition cannot state any FAR (a row needs "
            f"far x trials >= {MIN_FALSE_ACCEPTS}): calibrate on more people or samples"
        )
    return Table(
        mode,
        people,
        enroll_samples,
        int(genuine.size),
        int(impostor.size),
        tuple(rows),
        score,
        tuple(scores),
    )


def enrollment_trials(
    vectors: Mapping[str, np.ndarray],
    enroll_samples: int,
    *,
    cohort: Cohort | None = None,
    cohort_people: np.ndarray | None = None,
    groups: Mapping[str, str] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Enroll every person with more than ``enroll_samples`` vectors on their first ones, as
    :meth:`uvsdk.Verifier.enroll` does in prototype mode.

    Returns per person: the warm-up (leave-one-out) scores of the enrollment samples, the genuine
    scores (their other samples) and the impostor scores (every sample of every other person;
    with ``groups``, person → recording chain, only of the other people of the same chain: the
    strangers an app meets record on the same app and devices, and people of other chains are
    told apart by their channel as much as by their voice).
    With a ``cohort`` every score is AS-norm normalised, as the SDK does; ``cohort_people``
    names the person of each cohort vector, and a person's own vectors never take part in the
    statistics of their enrollment or of their samples (calibration people are in the cohort;
    users are not).
    """
    names = [name for name, v in vectors.items() if len(v)]
    everyone = np.concatenate([np.asarray(vectors[name]) for name in names])
    owners = np.repeat(np.array(names, dtype=object), [len(vectors[name]) for name in names])
    chain_of = None if groups is None else np.array([groups[o] for o in owners], dtype=object)
    warmup, genuine, impostor = {}, {}, {}
    for name in names:
        own = np.asarray(vectors[name])
        if len(own) <= enroll_samples:
            continue
        enrolled, tests = own[:enroll_samples], own[enroll_samples:]
        strangers = owners != name
        if chain_of is not None:
            strangers &= chain_of == groups[name]
        others, other_owners = everyone[strangers], owners[strangers]
        reference = prototype(enrolled)
        warmup[name] = leave_one_out_scores(enrolled)
        genuine[name] = cosine_scores(reference, tests)
        impostor[name] = cosine_scores(reference, others)
        if cohort is not None:

            def exclude(test_owners: np.ndarray | None, person: str = name) -> np.ndarray | None:
                if cohort_people is None:
                    return None
                mask = np.asarray(cohort_people == person)[None, :]
                if test_owners is not None:
                    mask = mask | (cohort_people[None, :] == test_owners[:, None])
                return mask

            enrolled_stats = cohort.statistics(reference[None], exclude(None))
            warmup[name] = normalised_leave_one_out(enrolled, cohort, exclude(None))
            genuine[name] = as_norm(
                genuine[name], enrolled_stats, cohort.statistics(tests, exclude(None))
            )
            impostor[name] = as_norm(
                impostor[name], enrolled_stats, cohort.statistics(others, exclude(other_owners))
            )
    return warmup, genuine, impostor


def normalised_leave_one_out(
    vectors: np.ndarray, cohort: Cohort, exclude: np.ndarray | None = None
) -> np.ndarray:
    """The leave-one-out scores (:func:`uvsdk.scoring.leave_one_out_scores`), each AS-norm
    normalised with the statistics of its own left-out prototype and of its sample."""
    units = np.asarray(vectors, dtype=np.float64)
    units = units / np.maximum(np.linalg.norm(units, axis=1, keepdims=True), 1e-12)
    others = units.sum(axis=0, keepdims=True) - units
    others = others / np.maximum(np.linalg.norm(others, axis=1, keepdims=True), 1e-12)
    scores = np.sum(others * units, axis=1)
    mask = None if exclude is None else np.repeat(exclude, len(units), axis=0)
    return as_norm(scores, cohort.statistics(others, mask), cohort.statistics(units, mask))


def measure(
    conditions: Mapping[str, Mapping[str, np.ndarray]],
    *,
    data: str,
    enroll_samples: int = DEFAULT_ENROLL_SAMPLES,
    generator: np.ndarray | None = None,
    seed: int = 0,
    cohort: Cohort | None = None,
    cohort_people: np.ndarray | None = None,
    groups: Mapping[str, str] | None = None,
    seconds: Mapping[str, Mapping[str, np.ndarray]] | None = None,
) -> Calibration:
    """The calibration of a bundle from its vectors of a calibration set under each recording
    condition (``{condition: {person: [N, dim]}}``, e.g. from :meth:`uvsdk.Verifier.embed` of
    :mod:`uvexport.conditions`' versions of each file).

    The prototype table enrolls each person on their first ``enroll_samples`` vectors of each
    condition, with AS-norm against ``cohort`` when given (``cohort_people``: whose each cohort
    vector is). With a ``generator`` (codeword bundles), the codeword table scores every vector
    against :data:`CODEWORDS_PER_PERSON` codewords per person, drawn from the code with a seeded
    generator (they are the calibration's, not anyone's secret). ``groups`` (person →
    recording chain) keeps the impostor trials within each chain (:func:`enrollment_trials`);
    with ``seconds`` (the audio behind each vector, as ``conditions``) and at least two chains
    of several people, the prototype table carries its :func:`held_out_figures`.
    """
    trials, people = {}, set()
    for condition, vectors in conditions.items():
        _, genuine, impostor = enrollment_trials(
            vectors, enroll_samples, cohort=cohort, cohort_people=cohort_people, groups=groups
        )
        if len(genuine) < 2:
            raise ValueError(
                f"calibration needs at least 2 people with more than {enroll_samples} usable "
                f"samples in each condition; {len(genuine)} have in {condition}"
            )
        people |= set(genuine)
        trials[condition] = (
            np.concatenate(list(genuine.values())),
            np.concatenate(list(impostor.values())),
        )
    tables = {
        "prototype": table_from_scores(
            "prototype",
            trials,
            people=len(people),
            enroll_samples=enroll_samples,
            score="cosine" if cohort is None else cohort.method,
        )
    }
    if seconds is not None and groups is not None:
        held_out = held_out_figures(
            conditions,
            seconds,
            table=tables["prototype"],
            enroll_samples=enroll_samples,
            groups=groups,
            cohort=cohort,
            cohort_people=cohort_people,
        )
        if held_out is not None:
            tables["prototype"] = dataclasses.replace(tables["prototype"], held_out=held_out)
    if generator is not None:
        tables["codeword"] = _codeword_table(conditions, np.asarray(generator, np.uint8), seed)
    return Calibration(data, tables)


HELD_OUT_MIN_SECONDS = 2.0
"""The held-out FRR counts genuine test clips of at least this many seconds: what a user says
to the app (a name, a sentence), not the one-word clips some sources hold."""


def held_out_figures(
    conditions: Mapping[str, Mapping[str, np.ndarray]],
    seconds: Mapping[str, Mapping[str, np.ndarray]],
    *,
    table: Table,
    enroll_samples: int,
    groups: Mapping[str, str],
    cohort: Cohort | None = None,
    cohort_people: np.ndarray | None = None,
    min_seconds: float = HELD_OUT_MIN_SECONDS,
) -> HeldOut | None:
    """Leave-one-chain-out figures of ``table``'s rows: for each recording chain with several
    people, the thresholds are fitted as :func:`measure` fits them on the other chains alone
    (their cohort vectors only), then applied to the held-out chain: its impostor pairs (within
    the chain) give the FAR, its genuine clips of at least ``min_seconds`` the FRR. The chain's
    vectors leave the cohort for its fold (AS-norm's ``top_k`` then at most half of what is
    left, as :func:`uvexport.calibrate.calibrate_vectors` chooses it). Counts are pooled over the
    chains; the range is the lowest and highest single chain; a chain whose fold leaves too
    small a cohort to normalise is skipped. ``None`` when fewer than two chains can be held out
    (nothing to hold out)."""
    chains = sorted({groups[p] for p in groups})
    members = {c: {p for p in groups if groups[p] == c} for c in chains}
    testable = [c for c in chains if len(members[c]) >= 2]
    if len(testable) < 2:
        return None
    fars = [row.far for row in table.rows]
    pooled = {far: [0, 0, 0, 0] for far in fars}  # accepts, impostors, rejects, genuine
    per_chain: dict[float, list[tuple[float | None, float | None]]] = {far: [] for far in fars}
    folds = 0
    for chain in testable:
        options: dict[str, Any] = {"cohort": cohort, "cohort_people": cohort_people,
                                   "groups": groups}  # fmt: skip
        if cohort is not None and cohort_people is not None:  # the chain is in no cohort
            keep = np.array([groups.get(p) != chain for p in cohort_people], dtype=bool)
            options["cohort_people"] = cohort_people[keep]
            options["cohort"] = Cohort(
                cohort.vectors[keep], max(2, min(cohort.top_k, int(keep.sum()) // 2)), cohort.method
            )
        fit, test, long_enough = {}, {}, {}
        try:  # the other chains' cohort may be too small to normalise: no fold
            for condition, vectors in conditions.items():
                inside = {p: v for p, v in vectors.items() if p in members[chain]}
                outside = {p: v for p, v in vectors.items() if p not in members[chain]}
                _, genuine, impostor = enrollment_trials(outside, enroll_samples, **options)
                if len(genuine) >= 2 and sum(len(i) for i in impostor.values()):
                    fit[condition] = (
                        np.concatenate(list(genuine.values())),
                        np.concatenate(list(impostor.values())),
                    )
                _, genuine, impostor = enrollment_trials(inside, enroll_samples, **options)
                if genuine:
                    kept = [
                        scores[np.asarray(seconds[condition][p])[enroll_samples:] >= min_seconds]
                        for p, scores in genuine.items()
                    ]
                    test[condition] = np.concatenate(list(impostor.values()))
                    long_enough[condition] = np.concatenate(kept)
        except ValueError:
            continue
        if not fit or not test:
            continue
        try:
            fitted = table_from_scores(
                "prototype", fit, people=2, enroll_samples=enroll_samples, score=table.score,
                grid=fars,
            )  # fmt: skip
        except ValueError:  # the other chains resolve no FAR of the table
            continue
        folds += 1
        impostors = np.concatenate(list(test.values()))
        genuine_long = np.concatenate(list(long_enough.values()))
        for row in fitted.rows:
            accepts = int(np.count_nonzero(impostors >= row.threshold))
            rejects = int(np.count_nonzero(genuine_long < row.threshold))
            counts = pooled[row.far]
            counts[0] += accepts
            counts[1] += impostors.size
            counts[2] += rejects
            counts[3] += genuine_long.size
            per_chain[row.far].append((
                accepts / impostors.size if impostors.size else None,
                rejects / genuine_long.size if genuine_long.size else None,
            ))  # fmt: skip
    rows = []
    for far in fars:
        accepts, impostors, rejects, genuine = pooled[far]
        fars_seen = [f for f, _ in per_chain[far] if f is not None]
        frrs_seen = [r for _, r in per_chain[far] if r is not None]
        if len(per_chain[far]) < 2 or not impostors or not genuine:
            continue
        rows.append(HeldOutRow(far, accepts, impostors, min(fars_seen), max(fars_seen),
                               rejects, genuine, min(frrs_seen), max(frrs_seen)))  # fmt: skip
    if not rows or folds < 2:
        return None
    return HeldOut(folds, float(min_seconds), tuple(rows))


def _codeword_table(
    conditions: Mapping[str, Mapping[str, np.ndarray]], generator: np.ndarray, seed: int
) -> Table:
    from .codeword import bipolar, encode

    rng = np.random.default_rng(seed)
    people = max(sum(1 for v in vectors.values() if len(v)) for vectors in conditions.values())
    messages = rng.integers(
        0, 2, size=(people * CODEWORDS_PER_PERSON, generator.shape[0]), dtype=np.uint8
    )
    codewords = np.stack([bipolar(encode(m, generator)) for m in messages])
    trials = {}
    for condition, vectors in conditions.items():
        outputs = np.concatenate([v for v in vectors.values() if len(v)])
        trials[condition] = (np.zeros(0), codeword_scores(codewords, outputs))
    return table_from_scores("codeword", trials, people=people, enroll_samples=0, score="codeword")


ADVICE_P = 0.05
"""Re-record advice when the user's own samples fall below their threshold more often than the
table's FRR makes likely: a binomial tail below this."""


def binomial_tail(trials: int, at_least: int, rate: float) -> float:
    """``P(X >= at_least)`` for ``X ~ Binomial(trials, rate)``, summed in log space (the same
    terms in every implementation: log-factorials as running sums of ``log i``)."""
    if at_least <= 0:
        return 1.0
    if at_least > trials or rate <= 0.0:
        return 0.0
    if rate >= 1.0:
        return 1.0
    log_factorial = [0.0]
    for i in range(1, trials + 1):
        log_factorial.append(log_factorial[-1] + math.log(i))
    total = 0.0
    for k in range(at_least, trials + 1):
        log_choose = log_factorial[trials] - log_factorial[k] - log_factorial[trials - k]
        total += math.exp(log_choose + k * math.log(rate) + (trials - k) * math.log1p(-rate))
    return min(total, 1.0)


def rerecord_advised(own_rejected: int, samples: int, target_tpr: float, row: Row | None) -> bool:
    """Whether enrollment advises re-recording: the threshold is calibrated (``row``), it
    rejects more of the user's own leave-one-out scores than ``max(floor(n(1 − q)), 1)``, and,
    when the row states an FRR, that many rejections are unlikely at that FRR (binomial tail
    below :data:`ADVICE_P`): a user is not told their samples vary too much when the table's
    FRR expects as many rejections."""
    if row is None:
        return False
    allowed = max(math.floor(samples * (1.0 - target_tpr) + 1e-9), 1)
    if own_rejected <= allowed:
        return False
    return row.frr is None or binomial_tail(samples, own_rejected, row.frr) < ADVICE_P


def user_threshold(
    warmup_scores: np.ndarray,
    target_tpr: float,
    calibration: Calibration | None,
    mode: str,
    far: float | None,
) -> tuple[float, Row | None]:
    """A user's threshold and the calibration row behind it (``None``: the warm-up rule alone).

    With a table for ``mode`` and a ``far``: the table's threshold at ``far`` when the table has
    genuine trials (it states the FRR there; the warm-up would only add false rejects), else the
    warm-up rule at ``target_tpr`` floored at it. Otherwise the warm-up rule alone."""
    warmup = warmup_threshold(warmup_scores, target_tpr)
    calibrated = floor(calibration, mode, far)
    if calibrated is None:
        return warmup, None
    threshold, row = calibrated
    assert calibration is not None
    if calibration.tables[mode].states_frr:
        return threshold, row
    return max(warmup, threshold), row


def floor(
    calibration: Calibration | None, mode: str, far: float | None
) -> tuple[float, Row] | None:
    """The calibrated threshold for ``mode`` at ``far`` and its row, or ``None`` when the bundle
    has no calibration for the mode or ``far`` is ``None`` (the warm-up rule alone)."""
    if far is None or calibration is None or mode not in calibration.tables:
        return None
    row = calibration.tables[mode].row_for(far)
    return row.threshold, row
