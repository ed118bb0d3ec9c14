"""Private models at deployment scale (issue 34): FedUV and FedHide under user-level DP with the
noise of deployment cohorts of M = 1,000 and 5,000 from N = 10⁶ users (``--dp-noise-cohort``,
pfl-research's ``noise_cohort_size``: simulated deployment scale), FedUV scored both by its
codewords and by enrollment, the membership EER floor of each run, and one point confirmed with
a real cohort of 1,000.

The population is the privacy curve's (``privacy_curve.py --scale dp``): 1,000 known users of the
1,250-speaker synth-voices, cohorts of m = 100 (q = 0.1). FedUV its 800-round recipe, FedHide 100
rounds; central DP (the sum of the distributed shares has the same law) with adaptive clipping
from C = 0.1. The real-cohort point trains every one of the 1,000 users in every round (q = 1);
its simulated twin trains m = 100 with the noise of M = 1,000 at q = 1, so both carry the same
z = 6.9 and the same noise on the mean.

    python benchmarks/deployment_dp.py --train [--device cuda] [--parallel 8] [--deadline 3600]
                                       [--only uv-e4-sim5000,uv-e2-sim5000]
    python benchmarks/deployment_dp.py --runs DIR [--out results/deployment-dp]
                                       [--record docs/figures/privacy-deployment.json]

``--train`` runs each missing run (``uvtrain run``, one process per run, ``--parallel`` at a
time; a run past ``--deadline`` seconds is stopped and tabled from its last ``--eval-every``
line, marked partial). Without ``--train`` the runs in ``--runs`` are tabled: ``OUT/
deployment-dp.md``, ``OUT/deployment-dp.json`` and ``OUT/deployment-dp.png``; with ``--record
FILE``, beside the runs that FILE holds from earlier sessions (the device's run folders do not
outlive a session), and FILE is updated with the runs in ``--runs``. The ε of a
simulated-deployment row is the deployment's: users of the simulation itself take part in
a round 100 times as often as a deployment's would (q = 0.1 against 0.001), so their own privacy
is far weaker than the stated ε, and a codeword figure of such a run is no prediction of a
deployment's (docs/privacy.md, "Simulated deployment scale").
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

from _runs import method_label
from seeds_table import mean_range

from uvtrain.accounting import membership_eer_floor
from uvtrain.io import save_figure, write_json

#: The population (privacy_curve.py's ``dp`` scale) and each method's recipe.
COMMON = ["--clients", "1000", "--batch-size", "16", "--server-optimizer", "sgd",
          "--server-lr", "1"]  # fmt: skip
#: Seeds beyond the first: run NAME-sS is NAME with ``--seed S`` (NAME itself is seed 0).
SEEDS = (1, 2)
RECIPES = {
    "fedhide": ["--method", "fedhide", "--rounds", "100", "--lr", "0.1", "--lr-decay", "0"],
    "feduv": [
        "--method",
        "feduv",
        "--rounds",
        "800",
        "--lr",
        "0.5",
        "--lr-decay",
        "0.005",
        "--eval-every",
        "100",
    ],  # fmt: skip
}
MECHANISM = ["--dp", "central", "--adaptive-clipping", "--clip-norm", "0.1"]
DEPLOYMENT_POPULATION = 1_000_000
#: The no-DP run each DP run is compared with: the same method and real cohort.
BASELINE = {("fedhide", 0.1): "hide-off-m100", ("fedhide", 1.0): "hide-off-m1000",
            ("feduv", 0.1): "uv-off-m100"}  # fmt: skip


def runs() -> dict[str, list[str]]:
    """Every run by name, in the order they are trained (the confirmation first)."""
    table = {
        "hide-off-m1000": ["fedhide", "--fraction", "1.0"],
        "hide-e8-real1000": ["fedhide", "--fraction", "1.0", *MECHANISM, "--dp-epsilon", "8"],
        "hide-e8-sim1000q1": [
            "fedhide",
            "--fraction",
            "0.1",
            *MECHANISM,
            "--dp-epsilon",
            "8",
            "--dp-noise-cohort",
            "1000",
            "--dp-population",
            "1000",
        ],  # fmt: skip
        "hide-off-m100": ["fedhide", "--fraction", "0.1"],
        "uv-off-m100": ["feduv", "--fraction", "0.1"],
    }
    for epsilon in ("8", "2", "4"):
        for cohort in ("1000", "5000"):
            for method, short in (("feduv", "uv"), ("fedhide", "hide")):
                table[f"{short}-e{epsilon}-sim{cohort}"] = [
                    method, "--fraction", "0.1", *MECHANISM, "--dp-epsilon", epsilon,
                    "--dp-noise-cohort", cohort, "--dp-population", str(DEPLOYMENT_POPULATION),
                ]  # fmt: skip
    for name, spec in list(table.items()):
        for seed in SEEDS:
            table[f"{name}-s{seed}"] = [*spec, "--seed", str(seed)]
    return table


def seed_of(spec: list[str]) -> int:
    """The seed a run's spec names (0 when it names none)."""
    return int(spec[spec.index("--seed") + 1]) if "--seed" in spec else 0


def command(name: str, spec: list[str], data: str, device: str, folder: Path) -> list[str]:
    method, *options = spec
    program = "import sys; from uvtrain.entry import main; sys.exit(main())"
    seed = [] if "--seed" in options else ["--seed", "0"]
    return [sys.executable, "-c", program, "run", "--dataset", data, *COMMON, *RECIPES[method],
            *options, *seed, "--device", device, "--out", str(folder / name)]  # fmt: skip


def train(
    folder: Path, device: str, parallel: int, deadline: float, only: set[str] | None = None
) -> None:
    """Run every missing run (of ``only``, where given), ``parallel`` at a time, each stopped
    at the deadline."""
    from uvtrain.data.registry import build_dataset, dataset_path

    data = dataset_path("synth-voices", seed=0, speakers=1250)
    if not data.is_file():
        data = build_dataset("synth-voices", seed=0, speakers=1250)
    folder.mkdir(parents=True, exist_ok=True)
    end = time.monotonic() + deadline

    def one(item: tuple[str, list[str]]) -> str:
        name, spec = item
        if (folder / name / "report.json").is_file():
            return f"{name}: done before"
        left = end - time.monotonic()
        if left < 20:
            return f"{name}: not started (deadline)"
        started = time.monotonic()
        with open(folder / f"{name}.log", "w") as log:
            process = subprocess.Popen(command(name, spec, str(data), device, folder),
                                       stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)  # fmt: skip
            try:
                status = process.wait(timeout=left)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
                status = "stopped at the deadline"
        return f"{name}: {status} after {time.monotonic() - started:.0f} s"

    with ThreadPoolExecutor(parallel) as pool:
        chosen = [(n, spec) for n, spec in runs().items() if only is None or n in only]
        for line in pool.map(one, chosen):
            print(line, flush=True)


def _last_eval(folder: Path) -> tuple[int, dict[str, float]] | None:
    """The last ``--eval-every`` line of an unfinished run: its round and EERs."""
    path = folder / "metrics.jsonl"
    if not path.is_file():
        return None
    last = None
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("eer"):
            last = (int(entry["round"]), entry["eer"])
    return last


def _eval_at(folder: Path, round_number: int) -> float | None:
    """A run's enrollment EER on test_known at one ``--eval-every`` round."""
    path = folder / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else []:
        entry = json.loads(line)
        if entry.get("round") == round_number and entry.get("eer"):
            eers = entry["eer"]
            return eers.get("enrollment_test_known", eers.get("test_known"))
    return None


def row(folder: Path, name: str, spec: list[str]) -> dict[str, Any] | None:
    """One run's figures: finished (report.json) or partial (its last evaluation)."""
    method = spec[0]
    fraction = float(spec[spec.index("--fraction") + 1])
    entry: dict[str, Any] = {"run": name, "method": method, "fraction": fraction,
                             "seed": seed_of(spec)}  # fmt: skip
    report_path = folder / name / "report.json"
    config_path = folder / name / "config.json"
    if report_path.is_file():
        report = json.loads(report_path.read_text())
        privacy = report.get("privacy")
        entry["rounds"] = report["rounds"]
        entry["partial"] = False
        splits = report["splits"]
        if method == "feduv":
            enrolled = report["enrollment"]["splits"]
            entry["codeword"] = splits["test_known"]["eer"]
            entry["enrollment"] = enrolled["test_known"]["eer"]
            entry["enrollment_unknown"] = enrolled["unknown"]["eer"]
        else:
            entry["enrollment"] = splits["test_known"]["eer"]
            entry["enrollment_unknown"] = splits["unknown"]["eer"]
        entry["updates_per_s"] = report["throughput"]["client_updates_per_s"]
        entry["device"] = report["throughput"]["device"]
    else:
        last = _last_eval(folder / name)
        if last is None or not config_path.is_file():
            return None
        entry["rounds"], eers = last
        entry["partial"] = True
        entry["codeword"] = eers.get("test_known")
        entry["enrollment"] = eers.get("enrollment_test_known")
        entry["enrollment_unknown"] = eers.get("enrollment_unknown")
        privacy = _privacy_of(folder / name)
    entry["privacy"] = None
    if privacy is not None:
        deployment = privacy.get("simulated_deployment")
        entry["privacy"] = {
            "epsilon": privacy["epsilon"],
            "delta": privacy["delta"],
            "noise_multiplier": privacy["noise_multiplier"],
            "sampling_rate": privacy["sampling_rate"],
            "noise_cohort": deployment["noise_cohort"] if deployment else None,
            "population": deployment["population"] if deployment else privacy["users"],
            "rounds": privacy["rounds"],  # planned: a stopped run's is more than it ran
        }
        _floor(entry)
    return entry


def _floor(entry: dict[str, Any]) -> None:
    """Set the membership EER floor of an entry's stated ε (:func:`uvtrain.privacy.
    membership_eer_floor`, from the PLD since issue 45) and, at simulated deployment scale, of
    the simulation's own users (noise z·m/M at their own rate m/N); the floor is the plan's, so
    a recorded entry is restated from its noise, rate and planned rounds (older records: the
    rounds tabled) without its run."""
    privacy = entry["privacy"]
    rounds = privacy.get("rounds", entry["rounds"])
    privacy["floor"] = membership_eer_floor(
        privacy["noise_multiplier"], privacy["sampling_rate"], rounds
    )
    if privacy["noise_cohort"] is not None:
        scale = entry["fraction"] * 1000 / privacy["noise_cohort"]
        privacy["simulated_floor"] = membership_eer_floor(
            privacy["noise_multiplier"] * scale, entry["fraction"], rounds
        )


def _privacy_of(folder: Path) -> dict[str, Any] | None:
    """A stopped run's plan, made again from its ``config.json`` as ``uvtrain run`` made it."""
    from uvtrain.run import privacy_plan, read_config

    config = read_config(folder)
    plan = privacy_plan(config, config.data.clients)
    return None if plan is None else plan.report()


def _cohort(entry: dict[str, Any]) -> str:
    privacy = entry["privacy"]
    real = round(entry["fraction"] * 1000)
    if privacy is None or privacy["noise_cohort"] is None:
        return f"real {real} of 1,000"
    return (f"simulated deployment: noise of {privacy['noise_cohort']:,} of "
            f"{privacy['population']:,} (trains {real} of 1,000)")  # fmt: skip


def _floors(privacy: dict[str, Any]) -> str:
    """The membership floor of the stated ε, and of the simulation's own users (when they
    differ: simulated deployment scale)."""
    text = _number(privacy["floor"])
    if "simulated_floor" in privacy:
        text += f" / {_number(privacy['simulated_floor'])} as simulated"
    return text


def _number(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def read_record(record: Path | None) -> dict[str, dict[str, Any]]:
    """The runs tabled before, by name (``--record``; none when the file does not exist yet)."""
    if record is None or not record.is_file():
        return {}
    entries = json.loads(record.read_text())
    return {entry["run"]: entry for entry in entries}


def table(folder: Path, out: Path, record: Path | None = None) -> list[dict[str, Any]]:
    """Table the runs in ``folder``; with ``record``, beside the runs it holds from earlier
    sessions (a run in ``folder`` replaces its recorded entry), and write the merged record
    back, so that runs trained in different sessions are tabled and drawn together."""
    recorded = read_record(record)
    measured = {name: e for name, spec in runs().items() if (e := row(folder, name, spec))}
    entries = [measured.get(name) or recorded[name] for name in runs()
               if name in measured or name in recorded]  # fmt: skip
    by_name = {entry["run"]: entry for entry in entries}
    for entry in entries:
        if entry["privacy"] is not None and entry["run"] not in measured:
            _floor(entry)  # a recorded floor restated by today's computation
        suffix = f"-s{entry['seed']}" if entry.get("seed") else ""
        baseline = by_name.get(BASELINE[(entry["method"], entry["fraction"])] + suffix)
        entry["baseline"] = None if baseline is None else baseline["run"]
        if baseline is None or entry["enrollment"] is None or entry["run"] not in measured:
            continue  # a recorded entry keeps the change it was tabled with
        reference = baseline["enrollment"]
        if entry["partial"]:  # the no-DP run at the same round (its --eval-every line)
            reference = _eval_at(folder / baseline["run"], entry["rounds"])
        if reference is not None:
            entry["enrollment_change"] = entry["enrollment"] - reference
    header = ["method", "cohort", "seed", "ε", "δ", "z", "rounds", "codeword EER", "membership floor (stated ε / as simulated)",
              "enrollment EER (test_known)", "change vs no DP", "enrollment EER (unknown)"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for entry in entries:
        privacy = entry["privacy"] or {}
        rounds = f"{entry['rounds']}" + (" (partial)" if entry["partial"] else "")
        change = entry.get("enrollment_change")
        lines.append("| " + " | ".join([
            method_label(entry["method"], bool(privacy)), _cohort(entry), str(entry.get("seed", 0)),
            _number(privacy.get("epsilon"), 2) if privacy else "∞ (off)",
            f"{privacy['delta']:.2g}" if privacy else "–",
            _number(privacy.get("noise_multiplier"), 3) if privacy else "–",
            rounds,
            _number(entry.get("codeword")) if entry["method"] == "feduv" else "–",
            _floors(privacy) if privacy and entry["method"] == "feduv" else "–",
            _number(entry["enrollment"]),
            "–" if change is None or not privacy else f"{change:+.3f}",
            _number(entry["enrollment_unknown"]),
        ]) + " |")  # fmt: skip
    text = "\n".join(lines) + "\n\n" + seed_table(entries)
    out.mkdir(parents=True, exist_ok=True)
    (out / "deployment-dp.md").write_text(text)
    write_json(out / "deployment-dp.json", entries)
    if record is not None:
        write_json(record, entries)
    print(text)
    _figure(entries, out / "deployment-dp.png")
    return entries


def family(name: str) -> str:
    """A run's name without its seed suffix: the runs of one configuration."""
    stem, _, seed = name.rpartition("-s")
    return stem if stem and seed.isdigit() and stem in runs() else name


def _spread(values: list[float]) -> str:
    return mean_range(sum(values) / len(values), min(values), max(values))


def final(entry: dict[str, Any]) -> bool:
    """Whether an entry holds its run's final figures: finished, or stopped after its
    ``--eval-every`` evaluation at the last planned round (the model its report would have
    scored, by both protocols), not before."""
    if not entry["partial"]:
        return True
    spec = runs().get(family(entry["run"]))
    return spec is not None and entry["rounds"] >= _planned_rounds(spec)


def _planned_rounds(spec: list[str]) -> int:
    recipe = RECIPES[spec[0]]
    return int(recipe[recipe.index("--rounds") + 1])


def seed_table(entries: list[dict[str, Any]]) -> str:
    """Each configuration run with more than one seed: the mean and range over its seeds, and
    against its no-DP configuration whether the difference of the means is inside the seeds'
    spread (a tie) or outside it. A run stopped after its last round's evaluation counts
    (:func:`final`); one stopped earlier does not."""
    families: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        if final(entry):
            families.setdefault(family(entry["run"]), []).append(entry)
    header = ["method", "cohort", "ε", "seeds", "enrollment EER (test_known)",
              "enrollment EER (unknown)", "codeword EER", "against no DP"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for group in families.values():
        if len(group) < 2:
            continue
        first = group[0]
        privacy = first["privacy"] or {}
        known = [e["enrollment"] for e in group]
        verdict = "–"
        baseline = families.get(BASELINE[(first["method"], first["fraction"])])
        if privacy and baseline and len(baseline) > 1:
            other = [e["enrollment"] for e in baseline]
            change = sum(known) / len(known) - sum(other) / len(other)
            spread = max(max(known) - min(known), max(other) - min(other))
            verdict = f"{change:+.3f}: " + (
                "a tie (inside the seeds' spread)"
                if abs(change) <= spread
                else "outside the spread"
            )
        codewords = [e["codeword"] for e in group if e.get("codeword") is not None]
        lines.append("| " + " | ".join([
            method_label(first["method"], bool(privacy)), _cohort(first),
            _number(privacy.get("epsilon"), 2) if privacy else "∞ (off)",
            ", ".join(str(e.get("seed", 0)) for e in group), _spread(known),
            _spread([e["enrollment_unknown"] for e in group]),
            _spread(codewords) if codewords else "–", verdict,
        ]) + " |")  # fmt: skip
    if len(lines) == 2:
        return ""
    return "Over seeds (mean, range):\n\n" + "\n".join(lines) + "\n"


def _figure(entries: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7.5, 4.8))
    positions = {math.inf: 0, 8.0: 1, 4.0: 2, 2.0: 3}
    series: dict[tuple[str, str, int], list[tuple[int, float]]] = {}
    floors: dict[int, list[tuple[int, float]]] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:  # a configuration run with several seeds: one point, its mean
        groups.setdefault(family(entry["run"]), []).append(entry)

    def point(x: int, key: str, group: list[dict[str, Any]]) -> tuple:
        values = [e[key] for e in group if e.get(key) is not None]
        mean = sum(values) / len(values)
        return (x, mean, any(e["partial"] for e in group), mean - min(values),
                max(values) - mean)  # fmt: skip

    for group in groups.values():
        entry = group[0]
        privacy = entry["privacy"]
        if entry["fraction"] != 0.1 or (privacy and privacy["noise_cohort"] in (None, 1000)
                                        and privacy["population"] == 1000):  # fmt: skip
            continue  # real-cohort rows and the q = 1 twin are not on this axis
        cohorts = (1000, 5000) if privacy is None else (privacy["noise_cohort"],)
        x = 0 if privacy is None else positions[round(privacy["epsilon"])]
        for cohort in cohorts:
            series.setdefault((entry["method"], "enrollment", cohort), []).append(
                point(x, "enrollment", group)
            )
            if entry["method"] == "feduv" and entry.get("codeword") is not None:
                series.setdefault(("feduv", "codeword", cohort), []).append(
                    point(x, "codeword", group)
                )
                if privacy:
                    floors.setdefault(cohort, []).append((x, privacy["floor"]))
    styles = {"enrollment": "-", "codeword": "--"}
    for (method, protocol, cohort), points in sorted(series.items()):
        points.sort()
        label = (
            f"{method} {'by enrollment' if method == 'feduv' and protocol == 'enrollment' else ''}"
        )
        label = (
            label.strip() + (" by codeword" if protocol == "codeword" else "") + f", M = {cohort:,}"
        )
        xs, ys, _, below, above = zip(*points, strict=True)
        (line,) = axis.plot(xs, ys, styles[protocol], marker="o", label=label)
        if any(below) or any(above):  # the range over seeds
            axis.errorbar(xs, ys, yerr=[below, above], fmt="none", capsize=3,
                          color=line.get_color())  # fmt: skip
        stopped = [(x, y) for x, y, early, *_ in points if early]
        if stopped:  # stopped early: the last --eval-every figure, drawn hollow
            axis.plot(
                *zip(*stopped, strict=True), "o", markerfacecolor="white", color=line.get_color()
            )
    for cohort, points in sorted(floors.items()):
        points.sort()
        axis.plot(
            *zip(*points, strict=True),
            ":",
            color="grey",
            label=f"membership EER floor, M = {cohort:,}",
        )
    axis.set_xticks(range(4), ["∞ (no DP)", "8", "4", "2"])
    axis.set_xlabel("ε (user-level, δ ≈ 2.5·10⁻⁷, deployment of 10⁶ users)")
    axis.set_ylabel("EER on test_known (lower is better)")
    axis.set_title(
        "Simulated deployment scale: 100 of 1,000 users trained per round\n"
        "(hollow: run stopped early, its last evaluation; bars: range over seeds, where 3 ran)",
        fontsize=10,
    )
    axis.legend(fontsize=7)
    save_figure(figure, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--runs", default="results/deployment-dp/runs")
    parser.add_argument("--out", default="results/deployment-dp")
    parser.add_argument(
        "--record",
        help="a JSON record of the runs tabled before: tabled beside --runs and updated",
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--deadline", type=float, default=math.inf, help="seconds")
    parser.add_argument("--only", help="with --train: these runs alone, comma-separated")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    if only and (unknown := only - set(runs())):
        parser.error(
            f"--only {','.join(sorted(unknown))}: no such run (one of {', '.join(runs())})"
        )
    if args.train:
        train(Path(args.runs), args.device, args.parallel, args.deadline, only)
    table(Path(args.runs), Path(args.out), Path(args.record) if args.record else None)


if __name__ == "__main__":
    main()
