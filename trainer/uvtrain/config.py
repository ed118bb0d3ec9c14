"""Run configuration: a frozen dataclass that validates itself; CLI > TOML file > default."""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .errors import ConfigError


@dataclass(frozen=True)
class RunConfig:
    """Everything a run depends on; written to ``RUN_DIR/config.json``.

    ``crop_seconds``: audio training samples are random windows of this length (0: whole clips).
    ``eval_every``: > 0 adds the EERs on test_known and unknown to ``metrics.jsonl`` every so many
    rounds (the curves of EER against rounds).
    Method parameters, each read by the methods that have a field of its name:
    ``code_length``, ``negative_weight`` (FedUV); ``weight`` (λ: FedHide, FedGN, FedCS); ``alpha``
    (α), ``neighbours`` (K) (FedHide); ``sigma`` (FedGN); ``cosine`` (cos θ, FedCS); ``scale``
    (softmax); ``positive_margin``, ``spread_margin`` (ν), ``spread_lr`` (λ) (FedAwS).
    FedFace (cross-silo): ``parties`` (P; 1 = centralised), ``partition`` (auto, language,
    random), ``validators`` (V), ``margin_loss`` (arcface, cosface), ``margin_scale`` (s),
    ``margin`` (m; default by loss), ``momentum`` (μ), ``weight_decay``, ``pfm``, ``fv``,
    ``fv_candidates`` (T), ``fv_rate`` (φ), ``fv_gamma`` (γ), ``fv_epsilon`` (ε), ``fv_norm``
    (local, moving), ``fv_folds``; ``local_steps`` is the synchronisation interval K and
    ``lr_decay`` applies per local step.
    """

    method: str
    dataset: str
    clients: int | None = None
    rounds: int = 50
    fraction: float = 0.1
    sampling: str = "random"
    local_steps: int = 1
    batch_size: int = 16
    crop_seconds: float = 1.0
    lr: float = 0.1
    lr_decay: float = 0.01
    code_length: int = 127
    negative_weight: float = 0.0
    weight: float = 10.0
    alpha: float = 0.1
    neighbours: int = 5
    sigma: float = 0.3
    cosine: float = 0.3
    scale: float = 16.0
    positive_margin: float = 0.9
    spread_margin: float = 1.2
    spread_lr: float = 1.0
    device: str = "auto"
    seed: int = 0
    backbone: str | None = None
    pretrained: str | None = None
    root: str | None = None
    checkpoint_every: int = 10
    chunk_size: int = 64
    target_tpr: float = 0.95
    eval_every: int = 0
    parties: int = 3
    partition: str = "auto"
    validators: int = 2
    margin_loss: str = "arcface"
    margin_scale: float = 64.0
    margin: float | None = None
    momentum: float = 0.9
    weight_decay: float = 5e-4
    pfm: bool = True
    fv: bool = True
    fv_candidates: int = 3
    fv_rate: float = 0.01
    fv_gamma: float = 0.01
    fv_epsilon: float = 0.001
    fv_norm: str = "local"
    fv_folds: int = 10

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            expected = field.type.replace(" | None", "")
            if value is None and "None" in field.type:
                continue
            kinds = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}[expected]
            if isinstance(value, bool) != (expected == "bool") or not isinstance(value, kinds):
                raise ConfigError(f"config: {field.name} must be {expected}, not {value!r}")
            if expected == "float" and not math.isfinite(value):  # --lr inf, --fraction nan
                raise ConfigError(f"{field.name} must be a finite number, not {value!r}")
        from .algorithms import METHODS  # here: importing the config needs no torch (--help)

        if self.method not in METHODS:
            raise ConfigError(f"unknown method {self.method!r}: one of {', '.join(METHODS)}")
        if self.code_length not in (127, 255, 511):
            raise ConfigError("code_length must be 127, 255 or 511 (the FedUV paper's BCH codes)")
        if self.clients is not None and self.clients < 2:
            raise ConfigError("clients must be at least 2")
        self._check_schedule()
        if self.sampling not in ("random", "round-robin"):
            raise ConfigError(f"sampling must be 'random' or 'round-robin', not {self.sampling!r}")
        if self.checkpoint_every < 1 or not 0 < self.target_tpr <= 1:
            raise ConfigError("checkpoint_every must be >= 1 and target_tpr in (0, 1]")
        if self.crop_seconds < 0:
            raise ConfigError("crop_seconds must be >= 0 (0: train on whole clips)")
        if not 0 <= self.alpha <= 1 or self.neighbours < 1:
            raise ConfigError("alpha must be in [0, 1] and neighbours >= 1")
        if self.sigma < 0 or not -1 <= self.cosine <= 1:
            raise ConfigError("sigma must be >= 0 and cosine in [-1, 1]")
        if self.scale <= 0 or self.spread_lr < 0 or self.spread_margin < 0:
            raise ConfigError("scale must be positive, spread_lr and spread_margin >= 0")
        if self.eval_every < 0:
            raise ConfigError("eval_every must be >= 0 (0: only at the end)")
        self._check_fedface()

    def _check_schedule(self) -> None:
        """The engine's ranges (:class:`~uvtrain.engine.EngineConfig` checks them again), here so
        that a bad value is refused before any data is read or any folder made."""
        if self.rounds < 0 or self.seed < 0:
            raise ConfigError(f"rounds and seed must be >= 0, not {self.rounds} and {self.seed}")
        if not 0.0 < self.fraction <= 1.0:
            raise ConfigError(f"fraction must be in (0, 1], not {self.fraction}")
        for name in ("local_steps", "batch_size", "chunk_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, not {getattr(self, name)}")
        if not self.lr > 0 or self.lr_decay < 0:
            raise ConfigError(
                f"lr must be positive and lr_decay >= 0, not {self.lr} and {self.lr_decay}"
            )
        if self.negative_weight < 0 or self.weight < 0:
            raise ConfigError("negative_weight and weight (λ) must be >= 0")

    def _check_fedface(self) -> None:
        if self.parties < 1 or self.validators < 0 or self.fv_folds < 2:
            raise ConfigError("parties must be >= 1, validators >= 0 and fv_folds >= 2")
        if self.partition not in ("auto", "language", "random"):
            raise ConfigError(f"partition must be auto, language or random, not {self.partition!r}")
        if self.margin_loss not in ("arcface", "cosface"):
            raise ConfigError(f"margin_loss must be arcface or cosface, not {self.margin_loss!r}")
        if self.margin_scale <= 0 or (self.margin is not None and not 0 <= self.margin < 3.14):
            raise ConfigError("margin_scale must be positive and margin in [0, π)")
        if not 0 <= self.momentum < 1 or self.weight_decay < 0:
            raise ConfigError("momentum must be in [0, 1) and weight_decay >= 0")
        if self.fv_candidates < 2 or not 0 < self.fv_rate <= 1 or not 0 < self.fv_gamma <= 1:
            raise ConfigError("fv_candidates must be >= 2, fv_rate and fv_gamma in (0, 1]")
        if self.fv_epsilon <= 0 or self.fv_norm not in ("local", "moving"):
            raise ConfigError("fv_epsilon must be positive and fv_norm local or moving")

    def algorithm(self) -> Any:
        """The algorithm object with this config's values for the method's parameters."""
        from .algorithms import METHODS

        method = METHODS[self.method]
        return method(**{field.name: getattr(self, field.name) for field in fields(method)})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def read_toml(path: str | Path) -> dict[str, Any]:
    """A config file's keys (flat, or under a ``[run]`` table)."""
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
    return data.get("run", data)


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


def resolve(cli: dict[str, Any], file: str | Path | None = None) -> RunConfig:
    """Merge: options given on the command line beat the file, which beats the defaults."""
    merged = read_toml(file) if file else {}
    names = {field.name for field in fields(RunConfig)}
    unknown = sorted(set(merged) - names)
    if unknown:
        raise ConfigError(f"unknown config key(s): {', '.join(unknown)}")
    merged.update({key: value for key, value in cli.items() if value is not None})
    for required in ("method", "dataset"):
        if required not in merged:
            raise ConfigError(f"no {required}: give --{required} or set it in the config file")
    try:
        return RunConfig(**merged)
    except TypeError as error:
        raise ConfigError(f"config: {error}") from None
