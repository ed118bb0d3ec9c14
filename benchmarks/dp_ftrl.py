"""DP-FTRL beside today's mechanism at the same ε (issue 45): FedHide and FedUV (scored by
enrollment, the SDK's prototype mode) trained at simulated deployment scale — the noise of
cohorts of M = 1,000 from 10⁶ users, scaled onto the tenth of the synth-voices users a round
trains (FedHide: 500 users, 60 rounds; FedUV: 200 users, 200 rounds; sized for the 2-core CPU,
where a DP round of 100 users took 30 s beside the other jobs) — under three mechanisms at
ε = 8, each with 3 seeds, beside the same runs without DP:

- ``poisson``: today's default of ``uvtrain deploy`` — distributed noise, Poisson sampling,
  adaptive clipping from C = 0.1; its ε = 8 holds against observers of the model who do not know
  the cohorts (amplification), and against the server that drew them it is far larger
  (``epsilon_server``, tabled);
- ``period-adaptive``: DP-FedAvg under the participation rule (``--dp-period 1000``: a
  deployment's user in at most one round of each period of N/M = 1,000 rounds, so once in the
  run), distributed noise, the same adaptive clipping as ``poisson``; ε = 8 against the server too;
- ``period``: the same with C = 0.25 fixed (about the median update norm the adaptive runs settle
  at), the clipping DP-FTRL needs: its twin;
- ``tree``: DP-FTRL with tree aggregation (``--dp central --dp-noise tree``), the same rule and C;
  ε = 8 against anyone who sees the models, knowing the cohorts or not; the server that adds the
  noise is trusted.

    python benchmarks/dp_ftrl.py --train [--parallel 2] [--deadline 7200] [--only NAME,...]
    python benchmarks/dp_ftrl.py [--runs results/dp-ftrl/runs] [--out results/dp-ftrl]
                                 [--record docs/figures/dp-ftrl.json]

Writes ``OUT/dp-ftrl.md`` (every run, then each mechanism's mean and range over seeds with its
verdict against no DP: a difference inside the seeds' spread is a tie), ``OUT/dp-ftrl.json`` and
``OUT/dp-ftrl.png``; ``--record FILE`` keeps the tabled runs (and merges runs from other
sessions or devices, each labelled with the device it ran on).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from seeds_table import mean_range

from uvtrain.io import save_figure, write_json

SEEDS = (0, 1, 2)
COMMON = ["--fraction", "0.1", "--batch-size", "16", "--server-optimizer", "sgd",
          "--server-lr", "1"]  # fmt: skip
#: Each method's recipe, sized for the CPU: FedHide's of the privacy curve on 500 users for 60
#: rounds; FedUV's (lr 0.5, decay 0.005) on 200 users for 200 rounds. The short name is the runs'.
RECIPES = {
    "fedhide": ["--method", "fedhide", "--clients", "500", "--rounds", "60", "--lr", "0.1",
                "--lr-decay", "0"],
    "feduv": ["--method", "feduv", "--clients", "200", "--rounds", "200", "--lr", "0.5",
              "--lr-decay", "0.005"],
}  # fmt: skip
SHORT = {"fedhide": "hide", "feduv": "uv"}
DEPLOYMENT = ["--dp-epsilon", "8", "--dp-noise-cohort", "1000", "--dp-population", "1000000"]
MECHANISMS: dict[str, list[str]] = {
    "off": [],
    "poisson": ["--dp", "distributed", "--adaptive-clipping", "--clip-norm", "0.1", *DEPLOYMENT],
    "period-adaptive": [
        "--dp",
        "distributed",
        "--dp-period",
        "1000",
        "--adaptive-clipping",
        "--clip-norm",
        "0.1",
        *DEPLOYMENT,
    ],
    "period": ["--dp", "distributed", "--dp-period", "1000", "--clip-norm", "0.25", *DEPLOYMENT],
    "tree": ["--dp", "central", "--dp-noise", "tree", "--clip-norm", "0.25", *DEPLOYMENT],
}
LABELS = {
    "off": "no DP",
    "poisson": "DP-FedAvg, Poisson sampling, distributed (today's default)",
    "period-adaptive": "DP-FedAvg, one round a period, distributed, adaptive clipping",
    "period": "DP-FedAvg, one round a period, distributed, C fixed",
    "tree": "DP-FTRL (tree), one round a period, central, C fixed",
}


#: The figure's short names.
TICKS = {
    "off": "no DP",
    "poisson": "DP-FedAvg\nPoisson\n(today's)",
    "period-adaptive": "DP-FedAvg\none a period\nadaptive C",
    "period": "DP-FedAvg\none a period\nC fixed",
    "tree": "DP-FTRL\none a period\nC fixed",
}


def runs() -> dict[str, tuple[str, str, int]]:
    """Every run by name, ``hide-MECHANISM-sSEED`` (FedHide) and ``uv-…`` (FedUV): its method,
    mechanism and seed."""
    return {
        f"{SHORT[method]}-{m}-s{seed}": (method, m, seed)
        for method in RECIPES
        for m in MECHANISMS
        for seed in SEEDS
    }


def train(folder: Path, parallel: int, deadline: float, only: set[str] | None) -> None:
    """Run every missing run, ``parallel`` at a time (one ``uvtrain run`` process each), each
    stopped at the deadline."""
    from uvtrain.data.registry import build_dataset, dataset_path

    data = dataset_path("synth-voices", seed=0, speakers=1250)
    if not data.is_file():
        data = build_dataset("synth-voices", seed=0, speakers=1250)
    folder.mkdir(parents=True, exist_ok=True)
    end = time.monotonic() + deadline
    program = "import sys; from uvtrain.entry import main; sys.exit(main())"

    def one(name: str) -> str:
        method, mechanism, seed = runs()[name]
        if (folder / name / "report.json").is_file():
            return f"{name}: done before"
        left = end - time.monotonic()
        if left < 20:
            return f"{name}: not started (deadline)"
        command = [sys.executable, "-c", program, "run", "--dataset", str(data), *COMMON,
                   *RECIPES[method], *MECHANISMS[mechanism], "--seed", str(seed), "--out", str(folder / name)]  # fmt: skip
        started = time.monotonic()
        with open(folder / f"{name}.log", "w") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                status: Any = process.wait(timeout=left)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
                status = "stopped at the deadline"
        return f"{name}: {status} after {time.monotonic() - started:.0f} s"

    names = [n for n in runs() if only is None or n in only]
    # FedHide first, then seeds first, so that a deadline leaves whole mechanisms at fewer
    # seeds, not mechanisms out
    names.sort(key=lambda n: (runs()[n][0] != "fedhide", runs()[n][2],
                              list(MECHANISMS).index(runs()[n][1])))  # fmt: skip
    with ThreadPoolExecutor(parallel) as pool:
        for line in pool.map(one, names):
            print(line, flush=True)


def row(folder: Path, name: str) -> dict[str, Any] | None:
    """One finished run's figures."""
    path = folder / name / "report.json"
    if not path.is_file():
        return None
    report = json.loads(path.read_text())
    method, mechanism, seed = runs()[name]
    privacy = report.get("privacy")
    # FedUV by enrollment (the SDK's prototype mode, what its bundles enroll by under DP)
    splits = report["enrollment"]["splits"] if method == "feduv" else report["splits"]
    entry: dict[str, Any] = {
        "run": name,
        "method": method,
        "mechanism": mechanism,
        "seed": seed,
        "rounds": report["rounds"],
        "enrollment": splits["test_known"]["eer"],
        "enrollment_unknown": splits["unknown"]["eer"],
        "device": report["throughput"]["device"],
        "seconds": report.get("seconds"),
        "privacy": None,
    }
    if privacy is not None:
        entry["privacy"] = {
            key: privacy.get(key)
            for key in (
                "epsilon_release",
                "epsilon_server",
                "delta",
                "noise_multiplier",
                "server_participations",
                "clip_norm",
                "noise",
            )  # fmt: skip
        }
    return entry


def _number(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def summary(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per method and mechanism: the mean and range of the EERs over its seeds, and against the
    method without DP whether the difference of the means is inside the larger of the two
    seeds' spreads (a tie)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entry in entries:
        groups.setdefault((entry["method"], entry["mechanism"]), []).append(entry)
    rows = []

    def verdict(known: list[float], other: list[float]) -> tuple[float | None, str | None]:
        if len(known) < 2 or len(other) < 2:
            return None, None
        change = _mean(known) - _mean(other)
        spread = max(max(known) - min(known), max(other) - min(other))
        return change, "a tie" if abs(change) <= spread else "outside the spread"

    for method in RECIPES:
        baseline = [e["enrollment"] for e in groups.get((method, "off"), [])]
        today = [e["enrollment"] for e in groups.get((method, "poisson"), [])]
        for mechanism in MECHANISMS:
            group = groups.get((method, mechanism))
            if not group:
                continue
            known = [e["enrollment"] for e in group]
            result: dict[str, Any] = {
                "method": method,
                "mechanism": mechanism,
                "seeds": [e["seed"] for e in group],
                "mean": _mean(known),
                "low": min(known),
                "high": max(known),
                "unknown_mean": _mean([e["enrollment_unknown"] for e in group]),
                "privacy": group[0]["privacy"],
                "verdict": None,
            }
            if mechanism != "off":
                result["change"], result["verdict"] = verdict(known, baseline)
            if mechanism not in ("off", "poisson"):
                result["change_today"], result["verdict_today"] = verdict(known, today)
            rows.append(result)
    return rows


def table(folder: Path, out: Path, record: Path | None) -> None:
    recorded: dict[str, dict[str, Any]] = {}
    if record is not None and record.is_file():
        recorded = {e["run"]: e for e in json.loads(record.read_text())["runs"]}
    measured = {name: e for name in runs() if (e := row(folder, name))}
    entries = [measured.get(n) or recorded[n] for n in runs() if n in measured or n in recorded]
    header = ["run", "mechanism", "seed", "ε release", "ε server", "z", "C", "EER test_known",
              "EER unknown", "device"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for e in entries:
        p = e["privacy"] or {}
        lines.append("| " + " | ".join([
            e["run"], LABELS[e["mechanism"]], str(e["seed"]),
            _number(p.get("epsilon_release"), 2) if p else "∞",
            _number(p.get("epsilon_server"), 1) if p else "∞",
            _number(p.get("noise_multiplier"), 3) if p else "–",
            f"{p['clip_norm']:g}" if p else "–",
            _number(e["enrollment"]), _number(e["enrollment_unknown"]), e["device"],
        ]) + " |")  # fmt: skip
    rows = summary(entries)
    lines += ["", "Over seeds (mean, range); EER by enrollment on test_known (FedUV: the SDK's "
              "prototype mode):", "",
              "| method | mechanism | ε release / ε server | seeds | EER test_known | "
              "EER unknown | against no DP | against today's (Poisson) |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        p = r["privacy"] or {}
        eps = f"{p['epsilon_release']:.2f} / {p['epsilon_server']:.3g}" if p else "∞"
        verdict = "–" if r["verdict"] is None else f"{r['change']:+.3f}: {r['verdict']}"
        today = "–"
        if r.get("verdict_today") is not None:
            today = f"{r['change_today']:+.3f}: {r['verdict_today']}"
        lines.append(
            f"| {r['method']} | {LABELS[r['mechanism']]} | {eps} | {len(r['seeds'])} | "
            f"{mean_range(r['mean'], r['low'], r['high'])} | "
            f"{_number(r['unknown_mean'])} | {verdict} | {today} |"
        )
    text = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "dp-ftrl.md").write_text(text)
    write_json(out / "dp-ftrl.json", {"runs": entries, "summary": rows})
    if record is not None:
        write_json(record, {"runs": entries, "summary": rows})
    print(text)
    _figure(rows, out / "dp-ftrl.png")


def _figure(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in RECIPES if any(r["method"] == m for r in rows)]
    if not methods:
        return
    figure, axes = plt.subplots(1, max(1, len(methods)), figsize=(5.5 * len(methods), 4.4),
                                squeeze=False)  # fmt: skip
    for axis, method in zip(axes[0], methods, strict=False):
        mine = [r for r in rows if r["method"] == method]
        for x, r in enumerate(mine):
            below, above = r["mean"] - r["low"], r["high"] - r["mean"]
            axis.errorbar([x], [r["mean"]], yerr=[[below], [above]], fmt="o", capsize=4)
            p = r["privacy"]
            note = (
                "no DP"
                if p is None
                else (f"ε {p['epsilon_release']:.0f}, server {p['epsilon_server']:.3g}")
            )
            axis.annotate(note, (x, r["high"]), textcoords="offset points", xytext=(0, 6),
                          ha="center", fontsize=7)  # fmt: skip
        axis.set_xticks(range(len(mine)), [TICKS[r["mechanism"]] for r in mine], fontsize=7)
        axis.set_ylabel(f"{method} EER by enrollment, test_known (lower is better)", fontsize=8)
        recipe = RECIPES[method]
        axis.set_title(f"{method}: {recipe[recipe.index('--rounds') + 1]} rounds, "
                       f"{recipe[recipe.index('--clients') + 1]} users", fontsize=9)  # fmt: skip
    figure.suptitle("The same ε = 8 at simulated deployment scale (the noise of cohorts of "
                    "M = 1,000 of 10⁶; a tenth of the users trained a round): mean and range over "
                    "3 seeds", fontsize=9)  # fmt: skip
    save_figure(figure, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--runs", default="results/dp-ftrl/runs")
    parser.add_argument("--out", default="results/dp-ftrl")
    parser.add_argument("--record", default=None)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--deadline", type=float, default=7200.0)
    parser.add_argument("--only", default=None)
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    if args.train:
        train(Path(args.runs), args.parallel, args.deadline, only)
    table(Path(args.runs), Path(args.out), Path(args.record) if args.record else None)


if __name__ == "__main__":
    main()
