"""The Flower ServerApp: the simulator's rounds, with devices in place of simulated clients.

What the server does, in order:

1. waits for ``min_devices`` SuperNodes, asks each for its status (the user id it was assigned
   before, whether it holds a codeword of this run's code, how many samples) and assigns fresh
   random user ids, unique and never reused (``OUT/devices.json`` keeps every id ever given).
   For FedUV it sends the BCH code (public); the device makes its codeword with the SDK;
2. runs the rounds: samples a cohort from ``(seed, round)`` as the simulator does, sends the
   global weights and each device's view of the shared state (:meth:`FedAvg.client_view`), and
   aggregates the devices' updates with the method's ``aggregate`` hook (plain rounds) or with
   Flower's SecAgg+ (secure rounds: the server learns only the cohort's weighted mean update),
   then applies ``server_update`` to the messages (FedHide's proxies, FedAwS's rows);
3. stops with an error when a round's model did not change or a device failed — SecAgg+ halts
   silently when it cannot finish (too few shares, a device raising in a stage), and a run that
   "succeeds" without training is worse than one that stops;
4. writes ``config.json``, ``metrics.jsonl``, ``checkpoint.pt`` (resumable), ``report.json`` and
   ``status.json`` to ``OUT``, exports ``model.uvb`` and sends it to every device, which enrolls
   with its own samples (the warm-up threshold never leaves it).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.common import (
    Code,
    FitIns,
    Parameters,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.compat.common import recorddict_compat as compat
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.serverapp import Grid, ServerApp

from .. import evaluation as ev
from ..algorithms.base import FedAvg, Tensors
from ..checkpoints import read_checkpoint
from ..config import ConfigError
from ..run import engine_config, json_text, trim_metrics, write_json
from .errors import DeploymentError
from .settings import DeploySettings, build_model, pack, to_arrays, trainable, unpack

CHECKPOINT, CONFIG, METRICS, REPORT = "checkpoint.pt", "config.json", "metrics.jsonl", "report.json"
STATUS, REGISTRY, BUNDLE = "status.json", "devices.json", "model.uvb"


@dataclass
class RoundResult:
    """What a round's aggregation produced (``mean_update`` is ``None`` when it never ran)."""

    mean_update: Tensors | None = None
    node_ids: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


class FederatedServer:
    """One Flower run of one method (see the module's docstring)."""

    def __init__(self, settings: DeploySettings, grid: Any, context: Any, echo: Any = print):
        self.settings, self.grid, self.context, self.echo = settings, grid, context, echo
        self.config = settings.run
        self.algorithm: FedAvg = settings.algorithm()
        self.folder = Path(settings.out).expanduser()
        self.code = None
        if self.config.method.name == "feduv":
            from ..codes import bch_code

            self.code = bch_code(self.config.method.code_length)
        self.secure = settings.secure
        self.schedule = engine_config(self.config, settings.crop)  # the simulator's lr decay
        if self.secure and type(self.algorithm).aggregate is not FedAvg.aggregate:
            raise ConfigError(f"{self.config.method.name}'s aggregation cannot run under SecAgg+")

    # -- devices -------------------------------------------------------------------------------

    def _query(self, requests: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        messages = [
            Message(
                RecordDict({"uvtrain": ConfigRecord(body)}), dst_node_id=node, message_type="query"
            )
            for node, body in requests.items()
        ]
        replies: dict[int, dict[str, Any]] = {}
        errors = []
        for reply in self.grid.send_and_receive(messages, timeout=self.settings.wait_seconds):
            node = reply.metadata.src_node_id
            if reply.has_error():
                errors.append(f"device {node}: {reply.error.reason}")
            else:
                replies[node] = dict(reply.content.config_records["uvtrain"])
        missing = len(requests) - len(replies) - len(errors)
        if errors or missing:
            first = errors[0] if errors else f"{missing} did not answer"
            raise DeploymentError(
                f"{len(errors) + missing} of {len(requests)} device(s) failed ({first})"
            )
        return replies

    def wait_for_devices(self) -> list[int]:
        deadline = time.monotonic() + self.settings.wait_seconds
        while True:
            nodes = sorted(self.grid.get_node_ids())
            if len(nodes) >= self.settings.min_devices:
                return nodes
            if time.monotonic() > deadline:
                raise DeploymentError(
                    f"{len(nodes)} device(s) connected after {self.settings.wait_seconds:.0f} s; "
                    f"min_devices is {self.settings.min_devices}"
                )
            time.sleep(0.5)

    def register(self, nodes: list[int], roster: list[int] | None) -> dict[int, int]:
        """Node id → the device's row (its index in the run's roster of user ids)."""
        fingerprint = self.code.fingerprint if self.code is not None else ""
        status = self._query({n: {"action": "status", "code_sha256": fingerprint} for n in nodes})
        registry_path = self.folder / REGISTRY
        registry = json.loads(registry_path.read_text()) if registry_path.exists() else {}
        assigned: list[int] = list(registry.get("assigned", []))
        ids: dict[int, int] = {}
        to_assign: dict[int, dict[str, Any]] = {}
        for node in nodes:
            user_id = int(status[node]["user_id"])
            if user_id < 0:
                user_id = secrets.randbits(self.code.id_bits if self.code else 32)
                while user_id in assigned or user_id in ids.values():
                    user_id = secrets.randbits(self.code.id_bits if self.code else 32)
            elif user_id in ids.values():
                self.echo(f"a second device reports user id {user_id}: left out of this run")
                continue
            ids[node] = user_id
            if user_id not in assigned:
                assigned.append(user_id)
            if int(status[node]["user_id"]) < 0 or (self.code and not status[node]["codeword"]):
                body: dict[str, Any] = {"action": "assign", "user_id": user_id}
                if self.code is not None:
                    from uvsdk.codeword import pack_generator

                    body.update(
                        n=self.code.n,
                        k=self.code.k,
                        d_min=self.code.d_min,
                        id_bits=self.code.id_bits,
                        generator=pack_generator(self.code.generator),
                    )
                to_assign[node] = body
        # every id ever given is kept before any device hears of it: never reused
        write_json(registry_path, {"assigned": assigned})
        if to_assign:
            self._query(to_assign)
        if roster is None:
            roster = sorted(ids.values())
        rows = {node: roster.index(uid) for node, uid in ids.items() if uid in roster}
        for uid in ids.values():
            if uid not in roster:
                self.echo(f"device with user id {uid} joined after this run began: left out")
        self.samples = {node: int(status[node]["samples"]) for node in rows}
        self.echo(
            f"{len(rows)} device(s) registered ({len(to_assign)} newly assigned), "
            f"{sum(self.samples.values())} samples"
        )
        self.roster = roster
        return rows

    # -- the rounds ----------------------------------------------------------------------------

    def cohort(self, round_number: int, nodes: list[int]) -> list[int]:
        """The round's devices, drawn from ``(seed, round)`` as the simulator draws clients."""
        count = max(1, round(self.config.schedule.fraction * len(nodes)))
        if self.secure:
            count = max(count, self.settings.min_cohort)
            if len(nodes) < self.settings.min_cohort:
                raise DeploymentError(
                    f"{len(nodes)} device(s): a secure round needs min_cohort = "
                    f"{self.settings.min_cohort} (a sum over fewer reveals too much)"
                )
        rng = np.random.default_rng([self.config.seed, round_number, 0])
        picked = rng.choice(len(nodes), size=min(count, len(nodes)), replace=False)
        return sorted(nodes[i] for i in picked)

    def _fit_ins(self, node: int, round_number: int, lr: float) -> Any:
        view, index = self.algorithm.client_view(self.shared, self.rows[node])
        config = {
            "round": round_number,
            "lr": lr,
            "index": int(index),
            "devices": len(self.roster),
            "shared": pack(view) if view else b"",
            "code_sha256": self.code.fingerprint if self.code is not None else "",
        }
        return FitIns(ndarrays_to_parameters(to_arrays(self.params)), config)

    def _plain_round(self, cohort: list[int], round_number: int, lr: float) -> RoundResult:
        messages = [
            Message(
                compat.fitins_to_recorddict(self._fit_ins(node, round_number, lr), True),
                dst_node_id=node,
                message_type="train",
                group_id=str(round_number),
            )
            for node in cohort
        ]
        result = RoundResult()
        updates = []
        for reply in self.grid.send_and_receive(messages, timeout=self.settings.round_seconds):
            node = reply.metadata.src_node_id
            if reply.has_error():
                result.failures.append(f"device {node}: {reply.error.reason}")
                continue
            fitres = compat.recorddict_to_fitres(reply.content, False)
            if fitres.status.code != Code.OK:
                result.failures.append(f"device {node}: {fitres.status.message}")
                continue
            updates.append(parameters_to_ndarrays(fitres.parameters))
            result.node_ids.append(node)
            result.counts.append(int(fitres.num_examples))
            result.metrics.append(dict(fitres.metrics))
        if updates:
            names = sorted(self.params)
            stacked = {
                name: torch.stack([torch.from_numpy(np.array(u[i])) for u in updates])
                for i, name in enumerate(names)
            }
            weights = torch.tensor(result.counts, dtype=torch.float32)
            result.mean_update = self.algorithm.aggregate(stacked, weights)
        return result

    def _secure_round(self, cohort: list[int], round_number: int, lr: float) -> RoundResult:
        result = RoundResult()
        strategy = CohortStrategy(
            [(node, self._fit_ins(node, round_number, lr)) for node in cohort],
            self.grid,
            self.context.run_id,
            result,
        )
        legacy = LegacyContext(self.context, strategy=strategy)
        legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord(
            {WorkflowKey.CURRENT_ROUND: round_number}
        )
        legacy.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(
            strategy.instructions[0][1].parameters, True
        )
        shares = self.settings.num_shares
        threshold = self.settings.reconstruction_threshold
        workflow = SecAggPlusWorkflow(
            num_shares=int(shares) if shares > 1 else float(shares),
            reconstruction_threshold=int(threshold) if threshold > 1 else float(threshold),
            # the weights are sample counts: room for the largest device's
            max_weight=float(max(self.samples[n] for n in cohort)) * 1.01,
            timeout=self.settings.round_seconds,  # for each of its four stages
        )
        workflow(self.grid, legacy)
        if strategy.aggregated is not None:
            names = sorted(self.params)
            arrays = parameters_to_ndarrays(strategy.aggregated)
            result.mean_update = {
                name: torch.from_numpy(np.array(arrays[i])) for i, name in enumerate(names)
            }
        return result

    def round(self, round_number: int, nodes: list[int]) -> dict[str, Any]:
        started = time.perf_counter()
        lr = self.schedule.learning_rate(round_number)
        cohort = self.cohort(round_number, nodes)
        run = self._secure_round if self.secure else self._plain_round
        result = run(cohort, round_number, lr)
        if result.failures or len(result.node_ids) < len(cohort):
            missing = len(cohort) - len(result.node_ids)
            detail = result.failures[0] if result.failures else "no reply"
            raise DeploymentError(
                f"round {round_number}: {missing} of {len(cohort)} device(s) failed ({detail}); "
                "stopped (the last checkpoint is intact)"
            )
        update = result.mean_update
        if update is None:
            raise DeploymentError(
                f"round {round_number}: the aggregation did not complete (secure aggregation "
                "halted, see the server log); the model did not change: stopped"
            )
        largest = max(float(v.abs().max()) for v in update.values())
        if not math.isfinite(largest):
            raise DeploymentError(f"round {round_number}: the aggregated update is not finite")
        if largest == 0.0:
            raise DeploymentError(f"round {round_number}: the model did not change: stopped")
        self.params = {k: v + update[k].to(v.dtype) for k, v in self.params.items()}
        counts = torch.tensor(result.counts, dtype=torch.float64)
        losses = torch.tensor([float(m["loss"]) for m in result.metrics], dtype=torch.float64)
        loss = float((counts * losses).sum() / counts.sum())
        if any("message" in m for m in result.metrics):
            rows = torch.tensor([self.rows[n] for n in result.node_ids])
            unpacked = [unpack(bytes(m["message"])) for m in result.metrics]
            messages = {k: torch.stack([u[k] for u in unpacked]) for k in unpacked[0]}
            self.shared = self.algorithm.server_update(self.shared, messages, rows, lr)
        seconds = time.perf_counter() - started
        return {
            "round": round_number,
            "loss": loss,
            "lr": lr,
            "clients": len(cohort),
            "seconds": seconds,
            "client_updates_per_s": len(cohort) / seconds,
            "secure": self.secure,
            "update_max_abs": largest,
        }

    # -- state -------------------------------------------------------------------------------

    def _save(self, round_number: int) -> None:
        state = {
            "round": round_number,
            "params": {k: v.cpu() for k, v in self.params.items()},
            "shared": {k: v.cpu() for k, v in self.shared.items()},
            "roster": list(self.roster),
        }
        temporary = self.folder / f".{CHECKPOINT}.tmp"
        torch.save(state, temporary)
        os.replace(temporary, self.folder / CHECKPOINT)

    def _resume(self) -> tuple[int, list[int] | None, dict[str, Any] | None]:
        config = self.settings.to_dict()
        checkpoint = self.folder / CHECKPOINT
        if not checkpoint.exists():
            return 0, None, None
        previous = json.loads((self.folder / CONFIG).read_text())
        ignore = {"rounds", "wait_seconds", "round_seconds", "min_devices", "export", "sign_key"}
        ignore.add("out")
        differing = sorted(k for k in config if k not in ignore and previous.get(k) != config[k])
        if differing:
            raise ConfigError(
                f"{self.folder} holds a run with other settings ({', '.join(differing)})"
            )
        state = read_checkpoint(checkpoint)
        return int(state["round"]), [int(u) for u in state["roster"]], state

    # -- the run -------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self.folder / STATUS, {"state": "running"})
        start_round, roster, state = self._resume()
        write_json(self.folder / CONFIG, self.settings.to_dict())
        nodes = self.wait_for_devices()
        self.rows = self.register(nodes, roster)
        if not self.rows:
            raise DeploymentError("no device of this run's roster is connected")
        model = build_model(self.settings, len(self.roster))
        self.params, self.buffers = trainable(model)
        dim = int(model.backbone.embedding_dim)
        generator = torch.Generator().manual_seed(self.config.seed)
        self.algorithm.init_private(len(self.roster), dim, generator)  # the simulator's draws
        constants = {"index": torch.arange(len(self.roster))}
        self.shared = self.algorithm.init_shared(len(self.roster), dim, generator, constants)
        if state is not None:
            self.params = dict(state["params"])
            self.shared = dict(state["shared"])
            trim_metrics(self.folder / METRICS, start_round)
            self.echo(f"resumed at round {start_round}")
        mode = "SecAgg+" if self.secure else "plain FedAvg"
        self.echo(f"{self.config.method.name}: {self.config.schedule.rounds} rounds, {mode}")
        started = time.perf_counter()
        updates = 0
        nodes = sorted(self.rows)
        with open(self.folder / METRICS, "a") as log:
            for round_number in range(start_round + 1, self.config.schedule.rounds + 1):
                metrics = self.round(round_number, nodes)
                updates += metrics["clients"]
                log.write(json_text(metrics) + "\n")
                log.flush()
                if round_number % self.config.checkpoint_every == 0:
                    self._save(round_number)
                self.echo(
                    f"round {round_number}/{self.config.schedule.rounds}: loss {metrics['loss']:.4f}, "
                    f"{metrics['clients']} devices, {metrics['seconds']:.1f} s"
                )
        self._save(self.config.schedule.rounds)
        seconds = time.perf_counter() - started
        rounds_done = self.config.schedule.rounds - start_round
        enrolled = self.finish(model) if self.settings.export else {}
        report = {
            "method": self.config.method.name,
            "dataset": "flower",
            "rounds": self.config.schedule.rounds,
            # the server holds no labelled data: evaluate the exported model with
            # `uvtrain eval`-style scoring on a labelled set, or on the devices
            "splits": {},
            "warmup": {"target_tpr": self.config.target_tpr, **enrolled},
            "leakage": None,
            "throughput": {
                "client_updates_per_s": updates / seconds if updates else None,
                "rounds_per_s": rounds_done / seconds if rounds_done else None,
                "device": "flower",
            },
            "deployment": {
                "devices": len(self.rows),
                "secure_aggregation": self.secure,
                "bundle": BUNDLE if self.settings.export else None,
            },
        }
        ev.write_report(self.folder / REPORT, report)
        write_json(
            self.folder / STATUS, {"state": "finished", "rounds": self.config.schedule.rounds}
        )
        self.echo(f"finished: {self.folder / REPORT}")
        return report

    def finish(self, model: torch.nn.Module) -> dict[str, Any]:
        """Export the final model and have every device enroll with it."""
        from uvexport.export import export_model

        with torch.no_grad():
            for name, value in model.named_parameters():
                if name in self.params:
                    value.copy_(self.params[name])
        sign_key = None
        if self.settings.sign_key:
            from uvexport.bundle import load_signing_key

            sign_key = load_signing_key(self.settings.sign_key)
        inputs = _parity_inputs(self.settings, self.config.seed)
        extra = {
            "provenance": {
                "method": self.config.method.name,
                "dataset": "flower",
                "rounds": self.config.schedule.rounds,
                "backbone": type(model.backbone).__name__,
                "devices": len(self.rows),
                "secure_aggregation": self.secure,
            },
            "data_licence": "the devices' own data (never collected)",
        }
        result = export_model(
            model,
            self.folder / BUNDLE,
            modality=self.settings.modality,
            spec=self.settings.spec,
            method=self.config.method.name,
            code_length=getattr(self.config.method, "code_length", 127),
            inputs=inputs,
            extra=extra,
            sign_key=sign_key,
        )
        self.echo(f"exported {result.path.name} ({result.size_bytes / 1e6:.1f} MB)")
        blob = result.path.read_bytes()
        body = {"action": "enroll", "bundle": blob, "target_tpr": self.config.target_tpr}
        replies = self._query({node: body for node in self.rows})
        done = sum(1 for r in replies.values() if r.get("enrolled"))
        self.echo(f"{done} of {len(self.rows)} device(s) enrolled")
        return {"devices_enrolled": done}


def _parity_inputs(settings: DeploySettings, seed: int) -> list[np.ndarray]:
    """Synthetic inputs for the export's torch-vs-ONNX check (the server holds no data); the
    last one, with a batch of 2, is the example the graph is traced with (batch stays dynamic)."""
    rng = np.random.default_rng(seed)
    spec = settings.spec
    if settings.modality == "audio":
        width = round(spec["window_seconds"] * spec["sample_rate"])
        return [
            (0.1 * rng.standard_normal((1, width + width // 2))).astype(np.float32),
            (0.1 * rng.standard_normal((2, width))).astype(np.float32),
        ]
    shape = (spec["height"], spec["width"], spec["channels"])
    return [rng.integers(0, 256, size=(count, *shape), dtype=np.uint8) for count in (1, 2)]


class CohortStrategy(Strategy):
    """The legacy Strategy SecAgg+'s workflow drives: it hands out the round's instructions and
    keeps the aggregate the workflow computed (the cohort's weighted mean update)."""

    def __init__(
        self, instructions: list[tuple[int, FitIns]], grid: Grid, run_id: int, result: RoundResult
    ) -> None:
        self.instructions = instructions
        self.proxies = {node: GridClientProxy(node, grid, run_id) for node, _ in instructions}
        self.result = result
        self.aggregated: Parameters | None = None

    def initialize_parameters(self, client_manager: Any) -> None:
        return None

    def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> list:
        return [(self.proxies[node], fitins) for node, fitins in self.instructions]

    def aggregate_fit(self, server_round: int, results: list, failures: list) -> tuple:
        for proxy, fitres in results:
            self.result.node_ids.append(int(proxy.node_id))
            self.result.counts.append(int(fitres.num_examples))
            self.result.metrics.append(dict(fitres.metrics))
        self.result.failures.extend(str(failure) for failure in failures)
        if results:  # the workflow put the unmasked mean into every result
            self.aggregated = results[0][1].parameters
        return self.aggregated, {}

    def configure_evaluate(self, server_round: int, parameters: Any, client_manager: Any) -> list:
        return []

    def aggregate_evaluate(self, server_round: int, results: list, failures: list) -> tuple:
        return None, {}

    def evaluate(self, server_round: int, parameters: Any) -> None:
        return None


def _echo(line: str) -> None:
    print(f"[uvtrain] {line}", flush=True)


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """The ServerApp's entry: run, and leave ``status.json`` saying how it ended."""
    out = Path(str(context.run_config.get("out", "runs/flower"))).expanduser()
    try:
        settings = DeploySettings.from_run_config(context.run_config)
        FederatedServer(settings, grid, context, echo=_echo).run()
    except Exception as error:
        out.mkdir(parents=True, exist_ok=True)
        message = str(error) if isinstance(error, DeploymentError | ConfigError) else repr(error)
        write_json(out / STATUS, {"state": "failed", "error": message.splitlines()[0]})
        _echo(f"error: {message}")
        raise
