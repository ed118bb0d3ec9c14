"""SDK figures: verify latency, enroll time, import time, installed size of the core dependencies.

The model is a raw-waveform conv net of realistic size (about 1.25 GFLOP per 2-s clip, shaped like
the FedUV paper's VoxCeleb network) with a BCH(127, 64) codeword output, built as an ONNX graph with
random weights: latency depends on the graph's shape, not its weights.

    python benchmarks/sdk_latency.py [--runs 50] [--threads 1]
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from uvexport.bundle import make_manifest, write_bundle
from uvexport.reference import convnet_flops, waveform_convnet_model
from uvsdk import Verifier
from uvsdk.bundle import AudioInput, Code
from uvsdk.codeword import unpack_generator
from uvtrain.data.formant import voice_corpus

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_RATE = 16000


def bch127() -> Code:
    spec = json.loads((ROOT / "tests" / "fixtures" / "bch_127_64.json").read_text())
    generator = unpack_generator(spec["generator"], spec["k"], spec["n"])
    return Code("bch", spec["n"], spec["k"], spec["d_min"], 32, generator)


def build_bundle(folder: Path) -> Path:
    model = waveform_convnet_model(SAMPLE_RATE, code_length=127)
    manifest = make_manifest(
        model,
        name="benchmark-convnet",
        method="reference",
        source=AudioInput(SAMPLE_RATE, 2.0, 1.0, 0.5),
        output_kind="codeword",
        dim=127,
        code=bch127(),
    )
    return write_bundle(folder / "convnet.uvb", model, manifest)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def distribution_closure(name: str) -> set[str]:
    """A distribution and everything it requires (no extras), as installed."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        key = re.sub(r"[-_.]+", "-", current).lower()
        if key in seen:
            continue
        try:
            requirements = metadata.requires(current) or []
        except metadata.PackageNotFoundError:
            continue
        seen.add(key)
        for requirement in requirements:
            if "extra ==" in requirement:
                continue
            marker = requirement.split(";", 1)
            if len(marker) == 2 and not _marker_applies(marker[1]):
                continue
            todo.append(re.split(r"[\s<>=!~\[;(]", marker[0].strip(), maxsplit=1)[0])
    return seen


def _marker_applies(marker: str) -> bool:
    try:
        from packaging.markers import Marker

        return Marker(marker).evaluate({"extra": ""})
    except Exception:
        return True


def installed_bytes(distribution: str) -> int:
    files = metadata.distribution(distribution).files or []
    total = 0
    for file in files:
        path = Path(file.locate())
        if path.is_file():
            total += path.stat().st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("UVSDK_PASSPHRASE", "benchmark")

    work = Path(tempfile.mkdtemp(prefix="uvsdk-bench-"))
    bundle = build_bundle(work)
    clips = voice_corpus(2, 12, 2.0, SAMPLE_RATE, seed=5)
    enroll_dir = work / "enroll"
    enroll_dir.mkdir()
    for index, clip in enumerate(clips[0][:10]):
        sf.write(enroll_dir / f"{index}.wav", clip, SAMPLE_RATE, subtype="PCM_16")
    probe = work / "probe.wav"
    sf.write(probe, clips[0][10], SAMPLE_RATE, subtype="PCM_16")

    verifier = Verifier(bundle, store=work / "store", threads=args.threads)
    flops = convnet_flops(2 * SAMPLE_RATE, 127)
    print(f"model: raw-waveform conv net, {flops / 1e9:.2f} GFLOP per 2-s clip, BCH(127,64) output")
    print(f"onnxruntime threads: {args.threads}; runs: {args.runs}")

    window = clips[1][0][None].astype(np.float32)
    verifier.bundle.run(window)  # session creation and warm-up
    model_times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        verifier.bundle.run(window)
        model_times.append(time.perf_counter() - start)

    start = time.perf_counter()
    verifier.new_codeword()
    report = verifier.enroll(enroll_dir)
    enroll_seconds = time.perf_counter() - start
    assert report.used == 10

    verify_times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        verifier.verify(probe, backoff=True)
        verify_times.append(time.perf_counter() - start)

    print("\n| figure | median | p95 |")
    print("|---|---|---|")
    print(
        f"| model only, one 2-s window | {statistics.median(model_times) * 1e3:.1f} ms "
        f"| {percentile(model_times, 95) * 1e3:.1f} ms |"
    )
    print(
        f"| verify one 2-s clip (decode, model, score, back-off write) "
        f"| {statistics.median(verify_times) * 1e3:.1f} ms | {percentile(verify_times, 95) * 1e3:.1f} ms |"
    )
    print(f"| enroll 10 clips of 2 s (codeword mode, incl. scrypt) | {enroll_seconds:.2f} s | |")
    print(
        f"| throughput of the model alone | {2 * SAMPLE_RATE / statistics.median(model_times) / SAMPLE_RATE:.0f}x real time | |"
    )

    cold = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "uvsdk.cli", "verify", str(probe), "--no-backoff"]
            + ["--bundle", str(bundle), "--store", str(work / "store")],
            check=True,
            capture_output=True,
        )
        cold.append(time.perf_counter() - start)
    print(
        f"| `uvsdk verify` as a new process (python start, imports, scrypt) | {statistics.median(cold):.2f} s | |"
    )

    imports = []
    for _ in range(7):
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "import time; t = time.perf_counter(); import uvsdk; "
                "print(time.perf_counter() - t)",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        imports.append(float(out.stdout))
    print(
        f"| `import uvsdk` | {statistics.median(imports) * 1e3:.0f} ms | {max(imports) * 1e3:.0f} ms (max) |"
    )

    closure = sorted(distribution_closure("uvsdk") - {"uvsdk"})
    sizes = {name: installed_bytes(name) for name in closure}
    print(f"\ninstalled size of the SDK's dependencies: {sum(sizes.values()) / 2**20:.0f} MiB")
    for name, size in sorted(sizes.items(), key=lambda item: -item[1]):
        print(f"  {name:<22} {size / 2**20:7.1f} MiB")


if __name__ == "__main__":
    main()
