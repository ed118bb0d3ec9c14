"""The stream folder: a dataset kept on disk and memory-mapped, for corpora larger than memory.

A ``.npz`` (:meth:`uvtrain.data.base.FederatedDataset.save`) is read whole into memory when it is
loaded. A stream folder holds the same dataset as one ``.npy`` array per group and split, every
client's rows one after the other, and an index of where each client's rows start::

    FOLDER/index.json               {"format", "meta" (as the .npz's), "dtype", "sample_shape",
                                     "groups": {GROUP: {"rows": {SPLIT: offsets}, "lengths": [...]}}}
    FOLDER/clients-train.npy        [rows of every known client, ...sample shape]
    FOLDER/clients-val.npy, clients-test.npy, clients-lengths.npy (when a client has lengths)
    FOLDER/unknown-train.npy, ...   the same for the unknown identities

``offsets`` has one entry more than the group has identities: client ``i`` owns rows
``offsets[i]:offsets[i + 1]``. :func:`read_stream_folder` opens every array with
``np.load(mmap_mode="r")``, so a client's splits are :class:`numpy.memmap` views and nothing is
read until it is used: the simulation engine reads only the rows a round draws
(:class:`uvtrain.engine.HostSamples`) and evaluation embeds batch by batch.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError
from .base import ClientData, FederatedDataset

#: The ``format`` of a stream folder's index (a later layout gets another).
STREAM_FORMAT = "uvtrain-stream-1"
#: The index file of a stream folder.
INDEX = "index.json"
#: The splits every identity has, each one array per group.
SPLITS = ("train", "val", "test")
#: The two groups of identities: known clients (they train) and unknown identities.
GROUPS = ("clients", "unknown")


def write_stream_folder(dataset: FederatedDataset, folder: str | Path) -> Path:
    """Write ``dataset`` as a stream folder (replacing any earlier one at ``folder``).

    The arrays are written into a temporary folder beside ``folder``, which is renamed into
    place only once complete: a stopped build leaves no half-written dataset.

    Parameters
    ----------
    dataset : FederatedDataset
        The dataset; every sample of every identity must share one dtype and shape.
    folder : str or Path
        The stream folder to write.

    Returns
    -------
    Path
        ``folder``.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    dtype, shape = _sample_layout(dataset)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        groups = {
            group: _write_group(staging, group, members, dtype, shape)
            for group, members in (("clients", dataset.clients), ("unknown", dataset.unknown))
        }
        index = {
            "format": STREAM_FORMAT,
            "meta": dataset.meta(),
            "dtype": dtype.str,
            "sample_shape": list(shape),
            "groups": groups,
        }
        (staging / INDEX).write_text(json.dumps(index))
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


def _sample_layout(dataset: FederatedDataset) -> tuple[np.dtype, tuple[int, ...]]:
    """The one dtype and sample shape of every split of every identity."""
    first = dataset.clients[0].train
    for person in [*dataset.clients, *dataset.unknown]:
        for split in SPLITS:
            array = getattr(person, split)
            if array.dtype != first.dtype or array.shape[1:] != first.shape[1:]:
                raise DatasetError(
                    f"{dataset.name}: {person.identity!r} {split} is {array.dtype} "
                    f"{array.shape[1:]}, not {first.dtype} {first.shape[1:]}: a stream folder "
                    "holds samples of one dtype and shape"
                )
    return first.dtype, tuple(first.shape[1:])


def _write_group(
    folder: Path, group: str, members: list[ClientData], dtype: np.dtype, shape: tuple[int, ...]
) -> dict[str, Any]:
    """Write one group's splits (and training lengths), client after client; its index entry."""
    rows = {}
    for split in SPLITS:
        arrays = [getattr(member, split) for member in members]
        rows[split] = _write_rows(folder / f"{group}-{split}.npy", arrays, dtype, shape)
    has_lengths = [member.lengths is not None for member in members]
    if any(has_lengths):  # a client without lengths: its rows are whole (its own row length)
        lengths = [
            member.lengths
            if member.lengths is not None
            else np.full(len(member.train), shape[-1], np.int64)
            for member in members
        ]
        _write_rows(folder / f"{group}-lengths.npy", lengths, np.dtype(np.int64), ())
    return {"rows": rows, "lengths": has_lengths}


def _write_rows(
    path: Path, arrays: list[np.ndarray], dtype: np.dtype, shape: tuple[int, ...]
) -> list[int]:
    """Write ``arrays`` one after the other into one ``.npy`` at ``path`` (through a memory map:
    never all of them in memory at once); the offsets of their rows."""
    offsets = np.concatenate([[0], np.cumsum([len(array) for array in arrays])]).astype(int)
    total = int(offsets[-1])
    if total == 0:  # np.memmap cannot map an empty file
        np.save(path, np.zeros((0, *shape), dtype))
        return offsets.tolist()
    target = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(total, *shape))
    for start, array in zip(offsets, arrays, strict=False):
        target[start : start + len(array)] = array
    target.flush()
    del target
    return offsets.tolist()


def read_stream_folder(folder: str | Path) -> FederatedDataset:
    """A dataset from a stream folder, every array memory-mapped (nothing read into memory);
    :class:`DatasetError` naming the folder when it is not a complete, consistent one."""
    folder = Path(folder)
    index = _read_index(folder)
    try:
        meta = index["meta"]
        dtype = np.dtype(index["dtype"])
        shape = tuple(int(size) for size in index["sample_shape"])
        groups = {
            group: _read_group(folder, group, meta[group], index["groups"][group], dtype, shape)
            for group in GROUPS
        }
        return FederatedDataset.from_meta(meta, groups["clients"], groups["unknown"])
    except KeyError as error:
        raise DatasetError(f"{folder}: not a stream folder ({INDEX} has no {error})") from None
    except (TypeError, ValueError) as error:
        reason = " ".join(str(error).split())[:160] or type(error).__name__
        raise DatasetError(f"{folder}: not a readable stream folder ({reason})") from None


def _read_index(folder: Path) -> dict[str, Any]:
    """The folder's index, its format checked."""
    path = folder / INDEX
    if not path.is_file():
        raise DatasetError(f"{folder}: not a stream folder (no {INDEX} in it)")
    try:
        index = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise DatasetError(f"{path}: not a readable index ({reason})") from None
    if not isinstance(index, dict) or index.get("format") != STREAM_FORMAT:
        found = index.get("format") if isinstance(index, dict) else None
        raise DatasetError(f"{path}: format {found!r}, not {STREAM_FORMAT!r}")
    return index


def _read_group(
    folder: Path,
    group: str,
    identities: list[str],
    entry: dict[str, Any],
    dtype: np.dtype,
    shape: tuple[int, ...],
) -> list[ClientData]:
    """One group's identities, each split a memory-mapped view of its rows."""
    splits = {}
    for split in SPLITS:
        array = _open(folder / f"{group}-{split}.npy", dtype, shape)
        splits[split] = (array, _offsets(folder, group, split, entry["rows"][split], identities))
        if splits[split][1][-1] != len(array):
            raise DatasetError(
                f"{folder}: {group}-{split}.npy has {len(array)} rows, the index "
                f"{splits[split][1][-1]}"
            )
    has_lengths = [bool(flag) for flag in entry["lengths"]]
    if len(has_lengths) != len(identities):
        raise DatasetError(f"{folder}: the index's {group} lengths do not match its identities")
    lengths = None
    if any(has_lengths):
        lengths = _open(folder / f"{group}-lengths.npy", np.dtype(np.int64), ())
        if len(lengths) != len(splits["train"][0]):
            raise DatasetError(f"{folder}: {group}-lengths.npy does not give every train row")
    people = []
    for position, identity in enumerate(identities):
        rows = {
            split: array[offsets[position] : offsets[position + 1]]
            for split, (array, offsets) in splits.items()
        }
        train_rows = slice(*splits["train"][1][position : position + 2])
        own = lengths[train_rows] if lengths is not None and has_lengths[position] else None
        people.append(ClientData(identity, rows["train"], rows["val"], rows["test"], own))
    return people


def _open(path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """One array of the folder, memory-mapped, its dtype and sample shape checked."""
    if not path.is_file():
        raise DatasetError(f"{path.parent}: not a complete stream folder (no {path.name})")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        reason = " ".join(str(error).split())[:160] or type(error).__name__
        raise DatasetError(f"{path}: not a readable array ({reason})") from None
    if array.dtype != dtype or tuple(array.shape[1:]) != shape:
        raise DatasetError(
            f"{path}: {array.dtype} {tuple(array.shape[1:])}, the index says {dtype} {shape}"
        )
    return array


def _offsets(
    folder: Path, group: str, split: str, given: list[int], identities: list[str]
) -> list[int]:
    """A split's row offsets from the index, checked: one per identity and one more, from 0,
    never decreasing."""
    offsets = [int(offset) for offset in given]
    if (
        len(offsets) != len(identities) + 1
        or offsets[0] != 0
        or any(b < a for a, b in zip(offsets, offsets[1:], strict=False))
    ):
        raise DatasetError(f"{folder}: the index's {group} {split} offsets are malformed")
    return offsets
