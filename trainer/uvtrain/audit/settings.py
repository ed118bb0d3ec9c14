"""What ``uvtrain audit`` measures: the options, their presets and defaults, and the run config
of a fresh setup (:func:`resolve`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..algorithms import METHODS
from ..config import SECURE_DEFAULT_EPSILON, Privacy, RunConfig
from ..errors import ConfigError

#: Public samples (held-out identities) the attacker averages ``g(x)`` over.
PUBLIC_SAMPLES = 64


def leakage_methods() -> tuple[str, ...]:
    """The methods whose ``P_leak`` a fresh audit measures by default: every method that
    declares the ``"prototype-leakage"`` attack, in the registry's order."""
    return tuple(name for name, method in METHODS.items() if "prototype-leakage" in method.audits)


def parse_sizes(text: str, name: str) -> tuple[int, ...]:
    """``"2,5,10"`` → ``(2, 5, 10)``; ``""`` or ``"none"`` → ``()``. Each an integer >= 1."""
    if text.strip().lower() in ("", "none"):
        return ()
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"--{name} {text!r}: give a comma-separated list of integers") from None
    if any(size < 1 for size in sizes):
        raise ConfigError(f"--{name} {text!r}: every value must be at least 1")
    return tuple(sorted(set(sizes)))


def parse_methods(text: str) -> tuple[str, ...]:
    """``"fedhide,fedaws"`` → those prototype methods; ``""`` or ``"none"`` → ``()``."""
    if text.strip().lower() in ("", "none"):
        return ()
    methods = tuple(dict.fromkeys(part.strip() for part in text.split(",")))
    for method in methods:
        if method not in METHODS:
            raise ConfigError(f"--methods: unknown method {method!r}: one of {', '.join(METHODS)}")
        if "prototype-leakage" not in METHODS[method].audits:
            raise ConfigError(
                f"--methods: {method} shares no prototypes to match (P_leak is measured for "
                f"{', '.join(leakage_methods())})"
            )
    return methods


def parse_epsilons(text: str) -> tuple[float, ...]:
    """``"inf,16,8"`` → ``(inf, 16.0, 8.0)``: the budgets ``ε`` to audit, ``inf`` meaning no
    differential privacy. Each a number > 0."""
    values = []
    for part in str(text).split(","):
        try:
            value = float(part)
        except ValueError:
            raise ConfigError(
                f"--dp-epsilon {text!r}: give a comma-separated list of numbers (inf: no DP)"
            ) from None
        if not value > 0:  # nan too
            raise ConfigError(f"--dp-epsilon {text!r}: every ε must be positive (inf: no DP)")
        values.append(value)
    return tuple(dict.fromkeys(values))


#: The privacy options (those of ``uvtrain run``: :class:`uvtrain.config.Privacy`'s fields).
PRIVACY_OPTIONS = tuple(item.name for item in dataclasses.fields(Privacy))


def privacy_settings(chosen: Mapping[str, Any]) -> tuple[Privacy, ...]:
    """The differential privacy of the audit's secure runs, one setting per ``ε`` of
    ``chosen["dp_epsilon"]`` (a number or a comma-separated list; ``inf``: off), each a
    :class:`~uvtrain.config.Privacy` with ``chosen``'s other privacy options. ``dp`` defaults to
    ``distributed`` and ``ε`` to :data:`~uvtrain.config.SECURE_DEFAULT_EPSILON` (unless
    ``dp_noise_multiplier`` is given): the default wherever secure aggregation is on."""
    options = {key: chosen[key] for key in PRIVACY_OPTIONS if chosen.get(key) is not None}
    mechanism = options.setdefault("dp", "distributed")
    text = options.pop("dp_epsilon", None)
    epsilons = None if text is None else parse_epsilons(str(text))
    if mechanism == "off":
        if epsilons is not None and any(math.isfinite(value) for value in epsilons):
            raise ConfigError("--dp off: drop --dp-epsilon, or give --dp central or distributed")
        return (Privacy(**options),)
    if epsilons is None:
        epsilons = (None,) if "dp_noise_multiplier" in options else (SECURE_DEFAULT_EPSILON,)
    settings = []
    for value in epsilons:
        if value is not None and math.isinf(value):
            settings.append(Privacy(**{**options, "dp": "off", "dp_noise_multiplier": None}))
        else:
            settings.append(Privacy(**options, dp_epsilon=value))
    return tuple(settings)


def fitting(sizes: Sequence[int], clients: int, skip: bool, flag: str) -> list[int]:
    """The cohort sizes that fit ``clients``; a larger one is an error unless skipped."""
    large = [size for size in sizes if size > clients]
    if large and not skip:
        raise ConfigError(f"--{flag}: a cohort of {large[0]} needs more than the {clients} clients")
    return [size for size in sizes if size <= clients]


@dataclass(frozen=True)
class SecAggModel:
    """Flower's SecAgg+ arithmetic (``SecAggPlusWorkflow``'s clipping, quantisation and modulus
    ranges) on what the clients send.

    ``inputs``: ``"updates"`` — each client sends ``θ_k − θ``, as ``uvtrain deploy`` does — or
    ``"parameters"`` — ``θ_k``, as Flower's examples do. ``max_weight`` bounds a client's weight,
    its number of training samples: the values are multiplied by ``n_k / max_weight`` *before*
    they are quantised to steps of ``2 · 8 / 2**22 ≈ 3.8e-6``. ``None`` is what ``uvtrain deploy``
    sets, the cohort's largest sample count × 1.01 (weights near 1); Flower's default is 1000,
    with which 10 samples round a value to ``3.8e-6 / 0.01 ≈ 3.8e-4``.
    """

    clipping_range: float = 8.0
    quantization_range: int = 2**22
    modulus_range: int = 2**32
    max_weight: float | None = None
    inputs: str = "updates"

    def __post_init__(self) -> None:
        if not self.clipping_range > 0 or not (self.max_weight is None or self.max_weight > 0):
            raise ConfigError("SecAgg+: clipping_range and max_weight must be positive")
        if not 1 < self.quantization_range < self.modulus_range:
            raise ConfigError("SecAgg+: need 1 < quantization_range < modulus_range")
        if self.inputs not in ("updates", "parameters"):
            raise ConfigError("--secagg-inputs must be 'updates' or 'parameters'")


@dataclass(frozen=True)
class InversionSettings:
    """The gradient inversion: on ``dataset`` (a fresh audit; a run folder's own images), against
    one client's plain update and the secure aggregate of ``cohorts``, each client's update made
    on ``batch`` of its images; Adam on the pixels for ``steps`` steps at ``lr``, signed gradients,
    total-variation weight ``tv_weight``; the FedUV codeword ``label`` ``recovered`` or ``true``."""

    dataset: str = "orl-faces"
    cohorts: tuple[int, ...] = (2, 5, 10)
    batch: int = 1
    label: str = "recovered"
    steps: int = 1500
    lr: float = 0.1
    tv_weight: float = 0.2
    signed: bool = True
    skip_large_cohorts: bool = False

    def __post_init__(self) -> None:
        if self.steps < 1 or not self.lr > 0 or self.tv_weight < 0:
            raise ConfigError("inversion: need steps >= 1, lr > 0 and tv_weight >= 0")
        if self.batch < 1:
            raise ConfigError("--inversion-batch must be at least 1")
        if self.label not in ("recovered", "true"):
            raise ConfigError("--inversion-label must be 'recovered' or 'true'")


@dataclass(frozen=True)
class AuditSettings:
    """What to measure: ``cohorts`` (secure-aggregation cohort sizes) with ``cohort_draws`` random
    cohorts each; ``code_lengths`` (FedUV, fresh audits); ``methods`` (P_leak, fresh audits;
    default: :func:`leakage_methods`); ``decode`` (BCH decoding for exact recovery);
    ``inversion`` (``None``: none); ``skip_large_cohorts``: leave out cohorts larger than the
    clients (defaults) instead of refusing them (sizes given explicitly); ``privacy``: the
    differential privacy of the secure runs whose aggregates are disaggregated, one run per
    setting and code length (fresh audits; :func:`privacy_settings`); ``participations``
    (fresh audits; ``None``: the sampled cohorts): the secure runs' schedule is one client a
    round, in order, each client in exactly that many rounds (``n × K`` rounds of ``K``
    clients; :func:`~uvtrain.audit.training.one_client_each_round`) — the most exposed a user
    of a DP deployment can be at ``n`` participations: no other member's update in its rounds,
    and a membership matrix the least squares can invert."""

    cohorts: tuple[int, ...] = (2, 5, 10, 50)
    cohort_draws: int = 20
    code_lengths: tuple[int, ...] = (127, 255, 511)
    methods: tuple[str, ...] = field(default_factory=leakage_methods)
    decode: bool = True
    inversion: InversionSettings | None = InversionSettings()
    secagg: SecAggModel = SecAggModel()
    seed: int = 0
    skip_large_cohorts: bool = False
    privacy: tuple[Privacy, ...] = (Privacy("distributed", dp_epsilon=SECURE_DEFAULT_EPSILON),)
    participations: int | None = None

    def __post_init__(self) -> None:
        if self.participations is not None and self.participations < 1:
            raise ConfigError(f"--participations must be at least 1, not {self.participations}")
        if not self.privacy:
            raise ConfigError("the audit needs at least one privacy setting (--dp off: none)")
        if self.cohort_draws < 1:
            raise ConfigError("--cohort-draws must be at least 1")
        for length in self.code_lengths:
            if length not in (127, 255, 511):
                raise ConfigError(f"--code-lengths: {length} is not 127, 255 or 511")
        sizes = (*self.cohorts, *(self.inversion.cohorts if self.inversion else ()))
        largest = self.secagg.modulus_range // self.secagg.quantization_range
        if any(size >= largest for size in sizes):
            raise ConfigError(f"SecAgg+: a cohort of {largest} or more overflows its modulus")


#: ``--small``: seconds, for tests and CI (any option given explicitly wins).
SMALL_PRESET: dict[str, Any] = {
    "clients": 12,
    "rounds": 3,
    "fraction": 0.25,
    "batch_size": 4,
    "cohorts": "2,5,10",
    "cohort_draws": 3,
    "code_lengths": "127",
    "methods": "fedhide,fedaws",
    "decode": False,
    "inversion_cohorts": "2",
    "inversion_steps": 10,
}
#: Defaults of the options (``uvtrain audit --help`` names them).
DEFAULTS: dict[str, Any] = {
    "rounds": 100,
    "cohorts": "2,5,10,50",
    "cohort_draws": 20,
    "code_lengths": "127,255,511",
    "methods": ",".join(leakage_methods()),
    "decode": True,
    "max_weight": None,
    "secagg_inputs": "updates",
    "inversion": True,
    "inversion_dataset": "orl-faces",
    "inversion_cohorts": "2,5,10",
    "inversion_batch": 1,
    "inversion_label": "recovered",
    "inversion_steps": 1500,
    "seed": 0,
}
#: Options that describe a fresh setup (not allowed with a run folder, which has its own).
SETUP_OPTIONS = (
    "method",
    "dataset",
    "clients",
    "rounds",
    "fraction",
    "batch_size",
    "lr",
    "lr_decay",
    "code_lengths",
    "participations",
    "methods",
    "inversion_dataset",
    "config",
    *PRIVACY_OPTIONS,
)


def resolve(
    run_dir: Path | None, given: dict[str, Any], small: bool = False
) -> tuple[RunConfig | None, AuditSettings]:
    """The fresh setup's run config (``None`` for a run folder) and what to measure.

    Precedence: an option given > the ``--small`` preset > :data:`DEFAULTS`. A run folder is
    audited as it is: the options of a fresh setup (:data:`SETUP_OPTIONS`), its differential
    privacy included, are refused with it. A fresh setup's privacy options (given > the TOML
    file's > the audit's defaults, :func:`privacy_settings`) apply to its secure runs; the run
    config it returns has none (P_leak's and the inversion's trainings are without DP).
    """
    from ..config import read_toml
    from ..config import resolve as resolve_run

    explicit = {key: value for key, value in given.items() if value is not None}
    if run_dir is not None:
        clashing = sorted(key for key in explicit if key in SETUP_OPTIONS)
        if clashing:
            flags = ", ".join("--" + key.replace("_", "-") for key in clashing)
            raise ConfigError(f"a run folder is audited as it was trained: drop {flags}")
        if not run_dir.is_dir():
            raise ConfigError(f"run folder not found: {run_dir}")
    elif "method" not in explicit or "dataset" not in explicit:
        raise ConfigError("give a run folder, or --method and --dataset for a fresh setup")
    elif "participations" in explicit and ("rounds" in explicit or "fraction" in explicit):
        raise ConfigError(
            "--participations N sets the rounds (N × the clients) and the cohort (one client "
            "a round): drop --rounds and --fraction"
        )
    options = {**DEFAULTS, **(SMALL_PRESET if small else {}), **explicit}
    inversion = None
    if options["inversion"]:
        inversion = InversionSettings(
            dataset=options["inversion_dataset"],
            cohorts=parse_sizes(options["inversion_cohorts"], "inversion-cohorts"),
            batch=options["inversion_batch"],
            label=options["inversion_label"],
            steps=options["inversion_steps"],
            skip_large_cohorts="inversion_cohorts" not in explicit,
        )
    settings = AuditSettings(
        cohorts=parse_sizes(options["cohorts"], "cohorts"),
        cohort_draws=options["cohort_draws"],
        code_lengths=parse_sizes(options["code_lengths"], "code-lengths"),
        methods=parse_methods(options["methods"]),
        decode=options["decode"],
        inversion=inversion,
        secagg=SecAggModel(max_weight=options["max_weight"], inputs=options["secagg_inputs"]),
        seed=options["seed"],
        skip_large_cohorts="cohorts" not in explicit,
        participations=options.get("participations"),
    )
    if run_dir is not None:
        return None, settings
    in_file = read_toml(options["config"]) if options.get("config") else {}
    privacy = privacy_settings({**in_file, **explicit})
    # the run's own keys: given > preset > the TOML file > the audit's defaults (rounds, seed)
    chosen = {**(SMALL_PRESET if small else {}), **explicit}
    run_keys = ("method", "dataset", "clients", "rounds", "fraction", "batch_size", "lr")
    cli = {key: chosen.get(key) for key in (*run_keys, "lr_decay", "seed")}
    for key in ("rounds", "seed"):
        if cli[key] is None and key not in in_file:
            cli[key] = DEFAULTS[key]
    config = dataclasses.replace(resolve_run(cli, options.get("config")), privacy=Privacy())
    return config, dataclasses.replace(settings, seed=config.seed, privacy=privacy)
