"""Reading checkpoint files safely: ``torch.load(weights_only=True)`` (no pickled code ever
runs), each failure one line naming the file and what is wrong with it."""

from __future__ import annotations

import pickle
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .errors import CheckpointError, TrainingError


def read_checkpoint(path: str | Path) -> Any:
    """The tensors (and plain containers) of a checkpoint file, on the CPU.

    Raises
    ------
    CheckpointError
        The file is missing, truncated or not a PyTorch checkpoint, or it holds pickled Python
        objects other than tensors and plain values (refused unread: nothing in it ran).
    """
    import torch

    path = Path(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint file") from None
    except pickle.UnpicklingError as error:
        text = " ".join(str(error).split())
        if "GLOBAL" in text:  # weights_only met a class or function reference: a code payload
            name = text.split("GLOBAL", 1)[1].split()[0] if "GLOBAL " in text else "?"
            raise CheckpointError(
                f"{path}: refused: it holds pickled Python objects ({name}), not only tensors; "
                "it was not run. Use a checkpoint written by uvtrain"
            ) from None
        raise CheckpointError(f"{path}: not a PyTorch checkpoint (unreadable data)") from None
    except (EOFError, OSError, RuntimeError, zipfile.BadZipFile) as error:
        # A truncated zip archive shows up as EINVAL, a bad central directory or an EOF.
        reason = " ".join(str(error).split())[:120] or type(error).__name__
        raise CheckpointError(
            f"{path}: not a readable checkpoint (truncated or corrupt: {reason})"
        ) from None
    except Exception:  # noqa: BLE001 - bytes the (weights-only) unpickler cannot make sense of
        raise CheckpointError(f"{path}: not a PyTorch checkpoint (unreadable data)") from None


def load_state(path: str | Path, load: Callable[[Any], None]) -> None:
    """Read ``path`` with :func:`read_checkpoint` and hand it to ``load`` (a simulation's
    ``load_state_dict``); a state of another shape is a :class:`CheckpointError`."""
    state = read_checkpoint(path)
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{path}: not a uvtrain checkpoint (a {type(state).__name__})")
    try:
        load(state)
    except CheckpointError:
        raise
    except TrainingError as error:  # another schedule, another number of parties
        raise CheckpointError(f"{path}: {error}") from None
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as error:
        raise CheckpointError(
            f"{path}: not a uvtrain checkpoint of this run ({type(error).__name__}: {error})"
        ) from None
