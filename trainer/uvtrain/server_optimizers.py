"""Server optimisers: how the server applies a round's aggregated update to the global model.

The aggregate ``θ_agg`` of a round (the weighted mean of the clients' models, the DP sum's noisy
mean, SecAgg+'s unmasked mean) gives the server the update ``Δ = θ_agg − θ``, which it treats as
a pseudo-gradient ``−Δ`` (Reddi et al., "Adaptive Federated Optimization", ICLR 2021,
Algorithm 2; FedAvgM: Hsu et al., 2019):

* ``sgd``:      ``θ ← θ + η Δ`` (η = 1 is FedAvg: the new model is the aggregate itself);
* ``momentum``: ``m ← β m + Δ``, ``θ ← θ + η m`` (FedAvgM);
* ``adam``:     ``m ← β₁ m + (1 − β₁) Δ``, ``v ← β₂ v + (1 − β₂) Δ²``, ``θ ← θ + η m / (√v + τ)``;
* ``yogi``:     as adam with ``v ← v − (1 − β₂) Δ² sign(v − Δ²)``.

``m`` starts at 0 and ``v`` at ``τ²`` (Algorithm 2's ``v₋₁ ≥ τ²``), without bias correction, as
in the paper. It acts on the global parameters only: the clients' private state and the server's
shared state (``server_update``) are the method's. :func:`uvtrain.rounds.run_round` calls it for
every path — the simulator, the audit's SecAgg+ rounds and the Flower server — and under
differential privacy it is post-processing of the released aggregate, so ε does not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .config import check_server_settings
from .errors import TrainingError

Tensors = dict[str, torch.Tensor]


@dataclass
class ServerOptimizer:
    """One run's server optimiser and its state (see the module's docstring): ``kind`` and the
    paper's η (``lr``), β (``momentum``), β₁, β₂ and τ. Calling it with the global parameters and
    the round's aggregate gives the new global parameters and advances its state."""

    kind: str = "sgd"
    lr: float = 1.0
    momentum: float = 0.9
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3
    #: ``m.NAME`` (and ``v.NAME``) per parameter, made at the first round
    state: Tensors = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_server_settings(self.kind, self.lr, self.momentum, self.beta1, self.beta2, self.tau)

    @classmethod
    def from_schedule(cls, schedule: Any) -> ServerOptimizer:
        """The optimiser a run's :class:`~uvtrain.config.Schedule` asks for."""
        return cls(
            schedule.server_optimizer,
            schedule.server_lr,
            schedule.server_momentum,
            schedule.server_beta1,
            schedule.server_beta2,
            schedule.server_tau,
        )

    @property
    def is_fedavg(self) -> bool:
        """Plain FedAvg (sgd with η = 1): the aggregate is taken as it is, bit for bit."""
        return self.kind == "sgd" and self.lr == 1.0

    @torch.no_grad()
    def __call__(self, params: Tensors, aggregate: Tensors) -> Tensors:
        """The new global parameters from the current ``params`` and the round's ``aggregate``."""
        if self.is_fedavg:
            return aggregate
        new = {}
        for name, value in params.items():
            delta = aggregate[name].to(value.dtype) - value
            new[name] = value + self.lr * self._direction(name, delta)
        return new

    def _direction(self, name: str, delta: torch.Tensor) -> torch.Tensor:
        """The step's direction for one parameter (before η), its state updated."""
        if self.kind == "sgd":
            return delta
        first = self.state.get(f"m.{name}", torch.zeros_like(delta))
        if self.kind == "momentum":
            self.state[f"m.{name}"] = first = self.momentum * first + delta
            return first
        self.state[f"m.{name}"] = first = self.beta1 * first + (1 - self.beta1) * delta
        second = self.state.get(f"v.{name}", torch.full_like(delta, self.tau**2))
        squared = delta * delta
        if self.kind == "adam":
            second = self.beta2 * second + (1 - self.beta2) * squared
        else:  # yogi
            second = second - (1 - self.beta2) * squared * torch.sign(second - squared)
        self.state[f"v.{name}"] = second
        return first / (second.sqrt() + self.tau)

    # -- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Its kind and state (on the CPU), for a checkpoint."""
        return {"kind": self.kind, "state": {k: v.cpu() for k, v in self.state.items()}}

    def load_state_dict(self, saved: dict[str, Any] | None, device: Any = "cpu") -> None:
        """Resume from :meth:`state_dict` (``None``: a checkpoint from before server optimisers,
        which trained with plain FedAvg)."""
        kind = "sgd" if saved is None else saved["kind"]
        if kind != self.kind:
            raise TrainingError(
                f"the checkpoint was made with server optimiser {kind}, not {self.kind}: use a "
                "new run folder"
            )
        state = {} if saved is None else saved["state"]
        self.state = {k: v.to(device) for k, v in state.items()}
