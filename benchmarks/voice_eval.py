"""A voice bundle's default decision on held-out real speakers: calibrated on one half of the
speakers, tested on the other half (and the reverse), scored exactly as the SDK scores.

Every clip is embedded once with ``uvsdk.Verifier.embed`` (decoding, resampling, silence
trimming, 2-s windows, ONNX Runtime). In each fold, :func:`uvsdk.calibration.measure` calibrates
on the calibration half (each person enrolled on their first ``--enroll`` clips, as the SDK
enrolls; every other person's clips impostor trials), and each test speaker is enrolled on
their first ``--enroll`` clips with the SDK's own rule (:func:`uvsdk.calibration.
user_threshold`): the warm-up threshold at ``--tpr``, raised to the calibration's threshold at
``--far``. Their other clips are genuine trials, every clip of every other test speaker an
impostor trial. Printed per fold and pooled over ``--splits`` random halvings
(two folds each):

- the EER of the pooled trials (no threshold);
- FAR and FRR at the default decision (``--far`` floor) and at the warm-up rule alone;
- with ``--peer-python`` (docs/benchmarks.md, "Resemblyzer as the peer"), the same figures for
  Resemblyzer's own pipeline (its webrtcvad trimming and ``embed_utterance``) on the same clips.

Writes ``report.json`` and ``det.png`` under ``--out``.

    python benchmarks/voice_eval.py --speakers /path/to/real-speech/speakers --out eval/ \\
        [--peer-python /path/to/venv-resemblyzer/bin/python]

``--speakers DIR`` (any number) holds one sub-folder per speaker (``uvtrain data real-speech``
builds one from Debian packages). ``--synth NPZ`` adds a built ``uvtrain`` voice dataset's
unknown speakers as a separate set, calibrated on all the real speakers (the cross-domain check).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from uvexport.calibrate import embed_people, people_folders, print_progress
from uvsdk import Verifier
from uvsdk.calibration import DEFAULT_FAR, enrollment_trials, measure, user_threshold
from uvtrain.evaluation import equal_error_rate, plot_det

sys.path.insert(0, str(Path(__file__).parent))
from resemblyzer_peer import PeerUnavailable, add_peer_argument, peer_embeddings  # noqa: E402


def decide(
    vectors: dict[str, np.ndarray], calibration, enroll: int, tpr: float, far: float
) -> dict:
    """Enroll each speaker as the SDK does and count the decisions on the others' clips."""
    warmup, genuine, impostor = enrollment_trials(vectors, enroll)
    counts = dict.fromkeys(("fa", "fr", "fa_warmup", "fr_warmup", "genuine", "impostor"), 0)
    for name in genuine:
        calibrated, _ = user_threshold(warmup[name], tpr, calibration, "prototype", far)
        alone, _ = user_threshold(warmup[name], tpr, None, "prototype", None)
        counts["fr"] += int(np.sum(genuine[name] < calibrated))
        counts["fa"] += int(np.sum(impostor[name] >= calibrated))
        counts["fr_warmup"] += int(np.sum(genuine[name] < alone))
        counts["fa_warmup"] += int(np.sum(impostor[name] >= alone))
        counts["genuine"] += genuine[name].size
        counts["impostor"] += impostor[name].size
    g = np.concatenate(list(genuine.values()))
    i = np.concatenate(list(impostor.values()))
    return {**counts, "eer": equal_error_rate(g, i), "scores": (g, i)}


def folds(names: list[str], splits: int, seed: int) -> list[tuple[list[str], list[str]]]:
    """``splits`` random halvings of the speakers, each used both ways round."""
    rng = np.random.default_rng(seed)
    result = []
    for _ in range(splits):
        order = list(rng.permutation(names))
        a, b = sorted(order[: len(order) // 2]), sorted(order[len(order) // 2 :])
        result += [(a, b), (b, a)]
    return result


def evaluate(
    vectors: dict[str, np.ndarray], args: argparse.Namespace, label: str
) -> tuple[dict, tuple[np.ndarray, np.ndarray]]:
    """Pooled figures over the folds, and the pooled scores for the DET plot."""
    names = [n for n, v in vectors.items() if len(v) > args.enroll]
    totals: dict[str, float] = {}
    eers, genuine, impostor, calibration_rows = [], [], [], []
    for calibrate_on, test_on in folds(names, args.splits, args.seed):
        calibration = measure(
            {n: vectors[n] for n in calibrate_on}, data=label, enroll_samples=args.enroll
        )
        row = calibration.tables["prototype"].row_for(args.far)
        calibration_rows.append(row.threshold)
        result = decide(
            {n: vectors[n] for n in test_on}, calibration, args.enroll, args.tpr, args.far
        )
        for key in ("fa", "fr", "fa_warmup", "fr_warmup", "genuine", "impostor"):
            totals[key] = totals.get(key, 0) + result[key]
        eers.append(result["eer"])
        genuine.append(result["scores"][0])
        impostor.append(result["scores"][1])
    figures = {
        "speakers": len(names),
        "folds": len(eers),
        "genuine_trials": int(totals["genuine"]),
        "impostor_trials": int(totals["impostor"]),
        "eer": float(np.mean(eers)),
        "eer_folds": [float(e) for e in eers],
        "far": totals["fa"] / totals["impostor"],
        "frr": totals["fr"] / totals["genuine"],
        "far_warmup": totals["fa_warmup"] / totals["impostor"],
        "frr_warmup": totals["fr_warmup"] / totals["genuine"],
        "floor_mean": float(np.mean(calibration_rows)),
    }
    return figures, (np.concatenate(genuine), np.concatenate(impostor))


def line(label: str, f: dict, args: argparse.Namespace) -> str:
    return (
        f"  {label:<34} EER {f['eer']:.4f} | default (--far {args.far:g}): FAR {f['far']:.4f} "
        f"FRR {f['frr']:.4f} | warm-up alone: FAR {f['far_warmup']:.4f} FRR {f['frr_warmup']:.4f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, help="voice bundle (default: the SDK's shipped one)")
    parser.add_argument("--speakers", type=Path, action="append", default=[])
    parser.add_argument("--synth", type=Path, action="append", default=[])
    parser.add_argument("--enroll", type=int, default=5, help="enrollment clips per speaker")
    parser.add_argument("--tpr", type=float, default=0.95, help="warm-up target TPR")
    parser.add_argument("--far", type=float, default=DEFAULT_FAR, help="calibrated FAR floor")
    parser.add_argument("--splits", type=int, default=5, help="random halvings (2 folds each)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-clips", type=int, default=40, help="clips per speaker at most")
    parser.add_argument("--out", type=Path, default=Path("voice-eval"))
    add_peer_argument(parser)
    args = parser.parse_args()
    if not args.speakers:
        parser.error("give --speakers DIR (one sub-folder per real speaker)")

    verifier = Verifier(args.bundle, store=args.out / "unused-store")
    bundle = verifier.bundle
    print(f"bundle: {bundle.path} ({bundle.manifest.name}, {bundle.manifest.method})")
    speakers: dict[str, list] = {}
    for root in args.speakers:
        for name, files in people_folders(root).items():
            speakers[f"{root.name}/{name}" if len(args.speakers) > 1 else name] = files
    vectors, clips, skipped = embed_people(
        bundle, speakers, max_samples=args.max_clips, progress=print_progress, label="real speakers"
    )
    print(file=sys.stderr)
    report: dict = {
        "bundle": bundle.manifest.name,
        "protocol": {
            "enroll": args.enroll,
            "tpr": args.tpr,
            "far": args.far,
            "splits": args.splits,
            "seed": args.seed,
            "max_clips": args.max_clips,
        },
        "sets": {},
    }
    curves = {}
    ours, curves["uvsdk (default bundle)"] = evaluate(vectors, args, "real speakers")
    ours["clips_skipped"] = skipped
    report["sets"]["real"] = ours
    print(
        f"real speakers: {ours['speakers']} speakers, {ours['folds']} folds, "
        f"{ours['genuine_trials']} genuine / {ours['impostor_trials']} impostor trials in all"
    )
    print(line("uvsdk", ours, args))

    try:
        peer = peer_embeddings(
            [str(c) for files in clips.values() for c in files], args.peer_python
        )
    except PeerUnavailable as error:
        print(f"  (no peer: {error})")
        peer = None
    if peer is not None:
        # The same clips for both: a clip the peer could not embed is dropped from both.
        same = {name: [c for c in files if str(c) in peer.vectors] for name, files in clips.items()}
        lost = sum(len(f) for f in clips.values()) - sum(len(f) for f in same.values())
        theirs = {
            name: np.stack([peer.vectors[str(c)] for c in files]) if files else np.zeros((0, 256))
            for name, files in same.items()
        }
        mine = {
            name: vectors[name][[clips[name].index(c) for c in files]] if files else theirs[name]
            for name, files in same.items()
        }
        if lost:
            ours_same, _ = evaluate(mine, args, "real speakers")
            print(line(f"uvsdk (the peer's {sum(map(len, same.values()))} clips)", ours_same, args))
            report["sets"]["real_peer_clips"] = ours_same
        result, curves["Resemblyzer 0.1.4 (own pipeline)"] = evaluate(theirs, args, "peer")
        result["clips_dropped"] = lost
        result["versions"] = peer.versions
        report["sets"]["real_resemblyzer"] = result
        print(line("Resemblyzer's own pipeline", result, args))

    for path in args.synth:
        from uvtrain.data.base import FederatedDataset

        dataset = FederatedDataset.load(path)
        synth = {
            person.identity: np.stack(
                [
                    verifier.embed(clip, allow_clipped=True)
                    for part in (person.train, person.val, person.test)
                    for clip in np.asarray(part, np.float32)
                ][: args.max_clips]
            )
            for person in dataset.unknown
        }
        calibration = measure(vectors, data="all real speakers", enroll_samples=args.enroll)
        result = decide(synth, calibration, args.enroll, args.tpr, args.far)
        g, i = result.pop("scores")
        label = f"{dataset.name} (unseen, calibrated on real)"
        figures = {
            "speakers": len(synth),
            "genuine_trials": result["genuine"],
            "impostor_trials": result["impostor"],
            "eer": result["eer"],
            "far": result["fa"] / result["impostor"],
            "frr": result["fr"] / result["genuine"],
            "far_warmup": result["fa_warmup"] / result["impostor"],
            "frr_warmup": result["fr_warmup"] / result["genuine"],
        }
        report["sets"][dataset.name] = figures
        curves[label] = (g, i)
        print(line(label, figures, args))

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    plot_det(curves, args.out / "det.png", title=f"{bundle.manifest.name}: held-out speakers")
    print(f"report: {args.out / 'report.json'}   DET: {args.out / 'det.png'}")


if __name__ == "__main__":
    main()
