"""The console entry point of ``uvexport``: it imports nothing heavy (see :mod:`uvtrain.extras`).

``keygen`` needs only the SDK's dependencies (cryptography); exporting a run and rebuilding the
default voice need the ``train`` extra (torch, onnx, onnxscript, ...).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from uvtrain.extras import EXPORT, check


def main(argv: Sequence[str] | None = None) -> int:
    """``uvexport``: the exporter's modules, then :mod:`uvexport.cli`; returns the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    modules = () if arguments[:1] == ["keygen"] else EXPORT
    status = check("uvexport: ", modules, arguments)
    if status is not None:
        return status
    from .cli import main as cli_main

    return cli_main(arguments)
