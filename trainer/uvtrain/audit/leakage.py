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
    """``P_leak`` of a simulation's current state beside the chance level ``1/C``; for a method
    whose message is a Gaussian mechanism (FedGN), its ``ε`` too (:func:`release_privacy`)."""
    entry = {
        "p_leak": prototype_leak(simulation),
        "chance": 1.0 / simulation.num_clients,
        "rounds": simulation.round,
        "clients": simulation.num_clients,
    }
    release = release_privacy(simulation)
    if release is not None:
        entry["release_dp"] = release
    return entry


def release_privacy(simulation: Simulation) -> dict[str, Any] | None:
    """The ``ε`` of a method's message as a Gaussian mechanism (``release_noise``: FedGN's
    proxy), at ``δ`` = :func:`~uvtrain.accounting.default_delta` of ``N``: for the median client
    and for the client that sent most often over the simulation's rounds so far (each round's
    cohort sends a fresh proxy)."""
    import numpy as np

    from ..accounting import default_delta, release_epsilon

    release = getattr(simulation.algorithm, "release_noise", None)
    if release is None:
        return None
    sigma, sensitivity = release()
    sent = simulation.participations(simulation.round)
    delta = default_delta(simulation.num_clients)
    median, most = int(np.median(sent)), int(sent.max())
    return {
        "sigma": sigma,
        "sensitivity": sensitivity,
        "delta": delta,
        "releases_median": median,
        "releases_max": most,
        "epsilon_one_release": release_epsilon(sigma, sensitivity, 1, delta),
        "epsilon_median": release_epsilon(sigma, sensitivity, median, delta),
        "epsilon_max": release_epsilon(sigma, sensitivity, most, delta),
    }


def leakage_audit(
    methods: Sequence[str], config: RunConfig, dataset: FederatedDataset, progress: bool = True
) -> dict[str, Any]:
    """``P_leak`` of each prototype method after ``config.schedule.rounds`` rounds of training."""
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
