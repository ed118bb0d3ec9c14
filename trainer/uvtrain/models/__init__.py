"""Neural networks of the trainer: backbones with their preprocessing inside, and the two heads.

Every model takes the raw input of the bundle contract (docs/spec.md §3.8, "Model I/O
contract") and does its own feature extraction in ``forward``, so that the exported ONNX graph holds it:

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
  Learning of User Verification Models Without Sharing Embeddings", ICML 2021, Table 2); a
  pretrained network trained with batch norm (CAM++) keeps its statistics frozen, as parameters that
  never train (:class:`FrozenBatchNorm`);
* fixed constants (DFT kernels, mel filterbank, pixel mean and standard deviation) are buffers
  registered with ``persistent=False``, so ``state_dict()`` holds exactly the parameters;
* no dropout or other randomness in ``forward``;
* plain torch operators that ``torch.onnx.export(..., dynamo=True)`` lowers at opset ≥ 17 (global
  pooling is a mean, never an adaptive pooling to a size other than 1).

The package, one job a module:

* :mod:`.base` — GroupNorm sizing, σ, the Conv → GroupNorm → ReLU unit, the :class:`Backbone` base;
* :mod:`.frontends` — :class:`LogMelFrontend`, :class:`KaldiFbank` and :class:`ImageFrontend`;
* :mod:`.feduv_table2` — the FedUV paper's three networks exactly as its Table 2 gives them;
* one module per backbone family: :mod:`.convnets` (our smaller networks for the FedUV paper's
  datasets), :mod:`.resnet`
  (log-mel ResNet, Fast ResNet-34, ResNet-18), :mod:`.tdnn` (x-vector TDNN), :mod:`.ge2e`
  (the pretrained GE2E encoder), :mod:`.campplus` (the pretrained CAM++ encoder), :mod:`.iresnet`
  (ArcFace's IResNet);
* :mod:`.heads` — :class:`CodewordModel` and :class:`EmbeddingModel`;
* :mod:`.registry` — :data:`BACKBONES`, :func:`build_backbone`;
* :mod:`.checkpoints` — :func:`load_backbone_checkpoint`; :mod:`.flops` — parameter and FLOP
  counts.

Everything is importable from here, as it was when this package was one module.
"""

from ..features import VOXCELEB_LAYERS, dft_kernels, mel_filterbank, slaney_mel_filterbank
from .base import (
    LOG_EPSILON,
    NORM_EPSILON,
    Backbone,
    BackboneError,
    WeightsError,
    group_norm,
    sigma_scale,
)
from .campplus import CAMPPlusEncoder, FrozenBatchNorm
from .checkpoints import load_backbone_checkpoint
from .convnets import CelebAConv2d, MnistUvConv2d, VoxCelebConv1d
from .feduv_table2 import FedUVCelebAConv2d, FedUVMnistUvConv2d, FedUVVoxCelebConv1d
from .flops import count_parameters, model_flops
from .frontends import ImageFrontend, KaldiFbank, LogMelFrontend
from .ge2e import GE2ESpeakerEncoder
from .heads import CodewordModel, EmbeddingModel
from .iresnet import IResNet
from .registry import BACKBONES, build_backbone
from .resnet import LogMelResNet, ResNet18Small
from .tdnn import LogMelTDNN

__all__ = [
    "BACKBONES",
    "LOG_EPSILON",
    "NORM_EPSILON",
    "VOXCELEB_LAYERS",
    "Backbone",
    "BackboneError",
    "CAMPPlusEncoder",
    "CelebAConv2d",
    "CodewordModel",
    "EmbeddingModel",
    "FedUVCelebAConv2d",
    "FedUVMnistUvConv2d",
    "FedUVVoxCelebConv1d",
    "FrozenBatchNorm",
    "GE2ESpeakerEncoder",
    "IResNet",
    "ImageFrontend",
    "KaldiFbank",
    "LogMelFrontend",
    "LogMelResNet",
    "LogMelTDNN",
    "MnistUvConv2d",
    "ResNet18Small",
    "VoxCelebConv1d",
    "WeightsError",
    "build_backbone",
    "count_parameters",
    "dft_kernels",
    "group_norm",
    "load_backbone_checkpoint",
    "mel_filterbank",
    "model_flops",
    "sigma_scale",
    "slaney_mel_filterbank",
]
