"""The config as the user reaches it: ``uvtrain run``'s options (:func:`cli_options`,
:func:`part_options`) and a Flower run config's keys (:func:`flower_keys`), made from the
fields' metadata."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from .parts import PARTS
from .run import method_fields, part_fields


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
    from ..methods import PARAMETERS

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
