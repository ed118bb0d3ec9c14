"""Which parts of CAM++ can compute in int8 and keep its scores? (issue 44, item 7)

``uvexport --quantize int8`` tries whole-model schemes and writes one only when it is no slower
than float32 and moves no score by more than ``DRIFT_BOUND`` (0.02). On CAM++ the fastest,
static QDQ with uint8 activations, is about twice as fast and moves scores far more than that.
This asks whether a part of the network can: each group of CAM++'s layers is quantized alone
(static QDQ, weights int8 per channel, activations uint8, the frontend float32 as in every
scheme), then the groups that cost least, and each model is judged on **real speech**:

- **drift**: ``|cos_int8 − cos_fp32|`` over every pair of the probe clips (its maximum, which is
  what ``uvexport``'s bound tests, and its 99th percentile);
- **EER** of the probe pairs (same person against different people), int8 against float32;
- **time**: thread CPU time of one 2-s clip on one thread (median of 15 after a warm-up), each
  int8 model timed beside float32 in the same run.

Probes: the first ``--clips`` files of at least 2 s of each person of ``--speakers`` (one folder a
person, as ``uvtrain data real-speech`` writes), cut to 2 s. Activation ranges are calibrated on
``--calibration``: a synth-voices ``.npz`` (32 training clips, what ``uvexport`` uses for a run
trained on it) or ``real`` (two more 2-s files of each person, never a probe).

    python benchmarks/campplus_int8.py --bundle campplus.uvb --speakers real-speech/speakers \\
        --calibration data/synth-voices-*.npz --out eval-int8/          # about 5 min

``--bundle`` is a float32 CAM++ bundle (``uvexport RUN`` of a ``--pretrained campplus`` run,
uncalibrated; the shipped default stores int8 weights and is refused). Writes ``OUT/int8.md``,
``OUT/int8.json`` and ``OUT/int8.png`` (each model's speed-up against its drift, the bound drawn);
with ``--write-bundle B`` also the bundle with the whole network in int8 (unsigned: a measuring
tool, for ``far_generalisation.py --bundle B``, not for devices).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

from uvexport.calibrate import people_folders
from uvexport.quantize import (
    _QUANTIZED_OP_TYPES,
    DRIFT_BOUND,
    QUANTIZED_OPS,
    _frontend_nodes,
    _quantize,
    _session,
    _spread,
)
from uvsdk.media import load_audio
from uvtrain.evaluation.metrics import equal_error_rate
from uvtrain.io import save_figure, write_json

RATE, WINDOW = 16000, 32000

#: CAM++'s layers by what they do (the weight names of ``uvtrain.models.campplus``).
GROUPS = {
    "FCM head (2-D convolutions)": ("backbone.head.",),
    "first TDNN layer": ("xvector.tdnn.",),
    "D-TDNN bottlenecks (1×1)": ("tdnnd", ".linear1.weight"),
    "D-TDNN context convolutions": ("linear_local",),
    "context-aware masks": ("cam_layer.linear1", "cam_layer.linear2"),
    "transition layers": ("transit",),
    "output layers (dense, adapter)": ("xvector.dense", "backbone.adapter."),
}
#: The combinations tried after the groups alone: the largest share of the time at the least drift.
COMBINATIONS = (
    ("D-TDNN bottlenecks (1×1)", "D-TDNN context convolutions"),
    (
        "D-TDNN bottlenecks (1×1)",
        "D-TDNN context convolutions",
        "first TDNN layer",
        "transition layers",
    ),
)


def in_group(weight: str, group: str) -> bool:
    marks = GROUPS[group]
    if group == "D-TDNN bottlenecks (1×1)":
        return all(mark in weight for mark in marks) and "cam_layer" not in weight
    return any(mark in weight for mark in marks)


def clips(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Probe clips, their owners, and the real calibration clips (other files of the same
    people), each 2 s."""
    probes, owners, spare = [], [], []
    for person, files in people_folders(args.speakers).items():
        taken = 0
        for path in files:
            x = load_audio(path, RATE)
            if len(x) < WINDOW:
                continue
            if taken < args.clips:
                probes.append(x[:WINDOW])
                owners.append(person)
            elif taken < args.clips + 2:
                spare.append(x[:WINDOW])
            else:
                break
            taken += 1
    return np.stack(probes).astype(np.float32), np.array(owners), np.stack(spare)


def eer(embeddings: np.ndarray, owners: np.ndarray) -> float:
    scores = embeddings @ embeddings.T
    i, j = np.triu_indices(len(embeddings), 1)
    same = owners[i] == owners[j]
    return equal_error_rate(scores[i, j][same], scores[i, j][~same])


def thread_ms(session, clip: np.ndarray, runs: int = 15) -> float:
    session.run(None, {"input": clip})
    times = []
    for _ in range(runs):
        start = time.thread_time()
        session.run(None, {"input": clip})
        times.append(time.thread_time() - start)
    return 1e3 * float(np.median(times))


def fail(message: str) -> None:
    """Bad input: one line on stderr, exit code 2 (as the project's commands do)."""
    print(f"campplus_int8: {message}", file=sys.stderr)
    raise SystemExit(2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True, help="a float32 CAM++ bundle")
    parser.add_argument("--speakers", type=Path, required=True)
    parser.add_argument("--calibration", required=True, help="a synth-voices .npz, or 'real'")
    parser.add_argument("--clips", type=int, default=6, help="probe clips per person")
    parser.add_argument("--out", type=Path, default=Path("eval-int8"))
    parser.add_argument("--write-bundle", type=Path, help="the whole network in int8, as a bundle")
    args = parser.parse_args()

    import onnx

    try:
        with zipfile.ZipFile(args.bundle) as bundle:
            fp32 = bundle.read("model.onnx")
            manifest = json.loads(bundle.read("manifest.json"))
            members = set(bundle.namelist())
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        fail(f"--bundle {args.bundle}: not a readable bundle ({error})")
    if args.write_bundle and members != {"manifest.json", "model.onnx"}:
        fail(f"{args.bundle}: --write-bundle needs an uncalibrated, unsigned bundle")
    if args.calibration != "real" and not Path(args.calibration).is_file():
        fail(f"--calibration {args.calibration}: not a file (a synth-voices .npz, or 'real')")
    model = onnx.load_from_string(fp32)
    stored = {onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.FLOAT16}
    if any(
        node.op_type in _QUANTIZED_OP_TYPES | {"DequantizeLinear"} for node in model.graph.node
    ) or any(
        init.data_type in stored for init in model.graph.initializer
    ):  # int8 arithmetic, or weights stored as int8 or float16 (--quantize weights)
        fail(f"{args.bundle}: its model is already quantized; give a float32 CAM++ bundle")
    names = {init.name for init in model.graph.initializer}
    if not any(name.startswith("backbone.xvector.") for name in names):
        fail(f"{args.bundle}: not a CAM++ model (no backbone.xvector weights)")

    probes, owners, spare = clips(args)
    if args.calibration == "real":
        calibration = spare
    else:
        data = np.load(args.calibration)
        calibration = _spread([data[k] for k in data.files if k.endswith("/train")], 32, WINDOW)
    print(
        f"{len(probes)} probe clips of {len(set(owners))} people; "
        f"{len(calibration)} calibration clips ({args.calibration})",
        flush=True,
    )

    def embed(session) -> np.ndarray:
        out = np.concatenate(
            [session.run(None, {"input": probes[i : i + 32]})[0] for i in range(0, len(probes), 32)]
        ).astype(np.float64)
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    reference = _session(fp32)
    e32 = embed(reference)
    s32 = e32 @ e32.T
    rows = [{"layers": "none (float32)", "eer": eer(e32, owners), "drift_max": 0.0}]
    rows[0]["ms"] = rows[0]["fp32_ms"] = thread_ms(reference, probes[:1])
    print(f"float32: EER {rows[0]['eer']:.4f}, {rows[0]['ms']:.1f} ms", flush=True)

    # the layers outside the frontend, by their weight's name; calibrated one clip at a time
    # (the exporter batches 8: its scales differ in the last bits, drift 0.251 against 0.253)
    frontend = set(_frontend_nodes(model))
    layers = [
        node.input[1]
        for node in model.graph.node
        if node.op_type in QUANTIZED_OPS and node.name not in frontend and len(node.input) > 1
    ]
    batches = [calibration[i : i + 1].astype(np.float32) for i in range(len(calibration))]
    with tempfile.TemporaryDirectory() as tmp:
        # "all of them": every layer outside the frontend, as uvexport --quantize int8 does
        plan = [("all of them", None)] + [(g, (g,)) for g in GROUPS]
        plan += [(" + ".join(c), c) for c in COMBINATIONS]
        for label, groups in plan:

            def chosen(weight: str, groups: tuple[str, ...] | None = groups) -> bool:
                return groups is None or any(in_group(weight, g) for g in groups)

            keep = [w for w in layers if chosen(w)]
            # the exporter's static QDQ u8s8 (uvexport.quantize), on these layers only
            int8 = _quantize(
                "static-qdq-u8s8", fp32, Path(tmp), batches, only=None if groups is None else chosen
            )
            session = _session(int8)
            e8 = embed(session)
            drift = np.abs(e8 @ e8.T - s32)
            row = {
                "layers": label,
                "quantized_layers": len(keep),
                "eer": eer(e8, owners),
                "drift_max": float(drift.max()),
                "drift_p99": float(np.quantile(drift, 0.99)),
                "ms": thread_ms(session, probes[:1]),
                "fp32_ms": thread_ms(reference, probes[:1]),
            }
            rows.append(row)
            if args.write_bundle and groups is None:
                manifest.update(
                    model_sha256=hashlib.sha256(int8).hexdigest(), name=manifest["name"] + "-int8"
                )
                with zipfile.ZipFile(args.write_bundle, "w") as out:
                    out.writestr("manifest.json", json.dumps(manifest, indent=2))
                    out.writestr("model.onnx", int8)
            print(
                f"{label}: {len(keep)} layers, EER {row['eer']:.4f}, drift {row['drift_max']:.3f} "
                f"(p99 {row['drift_p99']:.3f}), {row['ms']:.1f} ms against {row['fp32_ms']:.1f}",
                flush=True,
            )

    args.out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# CAM++ int8 (static QDQ u8s8) by layer group: {len(probes)} real 2-s clips of "
        f"{len(set(owners))} people, calibrated on {args.calibration}",
        "",
        "| layers in int8 | layers | speed-up (thread CPU, 1 thread) | drift max (bound "
        f"{DRIFT_BOUND}) | drift p99 | EER of the probe pairs |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        speed = row["fp32_ms"] / row["ms"]
        lines.append(
            f"| {row['layers']} | {row.get('quantized_layers', 0)} | {speed:.2f}× "
            f"({row['ms']:.1f} ms against {row['fp32_ms']:.1f}) | {row['drift_max']:.3f} | "
            f"{row.get('drift_p99', 0.0):.3f} | {row['eer']:.4f} |"
        )
    (args.out / "int8.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    write_json(
        args.out / "int8.json",
        {"machine": platform.processor() or platform.machine(), "bound": DRIFT_BOUND, "rows": rows},
    )
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.2))
    axes = figure.add_subplot()
    for row in rows[1:]:
        axes.scatter(row["drift_max"], row["fp32_ms"] / row["ms"])
        axes.annotate(row["layers"], (row["drift_max"], row["fp32_ms"] / row["ms"]), fontsize=6)
    axes.axvline(DRIFT_BOUND, color="grey", linestyle="--", label=f"uvexport's bound {DRIFT_BOUND}")
    axes.axhline(1.0, color="grey", linewidth=0.5)
    axes.set_xscale("log")
    axes.set_xlabel("largest score change against float32 (real clips)")
    axes.set_ylabel("speed-up over float32")
    axes.set_title("CAM++ int8 by layer group: speed against score drift")
    axes.legend(fontsize=7)
    save_figure(figure, args.out / "int8.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
