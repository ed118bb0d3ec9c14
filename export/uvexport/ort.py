"""``--ort``: the bundle's model in ORT format (``model.ort``) for ONNX Runtime Mobile.

ONNX Runtime's minimal (mobile) builds load only ORT-format models. :func:`convert` makes one
with ONNX Runtime's own mechanism (the one ``python -m onnxruntime.tools.convert_onnx_models_to_ort``
uses: a session that saves its optimized graph with ``session.save_model_format = ORT``), at
optimization level ``basic`` in the tool's "Fixed" style: basic optimizations are
semantics-preserving, leave standard ONNX operators that every execution provider and CPU can run,
and are what ONNX Runtime's docs say to bake in at conversion time (a minimal build cannot run
them). "Runtime" style would need ``session.enable_saved_runtime_optimizations`` in every app, for
the NNAPI / CoreML case only.

:func:`mobile_check` is ONNX Runtime's mobile usability checker
(``onnxruntime.tools.check_onnx_model_mobile_usability``) as plain facts for the manifest.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from uvsdk.bundle import ORT_FILE
from uvsdk.inputs import ModelInput

from .errors import ExportError

OPTIMIZATION = "basic"
"""The graph optimization level baked into ``model.ort`` (style "Fixed")."""
PARITY_TOLERANCE = 1e-5
"""Largest absolute difference allowed between ``model.ort`` and ``model.onnx`` outputs."""


def _session(model: bytes, options: Any = None) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def parity_inputs(source: ModelInput, seed: int = 0) -> list[np.ndarray]:
    """Random inputs of the bundle's contract: one window (or image), and a batch of three."""
    rng = np.random.default_rng(seed)
    return [source.random_batch(rng, count) for count in (1, 3)]


def convert(
    model: bytes, inputs: list[np.ndarray], tolerance: float | None = None
) -> tuple[bytes, dict[str, Any]]:
    """``model.onnx`` bytes → ``model.ort`` bytes and the manifest's ``ort`` object (without
    ``mobile_check``). The ORT model must load in ONNX Runtime and give the ONNX model's outputs
    within ``tolerance`` (default :data:`PARITY_TOLERANCE`, read when called) on ``inputs``;
    else :class:`ExportError`."""
    import onnxruntime as ort

    tolerance = PARITY_TOLERANCE if tolerance is None else tolerance

    with tempfile.TemporaryDirectory() as scratch:
        target = Path(scratch) / ORT_FILE
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(target)
        options.add_session_config_entry("session.save_model_format", "ORT")
        try:
            _session(model, options)
            ort_bytes = target.read_bytes()
        except Exception as error:  # onnxruntime's own exception types
            message = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
            raise ExportError(
                f"--ort: ONNX Runtime could not convert the model ({message})"
            ) from None
    try:
        reference, converted = _session(model), _session(ort_bytes)
        worst = 0.0
        for batch in inputs:
            (a,) = reference.run(["output"], {"input": batch})
            (b,) = converted.run(["output"], {"input": batch})
            worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b))))
    except Exception as error:
        message = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        raise ExportError(f"--ort: model.ort does not run in ONNX Runtime ({message})") from None
    if not worst <= tolerance:
        raise ExportError(
            f"--ort: model.ort differs from model.onnx by {worst:.3g} "
            f"(tolerance {tolerance:g}): not written"
        )
    info = {
        "file": ORT_FILE,
        "sha256": hashlib.sha256(ort_bytes).hexdigest(),
        "onnxruntime": ort.__version__,
        "optimization": OPTIMIZATION,
        "parity": {"max_abs_diff": worst, "tolerance": tolerance},
    }
    return ort_bytes, info


def mobile_check(model: bytes) -> dict[str, Any]:
    """ONNX Runtime's mobile usability check of ``model`` (optimized to ``basic`` first, as the
    checker does), per execution provider: how many nodes and partitions it could take, the
    checker's verdict (yes / maybe / no), the operators it lacks, and the verdict if the input
    shape were made fixed. The CPU execution provider runs every model; this is about NNAPI
    (Android) and CoreML (iOS, ML Program)."""
    from onnxruntime.tools.mobile_helpers import usability_checker as checker
    from onnxruntime.tools.onnx_model_utils import ModelProtoWithShapeInfo, optimize_model

    quiet = logging.getLogger("uvexport.ort.mobile_check")
    quiet.setLevel(logging.ERROR)
    providers = {
        "nnapi": checker.check_nnapi_partitions,
        "coreml": lambda graph, fixed: checker.check_coreml_partitions(
            graph, fixed, "coreml_supported_mlprogram_ops.md"
        ),
    }
    with tempfile.TemporaryDirectory() as scratch:
        source, optimized = Path(scratch) / "model.onnx", Path(scratch) / "optimized.onnx"
        source.write_bytes(model)
        optimize_model(source, optimized, use_external_initializers=True)
        graph = ModelProtoWithShapeInfo(optimized).model_with_shape_info
        dynamic, _ = checker.check_shapes(graph.graph, quiet)
        facts: dict[str, Any] = {"dynamic_inputs": sorted(i.name for i in dynamic)}
        for name, check in providers.items():
            info = check(graph, True)
            fixed = check(graph, False) if dynamic else info
            facts[name] = {
                "verdict": info.suitability().name.lower(),
                "nodes": info.num_supported_nodes,
                "of": info.num_nodes,
                "partitions": info.num_partitions,
                "unsupported_ops": sorted(
                    op.removeprefix("ai.onnx:") for op in info.unsupported_ops
                ),
                "verdict_if_fixed_shape": fixed.suitability().name.lower(),
            }
    return facts


def summary(ort: dict[str, Any], onnx_bytes: int, ort_bytes: int) -> list[str]:
    """A few lines on ``model.ort`` and the mobile check, for the command line."""
    lines = [
        f"model.ort: {ort_bytes / 1e6:.2f} MB (model.onnx {onnx_bytes / 1e6:.2f} MB), ONNX Runtime "
        f"{ort['onnxruntime']}, optimization {ort['optimization']}; vs model.onnx max abs "
        f"difference {ort['parity']['max_abs_diff']:.2e}"
    ]
    check = ort.get("mobile_check")
    if check:
        for name, label in (("nnapi", "NNAPI (Android)"), ("coreml", "CoreML (iOS)")):
            facts = check[name]
            missing = ", ".join(facts["unsupported_ops"]) or "none"
            lines.append(
                f"  {label}: {facts['verdict']} ({facts['nodes']}/{facts['of']} nodes in "
                f"{facts['partitions']} partitions; with a fixed input shape: "
                f"{facts['verdict_if_fixed_shape']}); ops it lacks: {missing}"
            )
        lines.append("  the CPU execution provider runs the whole model on Android and iOS")
    return lines
