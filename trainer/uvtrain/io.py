"""Files the trainer writes: one atomic write, strict JSON, and the run folder's layout.

Every file a run, an audit, an export or a deployment writes goes through :func:`atomic_write`:
a temporary file in the same folder, flushed and ``fsync``-ed, renamed over the target with
``os.replace`` (atomic on POSIX and Windows), the folder ``fsync``-ed where the platform allows;
the temporary file is removed when anything fails. A reader therefore sees the old file or the
new one, never half of one — also after a kill or a power cut.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from .errors import TrainingError

#: The files of a run folder (``uvtrain run``, ``uvtrain deploy``), named once.
CHECKPOINT = "checkpoint.pt"
CONFIG = "config.json"
METRICS = "metrics.jsonl"
REPORT = "report.json"
SCORES = "scores.npz"
ROC = "roc.png"
WEIGHTS = "weights.png"
STATUS = "status.json"
REGISTRY = "devices.json"
BUNDLE = "model.uvb"

Writer = Callable[[IO[bytes]], Any]


def atomic_write(path: str | Path, content: bytes | str | Writer) -> Path:
    """Write ``content`` to ``path`` atomically; returns the path.

    ``content`` is the bytes, a string (written as UTF-8), or a function that writes into the
    binary file object it is given (``torch.save``, ``numpy.savez``, ``figure.savefig`` with an
    explicit ``format``)."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            if isinstance(content, str):
                file.write(content.encode("utf-8"))
            elif isinstance(content, bytes | bytearray | memoryview):
                file.write(content)
            else:
                content(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_folder(path.parent)
    return path


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file (hex), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sync_folder(folder: Path) -> None:
    """Make the rename durable (POSIX); a no-op where folders cannot be opened (Windows)."""
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def jsonable(value: Any) -> Any:
    """A copy with numpy types made plain and non-finite floats made ``None`` (JSON ``null``):
    every JSON file of a run (``report.json``, ``metrics.jsonl``, ``config.json``) goes through
    it and ``json.dumps(allow_nan=False)``, so none ever holds ``NaN`` or ``Infinity`` (not
    JSON; strict parsers refuse them)."""
    import numpy as np

    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def json_text(data: Any, *, indent: int | None = None) -> str:
    """Strict JSON of ``data`` (:func:`jsonable`: never ``NaN``/``Infinity``)."""
    return json.dumps(jsonable(data), indent=indent, allow_nan=False)


def write_json(path: str | Path, data: Any) -> Path:
    """Strict, indented JSON written atomically."""
    return atomic_write(path, json_text(data, indent=2) + "\n")


def parse_json(text: str) -> Any:
    """``text`` parsed as the strict JSON the trainer writes, within the SDK's limits
    (:func:`uvsdk.jsonlimits.load_bounded_json`: nesting at most 64 deep, number literals at most
    64 characters, integers within 2^53 − 1) and with every number finite (``NaN``,
    ``Infinity``, ``1e999`` are refused: :func:`json_text` never writes them). The one parser of
    the JSON files the trainer and exporter read back, which may come from elsewhere (a run
    folder, a dataset, a stream folder's index): 100,000 nested brackets, a 5,000-digit number
    or ``Infinity`` are a :class:`ValueError` here, not a ``RecursionError`` or an
    ``OverflowError`` later.

    Raises
    ------
    ValueError
        Not JSON (:class:`json.JSONDecodeError`), beyond the limits
        (:class:`uvsdk.jsonlimits.JsonLimitError`) or holding a number that is not finite.
    """
    from uvsdk.jsonlimits import load_bounded_json

    value = load_bounded_json(text)
    _check_finite(value)
    return value


def _check_finite(value: Any) -> None:
    """Refuse a float that is not finite anywhere in ``value`` (nesting is bounded)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"a number that is not finite ({value}; not JSON)")
    if isinstance(value, dict):
        for item in value.values():
            _check_finite(item)
    elif isinstance(value, list):
        for item in value:
            _check_finite(item)


def read_json(path: str | Path) -> Any:
    """A JSON file the trainer wrote (:func:`parse_json`); :class:`TrainingError` naming the file
    when it is not."""
    path = Path(path)
    try:
        return parse_json(path.read_text())
    except (UnicodeDecodeError, ValueError) as error:
        reason = " ".join(str(error).split())[:160]
        raise TrainingError(f"{path}: not valid JSON ({reason})") from None


def trim_metrics(path: str | Path, last_round: int) -> None:
    """Drop the lines of ``metrics.jsonl`` after ``last_round`` (a killed run logged them; they
    run again) and any line cut short by a kill (not JSON)."""
    path = Path(path)
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and entry.get("round", 0) <= last_round:
            kept.append(line)
    atomic_write(path, "".join(line + "\n" for line in kept))


def save_figure(figure: Any, path: str | Path, dpi: int = 120) -> Path:
    """A matplotlib figure (made without pyplot) as a PNG, written atomically: the one figure
    saver of the trainer (run reports, FedFace's weights, the audit's figures)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)  # a figure made without pyplot needs a canvas to draw on
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, lambda file: figure.savefig(file, format="png", dpi=dpi))
