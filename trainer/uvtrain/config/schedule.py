"""The schedule part of a run config (:class:`Schedule`): rounds, sampling, local steps, the
learning rate and its decay, the aggregator and the server optimiser, and the numeric ranges a
run may set."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from ..aggregators import aggregation_help, check_aggregation
from ..errors import ConfigError
from ..validation import check_types

#: The numeric ranges a run may set (issue 46): far beyond any setting that learns (the papers'
#: lr 0.01-0.5, FedUV's server lr 5, update norms 0.01-10, batches of 16-512), and short of the
#: values that overflow in float32 or in an index (lr 1e308, server τ 1e-320, which is 0 in
#: float32, a clip norm of 1e308 whose noise is inf, a batch of 10^20 windows). A run that
#: diverges inside them anyway stops in one line with its folder marked (uvtrain.run).
MAX_LR = 100.0
MAX_SERVER_LR = 100.0
MIN_SERVER_TAU = 1e-9
MAX_CLIP_NORM = 1000.0
MAX_BATCH_SIZE = 2**16
MAX_LOCAL_STEPS = 10**6
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class Schedule:
    """FedAvg's schedule: ε-fraction sampling, E local steps of batch B, SGD with lr decay
    (:class:`~uvtrain.engine.EngineConfig` is this schedule plus how the simulator runs it).
    FedFace: ``local_steps`` is the synchronisation interval K and ``lr_decay`` applies per local
    step; ``aggregation`` and ``local_epochs`` are cross-device options.

    The learning rate of round r is ``lr / (1 + lr_decay · (r − 1))`` (inverse-time decay, the
    "lr 0.1, decay 0.01" of the FedUV paper's setup). ``lr_milestones`` is a step schedule on top
    of it (the FedFace paper's "decays by 0.1 at the end of epoch 10, 18 and 24"):
    comma-separated round numbers; after each of those rounds the learning rate is multiplied by
    ``lr_gamma`` (:func:`milestones`). Rounds, not epochs, in every trainer: the cross-silo
    trainer's learning rate is constant within a round (eq. 6 of the FedFace paper divides by
    it), so a step can only fall between rounds, and the paper's epoch e ends after
    ``e · 12,800 / K`` rounds (:mod:`uvtrain.presets`). Empty: off.

    Options the papers' setups choose (defaults: this project's own schedule):

    - ``sampling``: ``"random"`` draws the round's ε·K clients without replacement from
      ``(seed, round)`` (FedAvg, Algorithm 1 of the FedUV paper); ``"round-robin"`` takes the
      next ε·K clients in index order, wrapping around (FedHide Sec. 4.1, "clients are selected in a
      round-robin manner"; its Algorithm 1 writes a random set).
    - ``aggregation``, a name of :data:`uvtrain.aggregators.AGGREGATORS`: ``"weighted"`` is
      FedAvg's ``Σ_k (n_k / n) θ_k`` (McMahan et al., eq. 1; the FedUV paper's Algorithm 1);
      ``"mean"`` the plain ``1/M Σ_k θ_k`` of FedHide's Algorithm 1. Under differential privacy the DP sum replaces either (every client weighs
      the same there: :class:`uvtrain.privacy.PrivateSum`).
    - ``local_epochs``: ``None`` runs ``local_steps`` SGD steps on batches of B drawn from the
      client's samples (with replacement only when it holds fewer than B); ``E`` runs E epochs
      over the client's own samples in shuffled mini-batches of B, the last one smaller when B
      does not divide ``n_k`` (FedAvg's ``UserUpdate``, Algorithm 1 of the FedUV paper, which
      trains with 1 local epoch, §6). Clients then take ``E · ⌈n_k / B⌉`` steps each.

    ``server_*``: the server optimiser (:mod:`uvtrain.server_optimizers`, Reddi et al. 2021,
    Algorithm 2) and its η, β, β₁, β₂, τ. The defaults here are plain FedAvg; a method may declare
    its own schedule defaults (:attr:`~uvtrain.methods.MethodParameters.schedule_defaults`: FedUV's
    server lr), which :meth:`RunConfig.from_flat` puts in for the keys not given.
    """

    rounds: int = field(default=50, metadata={"help": "Federated rounds."})
    fraction: float = field(default=0.1, metadata={"help": "Fraction of clients per round (ε)."})
    sampling: str = field(
        default="random",
        metadata={
            "help": "Clients per round: random, or round-robin (in order, wrapping; FedHide).",
            "flower": False,
        },
    )
    local_steps: int = field(
        default=1, metadata={"help": "Local SGD steps per round (E; FedFace: K)."}
    )
    batch_size: int = field(default=16, metadata={"help": "Local batch size (B)."})
    lr: float = field(default=0.1, metadata={"help": "Learning rate."})
    lr_decay: float = field(
        default=0.01, metadata={"help": "lr / (1 + decay·(round−1)) (feduv: 0.005)."}
    )
    lr_milestones: str = field(
        default="",
        metadata={
            "help": "Step schedule: rounds after which the lr is multiplied by --lr-gamma "
            "(comma-separated, e.g. 1280,2304,3072; '' off)."
        },
    )
    lr_gamma: float = field(
        default=0.1, metadata={"help": "Factor of the lr at each of --lr-milestones."}
    )
    aggregation: str = field(
        default="weighted",
        metadata={
            "help": f"{aggregation_help()}; with --dp always the equal-weight DP mean.",
            "flower": False,
        },
    )
    local_epochs: int | None = field(
        default=None,
        metadata={
            "help": "Local epochs over each client's data in batches of B, instead of "
            "--local-steps (FedUV paper: 1).",
        },
    )
    server_optimizer: str = field(
        default="sgd",
        metadata={
            "help": "Server optimiser of the aggregated update: sgd (η 1: FedAvg), momentum "
            "(FedAvgM), adam or yogi (Reddi et al. 2021)."
        },
    )
    server_lr: float = field(default=1.0, metadata={"help": "Server learning rate η (feduv: 5)."})
    server_momentum: float = field(
        default=0.9, metadata={"help": "Server momentum β (--server-optimizer momentum)."}
    )
    server_beta1: float = field(default=0.9, metadata={"help": "adam/yogi: β₁."})
    server_beta2: float = field(default=0.99, metadata={"help": "adam/yogi: β₂."})
    server_tau: float = field(default=1e-3, metadata={"help": "adam/yogi: adaptivity τ."})

    def __post_init__(self) -> None:
        check_types(self)
        if self.rounds < 0:  # 0: the initial model (a pretrained encoder) evaluated as it is
            raise ConfigError(f"rounds and seed must be >= 0, not rounds = {self.rounds}")
        if not 0.0 < self.fraction <= 1.0:
            raise ConfigError(f"fraction must be in (0, 1], not {self.fraction}")
        if self.sampling not in ("random", "round-robin"):
            raise ConfigError(f"sampling must be 'random' or 'round-robin', not {self.sampling!r}")
        for name in ("local_steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, not {getattr(self, name)}")
        for name, most in (("local_steps", MAX_LOCAL_STEPS), ("batch_size", MAX_BATCH_SIZE)):
            if getattr(self, name) > most:
                raise ConfigError(f"{name} must be at most {most}, not {getattr(self, name)}")
        check_aggregation(self.aggregation)  # the registry's names
        if self.local_epochs is not None and self.local_epochs < 1:
            raise ConfigError(f"local_epochs must be >= 1, not {self.local_epochs}")
        if self.local_epochs is not None and self.local_epochs > MAX_LOCAL_STEPS:
            raise ConfigError(
                f"local_epochs must be at most {MAX_LOCAL_STEPS}, not {self.local_epochs}"
            )
        if self.local_epochs is not None and self.local_steps != 1:
            raise ConfigError("give --local-steps or --local-epochs, not both")
        if not self.lr > 0 or self.lr_decay < 0:
            raise ConfigError(
                f"lr must be positive and lr_decay >= 0, not {self.lr} and {self.lr_decay}"
            )
        if self.lr > MAX_LR:
            raise ConfigError(
                f"lr must be at most {MAX_LR:g}, not {self.lr:g} (it can only diverge)"
            )
        milestones(self.lr_milestones)  # a ConfigError names a bad one
        if not 0 < self.lr_gamma <= 1:
            raise ConfigError(f"lr_gamma must be in (0, 1], not {self.lr_gamma}")
        check_server_settings(*(getattr(self, name) for name in SERVER_KEYS))

    def learning_rate(self, round_number: int, steps_per_round: int = 1) -> float:
        """The learning rate of round ``round_number`` (1-based), the one formula of every
        trainer: ``lr / (1 + lr_decay · t)`` with ``t`` the decay steps before the round,
        ``steps_per_round`` for each earlier round (1: the decay is per round, the simulator's
        and the deployment's; K: per local step, the cross-silo trainer's), times ``lr_gamma``
        for every milestone of ``lr_milestones`` passed before the round (:func:`step_factor`)."""
        factor = step_factor(self.lr_milestones, self.lr_gamma, round_number)
        return factor * self.lr / (1.0 + self.lr_decay * ((round_number - 1) * steps_per_round))


#: The server optimiser's keys of the :class:`Schedule`, in the order of
#: :func:`check_server_settings`.
SERVER_KEYS = (
    "server_optimizer",
    "server_lr",
    "server_momentum",
    "server_beta1",
    "server_beta2",
    "server_tau",
)


#: The server optimisers (``--server-optimizer``).
SERVER_OPTIMIZERS: tuple[str, ...] = ("sgd", "momentum", "adam", "yogi")


def check_server_settings(
    kind: str, lr: float, momentum: float, beta1: float, beta2: float, tau: float
) -> None:
    """:class:`ConfigError` (one line) for a setting out of its range."""
    if kind not in SERVER_OPTIMIZERS:
        raise ConfigError(
            f"server_optimizer must be one of {', '.join(SERVER_OPTIMIZERS)}, not {kind!r}"
        )
    if not lr > 0:
        raise ConfigError(f"server_lr must be positive, not {lr}")
    if lr > MAX_SERVER_LR:
        raise ConfigError(
            f"server_lr must be at most {MAX_SERVER_LR:g}, not {lr:g} (it can only diverge)"
        )
    for name, value in (("momentum", momentum), ("beta1", beta1), ("beta2", beta2)):
        if not 0 <= value < 1:
            raise ConfigError(f"server_{name} must be in [0, 1), not {value}")
    if not tau > 0:
        raise ConfigError(f"server_tau must be positive, not {tau}")
    if tau < MIN_SERVER_TAU:
        raise ConfigError(
            f"server_tau must be at least {MIN_SERVER_TAU:g}, not {tau:.3g} (adam and yogi "
            "divide by it: a smaller one overflows)"
        )


def schedule_defaults(method: type, keys: Iterable[str] = ()) -> dict[str, Any]:
    """The :class:`Schedule` keys a method trains with when the run gives none: the server
    optimiser's and ``keys`` at the Schedule's defaults, with the method's own over them
    (:attr:`~uvtrain.methods.MethodParameters.schedule_defaults`: FedUV's)."""
    own = getattr(method, "schedule_defaults", {})
    wanted = {*SERVER_KEYS, *own, *keys}
    plain = {item.name: item.default for item in fields(Schedule) if item.name in wanted}
    return {**plain, **own}


def milestones(text: str) -> tuple[int, ...]:
    """The rounds of ``lr_milestones`` (``"1280,2304,3072"``): positive and increasing; ``""``:
    none. :class:`ConfigError` otherwise."""
    if not text.strip():
        return ()
    try:
        rounds = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(
            f"lr_milestones must be comma-separated round numbers, not {text!r}"
        ) from None
    if rounds[0] < 1 or any(b <= a for a, b in zip(rounds, rounds[1:], strict=False)):
        raise ConfigError(f"lr_milestones must be positive and increasing, not {text!r}")
    return rounds


def step_factor(text: str, gamma: float, round_number: int) -> float:
    """``gamma`` to the number of milestones of ``text`` already passed before round
    ``round_number`` (1-based): round m + 1 is the first at the lower rate after milestone m."""
    return gamma ** sum(1 for m in milestones(text) if round_number > m)
