"""FedUV paper, Fig. 4: FedUV with and without the negative loss — EER against rounds.

The negative term needs every user's codeword (an ablation only: it is what FedUV exists to
avoid); the question is how much it would buy. Both arms train with the same schedule and seed and
log the EERs on test_known and unknown every ``--every`` rounds. The negative term is the paper's
``max_{u ≠ y} v_uᵀ σ(W g(x)) / c`` (eq. 4) unless ``--negative-loss mean-relu`` (ours).

    python benchmarks/negative_loss.py [--dataset synth-voices] [--scale cpu] [--weight 1.0]
        [--negative-loss max|mean-relu] [--every 50] [--out results/negative-loss]
        [--cache results/runs] [--root DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _runs import dataset_file, settings, train_once, write_table

from uvtrain.evaluation import plot_metric_over_rounds
from uvtrain.io import METRICS


def curve(folder: Path) -> tuple[list[int], dict[str, list[float]]]:
    rounds, series = [], {}
    for line in (folder / METRICS).read_text().splitlines():
        row = json.loads(line)
        if "eer" in row:
            rounds.append(row["round"])
            for split, value in row["eer"].items():
                series.setdefault(split, []).append(value)
    return rounds, series


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="synth-voices")
    parser.add_argument("--scale", default="cpu", choices=["cpu", "tiny", "paper"])
    parser.add_argument("--weight", type=float, default=1.0, help="the negative loss's weight")
    parser.add_argument(
        "--negative-loss",
        default="max",
        choices=["max", "mean-relu"],
        help="the negative term: the paper's max (eq. 4) or our mean of relus",
    )
    parser.add_argument("--every", type=int, default=50, help="evaluate every N rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("results/negative-loss"))
    parser.add_argument("--cache", type=Path, default=Path("results/runs"))
    parser.add_argument("--root", default=None, help="local corpus copy (paper scale)")
    args = parser.parse_args()

    data = dataset_file(args.scale, args.dataset, args.root)
    arms = {
        "FedUV (positive loss only)": 0.0,
        f"FedUV + negative loss {args.negative_loss} (×{args.weight:g})": args.weight,
    }
    curves = {}
    for label, weight in arms.items():
        # the positive-only arm keeps the default form, so that it is the ROC comparison's run
        form = {"negative_loss": args.negative_loss} if weight > 0 else {}
        run = settings(
            args.scale,
            args.dataset,
            "feduv",
            data,
            method="feduv",
            negative_weight=weight,
            seed=args.seed,
            eval_every=args.every,
            **form,
        )
        folder = train_once(args.cache, label, run, args.root)
        curves[label] = curve(folder)
    rounds = next(iter(curves.values()))[0]
    series = {
        f"{label}: {split}": values
        for label, (arm_rounds, by_split) in curves.items()
        for split, values in by_split.items()
        if arm_rounds == rounds
    }
    figure = args.out / f"negative-loss-{args.dataset}.png"
    plot_metric_over_rounds(
        rounds, series, figure, "EER", f"FedUV ± negative loss on {args.dataset} (FedUV Fig. 4)"
    )
    header = ["round", *series]
    rows = [[str(r), *(f"{series[name][i]:.4f}" for name in series)] for i, r in enumerate(rounds)]
    write_table(
        args.out / f"negative-loss-{args.dataset}.md", f"EER by round, {args.dataset}", header, rows
    )
    print(f"figure: {figure}")


if __name__ == "__main__":
    main()
