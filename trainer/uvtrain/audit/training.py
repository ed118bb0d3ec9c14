"""The clients' side of what the audit observes, through the engine's own code.

- :func:`client_parameters`: each client's parameters after its local training from the global
  ``θ`` (:meth:`Simulation.client_update`, the per-client reference path a device runs) — the
  plain updates the attacks read. The simulation is left as it was.
- :func:`secure_aggregator`: the :class:`~.secagg.SecAggPlus` aggregator for a simulation, or
  under differential privacy the simulation's mechanism over SecAgg+ as its transport.
- :func:`secure_round`: one round of a simulation through :func:`uvtrain.rounds.run_round` with
  the :class:`~.secagg.SecAggPlus` aggregator; the clients train by the simulation's own local
  training (receive, update, messages), by its per-client loop path, and their updates go
  through the simulation's postprocessing (DP clipping and noise) before SecAgg+.
- :func:`train_rounds`: rounds of :func:`uvtrain.fit.fit` with a progress bar, counting who
  took part (:class:`Participation`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from torch import Tensor

from ..engine import OnePath, Simulation
from ..fit import Callback, Federation, Progress, Rounds, fit
from ..rounds import Aggregator, RoundPlan, RoundResult
from .secagg import Layout, SecAggPlus
from .settings import SecAggModel


def client_parameters(
    simulation: Simulation,
    clients: np.ndarray,
    batches: Tensor,
    lr: float,
    layout: Layout,
    progress: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``[m, P]`` each client's parameters after its local training on its ``batches``
    (``[m, E, B, ...]``) from the global ``θ``, flattened by ``layout``, and the clients' mean
    losses; ``progress`` (a :class:`uvtrain.progress.Progress`) is ticked once a client."""
    rows, losses = [], []
    for position, client in enumerate(np.asarray(clients).tolist()):
        params, _, loss = simulation.client_update(client, batches[position], lr)
        rows.append(layout.flatten(params))
        losses.append(loss.mean().cpu().numpy())
        if progress is not None:
            progress.update(1)
    return np.stack(rows), np.stack(losses)


def secure_aggregator(
    simulation: Simulation, model: SecAggModel, rng: np.random.Generator
) -> Aggregator:
    """SecAgg+ in place of the simulation's aggregator. Under differential privacy
    (``simulation.mechanism``, built with the simulation) SecAgg+ is the transport under the
    simulation's own mechanism: :class:`uvtrain.privacy.PrivateSum` finishes the secure sum of
    the members' clipped (and, distributed, noised) updates, every member weighing the same,
    with the mechanism's server half (central noise, ``qN``, adaptive clipping); the user half
    stays the simulation's postprocessing, which runs before SecAgg+."""
    from ..privacy import PrivateSum

    if simulation.mechanism is None:
        return SecAggPlus(model, rng)
    return PrivateSum(simulation.mechanism, SecAggPlus(model, rng))


def secure_round(
    simulation: Simulation, aggregator: Aggregator, clients: np.ndarray | None = None
) -> RoundResult:
    """The simulation's next round (:meth:`Simulation.next_round`, i.e.
    :func:`uvtrain.rounds.run_round`) with the SecAgg+ ``aggregator``, each client trained by the
    per-client loop path — its update the one it would send alone, as the audit's numbers have
    always been measured; the simulation's sampled cohort, or ``clients``. The simulation keeps
    the result (what the server released is ``result.params``)."""
    return simulation.next_round(aggregator, path="loop", clients=clients)


def one_client_each_round(round_number: int, clients: int) -> np.ndarray:
    """The audit's fixed schedule (``--participations``): round ``r`` (from 1) has the one
    client ``(r − 1) mod K`` of ``K`` ``clients``, so ``n × K`` rounds give each exactly ``n``."""
    return np.array([(round_number - 1) % clients])


class Participation(Callback):
    """How many of the rounds each of ``clients`` clients took part in (the rounds' cohorts)."""

    def __init__(self, clients: int) -> None:
        self.taken = np.zeros(clients, dtype=np.int64)

    def before_round(self, federation: Federation, plan: RoundPlan) -> None:
        self.taken[plan.clients] += 1


def train_rounds(
    simulation: Simulation,
    rounds: int,
    progress: bool,
    description: str,
    aggregator: Aggregator | None = None,
    cohort_of: Callable[[int], np.ndarray] | None = None,
    callbacks: Sequence[Callback] = (),
) -> tuple[np.ndarray, float | None]:
    """Train ``rounds`` more rounds (:func:`uvtrain.fit.fit`, with ``callbacks`` and a progress
    bar): the simulation's own rounds, or with ``aggregator`` (SecAgg+, which the simulation
    keeps) each client trained by the per-client loop path, as :func:`secure_round`;
    ``cohort_of(round)`` the round's clients, default the simulation's sampling. Returns how
    many times each client took part and the last loss."""
    local: Any = simulation
    if aggregator is not None:
        simulation.aggregator = aggregator
        local = OnePath(simulation, "loop")
    plan = simulation.plan
    if cohort_of is not None:
        plan = lambda number: simulation.plan(number, cohort_of(number))  # noqa: E731
    taken = Participation(simulation.num_clients)
    bar = Progress(description, rounds, enabled=progress, transient=True, resumed=False)
    schedule = Rounds(simulation.round + rounds, plan)
    report = fit(simulation, local, schedule, [*callbacks, taken, bar])
    return taken.taken, report.loss
