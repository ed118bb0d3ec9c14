"""Our convolutional networks for the FedUV paper's three datasets: a conv1d stack on the raw
waveform (VoxCeleb) and conv2d stacks on pixels (CelebA, MNIST-UV).

They are ours, not the paper's Table 2 (Hosseini et al., ICML 2021): the paper's three networks,
exactly, are ``feduv-voxceleb-conv1d``, ``feduv-celeba-conv2d`` and ``feduv-mnistuv-conv2d``
(:mod:`.feduv_table2`). These smaller ones take any input length or image size (they end in a
mean over time or space) and train on a 2-core CPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from torch import Tensor, nn

from ..features import VOXCELEB_LAYERS
from .base import Backbone, _ConvUnit, _image_shape, _sample_rate
from .frontends import ImageFrontend


class VoxCelebConv1d(Backbone):
    """Our raw-waveform conv1d network for VoxCeleb-like audio — ours, not the paper's Table 2;
    see ``feduv-voxceleb-conv1d`` (:class:`~uvtrain.models.feduv_table2.FedUVVoxCelebConv1d`).

    waveform ``[batch, samples]`` → for each layer of ``layers``: Conv1d → GroupNorm → ReLU → mean
    over time → Linear to ``embedding_dim``.

    Where it differs from the FedUV paper's VoxCeleb network (Hosseini et al., ICML 2021, Table 2:
    8 kHz input of 2¹⁴ samples, five conv1d of kernels 15/9/7/5/3 and 64 → 1024 channels, each
    followed by ReLU, max-pooling 4/8/8/8/8 and GN(2), then Flatten): it takes 16 kHz audio of any
    length, has six strided layers (:data:`VOXCELEB_LAYERS`: a 251-tap stride-10 first layer,
    then 5/3-tap stride-2 layers up to 512 channels, about 1.24 GFLOP per 2 s clip), puts
    GroupNorm before the ReLU with up to 32 groups (:func:`group_norm`), pools by the mean over
    time and adds a Linear layer to a 256-dimensional embedding. The layer table is shared with
    ``uvexport.reference.waveform_convnet_model`` for the latency benchmarks.

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
    """Our conv2d network for faces — ours, not the paper's Table 2; see ``feduv-celeba-conv2d``
    (:class:`~uvtrain.models.feduv_table2.FedUVCelebAConv2d`).

    The paper's CelebA network (Hosseini et al., ICML 2021, Table 2) has five 3×3 stages of
    64 → 1024 channels, each conv → ReLU → max-pool (2/2/2/2/4) → GN(2), then Flatten. Ours: four
    3×3 stages of 32-64-128-256 channels (conv → GroupNorm with up to 32 groups → ReLU), 2×2 max
    pooling after the first three (64 → 8 pixels), then the spatial mean — so that any image of at
    least 8×8 works and the ONNX graph has no size-dependent pooling — and a Linear layer to a
    256-dimensional embedding.

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
    """Our conv2d network for MNIST-UV's 28×28×4 (four EMNIST digits of one writer as channels) —
    ours, not the paper's Table 2; see ``feduv-mnistuv-conv2d``
    (:class:`~uvtrain.models.feduv_table2.FedUVMnistUvConv2d`).

    The paper's MNIST-UV network (Hosseini et al., ICML 2021, Table 2; EMNIST: Cohen et al., 2017)
    has five 3×3 stages of 64 → 1024 channels (the first with padding 3), each conv → ReLU →
    max-pool(2) → GN(2), then Flatten. Ours: three 3×3 stages of 32-64-128 channels (conv →
    GroupNorm → ReLU), 2×2 max pooling after the first two (28 → 7), the spatial mean and a Linear
    layer to a 128-dimensional embedding.

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
