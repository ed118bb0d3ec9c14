"""JSON with bounded nesting and numbers: how ``manifest.json`` is parsed (spec §3.3).

Python's :func:`json.loads` recurses once per nesting level (a deep enough text raises
``RecursionError``), converts an integer literal of any length (more than 4,300 digits raise
``ValueError``; a count of 10^400 overflows later, where it meets a float), and JavaScript cannot
hold integers beyond 2^53 − 1 exactly. :func:`load_bounded_json` refuses such texts first, with a
:class:`JsonLimitError`, as the JavaScript SDK's parser does, so both implementations read every
manifest they accept alike.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64
"""Most arrays and objects open at once (the manifest's own object counts)."""
MAX_NUMBER_CHARACTERS = 64
"""Longest number literal accepted, in characters."""
MAX_INTEGER = 2**53 - 1
"""Largest magnitude of an integer literal (JavaScript's ``Number.MAX_SAFE_INTEGER``)."""

_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


class JsonLimitError(ValueError):
    """The text nests too deeply or holds a number too long or too large."""


def load_bounded_json(text: str) -> Any:
    """Parse ``text`` as :func:`json.loads` does, within the limits of this module.

    Raises
    ------
    JsonLimitError
        Nesting deeper than :data:`MAX_DEPTH` (checked before parsing), or a number literal
        longer than :data:`MAX_NUMBER_CHARACTERS` or an integer beyond :data:`MAX_INTEGER`.
    json.JSONDecodeError
        Text that is not JSON.
    """
    check_depth(text)
    return json.loads(text, parse_int=_integer, parse_float=_float)


def check_depth(text: str) -> None:
    """Refuse ``text`` if its brackets outside strings nest deeper than :data:`MAX_DEPTH`."""
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise JsonLimitError(f"nested deeper than {MAX_DEPTH} levels")
        elif token in "]}":
            depth -= 1


def _check_length(literal: str) -> None:
    if len(literal) > MAX_NUMBER_CHARACTERS:
        raise JsonLimitError(
            f"a number of {len(literal)} characters, more than the {MAX_NUMBER_CHARACTERS} accepted"
        )


def _integer(literal: str) -> int:
    _check_length(literal)
    value = int(literal)
    if abs(value) > MAX_INTEGER:
        raise JsonLimitError("an integer beyond 2**53 - 1 in magnitude")
    return value


def _float(literal: str) -> float:
    _check_length(literal)
    return float(literal)
