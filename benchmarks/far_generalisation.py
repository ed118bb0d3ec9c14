"""Does the FAR a bundle states hold where it was not calibrated? Leave-one-source-out, under
every simulated recording condition.

The speakers come from several sources (``uvtrain data real-speech`` writes one folder per
speaker, named ``<source>-<speaker>``). Each source with at least :data:`MIN_FOLD_SPEAKERS`
speakers is a fold in turn: the bundle is calibrated on **every other source** exactly as
``uvexport calibrate`` calibrates (:func:`uvexport.calibrate.calibrate_vectors`: its cohort,
AS-norm, the worst condition deciding), and tested on the held-out source, which neither the
thresholds nor the cohort have seen. Smaller sources are only ever calibrated on (they are named).

Every clip is embedded once per condition (:func:`uvexport.calibrate.embed_conditions`: decoded as
the SDK decodes, turned into each condition of :mod:`uvexport.conditions`, ``long`` utterances
joined from a speaker's consecutive clips, embedded by ``uvsdk.Verifier.embed``). In the test
source, in each condition, each speaker is enrolled on their first ``--enroll`` vectors with the
SDK's own rule (:func:`uvsdk.calibration.user_threshold` on AS-norm scores against the fold's
cohort); their other vectors are genuine trials, every vector of every other test speaker an
impostor trial. Printed for every fold and condition, and pooled:

- the stated FAR (the row the SDK uses for ``--far``) and the observed FAR on the held-out source,
  and their ratio (the target: at most 2);
- the FRR, and the FRR on test clips of at least 2 s (target: at most 5 %);
- the EER of the normalised and of the raw cosine scores (no threshold);
- the rule before AS-norm (raw cosines, calibrated on clean clips only, the threshold
  ``max(warm-up, calibrated)``): its FAR and FRR, for comparison.

Writes ``report.json``, ``far.png`` (observed against stated FAR per fold and condition) and
``frr.png`` under ``--out``; ``--cache FILE.npz`` keeps the embeddings for the next run.

    python benchmarks/far_generalisation.py --speakers real-speech/speakers --out eval/ \\
        [--bundle BUNDLE.uvb] [--conditions clean,telephone-gsm,long] [--cache emb.npz]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from uvexport.calibrate import (
    DEFAULT_CONDITIONS,
    MAX_SAMPLES_PER_PERSON,
    audio_conditions,
    calibrate_vectors,
    embed_conditions,
    people_folders,
    print_progress,
)
from uvsdk import Bundle
from uvsdk.calibration import DEFAULT_FAR, enrollment_trials, user_threshold
from uvsdk.cohort import Cohort
from uvsdk.scoring import warmup_threshold
from uvsdk.verifier import default_bundle_path
from uvtrain.evaluation import equal_error_rate

MIN_FOLD_SPEAKERS = 3
"""A source is a fold when it has at least this many speakers (impostor pairs need several)."""
LONG_CLIP_SECONDS = 2.0
"""The FRR target is stated on test clips of at least this long."""
TARGET_TPR = 0.95


def source_of(person: str) -> str:
    """The source of a ``<source>-<speaker>`` folder name."""
    return person.split("-", 1)[0]


def embed(args: argparse.Namespace, bundle: Bundle) -> tuple[dict, dict]:
    """``vectors[condition][person]`` and ``seconds[condition][person]`` (``--cache`` keeps
    them: the same cache ``uvexport calibrate --cache`` reads and writes)."""
    conditions = audio_conditions(args.conditions.split(",")) if args.conditions else None
    embedded = embed_conditions(
        bundle,
        people_folders(args.speakers, "audio"),
        conditions or DEFAULT_CONDITIONS,
        max_samples=args.max_samples,
        progress=print_progress,
        label="embedding",
        cache=args.cache,
    )
    print(file=sys.stderr)
    return embedded.vectors, embedded.seconds


def split(
    table: Mapping[str, Mapping[str, np.ndarray]], keep: set[str]
) -> dict[str, dict[str, np.ndarray]]:
    return {c: {p: v for p, v in by.items() if p in keep} for c, by in table.items()}


def old_rule_thresholds(calibration_vectors: dict, far: float) -> float:
    """The rule before AS-norm: raw cosines calibrated on clean clips only."""
    clean = {"clean": calibration_vectors["clean"]}
    calibrated = calibrate_vectors(clean, data="old rule", cohort_size=0)
    return calibrated.calibration.tables["prototype"].row_for(far).threshold


def evaluate_fold(
    test_vectors: dict,
    test_seconds: dict,
    calibrated,
    old_floor: float,
    *,
    enroll: int,
    far: float,
) -> list[dict]:
    """One row per condition of the held-out source."""
    cohort = Cohort(
        np.frombuffer(calibrated.cohort, "<f4").reshape(calibrated.cohort_spec.count, -1),
        calibrated.cohort_spec.top_k,
    )
    calibration = calibrated.calibration
    stated = calibration.tables["prototype"].row_for(far)
    rows = []
    for condition, by_person in test_vectors.items():
        warm, genuine, impostor = enrollment_trials(by_person, enroll, cohort=cohort)
        raw_warm, raw_genuine, raw_impostor = enrollment_trials(by_person, enroll)
        if len(genuine) < 2:
            continue
        counts = dict.fromkeys(
            ("fa", "fr", "genuine", "impostor", "long_fr", "long_genuine", "old_fa", "old_fr"), 0
        )
        for person in genuine:
            threshold, _ = user_threshold(warm[person], TARGET_TPR, calibration, "prototype", far)
            long = test_seconds[condition][person][enroll:] >= LONG_CLIP_SECONDS
            rejected = genuine[person] < threshold
            counts["fa"] += int(np.sum(impostor[person] >= threshold))
            counts["fr"] += int(np.sum(rejected))
            counts["long_fr"] += int(np.sum(rejected & long))
            counts["long_genuine"] += int(np.sum(long))
            counts["genuine"] += genuine[person].size
            counts["impostor"] += impostor[person].size
            old = max(warmup_threshold(raw_warm[person], TARGET_TPR), old_floor)
            counts["old_fa"] += int(np.sum(raw_impostor[person] >= old))
            counts["old_fr"] += int(np.sum(raw_genuine[person] < old))
        all_genuine = np.concatenate(list(genuine.values()))
        all_impostor = np.concatenate(list(impostor.values()))
        raw = (
            np.concatenate(list(raw_genuine.values())),
            np.concatenate(list(raw_impostor.values())),
        )
        observed = counts["fa"] / counts["impostor"]
        rows.append(
            {
                "condition": condition,
                "speakers": len(genuine),
                "genuine": counts["genuine"],
                "impostor": counts["impostor"],
                "stated_far": stated.far,
                "observed_far": observed,
                "ratio": observed / stated.far,
                "resolvable": stated.far * counts["impostor"] >= 10,
                "frr": counts["fr"] / counts["genuine"],
                "long_genuine": counts["long_genuine"],
                "frr_long": counts["long_fr"] / counts["long_genuine"]
                if counts["long_genuine"]
                else None,
                "eer": equal_error_rate(all_genuine, all_impostor),
                "eer_raw": equal_error_rate(*raw),
                "old_far": counts["old_fa"] / counts["impostor"],
                "old_frr": counts["old_fr"] / counts["genuine"],
            }
        )
    return rows


def print_row(fold: str, row: dict) -> None:
    long = "  n/a" if row["frr_long"] is None else f"{row['frr_long']:.3f}"
    mark = "" if row["resolvable"] else "  (FAR not resolvable: < 10 expected false accepts)"
    print(
        f"{fold:11s} {row['condition']:15s} {row['speakers']:3d} {row['genuine']:6d} "
        f"{row['impostor']:7d}  {row['stated_far']:.3f}  {row['observed_far']:.4f} "
        f"{row['ratio']:5.2f}  {row['frr']:.3f}  {long} ({row['long_genuine']:4d})  "
        f"{row['eer']:.3f} {row['eer_raw']:.3f}  {row['old_far']:.4f} {row['old_frr']:.3f}{mark}"
    )


def plot(report: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conditions = list(dict.fromkeys(r["condition"] for f in report["folds"] for r in f["rows"]))
    for key, name, ylabel in (
        ("observed_far", "far.png", "observed FAR on the held-out source"),
        ("frr", "frr.png", "FRR on the held-out source"),
    ):
        figure, axes = plt.subplots(figsize=(10, 4.5))
        for number, fold in enumerate(report["folds"]):
            xs = [conditions.index(r["condition"]) + 0.08 * number for r in fold["rows"]]
            ys = [max(r[key], 1e-4) for r in fold["rows"]]
            axes.scatter(xs, ys, label=fold["source"], s=22)
        if key == "observed_far":
            stated = report["far"]
            axes.axhline(stated, color="k", lw=1, label=f"stated FAR {stated:g}")
            axes.axhline(2 * stated, color="k", lw=1, ls="--", label="2 x stated")
            axes.set_yscale("log")
        else:
            axes.axhline(0.05, color="k", lw=1, ls="--", label="FRR 5 %")
        axes.set_xticks(range(len(conditions)), conditions, rotation=30, ha="right")
        axes.set_ylabel(ylabel)
        axes.set_title(f"leave-one-source-out, --far {report['far']:g}")
        axes.legend(fontsize=7, ncol=2)
        figure.tight_layout()
        figure.savefig(out / name, dpi=110)
        plt.close(figure)


def argument_parser(description: str) -> argparse.ArgumentParser:
    """The options of a leave-one-source-out benchmark: the speakers, the bundle, the conditions,
    the stated FAR, the enrollment size and the embeddings cache (``far_rules.py`` adds its own)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--speakers", required=True, type=Path, help="one folder per speaker")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--bundle", type=Path, default=None, help="default: the shipped bundle")
    parser.add_argument("--conditions", default=None, help="comma-separated (default: all)")
    parser.add_argument("--far", type=float, default=DEFAULT_FAR)
    parser.add_argument("--enroll", type=int, default=5)
    parser.add_argument(
        "--max-samples",
        type=int,
        default=MAX_SAMPLES_PER_PERSON,
        help="clips per speaker at most (uvexport calibrate's)",
    )
    parser.add_argument("--cache", default=None, help="an .npz to keep the embeddings in")
    return parser


def main() -> int:
    args = argument_parser(__doc__.split("\n\n")[0]).parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    bundle = Bundle(args.bundle or default_bundle_path())
    vectors, seconds = embed(args, bundle)
    people = sorted({p for by in vectors.values() for p in by})
    sources: dict[str, set[str]] = {}
    for person in people:
        sources.setdefault(source_of(person), set()).add(person)
    folds = [s for s, members in sources.items() if len(members) >= MIN_FOLD_SPEAKERS]
    small = sorted(set(sources) - set(folds))
    print(
        f"{len(people)} speakers in {len(sources)} sources; folds: {', '.join(folds)}; "
        f"always calibrated on (fewer than {MIN_FOLD_SPEAKERS} speakers): {', '.join(small)}"
    )
    print(
        "fold        condition       spk    gen     imp  stated observed ratio  FRR   "
        "FRR>=2s (n)    EER   raw    old: FAR  FRR"
    )
    report: dict = {"far": args.far, "enroll": args.enroll, "folds": [], "small_sources": small}
    for fold in folds:
        held_out = sources[fold]
        rest = set(people) - held_out
        calibration_vectors = split(vectors, rest)
        calibrated = calibrate_vectors(calibration_vectors, data=f"all but {fold}")
        old_floor = old_rule_thresholds(calibration_vectors, args.far)
        rows = evaluate_fold(
            split(vectors, held_out),
            split(seconds, held_out),
            calibrated,
            old_floor,
            enroll=args.enroll,
            far=args.far,
        )
        for row in rows:
            print_row(fold, row)
        report["folds"].append(
            {
                "source": fold,
                "speakers": len(held_out),
                "calibrated_on": sorted(rest),
                "rows": rows,
            }
        )
    summarise(report)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(report, args.out)
    print(
        f"wrote {args.out / 'report.json'}, far.png, frr.png ({time.perf_counter() - started:.0f} s)"
    )
    return 0


def summarise(report: dict) -> None:
    """The pooled figures and the targets, printed and kept in the report."""
    rows = [r for f in report["folds"] for r in f["rows"]]
    resolvable = [r for r in rows if r["resolvable"]]
    worst = max(resolvable, key=lambda r: r["ratio"]) if resolvable else None
    long_rows = [r for r in rows if r["frr_long"] is not None]
    long_fr = sum(r["frr_long"] * r["long_genuine"] for r in long_rows)
    long_n = sum(r["long_genuine"] for r in long_rows)
    fa = sum(r["observed_far"] * r["impostor"] for r in rows)
    old_fa = sum(r["old_far"] * r["impostor"] for r in rows)
    impostor = sum(r["impostor"] for r in rows)
    genuine = sum(r["genuine"] for r in rows)
    summary = {
        "pooled_far": fa / impostor,
        "pooled_frr": sum(r["frr"] * r["genuine"] for r in rows) / genuine,
        "pooled_frr_long": long_fr / long_n if long_n else None,
        "long_genuine": long_n,
        "old_pooled_far": old_fa / impostor,
        "old_pooled_frr": sum(r["old_frr"] * r["genuine"] for r in rows) / genuine,
        "worst_ratio": None if worst is None else worst["ratio"],
        "within_2x": sum(r["ratio"] <= 2 for r in resolvable),
        "resolvable_rows": len(resolvable),
        "mean_eer": float(np.mean([r["eer"] for r in rows])),
        "mean_eer_raw": float(np.mean([r["eer_raw"] for r in rows])),
    }
    report["summary"] = summary
    print(
        f"pooled: FAR {summary['pooled_far']:.4f} (old rule {summary['old_pooled_far']:.4f}), "
        f"FRR {summary['pooled_frr']:.3f} (old {summary['old_pooled_frr']:.3f}), FRR on clips "
        f">= {LONG_CLIP_SECONDS:g} s {summary['pooled_frr_long'] or math.nan:.3f} "
        f"({long_n} trials); observed <= 2 x stated in {summary['within_2x']} of "
        f"{summary['resolvable_rows']} fold-conditions that resolve the FAR (worst ratio "
        f"{summary['worst_ratio'] or math.nan:.2f}); mean EER {summary['mean_eer']:.3f} "
        f"normalised, {summary['mean_eer_raw']:.3f} raw"
    )


if __name__ == "__main__":
    sys.exit(main())
