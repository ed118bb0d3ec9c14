"""Each method's parameters and capabilities, without its tensors: no torch is imported.

A method of :data:`uvtrain.algorithms.METHODS` is its parameters class here plus its hooks there
(``class FedUV(FedUVParameters, FedAvg)``), so the command line can list the methods, make their
options and check and print a configuration (``uvtrain run --dry-run``) before torch is loaded:
:data:`PARAMETERS` holds the same names, in the same order, as :data:`uvtrain.algorithms.METHODS`.
A parameters object checks its values when it is made (``FedHideParameters(alpha=2)`` raises
:class:`~uvtrain.errors.ConfigError`), and so does the algorithm that extends it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from .errors import ConfigError
from .features import WINDOWS
from .validation import check_types

#: FedUV's ablation forms of ``ℓ_neg`` (:func:`uvtrain.algorithms.feduv.negative_loss`).
NEGATIVE_LOSSES: tuple[str, ...] = ("max", "mean-relu")
#: The softmax heads (``Softmax.softmax_head``): the paper's, then ours.
SOFTMAX_HEADS: tuple[str, ...] = ("plain", "cosine")
#: How the cross-silo trainer makes its parties (:func:`uvtrain.data.partition.partition`).
PARTITIONS = ("auto", "dataset", "language", "random")
#: Score normalisations of FedFace's FV (Sec. 3.2; compared in Sec. 4.4, Fig. 5): ``local``
#: (eq. 8, the paper's default), ``moving`` (eqs. 9–11), ``none`` (the raw scores).
FV_NORMS = ("local", "moving", "none")


@dataclass(frozen=True)
class Setting:
    """A training setting (a method's :attr:`MethodParameters.setting`): what its clients are
    and the run options (flat keys of ``config.json``) it cannot take, declared once here and
    refused in one message (:func:`setting_refusal`)."""

    name: str
    clients: str
    refuses: tuple[str, ...] = ()


#: Every setting. A cross-silo party is an organisation that trains every round, synchronised
#: every ``--local-steps`` K steps, under the method's own server step: the cross-device
#: schedule (cohort sampling, aggregation, local epochs), the server optimisers, VoxCeleb's
#: random crop and user-level DP are not its options.
SETTINGS: dict[str, Setting] = {
    "cross-device": Setting("cross-device", "a client is one person"),
    "cross-silo": Setting(
        "cross-silo",
        "a client is an organisation that trains every round, synchronised every "
        "--local-steps K steps, under the method's own server step",
        refuses=(
            "fraction",
            "sampling",
            "aggregation",
            "local_epochs",
            "server_optimizer",
            "server_lr",
            "random_crop",
            "dp",
        ),
    ),
}


def setting_refusal(
    method: MethodParameters, values: Mapping[str, Any], defaults: Mapping[str, Any]
) -> str | None:
    """The one message refusing what a run's flat settings ``values`` set (other than their
    ``defaults``) that ``method``'s setting cannot take (:data:`SETTINGS`), or ``None``."""
    setting = SETTINGS[method.setting]
    refused = [key for key in setting.refuses if key in values and values[key] != defaults.get(key)]
    if not refused:
        return None
    options = ", ".join("--" + key.replace("_", "-") for key in refused)
    others = " and ".join(name for name in SETTINGS if name != setting.name)
    return f"{options}: {others} options; {method.name} is {setting.name} ({setting.clients})"


@dataclass(frozen=True)
class MethodParameters:
    """What every method has without its tensors: a name, capabilities, checked parameters."""

    name: ClassVar[str] = "fedavg"
    output_kind: ClassVar[str] = "embedding"

    # -- capabilities: what generic code asks of a method instead of its name ----------------
    #: Which trainer runs it: ``"cross-device"`` (a client is one person, :mod:`uvtrain.engine`)
    #: or ``"cross-silo"`` (a client is an organisation with many people, FedFace).
    setting: ClassVar[str] = "cross-device"
    #: A single client's plain update reveals a secret of that client (FedUV: the sign of
    #: ``ΔW ḡ`` is the codeword), so it may only travel inside secure aggregation: the Flower
    #: deployment turns SecAgg+ on for it and its devices refuse plain rounds.
    update_reveals_secret: ClassVar[bool] = False
    #: What a device must hold in its SDK template store before it trains (FedUV:
    #: ``"codeword"``, made on the device from the code the server sends at registration).
    device_secrets: ClassVar[tuple[str, ...]] = ()
    #: The attacks ``uvtrain audit`` runs on it: ``"codeword-bits"`` (recover a secret codeword
    #: from the aggregates), ``"prototype-leakage"`` (P_leak of the class vectors the server
    #: sees), ``"inversion"`` (reconstruct a client's images from its update).
    audits: ClassVar[frozenset[str]] = frozenset({"inversion"})
    #: Its users verify against their learnt class rows (the rows of its ``prototypes``), as the
    #: FedUV paper scores its baselines softmax and FedAwS: the report adds that protocol
    #: (``class_row``) beside the SDK's enrollment one.
    verifies_by_class_row: ClassVar[bool] = False
    #: Schedule keys the method trains with when the run gives none (its server optimiser:
    #: :data:`uvtrain.config.SERVER_KEYS`; empty: plain FedAvg, sgd with η = 1, and the
    #: :class:`~uvtrain.config.Schedule`'s defaults).
    schedule_defaults: ClassVar[dict[str, Any]] = {}

    def __post_init__(self) -> None:
        """Each method checks its own parameters (types here, ranges in its override), so a bad
        value is refused wherever the object is made: ``FedHide(alpha=2)`` raises ConfigError."""
        check_types(self)

    def deployment_problem(self) -> str | None:
        """Why this method (with these parameters) cannot run on Flower devices, or ``None``
        when it can: each hook must run on the one party that owns its data."""
        return None

    def backbone_options(self, backbone: type) -> dict[str, Any]:
        """Constructor options the method asks of its backbone class (a registered
        :class:`~uvtrain.models.Backbone`): none by default — the backbone's own defaults. A run
        that starts from pretrained weights builds the weights' architecture and ignores them."""
        return {}

    def parameters(self) -> dict[str, Any]:
        """The method's hyper-parameters, for the run's config and report."""
        return {item.name: getattr(self, item.name) for item in fields(self)}


@dataclass(frozen=True)
class FedUVParameters(MethodParameters):
    """FedUV: secret BCH codewords, positive-only loss, FedAvg of the whole model (W included).

    ``negative_weight`` (λ of eq. 3) and ``negative_loss`` (its form, see
    :mod:`uvtrain.algorithms.feduv`) are the paper's Fig. 4 ablation, which shares every
    codeword; 0 is FedUV."""

    name: ClassVar[str] = "feduv"
    output_kind: ClassVar[str] = "codeword"
    update_reveals_secret: ClassVar[bool] = True
    device_secrets: ClassVar[tuple[str, ...]] = ("codeword",)
    audits: ClassVar[frozenset[str]] = frozenset({"codeword-bits", "inversion"})
    #: Each user pulls the shared model towards its own codeword by 1/m of a round's step: the
    #: server takes 5 times the cohort's mean update (plain sgd, η 5) with a slower lr decay,
    #: which learns on a short run where plain FedAvg stays near chance; server momentum does
    #: not (docs/trainer.md, "Server optimisers", measured).
    schedule_defaults: ClassVar[dict[str, Any]] = {"server_lr": 5.0, "lr_decay": 0.005}
    code_length: int = field(default=127, metadata={"help": "FedUV BCH length: 127, 255, 511."})
    negative_weight: float = field(
        default=0.0, metadata={"help": "FedUV ablation: negative loss weight λ (eq. 3)."}
    )
    negative_loss: str = field(
        default="max",
        metadata={"help": "FedUV ablation's ℓ_neg: max (the paper's eq. 4) or mean-relu (ours)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.code_length not in (127, 255, 511):
            raise ConfigError("code_length must be 127, 255 or 511 (the FedUV paper's BCH codes)")
        if self.negative_weight < 0:
            raise ConfigError("negative_weight must be >= 0")
        if self.negative_loss not in NEGATIVE_LOSSES:
            raise ConfigError(
                f"negative_loss must be one of {', '.join(NEGATIVE_LOSSES)}, "
                f"got {self.negative_loss!r}"
            )

    def deployment_problem(self) -> str | None:
        if self.negative_weight > 0:
            return "negative_weight needs every user's codeword: not on Flower"
        return None


@dataclass(frozen=True)
class ProxyBankParameters(MethodParameters):
    """What FedHide, FedGN and FedCS share: private unit prototypes trained against a
    server-held bank of the clients' proxies."""

    audits: ClassVar[frozenset[str]] = frozenset({"prototype-leakage", "inversion"})
    weight: float = field(  # λ
        default=10.0, metadata={"help": "FedHide/FedGN/FedCS λ.", "flag": "--lambda"}
    )
    embedding_dim: int | None = field(
        default=512,
        metadata={
            "help": "FedHide/FedGN/FedCS: embedding dimension (paper: 512; a run folder written "
            "before this option reads as none: the backbone's own)."
        },
    )
    window: str = field(
        default="hamming",
        metadata={"help": "FedHide/FedGN/FedCS: log-mel window, hamming (paper) or hann."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.weight < 0:
            raise ConfigError("weight (λ) must be >= 0")
        if self.embedding_dim is not None and self.embedding_dim < 1:
            raise ConfigError("embedding_dim must be >= 1")
        if self.window not in WINDOWS:
            raise ConfigError(f"window must be one of {WINDOWS}, not {self.window!r}")

    def backbone_options(self, backbone: type) -> dict[str, Any]:
        """Sec. 4.1: 512-dimensional embeddings and, for a log-mel backbone, the Hamming window
        (``embedding_dim``, ``window``)."""
        options: dict[str, Any] = {}
        if self.embedding_dim is not None:
            options["embedding_dim"] = self.embedding_dim
        if getattr(backbone, "takes_window", False):
            options["window"] = self.window
        return options


@dataclass(frozen=True)
class FedHideParameters(ProxyBankParameters):
    """FedHide: private prototypes, proxy prototypes hidden among K neighbours (eq. 4,
    Algorithm 1)."""

    name: ClassVar[str] = "fedhide"
    alpha: float = field(default=0.1, metadata={"help": "FedHide α."})
    neighbours: int = field(default=5, metadata={"help": "FedHide K nearest proxies."})  # K

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.alpha <= 1 or self.neighbours < 1:
            raise ConfigError("alpha must be in [0, 1] and neighbours >= 1")


@dataclass(frozen=True)
class FedGNParameters(ProxyBankParameters):
    """FedHide's loss and bank, with Gaussian-noise proxies ``normalize(w + σ n)`` (the FedHide
    paper's FedGN baseline)."""

    name: ClassVar[str] = "fedgn"
    sigma: float = field(default=0.3, metadata={"help": "FedGN noise σ."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sigma < 0:
            raise ConfigError("sigma must be >= 0")


@dataclass(frozen=True)
class FedCSParameters(ProxyBankParameters):
    """FedHide's loss and bank, with proxies drawn at a fixed cosine to the prototype (the FedHide
    paper's FedCS baseline)."""

    name: ClassVar[str] = "fedcs"
    cosine: float = field(default=0.3, metadata={"help": "FedCS cos θ to the prototype."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not -1 <= self.cosine <= 1:
            raise ConfigError("cosine must be in [-1, 1]")


@dataclass(frozen=True)
class FedAwSParameters(MethodParameters):
    """FedAwS: positive-only client loss, class embeddings held by the server, spreadout there."""

    name: ClassVar[str] = "fedaws"
    audits: ClassVar[frozenset[str]] = frozenset({"prototype-leakage", "inversion"})
    verifies_by_class_row: ClassVar[bool] = True
    positive_margin: float = field(  # ν_p
        default=0.9, metadata={"help": "FedAwS positive-loss margin."}
    )
    spread_margin: float = field(  # ν (√2: orthogonal; pairs closer than ν are pushed apart)
        default=1.2, metadata={"help": "FedAwS spreadout ν."}
    )
    spread_lr: float = field(  # λ: the server's step is λ η_r
        default=1.0, metadata={"help": "FedAwS server learning-rate multiplier λ."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.spread_lr < 0 or self.spread_margin < 0:
            raise ConfigError("spread_lr and spread_margin must be >= 0")


@dataclass(frozen=True)
class SoftmaxParameters(MethodParameters):
    """Federated softmax: a class row per client, averaged with the model (the FedUV paper's
    baseline)."""

    name: ClassVar[str] = "softmax"
    audits: ClassVar[frozenset[str]] = frozenset({"prototype-leakage", "inversion"})
    verifies_by_class_row: ClassVar[bool] = True
    softmax_head: str = field(
        default="plain",
        metadata={
            "help": "Softmax head: plain (W z + b, the FedUV paper's) or cosine (s·W̃ z, ours)."
        },
    )
    scale: float = field(default=16.0, metadata={"help": "Cosine softmax logit scale s."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.softmax_head not in SOFTMAX_HEADS:
            raise ConfigError(
                f"softmax_head must be one of {', '.join(SOFTMAX_HEADS)}, got {self.softmax_head!r}"
            )
        if self.scale <= 0:
            raise ConfigError("scale must be positive")


@dataclass(frozen=True)
class FedFaceParameters(MethodParameters):
    """FedFace, the cross-silo method: its margin loss, PFM, FV and how its parties are made.

    ``pfm=False`` is FedAvg with local momentum on every parameter (the paper's baseline);
    ``fv=False`` keeps the weighting at the parties' sample shares.
    """

    name: ClassVar[str] = "fedface"
    output_kind: ClassVar[str] = "embedding"
    setting: ClassVar[str] = "cross-silo"
    audits: ClassVar[frozenset[str]] = frozenset()
    margin_loss: str = field(default="arcface", metadata={"help": "FedFace: arcface or cosface."})
    margin_scale: float = field(default=64.0, metadata={"help": "FedFace: logit scale s."})
    margin: float | None = field(
        default=None, metadata={"help": "FedFace: margin m (default 0.5 / 0.35)."}
    )
    momentum: float = field(default=0.9, metadata={"help": "FedFace: momentum μ."})
    weight_decay: float = field(default=5e-4, metadata={"help": "FedFace: weight decay."})
    pfm: bool = field(default=True, metadata={"help": "FedFace: Partially Federated Momentum."})
    fv: bool = field(default=True, metadata={"help": "FedFace: Federated Validation."})
    fv_candidates: int = field(default=3, metadata={"help": "FedFace FV: candidates T."})
    fv_rate: float = field(default=0.01, metadata={"help": "FedFace FV: step φ toward the best."})
    fv_gamma: float = field(default=0.01, metadata={"help": "FedFace FV: Moving Norm rate γ."})
    fv_epsilon: float = field(default=0.001, metadata={"help": "FedFace FV: ε of the norms."})
    fv_norm: str = field(
        default="local", metadata={"help": "FedFace FV: local (eq. 8), moving (eqs. 9-11), none."}
    )
    # the cross-silo trainer's: parties, how identities are split among them, validators, folds
    parties: int = field(
        default=3, metadata={"help": "FedFace: parties P (1: centralised baseline)."}
    )
    partition: str = field(
        default="auto",
        metadata={
            "help": "FedFace: auto, dataset (--dataset a,b,c: each party one dataset, or 1/m "
            "of one), language or random."
        },
    )
    validators: int = field(
        default=2, metadata={"help": "FedFace: validators V holding verification sets."}
    )
    solo_party: int = field(
        default=0,
        metadata={
            "help": "FedFace: train party N (1..P) alone on its own data, no federation (the "
            "paper's Table 1 'Solo'); 0: off."
        },
    )
    fv_folds: int = field(default=10, metadata={"cli": False})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.parties < 1 or self.validators < 0 or self.fv_folds < 2:
            raise ConfigError("parties must be >= 1, validators >= 0 and fv_folds >= 2")
        if self.partition not in PARTITIONS:
            raise ConfigError(f"partition must be one of {PARTITIONS}, not {self.partition!r}")
        if not 0 <= self.solo_party <= self.parties:
            raise ConfigError(f"solo_party must be in 0..parties, not {self.solo_party}")
        if self.margin_loss not in ("arcface", "cosface"):
            raise ConfigError(f"margin_loss must be arcface or cosface, not {self.margin_loss!r}")
        if self.margin_scale <= 0 or (self.margin is not None and not 0 <= self.margin < 3.14):
            raise ConfigError("margin_scale must be positive and margin in [0, π)")
        if not 0 <= self.momentum < 1 or self.weight_decay < 0:
            raise ConfigError("momentum must be in [0, 1) and weight_decay >= 0")
        if self.fv_candidates < 2 or not 0 < self.fv_rate <= 1 or not 0 < self.fv_gamma <= 1:
            raise ConfigError("fv_candidates must be >= 2, fv_rate and fv_gamma in (0, 1]")
        if self.fv_epsilon <= 0 or self.fv_norm not in FV_NORMS:
            raise ConfigError(f"fv_epsilon must be positive and fv_norm one of {FV_NORMS}")

    def deployment_problem(self) -> str | None:
        return "fedface is cross-silo (a client is an organisation): not on devices"


#: Every method's parameters by name: the names and order of :data:`uvtrain.algorithms.METHODS`.
PARAMETERS: dict[str, type[MethodParameters]] = {
    "feduv": FedUVParameters,
    "fedhide": FedHideParameters,
    "fedgn": FedGNParameters,
    "fedcs": FedCSParameters,
    "fedaws": FedAwSParameters,
    "softmax": SoftmaxParameters,
    "fedface": FedFaceParameters,
}
