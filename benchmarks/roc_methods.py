"""FedUV paper, Fig. 5: ROC curves of softmax, FedAwS and FedUV with code lengths 127, 255 and
511 (and FedHide at its paper's defaults beside them), on train, test_known and unknown — one
figure per split and dataset, and a table of EERs, TPR at FPR 1 % and the prototype leakage.

Each method is scored as its users would verify: FedUV against the user's codeword; the embedding
methods (softmax, FedAwS, FedHide) against the SDK's enrollment reference, the normalised mean of
the user's validation embeddings ("enrollment"); softmax and FedAwS also as the FedUV paper scores
them, against their learnt class rows ("class row"). Each (method, protocol) is one table row and
one curve. The ``unknown`` split has two protocols that are never put on one figure or in one
column: the unseen identities as impostors against every known user's codeword or class row
(FedUV Fig. 5c; ``roc-DATASET-unknown.png``, "unknown as impostors"), and pairs among the unseen
identities, each enrolled from its own samples (FedHide's protocol, which an embedding model
needs no training for; ``roc-DATASET-unknown-pairs.png``, "unknown pairs").

    python benchmarks/roc_methods.py [--dataset synth-voices] [--scale cpu] [--seed 0]
        [--out results/roc] [--cache results/runs] [--root DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from _runs import dataset_file, report, settings, train_once, write_table

from uvtrain.evaluation import plot_roc
from uvtrain.io import SCORES

SPLITS = ("train", "test_known", "unknown")


def methods() -> dict[str, tuple[str, dict]]:
    """Legend name → (schedule family, method settings)."""
    return {
        "softmax": ("embedding", {"method": "softmax"}),
        "FedAwS": ("embedding", {"method": "fedaws"}),
        "FedHide": ("embedding", {"method": "fedhide"}),
        **{
            f"FedUV c={length}": ("feduv", {"method": "feduv", "code_length": length})
            for length in (127, 255, 511)
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="synth-voices")
    parser.add_argument("--scale", default="cpu", choices=["cpu", "tiny", "paper"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every", type=int, default=50, help="log EERs every N rounds")
    parser.add_argument("--out", type=Path, default=Path("results/roc"))
    parser.add_argument("--cache", type=Path, default=Path("results/runs"))
    parser.add_argument("--root", default=None, help="local corpus copy (paper scale)")
    args = parser.parse_args()

    data = dataset_file(args.scale, args.dataset, args.root)
    folders = {}
    for label, (family, method) in methods().items():
        run = settings(
            args.scale, args.dataset, family, data, seed=args.seed, eval_every=args.every, **method
        )
        folders[label] = train_once(args.cache, label, run, args.root)

    curves = {split: {} for split in FIGURES}
    rows = []
    for label, folder in folders.items():
        figures = report(folder)
        with np.load(folder / SCORES) as scores:
            for section, protocol, splits in protocols(figures):
                name = f"{label} ({PROTOCOL_NAMES[protocol]})"
                prefix = "class_row_" if section == "class_row" else ""
                for split in SPLITS:
                    if f"{prefix}{split}_genuine" in scores:
                        pair = (
                            scores[f"{prefix}{split}_genuine"],
                            scores[f"{prefix}{split}_impostor"],
                        )
                        curves[figure_of(split, splits[split])][name] = pair
                rows.append(table_row(label, protocol, figures, splits))
    for figure, title in FIGURES.items():
        path = args.out / f"roc-{args.dataset}-{figure}.png"
        plot_roc(curves[figure], path, f"{args.dataset}, {title}")
        print(f"figure: {path}")
    header = ["method", "protocol", "rounds", "train EER", "test_known EER", "test_known TPR@1%"]
    header += ["unknown as impostors EER", "unknown as impostors TPR@1%"]
    header += ["unknown pairs EER", "unknown pairs TPR@1%", "P_leak"]
    write_table(args.out / f"roc-{args.dataset}.md", f"Methods on {args.dataset}", header, rows)


#: Legend and table names of the protocols (``report["split_protocols"]``, ``class_row``).
PROTOCOL_NAMES = {"codeword": "codeword", "enrollment": "enrollment", "class-row": "class row"}
#: The figures: train and test_known, then the two unknown-user protocols, never on one figure.
FIGURES = {
    "train": "train (FedUV Fig. 5a)",
    "test_known": "test_known (FedUV Fig. 5b)",
    "unknown": "unknown users as impostors against the known users (FedUV Fig. 5c)",
    "unknown-pairs": "pairs among the unknown users, enrolled (FedHide's protocol)",
}


def protocols(figures: dict) -> list[tuple[str, str, dict[str, str]]]:
    """``(section, protocol, split → protocol)`` for each protocol a run's report holds: its
    ``splits`` (codeword or enrollment) and, for softmax and FedAwS, ``class_row``."""
    named = figures.get("split_protocols") or {
        "train": "enrollment",
        "test_known": "enrollment",
        "unknown": "unseen-pairs",  # a run from before the key: an embedding method
    }
    found = [("splits", named["test_known"], named)]
    if figures.get("class_row"):
        rows = {"train": "class-row", "test_known": "class-row"}
        found.append(("class_row", "class-row", {**rows, "unknown": "class-row-unseen-impostors"}))
    return found


def figure_of(split: str, protocol: str) -> str:
    """The figure a split's curve goes on: the unknown split by its protocol."""
    if split != "unknown":
        return split
    return "unknown-pairs" if protocol == "unseen-pairs" else "unknown"


def table_row(label: str, protocol: str, figures: dict, splits: dict[str, str]) -> list[str]:
    """One table row: a method under one protocol; the unknown split in the column of its
    protocol (unseen people as impostors, or pairs among them), "–" in the other."""
    section = figures["class_row"]["splits"] if protocol == "class-row" else figures["splits"]

    def cells(split: str, tpr: bool = True) -> list[str]:
        metrics = section.get(split)
        if not metrics or metrics["eer"] is None:
            return ["–", "–"] if tpr else ["–"]
        eer = f"{metrics['eer']:.4f}"
        return [eer, f"{metrics['tpr_at_fpr']['0.01']:.3f}"] if tpr else [eer]

    unknown = cells("unknown")
    pairs = splits["unknown"] == "unseen-pairs"
    leakage = figures.get("leakage")
    return [
        label,
        PROTOCOL_NAMES[protocol],
        str(figures["rounds"]),
        *cells("train", tpr=False),
        *cells("test_known"),
        *(["–", "–"] + unknown if pairs else unknown + ["–", "–"]),
        "– (no class vector sent)" if leakage is None else f"{leakage:.3f}",
    ]


if __name__ == "__main__":
    main()
