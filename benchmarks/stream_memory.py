"""Peak memory and seconds per round of ``uvtrain run`` on one dataset, in memory (its ``.npz``) and
streamed (its stream folder, memory-mapped: ``uvtrain data build ... --format stream``), side by
side in one run (issue 35 item 1).

    python benchmarks/stream_memory.py [--speakers 200] [--utterances 16] [--rounds 5]
                                       [--workdir /tmp/uvstream]

Builds ``formant-voices`` (2-s clips, float32) once as both, then runs each ``uvtrain run`` in its
own process while sampling ``/proc/PID/status`` every 20 ms: ``VmHWM`` (the peak resident set,
what ``/usr/bin/time -v`` reports as maximum resident set size), and the peaks of ``RssAnon``
(memory only the process holds) and ``RssFile`` (pages of mapped files: the memory-mapped dataset's
pages a run has touched, which the kernel may drop and read again when memory runs short).
Seconds per round: the mean of ``metrics.jsonl``'s ``seconds``, the first round left out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

FIELDS = ("VmHWM", "RssAnon", "RssFile")


def memory_of(pid: int) -> dict[str, int]:
    """The process's :data:`FIELDS` in kB (empty once it has gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in FIELDS:
            values[name] = int(rest.split()[0])
    return values


def measured_run(command: list[str], env: dict[str, str]) -> dict[str, float]:
    """Run ``command``; the peaks of :data:`FIELDS` in MB and its wall seconds."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peaks = dict.fromkeys(FIELDS, 0)
    while process.poll() is None:
        for name, value in memory_of(process.pid).items():
            peaks[name] = max(peaks[name], value)
        time.sleep(0.02)
    errors = process.stderr.read().decode() if process.stderr else ""
    if process.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{errors}")
    notes = [line for line in errors.splitlines() if line.startswith("data:")]
    return {
        **{f"{name}_MB": peaks[name] / 1024 for name in FIELDS},
        "wall_s": time.perf_counter() - started,
        "note": notes[0] if notes else "(no note: in memory)",
    }


def seconds_per_round(folder: Path) -> float:
    """Mean seconds of the run's rounds after its first."""
    rounds = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    later = [entry["seconds"] for entry in rounds[1:]] or [rounds[0]["seconds"]]
    return sum(later) / len(later)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speakers", type=int, default=200)
    parser.add_argument("--utterances", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/uvstream"))
    args = parser.parse_args()
    from uvtrain.data.base import FederatedDataset
    from uvtrain.data.registry import build_dataset
    from uvtrain.data.stream import write_stream_folder

    args.workdir.mkdir(parents=True, exist_ok=True)
    npz = build_dataset(
        "formant-voices",
        root=args.workdir,
        speakers=args.speakers,
        utterances=args.utterances,
        progress=False,
    )
    folder = npz.with_suffix(".stream")
    if not folder.is_dir():
        write_stream_folder(FederatedDataset.load(npz), folder)
    size = sum(path.stat().st_size for path in folder.iterdir()) / 2**20
    print(f"dataset: {npz.name}, {size:.0f} MB of samples ({args.speakers} x {args.utterances})")
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    run = [sys.executable, "-m", "uvtrain.cli", "run", "--method", "feduv", "--rounds",
           str(args.rounds), "--fraction", "0.1", "--batch-size", "16", "--device", "cpu"]  # fmt: skip
    for label, source in (("in memory (.npz)", npz), ("streamed (folder)", folder)):
        out = args.workdir / f"run-{source.suffix[1:]}"
        shutil.rmtree(out, ignore_errors=True)
        figures = measured_run([*run, "--dataset", str(source), "--out", str(out)], env)
        print(
            f"{label:<18} peak RSS {figures['VmHWM_MB']:7.0f} MB   peak anonymous "
            f"{figures['RssAnon_MB']:7.0f} MB   peak file-mapped {figures['RssFile_MB']:6.0f} MB   "
            f"{seconds_per_round(out):.3f} s/round   {figures['wall_s']:.1f} s in all   "
            f"{figures['note']}"
        )


if __name__ == "__main__":
    main()
