"""The mechanism as the round runs it: the :class:`Mechanism` protocol (a user half, a server
half, its state and its plan, as pfl-research's postprocessors), placement as composition
(:class:`Central` and :class:`Distributed` wrap the underlying mechanism, as pfl-research's
``CentrallyAppliedPrivacyMechanism`` wraps its ``underlying_mechanism``), and the round's steps
over any mechanism (:class:`PrivateUsers`, :class:`PrivateSum`).

The underlying mechanisms (:data:`MECHANISMS`, by ``--dp-noise``) are
:class:`~uvtrain.privacy.gaussian.UserLevelDP` (DP-FedAvg: fresh Gaussian noise every round) and
:class:`~uvtrain.privacy.tree.DPFTRL` (its tree-aggregated noise). A new one is one file: a
subclass of :class:`~uvtrain.privacy.gaussian.UserLevelDP` that overrides what differs (its
:meth:`~uvtrain.privacy.gaussian.UserLevelDP.sum_noise`, its state), and its line in
:data:`MECHANISMS`; both placements then run it, and the simulator, the audit and the Flower
server build it from the plan (:func:`mechanism_from_plan`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor

from ..algorithms.base import Tensors
from ..errors import ConfigError, TrainingError
from ..rounds import Aggregator, ClientUpdates, RoundPlan
from .gaussian import UserLevelDP
from .noise import NoiseSource, secret_noise
from .plan import PrivacyPlan
from .tree import DPFTRL

#: The underlying mechanisms by the noise they add to a round's sum (``--dp-noise``, the plan's
#: ``noise``; the config's choices are :data:`uvtrain.config.DP_NOISES`, a test keeps them equal).
MECHANISMS: dict[str, type[UserLevelDP]] = {"independent": UserLevelDP, "tree": DPFTRL}


class Mechanism(Protocol):
    """A user-level DP mechanism in two halves, each returning its metrics: :meth:`user_half`
    on each user's update (the simulator's cohort stacked, a Flower device alone, the audit's
    clients), :meth:`server_half` on the sum the transport delivers (a plain sum, the audit's
    SecAgg+, Flower's SecAgg+ or plain replies); its state (adaptive clipping's ``C_r``, a
    tree's key) in :meth:`state_dict`; its accounting in :attr:`plan`."""

    @property
    def plan(self) -> PrivacyPlan | None: ...

    def user_half(
        self, deltas: Tensors, clients: Sequence[int] | Tensor, round_number: int
    ) -> tuple[Tensors, Tensor | None, dict[str, Any]]:
        """What each user sends (``[m, ...]``, one row per user of ``clients``), its clip-count
        bits (``[m]``, or ``None`` with a fixed clip norm) and the user half's metrics."""
        ...

    def server_half(
        self, base: Tensors, total: Tensors, bits: float | None, count: int, round_number: int
    ) -> tuple[Tensors, dict[str, Any]]:
        """The release from the sum ``total`` of ``count`` users' updates (and of their bits)."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass
class Placement:
    """Where an underlying mechanism's noise is added: a :class:`Mechanism` around
    ``underlying`` (its clip norm, noise and state are the underlying's)."""

    underlying: UserLevelDP

    #: The placement's name (``--dp``; ``report.json``'s ``privacy.mechanism``).
    name: ClassVar[str] = ""

    @property
    def plan(self) -> PrivacyPlan | None:
        return self.underlying.plan

    def state_dict(self) -> dict[str, Any]:
        return self.underlying.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.underlying.load_state_dict(state)


@dataclass
class Central(Placement):
    """Central noise (pfl-research's ``CentrallyAppliedPrivacyMechanism``): each user's update
    is clipped (and its bit computed) on the user; the server adds the whole noise to the sum,
    which protects the released model and trusts the server."""

    name: ClassVar[str] = "central"

    def user_half(
        self, deltas: Tensors, clients: Sequence[int] | Tensor, round_number: int
    ) -> tuple[Tensors, Tensor | None, dict[str, Any]]:
        return self.underlying.constrain(deltas)

    def server_half(
        self, base: Tensors, total: Tensors, bits: float | None, count: int, round_number: int
    ) -> tuple[Tensors, dict[str, Any]]:
        noise = self.underlying.sum_noise(base, round_number)
        return self.underlying.release(base, total, noise, bits, True, round_number)


@dataclass
class Distributed(Placement):
    """Distributed noise (Kairouz et al., ICML 2021): each user adds its share of the noise to
    its clipped update (and bit) before secure aggregation, so that the sum of the ``m′`` shares
    has the full noise and the server only ever sees the noisy sum; ``survivors`` the count each
    share is calibrated to (Flower's ``m_min``; ``None``: the round's cohort). A round with no
    users releases the server's noise alone."""

    survivors: int | None = None

    name: ClassVar[str] = "distributed"

    def __post_init__(self) -> None:
        if not self.underlying.distributable:
            raise ConfigError(
                f"{type(self.underlying).__name__} cannot be split into users' shares: "
                "give --dp central"
            )

    def user_half(
        self, deltas: Tensors, clients: Sequence[int] | Tensor, round_number: int
    ) -> tuple[Tensors, Tensor | None, dict[str, Any]]:
        clients = [int(client) for client in clients]
        clipped, bits, metrics = self.underlying.constrain(deltas)
        if clients:
            survivors = self.survivors or len(clients)
            clipped, bits = self.underlying.shares(clipped, bits, clients, round_number, survivors)
        return clipped, bits, metrics

    def server_half(
        self, base: Tensors, total: Tensors, bits: float | None, count: int, round_number: int
    ) -> tuple[Tensors, dict[str, Any]]:
        if count == 0:  # nobody added a share: the server's noise alone
            return Central(self.underlying).server_half(base, total, bits, count, round_number)
        return self.underlying.release(base, total, None, bits, False, round_number)


#: The placements by name (``--dp``).
PLACEMENTS: dict[str, type[Placement]] = {"central": Central, "distributed": Distributed}


def place(name: str, underlying: UserLevelDP, survivors: int | None = None) -> Placement:
    """``underlying`` placed by ``name`` (``central``, ``distributed``; ``survivors`` the count
    a distributed share is calibrated to)."""
    if name not in PLACEMENTS:
        raise ConfigError(f"dp must be one of {', '.join(PLACEMENTS)}, not {name!r}")
    if name == "distributed":
        return Distributed(underlying, survivors)
    return PLACEMENTS[name](underlying)


def mechanism_from_plan(
    plan: PrivacyPlan, noise: NoiseSource = secret_noise, survivors: int | None = None
) -> Placement:
    """The run's mechanism: the plan's underlying mechanism (:data:`MECHANISMS`, its clip norm
    the plan's initial one, its noise scaled at simulated deployment scale) in the plan's
    placement; its draws from ``noise``."""
    return place(plan.mechanism, MECHANISMS[plan.noise].from_plan(plan, noise), survivors)


@dataclass
class PrivateUsers:
    """The mechanism's user half as the simulator's per-client postprocessing step
    (:data:`uvtrain.rounds.UpdateStep`): the cohort's updates clipped (and noised), their bits
    in ``clip_bits``, the clipping's metrics in the round's."""

    mechanism: Mechanism

    def __call__(self, updates: ClientUpdates, base: Tensors, plan: RoundPlan) -> ClientUpdates:
        updates = updates.as_deltas(base)
        assert updates.deltas is not None
        clients = updates.clients.tolist()
        deltas, bits, metrics = self.mechanism.user_half(updates.deltas, clients, plan.number)
        return replace(
            updates, deltas=deltas, clip_bits=bits, metrics={**updates.metrics, **metrics}
        )

    def state_dict(self) -> dict[str, Any]:
        return self.mechanism.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mechanism.load_state_dict(state)


class Summation(Protocol):
    """A transport under the mechanism: the sum of the users' (clipped, noised) updates
    ``Σ_k δ̂_k`` as the server obtains it (the audit's SecAgg+), with its metrics."""

    def sum(
        self, updates: ClientUpdates, base: Tensors, plan: RoundPlan
    ) -> tuple[Tensors, dict[str, Any]]: ...


@dataclass
class PrivateSum(Aggregator):
    """The mechanism's server half over a transport (composition, as Flower's DP strategy
    wrappers): the sum comes from ``updates.total`` (a transport that summed as the users
    trained: Flower's SecAgg+), from ``transport`` (the audit's SecAgg+) or, plain, from the
    users' updates; the bits are summed alike; the mechanism's :meth:`~Mechanism.server_half` releases."""

    mechanism: Mechanism
    transport: Summation | None = None

    def __call__(
        self, updates: ClientUpdates, base: Tensors, plan: RoundPlan
    ) -> tuple[Tensors, dict[str, Any]]:
        metrics: dict[str, Any] = {}
        if updates.total is not None:
            total = updates.total
        elif self.transport is not None:
            total, metrics = self.transport.sum(updates, base, plan)
        elif updates.deltas is not None:
            total = {name: updates.deltas[name].sum(0) for name in base}
        else:
            raise TrainingError("the DP sum needs the round's clipped updates or their sum")
        bits = None if updates.clip_bits is None else float(updates.clip_bits.double().sum())
        count = len(updates.clients)
        new, released = self.mechanism.server_half(base, total, bits, count, plan.number)
        return new, {**metrics, **released}

    def fusable(self) -> bool:
        """A transport that sums as the users train (Flower's SecAgg+) hands over the sum."""
        return True

    def fused_weights(self, sizes: Tensor) -> Tensor:
        return torch.ones_like(sizes)  # every user weighs the same
