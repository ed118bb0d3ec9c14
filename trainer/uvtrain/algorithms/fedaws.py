"""FedAwS (Yu et al., "Federated Learning with Only Positive Labels", ICML 2020) as a delta over
FedAvg.

Each client u holds only its own class embedding ``w_u`` (received from the server as its round
begins) and trains it with the model on the positive loss alone,

    ℓ_pos(x, u) = max(0, ν_p − w̃_uᵀ f(x))²,   w̃_u = w_u / ‖w_u‖,

then sends both back. After averaging the model, the server writes the received rows into its
class matrix ``W`` and takes its own gradient step on the spreadout regulariser, with its own
learning-rate multiplier λ,

    reg_sp(W) = Σ_c Σ_{c'≠c} max(0, ν − ‖w̃_c − w̃_c'‖)²,     W ← normalize(W − λ η_r ∇ reg_sp(W)),

which keeps the classes apart although no client ever sees a negative. The server holds every
user's class embedding: its prototype leakage is 1 by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import functional

from ..methods import FedAwSParameters
from .base import FedAvg, Tensors, random_unit_rows


def positive_hinge_loss(outputs: Tensor, embedding: Tensor, margin: float) -> Tensor:
    """``mean_b max(0, ν_p − w̃ᵀ f_b)²`` for unit outputs ``f_b`` and a class embedding ``w``."""
    cosine = outputs @ functional.normalize(embedding, dim=0)
    return torch.relu(margin - cosine).pow(2).mean()


def spreadout(embeddings: Tensor, margin: float) -> Tensor:
    """``Σ_c Σ_{c'≠c} max(0, ν − ‖w̃_c − w̃_c'‖)²`` over the unit rows of ``embeddings``."""
    unit = functional.normalize(embeddings, dim=1)
    squared = (2.0 - 2.0 * unit @ unit.T).clamp_min(0.0)
    off_diagonal = ~torch.eye(len(unit), dtype=torch.bool, device=unit.device)
    # the diagonal (distance 0) is masked before the square root, whose gradient is infinite at 0
    distance = torch.sqrt(torch.where(off_diagonal, squared, torch.ones_like(squared)))
    return (torch.relu(margin - distance).pow(2) * off_diagonal).sum()


def spreadout_step(embeddings: Tensor, margin: float, step: float) -> Tensor:
    """One gradient step of :func:`spreadout` of size ``step``, rows renormalised."""
    with torch.enable_grad():
        leaf = embeddings.detach().clone().requires_grad_(True)
        (gradient,) = torch.autograd.grad(spreadout(leaf, margin), leaf)
    return functional.normalize(embeddings - step * gradient, dim=1)


@dataclass(frozen=True)
class FedAwS(FedAwSParameters, FedAvg):
    """FedAwS: positive-only client loss, class embeddings held by the server, spreadout there."""

    def init_private(self, num_clients: int, dim: int, generator: torch.Generator) -> Tensors:
        # replaced by the server's row when the client first takes part (client_receive)
        return {"prototype": random_unit_rows(num_clients, dim, generator)}

    def init_shared(
        self, num_clients: int, dim: int, generator: torch.Generator, constants: Tensors
    ) -> Tensors:
        return {"embeddings": random_unit_rows(num_clients, dim, generator)}

    def client_view(self, shared: Tensors, index: int) -> tuple[Tensors, int]:
        # a device is sent its own class embedding, never the other users' rows
        return {"embeddings": shared["embeddings"][index : index + 1]}, 0

    def client_receive(self, private: Tensors, constants: Tensors, shared: Tensors) -> Tensors:
        return {**private, "prototype": shared["embeddings"][constants["index"]]}

    def loss(
        self, outputs: Tensor, private: Tensors, constants: Tensors, shared: Tensors
    ) -> Tensor:
        return positive_hinge_loss(outputs, private["prototype"], self.positive_margin)

    def client_message(self, private: Tensors, constants: Tensors, shared: Tensors) -> Tensors:
        return {"embedding": functional.normalize(private["prototype"], dim=0)}

    def server_update(
        self,
        shared: Tensors,
        messages: Tensors,
        clients: Tensor,
        lr: float,
        *,
        before: Tensors | None = None,
        after: Tensors | None = None,
    ) -> Tensors:
        embeddings = shared["embeddings"].clone()
        embeddings[clients] = messages["embedding"]
        step = self.spread_lr * lr
        return {**shared, "embeddings": spreadout_step(embeddings, self.spread_margin, step)}

    def prototypes(
        self, params: Tensors, private: Tensors, shared: Tensors
    ) -> tuple[Tensor, Tensor]:
        # A user's class embedding *is* the server's row (a client holds a copy for its round):
        # what the server sees is what verifies, so P_leak = 1.
        return shared["embeddings"], shared["embeddings"]
