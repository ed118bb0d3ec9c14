"""A trained run folder → a ``.uvb`` bundle: the exporter's steps, in order.

:func:`export_run` loads a run folder and :func:`export_model` does the rest, each step in its
own module:

1. the model → one ONNX file (:mod:`uvexport.onnx_export`: opset
   :data:`~uvexport.onnx_export.OPSET`, a dynamic batch and, for audio, a dynamic length, the
   preprocessing inside the graph);
2. parity: before anything is written, ONNX Runtime is checked against torch on the run's own test
   clips at several batch sizes and lengths; the export fails when the largest absolute
   difference exceeds ``tolerance`` (default :data:`~uvexport.onnx_export.TOLERANCE`);
3. with ``quantize="int8"``, the int8 search (:mod:`uvexport.quantize`): the fastest of
   ``schemes`` that is not slower than float32 and moves no score by more than ``drift_bound``
   (defaults :data:`~uvexport.quantize.SCHEMES`, :data:`~uvexport.quantize.DRIFT_BOUND`), else
   the export fails and names the figures;
4. with ``ort=True``, ``model.ort`` (:mod:`uvexport.ort`: the model in ORT format for ONNX
   Runtime Mobile, checked against ``model.onnx``, and ONNX Runtime's mobile usability check);
5. the manifest (:mod:`uvexport.provenance`: input, code, where the model came from) and the
   bundle (:mod:`uvexport.bundle`: validated, signed, written atomically).

Each name is imported from the module that defines it (``from uvexport.quantize import
SCHEMES``, ``from uvexport.errors import ExportError``); this module holds the steps' order alone.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from uvsdk.inputs import ModelInput

from .bundle import make_manifest, write_bundle
from .errors import ExportError
from .onnx_export import OPSET, TOLERANCE, export_onnx, max_abs_difference
from .provenance import bundle_code, run_extra
from .quantize import CALIBRATION_CLIPS, DRIFT_BOUND, DRIFT_CLIPS, SCHEMES, _spread, quantize_int8

__all__ = ["ExportResult", "export_model", "export_run"]


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_run` wrote and measured."""

    path: Path
    max_abs_diff: float
    seconds: float
    size_bytes: int
    quantization: dict[str, Any] = field(default_factory=lambda: {"scheme": "none"})


def export_run(
    run_dir: str | Path,
    out: str | Path,
    *,
    sign_key: Any | None = None,
    tolerance: float = TOLERANCE,
    quantize: str = "none",
    method: str | None = None,
    extra: dict[str, Any] | None = None,
    calibrate: str | Path | None = None,
    calibration_data: str | None = None,
    calibration_cache: str | Path | None = None,
    ort: bool = False,
    drift_bound: float = DRIFT_BOUND,
    schemes: Sequence[str] = SCHEMES,
    progress: bool = True,
) -> ExportResult:
    """Export a run folder to a bundle (``progress``: a line on stderr after each step, with
    the ETA, :class:`uvtrain.progress.Progress`); raise :class:`ExportError` when parity fails, or when
    ``quantize="int8"`` and no int8 scheme of ``schemes`` is both not slower and within
    ``drift_bound`` (defaults: :data:`uvexport.quantize.SCHEMES`,
    :data:`uvexport.quantize.DRIFT_BOUND`).

    ``method`` replaces the manifest's method (default: the run's), and ``extra`` adds top-level
    manifest keys (e.g. ``description``); the default voice bundle uses both. ``calibrate``
    (a folder of person folders) measures the exported model on those people and writes the
    calibration table into the manifest (:mod:`uvexport.calibrate`); ``calibration_data``
    describes them. ``ort`` also writes ``model.ort`` (:mod:`uvexport.ort`)."""
    if quantize not in ("none", "int8", "weights"):
        raise ExportError(f"--quantize {quantize}: choose none, int8 or weights")
    from uvtrain.engine import TrainingError
    from uvtrain.progress import Progress
    from uvtrain.run import load_run

    started = time.perf_counter()
    run_dir = Path(run_dir)
    # the steps export_model reports, and loading the run (issue 47: 43 s without a word)
    total = len(export_steps(quantize != "none", ort, calibrate is not None)) + 1
    with Progress(
        "uvexport", total, unit="step", every_seconds=0.0, transient=True, enabled=progress
    ) as steps:
        try:
            config, dataset, simulation = load_run(run_dir)
        except TrainingError as error:
            raise ExportError(str(error)) from None
        steps.update(1, {"done": "loaded the run"})
        model = simulation.load_into_model().cpu().eval()
        clips = np.concatenate([client.test for client in dataset.clients if len(client.test)])
        inputs = dataset.input.parity_inputs(clips)
        extra = run_extra(run_dir, config, dataset, model, extra, method)

        def int8(onnx_bytes: bytes) -> tuple[bytes, dict[str, Any]]:
            return _quantize_run(
                onnx_bytes,
                model,
                dataset,
                simulation,
                inputs,
                bound=drift_bound,
                schemes=schemes,
                weights_only=quantize == "weights",
            )

        return export_model(
            model,
            out,
            source=dataset.input,
            method=method or config.method.name,
            code_length=getattr(config.method, "code_length", 127),
            inputs=inputs,
            extra=extra,
            sign_key=sign_key,
            tolerance=tolerance,
            quantizer=int8 if quantize != "none" else None,
            started=started,
            calibrate=calibrate,
            calibration_data=calibration_data,
            calibration_cache=calibration_cache,
            ort=ort,
            on_step=lambda done: steps.update(1, {"done": done}),
        )


def export_steps(quantize: bool, ort: bool, calibrate: bool) -> list[str]:
    """The steps :func:`export_model` reports, in order, for these options."""
    optional = [("int8", quantize), ("ORT format", ort), ("calibrated", calibrate)]
    return [
        "ONNX graph",
        "parity with torch",
        *(name for name, wanted in optional if wanted),
        "written",
    ]


def export_model(
    model: Any,
    out: str | Path,
    *,
    source: ModelInput,
    method: str,
    code_length: int,
    inputs: Sequence[np.ndarray],
    extra: dict[str, Any],
    sign_key: Any | None = None,
    tolerance: float = TOLERANCE,
    quantizer: Callable[[bytes], tuple[bytes, dict[str, Any]]] | None = None,
    started: float | None = None,
    calibrate: str | Path | None = None,
    calibration_data: str | None = None,
    calibration_cache: str | Path | None = None,
    ort: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> ExportResult:
    """Export a trained model (in memory) to a bundle, checked for parity on ``inputs``;
    ``on_step`` is called with the name of each step of :func:`export_steps` when it is done.

    :func:`export_run` calls it for a simulator's run folder; the Flower server calls it with its
    final global model and synthetic parity inputs (it holds no data).
    """
    import torch
    from torch.export import Dim

    started = time.perf_counter() if started is None else started
    model = model.cpu().eval()
    # The manifest says what the graph hears: a narrow-band front end (``--band narrow``)
    # is input.band "narrow" (spec §3.4), whichever run or server exported it.
    band = getattr(getattr(model.backbone, "frontend", None), "band", "wide")
    if band != "wide":
        source = dataclasses.replace(source, band=band)
    example = torch.as_tensor(inputs[-1])
    shapes: dict[int, Any] = {0: Dim("batch", min=1)}
    for axis, name in source.dynamic_axes.items():  # audio: the clip's length
        shapes[axis] = Dim(name, min=int(model.backbone.min_samples))
    done = on_step or (lambda name: None)
    onnx_bytes = export_onnx(model, example, shapes)
    done("ONNX graph")

    worst = max_abs_difference(model, onnx_bytes, inputs)
    if not worst <= tolerance:
        raise ExportError(
            f"ONNX Runtime differs from torch by {worst:.3g} (tolerance {tolerance:g}): not written"
        )
    done("parity with torch")

    quantization: dict[str, Any] = {"scheme": "none"}
    model_bytes = onnx_bytes
    if quantizer is not None:
        model_bytes, quantization = quantizer(onnx_bytes)
        done("int8")

    extra = {
        **extra,
        "parity": {"max_abs_diff": worst, "tolerance": tolerance, "opset": OPSET},
        "quantization": quantization,
    }
    ort_bytes = None
    if ort:
        from .ort import convert, mobile_check, parity_inputs

        ort_bytes, extra["ort"] = convert(model_bytes, parity_inputs(source))
        extra["ort"]["mobile_check"] = mobile_check(model_bytes)
        done("ORT format")
    manifest = make_manifest(
        model_bytes,
        name=Path(out).stem,
        method=method,
        source=source,
        output_kind=model.output_kind,
        dim=int(model.output_dim),
        code=bundle_code(model, code_length),
        extra=extra,
    )
    cohort = None
    if calibrate is not None:
        manifest, cohort = _calibrated(
            model_bytes, manifest, calibrate, calibration_data, ort_bytes, calibration_cache
        )
        done("calibrated")
    path = write_bundle(out, model_bytes, manifest, sign_key=sign_key, ort=ort_bytes, cohort=cohort)
    done("written")
    return ExportResult(
        path, worst, time.perf_counter() - started, path.stat().st_size, quantization
    )


def _calibrated(
    model_bytes: bytes,
    manifest: Any,
    root: str | Path,
    data: str | None,
    ort: bytes | None,
    cache: str | Path | None,
) -> tuple[Any, bytes | None]:
    """``manifest`` with the calibration (and cohort) of the exact model file, measured through
    the SDK on the people under ``root`` (before anything is written to the bundle's path), and
    the cohort's bytes."""
    import tempfile

    from uvsdk.bundle import Bundle

    from .calibrate import calibrate, print_progress

    with tempfile.TemporaryDirectory() as scratch:
        folder = write_bundle(
            Path(scratch) / "bundle", model_bytes, manifest, directory=True, ort=ort
        )
        calibrated = calibrate(
            Bundle(folder), root, data=data, progress=print_progress, cache=cache
        )
    print(file=sys.stderr)  # ends the progress line
    return calibrated.manifest(manifest), calibrated.cohort


def _quantize_run(
    fp32: bytes,
    model: Any,
    dataset: Any,
    simulation: Any,
    checks: list[np.ndarray],
    *,
    bound: float,
    schemes: Sequence[str],
    weights_only: bool = False,
) -> tuple[bytes, dict[str, Any]]:
    """:func:`quantize_int8` on a run: calibration on its training clips, drift on its test
    clips against its users' codewords or (embeddings) their validation-clip prototypes."""
    clients = dataset.clients
    window_samples = dataset.input.window_samples
    calibration = _spread([c.train for c in clients], CALIBRATION_CLIPS, window_samples)
    probes = _spread([c.test for c in clients], DRIFT_CLIPS, window_samples)
    window = probes[0]
    codewords, enrollment = None, []
    if model.output_kind == "codeword":
        codewords = simulation.constants["codeword"].cpu().numpy().astype(np.float64)
    else:
        enrollment = [client.val if len(client.val) else client.train[:3] for client in clients]
    return quantize_int8(
        fp32,
        window=window,
        calibration=calibration,
        probes=probes,
        checks=checks,
        dim=int(model.output_dim),
        codewords=codewords,
        enrollment=enrollment,
        bound=bound,
        schemes=schemes,
        weights_only=weights_only,
        half=tuple(
            f"backbone.{prefix}" for prefix in getattr(model.backbone, "half_precision", ())
        ),
    )
