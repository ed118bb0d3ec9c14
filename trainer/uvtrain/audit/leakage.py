"""Prototype leakage ``P_leak`` (FedHide's privacy figure): how often the server matches the
class vector it holds of a client to that client's own learnt prototype, measured with each
method's ``prototypes(params, private, shared)`` hook and
:func:`uvtrain.evaluation.prototype_leakage`, as the run report computes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config import RunConfig
from ..data.base import FederatedDataset
from ..engine import Simulation
from .training import train_rounds


def prototype_leak(simulation: Simulation) -> float | None:
    """``P_leak`` of the simulation's current state, as the run report computes it (``None`` for
    a method without class vectors)."""
    from .. import evaluation as ev

    vectors = simulation.algorithm.prototypes(
        simulation.params, simulation.private, simulation.shared
    )
    if vectors is None:
        return None
    learnt, seen = (value.detach().cpu().numpy() for value in vectors)
    return ev.prototype_leakage(learnt, seen)


def leakage_entry(simulation: Simulation) -> dict[str, Any]:
    """``P_leak`` of a simulation's current state beside the chance level ``1/C``."""
    return {
        "p_leak": prototype_leak(simulation),
        "chance": 1.0 / simulation.num_clients,
        "rounds": simulation.round,
        "clients": simulation.num_clients,
    }


def leakage_audit(
    methods: Sequence[str], config: RunConfig, dataset: FederatedDataset, progress: bool = True
) -> dict[str, Any]:
    """``P_leak`` of each prototype method after ``config.rounds`` rounds of training."""
    from ..run import make_simulation

    out = {}
    for method in methods:
        simulation = make_simulation(config.with_method(method), dataset)
        taken, loss = train_rounds(
            simulation, config.schedule.rounds, progress, f"{method} (P_leak)"
        )
        out[method] = {
            **leakage_entry(simulation),
            "clients_that_sent": float((taken > 0).mean()),
            "last_loss": loss,
        }
    return out
