"""The simulation engine: FedAvg rounds with the round's clients trained together.

Three interchangeable local-update paths compute the same maths:

- **batched** (chosen automatically for one local step with FedAvg aggregation, sample-weighted
  or the plain mean): one SGD step of each client from the same θ, averaged with weights w_k, is
  ``Σ w_k (θ − η ∇L_k(θ)) = θ − η ∇(Σ w_k L_k)(θ)``, so a single forward/backward over all the
  round's samples gives the aggregate exactly (the model treats samples independently:
  GroupNorm, no batch statistics); private parameters get their own client's gradient
  ``∇_{p_k} L_k``;
- **vmap** (several local steps): the round's clients' parameters are stacked and one
  ``torch.func.vmap(grad_and_value(loss))`` call does every client's SGD step at once, in chunks of
  ``chunk_size`` clients — on CUDA when present, else on the CPU. With ``local_epochs`` clients
  take ``E · ⌈n_k / B⌉`` steps each and an epoch's last batch may be smaller: step ``s`` runs one
  vmapped call per batch size among the clients that still have an ``s``-th batch, and leaves
  the finished ones as they are;
- **loop**: a plain Python loop over clients with ``torch.autograd.grad`` — the reference the
  others are tested against.

Everything random is derived from ``(seed, round)``: which clients a round samples and which
batches they draw. A run resumed from a checkpoint therefore continues exactly as if it had never
stopped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from .aggregators import make_aggregator
from .algorithms.base import FedAvg, Tensors, overrides
from .batches import (
    HostSamples,
    client_samples,
    draw_batches,
    epoch_batches,
    flip_and_rotate,
)
from .config import Schedule, changed_settings
from .errors import ConfigError, TrainingError
from .fit import Federation
from .rounds import (
    Aggregator,
    ClientUpdates,
    RoundPlan,
    RoundResult,
    UpdateStep,
    check_finite,
    gather,
    period_cohort,
    poisson_cohort,
    round_metrics,
    sample_cohort,
    scatter,
)
from .server_optimizers import ServerOptimizer

#: Samples per forward/backward pass of the batched step on a CPU (measured fastest for the
#: default audio network on 2 cores: 1,821 samples/s at 128 against 1,466 at 256).
MICRO_BATCH = 128


@dataclass(frozen=True)
class EngineConfig(Schedule):
    """A run's :class:`~uvtrain.config.Schedule` (its fields, their checks and
    :meth:`~uvtrain.config.Schedule.learning_rate`) and how the simulator runs it: ``seed`` (every
    draw follows from ``(seed, round)``), ``chunk_size`` (clients per vectorised call),
    ``vectorised`` and ``batched`` (the local-update paths of this module's docstring; the maths
    is the same), ``crop`` (> 0: each training sample is a random window of this many steps,
    audio) and ``augment`` (images: each training sample randomly flipped and rotated,
    :func:`flip_and_rotate`)."""

    seed: int = 0
    chunk_size: int = 64
    vectorised: bool = True
    batched: bool = True  # use the exact one-pass step when it applies (E = 1, FedAvg mean)
    crop: int = 0
    augment: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.chunk_size < 1:
            raise ConfigError(f"chunk_size must be >= 1, not {self.chunk_size}")
        if self.crop < 0:
            raise ConfigError(f"crop must be >= 0, not {self.crop}")


def pick_device(name: str = "auto") -> torch.device:
    """``auto``: CUDA when available, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise TrainingError("--device cuda was asked for, but CUDA is not available here")
    if name not in ("cpu", "cuda"):
        raise TrainingError(f"unknown device {name!r}: auto, cpu or cuda")
    return torch.device(name)


def loss_shared(algorithm: FedAvg, params: Tensors, shared: Tensors) -> Tensors:
    """The server's shared state plus the model parameters the loss reads (softmax's W)."""
    if not algorithm.loss_reads_model:
        return shared
    return {**shared, **{name: params[name] for name in algorithm.loss_reads_model}}


def local_update(
    model: nn.Module,
    buffers: Tensors,
    algorithm: FedAvg,
    params: Tensors,
    private: Tensors,
    constants: Tensors,
    shared: Tensors,
    batches: Tensor,
    lr: float,
) -> tuple[Tensors, Tensors, Tensor]:
    """One client's local training: an SGD step of ``algorithm.loss`` on each of its batches
    (``[E, B, ...]``), from the global ``params`` and its own ``private`` state.

    Returns the client's parameters, its private state and its E losses. This is the reference
    the simulator's vectorised paths are tested against, and what a Flower device runs.
    """
    params = {k: v.detach().clone() for k, v in params.items()}
    private = {k: v.detach().clone() for k, v in private.items()}
    losses = []
    for batch in batches:
        leaves = {**{f"p.{k}": v for k, v in params.items()}}
        leaves.update({f"q.{k}": v for k, v in private.items()})
        for value in leaves.values():
            value.requires_grad_(True)
        outputs = functional_call(model, (params, buffers), (batch,))
        loss = algorithm.loss(outputs, private, constants, loss_shared(algorithm, params, shared))
        grads = torch.autograd.grad(loss, list(leaves.values()))
        updated = {
            k: (v - lr * g).detach() for (k, v), g in zip(leaves.items(), grads, strict=True)
        }
        params = {k: updated[f"p.{k}"] for k in params}
        private = {k: updated[f"q.{k}"] for k in private}
        losses.append(loss.detach())
    return params, private, torch.stack(losses)


def check_schedule(config: EngineConfig, saved: dict[str, Any]) -> None:
    """Refuse to resume a checkpoint made with another schedule (:func:`changed_settings`: the
    rounds may grow, and the local-update path does not change the maths). A setting added since
    the checkpoint was written counts as its default there."""
    if changed_settings(asdict(config), saved, asdict(EngineConfig())):
        raise TrainingError("the checkpoint was made with another schedule: use a new run folder")


def split_parameters(model: nn.Module) -> tuple[Tensors, Tensors]:
    """``(params, buffers)`` of a model for ``functional_call``: the trainable parameters (copied:
    what is trained, sent and averaged) and everything else. Parameters with
    ``requires_grad=False`` (a frozen pretrained encoder) are passed like buffers."""
    params = {
        name: value.detach().clone()
        for name, value in model.named_parameters()
        if value.requires_grad
    }
    buffers: Tensors = dict(model.named_buffers())
    buffers.update(
        (name, value.detach())
        for name, value in model.named_parameters()
        if not value.requires_grad
    )
    return params, buffers


@torch.no_grad()
def model_outputs(
    model: nn.Module,
    buffers: Tensors,
    device: torch.device,
    samples: Sequence[Any],
    params: Tensors,
    batch_size: int = 256,
) -> np.ndarray:
    """``model``'s outputs for many samples under ``params``, in batches on ``device``.
    ``samples`` is anything with a length whose slices are arrays: an array, a tensor, a memory
    map, or :class:`uvtrain.evaluation.scoring.JoinedRows` (every client's rows, read a batch at
    a time)."""
    pieces = []
    for start in range(0, len(samples), batch_size):
        batch = torch.as_tensor(samples[start : start + batch_size]).to(device)
        pieces.append(functional_call(model, (params, buffers), (batch,)).float().cpu())
    return torch.cat(pieces).numpy() if pieces else np.zeros((0, 0), np.float32)


class GlobalModel:
    """What every engine offers on its global model: load it into the module, run it in batches.
    Needs ``self.model``, ``self.params``, ``self.buffers`` and ``self.device``."""

    model: nn.Module
    params: Tensors
    buffers: Tensors
    device: torch.device

    def load_into_model(self) -> nn.Module:
        """The model with the current global parameters (for evaluation and export)."""
        with torch.no_grad():
            for name, value in self.model.named_parameters():
                if name in self.params:
                    value.copy_(self.params[name])
        return self.model

    def outputs(
        self, samples: Sequence[Any], batch_size: int = 256, params: Tensors | None = None
    ) -> np.ndarray:
        """Model outputs for many samples under the global parameters or under ``params``
        (FedFace's candidate aggregates): :func:`model_outputs`."""
        params = self.params if params is None else params
        return model_outputs(self.model, self.buffers, self.device, samples, params, batch_size)

    #: the run's differential privacy (:class:`uvtrain.privacy.PrivacyPlan`), ``None``: off
    privacy: Any = None
    #: whether training samples stay on disk between rounds (:class:`HostSamples`)
    streams: bool = False

    # -- what the run's evaluation and report ask of every trainer -------------------------------

    def evaluation_dataset(self, dataset: Any) -> Any:
        """The view of the run's dataset it is scored on (all of it, unless the trainer holds
        people back, as the cross-silo validators)."""
        return dataset

    def report_extra(self, dataset: Any, folder: Any, seed: int) -> dict[str, Any]:
        """Sections the trainer adds to ``report.json`` (and figures beside it): none here."""
        return {}

    @staticmethod
    def summary(report: dict[str, Any]) -> list[str]:
        """Lines the command line prints after the run's scores (from its ``report.json``):
        none here."""
        return []


class Simulation(GlobalModel, Federation):
    """Federated training of one algorithm over simulated clients.

    Parameters
    ----------
    algorithm:
        A :class:`~uvtrain.algorithms.base.FedAvg` (sub)class instance.
    backbone:
        The network that makes embeddings; the algorithm adds its head.
    client_data:
        One array of training samples per client (all of one sample shape). Memory-mapped
        arrays (a stream folder, :mod:`uvtrain.data.stream`) stay on the host and only each
        round's drawn batches move to ``device``; the others move to ``device`` whole, once.
    config:
        The schedule.
    device:
        Where to train.
    privacy:
        The run's differential privacy (:class:`uvtrain.privacy.PrivacyPlan`), ``None``: off.
        Its mechanism (:class:`uvtrain.privacy.UserLevelDP`, noise from ``(seed, round,
        client)``) runs as the per-client postprocessing (its user half) and the aggregator
        (its server half over the plain sum); cohorts are then Poisson-sampled.
    lengths:
        Per client, the signal length of each of its audio samples kept whole (zero-padded
        rows: :class:`uvtrain.data.base.ClientData` ``lengths``), or ``None``; each training
        window is then a random crop within the signal.
    """

    def __init__(
        self,
        algorithm: FedAvg,
        backbone: nn.Module,
        client_data: Sequence[np.ndarray],
        config: EngineConfig,
        device: torch.device | str = "cpu",
        privacy: Any = None,
        lengths: Sequence[np.ndarray | None] | None = None,
    ) -> None:
        self.algorithm, self.config = algorithm, config
        self.device = torch.device(device)
        self.num_clients = len(client_data)
        torch.manual_seed(config.seed)  # the model's initial weights
        self.model = algorithm.build_model(backbone, self.num_clients).to(self.device).eval()
        self.params, self.buffers = split_parameters(self.model)
        self.data = [client_samples(samples, self.device) for samples in client_data]
        self.streams = any(isinstance(samples, HostSamples) for samples in self.data)
        self.lengths = list(lengths) if lengths is not None else [None] * len(self.data)
        self.sizes = torch.tensor([len(samples) for samples in client_data], dtype=torch.float32)
        dim = self.embedding_dim = int(backbone.embedding_dim)
        generator = torch.Generator().manual_seed(config.seed)
        self.private = algorithm.init_private(self.num_clients, dim, generator)
        self.constants = algorithm.init_constants(self.num_clients, dim, config.seed)
        self.shared = algorithm.init_shared(self.num_clients, dim, generator, self.constants)
        self.private, self.constants, self.shared = (
            {k: v.to(self.device) for k, v in group.items()}
            for group in (self.private, self.constants, self.shared)
        )
        self.round = 0
        #: how the server combines the round's updates, and the per-client postprocessing of
        #: the updates before it (:mod:`uvtrain.rounds`)
        self.aggregator: Aggregator = make_aggregator(config.aggregation, algorithm)
        self.postprocess: list[UpdateStep] = []
        #: how the server applies the aggregate to the global model (plain FedAvg unless the
        #: schedule asks for another: :mod:`uvtrain.server_optimizers`)
        self.server_optimizer = ServerOptimizer.from_schedule(config)
        self.privacy = privacy
        self.mechanism = None
        if privacy is not None:
            from .privacy import PrivateSum, PrivateUsers, mechanism_from_plan, seeded_noise

            self.mechanism = mechanism_from_plan(privacy, seeded_noise(config.seed))
            self.postprocess = [PrivateUsers(self.mechanism)]
            self.aggregator = PrivateSum(self.mechanism)
        #: whether vmap can train this model here (cuDNN's LSTM cannot): decided once
        self._vmap_runs = vmap_runs(self.model, self.device)
        self._local_vmapped = vmap(
            grad_and_value(self._client_loss, argnums=(0, 1)), in_dims=(0, 0, 0, 0, None)
        )

    # -- the maths of one client ---------------------------------------------------------------

    def _client_loss(
        self, params: Tensors, private: Tensors, batch: Tensor, constants: Tensors, shared: Tensors
    ) -> Tensor:
        outputs = functional_call(self.model, (params, self.buffers), (batch,))
        return self.algorithm.loss(
            outputs, private, constants, loss_shared(self.algorithm, params, shared)
        )

    # -- what a round samples ------------------------------------------------------------------

    def clients_of_round(self, round_number: int) -> np.ndarray:
        """The ε·K clients of a round: drawn without replacement from ``(seed, round)``, or the
        next ε·K in order (round-robin); under differential privacy (``privacy``, the plan) each
        client with probability ``q`` (:func:`~uvtrain.rounds.poisson_cohort`), or under its
        participation rule the period's next ``m`` (:func:`~uvtrain.rounds.period_cohort`)."""
        if self.privacy is not None and self.privacy.capped:
            period, count = self.privacy.sampling_period, self.privacy.cohort
            return period_cohort(self.config.seed, round_number, self.num_clients, count, period)
        if self.privacy is not None:
            rate = self.privacy.cohort_rate
            return poisson_cohort(self.config.seed, round_number, self.num_clients, rate)
        count = max(1, round(self.config.fraction * self.num_clients))
        if self.config.sampling == "round-robin":
            start = (round_number - 1) * count
            return np.sort(np.arange(start, start + count) % self.num_clients)
        return sample_cohort(self.config.seed, round_number, self.num_clients, count)

    def report_extra(self, dataset: Any, folder: Any, seed: int) -> dict[str, Any]:
        """``privacy`` under DP: the plan's report with ε against the server at the most rounds
        any client joined (:meth:`participations`)."""
        if self.privacy is None:
            return {}
        joined = int(self.participations(self.round).max(initial=0))
        return {"privacy": self.privacy.report(joined)}

    def participations(self, rounds: int) -> np.ndarray:
        """``[K]`` how many of rounds ``1..rounds`` each client joined, by the selection
        (:meth:`clients_of_round`, a function of ``(seed, round)``): what the server that drew
        the cohorts knows (:func:`uvtrain.accounting.epsilon_server`)."""
        joined = np.zeros(self.num_clients, dtype=np.int64)
        for round_number in range(1, rounds + 1):
            joined[self.clients_of_round(round_number)] += 1
        return joined

    def batches_of_round(self, round_number: int, clients: np.ndarray) -> Tensor:
        """``[m, E, B, ...]`` samples: each client's E batches, drawn from ``(seed, round)``; with
        ``crop``, each 1-D sample (audio) is cut to a random window of ``crop`` steps; with
        ``augment``, each image is randomly flipped and rotated (:func:`flip_and_rotate`; at
        training only: evaluation embeds the stored samples)."""
        rng = np.random.default_rng([self.config.seed, round_number, 1])
        steps, size = self.config.local_steps, self.config.batch_size
        batches = torch.stack(
            [
                draw_batches(
                    self.data[client], steps, size, self.config.crop, rng, self.lengths[client]
                )
                for client in clients
            ]
        )
        return flip_and_rotate(batches, rng) if self.config.augment else batches

    def epoch_batches_of_round(self, round_number: int, clients: np.ndarray) -> list[list[Tensor]]:
        """Each client's batches for ``local_epochs`` epochs over its own samples
        (:func:`epoch_batches`: ``E · ⌈n_k / B⌉`` of them, the last of each epoch smaller when
        B does not divide ``n_k``), drawn from ``(seed, round)``."""
        if self.config.local_epochs is None:
            raise TrainingError("epoch batches need local_epochs")
        rng = np.random.default_rng([self.config.seed, round_number, 1])
        epochs, size = self.config.local_epochs, self.config.batch_size
        drawn = [
            epoch_batches(
                self.data[client], epochs, size, self.config.crop, rng, self.lengths[client]
            )
            for client in clients
        ]
        if self.config.augment:
            drawn = [[flip_and_rotate(batch, rng) for batch in mine] for mine in drawn]
        return drawn

    def message_noise(self, round_number: int, count: int) -> Tensor:
        """Standard-normal noise ``[count, d]`` (``d`` the embedding's dimension) for the round's
        client messages (FedGN, FedCS), drawn from ``(seed, round)`` so a resumed run is exact."""
        rng = np.random.default_rng([self.config.seed, round_number, 2])
        noise = rng.standard_normal((count, self.embedding_dim)).astype(np.float32)
        return torch.from_numpy(noise).to(self.device)

    # -- local training ------------------------------------------------------------------------

    def _local_vectorised(
        self, clients: Tensor, batches: Tensor, lr: float
    ) -> tuple[Tensors, Tensors, Tensor]:
        stacked_params, stacked_private, losses = [], [], []
        for start in range(0, len(clients), self.config.chunk_size):
            chunk = clients[start : start + self.config.chunk_size]
            count = len(chunk)
            params = {k: v.expand(count, *v.shape).clone() for k, v in self.params.items()}
            private = {k: v[chunk].clone() for k, v in self.private.items()}
            constants = {k: v[chunk] for k, v in self.constants.items()}
            chunk_losses = []
            for step in range(self.config.local_steps):
                (grad_params, grad_private), loss = self._local_vmapped(
                    params, private, batches[start : start + count, step], constants, self.shared
                )
                params = {k: v - lr * grad_params[k] for k, v in params.items()}
                private = {k: v - lr * grad_private[k] for k, v in private.items()}
                chunk_losses.append(loss)
            stacked_params.append(params)
            stacked_private.append(private)
            losses.append(torch.stack(chunk_losses, dim=1))
        return _concat(stacked_params), _concat(stacked_private), torch.cat(losses)

    def _local_epochs_vectorised(
        self, clients: Tensor, batches: list[list[Tensor]], lr: float
    ) -> tuple[Tensors, Tensors, Tensor]:
        """Local epochs for every client at once: clients hold different numbers of samples, so
        they take different numbers of steps and their last batch of an epoch is smaller. Step
        ``s`` runs one vmapped SGD step per batch size among the clients that still have an
        ``s``-th batch (usually one group: everyone's full batch of B); finished clients are left
        as they are. Losses: each client's mean over its steps, ``[m, 1]``."""
        stacked_params, stacked_private, losses = [], [], []
        for start in range(0, len(clients), self.config.chunk_size):
            chunk = clients[start : start + self.config.chunk_size]
            count = len(chunk)
            own = batches[start : start + count]
            params = {k: v.expand(count, *v.shape).clone() for k, v in self.params.items()}
            private = {k: v[chunk].clone() for k, v in self.private.items()}
            constants = {k: v[chunk] for k, v in self.constants.items()}
            total = torch.zeros(count, device=self.device)
            steps = torch.tensor([len(mine) for mine in own], device=self.device)
            for step in range(int(steps.max())):
                groups: dict[int, list[int]] = {}
                for position, mine in enumerate(own):
                    if step < len(mine):
                        groups.setdefault(len(mine[step]), []).append(position)
                for members in groups.values():
                    batch = torch.stack([own[position][step] for position in members])
                    if len(members) == count:  # everyone: no gather, no scatter
                        (grad_params, grad_private), loss = self._local_vmapped(
                            params, private, batch, constants, self.shared
                        )
                        params = {k: v - lr * grad_params[k] for k, v in params.items()}
                        private = {k: v - lr * grad_private[k] for k, v in private.items()}
                        total = total + loss
                        continue
                    index = torch.as_tensor(members, device=self.device)
                    part_params, part_private = gather(params, index), gather(private, index)
                    (grad_params, grad_private), loss = self._local_vmapped(
                        part_params, part_private, batch, gather(constants, index), self.shared
                    )
                    params = _step_rows(params, index, part_params, grad_params, lr)
                    private = _step_rows(private, index, part_private, grad_private, lr)
                    total = total.index_add(0, index, loss)
            stacked_params.append(params)
            stacked_private.append(private)
            losses.append((total / steps)[:, None])
        return _concat(stacked_params), _concat(stacked_private), torch.cat(losses)

    def _local_batched(
        self, clients: Tensor, batches: Tensor, lr: float, weights: Tensor
    ) -> tuple[Tensors, Tensors, Tensor]:
        """One local step for every client in a single pass (exact for E = 1 and a mean of the
        clients' models with ``weights``: their sample counts, or ones for the plain mean)."""
        count, batch = batches.shape[0], batches.shape[2]
        weights = weights.to(self.device, torch.float32)
        weights = weights / weights.sum()
        params = {k: v.detach().clone().requires_grad_(True) for k, v in self.params.items()}
        private = {
            k: v[clients].detach().clone().requires_grad_(True) for k, v in self.private.items()
        }
        constants = {k: v[clients] for k, v in self.constants.items()}
        leaves = list(params.values()) + list(private.values())
        grads: list[Tensor] = [torch.zeros_like(leaf) for leaf in leaves]
        losses = []
        # Σ_k w_k ∇L_k accumulated over groups of clients of about MICRO_BATCH samples: the same
        # sum, but a CPU runs small convolutions faster per sample than one huge batch.
        group = max(1, MICRO_BATCH // batch) if self.device.type == "cpu" else count
        for start in range(0, count, group):
            part = slice(start, min(count, start + group))
            samples = batches[part, 0].reshape(-1, *batches.shape[3:])
            outputs = functional_call(self.model, (params, self.buffers), (samples,))
            outputs = outputs.reshape(-1, batch, *outputs.shape[1:])
            part_losses = vmap(self.algorithm.loss, in_dims=(0, 0, 0, None))(
                outputs,
                {k: v[part] for k, v in private.items()},
                {k: v[part] for k, v in constants.items()},
                loss_shared(self.algorithm, params, self.shared),
            )
            part_grads = torch.autograd.grad(
                (weights[part] * part_losses).sum(), leaves, allow_unused=True
            )
            for total, grad in zip(grads, part_grads, strict=True):
                if grad is not None:
                    total += grad
            losses.append(part_losses.detach())
        losses = torch.cat(losses)
        grad_params = dict(zip(params, grads[: len(params)], strict=True))
        grad_private = dict(zip(private, grads[len(params) :], strict=True))
        mean = {k: (v - lr * grad_params[k]).detach()[None] for k, v in params.items()}
        new_private = {}
        for name, value in private.items():
            # the weighted sum scaled client k's private gradient by w_k: undo it
            own_weight = weights.reshape(-1, *[1] * (value.dim() - 1))
            new_private[name] = (value - lr * grad_private[name] / own_weight).detach()
        return mean, new_private, losses.detach()[:, None]

    def client_update(
        self, client: int, batches: Tensor | Sequence[Tensor], lr: float
    ) -> tuple[Tensors, Tensors, Tensor]:
        """Client ``client``'s local training on its ``batches`` (``[E, B, ...]``, or a list of
        batches of any sizes: :meth:`epoch_batches_of_round`) from the
        global parameters and its own state, alone (:func:`local_update`): its parameters, its
        private state and its E losses — the reference path, and the update it would send."""
        return local_update(
            self.model,
            self.buffers,
            self.algorithm,
            self.params,
            {k: v[client] for k, v in self.private.items()},
            {k: v[client] for k, v in self.constants.items()},
            self.shared,
            batches,
            lr,
        )

    def _local_loop(
        self, clients: Tensor, batches: Tensor | list[list[Tensor]], lr: float
    ) -> tuple[Tensors, Tensors, Tensor]:
        all_params, all_private, all_losses = [], [], []
        for position, client in enumerate(clients.tolist()):
            params, private, losses = self.client_update(client, batches[position], lr)
            if self.config.local_epochs is not None:  # clients take different step counts
                losses = losses.mean(0, keepdim=True)
            all_params.append({k: v[None] for k, v in params.items()})
            all_private.append({k: v[None] for k, v in private.items()})
            all_losses.append(losses[None])
        return _concat(all_params), _concat(all_private), torch.cat(all_losses)

    # -- a round -------------------------------------------------------------------------------

    def plan(self, round_number: int, clients: np.ndarray | None = None) -> RoundPlan:
        """Round ``round_number``'s clients (sampled, or ``clients`` when the caller fixes the
        cohort) and learning rate."""
        if clients is None:
            clients = self.clients_of_round(round_number)
        return RoundPlan(round_number, np.asarray(clients), self.config.learning_rate(round_number))

    def step(self) -> dict[str, Any]:
        """Run the next round (:meth:`advance`); return its metrics."""
        return self.advance(self.plan(self.round + 1), self).metrics

    def next_round(
        self,
        aggregator: Aggregator | None = None,
        path: str | None = None,
        clients: np.ndarray | None = None,
    ) -> RoundResult:
        """Run the next round and keep its result: with the simulation's own aggregator and
        postprocessing, or with ``aggregator`` (the audit's SecAgg+); by the usual local-update
        path, or by ``path`` (``"loop"``: each client's update as it would send it alone); with
        the sampled cohort, or ``clients`` (the audit's fixed schedule, ``--participations``)."""
        local = self if path is None else OnePath(self, path)
        return self.advance(self.plan(self.round + 1, clients), local, aggregator)

    def advance(
        self, plan: RoundPlan, local: Any, aggregator: Aggregator | None = None
    ) -> RoundResult:
        """The round of :meth:`Federation.advance`, or, when a Poisson-sampled cohort (DP) is
        empty, :meth:`_empty_round`."""
        if len(plan.clients) == 0:
            result = self._empty_round(plan, aggregator or self.aggregator)
            self.params, self.round = result.params, plan.number
            return result
        return super().advance(plan, local, aggregator)

    def _empty_round(self, plan: RoundPlan, aggregator: Aggregator) -> RoundResult:
        """A round whose Poisson-sampled cohort is empty: no client trains or sends anything;
        the DP aggregator releases ``θ + n / (qN)``, the noise alone, and adaptive clipping moves
        on the noisy count alone (:mod:`uvtrain.privacy`). The server's shared state stays:
        no client sent it a message."""
        if self.privacy is None:
            raise TrainingError(f"round {plan.number} has no clients")
        clients = torch.zeros(0, dtype=torch.long, device=self.device)
        empty = torch.zeros(0, device=self.device)
        deltas = {k: torch.zeros(0, *v.shape, dtype=v.dtype, device=self.device)
                  for k, v in self.params.items()}  # fmt: skip
        updates = ClientUpdates(clients, empty, empty[:, None], deltas=deltas)
        for step in self.postprocess:
            updates = step(updates, self.params, plan)
        params, released = aggregator(updates, self.params, plan)
        metrics = round_metrics(plan, math.nan, 0.0, updates.metrics, released)
        return RoundResult(params, self.shared, updates, metrics)

    def receive(self, clients: Tensor) -> None:
        """What each of ``clients`` takes from the server as its round begins (FedAwS: its class
        row), written into the simulated clients' private state."""
        if not overrides(self.algorithm, "client_receive"):
            return
        received = vmap(self.algorithm.client_receive, in_dims=(0, 0, None))(
            gather(self.private, clients), gather(self.constants, clients), self.shared
        )
        scatter(self.private, clients, received)

    def messages(self, round_number: int, clients: Tensor, private: Tensors) -> Tensors:
        """What each of ``clients`` sends besides its model, from its ``private`` state after
        training (FedHide's proxy; FedGN and FedCS draw noise from ``(seed, round)``)."""
        if not overrides(self.algorithm, "client_message"):
            return {}
        constants = gather(self.constants, clients)
        if self.algorithm.message_noise:
            constants["noise"] = self.message_noise(round_number, len(clients))
        return vmap(self.algorithm.client_message, in_dims=(0, 0, None))(
            private, constants, self.shared
        )

    def train(
        self, plan: RoundPlan, fused: Aggregator | None, path: str | None = None
    ) -> ClientUpdates:
        """The client side of a round (:class:`uvtrain.rounds.LocalTraining`): receive, train
        by the batched, vmap or loop path (``path`` forces ``"vmap"`` or ``"loop"``), keep the
        private state, make the messages."""
        if path not in (None, "vmap", "loop"):
            raise ValueError(f"path must be 'vmap' or 'loop', not {path!r}")
        clients = torch.as_tensor(plan.clients, device=self.device)
        epochs = self.config.local_epochs is not None
        batches: Tensor | list[list[Tensor]] = (
            self.epoch_batches_of_round(plan.number, plan.clients)
            if epochs
            else self.batches_of_round(plan.number, plan.clients)
        )
        weights = self.sizes[plan.clients].to(self.device)
        self.receive(clients)
        batched = (
            path is None
            and fused is not None
            and self.config.vectorised
            and self.config.batched
            and self.config.local_steps == 1
            and not epochs
        )
        vectorised = self.config.vectorised if path is None else path == "vmap"
        if path is None and self.postprocess and self.device.type == "cpu":
            # DP rounds need every client's own update: on a CPU the loop gives it faster than
            # vmap, whose per-client convolutions become grouped ones (benchmarks/simulate.py)
            vectorised = False
        if path is None and not self._vmap_runs:
            vectorised = False
        if batched:
            assert fused is not None and isinstance(batches, Tensor)
            mean, private, losses = self._local_batched(
                clients, batches, plan.lr, fused.fused_weights(weights)
            )
            updates = ClientUpdates(
                clients, weights, losses, aggregate={k: v[0] for k, v in mean.items()}
            )
        else:
            if not vectorised:
                local = self._local_loop
            elif epochs:
                local = self._local_epochs_vectorised
            else:
                local = self._local_vectorised
            stacked, private, losses = local(clients, batches, plan.lr)
            updates = ClientUpdates(clients, weights, losses, params=stacked)
        check_finite(plan.number, "the training loss", {"loss": losses})
        scatter(self.private, clients, private)
        updates.private = private
        updates.messages = self.messages(plan.number, clients, private)
        return updates

    # -- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: the federation's state (:meth:`Federation.state_dict`:
        the round, the global model, the server's shared state, the postprocessing's and the
        server optimiser's), the simulated devices' private state and the schedule (the
        constants follow from the seed)."""
        return {
            **super().state_dict(),
            "private": {k: v.cpu() for k, v in self.private.items()},
            "engine": asdict(self.config),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:  # type: ignore[override]
        """Resume from :meth:`state_dict`."""
        check_schedule(self.config, state["engine"])
        super().load_state_dict(state, self.device)
        self.private = {k: v.to(self.device) for k, v in state["private"].items()}


@dataclass
class OnePath:
    """The simulation's local training by one local-update path (:meth:`Simulation.next_round`, the audit's rounds)."""

    simulation: Simulation
    path: str

    def train(self, plan: RoundPlan, fused: Aggregator | None) -> ClientUpdates:
        return self.simulation.train(plan, None, self.path)


def _step_rows(
    stacked: Tensors, index: Tensor, rows: Tensors, grads: Tensors, lr: float
) -> Tensors:
    """``stacked`` with its rows ``index`` replaced by ``rows − lr · grads`` (an SGD step of
    some of a chunk's clients)."""
    return {
        name: value.index_copy(0, index, rows[name] - lr * grads[name])
        for name, value in stacked.items()
    }


def vmap_runs(model: nn.Module, device: torch.device) -> bool:
    """Whether ``torch.func.vmap`` can run ``model``'s training step on ``device``.

    cuDNN's recurrent layers cannot: under vmap their flattened weights are functorch wrappers
    without storage ("Cannot access storage of TensorWrapper", first seen on an H100 with the
    GE2E encoder under DP, 2026-11-26). Such a model trains each client by the loop on CUDA;
    the batched one-pass step, which does not vmap the gradient, is unaffected.
    """
    return device.type != "cuda" or not any(isinstance(m, nn.RNNBase) for m in model.modules())


def _concat(pieces: list[Tensors]) -> Tensors:
    if not pieces or not pieces[0]:
        return {}
    return {name: torch.cat([piece[name] for piece in pieces]) for name in pieces[0]}
