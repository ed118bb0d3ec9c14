"""The codeword audit at deployment-scale noise (issue 34): an upper bound, measured on a CPU, on
what §1's least squares recover from a FedUV deployment with central (or distributed) DP.

A deployment's server sees, each round, the sum of its cohort's clipped updates (each of norm at
most C) plus N(0, (z·C)²) in every coordinate. For the attacker the other members of a cohort
are interference the least squares remove at best; what limits the recovery of one user's
codeword is that user's clipped update against the noise z·C, and the number n of rounds it
takes part in. So this audits a small population more exposed than any deployment user:
``--clients`` K users, one user a round and each in exactly n rounds (``uvtrain audit
--participations n``: n·K rounds, a membership matrix the least squares invert exactly), central
DP with the noise multiplier z of the deployment, on the sum (not scaled by m/M:
``--dp-noise-cohort`` is not used). z is what ``uvtrain run --dp-epsilon ε --dp-noise-cohort 1000
--dp-population 1000000 --rounds 800`` plans (:func:`uvtrain.privacy.plan_privacy`): the ε of a
row is the deployment's, whose user takes part in q·R = 0.001 × 800 = 0.8 rounds on average.

    python benchmarks/deployment_audit.py --dataset PATH.npz [--clients 96]
        [--epsilons 8,4,2] [--participations 1,2,5,10] [--reach 30] [--out DIR] [--figure PNG]

Writes ``OUT/deployment-audit.md`` (the table), ``OUT/deployment-audit.json`` and the figure
(recovery against n, one line per ε); each audit's own folder is ``OUT/audits/``, and an audit
whose folder holds its ``audit.json`` is read back, not run again.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from uvtrain.config import Privacy
from uvtrain.io import read_json, save_figure, write_json
from uvtrain.privacy import plan_privacy

#: The deployment whose noise is audited (docs/privacy.md, "Simulated deployment scale").
DEPLOYMENT = {"cohort": 1000, "population": 1_000_000, "rounds": 800, "clip_norm": 1.0}
#: FedUV's audit settings (docs/privacy.md §5's audit commands), one code length.
CODE_LENGTH = 127
#: The server's step: FedUV's server lr 5 over the deployment's cohort, so that each audited
#: round moves the model by the deployment's noise ``5·N(0, (z·C)²)/1,000`` (and one user's
#: update over 1,000), not by 1,000 times more: a cohort of one divided by its expected size 1
#: would bury the model in noise within rounds, and its updates would no longer carry what a
#: deployment's do. The attacker's signal-to-noise ratio does not depend on this scale.
SERVER_LR = 5.0 / DEPLOYMENT["cohort"]
#: Errors BCH(127, 64) corrects (d_min 21): what the audit's hard decoding forgives.
CORRECTABLE = 10


def deployment_plan(epsilon: float) -> Any:
    """The deployment's privacy plan at ``epsilon``: cohorts of 1,000 from 10⁶ users over 800
    rounds, as ``uvtrain run --dp-noise-cohort 1000 --dp-population 1000000`` plans it (the
    simulation's own 100 of 1,000 only scale the noise it adds, not z)."""
    return plan_privacy(
        Privacy(
            "central",
            clip_norm=DEPLOYMENT["clip_norm"],
            dp_epsilon=epsilon,
            dp_noise_cohort=DEPLOYMENT["cohort"],
            dp_population=DEPLOYMENT["population"],
        ),
        rounds=DEPLOYMENT["rounds"],
        cohort=100,
        users=1000,
    )


def normal_cdf(value: float) -> float:
    return 0.5 * math.erfc(-value / math.sqrt(2))


def binomial_at_most(trials: int, errors: int, probability: float) -> float:
    """``P(Binomial(trials, probability) ≤ errors)``."""
    return sum(
        math.comb(trials, k) * probability**k * (1 - probability) ** (trials - k)
        for k in range(errors + 1)
    )


def ceiling(noise: float, participations: int, length: int = CODE_LENGTH) -> dict[str, float]:
    """What the same attack recovers if a user's whole clipped update (norm C) carried its
    codeword along the attacker's direction ``ḡ``, ``C/√c`` on each bit: per-bit signal-to-noise
    ``√n / (z√c)`` after n rounds alone, bits right with ``Φ(√n/(z√c))``, a whole codeword raw
    with that to the power c, decoded when at most :data:`CORRECTABLE` bits are wrong."""
    if noise == 0:
        return {"bits": 1.0, "whole_raw": 1.0, "whole_decoded": 1.0}
    right = normal_cdf(math.sqrt(participations) / (noise * math.sqrt(length)))
    return {
        "bits": right,
        "whole_raw": right**length,
        "whole_decoded": binomial_at_most(length, CORRECTABLE, 1 - right),
    }


def chance(clients: int, length: int = CODE_LENGTH) -> dict[str, float]:
    """Chance levels: bits 50 % (± two standard deviations of K·c coin flips); a random word is
    a given codeword with ``2^−c``, and decodes to it with ``Σ_{i ≤ t} C(c, i) / 2^c``."""
    return {
        "bits": 0.5,
        "bits_band": 2 * 0.5 / math.sqrt(clients * length),
        "whole_raw": 2.0**-length,
        "whole_decoded": sum(math.comb(length, i) for i in range(CORRECTABLE + 1)) / 2.0**length,
    }


def audit_once(
    dataset: str, clients: int, participations: int, noise: float | None, out: Path
) -> dict[str, Any]:
    """One ``uvtrain audit --participations n`` (central DP with multiplier ``noise``; ``None``:
    no DP); the least squares after the last round and the trained model's plain-update bits."""
    from uvtrain.audit import AUDIT_JSON, resolve, run_audit

    given: dict[str, Any] = {
        "method": "feduv",
        "dataset": dataset,
        "clients": clients,
        "participations": participations,
        "lr": 0.5,
        "lr_decay": 0.005,
        "methods": "none",
        "inversion": False,
        "code_lengths": str(CODE_LENGTH),
        "cohorts": "none",
        "seed": 0,
        "dp": "off" if noise is None else "central",
        "dp_noise_multiplier": noise,
        "clip_norm": None if noise is None else DEPLOYMENT["clip_norm"],
    }
    if (out / AUDIT_JSON).is_file():  # audited before: read back, not rerun
        results = read_json(out / AUDIT_JSON)
    else:
        out.mkdir(parents=True, exist_ok=True)
        schedule = out / "deployment-step.toml"
        schedule.write_text(f"server_lr = {SERVER_LR!r}\n")
        config, settings = resolve(None, {**given, "config": schedule})
        if config is None or config.schedule.server_lr != SERVER_LR:
            raise SystemExit(f"the audit did not take the server's step {SERVER_LR}")
        results = run_audit(out, config=config, settings=settings, progress=False)
    last = results["disaggregation"][-1]
    trained = results["bit_recovery"][str(CODE_LENGTH)]["trained"]
    return {
        "rounds": last["rounds"],
        "clients_seen": last["clients_seen"],
        "cohort": last["cohort"],
        "bits": last["bits"],
        "whole_raw": last["whole_raw"],
        "whole_decoded": last["whole_decoded"],
        "noise_on_sum": None if last["dp"] is None else last["dp"]["noise_multiplier"],
        "trained_plain_bits": trained["plain"][trained["attack"]]["mean"],
        "seconds": results["seconds"]["total"],
    }


def grid(epsilons: list[float], participations: list[int], reach: list[int]) -> list[tuple]:
    """(ε, n) of every audit: no DP at n = 1 (the attack's reference), each ε at each n, and the
    ``reach`` counts at the first (largest) ε only."""
    points: list[tuple] = [(math.inf, 1)]
    points += [(epsilon, n) for epsilon in epsilons for n in participations]
    points += [(epsilons[0], n) for n in reach if n not in participations]
    return points


def percent(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f} %"


def tiny(value: float) -> str:
    """A probability that may be astronomically small, as a percentage or a power of ten."""
    return percent(value) if value >= 1e-4 else f"{value:.1e}"


def table(rows: list[dict[str, Any]], clients: int) -> str:
    """The markdown table of the audits and their chance levels."""
    level = chance(clients)
    lines = [
        "| deployment ε | z (on the sum) | n (rounds each user takes part in, alone) | rounds "
        "| bits | whole raw | whole decoded | ceiling: bits / decoded | trained plain bits |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        epsilon = "∞ (no DP)" if math.isinf(row["epsilon"]) else f"{row['epsilon']:g}"
        noise = "0" if row["noise"] is None else f"{row['noise']:.4f}"
        limit = row["ceiling"]
        lines.append(
            f"| {epsilon} | {noise} | {row['participations']} | {row['rounds']} "
            f"| {percent(row['bits'])} | {percent(row['whole_raw'])} "
            f"| {percent(row['whole_decoded'])} "
            f"| {percent(limit['bits'])} / {tiny(limit['whole_decoded'])} "
            f"| {percent(row['trained_plain_bits'])} |"
        )
    lines.append(
        f"\nChance, {clients} users × {CODE_LENGTH} bits: bits 50 % ± "
        f"{100 * level['bits_band']:.1f} % (2 σ); a whole codeword raw "
        f"{level['whole_raw']:.0e}, decoded {level['whole_decoded']:.0e}."
    )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """Bits and whole codewords (decoded) recovered against n, one colour per ε, with the
    ceiling of the attack (dotted) and chance."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.0, 4.4), layout="constrained")
    axes = figure.add_subplot()
    epsilons = sorted({row["epsilon"] for row in rows if math.isfinite(row["epsilon"])})
    for epsilon in reversed(epsilons):
        mine = sorted(
            (row for row in rows if row["epsilon"] == epsilon), key=lambda r: r["participations"]
        )
        counts = [row["participations"] for row in mine]
        label = f"ε {epsilon:g} (z = {mine[0]['noise']:.3f})"
        (line,) = axes.plot(counts, [100 * r["bits"] for r in mine], "o-", label=f"{label}: bits")
        colour = line.get_color()
        axes.plot(
            counts,
            [100 * r["whole_decoded"] for r in mine],
            "s--",
            color=colour,
            label=f"{label}: whole codewords (decoded)",
        )
        axes.plot(
            counts,
            [100 * r["ceiling"]["bits"] for r in mine],
            ":",
            color=colour,
            label=f"{label}: bits, ceiling (all of C on the code)",
        )
    axes.axhline(50, color="black", linestyle="--", linewidth=1, label="chance (bits)")
    axes.axvline(0.8, color="grey", linewidth=1, label="a deployment user: q·R = 0.8")
    axes.set_xscale("log")
    axes.set_xlabel("n: rounds each user takes part in, alone (membership known)")
    axes.set_ylabel("recovered (%)")
    axes.set_ylim(-2, 102)
    axes.set_title("FedUV codewords at a deployment's noise z (1,000 of 10⁶, 800 rounds)")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=6, loc="center right")
    return save_figure(figure, path)


def parse_list(text: str, kind: type) -> list:
    return [kind(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="synth-voices", help="name or .npz")
    parser.add_argument("--clients", type=int, default=96)
    parser.add_argument("--epsilons", default="8,4,2", help="the deployment's ε, largest first")
    parser.add_argument("--participations", default="1,2,5,10")
    parser.add_argument("--reach", default="30", help="further n, at the first ε only")
    parser.add_argument("--out", type=Path, default=Path("results/deployment-audit"))
    parser.add_argument("--figure", type=Path, default=None, help="default: OUT/…png")
    args = parser.parse_args()
    epsilons = parse_list(args.epsilons, float)
    plans = {epsilon: deployment_plan(epsilon) for epsilon in epsilons}
    for epsilon, plan in plans.items():
        print(
            f"deployment ε {epsilon:g} (δ {plan.delta:.2g}, q {plan.sampling_rate:g}, "
            f"{plan.rounds} rounds): z = {plan.noise_multiplier:.4f}; each audited round's sum "
            f"carries N(0, (z·C)²), C = {plan.clip_norm:g}, not scaled"
        )
    rows = []
    points = grid(epsilons, parse_list(args.participations, int), parse_list(args.reach, int))
    for epsilon, participations in points:
        noise = None if math.isinf(epsilon) else plans[epsilon].noise_multiplier
        name = f"e{epsilon:g}-n{participations}"
        row = audit_once(
            args.dataset, args.clients, participations, noise, args.out / "audits" / name
        )
        row.update(
            epsilon=epsilon,
            noise=noise,
            participations=participations,
            ceiling=ceiling(noise or 0.0, participations),
        )
        rows.append(row)
        print(
            f"{name}: {percent(row['bits'])} of bits, {percent(row['whole_raw'])} whole raw, "
            f"{percent(row['whole_decoded'])} decoded ({row['seconds']:.0f} s)",
            flush=True,
        )
    text = table(rows, args.clients)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "deployment-audit.md").write_text(text)
    write_json(
        args.out / "deployment-audit.json",
        {
            "deployment": {
                **DEPLOYMENT,
                "plans": {f"{e:g}": plan.report() for e, plan in plans.items()},
            },
            "clients": args.clients,
            "chance": chance(args.clients),
            "rows": [{**row, "epsilon": str(row["epsilon"])} for row in rows],
        },
    )
    figure = plot(rows, args.figure or args.out / "deployment-audit.png")
    print(f"figure: {figure}")


if __name__ == "__main__":
    main()
