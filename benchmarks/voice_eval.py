"""A voice bundle on held-out speakers, scored exactly as the SDK scores a device's user.

For every speaker, the first ``--enroll`` usable clips enroll them the way ``uvsdk enroll`` does
(prototype = normalised mean of the clips' vectors, warm-up threshold at ``--tpr`` from their
leave-one-out cosines: the ``uvsdk.scoring`` functions ``Verifier.enroll`` calls); the speaker's
other clips are genuine trials, every other speaker's non-enrollment clips impostor trials. Each
clip is embedded once with ``uvsdk.Verifier.embed`` (decoding, resampling, 2-s windows, ONNX
Runtime), so the figures are what the SDK gives. It prints the pooled EER, and the genuine and
impostor accept rates at each speaker's own warm-up threshold, and writes ``report.json`` and a
DET plot (``det.png``) under ``--out``.

Sources, any number of each:

- ``--speakers DIR``: one sub-folder per speaker, audio files anywhere under it (WAV, FLAC, OGG,
  ...); e.g. real recordings of people, your own;
- ``--synth NPZ``: a built ``uvtrain`` voice dataset; its *unknown* speakers (never in training)
  are used.

    python benchmarks/voice_eval.py --speakers real/ --synth data/synth-voices-*.npz --out eval/
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from uvsdk import Verifier
from uvsdk.errors import MediaError
from uvsdk.scoring import cosine_scores, leave_one_out_scores, prototype
from uvtrain.evaluation import equal_error_rate, plot_det, warmup_evaluation

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".oga", ".mp3", ".aiff", ".aif"}


def speaker_folders(root: Path) -> dict[str, list[Path]]:
    """``{speaker: sorted audio files}`` of a folder of speaker folders."""
    speakers = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        files = sorted(f for f in folder.rglob("*") if f.suffix.lower() in AUDIO_SUFFIXES)
        if files:
            speakers[folder.name] = files
    return speakers


def embed_all(
    verifier: Verifier, speakers: dict[str, list], max_clips: int, label: str
) -> tuple[dict[str, np.ndarray], int]:
    """Each speaker's clip vectors (unusable clips skipped and counted)."""
    vectors, skipped, started = {}, 0, time.perf_counter()
    for number, (name, clips) in enumerate(speakers.items(), 1):
        kept = []
        for clip in clips[:max_clips]:
            try:
                kept.append(verifier.embed(clip, allow_clipped=True))
            except MediaError:
                skipped += 1
        vectors[name] = np.stack(kept) if kept else np.zeros((0, 0), np.float32)
        print(
            f"\r  {label}: embedded {number}/{len(speakers)} speakers "
            f"({time.perf_counter() - started:.0f} s)",
            end="",
            flush=True,
        )
    print()
    return vectors, skipped


def evaluate(
    vectors: dict[str, np.ndarray], enroll: int, tpr: float
) -> tuple[dict, tuple[np.ndarray, np.ndarray]]:
    """Enroll each speaker on its first clips; score the rest and everyone else's.

    Returns the figures and the pooled (genuine, impostor) scores.
    """
    usable = {name: v for name, v in vectors.items() if len(v) > enroll}
    warmup, genuine, impostor = {}, {}, {}
    for name, own in usable.items():
        enrolled = own[:enroll]
        reference = prototype(enrolled)
        warmup[name] = leave_one_out_scores(enrolled)
        genuine[name] = cosine_scores(reference, own[enroll:])
        others = [v[enroll:] for other, v in usable.items() if other != name]
        impostor[name] = cosine_scores(reference, np.concatenate(others))
    rates = warmup_evaluation(warmup, genuine, impostor, tpr)
    g, i = np.concatenate(list(genuine.values())), np.concatenate(list(impostor.values()))
    figures = {
        "speakers": len(usable),
        "genuine_trials": int(g.size),
        "impostor_trials": int(i.size),
        "eer": equal_error_rate(g, i),
        "genuine_accept_rate": rates["tpr"],
        "impostor_accept_rate": rates["fpr"],
    }
    return figures, (g, i)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, help="voice bundle (default: the SDK's shipped one)")
    parser.add_argument("--speakers", type=Path, action="append", default=[])
    parser.add_argument("--synth", type=Path, action="append", default=[])
    parser.add_argument("--enroll", type=int, default=5, help="enrollment clips per speaker")
    parser.add_argument("--tpr", type=float, default=0.95, help="warm-up target TPR")
    parser.add_argument("--max-clips", type=int, default=40, help="clips per speaker at most")
    parser.add_argument("--out", type=Path, default=Path("voice-eval"))
    args = parser.parse_args()
    if not args.speakers and not args.synth:
        parser.error("give --speakers DIR and/or --synth NPZ")

    verifier = Verifier(args.bundle)
    bundle = verifier.bundle
    print(f"bundle: {bundle.path} ({bundle.manifest.name}, {bundle.manifest.method})")
    sets: dict[str, dict[str, list]] = {}
    for root in args.speakers:
        sets[root.name] = speaker_folders(root)
    for path in args.synth:
        from uvtrain.data.base import FederatedDataset

        dataset = FederatedDataset.load(path)
        sets[f"{dataset.name} (unseen speakers)"] = {
            person.identity: [
                clip
                for part in (person.train, person.val, person.test)
                for clip in np.asarray(part, np.float32)
            ]
            for person in dataset.unknown
        }
    report, curves = {"bundle": bundle.manifest.name, "tpr": args.tpr, "sets": {}}, {}
    for label, speakers in sets.items():
        vectors, skipped = embed_all(verifier, speakers, args.max_clips, label)
        result, curves[label] = evaluate(vectors, args.enroll, args.tpr)
        result["clips_skipped"] = skipped
        report["sets"][label] = result
        print(
            f"  {label}: {result['speakers']} speakers, {result['genuine_trials']} genuine / "
            f"{result['impostor_trials']} impostor trials; EER {result['eer']:.4f}; at the "
            f"warm-up threshold (target TPR {args.tpr:g}): genuine accepted "
            f"{result['genuine_accept_rate']:.3f}, impostors accepted "
            f"{result['impostor_accept_rate']:.4f}; {skipped} clip(s) unusable"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    plot_det(curves, args.out / "det.png", title=f"{bundle.manifest.name}: held-out speakers")
    print(f"report: {args.out / 'report.json'}   DET: {args.out / 'det.png'}")


if __name__ == "__main__":
    main()
