"""The FedUV paper's three networks exactly as its Table 2 gives them (Hosseini et al., "Federated
Learning of User Verification Models Without Sharing Embeddings", ICML 2021, Table 2 and Sec. 6.1):
``feduv-voxceleb-conv1d``, ``feduv-celeba-conv2d`` and ``feduv-mnistuv-conv2d``.

Every stage is ``conv(c1, c2, k, p) → ReLU → maxpool → GN(2)`` in that order (GroupNorm with 2
groups *after* the pooling), five stages of 64 → 128 → 256 → 512 → 1024 channels, then Flatten.
The pooling brings the input down to one position, so Flatten gives exactly 1024 features, the
backbone's ``g(x)``. Table 2's ``FC(1024, c)`` and its scaling layer are the head:
:class:`~uvtrain.models.heads.CodewordModel`'s ``W`` (``c × 1024``; no bias, as ``W g(x)`` in eq. 4)
and σ for FedUV, the class rows for softmax and FedAwS.

The project's own, smaller networks for the same datasets (``voxceleb-conv1d``, ``celeba-conv2d``,
``mnistuv-conv2d`` in :mod:`.convnets`) are not these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import Backbone, BackboneError, _image_shape, _sample_rate
from .frontends import ImageFrontend

#: Output channels of the five stages (all three networks of Table 2).
TABLE2_CHANNELS: tuple[int, ...] = (64, 128, 256, 512, 1024)
#: GroupNorm groups after every stage ("GN(2)").
TABLE2_GROUPS = 2
#: VoxCeleb: kernel and max-pooling size of each conv1d stage.
VOXCELEB_KERNELS: tuple[int, ...] = (15, 9, 7, 5, 3)
VOXCELEB_POOLS: tuple[int, ...] = (4, 8, 8, 8, 8)
#: VoxCeleb input: "2-second audio files were sampled at 8 kHz to obtain vectors of length 2^14".
VOXCELEB_SAMPLE_RATE = 8000
VOXCELEB_SAMPLES = 2**14
#: CelebA (64×64×3) and MNIST-UV (28×28×4): 3×3 kernels; pools, and the padding of each stage.
CELEBA_POOLS: tuple[int, ...] = (2, 2, 2, 2, 4)
CELEBA_PADDINGS: tuple[int, ...] = (1, 1, 1, 1, 1)
MNISTUV_POOLS: tuple[int, ...] = (2, 2, 2, 2, 2)
MNISTUV_PADDINGS: tuple[int, ...] = (3, 1, 1, 1, 1)
#: Taps of the anti-aliasing low-pass per unit of the decimation factor (:class:`_Decimate`).
DECIMATION_TAPS_PER_FACTOR = 16


class _Table2Stage(nn.Sequential):
    """``conv(c1, c2, k, p) → ReLU → maxpool(pool) → GN(2)``, one row group of Table 2."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel: int,
        padding: int,
        pool: int,
        dims: Literal[1, 2],
    ) -> None:
        conv = nn.Conv1d if dims == 1 else nn.Conv2d
        max_pool = nn.MaxPool1d if dims == 1 else nn.MaxPool2d
        super().__init__(
            conv(in_channels, out_channels, kernel, padding=padding),
            nn.ReLU(inplace=False),
            max_pool(pool),
            nn.GroupNorm(TABLE2_GROUPS, out_channels),
        )


def _stages(
    in_channels: int,
    kernels: Sequence[int],
    paddings: Sequence[int],
    pools: Sequence[int],
    dims: Literal[1, 2],
) -> nn.Sequential:
    widths = (in_channels, *TABLE2_CHANNELS)
    return nn.Sequential(
        *(
            _Table2Stage(widths[i], widths[i + 1], k, p, pool, dims)
            for i, (k, p, pool) in enumerate(zip(kernels, paddings, pools, strict=True))
        )
    )


def _output_size(
    size: int, kernels: Sequence[int], paddings: Sequence[int], pools: Sequence[int]
) -> int:
    """Length (or height, or width) after the stages: ``(n + 2p − k + 1) // pool`` each."""
    for kernel, padding, pool in zip(kernels, paddings, pools, strict=True):
        size = (size + 2 * padding - kernel + 1) // pool
    return size


class _Decimate(nn.Module):
    """Integer-factor decimation inside the graph: a fixed windowed-sinc low-pass (cut-off at the
    new Nyquist frequency, Hann window, unit DC gain) as one strided ``conv1d``.

    ``float32 [batch, samples]`` at ``factor × rate`` → ``[batch, ceil(samples / factor)]``.
    """

    def __init__(self, factor: int) -> None:
        super().__init__()
        self.factor = int(factor)
        half = DECIMATION_TAPS_PER_FACTOR * self.factor // 2
        n = np.arange(-half, half + 1, dtype=np.float64)
        taps = np.sinc(n / self.factor) * np.hanning(2 * half + 3)[1:-1]
        taps /= taps.sum()
        kernel = torch.from_numpy(taps.astype(np.float32)).view(1, 1, -1)
        self.register_buffer("kernel", kernel, persistent=False)
        self.padding = half

    def forward(self, waveform: Tensor) -> Tensor:
        return F.conv1d(
            waveform.unsqueeze(1), self.kernel, stride=self.factor, padding=self.padding
        ).squeeze(1)


class FedUVVoxCelebConv1d(Backbone):
    """The FedUV paper's VoxCeleb network, exactly (Hosseini et al., ICML 2021, Table 2).

    waveform ``[batch, samples]`` → (decimate to 8 kHz) → zero-pad or crop to 2¹⁴ samples →
    five stages ``conv1d(c1, c2, k) → ReLU → maxpool1d → GN(2)`` with kernels 15/9/7/5/3, channels
    1 → 64 → 128 → 256 → 512 → 1024 and pools 4/8/8/8/8 → Flatten → ``[batch, 1024]``. Table 2's
    ``FC(1024, c)`` and scaling are the head (:class:`~uvtrain.models.heads.CodewordModel`).

    **Padding.** Table 2's default ``p = 1`` does not fit: 2¹⁴ samples become 16372 → 4093 →
    4087 → 510 → 506 → 63 → 61 → 7 → 7 → 0 positions, and the last max-pool (8) has nothing left
    to pool. We pad each conv1d by ``(k − 1) / 2`` ("same": 7, 4, 3, 2, 1), so that the length is
    divided only by the pools, 2¹⁴ / (4 · 8⁴) = 1, and Flatten gives the 1024 features that
    ``FC(1024, c)`` takes. It is the only padding under which every conv keeps the length and the
    pools divide it exactly.

    **Input.** The paper feeds 2-s clips "sampled at 8 kHz to obtain vectors of length 2¹⁴" (Sec.
    6.1). The network therefore always sees exactly 2¹⁴ samples at 8 kHz: a dataset (and bundle) at
    16 kHz is decimated by 2 inside the graph (a fixed 33-tap windowed-sinc low-pass, so the SDK and
    the bundle keep the dataset's rate), and the result is zero-padded at the end or cropped to
    its first 2¹⁴ samples — a 2-s window at 8 kHz is 16000 samples, padded by 384 (the paper does
    not say how it reached 2¹⁴ from 2 s). The waveform goes in as it is, in [-1, 1]: Table 2 starts
    at the convolution.

    2,538,240 parameters (convolutions 2,534,272, GroupNorm 3,968); with a ``c = 127`` head
    ``W`` (1024 · 127) 2,668,288.

    Parameters
    ----------
    sample_rate : int, optional
        The dataset's sample rate: 8000, or a multiple of it (decimated in the graph).
    """

    modality: ClassVar[str] = "audio"

    def __init__(self, sample_rate: int = VOXCELEB_SAMPLE_RATE) -> None:
        super().__init__()
        if sample_rate % VOXCELEB_SAMPLE_RATE:
            raise BackboneError(
                f"feduv-voxceleb-conv1d takes 8 kHz audio or a multiple of it (decimated in the "
                f"graph), got {sample_rate} Hz"
            )
        self.sample_rate = int(sample_rate)
        factor = self.sample_rate // VOXCELEB_SAMPLE_RATE
        self.decimate: nn.Module = _Decimate(factor) if factor > 1 else nn.Identity()
        paddings = tuple((k - 1) // 2 for k in VOXCELEB_KERNELS)
        self.features = _stages(1, VOXCELEB_KERNELS, paddings, VOXCELEB_POOLS, dims=1)
        if _output_size(VOXCELEB_SAMPLES, VOXCELEB_KERNELS, paddings, VOXCELEB_POOLS) != 1:
            raise AssertionError("Table 2's VoxCeleb stack must end at one position")
        self.embedding_dim = TABLE2_CHANNELS[-1]
        #: Any input is padded to 2¹⁴ samples; the shortest is two samples at 8 kHz (so that the
        #: exported graph's dynamic length is not specialised to 1).
        self.min_samples = 2 * factor

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **options: Any) -> FedUVVoxCelebConv1d:
        return cls(sample_rate=_sample_rate(spec), **options)

    def forward(self, waveform: Tensor) -> Tensor:
        """``float32 [batch, samples]`` at ``sample_rate`` → ``[batch, 1024]``."""
        at_8khz = self.decimate(waveform)
        fixed = F.pad(at_8khz, (0, VOXCELEB_SAMPLES))[:, :VOXCELEB_SAMPLES]
        return self.features(fixed.unsqueeze(1)).flatten(1)


class _FedUVImageConv2d(Backbone):
    """ImageFrontend → five Table 2 conv2d stages (3×3) → Flatten: the shared body of
    :class:`FedUVCelebAConv2d` and :class:`FedUVMnistUvConv2d`."""

    modality: ClassVar[str] = "image"
    table_name: ClassVar[str]
    table_input: ClassVar[tuple[int, int, int]]
    pools: ClassVar[tuple[int, ...]]
    paddings: ClassVar[tuple[int, ...]]

    def __init__(
        self,
        in_channels: int | None = None,
        height: int | None = None,
        width: int | None = None,
        mean: float | Sequence[float] = 0.5,
        std: float | Sequence[float] = 0.5,
    ) -> None:
        super().__init__()
        table_height, table_width, table_channels = self.table_input
        height = table_height if height is None else int(height)
        width = table_width if width is None else int(width)
        kernels = (3,) * len(TABLE2_CHANNELS)
        ends = [_output_size(side, kernels, self.paddings, self.pools) for side in (height, width)]
        if ends != [1, 1]:
            raise BackboneError(
                f"{self.table_name} is Table 2's network for {table_height}×{table_width} "
                f"images: {height}×{width} does not end at 1×1 before Flatten → FC(1024, c)"
            )
        self.in_channels = table_channels if in_channels is None else int(in_channels)
        self.frontend = ImageFrontend(mean, std)
        self.features = _stages(self.in_channels, kernels, self.paddings, self.pools, dims=2)
        self.embedding_dim = TABLE2_CHANNELS[-1]
        #: Smallest height and width that ends at 1×1.
        self.min_size = min(
            side
            for side in range(1, 1024)
            if _output_size(side, kernels, self.paddings, self.pools)
        )

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **options: Any) -> _FedUVImageConv2d:
        height, width, channels = _image_shape(spec)
        return cls(in_channels=channels, height=height, width=width, **options)

    def forward(self, pixels: Tensor) -> Tensor:
        """``uint8 [batch, H, W, C]`` → ``[batch, 1024]``."""
        return self.features(self.frontend(pixels)).flatten(1)


class FedUVCelebAConv2d(_FedUVImageConv2d):
    """The FedUV paper's CelebA network, exactly (Hosseini et al., ICML 2021, Table 2).

    pixels ``uint8 [batch, 64, 64, 3]`` → /255, (x − 0.5) / 0.5 (ours: Table 2 starts at the
    convolution) → five stages ``conv2d(c1, c2, k=3, p=1) → ReLU → maxpool2d → GN(2)``, channels
    3 → 64 → 128 → 256 → 512 → 1024, pools 2/2/2/2/4 → Flatten → ``[batch, 1024]``. Table 2's
    padding ``p = 1`` fits as it is: 64 → 32 → 16 → 8 → 4 → 1. ``FC(1024, c)`` and scaling are the
    head (:class:`~uvtrain.models.heads.CodewordModel`).

    6,274,560 parameters (convolutions 6,270,592, GroupNorm 3,968); with a ``c = 127`` head
    6,404,608. Images of 64 to 127 pixels a side end at 1×1; others are refused.

    Parameters
    ----------
    in_channels : int, optional
        Image channels (the table's 3; from the dataset's spec).
    height, width : int, optional
        Image size (the table's 64×64; from the dataset's spec).
    mean, std : float or sequence of float, optional
        Pixel normalisation of :class:`ImageFrontend`.
    """

    table_name: ClassVar[str] = "feduv-celeba-conv2d"
    table_input: ClassVar[tuple[int, int, int]] = (64, 64, 3)
    pools: ClassVar[tuple[int, ...]] = CELEBA_POOLS
    paddings: ClassVar[tuple[int, ...]] = CELEBA_PADDINGS


class FedUVMnistUvConv2d(_FedUVImageConv2d):
    """The FedUV paper's MNIST-UV network, exactly (Hosseini et al., ICML 2021, Table 2).

    pixels ``uint8 [batch, 28, 28, 4]`` (four digits of one writer as channels) → /255,
    (x − 0.5) / 0.5 (ours) → five stages ``conv2d(c1, c2, k=3) → ReLU → maxpool2d(2) → GN(2)``,
    channels 4 → 64 → 128 → 256 → 512 → 1024, the first conv with Table 2's ``p = 3`` and the
    others with ``p = 1`` → Flatten → ``[batch, 1024]``. The table's paddings fit as they are:
    28 → 32 → 16, then 8 → 4 → 2 → 1. ``FC(1024, c)`` and scaling are the head.

    6,275,136 parameters (convolutions 6,271,168, GroupNorm 3,968); with a ``c = 127`` head
    6,405,184. Images of 28 to 59 pixels a side end at 1×1; others are refused.

    Parameters
    ----------
    in_channels : int, optional
        Image channels (the table's 4; from the dataset's spec).
    height, width : int, optional
        Image size (the table's 28×28; from the dataset's spec).
    mean, std : float or sequence of float, optional
        Pixel normalisation of :class:`ImageFrontend`.
    """

    table_name: ClassVar[str] = "feduv-mnistuv-conv2d"
    table_input: ClassVar[tuple[int, int, int]] = (28, 28, 4)
    pools: ClassVar[tuple[int, ...]] = MNISTUV_POOLS
    paddings: ClassVar[tuple[int, ...]] = MNISTUV_PADDINGS


__all__ = [
    "FedUVCelebAConv2d",
    "FedUVMnistUvConv2d",
    "FedUVVoxCelebConv1d",
]
