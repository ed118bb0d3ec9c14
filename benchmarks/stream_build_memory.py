"""Peak memory of ``uvtrain data build`` into a ``.npz`` (the corpus decoded into memory) and into a
stream folder (decoded identity by identity straight into it: ``--format stream``), side by side
(issue 35 item 1).

    python benchmarks/stream_build_memory.py [--speakers 100] [--utterances 20] [--seconds 6]
                                             [--workdir /tmp/uvstreambuild]

Writes a VoxCeleb1 copy in its official layout (``wav/idXXXXX/v/NNNNN.wav``, a tone per
speaker, 16-bit), then builds it twice under one data protocol with ``--random-crop`` (training
utterances kept whole, up to 6 s), each build in its own process sampled as
``benchmarks/stream_memory.py`` samples a run: ``VmHWM`` (peak resident set), and the peaks of
``RssAnon`` (memory only the process holds) and ``RssFile`` (mapped file pages: the folder's
arrays being filled, which the kernel writes back and drops when memory runs short).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import numpy as np
from stream_memory import measured_run


def write_copy(root: Path, speakers: int, utterances: int, seconds: float) -> None:
    """A VoxCeleb1 copy of ``speakers`` x ``utterances`` files of ``seconds`` each."""
    import soundfile

    steps = np.arange(round(seconds * 16000))
    for speaker in range(speakers):
        folder = root / "wav" / f"id{10001 + speaker}" / "v"
        folder.mkdir(parents=True, exist_ok=True)
        signal = (0.3 * np.sin(steps * (0.01 + speaker / 5000))).astype(np.float32)
        for number in range(utterances):
            soundfile.write(folder / f"{number:05d}.wav", signal, 16000, subtype="PCM_16")


def size_mb(path: Path) -> float:
    """Megabytes of a file, or of the files of a folder."""
    files = path.iterdir() if path.is_dir() else [path]
    return sum(file.stat().st_size for file in files) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speakers", type=int, default=100)
    parser.add_argument("--utterances", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/uvstreambuild"))
    args = parser.parse_args()
    root, cache = args.workdir / "voxceleb1", args.workdir / "cache"
    if not root.is_dir():
        write_copy(root, args.speakers, args.utterances, args.seconds)
    shutil.rmtree(cache, ignore_errors=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", UVTRAIN_DATA=str(cache))
    known = args.speakers * 9 // 10
    train = args.utterances - 2 * max(1, args.utterances // 5)
    held = (args.utterances - train) // 2
    build = [sys.executable, "-m", "uvtrain.cli", "data", "build", "voxceleb1", "--root",
             str(root), "--identities", str(known), "--unknown-identities",
             str(args.speakers - known), "--unknown-samples", "5", "--samples-per-split",
             f"{train},{held},{held}", "--random-crop"]  # fmt: skip
    print(f"copy: {args.speakers} speakers x {args.utterances} utterances x {args.seconds:g} s")
    for storage in ("npz", "stream"):
        figures = measured_run([*build, "--format", storage], env)
        built = next(cache.glob(f"voxceleb1-*.{storage}"))
        print(
            f"--format {storage:<6} peak RSS {figures['VmHWM_MB']:7.0f} MB   peak anonymous "
            f"{figures['RssAnon_MB']:7.0f} MB   peak file-mapped {figures['RssFile_MB']:6.0f} MB   "
            f"{figures['wall_s']:.1f} s   {built.name}: {size_mb(built):.0f} MB"
        )


if __name__ == "__main__":
    main()
