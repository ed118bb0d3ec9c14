"""The SDK's vector of each clip against Resemblyzer's own, and how much webrtcvad trims.

Every file is embedded twice: by ``uvsdk.Verifier.embed`` (the bundle, default the shipped GE2E
port) and by Resemblyzer 0.1.4's own pipeline in the peer venv (``resemblyzer_peer.py``:
``preprocess_wav`` with its webrtcvad trimming, then ``embed_utterance``). It prints the
distribution of the cosine between the two over the clips, then splits the difference three ways
with two more vectors of each clip, the bundle's model run once on the whole clip (no SDK windows)
and Resemblyzer's vector of its audio before webrtcvad trimming:

- *port*: the model on the whole clip against untrimmed Resemblyzer (the ONNX port itself);
- *windows*: the SDK against the model on the whole clip (``Verifier.embed`` cuts 2-s windows,
  hop 1 s, and repeat-pads a shorter clip to one window);
- *webrtcvad*: untrimmed against trimmed Resemblyzer.

It also prints the seconds webrtcvad trimmed. ``--out`` writes the per-clip figures as JSON.

    python benchmarks/resemblyzer_parity.py --peer-python ~/venv-resemblyzer/bin/python \\
        speakers/ --out parity.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from resemblyzer_peer import PeerUnavailable, add_peer_argument, audio_files, peer_embeddings

from uvsdk import Verifier
from uvsdk.errors import MediaError
from uvsdk.media import load_audio

WHOLE = 0.03  # trimming up to one VAD window is only preprocess_wav's cut to whole windows
FLOORS = (0.999, 0.99, 0.95, 0.9)


def describe(values: np.ndarray) -> str:
    if values.size == 0:
        return "none"
    q = np.percentile(values, [0, 5, 25, 50, 75, 95, 100])
    return (
        f"n {values.size}: min {q[0]:.4f}, p5 {q[1]:.4f}, p25 {q[2]:.4f}, median {q[3]:.4f}, "
        f"p75 {q[4]:.4f}, p95 {q[5]:.4f}, max {q[6]:.4f}; mean {values.mean():.4f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="audio files, or folders of them")
    parser.add_argument("--bundle", type=Path, help="voice bundle (default: the SDK's shipped one)")
    parser.add_argument("--out", type=Path, help="per-clip figures as JSON")
    add_peer_argument(parser)
    args = parser.parse_args()
    files = audio_files(args.inputs, None)
    try:
        peer = peer_embeddings(files, args.peer_python, untrimmed=True)
    except (PeerUnavailable, RuntimeError) as error:
        parser.exit(2, f"{parser.prog}: {error}\n")

    verifier = Verifier(args.bundle)
    rate = verifier.bundle.manifest.input.sample_rate
    sdk, whole_clip, sdk_failed = {}, {}, {}
    for number, path in enumerate(files, 1):
        try:
            sdk[path] = verifier.embed(path, allow_clipped=True)
        except MediaError as error:
            sdk_failed[path] = str(error)
        else:
            vector = verifier.bundle.run(load_audio(path, rate)[None])[0]
            whole_clip[path] = vector / np.linalg.norm(vector)
        print(f"\r  sdk: {number}/{len(files)} files", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)

    both = [p for p in files if p in sdk and p in peer.vectors]
    figures = {
        "SDK vs Resemblyzer": [sdk[p] @ peer.vectors[p] for p in both],
        "port: model on the whole clip vs untrimmed Resemblyzer": [
            whole_clip[p] @ peer.untrimmed[p] for p in both
        ],
        "windows: SDK vs model on the whole clip": [sdk[p] @ whole_clip[p] for p in both],
        "webrtcvad: untrimmed vs trimmed Resemblyzer": [
            peer.untrimmed[p] @ peer.vectors[p] for p in both
        ],
    }
    cosines = {name: np.array(values, np.float64) for name, values in figures.items()}
    before = np.array([peer.seconds[p][0] for p in both])
    after = np.array([peer.seconds[p][1] for p in both])
    trimmed = before - after
    left_whole = trimmed <= WHOLE + 1e-9
    short = before <= 2.0

    print(f"bundle: {verifier.bundle.manifest.name}; peer: {json.dumps(peer.versions)}")
    print(
        f"{len(files)} files: {len(both)} embedded by both; the SDK refused {len(sdk_failed)}, "
        f"Resemblyzer failed on {len(peer.failed)}"
    )
    for path, why in list(peer.failed.items())[:5]:
        print(f"  resemblyzer failed: {path}: {why}")
    for name, cosine in cosines.items():
        print(f"cosine, {name}: {describe(cosine)}")
        print("  share ≥ " + ", ≥ ".join(f"{f}: {np.mean(cosine >= f):.3f}" for f in FLOORS))
        print(f"  clips of ≤ 2 s: {describe(cosine[short])}")
        print(f"  clips over 2 s: {describe(cosine[~short])}")
        print(
            f"  clips webrtcvad left whole (≤ {WHOLE * 1000:.0f} ms cut): {describe(cosine[left_whole])}"
        )
        print(f"  clips webrtcvad trimmed: {describe(cosine[~left_whole])}")
    print(f"seconds before webrtcvad: {describe(before)}")
    print(f"seconds after: {describe(after)}")
    print(f"seconds trimmed: {describe(trimmed)}")
    print(f"fraction trimmed: {describe(trimmed / before)}")
    if args.out:
        names = ["sdk_vs_resemblyzer", "port", "windows", "webrtcvad"]
        rows = {
            p: {
                **{n: float(c[i]) for n, c in zip(names, cosines.values(), strict=True)},
                "seconds": float(before[i]),
                "after_webrtcvad": float(after[i]),
            }
            for i, p in enumerate(both)
        }
        report = {
            "bundle": verifier.bundle.manifest.name,
            "peer_versions": peer.versions,
            "clips": rows,
            "sdk_refused": sdk_failed,
            "resemblyzer_failed": peer.failed,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"per clip: {args.out}")


if __name__ == "__main__":
    main()
