"""What an audit writes: ``audit.json`` (every number), ``audit.md`` (the tables), the figures,
and a few lines for the terminal. Every file goes through :mod:`uvtrain.io` (atomic writes).

Nothing written holds a codeword or a prototype: rates, PSNR and SSIM only (and the inversion
figure, whose reconstructions are the point of it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..io import atomic_write, save_figure, write_json

AUDIT_JSON, AUDIT_MD = "audit.json", "audit.md"


def write_results(
    results: dict[str, Any], pictures: dict[str, dict[str, np.ndarray]], folder: Path
) -> None:
    """The figures (their names into ``results["figures"]``), ``audit.json`` and ``audit.md``."""
    folder.mkdir(parents=True, exist_ok=True)
    results["figures"] = write_figures(results, pictures, folder)
    write_json(folder / AUDIT_JSON, results)
    atomic_write(folder / AUDIT_MD, markdown(results))


def _save(figure: Any, path: Path) -> str:
    return save_figure(figure, path).name


def _headline(state: dict[str, Any]) -> str:
    return state["attack"]


def plot_bit_recovery(results: dict[str, Any], path: Path) -> str:
    """Bit agreement against the cohort size (1: a plain update), one line per code length and
    state; the chance level (50 %) and a random guess's best member beside it."""
    from matplotlib.figure import Figure

    states = [s for s in ("initial", "trained") if any(s in v for v in results.values())]
    figure = Figure(figsize=(5.2 * len(states), 4.2), layout="constrained")
    for index, state in enumerate(states):
        axes = figure.add_subplot(1, len(states), index + 1)
        chance_max = []
        for length, entry in results.items():
            if state not in entry:
                continue
            data = entry[state]
            attack = _headline(data)
            sizes = [1] + [int(m) for m in data["cohorts"]]
            means = [data["plain"][attack]["mean"]]
            maxes = [data["plain"][attack]["mean"]]
            for m in data["cohorts"]:
                means.append(data["cohorts"][m][attack]["mean"])
                maxes.append(data["cohorts"][m][attack]["max"])
                chance_max.append((int(m), data["cohorts"][m]["random guess"]["max"]))
            (line,) = axes.plot(sizes, [100 * v for v in means], "o-", label=f"c = {length}, mean")
            axes.plot(
                sizes,
                [100 * v for v in maxes],
                "^:",
                color=line.get_color(),
                label=f"c = {length}, best member",
            )
        if chance_max:
            chance_max.sort()
            sizes = sorted({m for m, _ in chance_max})
            values = [np.mean([v for m2, v in chance_max if m2 == m]) for m in sizes]
            axes.plot(
                sizes,
                [100 * v for v in values],
                "x--",
                color="grey",
                label="random guess, best member",
            )
        axes.axhline(50, color="black", linestyle="--", linewidth=1, label="chance (50 %)")
        axes.set_xscale("log")
        axes.set_xlabel("clients in the secure aggregate (1: a plain update)")
        axes.set_ylabel("codeword bits recovered (%)")
        axes.set_ylim(40, 102)
        axes.set_title(f"FedUV codeword bits, {state} model")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=7)
    return _save(figure, path)


def plot_disaggregation(results: dict[str, Any], path: Path) -> str:
    """Bit agreement and exact recovery against the number of secure aggregates observed."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.0, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for length, entry in results.items():
        if "disaggregation" not in entry:
            continue
        rounds = entry["disaggregation"]["rounds"]
        xs = [int(r) for r in rounds]
        (line,) = axes.plot(
            xs, [100 * rounds[r]["mean"] for r in rounds], "o-", label=f"c = {length}, bits"
        )
        axes.plot(
            xs,
            [100 * rounds[r]["exact"] for r in rounds],
            "s:",
            color=line.get_color(),
            label=f"c = {length}, whole codewords",
        )
    axes.axhline(50, color="black", linestyle="--", linewidth=1, label="chance (bits)")
    axes.set_xlabel("training rounds observed (secure aggregates, membership known)")
    axes.set_ylabel("recovered (%)")
    axes.set_ylim(-2, 102)
    axes.set_title("FedUV codewords from SecAgg+ aggregates over rounds")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7)
    return _save(figure, path)


def plot_leakage(leakage: dict[str, Any], path: Path) -> str:
    """P_leak per method, with a proxy that says nothing (1/C) marked."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.0, 4.0), layout="constrained")
    axes = figure.add_subplot()
    names = list(leakage)
    values = [leakage[n]["p_leak"] for n in names]
    bars = axes.bar(names, values, color="tab:red")
    for bar, value in zip(bars, values, strict=True):
        axes.text(bar.get_x() + bar.get_width() / 2, value + 0.01, f"{value:.3f}", ha="center")
    chance = leakage[names[0]]["chance"]
    axes.axhline(chance, color="black", linestyle="--", linewidth=1, label=f"1/C = {chance:.3f}")
    axes.set_ylim(0, 1.08)
    axes.set_ylabel("prototype leakage P_leak")
    rounds = leakage[names[0]]["rounds"]
    axes.set_title(f"What the server can match to each client ({rounds} rounds)")
    axes.legend()
    return _save(figure, path)


def plot_inversion(
    inversion: dict[str, Any], pictures: dict[str, dict[str, np.ndarray]], path: Path
) -> str:
    """Rows: model states (and images of the batch); columns: original, mean public face, the
    reconstruction from the plain update and from each secure aggregate, PSNR/SSIM in titles."""
    from matplotlib.figure import Figure

    rows = [(state, i) for state in pictures for i in range(len(pictures[state]["original"]))]
    columns = list(pictures[rows[0][0]])
    figure = Figure(figsize=(1.9 * len(columns), 2.1 * len(rows) + 0.3), layout="constrained")
    grid = figure.subplots(len(rows), len(columns), squeeze=False)
    for r, (state, i) in enumerate(rows):
        for c, name in enumerate(columns):
            axes = grid[r][c]
            image = pictures[state][name][i]
            axes.imshow(
                image[..., 0] if image.shape[-1] == 1 else image, cmap="gray", vmin=0, vmax=1
            )
            axes.set_xticks([])
            axes.set_yticks([])
            if name == "original":
                title = f"{state} (round {inversion[state]['round']})\noriginal"
            elif name == "public mean face":
                base = inversion[state]["baselines"]["public_mean_face"]
                title = f"public mean face\n{base['psnr']:.1f} dB / {base['ssim']:.2f}"
            else:
                entry = inversion[state]["updates"][name]
                title = f"{name}\n{entry['psnr']:.1f} dB / {entry['ssim']:.2f}"
            axes.set_title(title, fontsize=8)
    figure.suptitle("Gradient inversion: PSNR / SSIM against the target's image", fontsize=9)
    return _save(figure, path)


def write_figures(
    results: dict[str, Any], pictures: dict[str, dict[str, np.ndarray]], folder: Path
) -> list[str]:
    """Every figure the results support, as PNG files in ``folder``; their names."""
    written = []
    bits = results.get("bit_recovery")
    if bits:
        written.append(plot_bit_recovery(bits, folder / "bit_recovery.png"))
        if any("disaggregation" in entry for entry in bits.values()):
            written.append(plot_disaggregation(bits, folder / "disaggregation.png"))
    leakage = {k: v for k, v in (results.get("leakage") or {}).items() if v["p_leak"] is not None}
    if leakage:
        written.append(plot_leakage(leakage, folder / "leakage.png"))
    if pictures:
        written.append(plot_inversion(results["inversion"], pictures, folder / "inversion.png"))
    return written


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def markdown(results: dict[str, Any]) -> str:
    """``audit.md``: the figures of ``audit.json`` as tables."""
    lines = ["# Privacy audit (honest-but-curious server)", ""]
    setup = results.get("setup", {})
    where = results.get("run_dir") or "a fresh setup"
    secagg = results["secagg"]
    max_weight = secagg["max_weight"] or "the cohort's largest sample count × 1.01"
    lines += [
        f"{setup.get('method')} on {setup.get('dataset')} ({where}); SecAgg+ modelled as Flower's "
        f"on the clients' {secagg['inputs']} (clip ±{secagg['clipping_range']}, 2^22 levels, "
        f"max_weight {max_weight}).",
        "",
    ]
    for length, entry in (results.get("bit_recovery") or {}).items():
        for state in ("initial", "trained"):
            if state not in entry:
                continue
            data = entry[state]
            attack = data["attack"]
            lines += [
                f"## FedUV codeword bits, c = {length}, {state} model (round {data['round']}, "
                f"attack `{attack}`)",
                "",
                "| observed update | bits, mean | bits, best member | whole codeword (raw) | "
                "whole codeword (BCH-decoded) | random guess, best member |",
                "|---|---|---|---|---|---|",
            ]
            plain = data["plain"][attack]
            lines.append(
                f"| one client, plain ({data['clients']} clients) | {_percent(plain['mean'])} | "
                f"min {_percent(plain['min'])} | {_percent(plain['exact'])} | "
                f"{_percent(plain['exact_decoded'])} | — |"
            )
            for size, cohort in data["cohorts"].items():
                scores = cohort[attack]
                lines.append(
                    f"| SecAgg+ of {size} | {_percent(scores['mean'])} | {_percent(scores['max'])} "
                    f"| {_percent(scores['exact'])} | {_percent(scores['exact_decoded'])} | "
                    f"{_percent(cohort['random guess']['max'])} |"
                )
            other = [a for a in data["plain"] if a != attack]
            for name in other:
                lines.append("")
                lines.append(
                    f"Attack `{name}` on the plain updates: {_percent(data['plain'][name]['mean'])}."
                )
            lines.append("")
        if "disaggregation" in entry:
            info = entry["disaggregation"]
            lines += [
                f"## FedUV c = {length}: SecAgg+ aggregates over rounds (cohorts of "
                f"{info['cohort']}, membership known to the server)",
                "",
                "| rounds observed | clients seen | bits | whole codeword (raw) | (BCH-decoded) |",
                "|---|---|---|---|---|",
            ]
            for rounds, scores in info["rounds"].items():
                lines.append(
                    f"| {rounds} | {_percent(scores['clients_seen'])} | {_percent(scores['mean'])} "
                    f"| {_percent(scores['exact'])} | {_percent(scores['exact_decoded'])} |"
                )
            lines.append("")
    leakage = results.get("leakage")
    if leakage:
        lines += [
            "## Prototype leakage",
            "",
            "| method | P_leak | 1/C | rounds |",
            "|---|---|---|---|",
        ]
        for method, entry in leakage.items():
            value = "—" if entry["p_leak"] is None else f"{entry['p_leak']:.3f}"
            lines.append(f"| {method} | {value} | {entry['chance']:.3f} | {entry['rounds']} |")
        lines.append("")
    inversion = results.get("inversion")
    if inversion and "skipped" not in inversion:
        lines += [
            "## Gradient inversion (PSNR dB / SSIM against the target's image)",
            "",
            "| model | observed update | PSNR | SSIM | best member PSNR | FedUV bits used |",
            "|---|---|---|---|---|---|",
        ]
        for state, data in inversion.items():
            for name, base in data["baselines"].items():
                lines.append(
                    f"| {state} (round {data['round']}) | baseline: {name.replace('_', ' ')} | "
                    f"{base['psnr']:.2f} | {base['ssim']:.3f} | — | — |"
                )
            for name, entry in data["updates"].items():
                used = entry.get("codeword_bits_used")
                lines.append(
                    f"| {state} (round {data['round']}) | {name} | {entry['psnr']:.2f} | "
                    f"{entry['ssim']:.3f} | {entry['best_member_psnr']:.2f} | {_percent(used)} |"
                )
        lines.append("")
    elif inversion:
        lines += [f"Gradient inversion: skipped ({inversion['skipped']}).", ""]
    lines.append(f"Figures: {', '.join(results.get('figures', [])) or 'none'}.")
    return "\n".join(lines) + "\n"


def summary_lines(results: dict[str, Any]) -> list[str]:
    """A few lines for the terminal."""
    lines = []
    for length, entry in (results.get("bit_recovery") or {}).items():
        for state in ("initial", "trained"):
            if state not in entry:
                continue
            data = entry[state]
            attack = data["attack"]
            cohorts = ", ".join(
                f"{m}: {_percent(v[attack]['mean'])} (best {_percent(v[attack]['max'])})"
                for m, v in data["cohorts"].items()
            )
            lines.append(
                f"feduv c={length} {state} (round {data['round']}): plain update "
                f"{_percent(data['plain'][attack]['mean'])} of bits [{attack}]; SecAgg+ {cohorts}"
            )
        if "disaggregation" in entry:
            last = list(entry["disaggregation"]["rounds"].items())[-1]
            lines.append(
                f"feduv c={length}: {last[0]} secure aggregates, least squares: "
                f"{_percent(last[1]['mean'])} of bits, {_percent(last[1]['exact'])} whole codewords"
            )
    for method, entry in (results.get("leakage") or {}).items():
        if entry["p_leak"] is not None:
            lines.append(f"{method}: P_leak {entry['p_leak']:.3f} (1/C = {entry['chance']:.3f})")
    inversion = results.get("inversion") or {}
    for state, data in inversion.items():
        if not isinstance(data, dict):
            continue
        parts = ", ".join(
            f"{name} {v['psnr']:.1f} dB / {v['ssim']:.2f}" for name, v in data["updates"].items()
        )
        lines.append(f"inversion {data['method']} {state}: {parts}")
    return lines
