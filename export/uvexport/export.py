"""A trained run folder → a ``.uvb`` bundle: ONNX export, parity check against torch, manifest.

The model is exported whole — the log-mel or pixel preprocessing is part of ``forward``, so it is
part of the graph — with ``torch.onnx.export(dynamo=True)``, one file (no external data), input
``input`` and output ``output``, a dynamic batch and, for audio, a dynamic length. Before anything
is written, ONNX Runtime is checked against torch on the run's own test clips at several batch
sizes and lengths; the export fails when the largest absolute difference exceeds the tolerance.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from uvsdk.bundle import AudioInput, ImageInput

from .bundle import make_manifest, write_bundle

#: ONNX opset of the exported graphs (DESIGN: at least 17).
OPSET = 18
#: Largest absolute difference between ONNX Runtime and torch an export accepts. Codeword outputs
#: have norm √c (≈ 11.3 for c = 127), embeddings norm 1; float32 round-off is ~1e-6 of that.
TOLERANCE = 1e-3


class ExportError(Exception):
    """The run cannot be exported (not a run folder, parity failed, ...). One line."""


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_run` wrote and measured."""

    path: Path
    max_abs_diff: float
    seconds: float
    size_bytes: int


def export_onnx(model: Any, example: Any, dynamic_shapes: dict[int, Any]) -> bytes:
    """``model`` as one ONNX file's bytes: opset :data:`OPSET`, input ``input``, output
    ``output``, the given dynamic axes of the input (``torch.export.Dim``), no external data."""
    import torch

    program = torch.onnx.export(
        model,
        (example,),
        None,
        dynamo=True,
        external_data=False,
        opset_version=OPSET,
        input_names=["input"],
        output_names=["output"],
        dynamic_shapes=(dynamic_shapes,),
        verbose=False,
    )
    return program.model_proto.SerializeToString()


def _parity_inputs(dataset: Any) -> list[np.ndarray]:
    """Real inputs from the run's test clips: several batch sizes and, for audio, lengths."""
    clips = np.concatenate([client.test for client in dataset.clients if len(client.test)])
    if dataset.modality != "audio":
        return [clips[:1], clips[1:7]]
    rate = int(dataset.spec["sample_rate"])
    length = clips.shape[1]
    return [clips[:1], clips[1:4, : max(rate // 2, length // 3)], clips[4:9, : length // 2 + 123]]


def export_run(
    run_dir: str | Path,
    out: str | Path,
    *,
    sign_key: Any | None = None,
    tolerance: float = TOLERANCE,
) -> ExportResult:
    """Export a run folder to a bundle; raise :class:`ExportError` when parity fails."""
    import onnxruntime as ort
    import torch
    from torch.export import Dim

    from uvtrain.engine import TrainingError
    from uvtrain.run import load_run

    started = time.perf_counter()
    run_dir = Path(run_dir)
    try:
        config, dataset, simulation = load_run(run_dir)
    except TrainingError as error:
        raise ExportError(str(error)) from None
    model = simulation.load_into_model().cpu().eval()
    inputs = _parity_inputs(dataset)
    example = torch.as_tensor(inputs[-1])
    shapes: dict[int, Any] = {0: Dim("batch", min=1)}
    if dataset.modality == "audio":
        shapes[1] = Dim("samples", min=int(model.backbone.min_samples))
    onnx_bytes = export_onnx(model, example, shapes)

    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    worst = 0.0
    for batch in inputs:
        with torch.no_grad():
            expected = model(torch.as_tensor(batch)).numpy()
        got = session.run(["output"], {"input": batch})[0]
        worst = max(worst, float(np.abs(got - expected).max()))
    if not worst <= tolerance:
        raise ExportError(
            f"ONNX Runtime differs from torch by {worst:.3g} (tolerance {tolerance:g}): not written"
        )

    spec = dataset.spec
    source: AudioInput | ImageInput
    if dataset.modality == "audio":
        source = AudioInput(
            int(spec["sample_rate"]),
            float(spec["window_seconds"]),
            float(spec["hop_seconds"]),
            float(spec["min_seconds"]),
        )
    else:
        source = ImageInput(int(spec["height"]), int(spec["width"]), int(spec["channels"]))
    code = None
    if model.output_kind == "codeword":
        from uvtrain.codes import bch_code

        code = bch_code(config.code_length)
    report_path = run_dir / "report.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    extra = {
        "provenance": {
            "method": config.method,
            "dataset": dataset.name,
            "rounds": int(report.get("rounds", 0)) or None,
            "backbone": type(model.backbone).__name__,
            "metrics": {name: split.get("eer") for name, split in report.get("splits", {}).items()},
        },
        "data_licence": dataset.licence,
        "parity": {"max_abs_diff": worst, "tolerance": tolerance, "opset": OPSET},
    }
    manifest = make_manifest(
        onnx_bytes,
        name=Path(out).stem,
        method=config.method,
        source=source,
        output_kind=model.output_kind,
        dim=int(model.output_dim),
        code=code,
        extra=extra,
    )
    path = write_bundle(out, onnx_bytes, manifest, sign_key=sign_key)
    return ExportResult(path, worst, time.perf_counter() - started, path.stat().st_size)
