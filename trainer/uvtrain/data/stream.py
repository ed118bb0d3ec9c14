"""The stream folder: a dataset kept on disk and memory-mapped, for corpora larger than memory.

A ``.npz`` (:meth:`uvtrain.data.base.FederatedDataset.save`) is read whole into memory when it is
loaded. A stream folder holds the same dataset as one ``.npy`` array per group and split, every
client's rows one after the other, and an index of where each client's rows start::

    FOLDER/index.json               {"format", "meta" (as the .npz's), "dtype",
                                     "groups": {GROUP: {"rows": {SPLIT: offsets},
                                                        "sample_shapes": {SPLIT: shape},
                                                        "lengths": [...]}}}
    FOLDER/clients-train.npy        [rows of every known client, ...sample shape]
    FOLDER/clients-val.npy, clients-test.npy, clients-lengths.npy (when a client has lengths)
    FOLDER/unknown-train.npy, ...   the same for the unknown identities

``offsets`` has one entry more than the group has identities: client ``i`` owns rows
``offsets[i]:offsets[i + 1]``. :func:`read_stream_folder` opens every array with
``np.load(mmap_mode="r")``, so a client's splits are :class:`numpy.memmap` views and nothing is
read until it is used: the simulation engine reads only the rows a round draws
(:class:`uvtrain.batches.HostSamples`) and evaluation embeds batch by batch.

A folder is written by a :class:`StreamWriter`, identity by identity into arrays made at their
full size from a :class:`StreamLayout`: from a dataset in memory (:func:`write_stream_folder`), or
from a corpus loader's plan as it decodes (:mod:`uvtrain.data.corpora`, ``stream_to``), so that
building a corpus larger than memory holds one identity's samples at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError
from ..io import parse_json
from .base import ClientData, FederatedDataset

#: The ``format`` of a stream folder's index (a later layout gets another).
STREAM_FORMAT = "uvtrain-stream-2"
#: The index file of a stream folder.
INDEX = "index.json"
#: The splits every identity has, each one array per group.
SPLITS = ("train", "val", "test")
#: The two groups of identities: known clients (they train) and unknown identities.
GROUPS = ("clients", "unknown")


@dataclass(frozen=True)
class GroupLayout:
    """Where one group's identities go in its arrays, known before any sample is.

    Attributes
    ----------
    counts : dict of str to list of int
        Per split, each identity's number of rows, in the group's order.
    shapes : dict of str to tuple of int
        Per split, the shape of one sample (a training utterance kept whole can be longer than
        the evaluation clips).
    lengths : list of bool
        Whether each identity's training rows have lengths (utterances kept whole).
    """

    counts: dict[str, list[int]]
    shapes: dict[str, tuple[int, ...]]
    lengths: list[bool]

    def offsets(self, split: str) -> list[int]:
        """The split's row offsets: one per identity and one more."""
        return np.concatenate([[0], np.cumsum(self.counts[split])]).astype(int).tolist()


@dataclass(frozen=True)
class StreamLayout:
    """The arrays of a stream folder before they are filled: the samples' one dtype and each
    group's :class:`GroupLayout` (from a loader's plan, or from a dataset in memory)."""

    dtype: np.dtype
    groups: dict[str, GroupLayout]

    @classmethod
    def of_dataset(cls, dataset: FederatedDataset) -> StreamLayout:
        """The layout of a dataset in memory; :class:`DatasetError` when its samples differ in
        dtype, or in shape within one group's split."""
        first = dataset.clients[0].train
        groups = {}
        for group, members in zip(GROUPS, (dataset.clients, dataset.unknown), strict=True):
            shapes = {
                split: tuple(getattr(members[0], split).shape[1:]) if members else first.shape[1:]
                for split in SPLITS
            }
            for person in members:
                for split in SPLITS:
                    array = getattr(person, split)
                    if array.dtype != first.dtype or array.shape[1:] != shapes[split]:
                        raise DatasetError(
                            f"{dataset.name}: {person.identity!r} {split} is {array.dtype} "
                            f"{array.shape[1:]}, not {first.dtype} {shapes[split]}: a stream "
                            "folder holds samples of one dtype, one shape per group and split"
                        )
            counts = {
                split: [len(getattr(person, split)) for person in members] for split in SPLITS
            }
            lengths = [person.lengths is not None for person in members]
            groups[group] = GroupLayout(counts, shapes, lengths)
        return cls(first.dtype, groups)


class StreamWriter:
    """Fills a stream folder identity by identity (a context manager).

    Every array is made at its full size first (:func:`numpy.lib.format.open_memmap`) in a
    temporary folder beside ``folder``; :meth:`add` writes one identity's rows into them, so no
    more than the identity being added need be in memory; :meth:`finish` writes the index and
    only then renames the temporary folder into place (replacing any earlier one). A build that
    stops before (an error, a kill) leaves no folder that loads: the temporary one has a name
    that starts with a dot, and is removed on an error.

    Parameters
    ----------
    folder : str or Path
        The stream folder to write.
    layout : StreamLayout
        Its arrays.
    """

    def __init__(self, folder: str | Path, layout: StreamLayout) -> None:
        self.folder = Path(folder)
        self.layout = layout
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        self.staging = Path(
            tempfile.mkdtemp(prefix=f".{self.folder.name}.", dir=self.folder.parent)
        )
        self.arrays: dict[str, np.ndarray | None] = {}
        self.shapes: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
        self.offsets: dict[str, list[int]] = {}
        self.added = dict.fromkeys(GROUPS, 0)
        for group, entry in layout.groups.items():
            for split in SPLITS:
                shape = entry.shapes[split]
                self._open(f"{group}-{split}", entry.offsets(split), layout.dtype, shape)
            if any(entry.lengths):  # a client without lengths: its rows are whole
                self._open(f"{group}-lengths", entry.offsets("train"), np.dtype(np.int64), ())

    def _open(self, name: str, offsets: list[int], dtype: np.dtype, shape: tuple[int, ...]) -> None:
        """Make the array ``name`` at its full size (mapped), or, empty, write it at once."""
        path = self.staging / f"{name}.npy"
        self.offsets[name], self.shapes[name] = offsets, (dtype, shape)
        if offsets[-1] == 0:  # np.memmap cannot map an empty file
            np.save(path, np.zeros((0, *shape), dtype))
            self.arrays[name] = None
            return
        self.arrays[name] = np.lib.format.open_memmap(
            path, mode="w+", dtype=dtype, shape=(offsets[-1], *shape)
        )

    def add(self, group: str, person: ClientData) -> None:
        """Write the next identity of ``group``; its rows must be as the layout says."""
        entry, position = self.layout.groups[group], self.added[group]
        if position >= len(entry.lengths):
            raise DatasetError(f"{self.folder}: more {group} identities than planned")
        for split in SPLITS:
            self._write(f"{group}-{split}", position, getattr(person, split), person.identity)
        if f"{group}-lengths" in self.offsets:
            whole = np.full(len(person.train), entry.shapes["train"][-1], np.int64)
            lengths = whole if person.lengths is None else np.asarray(person.lengths, np.int64)
            self._write(f"{group}-lengths", position, lengths, person.identity)
        self.added[group] += 1

    def _write(self, name: str, position: int, rows: np.ndarray, identity: str) -> None:
        """Write ``rows`` as identity ``position``'s rows of the array ``name``."""
        start, end = self.offsets[name][position : position + 2]
        dtype, shape = self.shapes[name]
        if rows.dtype != dtype or rows.shape != (end - start, *shape):
            raise DatasetError(
                f"{self.folder}: {identity!r} {name} is {rows.dtype} {rows.shape}, the layout "
                f"{dtype} {(end - start, *shape)}"
            )
        target = self.arrays[name]
        if target is not None:
            target[start:end] = rows

    def finish(self, meta: dict[str, Any]) -> Path:
        """Flush the arrays, write the index (``meta``: the dataset's
        :meth:`~uvtrain.data.base.FederatedDataset.meta`) and move the folder into place."""
        for group, entry in self.layout.groups.items():
            if self.added[group] != len(entry.lengths):
                raise DatasetError(
                    f"{self.folder}: {self.added[group]} {group} identities written, "
                    f"{len(entry.lengths)} planned"
                )
        for array in self.arrays.values():
            if array is not None:
                array.flush()
        self.arrays.clear()
        index = {
            "format": STREAM_FORMAT,
            "meta": meta,
            "dtype": self.layout.dtype.str,
            "groups": {
                group: {
                    "rows": {split: entry.offsets(split) for split in SPLITS},
                    "sample_shapes": {split: list(entry.shapes[split]) for split in SPLITS},
                    "lengths": entry.lengths,
                }
                for group, entry in self.layout.groups.items()
            },
        }
        (self.staging / INDEX).write_text(json.dumps(index))
        if self.folder.exists():
            shutil.rmtree(self.folder)
        os.replace(self.staging, self.folder)
        return self.folder

    def __enter__(self) -> StreamWriter:
        return self

    def __exit__(self, *_: Any) -> None:
        self.arrays.clear()
        shutil.rmtree(self.staging, ignore_errors=True)  # stopped before finish: nothing left


def write_stream_folder(dataset: FederatedDataset, folder: str | Path) -> Path:
    """Write ``dataset`` as a stream folder (replacing any earlier one at ``folder``), through a
    :class:`StreamWriter`: a stopped build leaves no half-written dataset.

    Parameters
    ----------
    dataset : FederatedDataset
        The dataset; every sample must share one dtype, and one shape within a group's split.
    folder : str or Path
        The stream folder to write.

    Returns
    -------
    Path
        ``folder``.
    """
    with StreamWriter(folder, StreamLayout.of_dataset(dataset)) as writer:
        for group, members in zip(GROUPS, (dataset.clients, dataset.unknown), strict=True):
            for person in members:
                writer.add(group, person)
        return writer.finish(dataset.meta())


def open_dataset(path: str | Path) -> FederatedDataset:
    """A saved dataset: a stream folder opened memory-mapped (:func:`read_stream_folder`), an
    ``.npz`` file read into memory (:meth:`FederatedDataset.load`)."""
    path = Path(path)
    return read_stream_folder(path) if path.is_dir() else FederatedDataset.load(path)


def read_stream_folder(folder: str | Path) -> FederatedDataset:
    """A dataset from a stream folder, every array memory-mapped (nothing read into memory);
    :class:`DatasetError` naming the folder when it is not a complete, consistent one."""
    folder = Path(folder)
    index = _read_index(folder)
    try:
        meta = index["meta"]
        dtype = np.dtype(index["dtype"])
        groups = {
            group: _read_group(folder, group, meta[group], index["groups"][group], dtype)
            for group in GROUPS
        }
        return FederatedDataset.from_meta(meta, groups["clients"], groups["unknown"])
    except KeyError as error:
        raise DatasetError(f"{folder}: not a stream folder ({INDEX} has no {error})") from None
    except (TypeError, ValueError, OverflowError) as error:
        reason = " ".join(str(error).split())[:160] or type(error).__name__
        raise DatasetError(f"{folder}: not a readable stream folder ({reason})") from None


def _read_index(folder: Path) -> dict[str, Any]:
    """The folder's index, its format checked."""
    path = folder / INDEX
    if not path.is_file():
        raise DatasetError(f"{folder}: not a stream folder (no {INDEX} in it)")
    try:
        index = parse_json(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
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
) -> list[ClientData]:
    """One group's identities, each split a memory-mapped view of its rows."""
    splits = {}
    for split in SPLITS:
        shape = tuple(int(size) for size in entry["sample_shapes"][split])
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
