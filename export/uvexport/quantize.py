"""The int8 search of ``uvexport --quantize int8``.

The int8 schemes of :data:`SCHEMES` are built with ONNX Runtime's quantization tools and
measured against the float32 model — latency of one window on one thread, and how far the
scores the SDK would compute move (:func:`sdk_scores`) — and the fastest scheme that is not
slower than float32 and moves no score by more than :data:`DRIFT_BOUND` wins
(:func:`choose_scheme`); when none qualifies, :class:`~uvexport.errors.ExportError` names the
figures. The log-mel frontend (the parameters under :data:`FRONTEND_PREFIX`) always stays
float32: its inputs — the waveform and the power spectrum — span a dynamic range that an int8
scale calibrated on the training clips cannot hold for a quieter or louder recording."""

from __future__ import annotations

import logging
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ExportError

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
#: The storage scheme of ``uvexport --quantize weights``: the weights of every convolution and
#: fully connected layer (outside the frontend) stored as int8 in blocks of
#: :data:`WEIGHT_BLOCK` values along each output channel, one float32 scale per block, and
#: expanded to float32 in the graph (``Cast``, ``Mul``, ``Reshape``, ``Slice`` of constants: ONNX
#: Runtime folds them once when it loads the model), so the arithmetic stays float32: a model of
#: about 1.1 bytes a weight instead of 4, not a faster one. (float16 scales underflow: blocks of
#: small weights then lose their precision.)
WEIGHT_SCHEME = "weights-int8"
#: Values per scale. On CAM++ (40 real clips of 2 s, every pair's score), one scale per output
#: channel moved the scores by up to 0.034; blocks of 16 by 0.024, of 32 by 0.012 with its
#: ``half_precision`` layers at float16 (16: 0.015).
WEIGHT_BLOCK = 32
#: Weights smaller than this many values stay float32 (biases, norms: nothing to gain).
WEIGHT_MIN_VALUES = 1024
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


def int8_weights(fp32: bytes, half: Sequence[str] = ()) -> bytes:
    """``fp32`` with the weights of its ``Conv`` and ``Gemm`` (``transB=1``) layers stored as int8
    (:data:`WEIGHT_SCHEME`), or float16.

    Each weight ``W`` of at least :data:`WEIGHT_MIN_VALUES` values is flattened per output
    channel, zero-padded to whole blocks of :data:`WEIGHT_BLOCK`, and stored as ``q = round(W /
    s)`` (int8, in [-127, 127]) with ``s = max|block| / 127`` per block (float32); nodes in front
    of the layer compute ``W = reshape(q · s)[:, :n]`` under ``W``'s own name. The weights whose
    names start with one of ``half`` (a backbone's ``half_precision``: the layers measured to move
    the scores most when int8) are stored as float16 and cast back instead. The frontend's
    constants (:data:`FRONTEND_PREFIX`) stay float32."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load_from_string(fp32)
    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    weights = set()
    for node in graph.node:
        transposed = node.op_type == "Gemm" and any(
            a.name == "transB" and a.i == 1 for a in node.attribute
        )
        if node.op_type == "Conv" or transposed:
            name = node.input[1]
            if name in initializers and not name.startswith(FRONTEND_PREFIX):
                weights.add(name)
    expand = []
    for name in sorted(weights):
        values = numpy_helper.to_array(initializers[name])
        if values.dtype != np.float32 or values.size < WEIGHT_MIN_VALUES:
            continue
        if name.startswith(tuple(half)):
            graph.initializer.remove(initializers[name])
            graph.initializer.append(
                numpy_helper.from_array(values.astype(np.float16), f"{name}.f16")
            )
            expand.append(
                helper.make_node("Cast", [f"{name}.f16"], [name], to=onnx.TensorProto.FLOAT)
            )
            continue
        flat = values.reshape(values.shape[0], -1)
        columns = flat.shape[1]
        blocks = np.pad(flat, ((0, 0), (0, -columns % WEIGHT_BLOCK))).reshape(
            values.shape[0], -1, WEIGHT_BLOCK
        )
        peak = np.abs(blocks).max(axis=2, keepdims=True)
        scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
        quantized = np.clip(np.round(blocks / scale), -127, 127).astype(np.int8)
        graph.initializer.remove(initializers[name])
        graph.initializer.extend(
            [
                numpy_helper.from_array(quantized, f"{name}.int8"),
                numpy_helper.from_array(scale, f"{name}.scale"),
                numpy_helper.from_array(np.array([values.shape[0], -1], np.int64), f"{name}.rows"),
                numpy_helper.from_array(np.array([0, 0], np.int64), f"{name}.from"),
                numpy_helper.from_array(
                    np.array([values.shape[0], columns], np.int64), f"{name}.to"
                ),
                numpy_helper.from_array(np.array(values.shape, np.int64), f"{name}.shape"),
            ]
        )
        float32 = onnx.TensorProto.FLOAT
        expand += [
            helper.make_node("Cast", [f"{name}.int8"], [f"{name}.q"], to=float32),
            helper.make_node("Mul", [f"{name}.q", f"{name}.scale"], [f"{name}.blocks"]),
            helper.make_node("Reshape", [f"{name}.blocks", f"{name}.rows"], [f"{name}.padded"]),
            helper.make_node(
                "Slice", [f"{name}.padded", f"{name}.from", f"{name}.to"], [f"{name}.flat"]
            ),
            helper.make_node("Reshape", [f"{name}.flat", f"{name}.shape"], [name]),
        ]
    if not expand:
        raise ValueError("no weights to store as int8")
    nodes = expand + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _quantize(
    scheme: str,
    fp32: bytes,
    folder: Path,
    calibration: Sequence[np.ndarray],
    half: Sequence[str] = (),
) -> bytes:
    """``fp32`` quantized with ``scheme``; the frontend's nodes stay float32 (``half``: see
    :func:`int8_weights`)."""
    import onnx

    if scheme == WEIGHT_SCHEME:
        return int8_weights(fp32, half)
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
    half: Sequence[str] = (),
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
                model = _quantize(scheme, fp32, Path(folder), calibration_batches, half)
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
    weights_only: bool = False,
    **measure: Any,
) -> tuple[bytes, dict[str, Any]]:
    """The int8 model :func:`choose_scheme` picks from :func:`measure_int8`'s figures (``bound``
    defaults to :data:`DRIFT_BOUND`), and the figures for the manifest; :class:`ExportError`
    when no scheme qualifies. ``weights_only``: the :data:`WEIGHT_SCHEME` model instead, for
    its size: written when its drift is within the bound, whatever its speed (measured all the
    same)."""
    import onnxruntime as ort

    bound = DRIFT_BOUND if bound is None else bound
    runs = LATENCY_RUNS if runs is None else runs
    if weights_only:
        measure["schemes"] = (WEIGHT_SCHEME,)
    found = measure_int8(fp32, window=window, runs=runs, **measure)
    if weights_only:
        (chosen,) = found.candidates
        if chosen.error is not None or not chosen.score_drift <= bound:
            why = chosen.error or f"drift {chosen.score_drift:.3g} > {bound:g}"
            raise ExportError(f"int8 weights not written: {why}; export without --quantize")
    else:
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
