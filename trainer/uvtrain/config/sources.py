"""Where a run config comes from: a TOML file (:func:`read_toml`, sections by part and by method),
a value written as in TOML (:func:`read_toml_value`) and the merge of command line, file, preset
and defaults (:func:`resolve`)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .parts import PARTS
from .run import RunConfig, part_fields


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
    from ..methods import PARAMETERS

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
    from ..methods import PARAMETERS

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
        from ..presets import get

        merged.update(get(preset).settings)
    method = given.get("method", in_file.get("method", merged.get("method")))
    merged.update(flatten_sections(in_file, method))
    merged.update(given)
    return RunConfig.from_flat(merged, parameters_only=parameters_only)
