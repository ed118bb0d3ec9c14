"""IResNet, the face-recognition ResNet of ArcFace (insightface), with GroupNorm: IResNet-18,
IResNet-50 and a small CPU variant."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from torch import Tensor, nn

from .base import Backbone, _image_shape, group_norm
from .frontends import ImageFrontend


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
