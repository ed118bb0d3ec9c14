"""What a Flower round sends and receives on the server (:mod:`uvdeploy.server`): the devices'
:class:`Replies`, Flower's SecAgg+ workflow as a round's aggregator (:class:`FlowerSecAggPlus`,
driving the legacy :class:`CohortStrategy`), and each round's log line (:class:`RoundLines`, a
callback of :func:`uvtrain.fit.fit`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ConfigRecord
from flwr.common import FitIns, Parameters, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.serverapp import Grid

from uvtrain.algorithms.base import Tensors
from uvtrain.fit import Callback, Federation, PrivacyLedger
from uvtrain.progress import duration_text, eta_seconds
from uvtrain.rounds import Aggregator, ClientUpdates, RoundPlan, RoundResult

from .errors import DeploymentError


@dataclass
class Replies:
    """The devices' answers to a round's instructions, in the order they came: ``updates`` holds
    each device's θ_k − θ (plain rounds; under SecAgg+ the server never sees one)."""

    node_ids: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    updates: list[list[np.ndarray]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


@dataclass
class FlowerSecAggPlus(Aggregator):
    """Flower's SecAgg+ workflow as a round's aggregator. The devices mask their updates θ_k − θ
    and the server unmasks only the cohort's sample-weighted mean, so the aggregation happens
    while the devices train: :meth:`collect` runs it from the round's local training (run_round's
    fused path), and the aggregator hands on the new parameters. Per-client updates never exist
    on the server, so a secure round cannot aggregate them (nor postprocess them)."""

    grid: Any
    context: Any
    num_shares: float
    reconstruction_threshold: float
    timeout: float  # for each of the workflow's four stages

    def fusable(self) -> bool:
        return True

    def __call__(
        self, updates: ClientUpdates, base: Tensors, plan: RoundPlan
    ) -> tuple[Tensors, dict[str, Any]]:
        if updates.aggregate is None:
            raise DeploymentError(
                "SecAgg+ aggregates while the devices train: a secure round has no per-client "
                "updates to aggregate or postprocess"
            )
        return updates.aggregate, {}

    def collect(
        self,
        instructions: list[tuple[int, FitIns]],
        round_number: int,
        max_weight: float,
        clipping_range: float = 8.0,
    ) -> tuple[Replies, list[np.ndarray] | None]:
        """Run the workflow for one round: the devices' replies (counts, losses, messages) and
        the unmasked weighted mean update (``None`` when the workflow did not complete);
        ``clipping_range``: SecAgg+'s per-entry quantization range."""
        replies = Replies()
        strategy = CohortStrategy(instructions, self.grid, self.context.run_id, replies)
        legacy = LegacyContext(self.context, strategy=strategy)
        legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord(
            {WorkflowKey.CURRENT_ROUND: round_number}
        )
        legacy.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(
            instructions[0][1].parameters, True
        )
        shares, threshold = self.num_shares, self.reconstruction_threshold
        workflow = SecAggPlusWorkflow(
            num_shares=int(shares) if shares > 1 else float(shares),
            reconstruction_threshold=int(threshold) if threshold > 1 else float(threshold),
            max_weight=max_weight,
            clipping_range=clipping_range,
            timeout=self.timeout,
        )
        workflow(self.grid, legacy)
        if strategy.aggregated is None:
            return replies, None
        return replies, parameters_to_ndarrays(strategy.aggregated)


class CohortStrategy(Strategy):
    """The legacy Strategy SecAgg+'s workflow drives: it hands out the round's instructions and
    keeps the aggregate the workflow computed (the cohort's weighted mean update)."""

    def __init__(
        self, instructions: list[tuple[int, FitIns]], grid: Grid, run_id: int, replies: Replies
    ) -> None:
        self.instructions = instructions
        self.proxies = {node: GridClientProxy(node, grid, run_id) for node, _ in instructions}
        self.replies = replies
        self.aggregated: Parameters | None = None

    def initialize_parameters(self, client_manager: Any) -> None:
        return None

    def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> list:
        return [(self.proxies[node], fitins) for node, fitins in self.instructions]

    def aggregate_fit(self, server_round: int, results: list, failures: list) -> tuple:
        for proxy, fitres in results:
            self.replies.node_ids.append(int(proxy.node_id))
            self.replies.counts.append(int(fitres.num_examples))
            self.replies.metrics.append(dict(fitres.metrics))
        self.replies.failures.extend(str(failure) for failure in failures)
        if results:  # the workflow put the unmasked mean into every result
            self.aggregated = results[0][1].parameters
        return self.aggregated, {}

    def configure_evaluate(self, server_round: int, parameters: Any, client_manager: Any) -> list:
        return []

    def aggregate_evaluate(self, server_round: int, results: list, failures: list) -> tuple:
        return None, {}

    def evaluate(self, server_round: int, parameters: Any) -> None:
        return None


def round_line(metrics: dict[str, Any], rounds: int, spent: str, eta: float | None) -> str:
    """A round's line: its loss and devices, or that it was skipped (too few devices sampled
    to release anything; issue 47: it read ``loss nan, 0 devices``), its time and the ETA of the
    run (:func:`uvtrain.progress.eta_seconds`)."""
    head = f"round {metrics['round']}/{rounds}: "
    if metrics.get("skipped"):
        head += (
            f"skipped, {metrics['sampled']} device(s) sampled, too few to release a sum "
            "(the model unchanged)"
        )
    else:
        head += (
            f"loss {metrics['loss']:.4f}, {metrics['clients']} devices, {metrics['seconds']:.1f} s"
        )
    left = f", ETA {duration_text(eta)}" if eta is not None and metrics["round"] < rounds else ""
    return f"{head}{left}{spent}"


class RoundLines(Callback):
    """Each round's line (:func:`round_line`) through ``echo``, with the ETA of the run's
    ``rounds`` at the rate of this session's rounds and, under DP, the ε spent (``ledger``)."""

    def __init__(
        self, echo: Callable[[str], None], rounds: int, ledger: PrivacyLedger | None = None
    ) -> None:
        self.echo, self.rounds, self.ledger = echo, rounds, ledger
        self.started, self.initial = time.perf_counter(), 0

    def on_start(self, federation: Federation) -> None:
        self.started, self.initial = time.perf_counter(), federation.round

    def after_round(
        self, federation: Federation, result: RoundResult
    ) -> tuple[bool, Mapping[str, Any]]:
        elapsed = time.perf_counter() - self.started
        eta = eta_seconds(federation.round, self.rounds, self.initial, elapsed)
        spent = "" if self.ledger is None else self.ledger.line(result.metrics)
        self.echo(round_line(result.metrics, self.rounds, spent, eta))
        return False, {}
