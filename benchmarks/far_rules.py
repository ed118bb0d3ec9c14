"""Which decision rule? Several threshold rules side by side, leave-one-source-out.

The protocol is :mod:`far_generalisation`'s, with its functions: the same embeddings (and
``--cache``), the same folds (each source of at least ``MIN_FOLD_SPEAKERS`` speakers held out in
turn), the bundle calibrated on every other source by :func:`uvexport.calibrate.calibrate_vectors`,
and each test speaker enrolled on their first ``--enroll`` vectors with the SDK's rule. Each
fold's trial scores (AS-norm against the fold's cohort) are computed once, on the calibration
sources (as :func:`uvsdk.measurement.measure` computes them) and on the held-out source, and every
rule is evaluated on the same scores:

- ``global``: today's rule, :func:`uvsdk.calibration.user_threshold` on the calibrated table
  (one threshold, the worst calibration condition deciding); its figures are
  ``far_generalisation.py``'s;
- ``buckets``: one threshold per duration bucket of the test clip (``--buckets`` edges, in
  seconds), each the worst over the calibration conditions of the bucket's calibration trials
  that resolve the FAR (a bucket none resolves keeps the global threshold);
- ``qmf``: a duration quality measure function, the score plus ``w × ln(seconds)`` with ``w``
  fitted by logistic regression on the calibration trials only, then one table as ``global``;
- ``chain``: ``global`` with the threshold raised to the worst calibration **source** (its own
  same-chain impostor trials) and condition that resolves the FAR: the stated FAR then holds on
  every chain calibrated on, not only pooled over them;
- ``oracle`` -- **not a rule, a bound**: per fold and condition, the one threshold that gives
  an observed FAR of 2 × ``--far`` on the held-out trials themselves. No rule calibrated
  elsewhere can do better at that FAR.

A clip's duration is its seconds as the embeddings cache records them (the audio the SDK is
given, before it trims silence). A bandwidth rule (a threshold per narrow-/wideband test clip,
by the share of energy above 3.8 kHz) was also tried outside the repository and showed nothing:
pooled FAR 0.0116, FRR 0.382, worst ratio 9.03 against ``global``'s 0.0124, 0.368, 9.13 (on the
58 speakers of the real-speech corpus before its Hedgewars revision 2).

Per rule: pooled FAR and FRR, FRR on clips of at least 2 s, the fold-conditions whose observed
FAR is at most 2 × stated among those that resolve it, the worst ratio, and owner acceptance
(the share of speaker-conditions with at least 95 % of their fresh clips accepted, and the
median acceptance). ``--detail`` prints every fold and condition. Writes ``report.json`` and
``rules.png`` (FRR on clips >= 2 s against the worst FAR ratio, per rule) under ``--out``.

    python benchmarks/far_rules.py --speakers real-speech/speakers --out eval/ \\
        [--bundle BUNDLE.uvb] [--cache emb.npz] [--buckets 1,2,4] [--detail]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from far_generalisation import (
    LONG_CLIP_SECONDS,
    TARGET_TPR,
    argument_parser,
    chains,
    embed,
    source_folds,
    source_of,
    split,
)

from uvexport.calibrate import (
    DEFAULT_COHORT_SIZE,
    DEFAULT_SCORE_NORM,
    Calibrated,
    build_cohort,
    calibrate_vectors,
    print_progress,
)
from uvsdk import Bundle
from uvsdk.calibration import DEFAULT_ENROLL_SAMPLES, MIN_FALSE_ACCEPTS, user_threshold
from uvsdk.cohort import Cohort
from uvsdk.measurement import enrollment_trials, far_threshold, table_from_scores
from uvsdk.verifier import default_bundle_path

OWNER_TARGET = 0.95
"""An owner is accepted when at least this share of their fresh clips is."""
ORACLE_FAR_FACTOR = 2.0
"""The oracle's observed FAR: the target's bound, 2 × the stated FAR."""
SHORTEST_SECONDS = 0.1
"""Durations are floored here before their logarithm."""


@dataclass
class Trials:
    """One condition's trials: scores, the seconds of the test clip of each, whose template
    each genuine trial was scored against, and each enrolled person's warm-up scores."""

    genuine: np.ndarray
    impostor: np.ndarray
    genuine_seconds: np.ndarray
    impostor_seconds: np.ndarray
    owners: np.ndarray
    impostor_owners: np.ndarray
    warmup: dict[str, np.ndarray]
    #: whose clip each impostor trial is
    impostor_people: np.ndarray


def condition_trials(
    vectors: Mapping[str, np.ndarray],
    seconds: Mapping[str, np.ndarray],
    enroll: int,
    cohort: Cohort,
    cohort_people: np.ndarray | None = None,
    centre: Mapping[str, str] | None = None,
) -> Trials | None:
    """The trials of one condition, in :func:`uvsdk.measurement.enrollment_trials`' order
    (``centre``: centred by leave-out chain means, as ``uvexport calibrate --centre``);
    ``None`` when fewer than 2 people are enrolled."""
    warmup, genuine, impostor = enrollment_trials(
        vectors, enroll, cohort=cohort, cohort_people=cohort_people, centre=centre
    )
    if len(genuine) < 2:
        return None
    names = [name for name, v in vectors.items() if len(v)]
    impostor_seconds = [np.concatenate([seconds[o] for o in names if o != n]) for n in genuine]
    impostor_people = [
        np.concatenate([np.repeat(o, len(seconds[o])) for o in names if o != n]) for n in genuine
    ]
    return Trials(
        genuine=np.concatenate(list(genuine.values())),
        impostor=np.concatenate(list(impostor.values())),
        genuine_seconds=np.concatenate([seconds[name][enroll:] for name in genuine]),
        impostor_seconds=np.concatenate(impostor_seconds),
        owners=np.repeat(list(genuine), [scores.size for scores in genuine.values()]),
        impostor_owners=np.repeat(list(impostor), [scores.size for scores in impostor.values()]),
        warmup=warmup,
        impostor_people=np.concatenate(impostor_people),
    )


def fold_trials(
    calibration_vectors: dict,
    calibration_seconds: dict,
    test_vectors: dict,
    test_seconds: dict,
    calibrated: Calibrated,
    enroll: int,
) -> tuple[dict[str, Trials], dict[str, Trials]]:
    """The calibration trials (the conditions and cohort :func:`calibrate_vectors` used, each
    person's own vectors out of their statistics, as :func:`uvsdk.measurement.measure`) and the
    held-out trials (the SDK's user, not in the cohort); raw cosines when ``calibrated`` has no
    cohort."""
    table = calibrated.calibration.tables["prototype"]
    usable = {condition: calibration_vectors[condition] for condition in table.conditions}
    cohort = calibrated.normaliser()  # None: raw cosines (score_norm "none")
    cohort_people = None
    if cohort is not None:
        cohort_vectors, cohort_people = build_cohort(usable, DEFAULT_COHORT_SIZE)
        if cohort_vectors.astype("<f4").tobytes() != calibrated.cohort:
            raise SystemExit("the cohort rebuilt here is not the one calibrate_vectors shipped")
    calibration = {
        condition: condition_trials(
            by_person,
            calibration_seconds[condition],
            DEFAULT_ENROLL_SAMPLES,
            cohort,
            cohort_people,
        )
        for condition, by_person in usable.items()
    }
    test = {
        condition: condition_trials(by_person, test_seconds[condition], enroll, cohort)
        for condition, by_person in test_vectors.items()
    }
    return (
        {c: t for c, t in calibration.items() if t is not None},
        {c: t for c, t in test.items() if t is not None},
    )


Thresholds = Callable[[Trials], tuple[np.ndarray, np.ndarray]]
"""A rule fitted on a fold: the thresholds of a test condition's genuine and impostor trials."""


def fit_global(calibrated: Calibrated, far: float) -> Thresholds:
    """Today's rule: each user's threshold by :func:`uvsdk.calibration.user_threshold`."""

    def thresholds(trials: Trials) -> tuple[np.ndarray, np.ndarray]:
        per_person = {
            person: user_threshold(warm, TARGET_TPR, calibrated.calibration, "prototype", far)[0]
            for person, warm in trials.warmup.items()
        }
        return tuple(  # type: ignore[return-value]
            np.array([per_person[owner] for owner in owners])
            for owners in (trials.owners, trials.impostor_owners)
        )

    return thresholds


def fit_buckets(
    calibration: dict[str, Trials], calibrated: Calibrated, far: float, edges: list[float]
) -> Thresholds:
    """One threshold per duration bucket: the worst calibration condition that resolves it."""
    fallback = calibrated.calibration.tables["prototype"].row_for(far).threshold
    per_bucket: dict[int, float] = {}
    for trials in calibration.values():
        buckets = np.searchsorted(edges, trials.impostor_seconds, side="right")
        for bucket in np.unique(buckets):
            impostor = trials.impostor[buckets == bucket]
            if far * impostor.size >= MIN_FALSE_ACCEPTS - 1e-9:
                threshold = far_threshold(impostor, far)
                per_bucket[int(bucket)] = max(per_bucket.get(int(bucket), -math.inf), threshold)

    def thresholds(trials: Trials) -> tuple[np.ndarray, np.ndarray]:
        return tuple(  # type: ignore[return-value]
            np.array([per_bucket.get(int(b), fallback) for b in buckets])
            for buckets in (
                np.searchsorted(edges, trials.genuine_seconds, side="right"),
                np.searchsorted(edges, trials.impostor_seconds, side="right"),
            )
        )

    return thresholds


def fit_chain(calibration: dict[str, Trials], calibrated: Calibrated, far: float) -> Thresholds:
    """The worst chain deciding: each user's threshold as ``global``'s, raised to the highest
    of the thresholds at ``far`` over each calibration source's own (same-chain) impostor trials
    in each condition, among those that resolve it, so that the stated FAR holds on every chain
    the calibration saw, not only pooled over them."""

    def sources_of(people: np.ndarray) -> np.ndarray:  # each source named once per person
        names, index = np.unique(people, return_inverse=True)
        return np.array([source_of(str(name)) for name in names])[index]

    worst = -math.inf
    for trials in calibration.values():
        owner_chain = sources_of(trials.impostor_owners)
        impostor_chain = sources_of(trials.impostor_people)
        for chain in np.unique(owner_chain):
            impostor = trials.impostor[(owner_chain == chain) & (impostor_chain == chain)]
            if far * impostor.size >= MIN_FALSE_ACCEPTS - 1e-9:
                worst = max(worst, far_threshold(impostor, far))
    per_user = fit_global(calibrated, far)

    def thresholds(trials: Trials) -> tuple[np.ndarray, np.ndarray]:
        genuine, impostor = per_user(trials)
        return np.maximum(genuine, worst), np.maximum(impostor, worst)

    return thresholds


def log_seconds(seconds: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(seconds, SHORTEST_SECONDS))


def duration_weight(calibration: dict[str, Trials], iterations: int = 30) -> float:
    """``w`` of the quality measure ``score + w × ln(seconds)``: class-balanced logistic
    regression (Newton's method) of genuine against impostor on ``[score, ln seconds, 1]``."""
    features, labels = [], []
    for trials in calibration.values():
        for scores, seconds, label in (
            (trials.genuine, trials.genuine_seconds, 1.0),
            (trials.impostor, trials.impostor_seconds, 0.0),
        ):
            features.append(np.stack([scores, log_seconds(seconds), np.ones(scores.size)], 1))
            labels.append(np.full(scores.size, label))
    x, y = np.concatenate(features), np.concatenate(labels)
    weights = np.where(y == 1, 0.5 / y.sum(), 0.5 / (1 - y).sum())
    beta = np.zeros(3)
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-x @ beta))
        hessian = (x * (weights * p * (1 - p))[:, None]).T @ x + 1e-9 * np.eye(3)
        beta -= np.linalg.solve(hessian, x.T @ (weights * (p - y)))
    return float(beta[1] / beta[0])


def with_quality(trials: Trials, weight: float) -> Trials:
    """``trials`` with every score plus ``weight × ln(seconds)``."""
    return Trials(
        trials.genuine + weight * log_seconds(trials.genuine_seconds),
        trials.impostor + weight * log_seconds(trials.impostor_seconds),
        trials.genuine_seconds,
        trials.impostor_seconds,
        trials.owners,
        trials.impostor_owners,
        trials.warmup,
        trials.impostor_people,
    )


def fit_qmf(calibration: dict[str, Trials], far: float) -> tuple[Thresholds, float]:
    """The quality-measure rule: one table (the SDK's) on the shifted calibration scores."""
    weight = duration_weight(calibration)
    shifted = {c: with_quality(t, weight) for c, t in calibration.items()}
    table = table_from_scores(
        "prototype",
        {c: (t.genuine, t.impostor) for c, t in shifted.items()},
        people=0,
        enroll_samples=DEFAULT_ENROLL_SAMPLES,
        score="as-norm+qmf",
    )
    threshold = table.row_for(far).threshold

    def thresholds(trials: Trials) -> tuple[np.ndarray, np.ndarray]:
        # accept iff score + w ln(s) >= threshold, i.e. score >= threshold - w ln(s)
        return (
            threshold - weight * log_seconds(trials.genuine_seconds),
            threshold - weight * log_seconds(trials.impostor_seconds),
        )

    return thresholds, weight


def rule_row(trials: Trials, thresholds: Thresholds, stated_far: float) -> dict:
    """One rule's figures on one fold-condition, and each owner's acceptance."""
    genuine_threshold, impostor_threshold = thresholds(trials)
    rejected = trials.genuine < genuine_threshold
    long = trials.genuine_seconds >= LONG_CLIP_SECONDS
    false_accepts = int(np.sum(trials.impostor >= impostor_threshold))
    return {
        "impostor": int(trials.impostor.size),
        "genuine": int(trials.genuine.size),
        "false_accepts": false_accepts,
        "false_rejects": int(rejected.sum()),
        "long_genuine": int(long.sum()),
        "long_false_rejects": int(rejected[long].sum()),
        "observed_far": false_accepts / trials.impostor.size,
        "ratio": false_accepts / trials.impostor.size / stated_far,
        "resolvable": stated_far * trials.impostor.size >= MIN_FALSE_ACCEPTS,
        "owner_acceptance": [
            float(np.mean(~rejected[trials.owners == person])) for person in trials.warmup
        ],
    }


def oracle_row(trials: Trials, far: float) -> dict:
    """The bound: one threshold at observed FAR ``ORACLE_FAR_FACTOR × far`` on these trials."""
    threshold = far_threshold(trials.impostor, ORACLE_FAR_FACTOR * far)
    rejected = trials.genuine < threshold
    long = trials.genuine_seconds >= LONG_CLIP_SECONDS
    return {
        "observed_far": float(np.mean(trials.impostor >= threshold)),
        "genuine": int(trials.genuine.size),
        "false_rejects": int(rejected.sum()),
        "long_genuine": int(long.sum()),
        "long_false_rejects": int(rejected[long].sum()),
    }


def evaluate_fold(
    calibration: dict[str, Trials],
    test: dict[str, Trials],
    calibrated: Calibrated,
    args: argparse.Namespace,
) -> tuple[dict[str, list[dict]], dict]:
    """Every rule's rows (one per test condition) on one fold, and what was fitted."""
    far = args.far
    stated = calibrated.calibration.tables["prototype"].row_for(far).far
    qmf, weight = fit_qmf(calibration, far)
    rules = {
        "global": fit_global(calibrated, far),
        "buckets": fit_buckets(calibration, calibrated, far, args.buckets),
        "qmf": qmf,
        "chain": fit_chain(calibration, calibrated, far),
    }
    return rule_rows(test, rules, stated, far), {"qmf_weight": weight, "stated_far": stated}


def rule_rows(
    test: dict[str, Trials], rules: dict[str, Thresholds], stated_far: float, far: float
) -> dict[str, list[dict]]:
    """Each rule's rows (one per test condition), then the oracle's."""
    rows: dict[str, list[dict]] = {name: [] for name in (*rules, "oracle")}
    for condition, trials in test.items():
        for name, thresholds in rules.items():
            rows[name].append({"condition": condition, **rule_row(trials, thresholds, stated_far)})
        rows["oracle"].append({"condition": condition, **oracle_row(trials, far)})
    return rows


def calibrated_fold(
    vectors: dict,
    seconds: dict,
    held_out: set[str],
    args: argparse.Namespace,
    score_norm: str = DEFAULT_SCORE_NORM,
) -> tuple[Calibrated, dict[str, Trials], dict[str, Trials]]:
    """One fold: the calibration on everyone but ``held_out`` (as ``uvexport calibrate``, with
    ``--impostors``' pairs) and :func:`fold_trials`' calibration and held-out trials."""
    rest = {p for by_person in vectors.values() for p in by_person} - held_out
    calibration_vectors = split(vectors, rest)
    calibrated = calibrate_vectors(
        calibration_vectors,
        data="all but the held-out source",
        groups=chains(rest, args.impostors),
        score_norm=score_norm,
    )
    calibration, test = fold_trials(
        calibration_vectors,
        split(seconds, rest),
        split(vectors, held_out),
        split(seconds, held_out),
        calibrated,
        args.enroll,
    )
    return calibrated, calibration, test


def fold_done(number: int, folds: list[str], started: float) -> None:
    """The progress line after fold ``number`` (from 1) of ``folds``, with an ETA."""
    elapsed = time.perf_counter() - started
    print_progress(
        f"fold {number}/{len(folds)} ({folds[number - 1]}) done ({elapsed:.0f} s, about "
        f"{elapsed / number * (len(folds) - number):.0f} s left)"
    )


def pooled(rows: list[dict]) -> dict:
    """A rule's figures pooled over every fold and condition."""
    resolvable = [r for r in rows if r.get("resolvable")]
    long = sum(r["long_genuine"] for r in rows)
    summary = {
        "frr": sum(r["false_rejects"] for r in rows) / sum(r["genuine"] for r in rows),
        "frr_long": sum(r["long_false_rejects"] for r in rows) / long if long else None,
        "long_genuine": long,
    }
    if "false_accepts" not in rows[0]:
        return summary  # the oracle: no FAR of its own to state
    owners = np.array([a for r in rows for a in r["owner_acceptance"]])
    summary.update(
        {
            "far": sum(r["false_accepts"] for r in rows) / sum(r["impostor"] for r in rows),
            "within_2x": sum(r["ratio"] <= 2 for r in resolvable),
            "resolvable_rows": len(resolvable),
            "worst_ratio": max((r["ratio"] for r in resolvable), default=None),
            "owners_accepted": float(np.mean(owners >= OWNER_TARGET)),
            "owner_median": float(np.median(owners)),
            "owner_conditions": int(owners.size),
        }
    )
    return summary


def print_summary(name: str, summary: dict) -> None:
    long = summary["frr_long"]
    long_text = "  n/a" if long is None else f"{long:.3f}"
    if "far" not in summary:
        print(
            f"{name:8s}     -  {summary['frr']:.3f}  {long_text}      -     -      -      -"
            "   (not a rule: one threshold per fold-condition chosen on its own test trials)"
        )
        return
    worst = summary["worst_ratio"]
    print(
        f"{name:8s} {summary['far']:.4f}  {summary['frr']:.3f}  {long_text}  "
        f"{summary['within_2x']:3d}/{summary['resolvable_rows']:<3d} "
        f"{math.nan if worst is None else worst:5.2f}  {summary['owners_accepted']:.3f} "
        f"({summary['owner_median']:.3f})"
    )


def print_detail(fold: str, rows: dict[str, list[dict]]) -> None:
    for name, rule_rows in rows.items():
        for row in rule_rows:
            long = row["long_false_rejects"] / row["long_genuine"] if row["long_genuine"] else None
            ratio = f"{row['ratio']:6.2f}" if "ratio" in row else "     -"
            mark = "" if row.get("resolvable", True) else "*"
            print(
                f"{fold:11s} {row['condition']:15s} {name:8s} FAR {row['observed_far']:.4f} "
                f"{ratio}{mark:1s} FRR {row['false_rejects'] / row['genuine']:.3f} "
                f">=2s {'  n/a' if long is None else f'{long:.3f}'} ({row['long_genuine']})"
            )


def plot(report: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4.5))
    for name, summary in report["summary"].items():
        if summary["frr_long"] is None:
            continue
        if name == "oracle":
            axes.axhline(summary["frr_long"], color="grey", ls=":", label="oracle (a bound)")
            continue
        axes.scatter(summary["worst_ratio"] or math.nan, summary["frr_long"], s=40, label=name)
    axes.axvline(2, color="k", lw=1, ls="--", label="target: ratio <= 2")
    axes.axhline(0.05, color="k", lw=1, label="target: FRR <= 5 %")
    axes.set_xlabel("worst observed / stated FAR over resolvable fold-conditions")
    axes.set_ylabel(f"FRR on clips >= {LONG_CLIP_SECONDS:g} s (pooled)")
    axes.set_title(f"decision rules, leave-one-source-out, --far {report['far']:g}")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out / "rules.png", dpi=110)
    plt.close(figure)


def parse_arguments() -> argparse.Namespace:
    parser = argument_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--buckets", default="1,2,4", help="duration bucket edges, seconds")
    parser.add_argument("--detail", action="store_true", help="print every fold and condition")
    args = parser.parse_args()
    try:
        args.buckets = sorted(float(edge) for edge in args.buckets.split(","))
    except ValueError:
        parser.error(f"--buckets: comma-separated seconds, not {args.buckets!r}")
    return args


def main() -> int:
    args = parse_arguments()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    vectors, seconds = embed(args, Bundle(args.bundle or default_bundle_path()))
    _, sources, folds = source_folds(vectors)
    report: dict = {"far": args.far, "enroll": args.enroll, "buckets": args.buckets, "folds": []}
    for number, fold in enumerate(folds, 1):
        calibrated, calibration, test = calibrated_fold(vectors, seconds, sources[fold], args)
        rows, fitted = evaluate_fold(calibration, test, calibrated, args)
        report["folds"].append({"source": fold, **fitted, "rules": rows})
        if args.detail:
            print_detail(fold, rows)
        fold_done(number, folds, started)
    print(file=sys.stderr)
    names = report["folds"][0]["rules"]
    report["summary"] = {
        name: pooled([row for fold in report["folds"] for row in fold["rules"][name]])
        for name in names
    }
    print(f"rule      FAR     FRR   FRR>=2s  <=2x    worst  owner>=95% (median)  --far {args.far}")
    for name, summary in report["summary"].items():
        print_summary(name, summary)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(report, args.out)
    print(f"wrote {args.out / 'report.json'}, rules.png ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
