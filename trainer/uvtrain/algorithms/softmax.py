"""The softmax baseline (the FedUV paper's upper baseline) as a delta over FedAvg.

Every client trains the whole model *and* a class matrix ``W = [w_1 … w_C]`` with one row per
user, and FedAvg averages both: every user's class embedding is known to every party — exactly
what FedUV and FedHide exist to avoid, which is why it bounds what they can reach. The loss is the
normalised (cosine) softmax cross-entropy

    ℓ(x, u) = −log( exp(s · w̃_uᵀ f(x)) / Σ_c exp(s · w̃_cᵀ f(x)) ),   w̃_c = w_c / ‖w_c‖

with ``f(x)`` the unit embedding and scale ``s``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional

from ..errors import ConfigError
from ..models import EmbeddingModel
from .base import FedAvg, Tensors


def softmax_loss(outputs: Tensor, classes: Tensor, label: Tensor, scale: float) -> Tensor:
    """``mean_b CE(s · normalize(W) f_b, label)`` for unit outputs ``f_b`` ``[B, d]`` and the
    class matrix ``W`` ``[C, d]``."""
    logits = scale * outputs @ functional.normalize(classes, dim=1).T
    return functional.cross_entropy(logits, label.expand(outputs.shape[0]))


class SoftmaxModel(EmbeddingModel):
    """The unit-embedding model plus the class matrix ``classes`` ``[C, d]``, which FedAvg
    averages with it. ``forward`` is the embedding alone (what a bundle exports)."""

    def __init__(self, backbone: nn.Module, num_classes: int) -> None:
        super().__init__(backbone)
        dim = int(backbone.embedding_dim)
        self.classes = nn.Parameter(torch.randn(num_classes, dim) / dim**0.5)


@dataclass(frozen=True)
class Softmax(FedAvg):
    """FedAvg of the model and a shared class matrix, with cosine-softmax cross-entropy."""

    name: ClassVar[str] = "softmax"
    loss_reads_model: ClassVar[tuple[str, ...]] = ("classes",)
    audits: ClassVar[frozenset[str]] = frozenset({"prototype-leakage", "inversion"})
    scale: float = field(default=16.0, metadata={"help": "Softmax logit scale s."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.scale <= 0:
            raise ConfigError("scale must be positive")

    def deployment_problem(self) -> str | None:
        return "softmax trains one class matrix with every user's row: not on Flower"

    def build_model(self, backbone: nn.Module, num_clients: int) -> nn.Module:
        return SoftmaxModel(backbone, num_clients)

    def loss(
        self, outputs: Tensor, private: Tensors, constants: Tensors, shared: Tensors
    ) -> Tensor:
        return softmax_loss(outputs, shared["classes"], constants["index"], self.scale)

    def prototypes(
        self, params: Tensors, private: Tensors, shared: Tensors
    ) -> tuple[Tensor, Tensor]:
        classes = functional.normalize(params["classes"], dim=1)
        return classes, classes  # the server averages W itself: it sees every row
