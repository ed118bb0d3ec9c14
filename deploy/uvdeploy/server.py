"""The Flower ServerApp: the simulator's rounds, with devices in place of simulated clients.

What the server does, in order:

1. waits for ``min_devices`` SuperNodes, asks each for its status (the user id it was assigned
   before, whether it holds a codeword of this run's code, how many samples) and assigns fresh
   random user ids, unique and never reused (``OUT/devices.json`` keeps every id ever given).
   When the method's devices hold a codeword (:attr:`FedAvg.device_secrets`: FedUV) it sends the
   BCH code (public); the device makes its codeword with the SDK;
2. runs the rounds with the simulator's loop, :func:`uvtrain.fit.fit` (the server is the
   :class:`~uvtrain.fit.Federation`; its metrics log, checkpoints and round lines are callbacks),
   each round :func:`uvtrain.rounds.run_round`: it samples a cohort from ``(seed, round)`` as the
   simulator does (:meth:`FederatedServer.plan`); :meth:`FederatedServer.train` is the round's
   local training — it sends the global weights and each device's view of the shared state
   (:meth:`FedAvg.client_view`) and collects each device's update θ_k − θ, sample count, loss
   and message; the aggregator is :class:`~uvtrain.rounds.WeightedMean` (plain rounds) or
   :class:`~uvdeploy.rounds.FlowerSecAggPlus` (secure rounds: Flower's SecAgg+ workflow
   unmasks only the cohort's weighted mean update, so it aggregates while the devices train);
   then the method's ``server_update`` (FedHide's proxies, FedAwS's rows);
3. stops with an error when a round's model did not change or a device failed — SecAgg+ halts
   silently when it cannot finish (too few shares, a device raising in a stage), and a run that
   "succeeds" without training is worse than one that stops;
4. writes ``config.json``, ``metrics.jsonl``, ``checkpoint.pt`` (resumable), ``report.json`` and
   ``status.json`` to ``OUT``, exports ``model.uvb`` and sends it to every device, which enrolls
   with its own samples (the warm-up threshold never leaves it).

With user-level differential privacy (``dp``, :mod:`uvdeploy.dp`) the mechanism is planned after
registration, before round 1 (a run that cannot keep within its budget does not start); the
devices run the mechanism's user half (clip and, distributed, noise), the aggregator is its
server half, :class:`~uvtrain.privacy.PrivateSum`, over the sum SecAgg+ unmasks (secure rounds)
or the re-clipped replies (plain), with :class:`~uvdeploy.dp.FlowerPrivacy` (instructions,
ledger) beside it; a secure round finishes with the survivors when at least ``m_min`` remain,
and each round's log line states the ε spent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Message
from flwr.common import Code, FitIns, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat
from flwr.serverapp import Grid, ServerApp

from uvtrain.algorithms.base import FedAvg, Tensors, overrides
from uvtrain.checkpoints import read_checkpoint
from uvtrain.config import changed_settings
from uvtrain.engine import split_parameters
from uvtrain.errors import ConfigError, UvtrainError
from uvtrain.fit import Checkpoint, Federation, MetricsLog, PrivacyLedger, Rounds, fit
from uvtrain.io import (
    BUNDLE,
    CHECKPOINT,
    CONFIG,
    METRICS,
    REPORT,
    STATUS,
    read_json,
    write_json,
)
from uvtrain.privacy import PrivateSum, mechanism_from_plan, secret_noise
from uvtrain.rounds import (
    Aggregator,
    ClientUpdates,
    LocalTraining,
    RoundPlan,
    RoundResult,
    WeightedMean,
    period_cohort,
    poisson_cohort,
    round_metrics,
    sample_cohort,
)
from uvtrain.server_optimizers import ServerOptimizer

from .dp import (
    LEDGER,
    FlowerPrivacy,
    can_release,
    check_rounds,
    min_survivors,
    released,
    skip_probability,
)
from .dp import plan as plan_privacy
from .errors import DeploymentError
from .registry import DeviceRoster
from .rounds import FlowerSecAggPlus, Replies, RoundLines
from .settings import DeploySettings, build_model, message_spec, pack, to_arrays, unpack

#: ``report.json``'s ``evaluation`` and the run's last line: why ``splits`` is empty, and where
#: the model is measured instead (issue 47: an empty ``splits`` and no word).
NOT_EVALUATED = (
    "not evaluated here: the server holds no labelled data, so report.json has no EERs and no "
    "at-chance check was made. Measure the model where people's clips are: uvsdk verify on "
    "the devices (each is enrolled with it), or uvexport calibrate on people of your own"
)


class FederatedServer(DeviceRoster, Federation):
    """One Flower run of one method (see the module's docstring): the run's
    :class:`~uvtrain.fit.Federation`, its rounds' local training (the devices) and their
    schedule (:meth:`plan`), run by :func:`uvtrain.fit.fit`."""

    def __init__(self, settings: DeploySettings, grid: Any, context: Any, echo: Any = print):
        self.settings, self.grid, self.context, self.echo = settings, grid, context, echo
        self.config = settings.run
        self.algorithm: FedAvg = settings.run.method
        self.folder = Path(settings.out).expanduser()
        self.code = None
        if "codeword" in self.algorithm.device_secrets:  # sent to the devices at registration
            from uvtrain.codes import bch_code

            self.code = bch_code(self.config.method.code_length)
        self.secure = settings.secure
        if self.secure and overrides(self.algorithm, "aggregate"):
            raise ConfigError(f"{self.config.method.name}'s aggregation cannot run under SecAgg+")
        self.secagg = (
            FlowerSecAggPlus(
                grid,
                context,
                settings.num_shares,
                settings.reconstruction_threshold,
                timeout=settings.round_seconds,
            )
            if self.secure
            else None
        )
        self.aggregator: Aggregator = self.secagg or WeightedMean(self.algorithm)
        self.dp: FlowerPrivacy | None = None  # planned after registration (run)
        #: how the aggregate is applied to the global model, as in the simulator
        self.server_optimizer = ServerOptimizer.from_schedule(self.config.schedule)
        self.postprocess = []  # the devices clip (and noise) their own updates
        self.round = 0

    # -- the rounds ----------------------------------------------------------------------------

    def cohort(self, round_number: int, nodes: list[int]) -> list[int]:
        """The round's devices, drawn from ``(seed, round)`` as the simulator draws clients:
        under DP each device with probability ``q`` (:func:`~uvtrain.rounds.poisson_cohort`), or
        under a participation rule the period's next devices (:func:`~uvtrain.rounds.
        period_cohort`; each device also refuses a second round in a period)."""
        count = self.settings.cohort_size(len(nodes))
        if self.secure and len(nodes) < self.settings.min_cohort:
            raise DeploymentError(
                f"{len(nodes)} device(s): a secure round needs min_cohort = "
                f"{self.settings.min_cohort} (a sum over fewer reveals too much)"
            )
        if self.dp is not None and self.dp.plan.capped:
            period = self.dp.plan.sampling_period
            picked = period_cohort(self.config.seed, round_number, len(nodes), count, period)
        elif self.dp is not None:
            rate = self.dp.plan.sampling_rate
            picked = poisson_cohort(self.config.seed, round_number, len(nodes), rate)
        else:
            picked = sample_cohort(self.config.seed, round_number, len(nodes), count)
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
            **(self.dp.instructions() if self.dp is not None else {"dp": "off"}),
        }
        return FitIns(ndarrays_to_parameters(to_arrays(self.params)), config)

    def _send(self, instructions: list[tuple[int, FitIns]], round_number: int) -> Replies:
        """A plain round: each device's FitIns out, its update θ_k − θ, count and metrics back."""
        messages = [
            Message(
                compat.fitins_to_recorddict(fitins, True),
                dst_node_id=node,
                message_type="train",
                group_id=str(round_number),
            )
            for node, fitins in instructions
        ]
        replies = Replies()
        for reply in self.grid.send_and_receive(messages, timeout=self.settings.round_seconds):
            node = reply.metadata.src_node_id
            if reply.has_error():
                replies.failures.append(f"device {node}: {reply.error.reason}")
                continue
            fitres = compat.recorddict_to_fitres(reply.content, False)
            if fitres.status.code != Code.OK:
                replies.failures.append(f"device {node}: {fitres.status.message}")
                continue
            replies.updates.append(parameters_to_ndarrays(fitres.parameters))
            replies.node_ids.append(node)
            replies.counts.append(int(fitres.num_examples))
            replies.metrics.append(dict(fitres.metrics))
        return replies

    def train(self, plan: RoundPlan, fused: Aggregator | None) -> ClientUpdates:
        """The round's local training (:class:`uvtrain.rounds.LocalTraining`), done by the
        plan's devices: send each its instructions, collect the replies, and hand run_round the
        per-device updates θ_k − θ (plain rounds) or the new parameters SecAgg+ aggregated
        (secure rounds: ``fused`` must be the round's aggregator: SecAgg+, or under DP the
        mechanism's server half, which takes the sum SecAgg+ unmasked)."""
        nodes = [self.node_of_row[int(row)] for row in plan.clients]
        instructions = [(node, self._fit_ins(node, plan.number, plan.lr)) for node in nodes]
        dp = self.dp
        secagg = self.secagg
        mean: list[np.ndarray] | None = None
        if self.secure:
            if fused is None or secagg is None:
                raise DeploymentError(
                    f"round {plan.number}: a secure round aggregates inside SecAgg+ as the "
                    "devices train; it cannot run with another aggregator or postprocessing"
                )
            if dp is not None:  # every device weighs the same: each reports one sample
                range_ = dp.quantization_range()
                replies, mean = secagg.collect(instructions, plan.number, 1.0, range_)
            else:  # the weights are sample counts: room for the largest device's
                max_weight = float(max(self.samples[node] for node in nodes)) * 1.01
                replies, mean = secagg.collect(instructions, plan.number, max_weight)
        else:
            replies = self._send(instructions, plan.number)
        if replies.failures or len(replies.node_ids) < len(nodes):
            missing = len(nodes) - len(replies.node_ids)
            detail = replies.failures[0] if replies.failures else "no reply"
            if dp is not None and mean is not None and len(replies.node_ids) >= dp.survivors:
                # SecAgg+ finished with the survivors: their sum carries at least the full noise
                self.echo(
                    f"round {plan.number}: {missing} of {len(nodes)} device(s) dropped out "
                    f"({detail}); the sum of the other {len(replies.node_ids)} is released"
                )
            else:
                raise DeploymentError(
                    f"round {plan.number}: {missing} of {len(nodes)} device(s) failed "
                    f"({detail}); stopped (the last checkpoint is intact)"
                )
        if self.secure and mean is None:
            raise DeploymentError(
                f"round {plan.number}: the aggregation did not complete (secure aggregation "
                "halted, see the server log); the model did not change: stopped"
            )
        messages = self._read_replies(replies, plan.number)
        counts = torch.tensor(replies.counts, dtype=torch.float64)
        losses = torch.tensor([[float(m["loss"])] for m in replies.metrics], dtype=torch.float64)
        updates = ClientUpdates(
            clients=torch.tensor([self.rows[node] for node in replies.node_ids]),
            weights=torch.tensor(replies.counts, dtype=torch.float32),
            losses=losses,
            # the deployment reports the sample-weighted mean of the devices' losses
            metrics={"loss": float((counts * losses[:, 0]).sum() / counts.sum())},
        )
        names = sorted(self.params)
        if dp is not None:
            self._private_sum(dp, updates, replies, mean, plan.number)
        elif mean is not None:
            updates.aggregate = {
                name: value + torch.from_numpy(np.array(mean[i])).to(value.dtype)
                for i, (name, value) in enumerate(sorted(self.params.items()))
            }
        else:
            updates.deltas = {
                name: torch.stack([torch.from_numpy(np.array(u[i])) for u in replies.updates])
                for i, name in enumerate(names)
            }
        if self.message_spec:
            updates.messages = {k: torch.stack([m[k] for m in messages]) for k in self.message_spec}
        return updates

    def _read_replies(self, replies: Replies, round_number: int) -> list[Tensors]:
        """Every device's reply checked before the round uses any of it, and its message read
        bounded: its sample count (1 to the count it registered: a larger one would outweigh
        the others in the mean), its loss (a finite number), its update (plain rounds: the
        parameters' shapes, plus the clipping bit under adaptive DP) and its message (exactly
        the arrays the method's message can hold, :func:`~uvdeploy.settings.unpack`, never
        inflated past them). A device's reply that is not refuses the round in one line: a
        plain round's weights, a secure round's sum and a DP round's accounting all count the
        device, so it cannot be left out (docs/deploy.md, "Malicious devices").

        Returns each reply's message (empty for a method whose devices send none)."""
        names = sorted(self.params)
        adaptive = self.dp is not None and self.dp.mechanism.underlying.adaptive is not None
        messages = []
        for index, node in enumerate(replies.node_ids):
            what = f"round {round_number}: device {node}'s reply"
            try:
                count, metrics = replies.counts[index], replies.metrics[index]
                if not 1 <= count <= self.samples[node]:
                    raise DeploymentError(
                        f"{what}: {count} samples, registered {self.samples[node]}"
                    )
                loss = metrics.get("loss")
                if not isinstance(loss, int | float) or not np.isfinite(loss):
                    raise DeploymentError(f"{what}: its loss is not a finite number")
                if not self.secure:  # under SecAgg+ no update is seen alone
                    self._check_update(replies.updates[index], names, adaptive, what)
                if self.message_spec and "message" not in metrics:
                    raise DeploymentError(f"{what}: no message ({self.config.method.name})")
                if "message" in metrics and not self.message_spec:
                    raise DeploymentError(
                        f"{what}: a message ({self.config.method.name}'s devices send none)"
                    )
                blob = metrics.get("message", b"")
                spec = self.message_spec
                messages.append(unpack(blob, spec, f"{what}'s message") if spec else {})
            except DeploymentError as error:
                raise DeploymentError(
                    f"{error}: refused; stopped (the last checkpoint is intact)"
                ) from None
        return messages

    def _check_update(
        self, update: list[np.ndarray], names: list[str], adaptive: bool, what: str
    ) -> None:
        """A plain update: one array per parameter in name order, each of its shape (and the
        clipping bit, one number, under adaptive DP)."""
        expected = [tuple(self.params[name].shape) for name in names] + [(1,)] * adaptive
        shapes = [tuple(np.shape(array)) for array in update]
        if shapes != expected:
            raise DeploymentError(
                f"{what}: an update of {len(update)} array(s) that are not the model's "
                f"{len(expected)} (shapes differ)"
            )
        if any(np.asarray(array).dtype.kind != "f" for array in update):
            raise DeploymentError(f"{what}: an update that is not floating point")

    def _private_sum(
        self,
        dp: FlowerPrivacy,
        updates: ClientUpdates,
        replies: Replies,
        mean: list[np.ndarray] | None,
        round_number: int,
    ) -> None:
        """What a DP round hands the mechanism's server half (:class:`PrivateSum`): the
        survivors' sum SecAgg+ unmasked (its mean over the ``m′`` survivors times ``m′``: secure)
        or the devices' updates clipped again with the mechanism's own clipping (plain, central:
        the server holds the bound itself), and the devices' bits (adaptive clipping: the last
        array); the release is counted in the ledger first."""
        names = sorted(self.params)
        survivors = len(replies.node_ids)
        adaptive = dp.mechanism.underlying.adaptive is not None
        expected = len(names) + int(adaptive)
        dp.record(survivors, round_number)
        updates.metrics["survivors"] = survivors
        if mean is not None:
            if len(mean) != expected:
                raise DeploymentError(f"round {round_number}: {len(mean)} arrays, not {expected}")
            sums = [np.asarray(array, dtype=np.float64) * survivors for array in mean]
            updates.total = {
                name: torch.from_numpy(sums[i]).to(self.params[name].dtype)
                for i, name in enumerate(names)
            }
            bits = [float(sums[-1].reshape(-1)[0])] if adaptive else None
        else:  # each update's arrays were checked by _read_replies
            stacked = {
                name: torch.stack([torch.from_numpy(np.array(u[i])) for u in replies.updates])
                for i, name in enumerate(names)
            }
            updates.deltas = dp.mechanism.underlying.clip(stacked)
            bits = [float(np.asarray(u[-1]).reshape(-1)[0]) for u in replies.updates]
        if adaptive:
            updates.clip_bits = torch.tensor(bits, dtype=torch.float64)

    def plan(self, round_number: int) -> RoundPlan:
        """Round ``round_number``'s devices (:meth:`cohort` of the registered ones) as their
        rows, and its learning rate."""
        cohort = self.cohort(round_number, sorted(self.rows))
        rows = np.array([self.rows[node] for node in cohort], dtype=np.int64)
        return RoundPlan(round_number, rows, self.config.schedule.learning_rate(round_number))

    def advance(
        self, plan: RoundPlan, local: LocalTraining, aggregator: Aggregator | None = None
    ) -> RoundResult:
        """One round (:meth:`Federation.advance`); a DP round whose cohort is too small to
        release a sum of ``m_min`` is skipped (:meth:`_skip`)."""
        survivors = None if self.dp is None else self.dp.survivors
        if survivors is not None and not can_release(self.settings, survivors, len(plan.clients)):
            return self._skip(plan)
        return super().advance(plan, local, aggregator)

    def accept(self, plan: RoundPlan, result: RoundResult) -> None:
        """The check that the model changed and stayed finite: a round that "succeeds" without
        training stops the run (the federation keeps its state)."""
        change = [(result.params[k] - v).abs() for k, v in self.params.items()]
        if not all(bool(torch.isfinite(c).all()) for c in change):
            raise DeploymentError(f"round {plan.number}: the aggregated update is not finite")
        largest = max(float(c.max()) for c in change)
        if largest == 0.0:
            raise DeploymentError(f"round {plan.number}: the model did not change: stopped")
        result.metrics.update(secure=self.secure, update_max_abs=largest)

    def _skip(self, plan: RoundPlan) -> RoundResult:
        """A DP round too small to release anything: nothing is sent or released, the model
        stays, and the round still counts in ε."""
        assert self.dp is not None
        number, sampled = plan.number, len(plan.clients)
        self.echo(
            f"round {number}: {sampled} device(s) sampled, fewer than the "
            f"{self.dp.survivors} a release needs: nothing released (the round counts in ε)"
        )
        metrics = round_metrics(
            plan,
            float("nan"),
            0.0,
            {
                "clients": 0,
                "sampled": sampled,
                "skipped": True,
                "survivors": 0,
                "clip_norm": self.dp.clip_norm,
                "epsilon": self.dp.plan.spent_release(number),
                "epsilon_server": self.dp.plan.spent_server(number),
                "secure": self.secure,
                "update_max_abs": 0.0,
            },
        )
        self.round = number
        nobody = torch.zeros(0, dtype=torch.long)
        updates = ClientUpdates(nobody, torch.zeros(0), torch.zeros(0, 1))
        return RoundResult(self.params, self.shared, updates, metrics)

    # -- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The federation's state (:meth:`Federation.state_dict`), the run's roster of user ids
        and, under DP, the mechanism's and the ledger's."""
        state = {**super().state_dict(), "roster": list(self.roster)}
        if self.dp is not None:
            state["privacy"] = self.dp.state_dict()
        return state

    def _resume(self) -> tuple[int, list[int] | None, dict[str, Any] | None]:
        config = self.settings.to_dict()
        checkpoint = self.folder / CHECKPOINT
        if not checkpoint.exists():
            return 0, None, None
        previous = read_json(self.folder / CONFIG)
        # the run's settings, but for the deployment's own (waits, where it writes, its export);
        # a DP run's rounds are checked by check_rounds
        own = ("wait_seconds", "round_seconds", "min_devices", "export", "sign_key", "out")
        differing = changed_settings(config, previous, also_free=own)
        if differing:
            raise ConfigError(
                f"{self.folder} holds a run with other settings ({', '.join(differing)})"
            )
        check_rounds(self.settings, previous, self.folder)
        state = read_checkpoint(checkpoint)
        return int(state["round"]), [int(u) for u in state["roster"]], state

    # -- the run -------------------------------------------------------------------------------

    def _plan_privacy(self, state: dict[str, Any] | None) -> None:
        """The run's DP mechanism (:mod:`uvdeploy.dp`), planned for the roster before round 1,
        with the clip norm the checkpoint kept; refused when the budget cannot hold or when a
        noisy aggregate was released after the checkpoint (running its round again would spend
        more than planned)."""
        if self.settings.mechanism == "off":
            return
        users = len(self.roster)
        if len(self.rows) < users:
            raise DeploymentError(
                f"a DP run draws its cohorts from the {users} devices it was planned for; "
                f"{len(self.rows)} of them are connected (its sampling rate would change)"
            )
        plan = plan_privacy(self.settings, users)
        assert plan is not None
        cohort = self.settings.cohort_size(users)
        survivors = min_survivors(self.settings, cohort)
        secure = self.secagg
        mechanism = mechanism_from_plan(plan, secret_noise, survivors)
        dp = FlowerPrivacy(mechanism, survivors, self.folder / LEDGER)
        if state is not None:
            if "privacy" not in state:
                raise ConfigError(f"{self.folder / CHECKPOINT} holds no DP state")
            dp.load_state_dict(state["privacy"])
        if released(self.folder) > dp.releases:
            raise DeploymentError(
                f"{self.folder}: a noisy aggregate was released after the last checkpoint "
                f"(round {dp.releases + 1} did not complete); running it again would spend more "
                "than the planned ε: start a new run folder"
            )
        if secure is not None:  # SecAgg+ unmasks no sum of fewer than m_min devices
            secure.reconstruction_threshold = float(survivors)
        self.dp = dp
        self.aggregator = PrivateSum(mechanism)  # the server half over the devices' sum
        skip = (
            float(cohort < survivors)
            if plan.capped
            else skip_probability(users, plan.sampling_rate, survivors)
        )
        shares = f", sums of >= {survivors} devices" if secure is not None else ""
        self.echo(
            f"{plan.describe()}{shares}; a round releases nothing when fewer than {survivors} "
            f"are sampled: P = {skip:.2g} a round"
        )

    def run(self) -> dict[str, Any]:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self.folder / STATUS, {"state": "running"})
        start_round, roster, state = self._resume()
        write_json(self.folder / CONFIG, self.settings.to_dict())
        nodes = self.wait_for_devices()
        self.rows = self.register(nodes, roster)
        if not self.rows:
            raise DeploymentError("no device of this run's roster is connected")
        self.node_of_row = {row: node for node, row in self.rows.items()}
        model = build_model(self.settings, len(self.roster))
        self.params, self.buffers = split_parameters(model)
        dim = int(model.backbone.embedding_dim)
        generator = torch.Generator().manual_seed(self.config.seed)
        self.algorithm.init_private(len(self.roster), dim, generator)  # the simulator's draws
        constants = {"index": torch.arange(len(self.roster))}
        self.shared = self.algorithm.init_shared(len(self.roster), dim, generator, constants)
        #: what a device's message can be: every reply is bounded by it (_read_replies)
        self.message_spec = message_spec(self.algorithm, self.shared, dim)
        if state is not None:
            self.load_state_dict(state)
            self.echo(f"resumed at round {start_round}")
        self._plan_privacy(state)
        mode = "SecAgg+" if self.secure else "plain FedAvg"
        rounds = self.config.schedule.rounds
        self.echo(f"{self.config.method.name}: {rounds} rounds, {mode}")
        ledger = None if self.dp is None else PrivacyLedger(self.dp.plan)
        # a DP run keeps every round: a round resumed twice would be released twice
        every = 1 if self.dp is not None else self.config.checkpoint_every
        callbacks = [
            MetricsLog(self.folder / METRICS),
            Checkpoint(self.folder / CHECKPOINT, self.state_dict, every),
            RoundLines(self.echo, rounds, ledger),
        ]
        done = fit(self, self, Rounds(rounds, self.plan), callbacks)
        seconds, rounds_done = done.seconds, done.last - done.first
        enrolled = self.finish(model) if self.settings.export else {}
        report = {
            "method": self.config.method.name,
            "dataset": "flower",
            "rounds": self.config.schedule.rounds,
            "splits": {},  # what a simulated run measures; the server has no labelled data
            "evaluation": NOT_EVALUATED,
            "warmup": {"target_tpr": self.config.target_tpr, **enrolled},
            "leakage": None,
            "privacy": self._privacy_report(),
            "throughput": {
                **done.throughput("flower"),
                "rounds_per_s": rounds_done / seconds if rounds_done else None,
            },
            "deployment": {
                "devices": len(self.rows),
                "secure_aggregation": self.secure,
                "bundle": BUNDLE if self.settings.export else None,
            },
        }
        write_json(self.folder / REPORT, report)
        write_json(
            self.folder / STATUS, {"state": "finished", "rounds": self.config.schedule.rounds}
        )
        self.echo(f"finished: {self.folder / REPORT}")
        self.echo(f"note: {NOT_EVALUATED}")
        return report

    def _privacy_report(self) -> dict[str, Any] | None:
        """``report.json``'s ``privacy``: the plan's, with the fewest survivors a round needs."""
        if self.dp is None:
            return None
        return {**self.dp.plan.report(), "min_survivors": self.dp.survivors}

    def finish(self, model: torch.nn.Module) -> dict[str, Any]:
        """Export the final model, its manifest's ``training`` stating the run's privacy and
        the enrollment mode that follows (:func:`uvexport.provenance.run_training`: prototype,
        as nothing is measured on the server), and have every device enroll with it."""
        from uvexport.export import export_model
        from uvexport.provenance import run_training

        with torch.no_grad():
            for name, value in model.named_parameters():
                if name in self.params:
                    value.copy_(self.params[name])
        sign_key = None
        if self.settings.sign_key:
            from uvexport.bundle import load_signing_key

            sign_key = load_signing_key(self.settings.sign_key)
        inputs = self.settings.input.probe_inputs(np.random.default_rng(self.config.seed))
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
            "training": run_training(
                {"privacy": self._privacy_report()}, self.config.method.name, model.output_kind
            ),
        }
        result = export_model(
            model,
            self.folder / BUNDLE,
            source=self.settings.input,
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


def _echo(line: str) -> None:
    print(f"[uvtrain] {line}", flush=True)


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """The ServerApp's entry: run, and leave ``status.json`` saying how it ended."""
    out = Path(str(context.run_config.get("out", "runs/flower"))).expanduser()
    try:
        settings = DeploySettings.from_run_config(context.run_config)
        if settings.centre_bundle:  # no training: the devices' chain mean (uvdeploy.centre)
            from .centre import CentreServer

            CentreServer(settings, grid, context, echo=_echo).run()
        else:
            FederatedServer(settings, grid, context, echo=_echo).run()
    except Exception as error:
        out.mkdir(parents=True, exist_ok=True)
        message = str(error) if isinstance(error, UvtrainError) else repr(error)
        write_json(out / STATUS, {"state": "failed", "error": message.splitlines()[0]})
        _echo(f"error: {message}")
        raise
