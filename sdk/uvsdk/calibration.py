"""Calibrated thresholds: what a bundle's impostors score, measured on people it never saw,
under every recording condition the calibration simulated.

The warm-up rule (FedUV, Sec. 4.2, Algorithm 2) sets a user's threshold from their own enrollment
samples only: with 5 samples and q = 0.95 it is the lowest of their leave-one-out scores, an
extreme statistic that says nothing of impostors and that a consistent owner's next attempt often
misses. A bundle can carry a *calibration*: on a calibration set of real people, each person is
enrolled exactly as the SDK enrolls (:func:`uvsdk.measurement.measure`), their other samples are genuine trials and
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

A row's threshold is used no lower than :data:`THRESHOLD_FLOOR` (chance), which no manifest can
lower: an unsigned manifest whose rows say −1 would otherwise enroll a user who accepts everyone
(issue 46). The template records the calibration's digest, and verification refuses a template
whose calibration is not the bundle's (:mod:`uvsdk.verifier`), so a planted threshold does not
outlive the bundle that planted it.

A row exists for a FAR target only when, in every condition, ``far × impostor_trials >=``
:data:`MIN_FALSE_ACCEPTS`: a FAR the trials cannot resolve is not stated. A requested FAR between
rows takes the stricter row (the largest tabled FAR not above it).
"""

from __future__ import annotations

import decimal
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .cohort import SCORE_RULES, Cohort
from .errors import BundleError, CalibrationError
from .scoring import (
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
TABLE_SCORES = {"prototype": tuple(SCORE_RULES), "codeword": ("codeword",)}
"""What a table's thresholds are on: a score rule's scores (prototype), codeword scores."""
SCORE_RANGES = {
    **{name: rule.threshold_range for name, rule in SCORE_RULES.items()},
    "codeword": (-1.0, 1.0 + 1e-6),
}
"""The thresholds a table of each score may hold."""
THRESHOLD_FLOOR = 0.0
"""The lowest calibrated threshold a user gets, whatever the manifest says (docs/spec.md §4.3):
chance on every score a table can hold. A codeword score of 0 is what an output unrelated to the
codeword scores on average; a cosine of 0 says nothing either way; an S-norm score of 0 is the
cohort's mean impostor score, an AS-norm one the mean of the nearest ``top_k`` impostors. Every row
of the shipped bundle is above it (its 50 % row is 0.41): it changes no honest threshold there, and
bounds what a manifest edit can do without the signing key to "accept at chance", not "accept all"."""
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


def normalised_leave_one_out(
    vectors: np.ndarray, cohort: Cohort, exclude: np.ndarray | None = None
) -> np.ndarray:
    """The leave-one-out scores (:func:`uvsdk.scoring.leave_one_out_scores`), each normalised by
    the cohort's rule with the statistics of its own left-out prototype and of its sample."""
    units = np.asarray(vectors, dtype=np.float64)
    units = units / np.maximum(np.linalg.norm(units, axis=1, keepdims=True), 1e-12)
    others = units.sum(axis=0, keepdims=True) - units
    others = others / np.maximum(np.linalg.norm(others, axis=1, keepdims=True), 1e-12)
    scores = np.sum(others * units, axis=1)
    mask = None if exclude is None else np.repeat(exclude, len(units), axis=0)
    return cohort.rule.normalise(
        scores, cohort.statistics(others, mask), cohort.statistics(units, mask)
    )


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

    With a table for ``mode`` and a ``far``: the table's threshold at ``far``, never below
    :data:`THRESHOLD_FLOOR`, when the table has genuine trials (it states the FRR there; the
    warm-up would only add false rejects), else the warm-up rule at ``target_tpr`` floored at it.
    Otherwise the warm-up rule alone (docs/spec.md §4.3)."""
    warmup = warmup_threshold(warmup_scores, target_tpr)
    calibrated = floor(calibration, mode, far)
    if calibrated is None:
        return warmup, None
    threshold, row = calibrated
    threshold = max(threshold, THRESHOLD_FLOOR)
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
