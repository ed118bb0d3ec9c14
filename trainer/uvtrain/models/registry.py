"""The backbones by name (:data:`BACKBONES`) and building one for a dataset's input spec (the
default backbone of an input is its own: :attr:`uvsdk.inputs.AudioInput.default_backbone`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Backbone, BackboneError
from .campplus import CAMPPlusEncoder
from .convnets import CelebAConv2d, MnistUvConv2d, VoxCelebConv1d
from .feduv_table2 import FedUVCelebAConv2d, FedUVMnistUvConv2d, FedUVVoxCelebConv1d
from .ge2e import GE2ESpeakerEncoder
from .iresnet import IResNet, _IResNet50, _IResNetSmall
from .resnet import LogMelResNet, ResNet18Small, _FastResNet34
from .tdnn import LogMelTDNN

#: Backbones by name; ``BACKBONES[name].from_spec(spec, **options)`` builds one (see
#: :func:`build_backbone`), ``BACKBONES[name].modality`` says which inputs it takes.
BACKBONES: dict[str, type[Backbone]] = {
    "voxceleb-conv1d": VoxCelebConv1d,
    "celeba-conv2d": CelebAConv2d,
    "mnistuv-conv2d": MnistUvConv2d,
    "feduv-voxceleb-conv1d": FedUVVoxCelebConv1d,
    "feduv-celeba-conv2d": FedUVCelebAConv2d,
    "feduv-mnistuv-conv2d": FedUVMnistUvConv2d,
    "logmel-resnet": LogMelResNet,
    "logmel-tdnn": LogMelTDNN,
    "fast-resnet34": _FastResNet34,
    "ge2e-lstm": GE2ESpeakerEncoder,
    "campplus": CAMPPlusEncoder,
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
    BackboneError
        Unknown name, or a spec of the other modality (a :class:`ValueError` too).
    """
    if name not in BACKBONES:
        raise BackboneError(f"unknown backbone {name!r}; known: {', '.join(sorted(BACKBONES))}")
    return BACKBONES[name].from_spec(spec, **options)
