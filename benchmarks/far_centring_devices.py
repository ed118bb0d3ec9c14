"""How many devices a federation's chain mean needs: the ``far_centring.py --centre-devices N
--centre-epsilon E --draw-seed S`` runs under the given folders, read back and drawn together.

For each ε, the worst held-out fold-condition's observed / stated FAR (the each-chain table, the
centred arm) and the FRR on clips >= 2 s against the devices N, one point per noise draw, with
the 2x target and the noise bound the server enforces (``uvdeploy.centre.MAX_NOISE_NORM``,
drawn where each ε's noise reaches it). Prints one line per (ε, N) with the draws' spread and
writes ``devices.png`` under ``--out``.

    python benchmarks/far_centring_devices.py RUN_DIR... --out eval-devices/
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

RULE = "each chain"
ARM = "centred"


def read_runs(folders: list[Path]) -> dict[float, dict[int, list[dict]]]:
    """``{ε: {N: [each draw's row]}}`` of the runs made with ``--centre-devices``."""
    runs: dict[float, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for folder in folders:
        report = json.loads((folder / "report.json").read_text())
        if "centre_devices" not in report:
            continue
        summary = report["summary"][ARM][RULE]
        runs[report["centre_epsilon"]][report["centre_devices"]].append(
            {**summary, "noise_std": report["centre_noise_std"], "seed": report["draw_seed"]}
        )
    return runs


def plot(runs: dict[float, dict[int, list[dict]]], out: Path, dim: int, bound: float) -> None:
    from matplotlib.figure import Figure

    from uvtrain.io import save_figure

    figure = Figure(figsize=(10.4, 4.4), layout="constrained")
    ratio_axis, frr_axis = figure.subplots(1, 2)
    for epsilon, by_devices in sorted(runs.items(), reverse=True):
        counts = sorted(by_devices)
        for axis, key in ((ratio_axis, "worst_ratio"), (frr_axis, "frr_long")):
            xs = [n for n in counts for _ in by_devices[n]]
            ys = [row[key] for n in counts for row in by_devices[n]]
            means = [sum(row[key] for row in by_devices[n]) / len(by_devices[n]) for n in counts]
            (line,) = axis.plot(counts, means, marker="o", label=f"ε = {epsilon:g}")
            axis.scatter(xs, ys, s=12, color=line.get_color(), alpha=0.6)
        # the devices at which this ε's noise reaches the server's bound (noise std ~ 1/N)
        row = by_devices[counts[0]][0]
        reach = row["noise_std"] * counts[0] * math.sqrt(dim) / bound
        for axis in (ratio_axis, frr_axis):
            axis.axvline(reach, color=line.get_color(), ls=":", lw=1)
    ratio_axis.axhline(2.0, color="k", lw=1, ls="--", label="target: ratio <= 2")
    ratio_axis.set_yscale("log")
    ratio_axis.set_ylabel("worst observed / stated FAR (held-out fold-conditions)")
    frr_axis.set_ylabel("owners' FRR, clips >= 2 s (pooled)")
    for axis in (ratio_axis, frr_axis):
        axis.set_xscale("log")
        axis.set_xlabel("devices (dotted: where the server's noise bound lets a run start)")
        axis.legend(fontsize=8)
    figure.suptitle(
        "a federation's chain mean under DP, CAM++ raw cosines, each-chain table, stated FAR 1 %",
        fontsize=10,
    )
    save_figure(figure, out / "devices.png")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="far_centring.py --out folders")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dim", type=int, default=192, help="the model's embedding size")
    parser.add_argument("--bound", type=float, default=0.13, help="the server's noise bound")
    args = parser.parse_args()
    missing = [str(folder) for folder in args.runs if not (folder / "report.json").is_file()]
    if missing:
        parser.error(f"no report.json in {', '.join(missing[:3])}")
    runs = read_runs(args.runs)
    if not runs:
        parser.error("no far_centring.py --centre-devices run among the folders")
    print("eps    devices  noise norm  within 2x      worst ratio          FRR >= 2 s")
    for epsilon, by_devices in sorted(runs.items(), reverse=True):
        for devices, rows in sorted(by_devices.items()):
            within = "/".join(f"{r['within_2x']}" for r in rows)
            worst = "/".join(f"{r['worst_ratio']:.2f}" for r in rows)
            frr = [r["frr_long"] for r in rows]
            norm = rows[0]["noise_std"] * math.sqrt(args.dim)
            print(
                f"{epsilon:<6g} {devices:>7}  {norm:10.3f}  {within:<13} {worst:<20} "
                f"{sum(frr) / len(frr):.3f} ({min(frr):.3f}-{max(frr):.3f})"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    plot(runs, args.out, args.dim, args.bound)
    print(f"wrote {args.out / 'devices.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
