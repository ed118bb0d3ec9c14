"""The softmax baseline (the FedUV paper's upper baseline) as a delta over FedAvg.

Every client trains the whole model *and* a class matrix ``W = [w_1 … w_C]`` with one row per
user, and FedAvg averages both: every user's class embedding is known to every party — exactly
what FedUV and FedHide exist to avoid, which is why it bounds what they can reach.

The head (``softmax_head``):

* ``"plain"`` (the default: the paper's) — a fully connected layer and the softmax
  cross-entropy, ``logits = W z + b``, with neither ``W`` nor the logits normalised or scaled:

      ℓ(x, u) = −log( exp(w_uᵀ z + b_u) / Σ_c exp(w_cᵀ z + b_c) ),   z = f(x)

  This is the FedUV paper's "regular federated learning method, where each user is assigned to
  one class and the model is trained with the softmax cross-entropy loss function" (Sec. 6.2,
  "Baselines"), whose network ends in ``FC(1024, c)`` with ``c`` the number of users (Table 2).
  One difference: the layer reads the model's unit embedding ``f(x) = g(x)/‖g(x)‖`` (what an
  embedding bundle exports and the SDK scores by cosine), not the unnormalised features; ``W``
  itself is free, so ``‖w_c‖`` plays the part of a learnt scale.
* ``"cosine"`` (ours, kept as an option; the only head before the paper's) — the normalised
  (cosine) softmax with a fixed scale ``s`` and no bias,

      ℓ(x, u) = −log( exp(s · w̃_uᵀ f(x)) / Σ_c exp(s · w̃_cᵀ f(x)) ),   w̃_c = w_c / ‖w_c‖.

A run folder written before the option existed reads ``cosine`` (:func:`uvtrain.run.read_config`),
so its checkpoint (no bias) still fits. ``scale`` is read by the cosine head only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional

from ..errors import ConfigError
from ..methods import SOFTMAX_HEADS, SoftmaxParameters
from ..models import EmbeddingModel
from .base import FedAvg, Tensors


def softmax_logits(
    outputs: Tensor,
    classes: Tensor,
    bias: Tensor | None = None,
    *,
    head: str = "plain",
    scale: float = 16.0,
) -> Tensor:
    """``[B, C]`` logits of the outputs ``z_b`` ``[B, d]`` against the class matrix ``W``
    ``[C, d]``: ``W z + b`` (``plain``; no bias: ``W z``) or ``s · normalize(W) z`` (``cosine``)."""
    if head == "plain":
        logits = outputs @ classes.T
        return logits if bias is None else logits + bias
    if head == "cosine":
        return scale * outputs @ functional.normalize(classes, dim=1).T
    raise ConfigError(f"softmax_head must be one of {', '.join(SOFTMAX_HEADS)}, got {head!r}")


def softmax_loss(
    outputs: Tensor,
    classes: Tensor,
    label: Tensor,
    scale: float,
    bias: Tensor | None = None,
    head: str = "cosine",
) -> Tensor:
    """``mean_b CE(logits_b, label)`` with :func:`softmax_logits` (``head`` ``cosine``:
    ``s · normalize(W) f_b``; ``plain``: ``W f_b + b``)."""
    logits = softmax_logits(outputs, classes, bias, head=head, scale=scale)
    return functional.cross_entropy(logits, label.expand(outputs.shape[0]))


class SoftmaxModel(EmbeddingModel):
    """The unit-embedding model plus the class matrix ``classes`` ``[C, d]`` (and, for the plain
    head, the bias ``bias`` ``[C]``), which FedAvg averages with it. ``forward`` is the embedding
    alone (what a bundle exports)."""

    def __init__(self, backbone: nn.Module, num_classes: int, bias: bool = False) -> None:
        super().__init__(backbone)
        dim = int(backbone.embedding_dim)
        self.classes = nn.Parameter(torch.randn(num_classes, dim) / dim**0.5)
        if bias:
            self.bias = nn.Parameter(torch.zeros(num_classes))


@dataclass(frozen=True)
class Softmax(SoftmaxParameters, FedAvg):
    """FedAvg of the model and a shared class matrix, with softmax cross-entropy (plain FC layer
    by default, the cosine head as an option)."""

    @property
    def loss_reads_model(self) -> tuple[str, ...]:  # type: ignore[override]
        """The class matrix, and the bias of the plain head."""
        return ("classes", "bias") if self.softmax_head == "plain" else ("classes",)

    def deployment_problem(self) -> str | None:
        return "softmax trains one class matrix with every user's row: not on Flower"

    def build_model(self, backbone: nn.Module, num_clients: int) -> nn.Module:
        return SoftmaxModel(backbone, num_clients, bias=self.softmax_head == "plain")

    def loss(
        self, outputs: Tensor, private: Tensors, constants: Tensors, shared: Tensors
    ) -> Tensor:
        return softmax_loss(
            outputs,
            shared["classes"],
            constants["index"],
            self.scale,
            bias=shared.get("bias"),
            head=self.softmax_head,
        )

    def prototypes(
        self, params: Tensors, private: Tensors, shared: Tensors
    ) -> tuple[Tensor, Tensor]:
        classes = functional.normalize(params["classes"], dim=1)
        return classes, classes  # the server averages W itself: it sees every row
