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
``client_view``             the part of the server's state a device is sent (all of    server
                            it; FedAwS: only the device's own row) — Flower only
``client_receive``          what a client takes from the server as its round begins    client
                            (FedAwS: its class embedding, after the server's step)
``loss``                    one client's loss on one batch                             client
``client_message``          what a client sends besides its model (FedHide's proxy)    client
``aggregate``               FedAvg: the sample-weighted mean of the clients' models    server
``server_update``           the server's own step after aggregation (FedAwS's          server
                            spreadout step, FedHide's bank update)
``prototypes``              the learnt class vectors and what the server sees of them  (eval)
                            — the two sides of the prototype leakage ``P_leak``
==========================  =========================================================  ========

Two class attributes widen what the pure hooks can see: ``loss_reads_model`` names model
parameters the loss reads besides the outputs (softmax's class matrix, averaged with the model),
passed in ``shared`` under their own names; ``message_noise`` asks for fresh standard-normal noise
of the embedding's shape per client and round, in ``constants["noise"]`` of ``client_message``
(FedGN and FedCS draw their proxies with it; the simulator derives it from ``(seed, round)`` so a
resumed run stays exact, a device draws its own).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ..config import check_types

Tensors = dict[str, Tensor]


def overrides(algorithm: FedAvg, hook: str) -> bool:
    """Whether ``algorithm`` defines its own ``hook`` (the engine skips a vectorised call of a
    client hook that only returns its input); the one place this is asked."""
    return getattr(type(algorithm), hook) is not getattr(FedAvg, hook)


def random_unit_rows(count: int, dim: int, generator: torch.Generator) -> Tensor:
    """``[count, dim]`` random directions (unit rows): initial prototypes, banks, class rows."""
    return torch.nn.functional.normalize(torch.randn(count, dim, generator=generator), dim=1)


@dataclass(frozen=True)
class FedAvg:
    """Federated averaging (McMahan et al. 2017) — the core every method here extends.

    On its own it has no verification loss; methods subclass it and override :meth:`loss`.
    """

    name: ClassVar[str] = "fedavg"
    output_kind: ClassVar[str] = "embedding"
    loss_reads_model: ClassVar[tuple[str, ...]] = ()
    message_noise: ClassVar[bool] = False

    # -- capabilities: what generic code asks of a method instead of its name ----------------
    #: Which trainer runs it: ``"cross-device"`` (a client is one person, :mod:`uvtrain.engine`)
    #: or ``"cross-silo"`` (a client is an organisation with many people, FedFace).
    setting: ClassVar[str] = "cross-device"
    #: A single client's plain update reveals a secret of that client (FedUV: the sign of
    #: ``ΔW ḡ`` is the codeword), so it may only travel inside secure aggregation: the Flower
    #: deployment turns SecAgg+ on for it and its devices refuse plain rounds.
    update_reveals_secret: ClassVar[bool] = False
    #: What a device must hold in its SDK template store before it trains (FedUV:
    #: ``"codeword"``, made on the device from the code the server sends at registration).
    device_secrets: ClassVar[tuple[str, ...]] = ()
    #: The attacks ``uvtrain audit`` runs on it: ``"codeword-bits"`` (recover a secret codeword
    #: from the aggregates), ``"prototype-leakage"`` (P_leak of the class vectors the server
    #: sees), ``"inversion"`` (reconstruct a client's images from its update).
    audits: ClassVar[frozenset[str]] = frozenset({"inversion"})
    #: Its users verify against their learnt class rows (the rows of :meth:`prototypes`), as the
    #: FedUV paper scores its baselines softmax and FedAwS: the report adds that protocol
    #: (``class_row``) beside the SDK's enrollment one.
    verifies_by_class_row: ClassVar[bool] = False
    #: Schedule keys the method trains with when the run gives none (its server optimiser:
    #: :data:`uvtrain.config.SERVER_KEYS`; empty: plain FedAvg, sgd with η = 1, and the
    #: :class:`~uvtrain.config.Schedule`'s defaults).
    schedule_defaults: ClassVar[dict[str, Any]] = {}

    def __post_init__(self) -> None:
        """Each method checks its own parameters (types here, ranges in its override), so a bad
        value is refused wherever the object is made: ``FedHide(alpha=2)`` raises ConfigError."""
        check_types(self)

    def deployment_problem(self) -> str | None:
        """Why this method (with these parameters) cannot run on Flower devices, or ``None``
        when it can: each hook must run on the one party that owns its data."""
        return None

    def server_view_of_private(self, private: Tensors, shared: Tensors, index: int) -> Tensors:
        """What the server holds in place of client ``index``'s private state (the audit's
        inversion forms the client's loss with it): by default the state itself, which the
        server either sent (FedAwS's class row) or which is empty."""
        return private

    def backbone_options(self, backbone: type) -> dict[str, Any]:
        """Constructor options the method asks of its backbone class (a registered
        :class:`~uvtrain.models.Backbone`): none by default — the backbone's own defaults. A run
        that starts from pretrained weights builds the weights' architecture and ignores them."""
        return {}

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

    def client_view(self, shared: Tensors, index: int) -> tuple[Tensors, int]:
        """What the server sends device ``index`` of its shared state, and the device's index in
        that view. The simulator's clients read all of ``shared`` in place; on Flower only this
        view travels (the default: all of it — FedHide's proxy bank is meant to be public)."""
        return shared, index

    def client_receive(self, private: Tensors, constants: Tensors, shared: Tensors) -> Tensors:
        """One client's private state as its round begins, from what the server holds."""
        return private

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
        """The server's step after aggregation (none for FedAvg), run every round: the clients'
        ``messages`` (``[m, ...]``, empty for a method that sends none), their rows ``clients``,
        the round's ``lr``, and the global parameters ``before`` and ``after`` the aggregation
        (FedFace's global momentum is their difference)."""
        return shared

    def prototypes(
        self, params: Tensors, private: Tensors, shared: Tensors
    ) -> tuple[Tensor, Tensor] | None:
        """``(learnt, seen)``: the unit class vectors the method learns (``[C, d]``) and what the
        server holds of them (the same rows when they are shared; FedHide's proxies), or ``None``
        for methods without class vectors (FedUV's codewords are never sent)."""
        return None

    def parameters(self) -> dict[str, Any]:
        """The method's hyper-parameters, for the run's config and report."""
        return {field.name: getattr(self, field.name) for field in fields(self)}
