"""SDK figures: verify latency, enroll time, import time, installed size of the core dependencies.

By default the model is a raw-waveform conv net of realistic size (about 1.25 GFLOP per 2-s clip,
shaped like the FedUV paper's VoxCeleb network) with a BCH(127, 64) codeword output, built as an
ONNX graph with random weights: latency depends on the graph's shape, not its weights. With
``--bundle PATH`` the figures are those of that bundle (e.g. one written by ``uvexport``, float32
or ``--quantize int8``): audio bundles enroll and verify synthetic voice clips of their own window
length and sample rate, image bundles random images of their size; codeword bundles in codeword
mode, embedding bundles in prototype mode, as an app would.

    python benchmarks/sdk_latency.py [--runs 50] [--threads 1] [--bundle PATH]
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
from uvsdk.backoff import BackoffPolicy
from uvsdk.bundle import Code, Manifest
from uvsdk.codeword import unpack_generator
from uvsdk.inputs import AudioInput
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


def write_samples(manifest: Manifest, work: Path) -> tuple[Path, list[Path], np.ndarray, str]:
    """Ten enrollment files, one fresh probe file of the same user, one model input and what a
    sample is called — in the bundle's modality, size and (audio) sample rate."""
    enroll_dir = work / "enroll"
    enroll_dir.mkdir()
    if isinstance(manifest.input, AudioInput):
        rate, seconds = manifest.input.sample_rate, manifest.input.window_seconds
        clips = voice_corpus(2, 12, seconds, rate, seed=5)
        for index, clip in enumerate(clips[0][:10]):
            sf.write(enroll_dir / f"{index}.wav", clip, rate, subtype="PCM_16")
        probe = work / "probe.wav"
        sf.write(probe, clips[0][10], rate, subtype="PCM_16")
        window = clips[1][0][None].astype(np.float32)
        return enroll_dir, [probe], window, f"{seconds:g}-s clip"
    from PIL import Image

    spec = manifest.input
    rng = np.random.default_rng(5)
    face = rng.integers(0, 256, (spec.height, spec.width, spec.channels), dtype=np.uint8)
    paths = []
    for index in range(11):  # one "person": the same image under small noise
        noise = rng.integers(-12, 13, face.shape)
        image = np.clip(face.astype(int) + noise, 0, 255).astype(np.uint8)
        path = enroll_dir / f"{index}.png" if index < 10 else work / "probe.png"
        Image.fromarray(image.squeeze(-1) if spec.channels == 1 else image).save(path)
        paths.append(path)
    label = f"{spec.height}x{spec.width} image"
    return enroll_dir, [paths[-1]], face[None], label


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--bundle", type=Path, help="measure this .uvb instead of the built reference conv net"
    )
    args = parser.parse_args()
    os.environ.setdefault("UVSDK_PASSPHRASE", "benchmark")

    work = Path(tempfile.mkdtemp(prefix="uvsdk-bench-"))
    bundle = build_bundle(work) if args.bundle is None else args.bundle.resolve()
    # Lock-outs of no length: a calibrated bundle may reject every synthetic clip (its threshold
    # is set on real voices), and the timed rejections must not lock the user out; each verify
    # still records its failure in the template, the write an app's verify makes.
    never_locked = BackoffPolicy(base_seconds=0.0, max_seconds=0.0)
    verifier = Verifier(bundle, store=work / "store", threads=args.threads, backoff=never_locked)
    manifest = verifier.bundle.manifest
    enroll_dir, (probe,), window, sample = write_samples(manifest, work)
    size = f"bundle {bundle.name}: {bundle.stat().st_size / 1e6:.2f} MB"
    if args.bundle is None:
        flops = convnet_flops(2 * SAMPLE_RATE, 127)
        print(
            f"model: raw-waveform conv net, {flops / 1e9:.2f} GFLOP per 2-s clip, BCH(127,64) "
            f"output; {size}"
        )
    else:
        scheme = manifest.extra.get("quantization", {}).get("scheme", "none")
        print(
            f"model: {manifest.name} ({manifest.method}, {manifest.modality}, "
            f"{manifest.output_kind} dim {manifest.dim}, quantization {scheme}); {size}"
        )
    print(f"onnxruntime threads: {args.threads}; runs: {args.runs}")

    verifier.bundle.run(window)  # session creation and warm-up
    model_times, model_cpu = [], []
    for _ in range(args.runs):
        start, start_cpu = time.perf_counter(), time.thread_time()
        verifier.bundle.run(window)
        model_times.append(time.perf_counter() - start)
        model_cpu.append(time.thread_time() - start_cpu)

    codeword = manifest.output_kind == "codeword"
    start = time.perf_counter()
    if codeword:
        verifier.new_codeword()
    report = verifier.enroll(enroll_dir)
    enroll_seconds = time.perf_counter() - start
    assert report.used == 10, report
    mode = "codeword mode" if codeword else "prototype mode"

    if not verifier.verify(probe, backoff=False).accepted:
        # A trained model may reject a synthetic probe: time an enrollment file instead.
        probe = sorted(enroll_dir.iterdir())[0]
        print(f"(the fresh probe is rejected by this model: timing enrollment file {probe.name})")
    verify_times, verify_cpu = [], []
    for _ in range(args.runs):
        start, start_cpu = time.perf_counter(), time.thread_time()
        verifier.verify(probe, backoff=True)
        verify_times.append(time.perf_counter() - start)
        verify_cpu.append(time.thread_time() - start_cpu)

    audio = isinstance(manifest.input, AudioInput)
    digits = 1 if args.bundle is None else 2  # the built conv net: as tabulated in the docs
    what = f"{sample.split(' ', 1)[0]} window" if audio else sample
    print("\n| figure | median | p95 |")
    print("|---|---|---|")
    print(
        f"| model only, one {what} | {statistics.median(model_times) * 1e3:.{digits}f} ms "
        f"| {percentile(model_times, 95) * 1e3:.{digits}f} ms |"
    )
    print(
        f"| verify one {sample} (decode, model, score, back-off write) "
        f"| {statistics.median(verify_times) * 1e3:.{digits}f} ms "
        f"| {percentile(verify_times, 95) * 1e3:.{digits}f} ms |"
    )
    if args.bundle is not None and args.threads == 1:
        # With one thread ONNX Runtime runs in this thread: its CPU time is the latency without
        # the waits a busy machine adds, the figure to compare two bundles by.
        for name, times in (("model only", model_cpu), ("verify", verify_cpu)):
            print(
                f"| {name}, thread CPU time | {statistics.median(times) * 1e3:.2f} ms "
                f"| {percentile(times, 95) * 1e3:.2f} ms |"
            )
    files = f"clips of {manifest.input.window_seconds:g} s" if audio else f"{sample}s"
    print(f"| enroll 10 {files} ({mode}, incl. scrypt) | {enroll_seconds:.2f} s | |")
    if audio:
        print(
            f"| throughput of the model alone "
            f"| {manifest.input.window_seconds / statistics.median(model_times):.0f}x real time | |"
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
