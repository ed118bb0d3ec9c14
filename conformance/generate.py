"""Generate the conformance vectors from the Python SDK (the reference implementation).

    python conformance/generate.py            # (re)write conformance/vectors/*.json
    python conformance/generate.py --check    # regenerate in memory, compare, exit 1 on a change

Every expected value is what the SDK's own code returns or raises for the input: the
vectors are the SDK's behaviour written down, so a port that reproduces them behaves like it.
The inputs are committed files (``bundles/``, ``audio/``, ``known-users.json``, made once by
``make_inputs.py``) and values written in the generators; nothing is random without a fixed seed, so
regenerating is a no-op (``--check``, run by ``tests/sdk/test_conformance.py``). Model outputs
are compared with a tolerance of 1e-6 there, everything else exactly. The format of each file is
described in ``conformance/README.md``; the rules behind it in ``docs/spec.md``.

Each file has its generator, ``generators/<file>.py`` (its ``generate()``); this driver runs
them, writes the files and compares them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
ROOT = HERE.parent
VECTORS = HERE / "vectors"

if str(HERE) not in sys.path:  # the generators package beside this file, however it is loaded
    sys.path.insert(0, str(HERE))

#: The vector files, in the order they are written: ``vectors/<name>.json`` from
#: ``generators/<name>.py``.
NAMES = ("media", "model", "enroll", "codeword", "template", "backoff", "bundle")
GENERATORS: dict[str, Callable[[], dict[str, Any]]] = {
    name: importlib.import_module(f"generators.{name}").generate for name in NAMES
}


def render(document_: dict[str, Any]) -> str:
    return json.dumps(document_, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def differences(old: Any, new: Any, path: str = "", model: bool = False) -> list[str]:
    """Where two vector documents differ (model outputs within 1e-6, the rest exactly)."""
    if isinstance(old, dict) and isinstance(new, dict):
        if old.keys() != new.keys():
            return [f"{path}: keys {sorted(old.keys() ^ new.keys())}"]
        return [d for k in old for d in differences(old[k], new[k], f"{path}.{k}", model)]
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{path}: {len(old)} items, now {len(new)}"]
        return [
            d
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for d in differences(a, b, f"{path}[{i}]", model)
        ]
    if model and isinstance(old, float) and isinstance(new, float):
        return (
            []
            if math.isclose(old, new, rel_tol=1e-6, abs_tol=1e-6)
            else [f"{path}: {old} -> {new}"]
        )
    return [] if old == new and type(old) is type(new) else [f"{path}: {old!r:.60} -> {new!r:.60}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--only", choices=sorted(GENERATORS), action="append")
    args = parser.parse_args(argv)
    changed = []
    for name in args.only or GENERATORS:
        text = render(GENERATORS[name]())
        path = VECTORS / f"{name}.json"
        if args.check:
            old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
            found = (
                ["missing"]
                if old is None
                else differences(old, json.loads(text), name, model=name in ("model", "enroll"))
            )
            if found:
                changed.append(f"{path.name}: " + "; ".join(found[:5]))
        else:
            VECTORS.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"{path.relative_to(ROOT)}: {len(text)} bytes")
    for line in changed:
        print(line, file=sys.stderr)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
