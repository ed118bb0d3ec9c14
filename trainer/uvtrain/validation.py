"""The type check every parameters dataclass runs first: the run config's parts
(:mod:`uvtrain.config`) and the algorithms (:mod:`uvtrain.algorithms`) both import it from here, so
neither imports the other to validate itself."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import fields
from typing import Any

from .errors import ConfigError

_KINDS = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


def check_field(item: dataclasses.Field, value: Any) -> None:
    """``value`` has the field's type (``int``, ``float``, ``str``, ``bool``, or one of them
    ``| None``); a float is finite. :class:`ConfigError` naming the field otherwise."""
    declared = item.type if isinstance(item.type, str) else item.type.__name__
    expected = declared.replace(" | None", "")
    if value is None and "None" in declared:
        return
    if isinstance(value, bool) != (expected == "bool") or not isinstance(value, _KINDS[expected]):
        raise ConfigError(f"config: {item.name} must be {expected}, not {value!r}")
    if expected == "float" and not math.isfinite(value):  # --lr inf, --fraction nan
        raise ConfigError(f"{item.name} must be a finite number, not {value!r}")


def check_types(instance: Any) -> None:
    """:func:`check_field` for every field of a parameters dataclass (parts and algorithms call it
    first in ``__post_init__``, before their ranges)."""
    for item in fields(instance):
        check_field(item, getattr(instance, item.name))
