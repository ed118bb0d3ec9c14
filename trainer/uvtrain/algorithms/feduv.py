"""FedUV (Hosseini et al., "Federated Learning of User Verification Models Without Sharing
Embeddings", ICML 2021) as a delta over FedAvg.

Each user holds a secret codeword ``v_u ∈ {−1, +1}^c`` of a BCH code, made on the device from the
server-assigned user id bits and random bits (:mod:`uvsdk.codeword`). The model outputs
``σ(W g(x))`` with σ scaling to norm √c, and each client minimises only the positive loss

    ℓ_pos(x, v) = max(0, 1 − vᵀ σ(W g(x)) / c)                          (FedUV, eq. 8)

so no class embedding of another user is ever needed or shared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from uvsdk.codeword import bipolar, encode, user_id_bits

from ..codes import bch_code
from .base import FedAvg, Tensors


def positive_loss(outputs: Tensor, codeword: Tensor) -> Tensor:
    """``mean_b max(0, 1 − vᵀ o_b / c)`` for outputs ``o_b`` of norm √c (FedUV eq. 8)."""
    return torch.relu(1.0 - outputs @ codeword / codeword.shape[-1]).mean()


def negative_loss(outputs: Tensor, codewords: Tensor, own: Tensor) -> Tensor:
    """Ablation only (FedUV Fig. 4): ``mean_{u ≠ own} max(0, v_uᵀ o / c)`` over the other users'
    codewords — it needs every codeword, which FedUV exists to avoid sharing. Our form pushes the
    other users' scores below 0 (random codewords are near-orthogonal, not opposite)."""
    scores = outputs @ codewords.T / codewords.shape[-1]  # [B, U]
    users = torch.arange(codewords.shape[0], device=own.device)
    others = 1.0 - (users[None, :] == own[:, None]).to(scores.dtype)
    return (torch.relu(scores) * others).sum(-1).mean() / max(1, codewords.shape[0] - 1)


def client_codewords(num_clients: int, code_length: int, seed: int) -> np.ndarray:
    """Codeword bits for clients 0..K−1: user id = client index, random bits from a seeded
    generator (a simulation stands in for each device's :mod:`secrets`), ``c = (b ‖ r)·G``."""
    code = bch_code(code_length)
    rng = np.random.default_rng([seed, 0xC0DE])
    words = []
    for client in range(num_clients):
        random_bits = rng.integers(0, 2, code.k - code.id_bits, dtype=np.uint8)
        message = np.concatenate([user_id_bits(client, code.id_bits), random_bits])
        words.append(encode(message, code.generator))
    return np.stack(words)


@dataclass(frozen=True)
class FedUV(FedAvg):
    """FedUV: secret BCH codewords, positive-only loss, FedAvg of the whole model (W included)."""

    name: ClassVar[str] = "feduv"
    output_kind: ClassVar[str] = "codeword"
    code_length: int = 127
    negative_weight: float = 0.0

    def build_model(self, backbone: nn.Module, num_clients: int) -> nn.Module:
        from ..models import CodewordModel

        return CodewordModel(backbone, self.code_length)

    def init_constants(self, num_clients: int, dim: int, seed: int) -> Tensors:
        bits = client_codewords(num_clients, self.code_length, seed)
        return {
            "index": torch.arange(num_clients),
            "codeword": torch.from_numpy(np.stack([bipolar(b) for b in bits])),
        }

    def init_shared(
        self, num_clients: int, dim: int, generator: torch.Generator, constants: Tensors
    ) -> Tensors:
        if self.negative_weight > 0:  # the ablation's unrealistic setting: all codewords shared
            return {"all_codewords": constants["codeword"].clone()}
        return {}

    def loss(
        self, outputs: Tensor, private: Tensors, constants: Tensors, shared: Tensors
    ) -> Tensor:
        loss = positive_loss(outputs, constants["codeword"])
        if self.negative_weight > 0:
            own = constants["index"].expand(outputs.shape[0])
            loss = loss + self.negative_weight * negative_loss(
                outputs, shared["all_codewords"], own
            )
        return loss
