"""One FedAvg core; every method is a small set of overridden hooks.

The hooks are pure functions of tensors so the same algorithm object runs in the vectorised
simulator (``torch.func.vmap`` over the round's clients), in the plain per-client loop it is checked
against, and — later — on Flower, where each hook runs on the party that owns its data:

==========================  =========================================================  ========
hook                        what it computes                                           where
==========================  =========================================================  ========
``build_model``             the network clients train (backbone + this method's head)  both
``init_private``            per-client trainable state that never leaves the client    client
``init_constants``          per-client fixed state (e.g. FedUV's secret codeword)      client
``init_shared``             state the server holds and clients read (FedHide's bank)   server
``loss``                    one client's loss on one batch                             client
``client_message``          what a client sends besides its model (FedHide's proxy)    client
``aggregate``               FedAvg: the sample-weighted mean of the clients' models    server
``server_update``           the server's own step after aggregation                   server
==========================  =========================================================  ========
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

Tensors = dict[str, Tensor]


@dataclass(frozen=True)
class FedAvg:
    """Federated averaging (McMahan et al. 2017) — the core every method here extends.

    On its own it has no verification loss; methods subclass it and override :meth:`loss`.
    """

    name: ClassVar[str] = "fedavg"
    output_kind: ClassVar[str] = "embedding"

    def build_model(self, backbone: nn.Module, num_clients: int) -> nn.Module:
        """The model every client trains and the server averages."""
        from ..models import EmbeddingModel

        return EmbeddingModel(backbone)

    def init_private(self, num_clients: int, dim: int, generator: torch.Generator) -> Tensors:
        """Per-client trainable state, stacked over all clients (``[K, ...]``)."""
        return {}

    def init_constants(self, num_clients: int, dim: int, seed: int) -> Tensors:
        """Per-client fixed state, stacked over all clients (``[K, ...]``)."""
        return {"index": torch.arange(num_clients)}

    def init_shared(
        self, num_clients: int, dim: int, generator: torch.Generator, constants: Tensors
    ) -> Tensors:
        """State the server holds and every client reads."""
        return {}

    def loss(
        self, outputs: Tensor, private: Tensors, constants: Tensors, shared: Tensors
    ) -> Tensor:
        """One client's loss on one batch of model outputs."""
        raise NotImplementedError(f"{type(self).__name__} defines no loss")

    def client_message(self, private: Tensors, constants: Tensors, shared: Tensors) -> Tensors:
        """What one client sends to the server besides its model parameters."""
        return {}

    def aggregate(self, stacked: Tensors, weights: Tensor) -> Tensors:
        """FedAvg: ``θ = Σ_k (n_k / n) θ_k`` over the round's clients (eq. 1 of McMahan et al.)."""
        weights = weights / weights.sum()
        return {
            name: torch.tensordot(weights.to(value.dtype), value, dims=([0], [0]))
            for name, value in stacked.items()
        }

    def server_update(self, shared: Tensors, messages: Tensors, clients: Tensor) -> Tensors:
        """The server's step after aggregation (none for FedAvg)."""
        return shared

    def parameters(self) -> dict[str, Any]:
        """The method's hyper-parameters, for the run's config and report."""
        return {key: getattr(self, key) for key in self.__dataclass_fields__}
