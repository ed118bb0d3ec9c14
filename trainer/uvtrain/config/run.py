"""The run config (:class:`RunConfig`): the parts, the chosen method's parameters and the
run-level options; flat keys in (:meth:`RunConfig.from_flat`) and out (:meth:`RunConfig.to_dict`),
and the one resume check (:func:`changed_settings`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import ConfigError
from ..validation import check_field
from .parts import PARTS, Data, Model, Privacy
from .schedule import MAX_SEED, Schedule, schedule_defaults


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
        from ..methods import PARAMETERS, setting_refusal  # here: the config needs no torch

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
        # the options the method's setting cannot take (declared once: uvtrain.methods.SETTINGS)
        defaults = {
            item.name: item.default
            for _, item in part_fields()
            if item.default is not dataclasses.MISSING
        }
        refusal = setting_refusal(self.method, self.to_dict(), defaults)
        if refusal is not None:
            raise ConfigError(refusal)

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
        from ..methods import PARAMETERS

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
            from ..algorithms import METHODS as ALGORITHMS

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
        from ..algorithms import METHODS

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
    from ..methods import PARAMETERS

    found: dict[str, dataclasses.Field] = {}
    for kind in PARAMETERS.values():
        for item in fields(kind):
            found.setdefault(item.name, item)
    return found
