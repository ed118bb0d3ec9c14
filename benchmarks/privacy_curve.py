"""The privacy–accuracy curve (issue 19): FedUV and FedHide trained with user-level differential
privacy at ε ∈ {∞, 16, 8, 4, 2}, on a population large enough for DP to leave room to learn
(1,000 synth-voices users, cohorts of 100), and their EER against ε.

Each run is ``uvtrain run`` with the deployment's default mechanism (``--dp distributed``: every
client clips its update and adds its share of the noise; the sum is what SecAgg+ would reveal),
adaptive clipping (Andrew et al. 2021: γ 0.5, η_C 0.2, σ_b = m/20, from C = 0.1), ``δ`` the
default (``0.1/N`` when the curve was measured; ``uvtrain.accounting.default_delta`` now).
ε = ∞ is the same run without DP. With ``--audit AUDIT_JSON`` (``uvtrain audit --dp-epsilon
inf,16,8,4,2``, the disaggregation attack through SecAgg+ at the same budgets) it also plots EER
against the whole codewords that attack recovers.

    python benchmarks/privacy_curve.py [--scale dp] [--epsilons inf,16,8,4,2]
        [--methods feduv,fedhide] [--seeds 0 1 2] [--audit audit/dp/audit.json ...]
        [--out results/privacy] [--cache results/runs] [--root DIR] [--no-train]

With several ``--seeds`` every setting is trained once per seed and each figure is tabled and
plotted as the mean over the seeds with its range, ``mean (min–max)`` (issue 45: no headline
figure from one seed); the JSON keeps every seed's row.

Writes ``OUT/privacy-curve.md``, ``OUT/privacy-curve.json`` and ``OUT/eer-vs-epsilon.png`` (and
``OUT/eer-vs-recovery.png`` with ``--audit``); runs go to ``--cache`` and are reused. With
``--no-train`` nothing is trained: the runs finished in ``--cache`` are tabled and the others
named (a long run still training in another process, or to be resumed later, from its checkpoint).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
from pathlib import Path
from typing import Any

from _runs import (
    dataset_file,
    finished_run,
    method_label,
    report,
    settings,
    train_once,
    write_table,
)
from seeds_table import mean_range

from uvtrain.config import RunConfig
from uvtrain.io import save_figure, write_json

#: The mechanism of every DP run of the curve (ε is the variable).
MECHANISM = {
    "dp": "distributed",
    "adaptive_clipping": True,
    "clip_norm": 0.1,
}
FAMILY = {"feduv": "feduv", "fedhide": "embedding"}


def parse_epsilons(text: str) -> list[float]:
    values = [
        math.inf if part.strip() in ("inf", "off") else float(part) for part in text.split(",")
    ]
    if any(not value > 0 for value in values):
        raise SystemExit("--epsilons: each ε positive, or inf")
    return values


def run_settings(
    args: argparse.Namespace, method: str, epsilon: float, data: str, seed: int
) -> dict:
    values = settings(args.scale, args.dataset, FAMILY[method], data, method=method)
    if math.isfinite(epsilon):
        values.update(MECHANISM, dp_epsilon=epsilon)
        if args.scale == "tiny":  # cohorts of 4: too few for a noisy count of the clipped
            values.update(adaptive_clipping=False, clip_norm=1.0)
    return {**values, "seed": seed}


#: The figures of a row that vary by seed: each summarised as its mean and range.
SPREAD = ("test_known_eer", "unknown_eer", "p_leak", "seconds")


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per method and ε from its seeds' rows: each figure of :data:`SPREAD` the mean
    over the seeds (``NAME``) with ``NAME_range`` ``[min, max]``; ``seeds`` lists them. The noise
    multipliers and rounds do not depend on the seed and are the first row's."""
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["method"], row["epsilon"]), []).append(row)
    out = []
    for group in groups.values():
        summary = {**group[0], "seeds": [row["seed"] for row in group]}
        del summary["seed"], summary["run"]
        for key in SPREAD:
            values = [row[key] for row in group]
            if any(value is None for value in values):
                continue
            summary[key] = sum(values) / len(values)
            summary[f"{key}_range"] = [min(values), max(values)]
        out.append(summary)
    return out


def spread(row: dict[str, Any], key: str, digits: int = 3) -> str:
    """``row[key]`` as a table cell: ``mean (min–max)`` over several seeds, the figure alone
    for one seed, ``–`` when the method has none."""
    if row.get(key) is None:
        return "–"
    return mean_range(row[key], *row.get(f"{key}_range", [row[key], row[key]]), digits)


def row_of(folder: Path, method: str, epsilon: float, seed: int) -> dict[str, Any]:
    result = report(folder)
    splits = result["splits"]
    privacy = result.get("privacy") or {}
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    seconds = sum(json.loads(line)["seconds"] for line in lines)  # training, without evaluation
    return {
        "method": method,
        "epsilon": epsilon,
        "noise_multiplier": privacy.get("noise_multiplier"),
        "update_noise_multiplier": (privacy.get("adaptive_clipping") or {}).get(
            "update_noise_multiplier"
        ),
        "delta": privacy.get("delta"),
        "test_known_eer": splits["test_known"]["eer"],
        "unknown_eer": splits["unknown"]["eer"],
        "p_leak": result.get("leakage"),  # P_leak (FedHide), None for FedUV
        "rounds": result["rounds"],
        "seconds": seconds,
        "device": result["throughput"]["device"],
        "seed": seed,
        "run": folder.name,
    }


def recovery_by_epsilon(paths: list[Path]) -> dict[float, dict[str, Any]]:
    """The last observed round's disaggregation entry per ε over ``audit.json`` files (each
    file's list; a later file's entry of as many rounds replaces an earlier one's). Each entry
    gains ``"setup"``: the audit's population, cohort and rounds, which need not be the curve's.
    ε is the budget the audit's run was set to spend (``dp.epsilon``) to two significant figures,
    as it was asked for (``--dp-epsilon 8`` spends 7.99)."""
    out: dict[float, dict[str, Any]] = {}
    for path in paths:
        audit = json.loads(path.read_text())
        setup = audit.get("setup") or {}
        for entry in audit.get("disaggregation", []):
            epsilon = math.inf if entry["dp"] is None else float(f"{entry['dp']['epsilon']:.2g}")
            best = out.get(epsilon)
            if best is None or entry["rounds"] >= best["rounds"]:
                out[epsilon] = {
                    **entry,
                    "setup": {
                        "audit": str(path),
                        "clients": setup.get("clients"),
                        "cohort": entry.get("cohort"),
                        "rounds": (entry["dp"] or {}).get("rounds", setup.get("rounds")),
                    },
                }
    return out


def plot(rows: list[dict[str, Any]], recovery: dict[float, Any] | None, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    finite = [row["epsilon"] for row in rows if math.isfinite(row["epsilon"])]
    right = 2 * max(finite) if finite else 32.0  # where ∞ is drawn
    figure, axis = plt.subplots(figsize=(6, 4))
    for method in dict.fromkeys(row["method"] for row in rows):
        mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["epsilon"])
        xs = [r["epsilon"] if math.isfinite(r["epsilon"]) else right for r in mine]
        for split, style in (("test_known", "-o"), ("unknown", "--s")):
            key = f"{split}_eer"
            ys = [r[key] for r in mine]
            ranges = [r.get(f"{key}_range", [r[key], r[key]]) for r in mine]
            below = [y - low for y, (low, _) in zip(ys, ranges, strict=True)]
            above = [high - y for y, (_, high) in zip(ys, ranges, strict=True)]
            seeds = max(len(r["seeds"]) for r in mine)
            label = f"{method} {split}" + (
                f" (mean, range over {seeds} seeds)" if seeds > 1 else ""
            )
            axis.errorbar(xs, ys, yerr=[below, above], fmt=style, capsize=3, label=label)
    axis.axhline(0.5, color="grey", linestyle=":", linewidth=1, label="chance")
    axis.set_ylim(0.0, 0.6)
    axis.set_xscale("log", base=2)
    ticks = sorted(set(finite)) + [right]
    axis.set_xticks(ticks, [f"{t:g}" for t in ticks[:-1]] + ["∞ (off)"])
    axis.set_xlabel("ε (user-level, whole run)")
    axis.set_ylabel("EER")
    axis.set_title("EER against the privacy budget")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    paths.append(save_figure(figure, out / "eer-vs-epsilon.png"))
    if recovery:
        figure, axis = plt.subplots(figsize=(6, 4))
        for method in dict.fromkeys(row["method"] for row in rows):
            if method != "feduv":
                continue
            mine = [r for r in rows if r["method"] == method and r["epsilon"] in recovery]
            mine.sort(key=lambda r: r["epsilon"])
            xs = [recovery[r["epsilon"]]["whole_decoded"] or 0.0 for r in mine]
            axis.plot(xs, [r["test_known_eer"] for r in mine], "-o", label=f"{method} test_known")
            for index, (x, r) in enumerate(zip(xs, mine, strict=True)):
                label = "∞ (off)" if not math.isfinite(r["epsilon"]) else f"{r['epsilon']:g}"
                offset = (-40 if x > 0.5 else 6, 6 + 9 * (index % 3))  # points often coincide
                axis.annotate(
                    f"ε {label}",
                    (x, r["test_known_eer"]),
                    xytext=offset,
                    textcoords="offset points",
                    fontsize=8,
                )
        axis.axhline(0.5, color="grey", linestyle=":", linewidth=1, label="chance")
        axis.set_xlim(-0.05, 1.05)
        axis.set_ylim(0.0, 0.6)
        axis.set_xlabel("whole codewords recovered by disaggregation (decoded)")
        axis.set_ylabel("EER")
        axis.set_title("Accuracy against what the server recovers")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
        paths.append(save_figure(figure, out / "eer-vs-recovery.png"))
    plt.close("all")
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="synth-voices")
    parser.add_argument("--scale", default="dp", choices=["dp", "tiny"])
    parser.add_argument("--epsilons", default="inf,16,8,4,2")
    parser.add_argument("--methods", default="feduv,fedhide")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--audit",
        type=Path,
        action="append",
        help="an audit.json with --dp-epsilon entries (repeat to merge several audits)",
    )
    parser.add_argument("--out", type=Path, default=Path("results/privacy"))
    parser.add_argument("--cache", type=Path, default=Path("results/runs"))
    parser.add_argument("--root")
    parser.add_argument(
        "--no-train",
        action="store_true",
        help="table and plot only the runs already finished in --cache (name the others)",
    )
    args = parser.parse_args()
    if args.scale == "tiny":
        args.dataset = "formant-voices"

    epsilons = parse_epsilons(args.epsilons)
    methods = [m.strip() for m in args.methods.split(",")]
    data = dataset_file(args.scale, args.dataset, args.root)
    rows = []
    missing = []  # with --no-train: the runs not finished in the cache
    for method in methods:
        for epsilon in epsilons:
            for seed in args.seeds:
                values = run_settings(args, method, epsilon, data, seed)
                label = f"{method} ε={epsilon:g}" + (f" seed {seed}" if len(args.seeds) > 1 else "")
                if args.no_train and finished_run(args.cache, values, args.root) is None:
                    print(f"  {label}: not finished in {args.cache} (left out: --no-train)")
                    missing.append(label)
                    continue
                folder = train_once(args.cache, label, values, args.root)
                rows.append(row_of(folder, method, epsilon, seed))
    if not rows:
        raise SystemExit(f"no finished run in {args.cache} (--no-train)")
    summary = summarise(rows)
    recovery = recovery_by_epsilon(args.audit) if args.audit else None
    config = RunConfig.from_flat(
        {**run_settings(args, methods[0], epsilons[-1], data, args.seeds[0])}
    )
    header = ["method", "ε", "seeds", "rounds", "z (z_Δ)", "test_known EER", "unknown EER"]
    header += ["P_leak", "wall-clock"]
    if recovery:
        header += ["whole codewords recovered (audit)", "bits (audit)"]
    table = []
    for row in summary:
        eps = row["epsilon"]
        noise = "–" if row["noise_multiplier"] is None else f"{row['noise_multiplier']:.3f}"
        if row["update_noise_multiplier"] is not None:
            noise += f" ({row['update_noise_multiplier']:.3f})"
        line = [
            method_label(row["method"], math.isfinite(eps)),
            "∞ (off)" if not math.isfinite(eps) else f"{eps:g}",
            ", ".join(map(str, row["seeds"])),
            str(row["rounds"]),
            noise,
            spread(row, "test_known_eer"),
            spread(row, "unknown_eer"),
            spread(row, "p_leak"),
            f"{row['seconds'] / 60:.1f} min ({row['device']}"
            + (f"; mean of {len(row['seeds'])})" if len(row["seeds"]) > 1 else ")"),
        ]
        if recovery:
            entry = recovery.get(eps) if row["method"] == "feduv" else None
            line += (
                ["–", "–"]
                if entry is None
                else [
                    f"{100 * (entry['whole_decoded'] or 0):.1f} %",
                    f"{100 * entry['bits']:.1f} %",
                ]
            )
        table.append(line)
    device = f"{platform.processor() or platform.machine()}, {config.device}"
    title = (
        f"Privacy–accuracy: {config.data.clients} users, cohorts of "
        f"{round(config.schedule.fraction * config.data.clients)}"
    )
    write_table(args.out / "privacy-curve.md", title, header, table)
    notes = [f"Not finished yet (left out): {', '.join(missing)}"] if missing else []
    if recovery:  # where the recovery columns come from: an audit's own population
        notes.append("Recovery (FedUV, the disaggregation attack through SecAgg+):")
        setups = sorted({json.dumps(entry["setup"], sort_keys=True) for entry in recovery.values()})
        for setup in map(json.loads, setups):
            notes.append(
                f"- `{setup['audit']}`: {setup['clients']} devices, cohorts of {setup['cohort']}, "
                f"after {setup['rounds']} rounds"
            )
    if notes:
        with open(args.out / "privacy-curve.md", "a") as file:
            file.write("\n" + "\n".join(notes) + "\n")
    write_json(
        args.out / "privacy-curve.json",
        {"mechanism": MECHANISM, "device": device, "rows": rows, "summary": summary,
         "recovery": {str(k): v for k, v in (recovery or {}).items()}},
    )  # fmt: skip
    for path in plot(summary, recovery, args.out):
        print(f"figure: {path}")
    print(f"runs: {', '.join(row['run'] for row in rows)}")


if __name__ == "__main__":
    main()
