"""A trained run folder → a ``.uvb`` bundle: ONNX export, parity check against torch, manifest.

The model is exported whole — the log-mel or pixel preprocessing is part of ``forward``, so it is
part of the graph — with ``torch.onnx.export(dynamo=True)``, one file (no external data), input
``input`` and output ``output``, a dynamic batch and, for audio, a dynamic length. Before anything
is written, ONNX Runtime is checked against torch on the run's own test clips at several batch
sizes and lengths; the export fails when the largest absolute difference exceeds the tolerance.

``quantize="int8"`` then tries the int8 schemes of :data:`SCHEMES` with ONNX Runtime's quantization
tools, measures each against the float32 model — latency of one window on one thread, and how far
the scores the SDK would compute move — and writes the fastest scheme that is not slower than
float32 and moves no score by more than :data:`DRIFT_BOUND` (:func:`choose_scheme`). When none
qualifies the export fails and names the figures. The log-mel frontend (the parameters under
:data:`FRONTEND_PREFIX`) always stays float32: its inputs — the waveform and the power spectrum —
span a dynamic range that an int8 scale calibrated on the training clips cannot hold for a quieter
or louder recording.
"""

from __future__ import annotations

import contextlib
import json
import logging
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from uvsdk.bundle import AudioInput, ImageInput
from uvtrain.errors import UvtrainError

from .bundle import make_manifest, write_bundle

#: ONNX opset of the exported graphs (DESIGN: at least 17).
OPSET = 18
#: Largest absolute difference between ONNX Runtime and torch an export accepts. Codeword outputs
#: have norm √c (≈ 11.3 for c = 127), embeddings norm 1; float32 round-off is ~1e-6 of that.
TOLERANCE = 1e-3
#: Largest change an int8 model may make to any score the SDK computes, in score units (scores
#: are cosines in [-1, 1], and a user's warm-up threshold τ is one of them): 0.02 is a fiftieth of
#: the gap between a perfect genuine score (1) and an unrelated one (0), so an accept/reject can
#: flip only for a score already within 0.02 of τ.
DRIFT_BOUND = 0.02
#: The int8 schemes tried, fastest qualifying wins: dynamic (weights int8 ahead of time,
#: activations quantized at run time) of MatMul/Gemm only or with the convolutions too, and static
#: QDQ (activations calibrated on training clips, weights per channel) with uint8 or int8
#: activations.
SCHEMES = ("dynamic-matmul", "dynamic-conv", "static-qdq-u8s8", "static-qdq-s8s8")
#: Interleaved timed runs per model (after warm-up); the figure is their median.
LATENCY_RUNS = 50
#: Training clips the static schemes calibrate their activation ranges on.
CALIBRATION_CLIPS = 32
#: Test clips (spread over the clients) the score drift is measured on.
DRIFT_CLIPS = 256
#: Parameters of the feature frontend: the nodes that read them are never quantized.
FRONTEND_PREFIX = "backbone.frontend."
#: Op types whose quantized kernels can pay for themselves on a CPU.
QUANTIZED_OPS = ("Conv", "MatMul", "Gemm")


class ExportError(UvtrainError):
    """The run cannot be exported (not a run folder, parity failed, ...). One line."""


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_run` wrote and measured."""

    path: Path
    max_abs_diff: float
    seconds: float
    size_bytes: int
    quantization: dict[str, Any] = field(default_factory=lambda: {"scheme": "none"})


@contextlib.contextmanager
def _quiet_exporter() -> Any:
    """Silence two messages of ``torch.onnx.export`` that are about torch, not about the user's
    model, and that every ``uvexport`` printed (torch 2.13, onnxscript 0.5):

    * four ``WARNING`` lines of the exporter's op registry, "torchvision is not installed.
      Skipping torchvision::nms" (roi_align, roi_pool, deform_conv2d): it registers torchvision's
      ops when torchvision is there, and our models use none of them. Only that logger is raised
      to ERROR, only for the export.
    * a ``FutureWarning`` from torch's own pytree code, "`isinstance(treespec, LeafSpec)` is
      deprecated": torch calling its own deprecated API. Only that message is filtered.
    """
    registry = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registry.level
    registry.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore",
                message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                category=FutureWarning,
            )
            # The same for recurrent models (the GE2E encoder's LSTM): torch's graph code calling
            # its own deprecated _check_is_size, and nn.LSTM's _flat_weights (torch's attribute,
            # not ours) reported as "assigned during export".
            warnings.filterwarnings(
                "ignore", message=r"_check_is_size will be removed", category=FutureWarning
            )
            warnings.filterwarnings(
                "ignore",
                message=r"The tensor attributes \S*lstm\._flat_weights",
                category=UserWarning,
            )
            yield
    finally:
        registry.setLevel(level)


def export_onnx(model: Any, example: Any, dynamic_shapes: dict[int, Any]) -> bytes:
    """``model`` as one ONNX file's bytes: opset :data:`OPSET`, input ``input``, output
    ``output``, the given dynamic axes of the input (``torch.export.Dim``), no external data.

    The exporter's per-node debug metadata is dropped (:func:`_drop_debug_metadata`: the same
    model gives the same bytes), and so is its ``value_info`` (intermediate shapes, optional in
    ONNX): it records some shapes as traced from the example (GroupNorm's reshape targets as ``[0, 32, 0, 0]``),
    ONNX Runtime ran the face network 5 % slower with it, and the quantizer's shape inference
    rejects it; ONNX Runtime infers the shapes itself."""
    import torch

    with _quiet_exporter():
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
    proto = program.model_proto
    del proto.graph.value_info[:]
    _drop_debug_metadata(proto.graph)
    return proto.SerializeToString()


def _drop_debug_metadata(graph: Any) -> None:
    """Remove the exporter's per-node debug metadata (``pkg.torch.onnx.stack_trace``, ``fx_node``,
    ``namespace``, ...): it holds Python object addresses (``<function sym_max at 0x7f...>``) and
    source paths, so two exports of the same model differed in their bytes and ``model_sha256``.
    Without it an export is reproducible; ONNX Runtime never reads it."""
    for node in graph.node:
        del node.metadata_props[:]
        for attribute in node.attribute:
            if attribute.HasField("g"):
                _drop_debug_metadata(attribute.g)
            for subgraph in attribute.graphs:
                _drop_debug_metadata(subgraph)


def _parity_inputs(dataset: Any) -> list[np.ndarray]:
    """Real inputs from the run's test clips: several batch sizes and, for audio, lengths."""
    clips = np.concatenate([client.test for client in dataset.clients if len(client.test)])
    if dataset.modality != "audio":
        return [clips[:1], clips[1:7]]
    rate = int(dataset.spec["sample_rate"])
    length = clips.shape[1]
    return [clips[:1], clips[1:4, : max(rate // 2, length // 3)], clips[4:9, : length // 2 + 123]]


@dataclass(frozen=True)
class Candidate:
    """One int8 scheme as measured: median latency of one window (``int8_ms``, thread CPU time;
    ``wall_ms`` beside it), the largest score change, the model's size; or why it failed."""

    scheme: str
    int8_ms: float = float("nan")
    score_drift: float = float("nan")
    wall_ms: float = float("nan")
    size_bytes: int = 0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.error is not None:
            return {"scheme": self.scheme, "error": self.error}
        return {
            "scheme": self.scheme,
            "int8_ms": round(self.int8_ms, 4),
            "wall_ms": round(self.wall_ms, 4),
            "score_drift": round(self.score_drift, 6),
            "bytes": self.size_bytes,
        }


def choose_scheme(candidates: Sequence[Candidate], fp32_ms: float, bound: float) -> Candidate:
    """The fastest candidate that is not slower than float32 (``int8_ms <= fp32_ms``) and whose
    score drift is within ``bound``; :class:`ExportError` naming every candidate's figures when
    none is."""
    qualifying = [
        c for c in candidates if c.error is None and c.int8_ms <= fp32_ms and c.score_drift <= bound
    ]
    if qualifying:
        return min(qualifying, key=lambda c: (c.int8_ms, c.score_drift))
    reasons = []
    for c in candidates:
        if c.error is not None:
            reasons.append(f"{c.scheme} failed ({c.error})")
            continue
        why = []
        if not c.int8_ms <= fp32_ms:
            why.append(
                f"{c.int8_ms / fp32_ms:.2f}x slower than fp32 "
                f"({c.int8_ms:.2f} ms vs {fp32_ms:.2f} ms)"
            )
        if not c.score_drift <= bound:
            why.append(f"drift {c.score_drift:.3g} > {bound:g}")
        reasons.append(f"{c.scheme} {' and '.join(why)}")
    listed = ", ".join(reasons) if reasons else "no scheme to try"
    raise ExportError(f"int8 not written: {listed}; export without --quantize")


def _spread(arrays: Sequence[np.ndarray], count: int, length: int | None = None) -> np.ndarray:
    """Up to ``count`` samples taken evenly across the concatenation of ``arrays`` (without
    concatenating them all); with ``length``, audio cut or zero-padded to that many samples (the
    SDK's window: it pads a short clip the same way)."""
    index = [(a, row) for a, array in enumerate(arrays) for row in range(len(array))]
    picks = np.unique(np.linspace(0, len(index) - 1, min(count, len(index))).round().astype(int))
    samples = [arrays[index[i][0]][index[i][1]] for i in picks.tolist()]
    if length is not None:
        samples = [np.pad(x[:length], (0, max(0, length - len(x)))) for x in samples]
    return np.stack(samples)


def _session(model: bytes | str, threads: int | None = 1) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _runner(session: Any, batch_size: int = 64) -> Callable[[np.ndarray], np.ndarray]:
    def run(samples: np.ndarray) -> np.ndarray:
        pieces = [
            session.run(["output"], {"input": np.ascontiguousarray(samples[i : i + batch_size])})[0]
            for i in range(0, len(samples), batch_size)
        ]
        return np.concatenate(pieces).astype(np.float64)

    return run


def sdk_scores(
    run: Callable[[np.ndarray], np.ndarray],
    probes: np.ndarray,
    *,
    codewords: np.ndarray | None = None,
    enrollment: Sequence[np.ndarray] = (),
) -> np.ndarray:
    """The scores ``[probes, users]`` the SDK would compute with a model: against each user's
    codeword (codeword bundles), or against each user's prototype — the normalised mean of their
    enrollment outputs from the *same* model, as a user who enrolled with it holds (embeddings)."""
    from uvsdk.scoring import codeword_scores, cosine_scores, prototype

    outputs = run(probes)
    if codewords is not None:
        return codeword_scores(codewords, outputs)
    references = np.stack([prototype(run(clips)) for clips in enrollment])
    return cosine_scores(references, outputs)


def _frontend_nodes(model: Any) -> list[str]:
    return [
        node.name
        for node in model.graph.node
        if any(name.startswith(FRONTEND_PREFIX) for name in node.input)
    ]


_QUANTIZED_OP_TYPES = {"QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger"}


def _quantize(scheme: str, fp32: bytes, folder: Path, calibration: Sequence[np.ndarray]) -> bytes:
    """``fp32`` quantized with ``scheme``; the frontend's nodes stay float32."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quant_pre_process,
        quantize_dynamic,
        quantize_static,
    )

    source = folder / f"{scheme}.in.onnx"
    target = folder / f"{scheme}.onnx"
    model = onnx.load_from_string(fp32)
    del model.graph.value_info[:]  # as export_onnx does: the quantizer's shape inference
    onnx.save(model, source)
    if scheme.startswith("dynamic-"):
        ops = ["MatMul", "Gemm"] + (["Conv"] if scheme == "dynamic-conv" else [])
        quantize_dynamic(
            source,
            target,
            op_types_to_quantize=ops,
            per_channel=False,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=_frontend_nodes(model),
        )
    else:
        prepared = folder / f"{scheme}.pre.onnx"
        # Symbolic shape inference does not follow the exporter's dynamic length; ONNX's own
        # shape inference and ORT's basic graph optimisations are what the quantizer needs.
        quant_pre_process(source, prepared, skip_symbolic_shape=True)

        class Clips(CalibrationDataReader):
            def __init__(self) -> None:
                self.batches = iter(calibration)

            def get_next(self) -> dict[str, np.ndarray] | None:
                batch = next(self.batches, None)
                return None if batch is None else {"input": batch}

        activations = QuantType.QUInt8 if scheme.endswith("u8s8") else QuantType.QInt8
        quantize_static(
            prepared,
            target,
            Clips(),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=list(QUANTIZED_OPS),
            per_channel=True,
            activation_type=activations,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=_frontend_nodes(onnx.load(prepared)),
        )
    result = target.read_bytes()
    quantized = onnx.load_from_string(result)
    if not any(node.op_type in _QUANTIZED_OP_TYPES for node in quantized.graph.node):
        raise ValueError("nothing to quantize")
    return result


def _median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1e3


@dataclass(frozen=True)
class Measurement:
    """What :func:`measure_int8` found: float32's median latency (thread CPU time and wall
    clock), each scheme's :class:`Candidate`, the int8 models that were built, and the size of
    the score matrix the drift is taken over."""

    fp32_ms: float
    fp32_wall_ms: float
    candidates: list[Candidate]
    models: dict[str, bytes]
    probes: int
    users: int


def measure_int8(
    fp32: bytes,
    *,
    window: np.ndarray,
    calibration: np.ndarray,
    probes: np.ndarray,
    checks: Sequence[np.ndarray],
    dim: int,
    codewords: np.ndarray | None = None,
    enrollment: Sequence[np.ndarray] = (),
    schemes: Sequence[str] | None = None,
    runs: int | None = None,
) -> Measurement:
    """Build every int8 scheme of ``schemes`` (default :data:`SCHEMES`) from ``fp32`` and
    measure it against ``fp32``.

    Latency: one ``window`` (a batch of one), ONNX Runtime with one intra-op and one inter-op
    thread, every model timed in the same loop (order rotated each round) after warm-up, the
    median of ``runs`` (default :data:`LATENCY_RUNS`). The figure that decides is the inference
    thread's CPU time (``time.thread_time``: with one thread ONNX Runtime runs the graph in the
    calling thread), so other work on a busy machine does not decide; the wall-clock median is
    recorded beside it. Drift: the largest absolute difference between the float32 model's
    :func:`sdk_scores` and the int8 model's on ``probes``. Every int8 model is also run on
    ``checks`` (other batch sizes and lengths); a scheme that fails to build or run is a
    candidate with its ``error``."""
    schemes = SCHEMES if schemes is None else tuple(schemes)
    runs = LATENCY_RUNS if runs is None else runs
    batch = 8
    calibration_batches = [calibration[i : i + batch] for i in range(0, len(calibration), batch)]
    fp32_session = _session(fp32)
    reference = sdk_scores(
        _runner(fp32_session), probes, codewords=codewords, enrollment=enrollment
    )
    built: dict[str, bytes] = {}
    sessions: dict[str, Any] = {"fp32": fp32_session}
    drifts: dict[str, float] = {}
    failed: dict[str, str] = {}
    quiet = logging.getLogger().level
    with tempfile.TemporaryDirectory(prefix="uvexport-int8-") as folder:
        for scheme in schemes:
            logging.getLogger().setLevel(logging.ERROR)  # the quantizer's advice, on every call
            try:
                model = _quantize(scheme, fp32, Path(folder), calibration_batches)
                session = _session(model)
                for check in checks:  # other batch sizes and lengths, as the SDK sends them
                    out = session.run(["output"], {"input": check})[0]
                    if out.shape != (len(check), dim) or not np.all(np.isfinite(out)):
                        raise ValueError(f"output {out.shape} for input {check.shape}")
                scores = sdk_scores(
                    _runner(session), probes, codewords=codewords, enrollment=enrollment
                )
            except Exception as error:  # noqa: BLE001 - a scheme that fails is reported, not fatal
                text = str(error).splitlines()[0][:160] if str(error) else type(error).__name__
                failed[scheme] = text
                continue
            finally:
                logging.getLogger().setLevel(quiet)
            built[scheme], sessions[scheme] = model, session
            drifts[scheme] = float(np.abs(scores - reference).max())

    feed = {"input": np.ascontiguousarray(window[None])}
    names = list(sessions)
    for name in names:
        for _ in range(5):
            sessions[name].run(["output"], feed)
    cpu: dict[str, list[float]] = {name: [] for name in names}
    wall: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(runs):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            start_cpu, start_wall = time.thread_time(), time.perf_counter()
            sessions[name].run(["output"], feed)
            cpu[name].append(time.thread_time() - start_cpu)
            wall[name].append(time.perf_counter() - start_wall)

    candidates = [
        Candidate(scheme, error=failed[scheme])
        if scheme in failed
        else Candidate(
            scheme,
            int8_ms=_median_ms(cpu[scheme]),
            score_drift=drifts[scheme],
            wall_ms=_median_ms(wall[scheme]),
            size_bytes=len(built[scheme]),
        )
        for scheme in schemes
    ]
    return Measurement(
        _median_ms(cpu["fp32"]),
        _median_ms(wall["fp32"]),
        candidates,
        built,
        int(reference.shape[0]),
        int(reference.shape[1]),
    )


def quantize_int8(
    fp32: bytes,
    *,
    window: np.ndarray,
    bound: float | None = None,
    runs: int | None = None,
    **measure: Any,
) -> tuple[bytes, dict[str, Any]]:
    """The int8 model :func:`choose_scheme` picks from :func:`measure_int8`'s figures (``bound``
    defaults to :data:`DRIFT_BOUND`), and the figures for the manifest; :class:`ExportError`
    when no scheme qualifies."""
    import onnxruntime as ort

    bound = DRIFT_BOUND if bound is None else bound
    runs = LATENCY_RUNS if runs is None else runs
    found = measure_int8(fp32, window=window, runs=runs, **measure)
    chosen = choose_scheme(found.candidates, found.fp32_ms, bound)
    figures = {
        "scheme": chosen.scheme,
        "fp32_ms": round(found.fp32_ms, 4),
        "int8_ms": round(chosen.int8_ms, 4),
        "speedup": round(found.fp32_ms / chosen.int8_ms, 4),
        "score_drift": round(chosen.score_drift, 6),
        "drift_bound": bound,
        "fp32_wall_ms": round(found.fp32_wall_ms, 4),
        "int8_wall_ms": round(chosen.wall_ms, 4),
        "fp32_bytes": len(fp32),
        "int8_bytes": chosen.size_bytes,
        "measured": (
            f"ms: median thread CPU time of {runs} interleaved runs, batch of one input "
            f"{list(window.shape)}, 1 ONNX Runtime thread; score_drift: max |int8 - fp32| of "
            f"the SDK's scores, {found.probes} test clips x {found.users} users"
        ),
        "machine": f"{platform.machine()}, onnxruntime {ort.__version__}",
        "candidates": [c.to_dict() for c in found.candidates],
    }
    return found.models[chosen.scheme], figures


def _pretrained_provenance(pretrained: str) -> dict[str, Any]:
    """Where the run's starting weights came from: a known entry of :mod:`uvtrain.pretrained`
    (by name or by hash), else the file's name and SHA-256."""
    import hashlib

    from uvtrain.pretrained import WEIGHTS, identify

    entry = WEIGHTS.get(pretrained) or identify(pretrained)
    if entry is None:
        digest = hashlib.sha256(Path(pretrained).read_bytes()).hexdigest()
        return {"file": Path(pretrained).name, "sha256": digest, "licence": "unknown"}
    fields = ("name", "requirement", "member", "sha256", "licence", "description", "training_data")
    return {key: entry.to_dict()[key] for key in fields}


def export_run(
    run_dir: str | Path,
    out: str | Path,
    *,
    sign_key: Any | None = None,
    tolerance: float = TOLERANCE,
    quantize: str = "none",
    method: str | None = None,
    extra: dict[str, Any] | None = None,
) -> ExportResult:
    """Export a run folder to a bundle; raise :class:`ExportError` when parity fails, or when
    ``quantize="int8"`` and no int8 scheme is both not slower and within :data:`DRIFT_BOUND`.

    ``method`` replaces the manifest's method (default: the run's), and ``extra`` adds top-level
    manifest keys (e.g. ``description``); the default voice bundle uses both."""
    if quantize not in ("none", "int8"):
        raise ExportError(f"--quantize {quantize}: choose none or int8")
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
    report_path = run_dir / "report.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    provenance = {
        "method": config.method.name,
        "dataset": dataset.name,
        "rounds": report.get("rounds"),
        "backbone": type(model.backbone).__name__,
        "metrics": {name: split.get("eer") for name, split in report.get("splits", {}).items()},
    }
    extra = {"provenance": provenance, "data_licence": dataset.licence, **(extra or {})}
    if config.model.pretrained:
        provenance["pretrained"] = _pretrained_provenance(config.model.pretrained)
        extra["weights_licence"] = provenance["pretrained"]["licence"]

    def int8(onnx_bytes: bytes) -> tuple[bytes, dict[str, Any]]:
        return _quantize_run(onnx_bytes, model, dataset, simulation, inputs)

    return export_model(
        model,
        out,
        modality=dataset.modality,
        spec=dataset.spec,
        method=method or config.method.name,
        code_length=getattr(config.method, "code_length", 127),
        inputs=inputs,
        extra=extra,
        sign_key=sign_key,
        tolerance=tolerance,
        quantizer=int8 if quantize == "int8" else None,
        started=started,
    )


def export_model(
    model: Any,
    out: str | Path,
    *,
    modality: str,
    spec: dict[str, Any],
    method: str,
    code_length: int,
    inputs: Sequence[np.ndarray],
    extra: dict[str, Any],
    sign_key: Any | None = None,
    tolerance: float = TOLERANCE,
    quantizer: Callable[[bytes], tuple[bytes, dict[str, Any]]] | None = None,
    started: float | None = None,
) -> ExportResult:
    """Export a trained model (in memory) to a bundle, checked for parity on ``inputs``.

    :func:`export_run` calls it for a simulator's run folder; the Flower server calls it with its
    final global model and synthetic parity inputs (it holds no data).
    """
    import onnxruntime as ort
    import torch
    from torch.export import Dim

    started = time.perf_counter() if started is None else started
    model = model.cpu().eval()
    example = torch.as_tensor(inputs[-1])
    shapes: dict[int, Any] = {0: Dim("batch", min=1)}
    if modality == "audio":
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

    quantization: dict[str, Any] = {"scheme": "none"}
    model_bytes = onnx_bytes
    if quantizer is not None:
        model_bytes, quantization = quantizer(onnx_bytes)

    source: AudioInput | ImageInput
    if modality == "audio":
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

        code = bch_code(code_length)
    extra = {
        **extra,
        "parity": {"max_abs_diff": worst, "tolerance": tolerance, "opset": OPSET},
        "quantization": quantization,
    }
    manifest = make_manifest(
        model_bytes,
        name=Path(out).stem,
        method=method,
        source=source,
        output_kind=model.output_kind,
        dim=int(model.output_dim),
        code=code,
        extra=extra,
    )
    path = write_bundle(out, model_bytes, manifest, sign_key=sign_key)
    return ExportResult(
        path, worst, time.perf_counter() - started, path.stat().st_size, quantization
    )


def _quantize_run(
    fp32: bytes, model: Any, dataset: Any, simulation: Any, checks: list[np.ndarray]
) -> tuple[bytes, dict[str, Any]]:
    """:func:`quantize_int8` on a run: calibration on its training clips, drift on its test
    clips against its users' codewords or (embeddings) their validation-clip prototypes."""
    clients = dataset.clients
    window_samples = None
    if dataset.modality == "audio":
        spec = dataset.spec
        window_samples = round(float(spec["window_seconds"]) * int(spec["sample_rate"]))
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
    )
