"""The ResNet family: the log-mel speaker ResNet (FedHide's Fast ResNet-34 and its small CPU
variant) and ResNet-18 for small images, with their shared basic block, squeeze-excitation
and self-attentive pooling."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import Backbone, _image_shape, _sample_rate, group_norm
from .frontends import ImageFrontend, LogMelFrontend


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
    Interspeech 2020; the speaker network of FedHide, Park & Yun, 2024, Table 1) is ``width=16``,
    ``blocks=(3, 4, 6, 3)`` with squeeze-excitation blocks and self-attentive pooling; registered as
    ``"fast-resnet34"``. The defaults here are the small CPU variant ``blocks=(1, 1, 1, 1)``
    (registered as ``"logmel-resnet"``). GroupNorm replaces BatchNorm (the engine vectorises over
    clients). The default 256-dimensional embedding is ours; the FedHide paper's models all make
    512 (Sec. 4.1), which the FedHide, FedGN and FedCS methods ask for (their ``embedding_dim``).

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
    n_mels, frame_seconds, hop_seconds, window : optional
        Of the :class:`LogMelFrontend` (``window``: ``"hann"``, or the FedHide paper's
        ``"hamming"``).
    """

    modality: ClassVar[str] = "audio"
    takes_window: ClassVar[bool] = True

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
        window: str = "hann",
    ) -> None:
        super().__init__()
        if pooling not in ("sap", "mean"):
            raise ValueError(f"pooling must be 'sap' or 'mean', got {pooling!r}")
        self.frontend = LogMelFrontend(
            sample_rate, n_mels, frame_seconds, hop_seconds, window=window
        )
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


class _FastResNet34(LogMelResNet):
    """:class:`LogMelResNet` with Fast ResNet-34's blocks (3, 4, 6, 3) as its default."""

    def __init__(self, sample_rate: int = 16000, **options: Any) -> None:
        options.setdefault("blocks", (3, 4, 6, 3))
        super().__init__(sample_rate, **options)


class ResNet18Small(Backbone):
    """ResNet-18 for small images (He et al., CVPR 2016; the CIFAR variant), with GroupNorm.

    ImageFrontend → Conv 3×3 (stride ``stem_stride``) → GroupNorm → ReLU → four stages of two basic
    blocks, ``width · (1, 2, 4, 8)`` channels, strides 1, 2, 2, 2 → spatial mean → Linear to
    ``embedding_dim``. ``width=64`` is the standard ResNet-18 (FedHide's CIFAR-100 network, Park & Yun,
    2024); GroupNorm replaces BatchNorm (Hsieh et al., "The Non-IID Data Quagmire of
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
