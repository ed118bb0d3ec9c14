"""Neural networks of the trainer: backbones with their preprocessing inside, and the two heads.

Every model takes the raw input of the bundle contract (shared ``DESIGN.md``, "One preprocessing
path") and does its own feature extraction in ``forward``, so that the exported ONNX graph holds it:

* audio: ``float32 [batch, samples]``, mono, in [-1, 1], at the dataset's sample rate, any length of
  at least ``min_samples``;
* images: ``uint8 [batch, height, width, channels]``.

A backbone returns ``float32 [batch, embedding_dim]``. The heads turn it into what a bundle exports:
:class:`CodewordModel` (FedUV: ``σ(W g(x))``, rows of norm √n) and :class:`EmbeddingModel` (FedHide and
the prototype methods: L2-normalised ``g(x)``).

Constraints every module here keeps, because the simulation engine vectorises one round's clients
with ``torch.func.functional_call`` + ``torch.func.vmap`` over stacked parameters:

* no BatchNorm and nothing that mutates a buffer in ``forward``: normalisation is GroupNorm (Wu & He,
  "Group Normalization", ECCV 2018), as in the FedUV paper's networks (Hosseini et al., "Federated
  Learning of User Verification Models Without Sharing Embeddings", ICML 2021, Table 2);
* fixed constants (DFT kernels, mel filterbank, pixel mean and standard deviation) are buffers
  registered with ``persistent=False``, so ``state_dict()`` holds exactly the parameters;
* no dropout or other randomness in ``forward``;
* plain torch operators that ``torch.onnx.export(..., dynamo=True)`` lowers at opset ≥ 17 (global
  pooling is a mean, never an adaptive pooling to a size other than 1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..features import VOXCELEB_LAYERS, dft_kernels, mel_filterbank, slaney_mel_filterbank

__all__ = [
    "BACKBONES",
    "VOXCELEB_LAYERS",
    "CelebAConv2d",
    "CodewordModel",
    "EmbeddingModel",
    "GE2ESpeakerEncoder",
    "IResNet",
    "ImageFrontend",
    "LogMelFrontend",
    "LogMelResNet",
    "LogMelTDNN",
    "MnistUvConv2d",
    "ResNet18Small",
    "VoxCelebConv1d",
    "build_backbone",
    "count_parameters",
    "default_backbone",
    "group_norm",
    "load_backbone_checkpoint",
    "mel_filterbank",
    "model_flops",
    "sigma_scale",
]

#: Added to the mel band powers before the logarithm.
LOG_EPSILON = 1e-6
#: Smallest norm divided by in :func:`sigma_scale` (a zero row stays zero instead of becoming NaN).
NORM_EPSILON = 1e-12


# ----------------------------------------------------------------------------------------------
# Building blocks
# ----------------------------------------------------------------------------------------------


def group_norm(channels: int, max_groups: int = 32, min_group_size: int = 4) -> nn.GroupNorm:
    """GroupNorm with as many groups as fit (Wu & He, ECCV 2018: 32 groups by default).

    Parameters
    ----------
    channels : int
        Channels normalised.
    max_groups : int, optional
        Most groups (the paper's default, 32).
    min_group_size : int, optional
        Fewest channels per group, so that thin layers (16 channels) are not reduced to instance
        normalisation.

    Returns
    -------
    torch.nn.GroupNorm
        ``GroupNorm(g, channels)`` with ``g`` the largest divisor of ``channels`` that is at most
        ``min(max_groups, channels // min_group_size)`` (at least 1).
    """
    limit = max(1, min(max_groups, channels // min_group_size))
    groups = max(g for g in range(1, limit + 1) if channels % g == 0)
    return nn.GroupNorm(groups, channels)


def sigma_scale(z: Tensor, dim: int | None = None) -> Tensor:
    """FedUV's σ: scale each row to norm √dim (FedUV paper: ``σ(z) = √c · z / ‖z‖``).

    Parameters
    ----------
    z : torch.Tensor
        ``[..., dim]``.
    dim : int, optional
        The ``c`` of the paper; defaults to the size of the last axis.

    Returns
    -------
    torch.Tensor
        ``z`` with every row of norm √dim (a zero row stays zero).
    """
    scale = math.sqrt(z.shape[-1] if dim is None else dim)
    norm = torch.linalg.vector_norm(z, dim=-1, keepdim=True)
    return z * (scale / norm.clamp_min(NORM_EPSILON))


class LogMelFrontend(nn.Module):
    """Raw waveform → per-utterance normalised log-mel energies, in plain torch operators.

    Framing and the DFT are one strided ``conv1d`` with fixed periodic-Hann-windowed cosine and sine
    kernels (``n_fft`` = frame length, no padding: the frames of ``torch.stft(center=False)``); the
    power spectrum ``cos² + sin²`` times the mel filterbank is one matrix product with the filterbank
    repeated for the two halves; then ``log(· + 1e-6)`` and a per-utterance normalisation.
    Defaults: 40 bands, 25 ms frames every 10 ms, as the
    log-mel input of Fast ResNet-34 (Chung et al., "In defence of metric learning for speaker
    recognition", Interspeech 2020) used by FedHide (Park et al., "FedHide: Federated Learning by
    Hiding in the Neighbors", 2024).

    Parameters
    ----------
    sample_rate : int, optional
        Sample rate of the input, Hz.
    n_mels : int, optional
        Mel bands.
    frame_seconds, hop_seconds : float, optional
        Frame length and hop.
    fmin, fmax : float, optional
        Band edges of the filterbank (``fmax`` defaults to Nyquist).
    normalise : {"gain", "band", "none"}, optional
        ``gain`` (default) subtracts one number per utterance, the mean over bands and frames: the
        input's gain goes, the spectral envelope stays. ``band`` subtracts each band's mean over
        time (cepstral mean normalisation): it also removes channel colouring, but with it every
        time-invariant part of a voice's spectrum — on voices whose identity is mostly their
        static envelope (the synthetic ones here) it left test EER at chance where ``gain``
        learned (0.50 vs 0.32 after 100 FedUV rounds on 40 formant voices).
    librosa : bool, optional
        ``True``: the mel *power* of ``librosa.feature.melspectrogram`` instead — frames centred
        (half a frame of reflected signal at each end), the Slaney filterbank from 0 Hz to
        Nyquist (``fmin``/``fmax`` unused), no logarithm; ``normalise`` must be ``"none"``. The
        input of the pretrained GE2E encoder (:class:`GE2ESpeakerEncoder`).

    Notes
    -----
    Input ``float32 [batch, samples]`` with ``samples >= min_samples`` (one frame); output
    ``float32 [batch, n_mels, frames]``, ``frames = (samples - frame_length) // hop + 1``
    (``1 + samples // hop`` with ``librosa``).
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        n_mels: int = 40,
        frame_seconds: float = 0.025,
        hop_seconds: float = 0.010,
        fmin: float = 20.0,
        fmax: float | None = None,
        normalise: str = "gain",
        librosa: bool = False,
    ) -> None:
        super().__init__()
        if normalise not in ("gain", "band", "none"):
            raise ValueError(f"normalise must be 'gain', 'band' or 'none', not {normalise!r}")
        if librosa and normalise != "none":
            raise ValueError("the librosa mel power takes normalise='none'")
        self.librosa = bool(librosa)
        self.sample_rate = int(sample_rate)
        self.n_mels = int(n_mels)
        self.frame_length = int(round(frame_seconds * sample_rate))
        self.hop = int(round(hop_seconds * sample_rate))
        self.normalise = normalise
        if self.frame_length < 2 or self.hop < 1 or self.n_mels < 1:
            raise ValueError(
                f"frame ({frame_seconds} s), hop ({hop_seconds} s) or n_mels ({n_mels}) too small"
            )
        kernels = dft_kernels(self.frame_length)
        if librosa:
            filterbank = slaney_mel_filterbank(self.n_mels, self.frame_length, self.sample_rate)
        else:
            filterbank = mel_filterbank(
                self.n_mels, self.frame_length, self.sample_rate, fmin, fmax
            )
        self.register_buffer(
            "dft_kernels", torch.tensor(kernels[:, None, :], dtype=torch.float32), persistent=False
        )
        self.register_buffer(
            "filterbank",
            torch.tensor(np.concatenate([filterbank, filterbank], axis=1), dtype=torch.float32),
            persistent=False,
        )

    @property
    def min_samples(self) -> int:
        """Shortest input: one frame (centred: more than the half frame that is reflected)."""
        return self.frame_length // 2 + 1 if self.librosa else self.frame_length

    def frames(self, samples: int) -> int:
        """Number of frames for an input of ``samples`` samples."""
        if self.librosa:
            return 1 + samples // self.hop
        return (samples - self.frame_length) // self.hop + 1

    def forward(self, waveform: Tensor) -> Tensor:
        """``[batch, samples]`` → ``[batch, n_mels, frames]``."""
        signal = waveform.unsqueeze(1)
        if self.librosa:
            signal = F.pad(signal, (self.frame_length // 2,) * 2, mode="reflect")
        spectrum = F.conv1d(signal, self.dft_kernels, stride=self.hop)
        bands = torch.matmul(self.filterbank, spectrum * spectrum)
        if self.librosa:
            return bands
        log_bands = torch.log(bands + LOG_EPSILON)
        if self.normalise == "band":
            log_bands = log_bands - log_bands.mean(dim=-1, keepdim=True)
        elif self.normalise == "gain":
            log_bands = log_bands - log_bands.mean(dim=(-2, -1), keepdim=True)
        return log_bands


class ImageFrontend(nn.Module):
    """uint8 ``[batch, height, width, channels]`` → normalised float32 ``[batch, channels, H, W]``.

    ``x / 255``, channels-last to channels-first, then ``(x − mean) / std`` per channel.

    Parameters
    ----------
    mean, std : float or sequence of float, optional
        Per-channel statistics of ``x / 255`` (one value applies to every channel).
    """

    def __init__(
        self, mean: float | Sequence[float] = 0.5, std: float | Sequence[float] = 0.5
    ) -> None:
        super().__init__()
        mean_values = torch.as_tensor(mean, dtype=torch.float32).reshape(1, -1, 1, 1)
        std_values = torch.as_tensor(std, dtype=torch.float32).reshape(1, -1, 1, 1)
        if bool((std_values <= 0).any()):
            raise ValueError(f"std must be positive, got {std}")
        self.register_buffer("mean", mean_values, persistent=False)
        self.register_buffer("std", std_values, persistent=False)

    def forward(self, pixels: Tensor) -> Tensor:
        """``uint8 [batch, H, W, C]`` → ``float32 [batch, C, H, W]``."""
        scaled = pixels.to(self.mean.dtype) / 255.0
        return (scaled.permute(0, 3, 1, 2) - self.mean) / self.std


# ----------------------------------------------------------------------------------------------
# Backbones
# ----------------------------------------------------------------------------------------------


class Backbone(nn.Module):
    """Base of the backbones: ``forward(raw input) -> [batch, embedding_dim]``.

    ``modality`` is ``"audio"`` or ``"image"``; :meth:`from_spec` builds the backbone for a dataset's
    input spec (``{"sample_rate", ...}`` or ``{"height", "width", "channels"}``).
    """

    modality: ClassVar[str]
    embedding_dim: int

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **options: Any) -> Backbone:
        """Build for a dataset's input spec; ``options`` are constructor arguments."""
        raise NotImplementedError


class _ConvUnit(nn.Sequential):
    """Convolution → GroupNorm → ReLU (the unit of the FedUV paper's Table 2 networks)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel: int,
        stride: int = 1,
        padding: int = 0,
        dims: Literal[1, 2] = 2,
        dilation: int = 1,
    ) -> None:
        conv = nn.Conv1d if dims == 1 else nn.Conv2d
        super().__init__(
            conv(
                in_channels, out_channels, kernel, stride=stride, padding=padding, dilation=dilation
            ),
            group_norm(out_channels),
            nn.ReLU(inplace=False),
        )


def _sample_rate(spec: Mapping[str, Any]) -> int:
    """The sample rate of an audio spec, with a clear error for an image spec."""
    if "sample_rate" not in spec:
        raise ValueError(f"an audio backbone needs an audio spec with 'sample_rate', got {spec}")
    return int(spec["sample_rate"])


def _image_shape(spec: Mapping[str, Any]) -> tuple[int, int, int]:
    """(height, width, channels) of an image spec, with a clear error for an audio spec."""
    missing = {"height", "width", "channels"} - set(spec)
    if missing:
        raise ValueError(f"an image backbone needs an image spec, missing {sorted(missing)}")
    return int(spec["height"]), int(spec["width"]), int(spec["channels"])


class VoxCelebConv1d(Backbone):
    """The FedUV paper's VoxCeleb network: a conv1d stack on the raw waveform.

    waveform ``[batch, samples]`` → for each layer of ``layers``: Conv1d → GroupNorm → ReLU → mean
    over time → Linear to ``embedding_dim``.

    From the paper (Hosseini et al., ICML 2021, Table 2): a convolutional network on raw
    16 kHz audio, conv1d layers with GroupNorm and ReLU, global average pooling over time, a linear
    layer to the embedding. The layer table (:data:`VOXCELEB_LAYERS`: a 251-tap stride-10 first
    layer, then 5/3-tap stride-2 layers up to 512 channels, about 1.24 GFLOP per 2 s clip) is the
    project's paper-sized network, shared with ``uvexport.reference.waveform_convnet_model`` for the
    latency benchmarks; it is our reading of the paper's size, not a copy of its table. The group
    count (:func:`group_norm`) and the 256-dimensional embedding are our choices.

    Parameters
    ----------
    embedding_dim : int, optional
        Output dimension.
    layers : sequence of (in, out, kernel, stride), optional
        The conv1d stack; the first layer's ``in`` must be 1.
    sample_rate : int, optional
        The input's sample rate (recorded; the layers do not depend on it).
    """

    modality: ClassVar[str] = "audio"

    def __init__(
        self,
        embedding_dim: int = 256,
        layers: Sequence[tuple[int, int, int, int]] = VOXCELEB_LAYERS,
        sample_rate: int = 16000,
    ) -> None:
        super().__init__()
        if not layers or layers[0][0] != 1:
            raise ValueError("the first conv1d layer must take 1 channel (mono waveform)")
        for previous, layer in zip(layers, layers[1:], strict=False):
            if previous[1] != layer[0]:
                raise ValueError(
                    f"layer {layer} does not take the {previous[1]} channels before it"
                )
        self.sample_rate = int(sample_rate)
        self.layers = tuple(tuple(int(v) for v in layer) for layer in layers)
        self.embedding_dim = int(embedding_dim)
        self.features = nn.Sequential(
            *(_ConvUnit(i, o, k, stride=s, dims=1) for i, o, k, s in self.layers)
        )
        self.embedding = nn.Linear(self.layers[-1][1], self.embedding_dim)
        length = 1
        for _, _, kernel, stride in reversed(self.layers):
            length = (length - 1) * stride + kernel
        #: Shortest input that leaves at least one time step after the last layer.
        self.min_samples = length

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **options: Any) -> VoxCelebConv1d:
        return cls(sample_rate=_sample_rate(spec), **options)

    def forward(self, waveform: Tensor) -> Tensor:
        """``float32 [batch, samples]`` → ``[batch, embedding_dim]``."""
        features = self.features(waveform.unsqueeze(1))
        return self.embedding(features.mean(dim=-1))


class _ImageConvNet(Backbone):
    """ImageFrontend → [Conv2d 3×3 → GroupNorm → ReLU → (MaxPool 2×2)] per stage → spatial mean →
    Linear. The shared body of :class:`CelebAConv2d` and :class:`MnistUvConv2d`."""

    modality: ClassVar[str] = "image"
    default_channels: ClassVar[tuple[int, ...]]

    def __init__(
        self,
        in_channels: int,
        embedding_dim: int,
        channels: Sequence[int] | None = None,
        pool: Sequence[bool] | None = None,
        mean: float | Sequence[float] = 0.5,
        std: float | Sequence[float] = 0.5,
    ) -> None:
        super().__init__()
        widths = tuple(self.default_channels if channels is None else channels)
        pooled = tuple([True] * (len(widths) - 1) + [False] if pool is None else pool)
        if len(pooled) != len(widths):
            raise ValueError(f"{len(widths)} stages but {len(pooled)} pooling flags")
        self.frontend = ImageFrontend(mean, std)
        stages: list[nn.Module] = []
        previous = int(in_channels)
        for width, with_pool in zip(widths, pooled, strict=True):
            stages.append(_ConvUnit(previous, width, 3, padding=1))
            if with_pool:
                stages.append(nn.MaxPool2d(2))
            previous = width
        self.features = nn.Sequential(*stages)
        self.embedding_dim = int(embedding_dim)
        self.embedding = nn.Linear(previous, self.embedding_dim)
        #: Smallest height and width the pooling stages accept.
        self.min_size = 2 ** sum(pooled)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **options: Any) -> _ImageConvNet:
        _, _, channels = _image_shape(spec)
        return cls(in_channels=channels, **options)

    def forward(self, pixels: Tensor) -> Tensor:
        """``uint8 [batch, H, W, C]`` → ``[batch, embedding_dim]``."""
        features = self.features(self.frontend(pixels))
        return self.embedding(features.mean(dim=(2, 3)))


class CelebAConv2d(_ImageConvNet):
    """The FedUV paper's CelebA network: a conv2d stack on 64×64×3 faces.

    From the paper (Hosseini et al., ICML 2021, Table 2): conv2d layers with GroupNorm,
    ReLU and pooling on the face crops, a linear layer to the embedding. Our choices (the table is
    not reproduced here): four 3×3 stages of 32-64-128-256 channels, 2×2 max pooling after the
    first three (64 → 8 pixels), then the spatial mean — so that any image of at least 8×8 works
    and the ONNX graph has no size-dependent pooling — and a 256-dimensional embedding.

    Parameters
    ----------
    in_channels : int, optional
        Image channels (from the dataset's spec).
    embedding_dim : int, optional
        Output dimension.
    channels : sequence of int, optional
        Output channels of the stages.
    pool : sequence of bool, optional
        Whether each stage ends with 2×2 max pooling (default: all but the last).
    mean, std : float or sequence of float, optional
        Pixel normalisation of :class:`ImageFrontend`.
    """

    default_channels: ClassVar[tuple[int, ...]] = (32, 64, 128, 256)

    def __init__(
        self,
        in_channels: int = 3,
        embedding_dim: int = 256,
        channels: Sequence[int] | None = None,
        pool: Sequence[bool] | None = None,
        mean: float | Sequence[float] = 0.5,
        std: float | Sequence[float] = 0.5,
    ) -> None:
        super().__init__(in_channels, embedding_dim, channels, pool, mean, std)


class MnistUvConv2d(_ImageConvNet):
    """The FedUV paper's MNIST-UV network on 28×28×4 (four EMNIST digits of one writer as channels).

    From the paper (Hosseini et al., ICML 2021, Table 2; EMNIST: Cohen et al., 2017):
    conv2d layers with GroupNorm, ReLU and pooling, a linear layer to the embedding. Our choices:
    three 3×3 stages of 32-64-128 channels, 2×2 max pooling after the first two (28 → 7), the
    spatial mean and a 128-dimensional embedding.

    Parameters
    ----------
    in_channels : int, optional
        Image channels (4 for MNIST-UV).
    embedding_dim : int, optional
        Output dimension.
    channels, pool, mean, std
        As for :class:`CelebAConv2d`.
    """

    default_channels: ClassVar[tuple[int, ...]] = (32, 64, 128)

    def __init__(
        self,
        in_channels: int = 4,
        embedding_dim: int = 128,
        channels: Sequence[int] | None = None,
        pool: Sequence[bool] | None = None,
        mean: float | Sequence[float] = 0.5,
        std: float | Sequence[float] = 0.5,
    ) -> None:
        super().__init__(in_channels, embedding_dim, channels, pool, mean, std)


class _SqueezeExcitation(nn.Module):
    """Channel gating of Hu et al., "Squeeze-and-Excitation Networks" (CVPR 2018), reduction 8 as
    in Fast ResNet-34.

    The squeeze bias starts at 0.1 (our choice): the channel means of a freshly GroupNorm-ed map
    are near 0, so with PyTorch's default bias a thin block's 2 hidden units often start dead
    (ReLU of a negative bias) and never get a gradient.
    """

    def __init__(self, channels: int, reduction: int = 8) -> None:
        super().__init__()
        hidden = max(1, channels // reduction)
        self.squeeze = nn.Linear(channels, hidden)
        self.excite = nn.Linear(hidden, channels)
        nn.init.constant_(self.squeeze.bias, 0.1)

    def forward(self, x: Tensor) -> Tensor:
        gate = torch.sigmoid(self.excite(F.relu(self.squeeze(x.mean(dim=(2, 3))))))
        return x * gate[:, :, None, None]


class _BasicBlock(nn.Module):
    """The ResNet basic block (He et al., CVPR 2016) with GroupNorm, optionally with SE."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        stride: int | tuple[int, int] = 1,
        squeeze_excitation: bool = False,
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.norm1 = group_norm(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.norm2 = group_norm(out_channels)
        self.gate = _SqueezeExcitation(out_channels) if squeeze_excitation else nn.Identity()
        strided = stride not in (1, (1, 1))
        self.shortcut: nn.Module = (
            nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                group_norm(out_channels),
            )
            if strided or in_channels != out_channels
            else nn.Identity()
        )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.gate(self.norm2(self.conv2(out)))
        return F.relu(out + self.shortcut(x))


def _residual_stages(
    in_channels: int,
    widths: Sequence[int],
    blocks: Sequence[int],
    strides: Sequence[int | tuple[int, int]],
    squeeze_excitation: bool,
) -> nn.Sequential:
    """The four stages of a ResNet: ``blocks[i]`` basic blocks of ``widths[i]`` channels."""
    if not len(widths) == len(blocks) == len(strides):
        raise ValueError(f"need as many widths, blocks and strides: {widths}, {blocks}, {strides}")
    if min(blocks) < 1:
        raise ValueError(f"every stage needs at least one block, got {tuple(blocks)}")
    stages: list[nn.Module] = []
    previous = in_channels
    for width, count, stride in zip(widths, blocks, strides, strict=True):
        layers = [_BasicBlock(previous, width, stride, squeeze_excitation)]
        layers += [_BasicBlock(width, width, 1, squeeze_excitation) for _ in range(count - 1)]
        stages.append(nn.Sequential(*layers))
        previous = width
    return nn.Sequential(*stages)


class _SelfAttentivePooling(nn.Module):
    """Self-attentive pooling over time (Cai et al., Odyssey 2018; as in Fast ResNet-34):
    ``α_t = softmax_t(uᵀ tanh(W h_t + b))``, output ``Σ_t α_t h_t``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.projection = nn.Linear(channels, channels)
        self.context = nn.Linear(channels, 1, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """``[batch, channels, time]`` → ``[batch, channels]``."""
        frames = x.transpose(1, 2)
        weights = torch.softmax(self.context(torch.tanh(self.projection(frames))), dim=1)
        return (frames * weights).sum(dim=1)


class LogMelResNet(Backbone):
    """Log-mel front end + thin ResNet speaker network, after FedHide's "Fast ResNet-34".

    waveform → :class:`LogMelFrontend` (40 mel bands, 25 ms / 10 ms) → ``[batch, 1, mels, frames]``
    → Conv 7×7 stride (2, 1) → GroupNorm → ReLU → four residual stages of ``width · (1, 2, 4, 8)``
    channels with ``blocks`` basic blocks each, strides 1, 2, 2, 1 → mean over frequency →
    self-attentive (or mean) pooling over time → Linear to ``embedding_dim``.

    Fast ResNet-34 (Chung et al., "In defence of metric learning for speaker recognition",
    Interspeech 2020; the speaker network of FedHide, Park et al., 2024) is ``width=16``,
    ``blocks=(3, 4, 6, 3)`` with squeeze-excitation blocks and self-attentive pooling; registered as
    ``"fast-resnet34"``. The defaults here are the small CPU variant ``blocks=(1, 1, 1, 1)``
    (registered as ``"logmel-resnet"``). GroupNorm replaces BatchNorm (the engine vectorises over
    clients); the 256-dimensional embedding is our choice (the original uses 512).

    Parameters
    ----------
    sample_rate : int, optional
        Input sample rate.
    embedding_dim : int, optional
        Output dimension.
    width : int, optional
        Channels of the first stage; the stages have ``width · (1, 2, 4, 8)``.
    blocks : sequence of int, optional
        Basic blocks per stage.
    pooling : {"sap", "mean"}, optional
        Self-attentive or plain average pooling over time.
    squeeze_excitation : bool, optional
        Squeeze-excitation in every block (as Fast ResNet-34).
    n_mels, frame_seconds, hop_seconds : optional
        Of the :class:`LogMelFrontend`.
    """

    modality: ClassVar[str] = "audio"

    def __init__(
        self,
        sample_rate: int = 16000,
        embedding_dim: int = 256,
        width: int = 16,
        blocks: Sequence[int] = (1, 1, 1, 1),
        pooling: Literal["sap", "mean"] = "sap",
        squeeze_excitation: bool = True,
        n_mels: int = 40,
        frame_seconds: float = 0.025,
        hop_seconds: float = 0.010,
    ) -> None:
        super().__init__()
        if pooling not in ("sap", "mean"):
            raise ValueError(f"pooling must be 'sap' or 'mean', got {pooling!r}")
        self.frontend = LogMelFrontend(sample_rate, n_mels, frame_seconds, hop_seconds)
        widths = tuple(width * factor for factor in (1, 2, 4, 8))
        self.stem = nn.Sequential(
            nn.Conv2d(1, width, 7, stride=(2, 1), padding=3, bias=False),
            group_norm(width),
            nn.ReLU(inplace=False),
        )
        self.stages = _residual_stages(
            width, widths, tuple(blocks), (1, 2, 2, 1), squeeze_excitation
        )
        self.pooling: nn.Module | None = (
            _SelfAttentivePooling(widths[-1]) if pooling == "sap" else None
        )
        self.embedding_dim = int(embedding_dim)
        self.embedding = nn.Linear(widths[-1], self.embedding_dim)
        #: Shortest input: one analysis frame.
        self.min_samples = self.frontend.min_samples

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **options: Any) -> LogMelResNet:
        return cls(sample_rate=_sample_rate(spec), **options)

    def forward(self, waveform: Tensor) -> Tensor:
        """``float32 [batch, samples]`` → ``[batch, embedding_dim]``."""
        features = self.stages(self.stem(self.frontend(waveform).unsqueeze(1)))
        frames = features.mean(dim=2)  # [batch, channels, time]
        pooled = frames.mean(dim=-1) if self.pooling is None else self.pooling(frames)
        return self.embedding(pooled)


class LogMelTDNN(Backbone):
    """Log-mel front end + a compact x-vector TDNN with statistics pooling.

    waveform → :class:`LogMelFrontend` (40 bands, 25 ms / 10 ms) → ``[batch, mels, frames]`` →
    frame layers Conv1d (kernel, dilation) → GroupNorm → ReLU: (5, 1), (3, 2), (3, 3), (1, 1) of
    ``channels``, then (1, 1) of ``3 · channels`` → mean and standard deviation over time →
    Linear to ``embedding_dim``.

    The x-vector network (Snyder et al., "X-vectors: robust DNN embeddings for speaker
    recognition", ICASSP 2018) has 512 channels and 1500 before pooling; this is the same shape at
    ``channels=128`` (384 before pooling), about 11 MFLOP per second of audio against the
    ``logmel-resnet``'s ~200: the backbone that lets a federated run with hundreds of speakers
    learn on a 2-core CPU in minutes (``benchmarks/simulate.py`` measures both). GroupNorm
    replaces BatchNorm, as everywhere here.

    Parameters
    ----------
    sample_rate : int, optional
        Input sample rate.
    embedding_dim : int, optional
        Output dimension.
    channels : int, optional
        Width of the frame layers.
    n_mels, frame_seconds, hop_seconds : optional
        Of the :class:`LogMelFrontend`.
    """

    modality: ClassVar[str] = "audio"
    #: (kernel, dilation) of the frame layers before the last, wider one.
    FRAME_LAYERS: ClassVar[tuple[tuple[int, int], ...]] = ((5, 1), (3, 2), (3, 3), (1, 1))

    def __init__(
        self,
        sample_rate: int = 16000,
        embedding_dim: int = 256,
        channels: int = 64,
        n_mels: int = 40,
        frame_seconds: float = 0.025,
        hop_seconds: float = 0.010,
    ) -> None:
        super().__init__()
        self.frontend = LogMelFrontend(sample_rate, n_mels, frame_seconds, hop_seconds)
        specs = [(channels, k, d) for k, d in self.FRAME_LAYERS] + [(3 * channels, 1, 1)]
        widths = [n_mels] + [width for width, _, _ in specs]
        self.frames = nn.Sequential(
            *(
                _ConvUnit(i, o, k, padding=d * (k // 2), dims=1, dilation=d)
                for i, (o, k, d) in zip(widths[:-1], specs, strict=True)
            )
        )
        self.embedding_dim = int(embedding_dim)
        self.embedding = nn.Linear(2 * widths[-1], self.embedding_dim)
        #: Shortest input: one analysis frame (the frame layers pad).
        self.min_samples = self.frontend.min_samples

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **options: Any) -> LogMelTDNN:
        return cls(sample_rate=_sample_rate(spec), **options)

    def forward(self, waveform: Tensor) -> Tensor:
        """``float32 [batch, samples]`` → ``[batch, embedding_dim]``."""
        frames = self.frames(self.frontend(waveform))
        mean = frames.mean(dim=-1)
        std = (frames - mean.unsqueeze(-1)).pow(2).mean(dim=-1).add(1e-5).sqrt()
        return self.embedding(torch.cat([mean, std], dim=-1))


class GE2ESpeakerEncoder(Backbone):
    """The pretrained GE2E speaker encoder of Resemblyzer, in plain torch, with a trainable adapter.

    The speaker encoder of Wan et al. ("Generalized End-to-End Loss for Speaker Verification",
    ICASSP 2018) as trained by Resemblyzer (Apache-2.0; weights ``resemblyzer/pretrained.pt`` of
    its wheel, trained on LibriSpeech, VoxCeleb 1 and 2): 40-band mel power spectrogram (25 ms
    Hann frames every 10 ms, ``librosa.feature.melspectrogram``'s filterbank, no logarithm) →
    3-layer LSTM of 256 → Linear 256 → ReLU → unit norm, on partial utterances of 160 frames
    (1.6 s) every 77 frames, whose embeddings are averaged and normalised
    (``VoiceEncoder.embed_utterance``). The waveform is first raised to −30 dBFS when quieter
    (Resemblyzer's ``normalize_volume(increase_only=True)``); its voice-activity trimming is not
    reproduced (the SDK windows clips instead). All of it is in ``forward``, so in the ONNX graph.

    Then a residual adapter ``e + A e + b`` (``A``, ``b`` zero at start, so an untrained model is
    the pretrained encoder exactly) is what federated training adapts; with ``freeze_encoder``
    (default) the LSTM and its projection are frozen (``requires_grad=False``: the engine passes
    them like buffers, and never sends or averages them).

    The pretrained weights are loaded with :func:`load_backbone_checkpoint` (``--pretrained
    pretrained.pt``; see :mod:`uvtrain.pretrained`): the parameter names ``lstm.*`` and
    ``linear.*`` are Resemblyzer's.
    """

    modality: ClassVar[str] = "audio"
    SAMPLE_RATE: ClassVar[int] = 16000
    #: Frames of one partial utterance, and the step between partials (1.3 per second).
    PARTIAL_FRAMES: ClassVar[int] = 160
    PARTIAL_STEP: ClassVar[int] = 77
    #: A trailing partial is kept when at least this many of its frames hold audio (75 %).
    MIN_COVERAGE_FRAMES: ClassVar[int] = 120
    #: −30 dBFS as an RMS of samples in [-1, 1].
    TARGET_RMS: ClassVar[float] = 10.0 ** (-30.0 / 20.0)

    def __init__(
        self,
        sample_rate: int = 16000,
        embedding_dim: int = 256,
        hidden: int = 256,
        layers: int = 3,
        n_mels: int = 40,
        freeze_encoder: bool = True,
    ) -> None:
        super().__init__()
        if int(sample_rate) != self.SAMPLE_RATE:
            raise ValueError(f"the GE2E encoder takes 16 kHz audio, not {sample_rate} Hz")
        self.frontend = LogMelFrontend(
            self.SAMPLE_RATE, n_mels, 0.025, 0.010, normalise="none", librosa=True
        )
        self.lstm = nn.LSTM(n_mels, hidden, layers, batch_first=True)
        self.linear = nn.Linear(hidden, hidden)
        self.embedding_dim = int(embedding_dim)
        self.adapter = nn.Linear(hidden, self.embedding_dim)
        nn.init.zeros_(self.adapter.weight)
        nn.init.zeros_(self.adapter.bias)
        self._residual = self.embedding_dim == hidden
        if freeze_encoder:
            self.lstm.requires_grad_(False)
            self.linear.requires_grad_(False)
        #: Shortest input: the frame padding is a reflection of 200 samples.
        self.min_samples = self.frontend.min_samples

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **options: Any) -> GE2ESpeakerEncoder:
        return cls(sample_rate=_sample_rate(spec), **options)

    def mel(self, waveform: Tensor) -> Tensor:
        """``[batch, samples]`` → mel power ``[batch, frames, n_mels]``, ``frames = 1 +
        samples // 160`` (centred frames, reflected edges)."""
        rms = waveform.pow(2).mean(dim=-1, keepdim=True).sqrt()
        gain = (self.TARGET_RMS / rms.clamp_min(1e-8)).clamp_min(1.0)
        return self.frontend(waveform * gain).transpose(1, 2)

    def partials(self, mel: Tensor) -> Tensor:
        """``[batch, frames, n_mels]`` → ``[batch, partials, 160, n_mels]``: windows every 77
        frames, zero-padded at the end, the last kept when 120 of its frames (75 %) hold audio
        (``VoiceEncoder.compute_partial_slices(rate=1.3, min_coverage=0.75)``)."""
        frames = mel.shape[1]
        count = torch.sym_max(1, (frames - self.MIN_COVERAGE_FRAMES) // self.PARTIAL_STEP + 1)
        padded = F.pad(mel, (0, 0, 0, self.PARTIAL_FRAMES))
        starts = torch.arange(count, device=mel.device) * self.PARTIAL_STEP
        index = starts[:, None] + torch.arange(self.PARTIAL_FRAMES, device=mel.device)[None, :]
        return padded[:, index]

    def encode(self, mel: Tensor) -> Tensor:
        """Pretrained GE2E embeddings of ``[batch, frames, n_mels]``: partials, averaged, unit."""
        batch = mel.shape[0]
        partials = self.partials(mel).reshape(-1, self.PARTIAL_FRAMES, mel.shape[2])
        _, (hidden, _) = self.lstm(partials)
        partial = F.relu(self.linear(hidden[-1]))
        partial = partial / torch.linalg.vector_norm(partial, dim=-1, keepdim=True).clamp_min(
            NORM_EPSILON
        )
        mean = partial.reshape(batch, -1, partial.shape[-1]).mean(dim=1)
        return mean / torch.linalg.vector_norm(mean, dim=-1, keepdim=True).clamp_min(NORM_EPSILON)

    def forward(self, waveform: Tensor) -> Tensor:
        """``float32 [batch, samples]`` → ``[batch, embedding_dim]``."""
        embedding = self.encode(self.mel(waveform))
        adapted = self.adapter(embedding)
        return embedding + adapted if self._residual else adapted


class ResNet18Small(Backbone):
    """ResNet-18 for small images (He et al., CVPR 2016; the CIFAR variant), with GroupNorm.

    ImageFrontend → Conv 3×3 (stride ``stem_stride``) → GroupNorm → ReLU → four stages of two basic
    blocks, ``width · (1, 2, 4, 8)`` channels, strides 1, 2, 2, 2 → spatial mean → Linear to
    ``embedding_dim``. ``width=64`` is the standard ResNet-18 (FedHide's CIFAR-100 network, Park et
    al., 2024); GroupNorm replaces BatchNorm (Hsieh et al., "The Non-IID Data Quagmire of
    Decentralized Machine Learning", ICML 2020, recommend it for federated training).

    Parameters
    ----------
    in_channels : int, optional
        Image channels.
    embedding_dim : int, optional
        Output dimension.
    width : int, optional
        Channels of the first stage.
    blocks : sequence of int, optional
        Basic blocks per stage.
    stem_stride : int, optional
        Stride of the first convolution (1 for 32×32; :meth:`from_spec` uses 2 above 48 pixels).
    mean, std : float or sequence of float, optional
        Pixel normalisation of :class:`ImageFrontend`.
    """

    modality: ClassVar[str] = "image"

    def __init__(
        self,
        in_channels: int = 3,
        embedding_dim: int = 256,
        width: int = 64,
        blocks: Sequence[int] = (2, 2, 2, 2),
        stem_stride: int = 1,
        mean: float | Sequence[float] = 0.5,
        std: float | Sequence[float] = 0.5,
    ) -> None:
        super().__init__()
        self.frontend = ImageFrontend(mean, std)
        widths = tuple(width * factor for factor in (1, 2, 4, 8))
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, stride=stem_stride, padding=1, bias=False),
            group_norm(width),
            nn.ReLU(inplace=False),
        )
        self.stages = _residual_stages(width, widths, tuple(blocks), (1, 2, 2, 2), False)
        self.embedding_dim = int(embedding_dim)
        self.embedding = nn.Linear(widths[-1], self.embedding_dim)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **options: Any) -> ResNet18Small:
        height, width, channels = _image_shape(spec)
        options.setdefault("stem_stride", 1 if max(height, width) <= 48 else 2)
        return cls(in_channels=channels, **options)

    def forward(self, pixels: Tensor) -> Tensor:
        """``uint8 [batch, H, W, C]`` → ``[batch, embedding_dim]``."""
        features = self.stages(self.stem(self.frontend(pixels)))
        return self.embedding(features.mean(dim=(2, 3)))


class _IRBlock(nn.Module):
    """The improved residual block of ArcFace's IResNet (insightface ``IBasicBlock``), GroupNorm.

    norm → conv 3×3 (stride 1) → norm → PReLU → conv 3×3 (stride ``stride``) → norm, plus the
    shortcut: the input, or conv 1×1 (stride ``stride``) → norm when the shape changes; no
    activation after the sum (Deng et al., "ArcFace: Additive Angular Margin Loss for Deep Face
    Recognition", CVPR 2019; the unit follows Han et al., "Deep Pyramidal Residual Networks", CVPR
    2017).
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.norm1 = group_norm(in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)
        self.norm2 = group_norm(out_channels)
        self.prelu = nn.PReLU(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.norm3 = group_norm(out_channels)
        self.shortcut: nn.Module = (
            nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                group_norm(out_channels),
            )
            if stride != 1 or in_channels != out_channels
            else nn.Identity()
        )

    def forward(self, x: Tensor) -> Tensor:
        out = self.prelu(self.norm2(self.conv1(self.norm1(x))))
        return self.norm3(self.conv2(out)) + self.shortcut(x)


class IResNet(Backbone):
    """IResNet, the face-recognition ResNet of ArcFace (Deng et al., CVPR 2019, insightface), with
    GroupNorm.

    ImageFrontend → conv 3×3 (stride 1) → GroupNorm → PReLU → four stages of :class:`_IRBlock`,
    ``channels · (1, 2, 4, 8)`` channels, each stage's first block of stride 2 → GroupNorm →
    flatten → Linear to ``embedding_dim`` → LayerNorm: insightface's output layer (BN-Dropout-FC-
    BN, "option E" of the ArcFace report). On 112×112 faces the last map is 7×7, and the flattened
    map keeps where on the face a feature is, which a spatial mean would lose. The defaults are IResNet-18 (insightface
    ``iresnet18``); ``blocks=(3, 4, 14, 3)`` is IResNet-50.

    Differences from insightface's ``iresnet.py``, all from this module's constraints: GroupNorm
    (:func:`group_norm`) for every BatchNorm2d; the final BatchNorm1d (weight frozen at 1, which
    standardises each embedding coordinate over the batch) becomes a LayerNorm with its affine
    parameters trained, which standardises each embedding over its coordinates, per sample and
    without running statistics; no dropout before the linear layer (insightface's default rate is
    0 too); PyTorch's default initialisation.

    The linear layer takes the flattened last map, so a network is built for one image size, as
    the original: the last map is ``⌈image_height / 16⌉ × ⌈image_width / 16⌉`` (each stride-2
    stage takes ``n`` to ``⌈n / 2⌉``), and ``forward`` refuses another size.

    Parameters
    ----------
    in_channels : int, optional
        Image channels.
    image_height, image_width : int, optional
        The input size in pixels (:meth:`from_spec` takes them from the spec; 112×112 is
        ArcFace's aligned crop).
    embedding_dim : int, optional
        Output dimension (512 in ArcFace).
    channels : int, optional
        Channels of the stem and of the first stage (64 in ArcFace); the stages have ``channels ·
        (1, 2, 4, 8)``.
    blocks : sequence of int, optional
        IR blocks per stage.
    mean, std : float or sequence of float, optional
        Pixel normalisation of :class:`ImageFrontend` (0.5 and 0.5 map pixels to [-1, 1], as
        insightface's ``(x / 255 − 0.5) / 0.5``).
    """

    modality: ClassVar[str] = "image"

    def __init__(
        self,
        in_channels: int = 3,
        image_height: int = 112,
        image_width: int = 112,
        embedding_dim: int = 512,
        channels: int = 64,
        blocks: Sequence[int] = (2, 2, 2, 2),
        mean: float | Sequence[float] = 0.5,
        std: float | Sequence[float] = 0.5,
    ) -> None:
        super().__init__()
        blocks = tuple(int(count) for count in blocks)
        if len(blocks) != 4 or min(blocks) < 1:
            raise ValueError(f"need four stages of at least one block each, got {blocks}")
        if min(image_height, image_width) < 1 or channels < 1:
            raise ValueError(
                f"image size {image_height}×{image_width} and channels {channels} must be positive"
            )
        self.image_height = int(image_height)
        self.image_width = int(image_width)
        self.frontend = ImageFrontend(mean, std)
        widths = tuple(int(channels) * factor for factor in (1, 2, 4, 8))
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False),
            group_norm(widths[0]),
            nn.PReLU(widths[0]),
        )
        stages: list[nn.Module] = []
        previous = widths[0]
        for width, count in zip(widths, blocks, strict=True):
            layers = [_IRBlock(previous, width, stride=2)]
            layers += [_IRBlock(width, width) for _ in range(count - 1)]
            stages.append(nn.Sequential(*layers))
            previous = width
        self.stages = nn.Sequential(*stages)
        self.norm = group_norm(previous)
        height, width = self.image_height, self.image_width
        for _ in range(len(widths)):
            height, width = -(-height // 2), -(-width // 2)
        #: Height and width of the last feature map.
        self.feature_size = (height, width)
        self.embedding_dim = int(embedding_dim)
        self.embedding = nn.Linear(previous * height * width, self.embedding_dim)
        self.embedding_norm = nn.LayerNorm(self.embedding_dim, elementwise_affine=True)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **options: Any) -> IResNet:
        height, width, channels = _image_shape(spec)
        return cls(in_channels=channels, image_height=height, image_width=width, **options)

    def forward(self, pixels: Tensor) -> Tensor:
        """``uint8 [batch, image_height, image_width, C]`` → ``[batch, embedding_dim]``."""
        if tuple(pixels.shape[1:3]) != (self.image_height, self.image_width):
            raise ValueError(
                f"this IResNet takes {self.image_height}×{self.image_width} images, "
                f"got {tuple(pixels.shape[1:3])}"
            )
        features = self.norm(self.stages(self.stem(self.frontend(pixels))))
        return self.embedding_norm(self.embedding(features.flatten(1)))


class _IResNet50(IResNet):
    """:class:`IResNet` with IResNet-50's blocks (3, 4, 14, 3) as its default."""

    def __init__(self, **options: Any) -> None:
        options.setdefault("blocks", (3, 4, 14, 3))
        super().__init__(**options)


class _IResNetSmall(IResNet):
    """:class:`IResNet` for 32–64 pixel faces on a CPU: one block per stage, 16 channels, a
    128-dimensional embedding (our choice)."""

    def __init__(self, **options: Any) -> None:
        options.setdefault("blocks", (1, 1, 1, 1))
        options.setdefault("channels", 16)
        options.setdefault("embedding_dim", 128)
        super().__init__(**options)


class _FastResNet34(LogMelResNet):
    """:class:`LogMelResNet` with Fast ResNet-34's blocks (3, 4, 6, 3) as its default."""

    def __init__(self, sample_rate: int = 16000, **options: Any) -> None:
        options.setdefault("blocks", (3, 4, 6, 3))
        super().__init__(sample_rate, **options)


#: Backbones by name; ``BACKBONES[name].from_spec(spec, **options)`` builds one (see
#: :func:`build_backbone`), ``BACKBONES[name].modality`` says which inputs it takes.
BACKBONES: dict[str, type[Backbone]] = {
    "voxceleb-conv1d": VoxCelebConv1d,
    "celeba-conv2d": CelebAConv2d,
    "mnistuv-conv2d": MnistUvConv2d,
    "logmel-resnet": LogMelResNet,
    "logmel-tdnn": LogMelTDNN,
    "fast-resnet34": _FastResNet34,
    "ge2e-lstm": GE2ESpeakerEncoder,
    "resnet18-small": ResNet18Small,
    "ir-18": IResNet,
    "ir-50": _IResNet50,
    "ir-small": _IResNetSmall,
}


def build_backbone(name: str, spec: Mapping[str, Any], **options: Any) -> Backbone:
    """Build a registered backbone for a dataset's input spec.

    Parameters
    ----------
    name : str
        A key of :data:`BACKBONES`.
    spec : mapping
        The dataset's input spec: ``{"sample_rate", ...}`` for audio, ``{"height", "width",
        "channels"}`` for images; input channels and sample rate come from it.
    **options
        Constructor arguments of the backbone (``embedding_dim``, ``width``, ``blocks``, ...).

    Returns
    -------
    Backbone
        A freshly initialised module.

    Raises
    ------
    ValueError
        Unknown name, or a spec of the other modality.
    """
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; known: {', '.join(sorted(BACKBONES))}")
    return BACKBONES[name].from_spec(spec, **options)


def default_backbone(modality: str, spec: Mapping[str, Any]) -> str:
    """A small backbone that trains on a CPU, for a modality and input spec.

    Audio: ``"logmel-tdnn"`` (the cheapest audio network that learns here; ``logmel-resnet`` and
    ``fast-resnet34`` are the FedHide-style alternatives). Images: ``"mnistuv-conv2d"``
    below 32 pixels on a side, else ``"celeba-conv2d"`` (both end in a spatial mean, so any size
    works).
    """
    if modality == "audio":
        _sample_rate(spec)
        return "logmel-tdnn"
    if modality == "image":
        height, width, _ = _image_shape(spec)
        return "mnistuv-conv2d" if min(height, width) < 32 else "celeba-conv2d"
    raise ValueError(f"unknown modality {modality!r}; expected 'audio' or 'image'")


# ----------------------------------------------------------------------------------------------
# Heads
# ----------------------------------------------------------------------------------------------


class CodewordModel(nn.Module):
    """FedUV's model: ``σ(W g(x))``, rows of norm √code_length (FedUV paper, Fig. 2).

    ``W`` (``class_embedding``, ``[code_length, embedding_dim]``, no bias) is shared and trained with
    FedAvg like the backbone ``g``; each user's secret is the ±1 codeword ``v`` that the output is
    correlated with, ``v · σ(W g(x)) / c``. This is what a FedUV bundle exports (output kind
    ``codeword``).

    Parameters
    ----------
    backbone : Backbone
        ``g``, with attribute ``embedding_dim``.
    code_length : int
        ``c``, the length of the code (the output dimension).
    """

    output_kind: ClassVar[str] = "codeword"

    def __init__(self, backbone: nn.Module, code_length: int) -> None:
        super().__init__()
        if code_length < 1:
            raise ValueError(f"code_length must be positive, got {code_length}")
        self.backbone = backbone
        self.code_length = int(code_length)
        self.class_embedding = nn.Linear(backbone.embedding_dim, self.code_length, bias=False)

    @property
    def output_dim(self) -> int:
        """Dimension of the output."""
        return self.code_length

    def forward(self, x: Tensor) -> Tensor:
        """Raw input → ``[batch, code_length]``, rows of norm √code_length."""
        return sigma_scale(self.class_embedding(self.backbone(x)), self.code_length)


class EmbeddingModel(nn.Module):
    """``g(x) / ‖g(x)‖``: what a FedHide or prototype-method bundle exports (kind ``embedding``).

    FedHide (Park et al., 2024) scores cosines ``w_cᵀ f(x)`` of unit prototypes and unit embeddings.

    Parameters
    ----------
    backbone : Backbone
        ``g``, with attribute ``embedding_dim``.
    """

    output_kind: ClassVar[str] = "embedding"

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone

    @property
    def output_dim(self) -> int:
        """Dimension of the output."""
        return int(self.backbone.embedding_dim)

    def forward(self, x: Tensor) -> Tensor:
        """Raw input → ``[batch, embedding_dim]``, unit rows."""
        embedding = self.backbone(x)
        norm = torch.linalg.vector_norm(embedding, dim=-1, keepdim=True)
        return embedding / norm.clamp_min(NORM_EPSILON)


# ----------------------------------------------------------------------------------------------
# Checkpoints and accounting
# ----------------------------------------------------------------------------------------------

#: Keys under which a checkpoint file may nest its weights (tried in this order).
_NESTED_STATE_KEYS = ("state_dict", "model", "model_state_dict", "model_state", "backbone")


def load_backbone_checkpoint(
    backbone: nn.Module, path: str | Path, *, prefix: str = "", strict: bool = False
) -> list[str]:
    """Load pretrained weights into ``backbone`` before federated fine-tuning.

    The file is read with ``torch.load(weights_only=True)`` (no code runs). It may be a state dict
    or a dict holding one under ``"state_dict"``, ``"model"``, ``"model_state_dict"`` or
    ``"backbone"``. A checkpoint entry ``prefix + name`` is loaded into the backbone's parameter
    ``name`` when the shapes agree (e.g. ``prefix="backbone."`` for a saved
    :class:`CodewordModel`, ``"module."`` for a DataParallel one).

    Parameters
    ----------
    backbone : torch.nn.Module
        Loaded in place.
    path : str or Path
        The checkpoint file.
    prefix : str, optional
        Prefix of the backbone's entries in the checkpoint; entries without it are ignored.
    strict : bool, optional
        Require every parameter of the backbone to be loaded with the right shape.

    Returns
    -------
    list of str
        Names of the parameters loaded, in the backbone's order.

    Raises
    ------
    ValueError
        Nothing matches, a shape differs (``strict``) or a parameter is missing (``strict``).
    """
    from ..checkpoints import read_checkpoint

    checkpoint = read_checkpoint(path)
    state = checkpoint
    if isinstance(checkpoint, Mapping):
        for key in _NESTED_STATE_KEYS:
            if isinstance(checkpoint.get(key), Mapping):
                state = checkpoint[key]
                break
    if not isinstance(state, Mapping):
        raise ValueError(f"{path}: not a state dict (got {type(state).__name__})")
    tensors = {
        key[len(prefix) :]: value
        for key, value in state.items()
        if isinstance(key, str) and key.startswith(prefix) and isinstance(value, Tensor)
    }
    loaded: list[str] = []
    mismatched: list[str] = []
    with torch.no_grad():
        for name, parameter in backbone.named_parameters():
            if name not in tensors:
                continue
            if tensors[name].shape != parameter.shape:
                mismatched.append(
                    f"{name} {tuple(tensors[name].shape)} != {tuple(parameter.shape)}"
                )
                continue
            parameter.copy_(tensors[name].to(parameter.dtype))
            loaded.append(name)
    if not loaded:
        sample = ", ".join(list(map(str, state))[:5])
        raise ValueError(
            f"{path}: no parameter of the backbone matches the checkpoint with prefix {prefix!r} "
            f"(its first entries: {sample})"
        )
    if strict:
        missing = [name for name, _ in backbone.named_parameters() if name not in loaded]
        if mismatched or missing:
            raise ValueError(
                f"{path}: strict load failed; shape mismatches: {mismatched or 'none'}; "
                f"missing: {missing or 'none'}"
            )
    return loaded


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameter elements of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def model_flops(model: nn.Module, example: Tensor) -> int:
    """Floating-point operations of one forward pass on ``example`` (torch's FLOP counter:
    convolutions and matrix products, 2 per multiply-add; elementwise operations are not counted).
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(example)
    return int(counter.get_total_flops())
