"""One federated round, for every setting: the simulator, the cross-silo trainer, the audit and
the Flower deployment all run :func:`run_round`; none of them copies it.

::

    sample the cohort            sample(round)                     -> clients [m]
          │
    what each client receives    local.train(clients, round, lr)   client_view / client_receive
    local update                   batched | vmap | loop | party     loss, SGD (or the method's
    what it sends back             | Flower devices                  optimiser-state hooks),
          │                                                          client_message
          ▼
    per-client postprocessing    for step in postprocess:          DP: the mechanism's user
          │                          updates = step(updates, θ)    half (uvtrain.privacy)
          ▼
    aggregation                  aggregator(updates, θ, plan)      WeightedMean (FedAvg),
          │                        -> θ_agg, metrics               UniformMean, SecAgg+ (audit),
          │                                                        Flower's SecAgg+ (devices),
          │                                                        Federated Validation (FedFace),
          ▼                                                        DP: PrivateSum over a sum
    server optimiser             server_optimizer(θ, θ_agg) -> θ'  sgd (η = 1: θ' = θ_agg,
          │                                                        FedAvg), momentum, adam, yogi
          ▼                                                        (uvtrain.server_optimizers)
    server update                algorithm.server_update(...)
                                   -> the server's shared state    always called: a method with
                                                                   only a server step is run too

Flower devices clip (and, in distributed DP, noise) their own updates before they send them
(:mod:`uvdeploy.dp`), so a deployed round has no postprocessing steps; a device's clipping is not
trusted, though: without SecAgg+ the server clips each reply again with the mechanism's own bound
before the mechanism's server half (:meth:`uvdeploy.server.FederatedServer._private_sum`);
under SecAgg+ it sees only the sum and relies on the devices' clipping.

A local-training path may aggregate as it trains when that is exact — the simulator's one-pass
step for E = 1 under the weighted mean, Flower's SecAgg+ workflow which unmasks only the sum —
and then hands over ``aggregate`` instead of per-client parameters; it does so only when the
round has no postprocessing and the aggregator is the one it fuses (:meth:`Aggregator.fusable`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from .algorithms.base import FedAvg, Tensors
from .errors import DivergedError, TrainingError
from .server_optimizers import ServerOptimizer


@dataclass(frozen=True)
class RoundPlan:
    """A round before it runs: its number (1-based), its clients and its learning rate — the
    read-only round context every postprocessing step and aggregator receives."""

    number: int
    clients: np.ndarray
    lr: float


@dataclass
class ClientUpdates:
    """What a round's clients hand to the server, stacked over the cohort (``[m, ...]``).

    Exactly one of ``params`` (each client's parameters after local training), ``deltas`` (its
    update ``θ_k − θ``), ``aggregate`` (the new global parameters, when the local path
    aggregated as it trained) and ``total`` (the sum of the updates, when a transport summed
    them as the clients trained: Flower's SecAgg+ under DP) is set. ``private`` stays on the
    clients; ``messages`` go to the method's server step; ``weights`` are the FedAvg weights
    ``n_k``; ``losses`` ``[m, E]``; ``clip_bits`` the DP clip-count bits (``[m]``, or their sum
    ``[1]`` beside ``total``: :mod:`uvtrain.privacy`).
    """

    clients: Tensor
    weights: Tensor
    losses: Tensor
    params: Tensors | None = None
    deltas: Tensors | None = None
    aggregate: Tensors | None = None
    total: Tensors | None = None
    clip_bits: Tensor | None = None
    private: Tensors = field(default_factory=dict)
    messages: Tensors = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)

    def as_deltas(self, base: Tensors) -> ClientUpdates:
        """The same updates as ``θ_k − θ`` (what postprocessing such as clipping acts on)."""
        if self.deltas is not None:
            return self
        if self.params is None:
            raise TrainingError("the local training aggregated already: no per-client updates")
        deltas = {name: value - base[name] for name, value in self.params.items()}
        return replace(self, params=None, deltas=deltas)


class LocalTraining(Protocol):
    """The client side of a round: receive, train, and say what to send back."""

    def train(self, plan: RoundPlan, fused: Aggregator | None) -> ClientUpdates:
        """Train the plan's clients from the current global state. When ``fused`` is given the
        path may aggregate with it as it trains (and set ``aggregate``)."""
        ...


UpdateStep = Callable[[ClientUpdates, Tensors, RoundPlan], ClientUpdates]
"""A per-client postprocessing step of the updates (e.g. clipping to an L2 norm): it receives
the updates (:meth:`ClientUpdates.as_deltas` gives ``θ_k − θ``), the global ``θ`` and the plan."""


class Aggregator:
    """How the server combines the cohort's updates into the new global parameters (``plan``:
    the read-only round context); returns them with the aggregation's metrics, which join the
    round's (nothing leaves through attributes)."""

    def __call__(
        self, updates: ClientUpdates, base: Tensors, plan: RoundPlan
    ) -> tuple[Tensors, dict[str, Any]]:
        raise NotImplementedError

    def fusable(self) -> bool:
        """Whether a local-training path may aggregate with this as it trains (it must give the
        same numbers as aggregating the per-client parameters would)."""
        return False

    def fused_weights(self, sizes: Tensor) -> Tensor:
        """The (unnormalised) weights of the cohort's models a fusing path must use, from their
        sample counts ``sizes``; asked only when :meth:`fusable`."""
        raise TrainingError(f"{type(self).__name__} cannot be fused into local training")


@dataclass
class WeightedMean(Aggregator):
    """FedAvg: ``θ' = Σ_k (n_k / n) θ_k`` (eq. 1 of McMahan et al.), through the method's own
    ``aggregate`` hook; on updates ``θ' = θ + Σ_k (n_k / n) (θ_k − θ)``. ``weights`` replaces
    the clients' sample counts (FedFace's weighting ``w``)."""

    algorithm: FedAvg
    weights: Tensor | None = None

    def __call__(
        self, updates: ClientUpdates, base: Tensors, plan: RoundPlan
    ) -> tuple[Tensors, dict[str, Any]]:
        if updates.aggregate is not None:
            return updates.aggregate, {}
        weights = updates.weights if self.weights is None else self.weights
        if updates.params is not None:
            return self.algorithm.aggregate(updates.params, weights), {}
        if updates.deltas is None:
            raise TrainingError("no client updates to aggregate")
        mean = self.algorithm.aggregate(updates.deltas, weights)
        return {name: value + mean[name].to(value.dtype) for name, value in base.items()}, {}

    def fusable(self) -> bool:
        return self.weights is None and type(self.algorithm).aggregate is FedAvg.aggregate

    def fused_weights(self, sizes: Tensor) -> Tensor:
        return sizes


@dataclass
class UniformMean(WeightedMean):
    """The plain ``1/M`` mean of the cohort's parameters, every client counting the same:
    ``θ' = 1/M Σ_{c∈S} θ_c`` (FedHide, Algorithm 1; ``--aggregation mean``)."""

    def __call__(
        self, updates: ClientUpdates, base: Tensors, plan: RoundPlan
    ) -> tuple[Tensors, dict[str, Any]]:
        count = len(updates.clients)
        ones = torch.ones(count, dtype=torch.float32, device=updates.clients.device)
        return WeightedMean(self.algorithm, ones)(updates, base, plan)

    def fusable(self) -> bool:
        return type(self.algorithm).aggregate is FedAvg.aggregate

    def fused_weights(self, sizes: Tensor) -> Tensor:
        return torch.ones_like(sizes)


@dataclass
class RoundResult:
    """A finished round: the server's new state and the round's metrics."""

    params: Tensors
    shared: Tensors
    updates: ClientUpdates
    metrics: dict[str, Any]


def run_round(
    algorithm: FedAvg,
    plan: RoundPlan,
    params: Tensors,
    shared: Tensors,
    local: LocalTraining,
    aggregator: Aggregator,
    postprocess: Sequence[UpdateStep] = (),
    server_optimizer: ServerOptimizer | None = None,
) -> RoundResult:
    """Run one round (see the module's docstring) from the global ``params`` and the server's
    ``shared`` state; returns the new ones and the round's metrics. Nothing here is written into
    a trainer but the ``server_optimizer``'s own state (its momentum; ``None``: plain FedAvg):
    the caller keeps the result."""
    started = time.perf_counter()
    fused = aggregator if not postprocess and aggregator.fusable() else None
    updates = local.train(plan, fused)
    loss = float(updates.losses.mean())
    if not math.isfinite(loss):
        raise TrainingError(f"the training loss became {loss} in round {plan.number}: stopped")
    for step in postprocess:
        updates = step(updates, params, plan)
    new_params, aggregation_metrics = aggregator(updates, params, plan)
    if server_optimizer is not None:
        new_params = server_optimizer(params, new_params)
    new_shared = algorithm.server_update(
        shared, updates.messages, updates.clients, plan.lr, before=params, after=new_params
    )
    seconds = time.perf_counter() - started
    metrics = round_metrics(plan, loss, seconds, updates.metrics, aggregation_metrics)
    return RoundResult(new_params, new_shared, updates, metrics)


def round_metrics(
    plan: RoundPlan, loss: float, seconds: float, *more: dict[str, Any]
) -> dict[str, Any]:
    """A round's metrics, the one dictionary every round writes: its number, loss, learning
    rate, clients and time, then ``more`` (the updates' and the aggregation's metrics)."""
    count = len(plan.clients)
    metrics = {
        "round": plan.number,
        "loss": loss,
        "lr": plan.lr,
        "clients": count,
        "seconds": seconds,
        "client_updates_per_s": count / seconds if seconds else 0.0,
    }
    for extra in more:
        metrics.update(extra)
    return metrics


def check_finite(round_number: int, what: str, *groups: Tensors) -> None:
    """:class:`DivergedError` when any value of ``groups`` (a round's losses, the model's
    parameters, the server's state) is NaN or infinite: the run diverged in ``round_number``."""
    for group in groups:
        for name, value in group.items():
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                shown = "" if name == "loss" else f" ({name})"
                raise DivergedError(
                    f"training diverged in round {round_number}: {what}{shown} is not finite",
                    round_number,
                )


def sample_cohort(seed: int, round_number: int, population: int, count: int) -> np.ndarray:
    """Step 1 of a round: ``count`` of ``population`` clients drawn without replacement from
    ``(seed, round)``, sorted — the simulator's clients and the Flower server's devices alike,
    so a resumed run draws the same cohorts."""
    rng = np.random.default_rng([seed, round_number, 0])
    return np.sort(rng.choice(population, size=min(count, population), replace=False))


def poisson_cohort(seed: int, round_number: int, population: int, rate: float) -> np.ndarray:
    """Step 1 of a round under differential privacy: each of ``population`` clients in the
    cohort independently with probability ``rate`` (Poisson sampling, what the accountant
    assumes: :mod:`uvtrain.privacy`), from ``(seed, round)``, sorted — so the cohort's size
    varies around ``rate · population`` and may be 0. The simulator's clients and the Flower
    server's devices alike, so a resumed run draws the same cohorts."""
    rng = np.random.default_rng([seed, round_number, 3])
    return np.flatnonzero(rng.random(population) < rate)


def period_cohort(
    seed: int, round_number: int, population: int, count: int, period: int
) -> np.ndarray:
    """Step 1 of a round under a participation rule (``--dp-period b``: each client in at most
    one round of each period of ``b`` rounds, :mod:`uvtrain.privacy`): the period's clients in
    a random order from ``(seed, period)``, and round ``p`` of the period takes the ``p``-th run
    of ``count`` of them, sorted — so no client is in two rounds of one period (``b·count`` must
    not exceed ``population``). The simulator's clients and the Flower server's devices alike."""
    index, position = divmod(round_number - 1, period)
    order = np.random.default_rng([seed, index, 4]).permutation(population)
    return np.sort(order[position * count : (position + 1) * count])


def gather(state: Tensors, clients: Tensor) -> Tensors:
    """The rows of per-client state (``[K, ...]``) of the round's clients."""
    return {name: value[clients] for name, value in state.items()}


def scatter(state: Tensors, clients: Tensor, rows: Tensors) -> None:
    """Write the round's clients' rows back into per-client state, in place."""
    for name, value in rows.items():
        state[name][clients] = value
