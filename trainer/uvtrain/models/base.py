"""The building blocks every backbone shares: GroupNorm sizing, FedUV's σ, the
Conv → GroupNorm → ReLU unit, the :class:`Backbone` base class and the input-spec checks.

The constraints all of them keep (GroupNorm, non-persistent constant buffers, no randomness in
``forward``, plain exportable operators) are listed in :mod:`uvtrain.models`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from ..errors import ConfigError, PretrainedError


class BackboneError(ConfigError, ValueError):
    """A backbone that cannot be built as asked: an unknown name, or a dataset of the other
    modality. A :class:`ValueError` too, as these errors always were."""


class WeightsError(PretrainedError, ValueError):
    """Pretrained weights that do not fit the backbone (:func:`load_backbone_checkpoint`). A
    :class:`ValueError` too, as these errors always were."""


#: Added to the mel band powers before the logarithm.
LOG_EPSILON = 1e-6
#: Smallest norm divided by in :func:`sigma_scale` (a zero row stays zero instead of becoming NaN).
NORM_EPSILON = 1e-12


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


class Backbone(nn.Module):
    """Base of the backbones: ``forward(raw input) -> [batch, embedding_dim]``.

    ``modality`` is ``"audio"`` or ``"image"``; :meth:`from_spec` builds the backbone for a dataset's
    input spec (``{"sample_rate", ...}`` or ``{"height", "width", "channels"}``). Every backbone
    takes ``embedding_dim``; those with a log-mel frontend also ``window`` (``takes_window``).
    """

    modality: ClassVar[str]
    #: Whether its constructor takes ``window`` (a log-mel frontend's analysis window).
    takes_window: ClassVar[bool] = False
    embedding_dim: int

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **options: Any) -> Backbone:
        """Build for a dataset's input spec; ``options`` are constructor arguments."""
        raise NotImplementedError


class _ConvUnit(nn.Sequential):
    """Convolution → GroupNorm → ReLU: the unit of our networks (:mod:`.convnets` and others).
    The FedUV paper's Table 2 orders its stages conv → ReLU → max-pool → GN(2) instead
    (:mod:`.feduv_table2`)."""

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
        raise BackboneError(f"an audio backbone needs an audio spec with 'sample_rate', got {spec}")
    return int(spec["sample_rate"])


def _image_shape(spec: Mapping[str, Any]) -> tuple[int, int, int]:
    """(height, width, channels) of an image spec, with a clear error for an audio spec."""
    missing = {"height", "width", "channels"} - set(spec)
    if missing:
        raise BackboneError(f"an image backbone needs an image spec, missing {sorted(missing)}")
    return int(spec["height"]), int(spec["width"]), int(spec["channels"])
