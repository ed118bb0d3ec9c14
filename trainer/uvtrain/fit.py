"""One loop for every federated run: :func:`fit` advances a :class:`Federation` round by round
(:func:`uvtrain.rounds.run_round`) and hands each finished round to its callbacks; it returns a
:class:`Report`, not a folder to read again.

The simulator (:func:`uvtrain.run.train`), the cross-silo trainer, the audit
(:func:`uvtrain.audit.training.train_rounds`) and the Flower server
(:class:`uvdeploy.server.FederatedServer`) all run it; what each does around the rounds is a
callback, in the order given::

    fit(federation, local, rounds, [PeriodicEval, MetricsLog, Divergence, Checkpoint, Progress])

    on_start(federation)                      every callback, before the first round
    while federation.round < rounds.last:
        plan   = rounds.plan(round + 1)       the cohort and learning rate
        before_round(federation, plan)        every callback
        result = federation.advance(plan, local)
        stop, metrics = after_round(...)      each callback in turn: its metrics join the round's
                                              (the next callback sees them); any stop ends the run
    on_end(federation, report)                every callback (the last checkpoint)
    close()                                   every callback, also when a round raised

As pfl-research's ``FederatedAlgorithm.run(..., callbacks)`` (its callbacks'
``after_central_iteration`` return ``(stop, metrics)``) and Flower's ``Strategy.start(...) ->
Result``. A stop that is a failure (a model no longer finite: :class:`Divergence`) raises, so the
caller can mark the folder; a stop that is not returns ``(True, ...)`` and the report says which
callback stopped the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch

from .algorithms.base import FedAvg, Tensors
from .io import atomic_write, json_text, trim_metrics
from .progress import Progress as ProgressBar
from .rounds import (
    Aggregator,
    LocalTraining,
    RoundPlan,
    RoundResult,
    UpdateStep,
    check_finite,
    run_round,
)
from .server_optimizers import ServerOptimizer


class Federation:
    """The server's state of a federated run: the global ``params``, the method's ``shared``
    state, the ``round`` done, and how a round becomes the next state — the ``aggregator``, the
    per-client ``postprocess`` steps before it and the ``server_optimizer`` after it (``None``:
    plain FedAvg). The simulator, the cross-silo trainer and the Flower server are each one and
    add what is theirs (simulated clients' private state, parties, devices)."""

    algorithm: FedAvg
    round: int
    params: Tensors
    shared: Tensors
    aggregator: Aggregator
    postprocess: list[UpdateStep]
    server_optimizer: ServerOptimizer | None

    def advance(
        self, plan: RoundPlan, local: LocalTraining, aggregator: Aggregator | None = None
    ) -> RoundResult:
        """Run the plan's round (:func:`uvtrain.rounds.run_round`) with the clients' ``local``
        training and the federation's aggregator (or ``aggregator``: the audit's SecAgg+), and
        keep its result as the federation's state once :meth:`accept` has not refused it."""
        result = run_round(
            self.algorithm,
            plan,
            self.params,
            self.shared,
            local,
            aggregator or self.aggregator,
            self.postprocess,
            self.server_optimizer,
        )
        self.accept(plan, result)
        self.params, self.shared, self.round = result.params, result.shared, plan.number
        return result

    def accept(self, plan: RoundPlan, result: RoundResult) -> None:
        """Refuse a round's result (raise) before the federation keeps it: the Flower server's
        check that the model changed; nothing here."""

    def state_dict(self) -> dict[str, Any]:
        """The server's state to resume from (on the CPU): the round, the global model, the
        shared state, the postprocessing's own state (adaptive clipping's next clip norm) and
        the server optimiser's."""
        return {
            "round": self.round,
            "params": {k: v.cpu() for k, v in self.params.items()},
            "shared": {k: v.cpu() for k, v in self.shared.items()},
            "postprocess": [
                step.state_dict() if hasattr(step, "state_dict") else None
                for step in self.postprocess
            ],
            "server_optimizer": None
            if self.server_optimizer is None
            else self.server_optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], device: torch.device | str = "cpu") -> None:
        """Resume from :meth:`state_dict` (onto ``device``)."""
        self.round = int(state["round"])
        self.params = {k: v.to(device) for k, v in state["params"].items()}
        self.shared = {k: v.to(device) for k, v in state["shared"].items()}
        for step, saved in zip(self.postprocess, state.get("postprocess", []), strict=False):
            if saved is not None and hasattr(step, "load_state_dict"):
                step.load_state_dict(saved)
        if self.server_optimizer is not None:
            self.server_optimizer.load_state_dict(state.get("server_optimizer"), device)


@dataclass(frozen=True)
class Rounds:
    """Which rounds :func:`fit` runs: up to round ``last``, each planned by ``plan(number)``
    (its cohort and learning rate)."""

    last: int
    plan: Callable[[int], RoundPlan]


@dataclass
class Report:
    """What :func:`fit` returns: the rounds it ran (``first`` the round it started from), each
    round's metrics as its callbacks left them, the seconds it took, and which callback stopped
    it early (``None``: it ran to its last round)."""

    first: int
    last: int
    metrics: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    stopped_by: str | None = None

    @property
    def updates(self) -> int:
        """Client updates received in these rounds."""
        return sum(int(metrics["clients"]) for metrics in self.metrics)

    @property
    def loss(self) -> float | None:
        """The last round's loss (``None`` before any)."""
        return float(self.metrics[-1]["loss"]) if self.metrics else None

    def throughput(self, device: str) -> dict[str, Any]:
        """The report's ``throughput``: client updates per second on ``device``."""
        updates = self.updates
        return {
            "client_updates_per_s": updates / self.seconds if updates else None,
            "device": device,
        }


class Callback:
    """What runs around :func:`fit`'s rounds. Every hook is optional."""

    def on_start(self, federation: Federation) -> None:
        """Before the first round (``federation.round``: where a resumed run starts)."""

    def before_round(self, federation: Federation, plan: RoundPlan) -> None:
        """Before each round, with its plan (what the server sees before it releases)."""

    def after_round(
        self, federation: Federation, result: RoundResult
    ) -> tuple[bool, Mapping[str, Any]]:
        """After each round: whether to stop, and metrics to add to the round's."""
        return False, {}

    def on_end(self, federation: Federation, report: Report) -> None:
        """After the last round (not when a round raised)."""

    def close(self) -> None:
        """Always, last: release what :meth:`on_start` opened."""


def fit(
    federation: Federation,
    local: LocalTraining,
    rounds: Rounds,
    callbacks: Sequence[Callback] = (),
) -> Report:
    """Run the federation's rounds from its round to ``rounds.last`` (see the module's
    docstring); returns the :class:`Report`."""
    report = Report(federation.round, federation.round)
    started = time.perf_counter()
    try:
        for callback in callbacks:
            callback.on_start(federation)
        while federation.round < rounds.last and report.stopped_by is None:
            plan = rounds.plan(federation.round + 1)
            for callback in callbacks:
                callback.before_round(federation, plan)
            result = federation.advance(plan, local)
            for callback in callbacks:
                stop, metrics = callback.after_round(federation, result)
                result.metrics.update(metrics)
                if stop and report.stopped_by is None:
                    report.stopped_by = type(callback).__name__
            report.metrics.append(result.metrics)
            report.last = federation.round
        report.seconds = time.perf_counter() - started
        for callback in callbacks:
            callback.on_end(federation, report)
    finally:
        for callback in callbacks:
            callback.close()
    return report


# -- the callbacks ----------------------------------------------------------------------------


class MetricsLog(Callback):
    """Each round's metrics as a line of ``path`` (``metrics.jsonl``); the lines of rounds after
    the federation's (a run killed after its last checkpoint) are dropped first."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: IO[str] | None = None

    def on_start(self, federation: Federation) -> None:
        trim_metrics(self.path, federation.round)
        self.file = open(self.path, "a")  # noqa: SIM115 (closed by close)

    def after_round(
        self, federation: Federation, result: RoundResult
    ) -> tuple[bool, Mapping[str, Any]]:
        assert self.file is not None
        self.file.write(json_text(result.metrics) + "\n")
        self.file.flush()
        return False, {}

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class Checkpoint(Callback):
    """``state()`` saved to ``path`` every ``every`` rounds and after the last one (written
    whole or not at all: :func:`uvtrain.io.atomic_write`)."""

    def __init__(self, path: Path, state: Callable[[], dict[str, Any]], every: int) -> None:
        self.path, self.state, self.every = path, state, every

    def save(self) -> None:
        state = self.state()
        atomic_write(self.path, lambda file: torch.save(state, file))

    def after_round(
        self, federation: Federation, result: RoundResult
    ) -> tuple[bool, Mapping[str, Any]]:
        if federation.round % self.every == 0:
            self.save()
        return False, {}

    def on_end(self, federation: Federation, report: Report) -> None:
        self.save()


class PeriodicEval(Callback):
    """Every ``every`` rounds, the metrics of ``evaluate()`` join the round's (``eer``)."""

    def __init__(self, every: int | None, evaluate: Callable[[], Mapping[str, Any]]) -> None:
        self.every, self.evaluate = every, evaluate

    def after_round(
        self, federation: Federation, result: RoundResult
    ) -> tuple[bool, Mapping[str, Any]]:
        if self.every and federation.round % self.every == 0:
            return False, self.evaluate()
        return False, {}


class Divergence(Callback):
    """The natural stop: a model that is no longer finite ends the run with a
    :class:`~uvtrain.errors.DivergedError` after its round is logged, before it could be
    checkpointed (so place it before :class:`Checkpoint`)."""

    def after_round(
        self, federation: Federation, result: RoundResult
    ) -> tuple[bool, Mapping[str, Any]]:
        check_finite(federation.round, "the model", federation.params, federation.shared)
        return False, {}


class PrivacyLedger(Callback):
    """The ε a DP run has spent, from each round's metrics (``epsilon``: against the released
    model; ``epsilon_server``: against the server, or whoever knows the cohorts) and its plan
    (:class:`uvtrain.privacy.PrivacyPlan`): :meth:`figures` for a progress bar, :meth:`line`
    for a log line; ``say`` is given the whole plan, δ with ε, before the first round."""

    def __init__(self, plan: Any, say: Callable[[str], None] | None = None) -> None:
        self.plan, self.say = plan, say

    def on_start(self, federation: Federation) -> None:
        if self.say is not None:
            self.say(self.plan.describe())

    def figures(self, metrics: Mapping[str, Any]) -> dict[str, str]:
        """``ε spent`` (with its δ) and the ε against the server (or the cohorts' knower)."""
        plan = self.plan
        if metrics.get("epsilon") is None:
            return {}
        figures = {"ε spent": f"{metrics['epsilon']:.3g} (δ {plan.delta:.2g})"}
        central = plan.mechanism == "central"
        if plan.capped:  # no amplification: the one ε holds whoever knows the cohorts
            figures["ε spent"] += " (the server trusted)" if central else ", the server's too"
        else:
            whom = "knowing the cohorts" if central else "against the server"
            figures[whom] = f"{metrics['epsilon_server']:.3g}"
        return figures

    def line(self, metrics: Mapping[str, Any]) -> str:
        """``", ε spent E of B (against the server E' of B')"``: a round's log line's end."""
        plan = self.plan
        spent = f", ε spent {metrics['epsilon']:.3g} of {plan.epsilon_release:.3g} "
        if plan.capped:  # nothing amplified: the one ε is the server's too
            central = plan.mechanism == "central"
            return spent + ("(the server trusted)" if central else "(the server's too)")
        return spent + (
            f"(against the server {metrics['epsilon_server']:.3g} of {plan.epsilon_server:.3g})"
        )


class Progress(Callback):
    """A progress bar (or lines, off a terminal: :class:`uvtrain.progress.Progress`) over the
    rounds up to ``last``, with ``figures(metrics)`` beside it and ``notes`` before the first
    round (a resumed run says so)."""

    def __init__(
        self,
        label: str,
        last: int,
        *,
        figures: Callable[[Mapping[str, Any]], Mapping[str, str]] | None = None,
        notes: Sequence[str] = (),
        enabled: bool = True,
        transient: bool = False,
        resumed: bool = True,
    ) -> None:
        self.label, self.last, self.figures, self.notes = label, last, figures, list(notes)
        self.enabled, self.transient, self.resumed = enabled, transient, resumed
        self.bar: ProgressBar | None = None

    def on_start(self, federation: Federation) -> None:
        self.bar = ProgressBar(
            self.label,
            self.last,
            unit="round",
            initial=federation.round if self.resumed else 0,
            enabled=self.enabled,
            transient=self.transient,
        )
        for note in self.notes:
            self.bar.note(note)
        if self.resumed and federation.round > 0:  # a checkpoint was loaded
            self.bar.note(f"{self.label}: resumed from round {federation.round}")

    def note(self, text: str) -> None:
        """A line of its own beside the bar (once it is shown; before: with the notes)."""
        if self.bar is None:
            self.notes.append(text)
        else:
            self.bar.note(text)

    def after_round(
        self, federation: Federation, result: RoundResult
    ) -> tuple[bool, Mapping[str, Any]]:
        assert self.bar is not None
        figures = {"loss": f"{result.metrics['loss']:.4f}"}
        if self.figures is not None:
            figures.update(self.figures(result.metrics))
        self.bar.update(1, figures)
        return False, {}

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
