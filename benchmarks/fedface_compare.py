"""FedFace paper, Fig. 4 and Table 1: centralised, FedAvg, FedAvg+FV, PFM and PFM+FV at several
synchronisation intervals K, for P parties — each relative to the centralised baseline.

Every run takes the same number of local steps (``--steps``), so a larger K means fewer rounds;
the parties draw the same samples per step as the centralised model (``--global-batch`` in all,
split evenly over the parties). All runs of one P are scored on the same held-out people (the
unknown identities that are not the validators'), by verification accuracy at the best threshold
(10-fold, the LFW protocol — the paper's metric) and EER.

    python benchmarks/fedface_compare.py [--dataset synth-voices] [--parties 3,12] [--k 5,20,80]
        [--steps 400] [--global-batch 96] [--lr 0.003] [--loss arcface] [--out results/fedface]

``--scale paper`` sets the paper's setting for a GPU and a face set of your own at 112×112 (an
``.npz`` made with ``uvtrain.data.corpora.vggface2(root, height=112, width=112, ...)``): IR-18,
K = 100, 400, 1600, ArcFace, global batch 512, lr 0.1 with the paper's step schedule (x0.1 at the
end of epochs 10, 18, 24 of 26, scaled to the run); 16,000 steps per run (ours: ten rounds at the
largest K). Flags given explicitly still win.

**Solo** (the paper's Table 1): each party of a P trains alone on its own data — the trainer with
that one party (:func:`uvtrain.crosssilo.solo`, what ``uvtrain run --solo-party N`` runs), plain
momentum SGD like the centralised run, its party's batch, the same number of steps — and is
scored on the same held-out people. ``--no-solo`` skips them.

**Several datasets** (``--dataset a,b,c``): one party per dataset, or P / 3 per dataset (the
paper's 3 and 12 parties; :func:`uvtrain.data.partition.partition`).

**Schedule**: ``--lr-epochs 10,18,24`` multiplies the lr by ``--lr-gamma`` at the end of those of
``--epochs`` (26) equal parts of the run — the paper's "decays by 0.1 at the end of epoch 10, 18
and 24" with its epochs scaled to ``--steps``; the milestone of epoch e is round
``round(e · rounds / epochs)`` (exact at the paper's 26 × 12,800 steps). Off at the CPU scale (its
``--lr-decay`` stays); on at ``--scale paper``.

Writes ``results.json``, ``results.md`` (the comparison, with the parties' mean Solo accuracy as a
column, and the Table 1 table: per party, Solo against the federated runs), ``relative.png``
(accuracy relative to centralised, per setting) and ``weights-P<p>-K<k>.png`` (FV's weighting w
over rounds, the paper's Fig. 6).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from uvtrain import evaluation as ev
from uvtrain.algorithms.fedface import FedFace
from uvtrain.crosssilo import CrossSilo, held_out_pairs, solo, split_unknown
from uvtrain.data.partition import partition
from uvtrain.data.registry import load_dataset
from uvtrain.engine import EngineConfig
from uvtrain.evaluation.plots import new_figure
from uvtrain.fit import Rounds, fit
from uvtrain.io import save_figure
from uvtrain.models import build_backbone

#: ``--scale paper``: the paper's setting (IR-18, K = 100/400/1600, batch 512, lr 0.1).
PAPER = {
    "backbone": "ir-18",
    "k": "100,400,1600",
    "steps": 16000,
    "global_batch": 512,
    "lr": 0.1,
    "lr_decay": 0.0,
    "lr_epochs": "10,18,24",
    "crop_seconds": 0.0,
}

ARMS = {  # name: (pfm, fv)
    "FedAvg": (False, False),
    "FedAvg+FV": (False, True),
    "PFM": (True, False),
    "PFM+FV": (True, True),
}


def train_one(
    args: argparse.Namespace,
    dataset: Any,
    parties: list,
    validators: list,
    test: Any,
    pfm: bool,
    fv: bool,
    k: int,
    batch: int,
) -> dict[str, Any]:
    algorithm = FedFace(margin_loss=args.loss, pfm=pfm, fv=fv, fv_norm=args.fv_norm)
    crop = dataset.input.crop_samples(args.crop_seconds)
    rounds = args.steps // k
    config = EngineConfig(
        rounds=rounds,
        local_steps=k,
        batch_size=batch,
        lr=args.lr,
        lr_decay=args.lr_decay,
        lr_milestones=milestone_rounds(args.lr_epochs, args.epochs, rounds),
        lr_gamma=args.lr_gamma,
        seed=args.seed,
        crop=crop,
    )
    torch.manual_seed(args.seed)
    backbone = build_backbone(args.backbone or dataset.input.default_backbone, dataset.spec)
    silo = CrossSilo(algorithm, backbone, parties, validators, config)
    started = time.perf_counter()
    rows = fit(silo, silo, Rounds(config.rounds, silo.plan)).metrics  # the trainer's one loop
    seconds = time.perf_counter() - started
    embeddings = silo.outputs(test.samples)
    scores = test.scores(embeddings)
    # the final training loss as the paper's Table 1 gives it: every step's loss exponentially
    # smoothed with factor 0.99, per party (here their mean)
    return {
        "accuracy": test.accuracy(embeddings, 10),
        "eer": ev.equal_error_rate(scores[test.same], scores[~test.same]),
        "final_loss": float(rows[-1]["loss_smoothed"]),
        "final_party_losses": rows[-1]["party_losses_smoothed"],
        "rounds": config.rounds,
        "seconds": seconds,
        "weights": [row["weights"] for row in rows],
    }


def milestone_rounds(epochs: str, total: int, rounds: int) -> str:
    """``--lr-epochs`` as the rounds of a run of ``rounds`` rounds split into ``total`` epochs
    (``lr_milestones``): epoch e ends after round ``round(e · rounds / total)``; milestones that
    fall on round 0, on the last round or on one another are dropped."""
    if not epochs:
        return ""
    found = sorted({round(int(e) * rounds / total) for e in epochs.split(",")})
    return ",".join(str(m) for m in found if 0 < m < rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="synth-voices")
    parser.add_argument("--root", default=None)
    parser.add_argument("--parties", default="3,12")
    parser.add_argument("--k", default="5,20,80")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--global-batch", type=int, default=96)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--lr-decay", type=float, default=0.001)
    parser.add_argument("--lr-epochs", default="", help="e.g. 10,18,24 (the paper's; '' off)")
    parser.add_argument("--lr-gamma", type=float, default=0.1)
    parser.add_argument("--epochs", type=int, default=26)
    parser.add_argument("--solo", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--arms", default=",".join(ARMS), help="federated runs ('': Solo only)")
    parser.add_argument("--loss", default="arcface")
    parser.add_argument("--fv-norm", default="local")
    parser.add_argument("--validators", type=int, default=2)
    parser.add_argument("--crop-seconds", type=float, default=1.0)
    parser.add_argument("--backbone", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("results/fedface"))
    parser.add_argument("--scale", choices=("cpu", "paper"), default="cpu")
    if parser.parse_known_args()[0].scale == "paper":  # the preset's defaults; given flags win
        parser.set_defaults(**PAPER)
    args = parser.parse_args()
    if unknown_arms := set(filter(None, args.arms.split(","))) - set(ARMS):
        parser.error(f"--arms: unknown {', '.join(sorted(unknown_arms))}: of {', '.join(ARMS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    dataset = load_dataset(args.dataset, root=args.root, seed=args.seed)
    validators, test_people = split_unknown(dataset, args.validators, args.seed)
    held_out = replace(dataset, unknown=test_people)
    results: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()}, "runs": {}}

    def record(key: str, result: dict[str, Any]) -> None:
        results["runs"][key] = result
        print(
            f"{key:28s} accuracy {result['accuracy']:.4f}  EER {result['eer']:.4f}  "
            f"final loss {result['final_loss']:.3f}  ({result['rounds']} rounds, "
            f"{result['seconds']:.0f} s)",
            flush=True,
        )
        (args.out / "results.json").write_text(json.dumps(results, indent=1))

    test = held_out_pairs(held_out, args.seed)  # the same held-out people for every run
    central = partition(dataset, 1, "random", args.seed)
    record(
        "centralised",
        train_one(args, dataset, central, [], test, False, False, 1, args.global_batch),
    )
    for p in (int(x) for x in args.parties.split(",")):
        parties = partition(dataset, p, "auto", args.seed)
        batch = max(1, args.global_batch // p)
        for number in range(1, p + 1) if args.solo else ():
            alone = solo(parties, number)  # the same trainer with that one party: no federation
            result = train_one(args, dataset, alone, [], test, False, False, 1, batch)
            party = parties[number - 1]
            groups = f" ({'+'.join(party.groups)})" if party.groups else ""
            record(f"P{p} Solo {party.name}{groups}", result)
        for k in (int(x) for x in args.k.split(",")):
            for arm in [a for a in args.arms.split(",") if a]:
                pfm, fv = ARMS[arm]
                record(
                    f"P{p} K{k} {arm}",
                    train_one(args, dataset, parties, validators, test, pfm, fv, k, batch),
                )
    write_outputs(results, args.out)


def solo_runs(results: dict[str, Any], p: str) -> list[dict[str, Any]]:
    """The Solo runs of the parties of ``p`` (``"P3"``), in party order."""
    return [run for key, run in results["runs"].items() if key.startswith(f"{p} Solo ")]


def solo_mean(results: dict[str, Any], p: str) -> str:
    runs = solo_runs(results, p)
    return f"{np.mean([run['accuracy'] for run in runs]):.4f}" if runs else "—"


def write_outputs(results: dict[str, Any], out: Path) -> None:
    central = results["runs"]["centralised"]
    lines = [
        "| setting | method | accuracy | relative to centralised | EER | final training loss "
        "| Solo accuracy (parties' mean) |",
        "|---|---|---|---|---|---|---|",
        f"| — | centralised | {central['accuracy']:.4f} | 100.0 % | {central['eer']:.4f} | "
        f"{central['final_loss']:.3f} | — |",
    ]
    settings: dict[str, dict[str, float]] = {}
    federated: dict[tuple[str, str], dict[str, Any]] = {}
    for key, run in results["runs"].items():
        if key == "centralised":
            continue
        p, k, arm = key.split(" ", 2)
        if k == "Solo":  # one party alone: no K, no federation
            lines.append(
                f"| {p} | Solo {arm} | {run['accuracy']:.4f} | "
                f"{100 * run['accuracy'] / central['accuracy']:.1f} % | {run['eer']:.4f} | "
                f"{run['final_loss']:.3f} | — |"
            )
            continue
        federated.setdefault((p, k), {})[arm] = run
        relative = 100 * run["accuracy"] / central["accuracy"]
        settings.setdefault(f"{p} {k}", {})[arm] = relative
        lines.append(
            f"| {p} {k} | {arm} | {run['accuracy']:.4f} | {relative:.1f} % | "
            f"{run['eer']:.4f} | {run['final_loss']:.3f} | {solo_mean(results, p)} |"
        )
        if arm.endswith("FV") and run["weights"]:
            rounds = list(range(1, len(run["weights"]) + 1))
            series = {
                f"party {i + 1}": [w[i] for w in run["weights"]]
                for i in range(len(run["weights"][0]))
            }
            ev.plot_metric_over_rounds(
                rounds,
                series,
                out / f"weights-{p}-{k}-{arm}.png",
                "w",
                f"FV weighting w by round ({p}, {k}, {arm})",
            )
    lines += table_1(results, federated)
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if not settings:  # Solo only: nothing relative to plot
        return
    figure, axes = new_figure("verification accuracy relative to centralised (%)")
    names = list(settings)
    width = 0.8 / len(ARMS)
    for index, arm in enumerate(ARMS):
        values = [settings[name].get(arm, np.nan) for name in names]
        axes.bar(np.arange(len(names)) + index * width, values, width, label=arm)
    axes.set_xticks(np.arange(len(names)) + width * (len(ARMS) - 1) / 2, names)
    axes.axhline(100.0, color="black", linewidth=0.8)
    low = min(v for s in settings.values() for v in s.values())
    high = max(v for s in settings.values() for v in s.values())
    axes.set_ylim(max(0.0, low - 5), max(102.0, high + 2))
    axes.legend(loc="lower left")
    save_figure(figure, out / "relative.png")


def table_1(results: dict[str, Any], federated: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """The paper's Table 1 beside our verification accuracy: per party, its Solo run against
    the federated runs — the held-out accuracy (Solo's own model; the federated model is one for
    all parties) and the final training loss on the party's own data, smoothed 0.99."""
    if not federated:
        return []
    lines = [
        "",
        "Solo against federated, per party (the paper's Table 1: final training loss, smoothed "
        "0.99; and the held-out accuracy):",
        "",
        "| setting | party | Solo accuracy | PFM+FV accuracy | Solo loss | FedAvg loss "
        "| PFM loss |",
        "|---|---|---|---|---|---|---|",
    ]
    for (p, k), arms in federated.items():
        names = [key.split(" ", 2)[2] for key in results["runs"] if key.startswith(f"{p} Solo ")]
        for index, (name, run) in enumerate(zip(names, solo_runs(results, p), strict=True)):
            together = arms.get("PFM+FV")
            lines.append(
                f"| {p} {k} | {name} | {run['accuracy']:.4f} | "
                f"{'—' if together is None else format(together['accuracy'], '.4f')} | "
                f"{run['final_party_losses'][0]:.3f} | {party_loss(arms, 'FedAvg', index)} | "
                f"{party_loss(arms, 'PFM', index)} |"
            )
    return lines


def party_loss(arms: dict[str, Any], arm: str, index: int) -> str:
    """Party ``index``'s final smoothed training loss in the run of ``arm``, or a dash."""
    found = arms.get(arm)
    return "—" if found is None else f"{found['final_party_losses'][index]:.3f}"


if __name__ == "__main__":
    main()
