"""Reference ONNX models, built in code with ``onnx.helper`` (no torch, no training).

They honour the ``model.onnx`` contract of a ``.uvb`` bundle — one input named ``input``, one output
named ``output``, dynamic batch; audio input ``float32 [batch, samples]`` mono in [-1, 1] (any length
of at least one analysis frame); image input ``uint8 [batch, height, width, channels]``; output
``float32 [batch, dim]`` — so that the SDK's tests, demo and benchmarks run real ONNX graphs before
any trained model exists:

* :func:`spectral_embedding_model` — a fixed log-mel front end, averaged over time, gain-normalised
  and L2-normalised (output kind ``embedding``). It tells the synthetic voices of
  :mod:`uvtrain.data.formant` apart.
* :func:`codeword_model` — the same front end ``g(x)`` and a head standing in for a trained FedUV
  model: a soft nearest-centroid classifier over known users (centred cosines) that mixes their
  secret codewords, then σ scaling to norm √n (output kind ``codeword``).
* :func:`waveform_convnet_model` — random weights, a raw-waveform network of about the cost of the
  FedUV paper's VoxCeleb network (~1.24 GFLOP per 2 s clip; our layers, not its Table 2), for
  latency benchmarks.
* :func:`image_embedding_model` — a small random convnet on uint8 pixels (kind ``embedding``).

Every builder returns the serialised model (``bytes``), checked with ``onnx.checker``; the graphs use
opset 17 and IR version 8, which onnxruntime ≥ 1.14 loads. The output kind is also recorded in the
model's metadata under ``uvsdk.output_kind``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from uvtrain.features import VOXCELEB_LAYERS, dft_kernels
from uvtrain.features import mel_filterbank as _mel_filterbank

__all__ = [
    "CONVNET_LAYERS",
    "IR_VERSION",
    "OPSET",
    "codeword_model",
    "convnet_flops",
    "image_embedding_model",
    "mel_filterbank",
    "spectral_embedding_model",
    "waveform_convnet_model",
]

#: ONNX default-domain opset of every reference model.
OPSET = 17
#: ONNX IR version of every reference model (the lowest that opset 17 allows).
IR_VERSION = 8
#: Added to squared norms before the square root, and to band energies before the logarithm.
NORM_EPSILON = 1e-12
LOG_EPSILON = 1e-12
#: Output channels of the two 3×3 stride-2 convolutions of :func:`image_embedding_model`.
IMAGE_CHANNELS: tuple[int, int] = (16, 32)
#: Layers of :func:`waveform_convnet_model`: (in channels, out channels, kernel, stride).
CONVNET_LAYERS = VOXCELEB_LAYERS  # the trainer's table: one definition


class _GraphBuilder:
    """Collects nodes and constant initialisers, naming every tensor uniquely."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def constant(self, hint: str, value: np.ndarray | float | Sequence[int]) -> str:
        """Add a constant (float arrays become float32, integer ones int64); return its name."""
        array = np.asarray(value)
        array = array.astype(np.int64 if array.dtype.kind in "iu" else np.float32)
        name = self._name(hint)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def op(
        self, op_type: str, inputs: Sequence[str], output: str | None = None, **attributes: Any
    ) -> str:
        """Add one node with one output; return the output's name."""
        output = output or self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], **attributes))
        return output

    def model(
        self,
        graph_name: str,
        input_info: onnx.ValueInfoProto,
        output_dim: int,
        output_kind: str,
        doc: str,
    ) -> bytes:
        """Assemble, check and serialise the model whose final tensor is named ``output``."""
        output_info = helper.make_tensor_value_info(
            "output", TensorProto.FLOAT, ["batch", output_dim]
        )
        graph = helper.make_graph(
            self.nodes, graph_name, [input_info], [output_info], initializer=self.initializers
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="uvexport.reference",
            doc_string=doc,
        )
        helper.set_model_props(model, {"uvsdk.output_kind": output_kind})
        onnx.checker.check_model(model, full_check=True)
        return model.SerializeToString()


def _audio_input() -> onnx.ValueInfoProto:
    """The ``input`` of every audio model: float32 [batch, samples]."""
    return helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", "samples"])


def _l2_normalise(
    builder: _GraphBuilder, tensor: str, scale: float = 1.0, output: str | None = None
) -> str:
    """Rows of a [batch, dim] tensor scaled to L2 norm ``scale``: ``x / (sqrt(Σx² + ε) / scale)``."""
    squared = builder.op("ReduceSumSquare", [tensor], axes=[1], keepdims=1)
    norm = builder.op("Sqrt", [builder.op("Add", [squared, builder.constant("eps", NORM_EPSILON)])])
    if scale != 1.0:
        norm = builder.op("Div", [norm, builder.constant("scale", scale)])
    return builder.op("Div", [tensor, norm], output=output)


def _sigma_scale(builder: _GraphBuilder, tensor: str, dim: int, output: str | None = None) -> str:
    """FedUV's σ: scale each row to norm √dim (FedUV paper, Sec. 4.2, ``σ(z) = √c · z / ‖z‖``)."""
    return _l2_normalise(builder, tensor, scale=float(np.sqrt(dim)), output=output)


def mel_filterbank(
    n_bands: int, frame_length: int, sample_rate: int, fmin: float, fmax: float
) -> np.ndarray:
    """The trainer's filterbank (:func:`uvtrain.features.mel_filterbank`) with unit-area filters:
    each band is the average power of its bins."""
    return _mel_filterbank(n_bands, frame_length, sample_rate, fmin, fmax, area=True)


def _dft_kernels(frame_length: int, bins: np.ndarray) -> np.ndarray:
    """Hann-windowed cosine then sine kernels at DFT ``bins``, shape [2·len(bins), 1, frame_length].

    Scaled by ``2 / Σ window`` so that a full-scale sinusoid on a bin has power ≈ 1.
    """
    window_sum = np.hanning(frame_length + 1)[:-1].sum()
    return (dft_kernels(frame_length, bins) * (2.0 / window_sum))[:, None, :]


def _audio_frontend(
    builder: _GraphBuilder,
    waveform: str,
    sample_rate: int,
    n_bands: int,
    frame_seconds: float = 0.025,
    hop_seconds: float = 0.010,
    fmin: float = 60.0,
    fmax: float | None = None,
    output: str | None = None,
) -> str:
    """Nodes of ``g(x)``: [batch, samples] waveform → [batch, n_bands] unit-norm spectral embedding.

    Framing and the DFT are one strided ``Conv`` with fixed cosine and sine kernels (only the bins
    the filterbank uses). ``cos² + sin²`` then the filterbank is one ``Mul`` and one ``MatMul`` with
    the filterbank repeated for the two halves, ``[fb fb] · [cos²; sin²] = fb · (cos² + sin²)``.
    Then ``log(· + ε)``, the mean over frames, minus the mean over bands (a gain of the input only
    shifts every log band by the same amount, so this removes it), and L2 normalisation.
    """
    frame_length = int(round(frame_seconds * sample_rate))
    hop = int(round(hop_seconds * sample_rate))
    if frame_length < 2 or hop < 1:
        raise ValueError(f"frame ({frame_seconds} s) and hop ({hop_seconds} s) too short")
    top = sample_rate / 2.0 if fmax is None else fmax
    weights = mel_filterbank(n_bands, frame_length, sample_rate, fmin, top)
    used = np.flatnonzero(weights.sum(axis=0) > 0.0)
    used_bins = np.arange(used[0], used[-1] + 1)
    filterbank = weights[:, used_bins]
    kernels = builder.constant("dft_kernels", _dft_kernels(frame_length, used_bins))
    channels = builder.op("Unsqueeze", [waveform, builder.constant("axes", [1])])
    spectrum = builder.op("Conv", [channels, kernels], strides=[hop], kernel_shape=[frame_length])
    squared = builder.op("Mul", [spectrum, spectrum])
    both_halves = builder.constant("filterbank", np.concatenate([filterbank, filterbank], axis=1))
    bands = builder.op("MatMul", [both_halves, squared])  # [batch, n_bands, frames]
    log_bands = builder.op(
        "Log", [builder.op("Add", [bands, builder.constant("eps", LOG_EPSILON)])]
    )
    average = builder.op("ReduceMean", [log_bands], axes=[2], keepdims=0)
    band_mean = builder.op("ReduceMean", [average], axes=[1], keepdims=1)
    return _l2_normalise(builder, builder.op("Sub", [average, band_mean]), output=output)


def spectral_embedding_model(
    sample_rate: int = 16000,
    n_bands: int = 40,
    *,
    frame_seconds: float = 0.025,
    hop_seconds: float = 0.010,
    fmin: float = 60.0,
    fmax: float | None = None,
    center: np.ndarray | None = None,
) -> bytes:
    """A fixed log-mel embedding of raw audio (output kind ``embedding``).

    Parameters
    ----------
    sample_rate : int, optional
        Sample rate of the input, Hz.
    n_bands : int, optional
        Number of mel bands, which is the output dimension.
    frame_seconds, hop_seconds : float, optional
        Analysis frame length and hop.
    fmin, fmax : float, optional
        Frequency range of the filterbank; ``fmax`` defaults to the Nyquist frequency.
    center : numpy.ndarray, optional
        A background mean of the embedding (the mean output of this model without ``center`` over
        many speakers), subtracted before a second normalisation: the usual mean subtraction of a
        cosine back end. Voices share one overall spectral shape, so without it all cosines sit
        near 1; with it they spread over [-1, 1].

    Returns
    -------
    bytes
        The serialised model: ``input`` float32 [batch, samples] (at least one frame long) →
        ``output`` float32 [batch, n_bands] with unit-norm rows, the time-averaged log-mel spectrum
        minus its mean over bands.
    """
    builder = _GraphBuilder()
    if center is None:
        _audio_frontend(
            builder, "input", sample_rate, n_bands, frame_seconds, hop_seconds, fmin, fmax, "output"
        )
    else:
        center = np.asarray(center, dtype=np.float32).reshape(1, n_bands)
        features = _audio_frontend(
            builder, "input", sample_rate, n_bands, frame_seconds, hop_seconds, fmin, fmax
        )
        centred = builder.op("Sub", [features, builder.constant("center", center)])
        _l2_normalise(builder, centred, output="output")
    doc = f"Reference log-mel embedding, {n_bands} bands at {sample_rate} Hz (kind embedding)."
    return builder.model("spectral_embedding", _audio_input(), n_bands, "embedding", doc)


def _check_head(
    centroids: np.ndarray, codewords: np.ndarray, n_bands: int, temperature: float
) -> None:
    """Raise ``ValueError`` unless the codeword head's arrays have matching, valid shapes."""
    if centroids.ndim != 2 or centroids.shape[1] != n_bands:
        raise ValueError(f"centroids must be [K, {n_bands}], got {centroids.shape}")
    if codewords.ndim != 2 or codewords.shape[0] != centroids.shape[0]:
        raise ValueError(f"codewords must be [{centroids.shape[0]}, n], got {codewords.shape}")
    if not np.all(np.abs(codewords) == 1.0):
        raise ValueError("codewords must hold only +1 and -1")
    if temperature <= 0.0:
        raise ValueError(f"temperature must be positive, got {temperature}")


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (an all-zero row stays zero)."""
    return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), np.sqrt(NORM_EPSILON))


def _centroid_logits(
    builder: _GraphBuilder, features: str, centroids: np.ndarray, temperature: float, centre: bool
) -> str:
    """Nodes of ``cos(g(x) − μ, c_k − μ) / T`` for every centroid ``c_k`` (``μ = 0`` if not centred)."""
    unit_centroids = _unit_rows(centroids)
    if centre:
        mean = unit_centroids.mean(axis=0, keepdims=True)
        unit_centroids = _unit_rows(unit_centroids - mean)
        features = _l2_normalise(
            builder, builder.op("Sub", [features, builder.constant("mean", mean)])
        )
    directions = builder.constant("centroids", unit_centroids.T / temperature)
    return builder.op("MatMul", [features, directions])


def codeword_model(
    sample_rate: int,
    centroids: np.ndarray,
    codewords: np.ndarray,
    *,
    n_bands: int = 40,
    temperature: float = 0.05,
    centre: bool = True,
    **frontend_options: float | None,
) -> bytes:
    """A stand-in for a trained FedUV model (output kind ``codeword``).

    ``output = σ(p · V)`` with ``p = softmax(cos(g(x) − μ, c_k − μ) / T)`` over the K known users:
    the front end of :func:`spectral_embedding_model` as ``g``, a soft nearest-centroid choice, and
    the mixture of the users' ±1 codewords ``V`` scaled to norm √n (FedUV's σ, FedUV paper Sec. 4.2).
    A known user's input thus scores ``v · output / n`` close to 1 against that user's codeword.

    ``μ`` is the mean of the unit centroids. Every log-spectrum shares the shape of speech, so raw
    cosines between any two voices are ≈ 0.9–0.99 and a softmax at T = 0.05 over them is nearly
    flat; subtracting the population mean before the cosine (as speaker-verification back ends do
    before cosine or PLDA scoring) spreads them over [−1, 1]. ``centre=False`` gives the plain
    ``softmax(g(x) · Ĉᵀ / T)``.

    Parameters
    ----------
    sample_rate : int
        Sample rate of the input, Hz.
    centroids : numpy.ndarray
        [K, n_bands]: each known user's mean front-end output (normalised here to unit rows).
    codewords : numpy.ndarray
        [K, n] of ±1: each known user's codeword.
    n_bands : int, optional
        Number of mel bands of the front end.
    temperature : float, optional
        Softmax temperature over the cosines.
    centre : bool, optional
        Subtract the centroids' mean before the cosines (see above).
    **frontend_options
        ``frame_seconds``, ``hop_seconds``, ``fmin``, ``fmax`` of :func:`spectral_embedding_model`.

    Returns
    -------
    bytes
        The serialised model: ``input`` float32 [batch, samples] → ``output`` float32 [batch, n],
        rows of norm √n.
    """
    centroids = np.asarray(centroids, dtype=np.float64)
    codewords = np.asarray(codewords, dtype=np.float64)
    _check_head(centroids, codewords, n_bands, temperature)
    builder = _GraphBuilder()
    features = _audio_frontend(builder, "input", sample_rate, n_bands, **frontend_options)
    logits = _centroid_logits(builder, features, centroids, temperature, centre)
    weights = builder.op("Softmax", [logits], axis=1)
    mixture = builder.op("MatMul", [weights, builder.constant("codewords", codewords)])
    length = codewords.shape[1]
    _sigma_scale(builder, mixture, length, output="output")
    doc = f"Reference codeword model: {centroids.shape[0]} users, n = {length} (kind codeword)."
    return builder.model("codeword", _audio_input(), length, "codeword", doc)


def convnet_flops(samples: int, code_length: int = 127) -> int:
    """Floating-point operations of :func:`waveform_convnet_model` on one clip, analytically.

    Counts 2 per multiply-add of every convolution and of the final linear layer (normalisation,
    ReLU, pooling and scaling are O(activations) and left out, under 1 % of the total).

    Parameters
    ----------
    samples : int
        Clip length in samples (32,000 for 2 s at 16 kHz gives ≈ 1.24 GFLOP).
    code_length : int, optional
        Output dimension.

    Returns
    -------
    int
        FLOPs for a batch of one.
    """
    length, multiply_adds = samples, 0
    for in_channels, out_channels, kernel, stride in CONVNET_LAYERS:
        length = (length - kernel) // stride + 1
        if length < 1:
            raise ValueError(f"{samples} samples are too few for the convnet")
        multiply_adds += length * out_channels * in_channels * kernel
    multiply_adds += CONVNET_LAYERS[-1][1] * code_length
    return 2 * multiply_adds


def _he_normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """He (Kaiming) normal initialisation of a weight [out, in, *kernel] for a ReLU network."""
    fan_in = int(np.prod(shape[1:]))
    return rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)


def _convolution(builder: _GraphBuilder, tensor: str, weight: np.ndarray, **attributes: Any) -> str:
    """A ``Conv`` node with constant ``weight`` and a zero bias."""
    weight_name = builder.constant("conv_weight", weight)
    bias_name = builder.constant("conv_bias", np.zeros(weight.shape[0]))
    kernel_shape = list(weight.shape[2:])
    return builder.op(
        "Conv", [tensor, weight_name, bias_name], kernel_shape=kernel_shape, **attributes
    )


def _conv_block(
    builder: _GraphBuilder, tensor: str, layer: tuple[int, int, int, int], rng: np.random.Generator
) -> str:
    """Conv1d (He-initialised) → InstanceNormalization → ReLU."""
    in_channels, out_channels, kernel, stride = layer
    weight = _he_normal(rng, (out_channels, in_channels, kernel))
    convolved = _convolution(builder, tensor, weight, strides=[stride])
    normalised = builder.op(
        "InstanceNormalization",
        [
            convolved,
            builder.constant("gamma", np.ones(out_channels)),
            builder.constant("beta", np.zeros(out_channels)),
        ],
    )
    return builder.op("Relu", [normalised])


def waveform_convnet_model(
    sample_rate: int = 16000, code_length: int = 127, *, seed: int = 0
) -> bytes:
    """A raw-waveform conv1d network of realistic size, random weights (output kind ``codeword``).

    Of about the cost of the FedUV paper's VoxCeleb network (our layers, not its Table 2, which is
    ``uvtrain``'s ``feduv-voxceleb-conv1d``): the conv1d stack of :data:`CONVNET_LAYERS` on
    the raw waveform, each followed by instance normalisation and ReLU; global average pooling over
    time; a linear layer to ``code_length``; σ scaling to norm √code_length. About 1.24 GFLOP per 2 s
    clip at 16 kHz (:func:`convnet_flops`). Its outputs mean nothing: it is for latency benchmarks.

    Parameters
    ----------
    sample_rate : int, optional
        Sample rate the model is declared for (recorded in its doc string; the layers are fixed).
    code_length : int, optional
        Output dimension n.
    seed : int, optional
        Seed of the He-initialised weights.

    Returns
    -------
    bytes
        The serialised model: ``input`` float32 [batch, samples] (≥ 0.02 s at 16 kHz) →
        ``output`` float32 [batch, code_length], rows of norm √code_length.
    """
    rng = np.random.default_rng(seed)
    builder = _GraphBuilder()
    tensor = builder.op("Unsqueeze", ["input", builder.constant("axes", [1])])
    for layer in CONVNET_LAYERS:
        tensor = _conv_block(builder, tensor, layer, rng)
    pooled = builder.op("ReduceMean", [tensor], axes=[2], keepdims=0)
    width = CONVNET_LAYERS[-1][1]
    linear_weight = builder.constant(
        "linear_weight", rng.normal(0.0, np.sqrt(1.0 / width), (width, code_length))
    )
    linear = builder.op("MatMul", [pooled, linear_weight])
    biased = builder.op("Add", [linear, builder.constant("linear_bias", np.zeros(code_length))])
    _sigma_scale(builder, biased, code_length, output="output")
    doc = (
        f"Random raw-waveform convnet for latency benchmarks, {sample_rate} Hz, n = {code_length}."
    )
    return builder.model("waveform_convnet", _audio_input(), code_length, "codeword", doc)


def image_embedding_model(
    height: int, width: int, channels: int, dim: int = 64, *, seed: int = 0
) -> bytes:
    """A small random convnet on raw pixels (output kind ``embedding``).

    uint8 pixels → float / 255 → NCHW → Conv 3×3/2 (16) → ReLU → Conv 3×3/2 (32) → ReLU → global
    average pool → linear to ``dim`` → L2 normalisation. He-initialised random weights: the outputs
    mean nothing, the graph exercises the SDK's image path.

    Parameters
    ----------
    height, width, channels : int
        Image shape the model takes.
    dim : int, optional
        Output dimension.
    seed : int, optional
        Seed of the weights.

    Returns
    -------
    bytes
        The serialised model: ``input`` uint8 [batch, height, width, channels] → ``output`` float32
        [batch, dim] with unit-norm rows.
    """
    if min(height, width, channels, dim) < 1:
        raise ValueError("height, width, channels and dim must be positive")
    rng = np.random.default_rng(seed)
    builder = _GraphBuilder()
    pixels = builder.op("Cast", ["input"], to=TensorProto.FLOAT)
    scaled = builder.op("Div", [pixels, builder.constant("full_scale", 255.0)])
    tensor = builder.op("Transpose", [scaled], perm=[0, 3, 1, 2])
    in_channels = channels
    for out_channels in IMAGE_CHANNELS:
        weight = _he_normal(rng, (out_channels, in_channels, 3, 3))
        convolved = _convolution(builder, tensor, weight, strides=[2, 2], pads=[1, 1, 1, 1])
        tensor, in_channels = builder.op("Relu", [convolved]), out_channels
    pooled = builder.op("Flatten", [builder.op("GlobalAveragePool", [tensor])], axis=1)
    features = IMAGE_CHANNELS[-1]
    projection = builder.constant(
        "projection", rng.normal(0.0, np.sqrt(1.0 / features), (features, dim))
    )
    _l2_normalise(builder, builder.op("MatMul", [pooled, projection]), output="output")
    input_info = helper.make_tensor_value_info(
        "input", TensorProto.UINT8, ["batch", height, width, channels]
    )
    doc = f"Random image embedding, {height}x{width}x{channels} uint8 -> {dim} (kind embedding)."
    return builder.model("image_embedding", input_info, dim, "embedding", doc)


def centred_spectral_embedding_model(
    background: list[np.ndarray], sample_rate: int = 16000, n_bands: int = 40
) -> bytes:
    """:func:`spectral_embedding_model` centred on the mean embedding of ``background`` clips.

    The clips (mono float32 at ``sample_rate``, e.g. many speakers' utterances that will not be
    enrolled) play the part of a back end's training data.
    """
    import onnxruntime as ort

    plain = spectral_embedding_model(sample_rate, n_bands)
    session = ort.InferenceSession(plain, providers=["CPUExecutionProvider"])
    length = min(clip.size for clip in background)
    batch = np.stack([clip[:length] for clip in background]).astype(np.float32)
    center = session.run(["output"], {"input": batch})[0].mean(axis=0)
    return spectral_embedding_model(sample_rate, n_bands, center=center)
