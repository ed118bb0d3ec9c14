"""The console entry point of ``uvtrain``: nothing heavy.

The modules of the extras a command needs are checked first (:mod:`uvtrain.extras`, which
imports nothing), then the command line (:mod:`uvtrain.cli`) is imported and run.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .extras import FL, TRAIN, check


def main(argv: Sequence[str] | None = None) -> int:
    """``uvtrain``: the trainer's modules (``deploy``: Flower's too), then :mod:`uvtrain.cli`;
    returns the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    modules = (*TRAIN, *(FL if arguments[:1] == ["deploy"] else ()))
    status = check("uvtrain: error: ", modules, arguments)
    if status is not None:
        return status
    from .cli import main

    return main(arguments)
