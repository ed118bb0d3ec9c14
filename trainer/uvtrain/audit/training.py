"""The clients' side of what the audit observes, through the engine's own code.

- :func:`client_parameters`: each client's parameters after its local training from the global
  ``θ`` (:func:`uvtrain.engine.local_update`, the per-client reference path a device runs) — the
  plain updates the attacks read. The simulation is left as it was.
- :func:`secure_round`: one round of a simulation through :func:`uvtrain.rounds.run_round` with
  the :class:`~.secagg.SecAggPlus` aggregator; the clients train by the simulation's own local
  training (receive, update, messages), by its per-client loop path (:class:`LoopPath`).
- :func:`train_rounds`: rounds with a progress bar, counting who took part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import Tensor

from ..engine import Simulation, local_update
from ..rounds import Aggregator, ClientUpdates, RoundPlan, RoundResult, run_round
from .secagg import Layout, SecAggPlus


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
    losses; ``progress`` (a tqdm bar) is ticked once a client."""
    rows, losses = [], []
    for position, client in enumerate(np.asarray(clients).tolist()):
        params, _, loss = local_update(
            simulation.model,
            simulation.buffers,
            simulation.algorithm,
            simulation.params,
            {name: value[client] for name, value in simulation.private.items()},
            {name: value[client] for name, value in simulation.constants.items()},
            simulation.shared,
            batches[position],
            lr,
        )
        rows.append(layout.flatten(params))
        losses.append(loss.mean().cpu().numpy())
        if progress is not None:
            progress.update(1)
    return np.stack(rows), np.stack(losses)


@dataclass
class LoopPath:
    """A :class:`~uvtrain.rounds.LocalTraining`: the simulation's own ``train`` (receive, local
    update, private state, messages) by its per-client loop path — each client's update is the
    one it would send alone, as the audit's numbers have always been measured — never fused."""

    simulation: Simulation

    def train(self, plan: RoundPlan, fused: Aggregator | None) -> ClientUpdates:
        simulation = self.simulation
        configured = simulation.config
        simulation.config = dataclasses.replace(configured, vectorised=False)
        try:
            return simulation.train(plan, None)
        finally:
            simulation.config = configured


def secure_round(simulation: Simulation, aggregator: SecAggPlus) -> RoundResult:
    """The simulation's next round with the SecAgg+ ``aggregator``
    (:func:`uvtrain.rounds.run_round`, the simulation's own postprocessing); the simulation
    keeps the result, and ``aggregator.mean_update`` holds what the server unmasked."""
    plan = simulation.plan(simulation.round + 1)
    result = run_round(
        simulation.algorithm,
        plan,
        simulation.params,
        simulation.shared,
        LoopPath(simulation),
        aggregator,
        simulation.postprocess,
    )
    keep(simulation, result, plan)
    return result


def keep(simulation: Simulation, result: RoundResult, plan: RoundPlan) -> None:
    """The trainer keeps a finished round: its new global state and round number (as
    ``Simulation.step`` does)."""
    simulation.params, simulation.shared, simulation.round = (
        result.params,
        result.shared,
        plan.number,
    )


def train_rounds(
    simulation: Simulation,
    rounds: int,
    progress: bool,
    description: str,
    step: Callable[[], float] | None = None,
) -> tuple[np.ndarray, float | None]:
    """Train ``rounds`` rounds (``simulation.step`` unless ``step`` is given, which returns the
    round's loss); returns how many times each client took part and the last loss."""
    from tqdm.auto import tqdm

    taken = np.zeros(simulation.num_clients, dtype=np.int64)
    loss = None
    for _ in tqdm(
        range(rounds),
        desc=description,
        unit="round",
        disable=None if progress else True,
        leave=False,
    ):
        taken[simulation.clients_of_round(simulation.round + 1)] += 1
        loss = step() if step is not None else float(simulation.step()["loss"])
    return taken, loss
