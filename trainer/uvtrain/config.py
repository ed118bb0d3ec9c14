"""Run configuration by parts: CLI > TOML file > default.

A :class:`RunConfig` is made of frozen parts that each validate themselves: the
:class:`Schedule`, the :class:`Data`, the :class:`Model`, and ``method`` — the chosen algorithm's
own parameters dataclass (:data:`uvtrain.algorithms.METHODS`: ``FedHide(alpha=0.2)``; its
``name`` is the method's name) — plus the run-level options (seed, device, ...).

Users keep writing flat keys (``--alpha 0.2``, ``alpha = 0.2`` in a TOML file, ``config.json``):
:meth:`RunConfig.from_flat` sends each key to the part or the method that declares it, and
:meth:`RunConfig.to_dict` writes the flat form back (with the chosen method's parameters only).
A TOML file may also group keys in sections: ``[schedule]``, ``[data]``, ``[model]``, ``[run]``
and one per method (``[fedhide]``), of which only the chosen method's is read.

Every field's ``dataclasses.field(metadata=...)`` says how the user reaches it: ``help`` (the
``uvtrain run`` option's help), ``flag`` (its option name when it is not ``--field-name``:
FedHide's ``weight`` is ``--lambda``), ``cli`` (``False``: a TOML/config key only) and ``flower``
(``False``: means nothing on Flower devices, not in the deployment's run config). The command line
and the deployment's keys are generated from them, so a new method is one file in
``algorithms/`` and one line in :data:`~uvtrain.algorithms.METHODS`.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .data.protocol import DataProtocol
from .errors import ConfigError, DatasetError
from .validation import check_field, check_types

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
    - ``aggregation``: ``"weighted"`` is FedAvg's ``Σ_k (n_k / n) θ_k`` (McMahan et al., eq. 1;
      the FedUV paper's Algorithm 1); ``"mean"`` the plain ``1/M Σ_k θ_k`` of FedHide's
      Algorithm 1. Under differential privacy the DP sum replaces either (every client weighs
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
            "help": "weighted (by samples, FedAvg) or mean (plain 1/M, FedHide Alg. 1); "
            "with --dp always the equal-weight DP mean.",
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
        if self.aggregation not in ("weighted", "mean"):
            raise ConfigError(f"aggregation must be 'weighted' or 'mean', not {self.aggregation!r}")
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


#: The datasets whose training utterances ``random_crop`` keeps whole.
RANDOM_CROP_DATASETS = ("voxceleb1", "voxceleb2")


@dataclass(frozen=True)
class Data:
    """What the run trains on. ``crop_seconds``: audio training samples are random windows of this
    length (0: whole clips). ``random_crop`` (VoxCeleb, under a data protocol): the training
    utterances are kept whole (up to :data:`uvtrain.data.corpora.RANDOM_CROP_SECONDS`), so that
    each window is a fresh random crop of the whole utterance at every step, not of its stored
    centre clip; evaluation keeps the centre clip. ``augment`` (images): every training sample
    randomly flipped and rotated each time it enters a batch (:func:`uvtrain.batches.
    flip_and_rotate`), never at evaluation.

    ``identities``, ``unknown_identities``, ``samples_per_split``, ``unknown_samples`` and
    ``official_split`` are a paper's data protocol for a corpus read from ``root``
    (:class:`uvtrain.data.protocol.DataProtocol`; the presets set them); none set: the loaders'
    small defaults (a capped choice of identities, 20 % unknown, 60/20/20 splits)."""

    dataset: str = field(metadata={"help": "Dataset name or .npz path.", "flower": False})
    clients: int | None = field(
        default=None, metadata={"help": "Use the first K known clients.", "flower": False}
    )
    root: str | None = field(
        default=None, metadata={"help": "Dataset root (local corpus copy).", "flower": False}
    )
    crop_seconds: float = field(
        default=1.0,
        metadata={"help": "Audio: train on random windows this long (0: whole)."},
    )
    identities: int | None = field(
        default=None,
        metadata={
            "help": "Corpus: exactly this many known identities (default: the loader's cap).",
            "flower": False,
        },
    )
    unknown_identities: int | None = field(
        default=None,
        metadata={
            "help": "Corpus: identities held out as unknown (default: the official test ones, "
            "else a quarter as many as the known).",
            "flower": False,
        },
    )
    samples_per_split: str = field(
        default="",
        metadata={
            "help": "Corpus: TRAIN,VALIDATION,TEST samples of every known identity, e.g. "
            "25,10,10 (default: all, 60/20/20).",
            "flower": False,
        },
    )
    unknown_samples: int | None = field(
        default=None,
        metadata={
            "help": "Corpus: samples of every unknown identity (default: all).",
            "flower": False,
        },
    )
    official_split: bool = field(
        default=False,
        metadata={
            "help": "Corpus: its own test part (VoxCeleb1/2's test speakers, VGGFace2's test/ "
            "are unknown; CIFAR-100's test images the test split).",
            "flower": False,
        },
    )
    augment: bool = field(
        default=False,
        metadata={
            "help": "Images: flip each training sample horizontally at random and rotate it "
            "by up to 15 degrees, at every step (never at evaluation).",
            "flower": False,
        },
    )
    detect_faces: bool = field(
        default=False,
        metadata={
            "help": "VGGFace2: cut each image to the face MTCNN finds (FedHide, Sec. 4.1; "
            "weights: uvtrain pretrained fetch mtcnn), else to its loose box or whole.",
            "flower": False,
        },
    )
    random_crop: bool = field(
        default=False,
        metadata={
            "help": "VoxCeleb: keep training utterances whole (up to 6 s) and crop crop_seconds "
            "at random at every step (default: the stored centre clip).",
            "flower": False,
        },
    )

    def __post_init__(self) -> None:
        check_types(self)
        if self.clients is not None and self.clients < 2:
            raise ConfigError("clients must be at least 2")
        if not 0 <= self.crop_seconds <= 3600:
            raise ConfigError("crop_seconds must be in [0, 3600] (0: train on whole clips)")
        protocol = self.protocol()  # a bad protocol key is refused here, in one line
        if self.detect_faces and self.dataset != "vggface2":
            raise ConfigError("detect_faces applies to vggface2 (the fedhide-vggface2 preset)")
        if self.random_crop and (self.dataset not in RANDOM_CROP_DATASETS or protocol is None):
            raise ConfigError(
                "random_crop applies to voxceleb1 and voxceleb2 under a data protocol "
                "(identities, samples_per_split, ...; the fedhide-voxceleb1 preset sets both)"
            )

    def protocol(self) -> DataProtocol | None:
        """The data protocol of these keys, ``None`` when none is set."""
        try:
            return DataProtocol.from_keys(
                self.identities,
                self.unknown_identities,
                self.samples_per_split,
                self.unknown_samples,
                self.official_split,
            )
        except DatasetError as error:
            raise ConfigError(str(error)) from None


@dataclass(frozen=True)
class Model:
    """The backbone: by name (default: by modality, or the pretrained weights' own) and the
    weights it starts from."""

    backbone: str | None = field(
        default=None, metadata={"help": "Backbone name (default: by modality)."}
    )
    pretrained: str | None = field(
        default=None,
        metadata={
            "help": "Start from: ge2e or campplus (the GE2E or CAM++ speaker encoder), a run "
            "folder or its checkpoint.pt (another run's trained backbone), or a backbone "
            "checkpoint."
        },
    )
    train_pretrained: bool = field(
        default=False,
        metadata={
            "help": "With --pretrained ge2e or campplus: train all of the encoder (default: it "
            "stays frozen and only the adapter trains)."
        },
    )

    def __post_init__(self) -> None:
        check_types(self)


#: ``ε`` of the default mechanism wherever secure aggregation is on (``uvtrain deploy``,
#: ``uvtrain audit``): distributed noise at this budget for the whole run.
SECURE_DEFAULT_EPSILON = 8.0


@dataclass(frozen=True)
class Privacy:
    """User-level differential privacy (:mod:`uvtrain.privacy`, docs/privacy.md): ``dp`` places
    the noise (``off``, ``central``: the server adds it, ``distributed``: each client adds its
    share before aggregation); the noise follows from the budget ``dp_epsilon`` (for the run's
    rounds and sampling rate) or is given as ``dp_noise_multiplier``; ``dp_delta`` defaults to
    ``min(N^−1.1, 10⁻⁶)`` for ``N`` users; ``clip_norm`` bounds each client's update (L2).

    Every key but ``dp`` is a Flower run-config key too (the deployment has its own ``dp``, whose
    default ``auto`` follows its secure aggregation: ``uvdeploy.settings``); the simulator,
    without secure aggregation, defaults to ``off``."""

    dp: str = field(
        default="off",
        metadata={"help": "Differential privacy: off, central or distributed.", "flower": False},
    )
    dp_epsilon: float | None = field(
        default=None,
        metadata={"help": "DP budget ε of the whole run (sets the noise)."},
    )
    dp_delta: float | None = field(
        default=None, metadata={"help": "DP δ (default: min(users^-1.1, 1e-6))."}
    )
    dp_noise_multiplier: float | None = field(
        default=None,
        metadata={"help": "DP noise multiplier z (instead of --dp-epsilon)."},
    )
    clip_norm: float = field(
        default=1.0,
        metadata={
            "help": "DP: each client's update clipped to this L2 norm (C; with adaptive "
            "clipping, its start).",
        },
    )
    adaptive_clipping: bool = field(
        default=False,
        metadata={
            "help": "DP: adapt the clip norm to a quantile of the update norms (Andrew et al.).",
        },
    )
    clip_quantile: float = field(
        default=0.5,
        metadata={"help": "Adaptive clipping: the quantile γ of update norms."},
    )
    clip_learning_rate: float = field(
        default=0.2,
        metadata={"help": "Adaptive clipping: the geometric step η_C."},
    )
    clip_count_std: float | None = field(
        default=None,
        metadata={
            "help": "Adaptive clipping: noise std σ_b of the unclipped count (default: cohort/20).",
        },
    )

    dp_noise: str = field(
        default="independent",
        metadata={
            "help": "DP: independent (DP-FedAvg: fresh noise every round) or tree (DP-FTRL: "
            "tree-aggregated noise over each period; needs --dp central and a fixed clip norm).",
        },
    )
    dp_period: int | None = field(
        default=None,
        metadata={
            "help": "DP participation rule: each user in at most one round of each period of "
            "this many rounds, instead of Poisson sampling (no amplification: one ε against "
            "the server and the model's observers; 0: Poisson sampling; default: Poisson for "
            "uvtrain run, users/cohort for tree noise and for uvtrain deploy).",
        },
    )
    dp_noise_cohort: int | None = field(
        default=None,
        metadata={
            "help": "Simulated deployment scale (pfl-research's noise_cohort_size): add the "
            "noise of an expected cohort of this many users M, scaled by m/M onto the m the "
            "simulation trains; the results hold for a deployment with cohorts of M.",
            "flower": False,
        },
    )
    dp_population: int | None = field(
        default=None,
        metadata={
            "help": "With --dp-noise-cohort: the deployment's population N the accountant "
            "samples M from (q = M/N; default: the simulation's own rate m/N kept).",
            "flower": False,
        },
    )

    def __post_init__(self) -> None:
        check_types(self)
        if self.dp not in ("off", "central", "distributed"):
            raise ConfigError(f"dp must be off, central or distributed, not {self.dp!r}")
        if self.dp_epsilon is not None and not self.dp_epsilon > 0:
            raise ConfigError(f"dp_epsilon must be positive, not {self.dp_epsilon}")
        if self.dp_epsilon is not None and self.dp_epsilon > 1000:
            raise ConfigError(f"dp_epsilon must be at most 1000, not {self.dp_epsilon}")
        if self.dp_delta is not None and not 0 < self.dp_delta < 1:
            raise ConfigError(f"dp_delta must be in (0, 1), not {self.dp_delta}")
        if self.dp_noise_multiplier is not None and not self.dp_noise_multiplier > 0:
            raise ConfigError(
                f"dp_noise_multiplier must be positive, not {self.dp_noise_multiplier}"
            )
        if self.dp_noise_multiplier is not None and self.dp_noise_multiplier > 1e4:
            raise ConfigError(
                f"dp_noise_multiplier must be at most 10000, not {self.dp_noise_multiplier}"
            )
        if not self.clip_norm > 0:
            raise ConfigError(f"clip_norm must be positive, not {self.clip_norm}")
        if self.clip_norm > MAX_CLIP_NORM:
            raise ConfigError(
                f"clip_norm must be at most {MAX_CLIP_NORM:g}, not {self.clip_norm:g} (the noise "
                "is proportional to it)"
            )
        if not 0 < self.clip_quantile < 1:
            raise ConfigError(f"clip_quantile must be in (0, 1), not {self.clip_quantile}")
        if not self.clip_learning_rate > 0:
            raise ConfigError(f"clip_learning_rate must be positive, not {self.clip_learning_rate}")
        if self.clip_count_std is not None and not self.clip_count_std > 0:
            raise ConfigError(f"clip_count_std must be positive, not {self.clip_count_std}")
        if self.dp_noise not in ("independent", "tree"):
            raise ConfigError(f"dp_noise must be independent or tree, not {self.dp_noise!r}")
        if self.dp_period is not None and not 0 <= self.dp_period <= 10**6:
            raise ConfigError(f"dp_period must be in [0, 10^6], not {self.dp_period}")
        if self.dp_noise_cohort is not None and not 1 <= self.dp_noise_cohort <= 10**9:
            raise ConfigError(f"dp_noise_cohort must be in [1, 10^9], not {self.dp_noise_cohort}")
        if self.dp_population is not None and self.dp_population > 10**10:
            raise ConfigError(f"dp_population must be at most 10^10, not {self.dp_population}")
        if self.dp_population is not None and self.dp_noise_cohort is None:
            raise ConfigError("--dp-population is the population of --dp-noise-cohort: give both")
        if self.dp_population is not None and not self.dp_population >= self.dp_noise_cohort:
            raise ConfigError(
                f"--dp-population {self.dp_population} is smaller than its cohort "
                f"--dp-noise-cohort {self.dp_noise_cohort}"
            )
        if self.dp == "off" and self.dp_noise_cohort is not None:
            raise ConfigError(
                "--dp-noise-cohort scales the DP noise: give --dp central or distributed"
            )
        if self.dp != "off" and (self.dp_epsilon is None) == (self.dp_noise_multiplier is None):
            raise ConfigError(f"--dp {self.dp} needs one of --dp-epsilon, --dp-noise-multiplier")


#: The parts of a run config by their attribute (and TOML section) name.
PARTS: dict[str, type] = {"schedule": Schedule, "data": Data, "model": Model, "privacy": Privacy}


@dataclass(frozen=True)
class RunConfig:
    """Everything a run depends on; written (flat, :meth:`to_dict`) to ``RUN_DIR/config.json``.

    ``method`` is the chosen algorithm's parameters (``config.method.name``: its name).
    ``eval_every``: > 0 adds the EERs on test_known and unknown to ``metrics.jsonl`` every so many
    rounds (the curves of EER against rounds).
    """

    schedule: Schedule
    data: Data
    model: Model
    method: Any  # an algorithm of uvtrain.algorithms.METHODS (its own frozen dataclass)
    privacy: Privacy = field(default_factory=Privacy)
    seed: int = field(default=0, metadata={"help": "Random seed."})
    device: str = field(default="auto", metadata={"help": "auto, cpu or cuda.", "flower": False})
    checkpoint_every: int = field(default=10, metadata={"cli": False})
    chunk_size: int = field(default=64, metadata={"cli": False, "flower": False})
    target_tpr: float = field(default=0.95, metadata={"cli": False})
    eval_every: int = field(
        default=0,
        metadata={"help": "Log test/unknown EERs every N rounds (0: off).", "flower": False},
    )

    def __post_init__(self) -> None:
        from .methods import PARAMETERS  # here: importing the config needs no torch (--help)

        for name, kind in PARTS.items():
            if not isinstance(getattr(self, name), kind):
                raise ConfigError(f"config: {name} must be a {kind.__name__}")
        kind = PARAMETERS.get(getattr(self.method, "name", ""))
        if kind is None or not isinstance(self.method, kind):
            raise ConfigError(f"config: method must be one of {', '.join(PARAMETERS)}'s parameters")
        for item in run_fields():
            check_field(item, getattr(self, item.name))
        if self.seed < 0:
            raise ConfigError(f"rounds and seed must be >= 0, not seed = {self.seed}")
        if self.seed > MAX_SEED:
            raise ConfigError(f"seed must be at most 2^32 - 1, not {self.seed}")
        if self.chunk_size < 1:
            raise ConfigError(f"chunk_size must be >= 1, not {self.chunk_size}")
        if self.checkpoint_every < 1 or not 0 < self.target_tpr <= 1:
            raise ConfigError("checkpoint_every must be >= 1 and target_tpr in (0, 1]")
        if self.eval_every < 0:
            raise ConfigError("eval_every must be >= 0 (0: only at the end)")
        plain = schedule_defaults(object)
        if self.method.setting != "cross-device" and any(
            getattr(self.schedule, key) != plain[key] for key in ("server_optimizer", "server_lr")
        ):
            raise ConfigError(
                f"--server-optimizer and --server-lr are for cross-device methods; "
                f"{self.method.name} is {self.method.setting} (it has its own server step)"
            )

    # -- flat keys ---------------------------------------------------------------------------

    @classmethod
    def from_flat(
        cls,
        values: Mapping[str, Any],
        *,
        other_methods: str = "error",
        parameters_only: bool = False,
    ) -> RunConfig:
        """A config from flat keys: ``method`` (a name) and any key of a part, of the run or of
        that method (which go to its own dataclass). A key no part and no method declares is an
        error. A key of another registered method is refused (``other_methods="error"``: its
        value would apply to nothing) or dropped (``"ignore"``: a run folder's ``config.json``
        written when the config held every method's keys, Flower's run config).
        ``parameters_only``: ``method`` is the method's parameters
        (:data:`uvtrain.methods.PARAMETERS`, no torch: ``uvtrain run --dry-run``), not the
        algorithm that trains."""
        from .methods import PARAMETERS

        values = dict(values)
        for required in ("method", "dataset"):
            if required not in values:
                raise ConfigError(f"no {required}: give --{required} or set it in the config file")
        name = values.pop("method")
        if not isinstance(name, str):
            raise ConfigError(f"config: method must be str, not {name!r}")
        if name not in PARAMETERS:
            raise ConfigError(f"unknown method {name!r}: one of {', '.join(PARAMETERS)}")
        if parameters_only:
            method = PARAMETERS[name]
        else:
            from .algorithms import METHODS as ALGORITHMS

            method = ALGORITHMS[name]
        own = {item.name for item in fields(method)}
        where = {item.name: part for part, item in part_fields()}
        parts: dict[str, dict[str, Any]] = {part: {} for part in (*PARTS, "run", "method")}
        unknown, foreign = [], []
        for key, value in values.items():
            if key in where:
                parts[where[key]][key] = value
            elif key in own:
                parts["method"][key] = value
            elif key in method_fields():
                foreign.append(key)
            else:
                unknown.append(key)
        if unknown:
            raise ConfigError(f"unknown config key(s): {', '.join(sorted(unknown))}")
        for key, value in schedule_defaults(method).items():  # the method's own, when not given
            if parts["schedule"].get(key) is None:
                parts["schedule"][key] = value
        if foreign and other_methods != "ignore":
            for key in foreign:  # a bad value is named as such (--lambda inf), then the key
                check_field(method_fields()[key], values[key])
            key = foreign[0]
            owners = [other for other, kind in PARAMETERS.items() if key in _names(kind)]
            raise ConfigError(
                f"{key} is a parameter of {', '.join(owners)}, not of {name}: drop it, or put it "
                f"in a [{owners[0]}] section of the config file"
            )
        try:
            return cls(
                **{part: kind(**parts[part]) for part, kind in PARTS.items()},
                method=method(**parts["method"]),
                **parts["run"],
            )
        except TypeError as error:
            raise ConfigError(f"config: {error}") from None

    def to_dict(self) -> dict[str, Any]:
        """Flat keys (what ``config.json`` holds): the method's name and its own parameters, the
        parts' keys and the run's."""
        flat: dict[str, Any] = {"method": self.method.name}
        flat.update(self.method.parameters())
        for part, item in part_fields():
            holder = self if part == "run" else getattr(self, part)
            flat[item.name] = getattr(holder, item.name)
        return flat

    def replace(self, **changes: Any) -> RunConfig:
        """This config with some flat keys changed (``config.replace(code_length=255)``)."""
        return RunConfig.from_flat({**self.to_dict(), **changes})

    def with_method(self, name: str) -> RunConfig:
        """This config for method ``name``: with this config's parameters when it is already that
        method, with that method's defaults otherwise (its schedule defaults too, where this
        config has its method's: FedUV's server lr)."""
        from .algorithms import METHODS

        if self.method.name == name:
            return self
        keys = {*type(self.method).schedule_defaults, *METHODS[name].schedule_defaults}
        old = schedule_defaults(type(self.method), keys)
        new = schedule_defaults(METHODS[name], keys)
        changes = {k: new[k] for k in old if getattr(self.schedule, k) == old[k]}
        schedule = dataclasses.replace(self.schedule, **changes)
        return dataclasses.replace(self, schedule=schedule, method=METHODS[name]())


#: The settings a run may be resumed with changed: how it is carried out (the device, the
#: checkpoint and evaluation cadence, the simulator's local-update path: the same maths), not what
#: it trains. ``rounds`` may change too, except under DP (:func:`changed_settings`). The
#: benchmarks name a run's folder by its other settings (``benchmarks/_runs.py``).
NOT_TRAINING = ("device", "checkpoint_every", "chunk_size", "eval_every", "vectorised", "batched")


def changed_settings(
    current: Mapping[str, Any],
    previous: Mapping[str, Any],
    defaults: Mapping[str, Any] | None = None,
    *,
    rounds_may_change: bool = True,
    also_free: Iterable[str] = (),
) -> list[str]:
    """The one resume check: the keys of ``current`` (sorted) whose value differs from
    ``previous`` (the flat settings a run folder or checkpoint was made with), leaving out
    :data:`NOT_TRAINING`, ``rounds`` when ``rounds_may_change`` and ``also_free`` (a deployment's
    own keys). A key ``previous`` lacks (added since it was written) counts as its value in
    ``defaults`` (``None`` without)."""
    free = {*NOT_TRAINING, *also_free, *(("rounds",) if rounds_may_change else ())}
    defaults = defaults or {}
    return sorted(
        key
        for key, value in current.items()
        if key not in free and previous.get(key, defaults.get(key)) != value
    )


def _names(kind: type) -> set[str]:
    return {item.name for item in fields(kind)}


def run_fields() -> list[dataclasses.Field]:
    """The run-level options: :class:`RunConfig`'s fields besides its parts and ``method``."""
    return [item for item in fields(RunConfig) if item.name not in (*PARTS, "method")]


def part_fields() -> Iterator[tuple[str, dataclasses.Field]]:
    """``(part, field)`` of every key that is not a method's: ``data``, ``schedule``, ``model``,
    ``privacy``, then ``run`` (the run-level options)."""
    for part in ("data", "schedule", "model", "privacy"):
        for item in fields(PARTS[part]):
            yield part, item
    for item in run_fields():
        yield "run", item


def method_fields() -> dict[str, dataclasses.Field]:
    """Every registered method's parameter fields by name (first declaration wins: FedHide, FedGN
    and FedCS share ``weight``)."""
    from .methods import PARAMETERS

    found: dict[str, dataclasses.Field] = {}
    for kind in PARAMETERS.values():
        for item in fields(kind):
            found.setdefault(item.name, item)
    return found


def read_toml(path: str | Path) -> dict[str, Any]:
    """A config file's flat keys: top level, or under ``[run]``, ``[schedule]``, ``[data]``,
    ``[model]``; a method's section (``[fedhide]``) stays a table under the method's name
    (:func:`flatten_sections` picks the chosen method's)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path.name}: not a valid TOML file ({error})") from None
    return _sections(data, path.name)


def _sections(data: dict[str, Any], name: str) -> dict[str, Any]:
    from .methods import PARAMETERS

    flat: dict[str, Any] = {}

    def put(key: str, value: Any, where: str) -> None:
        if key in flat:
            raise ConfigError(f"{name}: {key} is set twice ({where} and before)")
        flat[key] = value

    for key, value in data.items():
        if not isinstance(value, dict):
            put(key, value, "top level")
        elif key in PARAMETERS:
            put(key, value, f"[{key}]")
        elif key in (*PARTS, "run"):
            declared = {item.name for part, item in part_fields() if part == key}
            for inner, inner_value in value.items():
                if key != "run" and inner not in declared:
                    raise ConfigError(f"{name}: [{key}] has no key {inner!r}")
                if key == "run" and isinstance(inner_value, dict) and inner in PARAMETERS:
                    put(inner, inner_value, f"[run.{inner}]")
                else:
                    put(inner, inner_value, f"[{key}]")
        else:
            raise ConfigError(
                f"{name}: unknown section [{key}]: one of run, schedule, data, model, "
                f"{', '.join(PARAMETERS)}"
            )
    return flat


def flatten_sections(values: Mapping[str, Any], method: str | None) -> dict[str, Any]:
    """``values`` (from :func:`read_toml`) with the chosen ``method``'s section merged into the
    flat keys and the other methods' sections dropped; its keys must be that method's."""
    from .methods import PARAMETERS

    flat = {k: v for k, v in values.items() if not (k in PARAMETERS and isinstance(v, dict))}
    for key, section in values.items():
        if key != method or not isinstance(section, dict):
            continue
        own = {item.name for item in fields(PARAMETERS[key])}
        for inner, value in section.items():
            if inner not in own:
                raise ConfigError(f"[{key}] has no parameter {inner!r}: one of {', '.join(own)}")
            if inner in flat:
                raise ConfigError(f"{inner} is set twice (top level and [{key}])")
            flat[inner] = value
    return flat


def read_toml_value(text: str) -> Any:
    """One value written as in TOML (``3``, ``0.5``, ``true``, ``'fedhide'``); a bare word is
    taken as a string, so ``--set method=feduv`` works without quotes."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


def resolve(
    cli: dict[str, Any],
    file: str | Path | None = None,
    preset: str | None = None,
    *,
    parameters_only: bool = False,
) -> RunConfig:
    """Merge: options given on the command line beat the file, which beats the preset
    (:mod:`uvtrain.presets`), which beats the defaults. ``parameters_only``: see
    :meth:`RunConfig.from_flat`."""
    in_file = read_toml(file) if file else {}
    given = {key: value for key, value in cli.items() if value is not None}
    merged: dict[str, Any] = {}
    if preset is not None:
        from .presets import get

        merged.update(get(preset).settings)
    method = given.get("method", in_file.get("method", merged.get("method")))
    merged.update(flatten_sections(in_file, method))
    merged.update(given)
    return RunConfig.from_flat(merged, parameters_only=parameters_only)


# -- the command line -------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One ``uvtrain run`` option made from a config field."""

    name: str  # the flat key
    flag: str  # "--lambda", "--pfm/--no-pfm"
    kind: str  # int, float, str, bool
    default: Any
    help: str


def _option(item: dataclasses.Field) -> Option:
    declared = item.type if isinstance(item.type, str) else item.type.__name__
    kind = declared.replace(" | None", "")
    flag = item.metadata.get("flag") or "--" + item.name.replace("_", "-")
    if kind == "bool" and "/" not in flag:
        flag = f"{flag}/--no-{flag[2:]}"
    default = None if item.default is dataclasses.MISSING else item.default
    return Option(item.name, flag, kind, default, item.metadata.get("help", ""))


def cli_options() -> list[Option]:
    """The options of ``uvtrain run`` besides ``--out``, ``--method`` and ``--config``: the parts'
    and the run's keys, then every registered method's parameters (a key several methods share
    once), in declaration order; fields with ``cli=False`` in their metadata are left out."""
    items = [item for _, item in part_fields()] + list(method_fields().values())
    return [_option(item) for item in items if item.metadata.get("cli", True)]


def part_options(part: str) -> list[Option]:
    """The command-line options of one part of the config, as :func:`cli_options` makes them
    (``"privacy"``: the differential privacy options ``uvtrain audit`` shares)."""
    return [_option(item) for item in fields(PARTS[part]) if item.metadata.get("cli", True)]


def flower_keys() -> dict[str, Any]:
    """The flat keys (with their defaults) a Flower run config may set: every key of the parts
    and the run that means something on devices, and the parameters of every cross-device method
    (FedFace's are cross-silo), so that one app declares them all."""
    from .methods import PARAMETERS

    keys = {
        item.name: item.default
        for _, item in part_fields()
        if item.metadata.get("flower", True) and item.name != "method"
    }
    for kind in PARAMETERS.values():
        if kind.setting == "cross-device":
            for item in fields(kind):
                keys.setdefault(item.name, item.default)
    return keys
