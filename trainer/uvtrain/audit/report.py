"""What an audit writes: ``audit.json`` (every number), ``audit.md`` (the tables), the figures,
and a few lines for the terminal. Every file goes through :mod:`uvtrain.io` (atomic writes).

Nothing written holds a codeword or a prototype: rates, PSNR and SSIM only (and the inversion
figure, whose reconstructions are the point of it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..io import atomic_write, save_figure, write_json

AUDIT_JSON, AUDIT_MD = "audit.json", "audit.md"
#: The figure of the disaggregation against the training run's ``ε`` (several DP settings).
LEAKAGE_VS_EPSILON = "leakage_vs_epsilon.png"


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


def dp_label(dp: dict[str, Any] | None) -> str:
    """A privacy report (``PrivacyPlan.report()``) in a few words: ``no DP`` or
    ``distributed DP ε = 8 (z = 0.87, C = 1)``."""
    if dp is None:
        return "no DP"
    return (
        f"{dp['mechanism']} DP ε = {dp['epsilon']:.2g} (z = {dp['noise_multiplier']:.3g}, "
        f"C = {dp['clip_norm']:.3g})"
    )


def _runs(entries: list[dict[str, Any]]) -> dict[tuple[int, str], list[dict[str, Any]]]:
    """The disaggregation entries by secure run: (code length, its DP as JSON) → checkpoints."""
    runs: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for entry in entries:
        key = (entry["code_length"], json.dumps(entry["dp"], sort_keys=True))
        runs.setdefault(key, []).append(entry)
    return runs


def plot_disaggregation(entries: list[dict[str, Any]], path: Path) -> str:
    """Bit agreement and exact recovery against the number of secure aggregates observed, one
    pair of lines per secure run (code length and differential privacy)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.6, 4.4), layout="constrained")
    axes = figure.add_subplot()
    for (length, _), run in _runs(entries).items():
        xs = [entry["rounds"] for entry in run]
        label = f"c = {length}, {dp_label(run[0]['dp'])}"
        (line,) = axes.plot(xs, [100 * e["bits"] for e in run], "o-", label=f"{label}: bits")
        axes.plot(
            xs,
            [100 * e["whole_raw"] for e in run],
            "s:",
            color=line.get_color(),
            label=f"{label}: whole codewords",
        )
    axes.axhline(50, color="black", linestyle="--", linewidth=1, label="chance (bits)")
    axes.set_xlabel("training rounds observed (secure aggregates, membership known)")
    axes.set_ylabel("recovered (%)")
    axes.set_ylim(-2, 102)
    axes.set_title("FedUV codewords from SecAgg+ aggregates over rounds")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=6)
    return _save(figure, path)


def plot_leakage_vs_epsilon(entries: list[dict[str, Any]], path: Path) -> str:
    """What the disaggregation recovers after the last observed round against the run's ``ε``
    (log scale; no DP drawn at the right as "off"), one colour per code length: bits, whole
    codewords raw and BCH-decoded."""
    from matplotlib.figure import Figure

    last = [run[-1] for run in _runs(entries).values()]
    finite = [e["dp"]["epsilon"] for e in last if e["dp"] is not None]
    off = 2.0 * max(finite) if finite else 1.0

    def x_of(entry: dict[str, Any]) -> float:
        return off if entry["dp"] is None else entry["dp"]["epsilon"]

    figure = Figure(figsize=(6.2, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for length in sorted({e["code_length"] for e in last}):
        points = sorted((e for e in last if e["code_length"] == length), key=x_of)
        xs = [x_of(e) for e in points]
        (line,) = axes.plot(
            xs, [100 * e["bits"] for e in points], "o-", label=f"c = {length}, bits"
        )
        axes.plot(
            xs,
            [100 * e["whole_raw"] for e in points],
            "s:",
            color=line.get_color(),
            label=f"c = {length}, whole codewords (raw)",
        )
        if all(e["whole_decoded"] is not None for e in points):
            axes.plot(
                xs,
                [100 * e["whole_decoded"] for e in points],
                "^--",
                color=line.get_color(),
                label=f"c = {length}, whole codewords (decoded)",
            )
    axes.axhline(50, color="black", linestyle="--", linewidth=1, label="chance (bits)")
    axes.set_xscale("log")
    ticks = sorted(set(finite))
    axes.set_xticks([*ticks, off], [*(f"{value:.2g}" for value in ticks), "off"])
    axes.minorticks_off()
    mechanisms = sorted({e["dp"]["mechanism"] for e in last if e["dp"] is not None})
    axes.set_xlabel(f"ε of the training run ({', '.join(mechanisms) or 'no'} DP)")
    axes.set_ylabel("recovered after the last round (%)")
    axes.set_ylim(-2, 102)
    rounds = max(e["rounds"] for e in last)
    axes.set_title(f"FedUV codewords from {rounds} SecAgg+ aggregates against ε")
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
    entries = results.get("disaggregation")
    if entries:
        written.append(plot_disaggregation(entries, folder / "disaggregation.png"))
        if len({json.dumps(e["dp"], sort_keys=True) for e in entries}) > 1:
            written.append(plot_leakage_vs_epsilon(entries, folder / LEAKAGE_VS_EPSILON))
    leakage = {k: v for k, v in (results.get("leakage") or {}).items() if v["p_leak"] is not None}
    if leakage:
        written.append(plot_leakage(leakage, folder / "leakage.png"))
    if pictures:
        written.append(plot_inversion(results["inversion"], pictures, folder / "inversion.png"))
    return written


def _release(release: dict[str, Any] | None) -> str:
    """FedGN's proxy as a Gaussian mechanism: its ε per proxy and over the median client's."""
    if not release:
        return "—"
    return (
        f"ε {release['epsilon_one_release']:.3g} per proxy, "
        f"{release['epsilon_median']:.3g} over {release['releases_median']} "
        f"(δ {release['delta']:.2g})"
    )


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
    if any(entry["dp"] is not None for entry in results.get("disaggregation") or []):
        lines += [
            "Under differential privacy each client's update is clipped (and, distributed, "
            "noised) before SecAgg+ quantises it, every member weighs the same, and with central "
            "DP the server adds its noise to the sum it unmasks.",
            "",
        ]
    for length, entry in (results.get("bit_recovery") or {}).items():
        for state in ("initial", "trained"):
            if state not in entry:
                continue
            data = entry[state]
            attack = data["attack"]
            trained_with = f", {dp_label(data['dp'])}" if "dp" in data else ""
            lines += [
                f"## FedUV codeword bits, c = {length}, {state} model (round {data['round']}"
                f"{trained_with}, attack `{attack}`)",
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
    entries = results.get("disaggregation")
    if entries:
        lines += [
            "## FedUV codewords from SecAgg+ aggregates over rounds (least squares, membership "
            "known to the server)",
            "",
            "| c | differential privacy | rounds observed | ε spent | cohort | clients seen | bits "
            "| whole codeword (raw) | (BCH-decoded) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for entry in entries:
            spent = "—" if entry["epsilon_spent"] is None else f"{entry['epsilon_spent']:.3g}"
            lines.append(
                f"| {entry['code_length']} | {dp_label(entry['dp'])} | {entry['rounds']} | "
                f"{spent} | {entry['cohort']} | {_percent(entry['clients_seen'])} | "
                f"{_percent(entry['bits'])} | {_percent(entry['whole_raw'])} | "
                f"{_percent(entry['whole_decoded'])} |"
            )
        lines.append("")
    leakage = results.get("leakage")
    if leakage:
        lines += [
            "## Prototype leakage",
            "",
            "| method | P_leak | 1/C | rounds | ε of the message as a Gaussian mechanism |",
            "|---|---|---|---|---|",
        ]
        for method, entry in leakage.items():
            value = "—" if entry["p_leak"] is None else f"{entry['p_leak']:.3f}"
            lines.append(
                f"| {method} | {value} | {entry['chance']:.3f} | {entry['rounds']} | "
                f"{_release(entry.get('release_dp'))} |"
            )
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
            trained_with = f", trained with {dp_label(data['dp'])}" if "dp" in data else ""
            lines.append(
                f"feduv c={length} {state} (round {data['round']}{trained_with}): plain update "
                f"{_percent(data['plain'][attack]['mean'])} of bits [{attack}]; SecAgg+ {cohorts}"
            )
    participations = results["settings"].get("participations")
    if participations is not None and results.get("disaggregation"):
        lines.append(
            f"secure runs of one client a round, each client in exactly {participations} "
            "(--participations): their noise is z's; their ε is the accountant's for Poisson "
            "sampling at q = 1/K, not this schedule's"
        )
    for (length, _), run in _runs(results.get("disaggregation") or []).items():
        last = run[-1]
        decoded = ""
        if last["whole_decoded"] is not None:
            decoded = f" ({_percent(last['whole_decoded'])} decoded)"
        lines.append(
            f"feduv c={length}, {dp_label(last['dp'])}: {last['rounds']} secure aggregates, "
            f"least squares: {_percent(last['bits'])} of bits, {_percent(last['whole_raw'])} "
            f"whole codewords{decoded}"
        )
    for method, entry in (results.get("leakage") or {}).items():
        if entry["p_leak"] is not None:
            line = f"{method}: P_leak {entry['p_leak']:.3f} (1/C = {entry['chance']:.3f})"
            if entry.get("release_dp"):
                line += f"; its proxy {_release(entry['release_dp'])}"
            lines.append(line)
    inversion = results.get("inversion") or {}
    for state, data in inversion.items():
        if not isinstance(data, dict):
            continue
        parts = ", ".join(
            f"{name} {v['psnr']:.1f} dB / {v['ssim']:.2f}" for name, v in data["updates"].items()
        )
        lines.append(f"inversion {data['method']} {state}: {parts}")
    return lines
