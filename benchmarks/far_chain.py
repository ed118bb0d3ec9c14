"""Does calibrating on some people of a recording chain make the stated FAR hold for its others?

``far_generalisation.py`` holds a whole source out of the calibration: with a source recorded
unlike every other (Flight of the Amazon Queen's 11 kHz game dialogue) the stated 1 % became
39 %. An app in that position can calibrate on people of its own chain (``uvexport calibrate``).
This measures what that buys: the source's speakers (``--source``) are split in two halves
(alternately, sorted by name); each half in turn joins the calibration (with every other source,
calibrated as ``uvexport calibrate`` does) and the other half is enrolled and tested in each
condition, against the same test half calibrated without any of the source (the
leave-one-source-out baseline). Test people are never calibrated on, in either arm. Trials, rule
and pooling are ``far_rules.py``'s (today's rule, ``global``); ``report.json`` beside the table.

``--counts 1,2,3`` also answers "how many people of my chain do I need?": the same test half is
measured with only the first N of the other half (sorted by name) calibrated on, for each N
smaller than that half; ``chain.png`` draws the pooled FAR and FRR against N (0: none of the
source; the last: the whole other half).

    python benchmarks/far_chain.py --speakers real-speech/speakers --out eval-chain/ \\
        --source fotaq --bundle MODEL.uvb --cache emb.npz [--counts 1,2,3,4]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from far_generalisation import argument_parser, chains, embed, source_of, split
from far_rules import fit_global, fold_trials, pooled, rule_row

from uvexport.calibrate import Calibrated, calibrate_vectors, print_progress
from uvsdk import Bundle
from uvsdk.verifier import default_bundle_path

ARMS = ("without", "with")
"""The baseline (none of the source calibrated on) and the arm with the other half in it."""


def halves(members: list[str]) -> tuple[list[str], list[str]]:
    """The source's speakers, sorted by name, alternately in two halves."""
    ordered = sorted(members)
    return ordered[0::2], ordered[1::2]


def arm_rows(
    vectors: dict,
    seconds: dict,
    calibration_people: set[str],
    tested: set[str],
    args: argparse.Namespace,
    calibrated: Calibrated | None = None,
) -> tuple[list[dict], float]:
    """Today's rule's rows for ``tested`` calibrated on ``calibration_people`` (``calibrated``:
    that calibration when already made); the table's threshold at ``--far``."""
    if calibrated is None:
        calibrated = calibrate_vectors(
            split(vectors, calibration_people),
            data="far_chain",
            groups=chains(calibration_people, args.impostors),
        )
    _, test = fold_trials(
        split(vectors, calibration_people),
        split(seconds, calibration_people),
        split(vectors, tested),
        split(seconds, tested),
        calibrated,
        args.enroll,
    )
    row = calibrated.calibration.tables["prototype"].row_for(args.far)
    thresholds = fit_global(calibrated, args.far)
    rows = [
        {"condition": condition, **rule_row(trials, thresholds, row.far)}
        for condition, trials in test.items()
    ]
    return rows, row.threshold


def summary_line(name: str, summary: dict) -> str:
    """Pooled rows (:func:`far_rules.pooled`) in one line: FAR, FRR, conditions within 2x of the
    stated FAR and the worst ratio."""
    worst = summary["worst_ratio"]
    return (
        f"{name:8s} FAR {summary['far']:.4f}  FRR {summary['frr']:.3f}  "
        f"within 2x {summary['within_2x']} of {summary['resolvable_rows']} resolvable  "
        f"worst {'-' if worst is None else f'{worst:.2f}'}"
    )


def counts_curve(report: dict) -> list[dict]:
    """Pooled over the splits, per number of the source's people calibrated on: 0 (the
    baseline), each ``--counts`` entry, and each split's whole other half (``with``)."""
    by_count: dict[int, list[dict]] = {}
    for entry in report["splits"]:
        by_count.setdefault(0, []).extend(entry["without"]["rows"])
        by_count.setdefault(len(entry["calibrated_on"]), []).extend(entry["with"]["rows"])
        for count, arm in entry.get("counts", {}).items():
            by_count.setdefault(int(count), []).extend(arm["rows"])
    return [{"count": count, **pooled(rows)} for count, rows in sorted(by_count.items())]


def plot_counts(curve: list[dict], far: float, source: str, out) -> None:
    """``chain.png``: pooled FAR and FRR against the people of the chain calibrated on."""
    from matplotlib.figure import Figure

    from uvtrain.io import save_figure

    figure = Figure(figsize=(6.4, 4.2))
    axis = figure.add_subplot()
    counts = [point["count"] for point in curve]
    axis.plot(counts, [point["far"] for point in curve], "o-", label="observed FAR (pooled)")
    axis.plot(counts, [point["frr"] for point in curve], "s--", label="FRR (pooled)")
    axis.axhline(far, color="grey", linestyle=":", label=f"stated FAR {far:g}")
    axis.axhline(2 * far, color="grey", linestyle="-.", linewidth=0.8, label="2 x stated")
    axis.set_yscale("log")
    axis.set_xticks(counts)
    axis.set_xlabel(f"people of {source} calibrated on (beside every other source)")
    axis.set_ylabel("rate")
    axis.set_title(f"{source}: the others enrolled and tested in every condition", fontsize=10)
    axis.legend(fontsize=8)
    save_figure(figure, out)


def main() -> int:
    parser = argument_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="the source whose people are split")
    parser.add_argument(
        "--counts",
        default="",
        help="comma-separated N: also calibrate on only the first N of the other half",
    )
    args = parser.parse_args()
    try:
        counts = sorted({int(n) for n in args.counts.split(",") if n.strip()})
    except ValueError:
        parser.error(f"--counts {args.counts!r}: whole numbers, comma-separated")
    if any(n < 1 for n in counts):
        parser.error(f"--counts {args.counts!r}: each N at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    vectors, seconds = embed(args, Bundle(args.bundle or default_bundle_path()))
    people = sorted({p for by in vectors.values() for p in by})
    members = [p for p in people if source_of(p) == args.source]
    if len(members) < 4:
        parser.error(f"--source {args.source}: {len(members)} speakers; a split needs 4 or more")
    others = set(people) - set(members)
    first, second = halves(members)
    report: dict = {"source": args.source, "far": args.far, "splits": []}
    baseline = calibrate_vectors(  # the same for both
        split(vectors, others), data="far_chain", groups=chains(others, args.impostors)
    )
    for number, (known, tested) in enumerate(((first, second), (second, first)), 1):
        split_report: dict = {"calibrated_on": known, "tested": tested}
        for arm, joined, calibrated in (("without", [], baseline), ("with", known, None)):
            rows, threshold = arm_rows(
                vectors, seconds, others | set(joined), set(tested), args, calibrated
            )
            split_report[arm] = {"threshold": threshold, "rows": rows}
        split_report["counts"] = {}
        for count in (n for n in counts if n < len(known)):
            rows, threshold = arm_rows(
                vectors, seconds, others | set(known[:count]), set(tested), args
            )
            split_report["counts"][str(count)] = {
                "calibrated_on": known[:count],
                "threshold": threshold,
                "rows": rows,
            }
        report["splits"].append(split_report)
        print(f"split {number}: {len(known)} of the source calibrated on, {len(tested)} tested")
        print("  condition        without: FAR   FRR   with: FAR   FRR")
        for without, with_ in zip(
            split_report["without"]["rows"], split_report["with"]["rows"], strict=True
        ):
            print(
                f"  {without['condition']:15s}  {without['observed_far']:.4f} "
                f"{without['false_rejects'] / without['genuine']:.3f}       "
                f"{with_['observed_far']:.4f} {with_['false_rejects'] / with_['genuine']:.3f}"
            )
        elapsed = time.perf_counter() - started
        print_progress(
            f"split {number}/2 done ({elapsed:.0f} s, about {elapsed * (2 - number):.0f} s left)"
        )
    print(file=sys.stderr)
    report["summary"] = {}
    for arm in ARMS:
        rows = [row for entry in report["splits"] for row in entry[arm]["rows"]]
        report["summary"][arm] = pooled(rows)
        print(summary_line(arm, report["summary"][arm]))
    if counts:
        report["curve"] = counts_curve(report)
        print("people of the source calibrated on (pooled over the splits that have that many):")
        for point in report["curve"]:
            print(summary_line(f"  {point['count']}", point))
        plot_counts(report["curve"], args.far, args.source, args.out / "chain.png")
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out / 'report.json'} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
