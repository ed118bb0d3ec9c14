"""The heads that turn a backbone into what a bundle exports: :class:`CodewordModel`
(FedUV, output kind ``codeword``) and :class:`EmbeddingModel` (kind ``embedding``)."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from .base import NORM_EPSILON, sigma_scale


class CodewordModel(nn.Module):
    """FedUV's model: ``σ(W g(x))``, rows of norm √code_length (FedUV paper, Fig. 2).

    ``W`` (``class_embedding``, ``[code_length, embedding_dim]``, no bias) is shared and trained with
    FedAvg like the backbone ``g``; each user's secret is the ±1 codeword ``v`` that the output is
    correlated with, ``v · σ(W g(x)) / c``. This is what a FedUV bundle exports (output kind
    ``codeword``).

    Parameters
    ----------
    backbone : Backbone
        ``g``, with attribute ``embedding_dim``.
    code_length : int
        ``c``, the length of the code (the output dimension).
    """

    output_kind: ClassVar[str] = "codeword"

    def __init__(self, backbone: nn.Module, code_length: int) -> None:
        super().__init__()
        if code_length < 1:
            raise ValueError(f"code_length must be positive, got {code_length}")
        self.backbone = backbone
        self.code_length = int(code_length)
        self.class_embedding = nn.Linear(backbone.embedding_dim, self.code_length, bias=False)

    @property
    def output_dim(self) -> int:
        """Dimension of the output."""
        return self.code_length

    def forward(self, x: Tensor) -> Tensor:
        """Raw input → ``[batch, code_length]``, rows of norm √code_length."""
        return sigma_scale(self.class_embedding(self.backbone(x)), self.code_length)


class EmbeddingModel(nn.Module):
    """``g(x) / ‖g(x)‖``: what a FedHide or prototype-method bundle exports (kind ``embedding``).

    FedHide (Park & Yun, 2024) scores cosines ``w_cᵀ f(x)`` of unit prototypes and unit embeddings.

    Parameters
    ----------
    backbone : Backbone
        ``g``, with attribute ``embedding_dim``.
    """

    output_kind: ClassVar[str] = "embedding"

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone

    @property
    def output_dim(self) -> int:
        """Dimension of the output."""
        return int(self.backbone.embedding_dim)

    def forward(self, x: Tensor) -> Tensor:
        """Raw input → ``[batch, embedding_dim]``, unit rows."""
        embedding = self.backbone(x)
        norm = torch.linalg.vector_norm(embedding, dim=-1, keepdim=True)
        return embedding / norm.clamp_min(NORM_EPSILON)
