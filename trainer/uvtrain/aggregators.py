"""The aggregators a run chooses by name (``--aggregation``): one registry, :data:`AGGREGATORS`.

The config's allowed values (:class:`uvtrain.config.Schedule`), the command line's help and the
simulator's construction (:func:`make_aggregator`) all read it, so a new aggregator is its class
(an :class:`uvtrain.rounds.Aggregator` made from the method's algorithm) and one line here. No
torch is imported: the config checks a name before torch is loaded (``uvtrain run --dry-run``);
the class is imported when a run is built.

Under differential privacy the mechanism's sum replaces whichever is chosen
(:class:`uvtrain.privacy.PrivateSum`: every client weighs the same there).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

from .errors import ConfigError

if TYPE_CHECKING:
    from .rounds import Aggregator


@dataclass(frozen=True)
class Registered:
    """An aggregator by name: what ``--aggregation``'s help says of it and where its class is
    (``"module:Class"``, imported by :meth:`make`)."""

    help: str
    target: str

    def make(self, algorithm: Any) -> Aggregator:
        """The aggregator over ``algorithm`` (the method's :class:`~uvtrain.algorithms.FedAvg`)."""
        module, name = self.target.split(":")
        return getattr(import_module(module), name)(algorithm)


#: The aggregators by name, the first the default.
AGGREGATORS: dict[str, Registered] = {
    "weighted": Registered("by samples, FedAvg", "uvtrain.rounds:WeightedMean"),
    "mean": Registered("plain 1/M, FedHide Alg. 1", "uvtrain.rounds:UniformMean"),
}


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def aggregation_help() -> str:
    """``--aggregation``'s help, from the registry."""
    return _either([f"{name} ({entry.help})" for name, entry in AGGREGATORS.items()])


def check_aggregation(name: str) -> None:
    """:class:`ConfigError` (one line) for a name the registry does not hold."""
    if name not in AGGREGATORS:
        choices = _either([repr(known) for known in AGGREGATORS])
        raise ConfigError(f"aggregation must be {choices}, not {name!r}")


def make_aggregator(name: str, algorithm: Any) -> Aggregator:
    """The registered aggregator ``name`` over the method's ``algorithm``."""
    check_aggregation(name)
    return AGGREGATORS[name].make(algorithm)
