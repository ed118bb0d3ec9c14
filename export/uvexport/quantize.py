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
#: The storage scheme of ``uvexport --quantize weights``: the weights of every convolution, fully
#: connected and recurrent (LSTM, GRU) layer (outside the frontend) stored as int8 in blocks of
#: :data:`WEIGHT_BLOCK` values along each output channel, each block with its own range (an int8
#: zero point and a scale: float16 where every scale of the weight is a normal float16, else
#: float32), expanded to float32 in the graph (``Cast``, ``Sub``, ``Mul``, ``Reshape``,
#: ``Slice`` of constants: ONNX Runtime folds them once when it loads the model), so the
#: arithmetic stays float32: about 1.1 bytes a weight instead of 4, not a faster model. Each
#: layer's bias is corrected for the mean shift its rounding causes, measured on
#: :data:`CALIBRATION_CLIPS` training clips (:func:`int8_weights`). A backbone's
#: ``half_precision`` layers are stored as float16.
WEIGHT_SCHEME = "weights-int8"
#: Values per block. Measured on CAM++ (``uvexport /work/cpp/run0 --quantize weights``: a 0-round
#: campplus run on synth-voices; the largest change of the exporter's 96 x 32 scores; and 35
#: real clips of 2 s of 10 people, every pair): symmetric int8, one float32 scale per block of
#: 32, moved the scores by 0.030 (real 0.017), with the head, TDNN layer and first D-TDNN block
#: at float16 by 0.024 (10.4 MB raw, 9.2 MB deflated in the bundle); bias correction
#: alone took 0.030 to 0.023 (head at float16: 0.016); a zero point a block with float16 scales,
#: the head at float16 and bias correction: 0.008 (real 0.006), 8.4 MB deflated (9.6 MB raw).
#: One scale per output channel moved them by 0.034, blocks of 16 by 0.025 (symmetric, no
#: correction). Error-compensating rounding (GPTQ, blocks of 32, Hessians from the 32
#: calibration clips) lowered the mean change but raised the largest, 0.030 to 0.038.
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


def _excluded_nodes(model: Any, only: Callable[[str], bool] | None) -> list[str]:
    """The nodes the quantizer must leave float32: the frontend's, and with ``only`` every
    layer whose weight (its second input) it does not accept."""
    excluded = _frontend_nodes(model)
    if only is not None:
        excluded += [
            node.name
            for node in model.graph.node
            if node.op_type in QUANTIZED_OPS and node.name not in excluded
            and (len(node.input) < 2 or not only(node.input[1]))
        ]  # fmt: skip
    return excluded


_QUANTIZED_OP_TYPES = {"QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger"}


def _mean_patch(x: np.ndarray, node: Any, kernel: Sequence[int]) -> np.ndarray:
    """The mean over ``x``'s batch and the layer's output positions of what the layer multiplies
    its weight by: for ``Gemm`` the input row (``[K]``); for ``Conv`` the input window
    (``[C, *kernel]``, the layer's padding, strides and dilations applied), so that a weight
    change ``ΔW`` moves the mean of output channel ``o`` by ``ΔW[o] · patch`` (the patch's channel
    group's rows for a grouped convolution)."""
    from numpy.lib.stride_tricks import sliding_window_view

    x = x.astype(np.float64).mean(axis=0)
    if node.op_type == "Gemm":
        return x
    axes = len(kernel)
    ints = {a.name: list(a.ints) for a in node.attribute}
    pads = ints.get("pads") or [0] * 2 * axes
    strides = ints.get("strides") or [1] * axes
    dilations = ints.get("dilations") or [1] * axes
    x = np.pad(x, [(0, 0)] + [(pads[i], pads[i + axes]) for i in range(axes)])
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    windows = sliding_window_view(x, spans, axis=tuple(range(1, 1 + axes)))
    windows = windows[
        (slice(None),)
        + tuple(slice(None, None, s) for s in strides)
        + tuple(slice(None, None, d) for d in dilations)
    ]
    return windows.mean(axis=tuple(range(1, 1 + axes)))


def _mean_patches(
    fp32: bytes, nodes: dict[str, tuple[Any, tuple[int, ...]]], calibration: Sequence[np.ndarray]
) -> dict[str, np.ndarray]:
    """:func:`_mean_patch` of each weight's layer in ``nodes`` (weight name → the node and the
    weight's shape) over the
    ``calibration`` batches, from one float32 run of each batch with the layers' inputs as extra
    outputs."""
    import onnx
    from onnx import helper

    model = onnx.load_from_string(fp32)
    feeds = {value.name for value in model.graph.input}
    outputs = {value.name for value in model.graph.output}
    wanted = sorted({node.input[0] for node, _ in nodes.values()} - feeds)
    for name in sorted(set(wanted) - outputs):
        model.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    session = _session(model.SerializeToString(), threads=None)
    sums: dict[str, np.ndarray] = {}
    count = 0
    for batch in calibration:
        values = dict(zip(wanted, session.run(wanted, {"input": batch}), strict=True))
        values["input"] = batch
        for name, (node, shape) in nodes.items():
            patch = _mean_patch(values[node.input[0]], node, shape[2:]) * len(batch)
            sums[name] = sums.get(name, 0) + patch
        count += len(batch)
    return {name: total / count for name, total in sums.items()}


def _int8_blocks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``values`` as :data:`WEIGHT_SCHEME` stores them: ``(q, z, s, expanded)``, each row of
    ``values`` flattened and zero-padded to ``[rows, blocks, WEIGHT_BLOCK]``, ``q`` and the zero
    points ``z`` int8, the scales ``s`` float16 when every one is a normal float16 (else
    float32), and ``expanded = ((q - z) · s)`` cut back to ``values``' shape — what the graph
    computes.

    Each block spans its own range, widened to hold 0: ``s = (max - min) / 255`` (rounded up to
    the stored precision), ``z = -128 - round(min / s)``, ``q = clip(round(x / s) + z, -128,
    127)``; zero stays exact (the padding, pruned weights) and the step is at most that of a
    symmetric scale, finer where a block's values lean to one side."""
    rows = values.shape[0]
    flat = values.reshape(rows, -1).astype(np.float64)
    columns = flat.shape[1]
    blocks = np.pad(flat, ((0, 0), (0, -columns % WEIGHT_BLOCK))).reshape(rows, -1, WEIGHT_BLOCK)
    low = np.minimum(blocks.min(axis=2, keepdims=True), 0.0)
    high = np.maximum(blocks.max(axis=2, keepdims=True), 0.0)
    wanted = np.where(high > low, (high - low) / 255.0, 1.0)
    scale: np.ndarray = wanted.astype(np.float32)
    scale = np.where(scale < wanted, np.nextafter(scale, np.float32(np.inf)), scale)
    half = wanted.astype(np.float16)
    half = np.where(half < wanted, np.nextafter(half, np.float16(np.inf)), half)
    if np.all(np.isfinite(half)) and half.min() >= np.finfo(np.float16).tiny:
        scale = half
    step = scale.astype(np.float64)
    zero = np.clip(-128 - np.round(low / step), -128, 127)
    quantized = np.clip(np.round(blocks / step) + zero, -128, 127)
    expanded = ((quantized - zero) * step.astype(np.float32)).astype(np.float32)
    expanded = expanded.reshape(rows, -1)[:, :columns].reshape(values.shape)
    return quantized.astype(np.int8), zero.astype(np.int8), scale, expanded


def int8_weights(
    fp32: bytes, half: Sequence[str] = (), calibration: Sequence[np.ndarray] = ()
) -> bytes:
    """``fp32`` with the weights of its ``Conv`` and ``Gemm`` (``transB=1``) layers, and the input
    and recurrence weights of its ``LSTM`` and ``GRU`` layers (:func:`_recurrent_weights`), stored
    as int8 (:data:`WEIGHT_SCHEME`), or float16, and (with ``calibration``) each ``Conv`` and
    ``Gemm`` layer's bias corrected for the change in its weight (a recurrent layer's input is
    its own state, so it has no fixed mean to correct for).

    Each weight ``W`` of at least :data:`WEIGHT_MIN_VALUES` values is flattened per output
    channel, zero-padded to whole blocks of :data:`WEIGHT_BLOCK`, and stored as int8 values
    ``q`` with an int8 zero point ``z`` and a scale ``s`` per block (:func:`_int8_blocks`); nodes
    in front of the layer compute ``W = reshape((q - z) · s)[:, :n]`` under ``W``'s own name. The weights whose
    names start with one of ``half`` (a backbone's ``half_precision``: the layers measured to move
    the scores most when int8) are stored as float16 and cast back instead. The frontend's
    constants (:data:`FRONTEND_PREFIX`) stay float32.

    Bias correction: rounding moves the mean of each output channel by ``ΔW[o] · E[x]`` (``x``
    the layer's input window, ``ΔW`` the stored weight minus the original); after a ReLU ``E[x]``
    is far from zero, and that shift, the same for every clip, is most of what rounding does to
    the layer's output. With ``calibration`` (batches of inputs), ``E[x]`` is measured on them
    with the float32 model and the layer's bias becomes ``b - ΔW · E[x]`` (a ``Conv`` or ``Gemm``
    without one gains one, ``{W}.bias``): one float32 a channel."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load_from_string(fp32)
    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    layers: dict[str, Any] = {}
    for node in graph.node:
        transposed = node.op_type == "Gemm" and any(
            a.name == "transB" and a.i == 1 for a in node.attribute
        )
        if node.op_type == "Conv" or transposed:
            name = node.input[1]
            if name in initializers and not name.startswith(FRONTEND_PREFIX):
                layers.setdefault(name, node)
    recurrent = {name for name in _recurrent_weights(graph) if not name.startswith(FRONTEND_PREFIX)}
    stored: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # name: (original, as expanded)
    expand = []
    for name in sorted(set(layers) | recurrent):
        values = numpy_helper.to_array(initializers[name])
        if values.dtype != np.float32 or values.size < WEIGHT_MIN_VALUES:
            continue
        if name.startswith(tuple(half)):
            half_values = values.astype(np.float16)
            stored[name] = (values, half_values.astype(np.float32))
            graph.initializer.remove(initializers[name])
            graph.initializer.append(numpy_helper.from_array(half_values, f"{name}.f16"))
            expand.append(
                helper.make_node("Cast", [f"{name}.f16"], [name], to=onnx.TensorProto.FLOAT)
            )
            continue
        quantized, zero, scale, expanded = _int8_blocks(values)
        stored[name] = (values, expanded)
        graph.initializer.remove(initializers[name])
        rows, columns = values.shape[0], values.size // values.shape[0]
        graph.initializer.extend(
            [
                numpy_helper.from_array(quantized, f"{name}.int8"),
                numpy_helper.from_array(zero, f"{name}.zero"),
                numpy_helper.from_array(scale, f"{name}.scale"),
                numpy_helper.from_array(np.array([rows, -1], np.int64), f"{name}.rows"),
                numpy_helper.from_array(np.array([0, 0], np.int64), f"{name}.from"),
                numpy_helper.from_array(np.array([rows, columns], np.int64), f"{name}.to"),
                numpy_helper.from_array(np.array(values.shape, np.int64), f"{name}.shape"),
            ]
        )
        float32 = onnx.TensorProto.FLOAT
        scaled = f"{name}.scale"
        if scale.dtype == np.float16:
            scaled = f"{name}.scale32"
            expand.append(helper.make_node("Cast", [f"{name}.scale"], [scaled], to=float32))
        expand += [
            helper.make_node("Cast", [f"{name}.int8"], [f"{name}.q"], to=float32),
            helper.make_node("Cast", [f"{name}.zero"], [f"{name}.z"], to=float32),
            helper.make_node("Sub", [f"{name}.q", f"{name}.z"], [f"{name}.steps"]),
            helper.make_node("Mul", [f"{name}.steps", scaled], [f"{name}.blocks"]),
            helper.make_node("Reshape", [f"{name}.blocks", f"{name}.rows"], [f"{name}.padded"]),
            helper.make_node(
                "Slice", [f"{name}.padded", f"{name}.from", f"{name}.to"], [f"{name}.flat"]
            ),
            helper.make_node("Reshape", [f"{name}.flat", f"{name}.shape"], [name]),
        ]
    if not expand:
        raise ValueError("no weights to store as int8")
    if len(calibration):
        corrected = {name: layers[name] for name in stored if name in layers}
        _correct_biases(graph, corrected, stored, fp32, calibration)
    nodes = expand + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return model.SerializeToString()


#: What may lie between a recurrent layer's weight initializer and the layer: the exporter
#: reorders the gates (PyTorch's i, f, g, o to ONNX's i, o, f, c) and adds the direction axis.
_WEIGHT_PATH_OPS = frozenset({"Split", "Slice", "Concat", "Unsqueeze", "Reshape", "Transpose"})


def _recurrent_weights(graph: Any) -> set[str]:
    """The initializers that are an ``LSTM``'s or ``GRU``'s input and recurrence weights (``W``,
    ``R``: its inputs 1 and 2), directly or through the gate reordering between them
    (:data:`_WEIGHT_PATH_OPS`); the bias (input 3) is left as it is."""
    initializers = {tensor.name for tensor in graph.initializer}
    producers = {output: node for node in graph.node for output in node.output}
    found: set[str] = set()
    for node in graph.node:
        if node.op_type not in ("LSTM", "GRU"):
            continue
        pending = [name for name in node.input[1:3] if name]
        while pending:
            name = pending.pop()
            if name in initializers:
                found.add(name)
            elif name in producers and producers[name].op_type in _WEIGHT_PATH_OPS:
                pending.extend(i for i in producers[name].input if i)
    return found


def _correct_biases(
    graph: Any,
    layers: dict[str, Any],
    stored: dict[str, tuple[np.ndarray, np.ndarray]],
    fp32: bytes,
    calibration: Sequence[np.ndarray],
) -> None:
    """Give each layer of ``layers`` (weight name → node) the bias ``b - ΔW · E[x]``
    (:func:`int8_weights`), ``E[x]`` from :func:`_mean_patches` on ``calibration``."""
    from onnx import numpy_helper

    layers = {  # explicit padding only (what torch exports): auto_pad's is not computed here
        name: node
        for name, node in layers.items()
        if all(a.name != "auto_pad" or a.s in (b"", b"NOTSET") for a in node.attribute)
    }
    means = _mean_patches(
        fp32, {name: (node, stored[name][0].shape) for name, node in layers.items()}, calibration
    )
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    users: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            users[name] = users.get(name, 0) + 1
    for name, node in layers.items():
        original, expanded = stored[name]
        change = (expanded.astype(np.float64) - original).reshape(original.shape[0], -1)
        mean = means[name]
        if node.op_type == "Conv":  # the channel group each output channel reads
            groups = mean.shape[0] // original.shape[1]
            per_group = original.shape[0] // groups
            rows = np.arange(original.shape[0]) // per_group
            mean = mean.reshape(groups, -1)[rows]
        else:
            mean = np.broadcast_to(mean, change.shape)
        shift = (change * mean).sum(axis=1)
        bias = np.zeros(original.shape[0], np.float64)
        if len(node.input) > 2 and node.input[2]:
            old = node.input[2]
            bias = bias + numpy_helper.to_array(initializers[old]).astype(np.float64)
            users[old] -= 1
            if users[old] == 0:
                graph.initializer.remove(initializers[old])
        corrected = f"{name}.bias"
        graph.initializer.append(
            numpy_helper.from_array((bias - shift).astype(np.float32), corrected)
        )
        if len(node.input) > 2:
            node.input[2] = corrected
        else:
            node.input.append(corrected)


def _quantize(
    scheme: str,
    fp32: bytes,
    folder: Path,
    calibration: Sequence[np.ndarray],
    half: Sequence[str] = (),
    only: Callable[[str], bool] | None = None,
) -> bytes:
    """``fp32`` quantized with ``scheme``; the frontend's nodes stay float32 (``half``, and
    ``calibration`` for the bias correction of :data:`WEIGHT_SCHEME`: see :func:`int8_weights`).
    ``only``: which layers may be quantized, by their weight's name as the quantizer's prepared
    graph names it (default: every layer; benchmarks/campplus_int8.py measures the network a
    part at a time)."""
    import onnx

    if scheme == WEIGHT_SCHEME:
        return int8_weights(fp32, half, calibration)
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
            nodes_to_exclude=_excluded_nodes(model, only),
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
            nodes_to_exclude=_excluded_nodes(onnx.load(prepared), only),
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
