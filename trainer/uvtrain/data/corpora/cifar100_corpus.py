"""CIFAR-100 (:mod:`uvtrain.data.corpora`). Layout read: ``root/cifar-100-python/{train,test,meta}``
(Krizhevsky, 2009); identities are the 100 fine classes, as in the FedHide paper.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from ..base import UNKNOWN_FRACTION, ClientData, DatasetError, FederatedDataset
from ..protocol import DataProtocol
from .common import (
    Described,
    Selection,
    Sources,
    _file,
    _finish,
    _folder,
    _planned_dataset,
    _protocol_extra,
    select,
)

CIFAR_LICENCE = "CIFAR-100 (Krizhevsky 2009; research use)"
CIFAR_LAYOUT = "ROOT/cifar-100-python/{train,test,meta}"
_PICKLE_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("_codecs", "encode"),
}


class _DataUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists, bytes, numbers and numpy arrays only: a data file cannot run code."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PICKLE_ALLOWED:
            if module.startswith("numpy.core.") and hasattr(np, "_core"):
                module = "numpy._core." + module.removeprefix("numpy.core.")  # NumPy 2 name
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a data file")


def _unpickle(path: Path) -> dict[bytes, Any]:
    """Read one of CIFAR's pickled dicts (keys are bytes: they were written by Python 2)."""
    try:
        with path.open("rb") as file:
            data = _DataUnpickler(file, encoding="bytes").load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError) as error:
        raise DatasetError(f"cifar-100: {path.name} is not a CIFAR pickle ({error})") from None
    if not isinstance(data, dict):
        raise DatasetError(f"cifar-100: {path.name} is not a CIFAR pickle (not a dict)")
    return data


def cifar100(
    root: str | Path,
    *,
    max_identities: int | None = None,
    max_per_identity: int | None = None,
    min_per_identity: int = 3,
    unknown_fraction: float = UNKNOWN_FRACTION,
    seed: int = 0,
    progress: bool = True,
    protocol: DataProtocol | None = None,
) -> FederatedDataset:
    """Load a local CIFAR-100 copy (python version) with one identity per fine class.

    The FedHide paper (Sec. 4.1, Table 1) treats each of the 100 fine classes as a client's
    identity, with the 500 training images of the class, and tests on the other 100. Without a
    protocol the train and test pickles are pooled (600 images a class) and re-split 60/20/20;
    a protocol's ``official_split`` keeps them apart (train and validation from the training
    images, test from the test images: the preset's 450/50/100).

    Parameters
    ----------
    root : str or Path
        The folder holding ``cifar-100-python/`` (or that folder itself).
    max_identities, max_per_identity, min_per_identity, unknown_fraction, seed, progress
        As for :func:`voxceleb1` (``progress`` is accepted for a uniform signature).
    protocol : DataProtocol, optional
        As for :func:`voxceleb1`.

    Returns
    -------
    FederatedDataset
        Images, uint8 ``[n, 32, 32, 3]``; identities are the fine label names.
    """
    selection = Selection.of(locals())
    root = Path(root).expanduser()
    images, sources = cifar100_sources(root)
    spec = {"height": 32, "width": 32, "channels": 3}
    if protocol is not None:
        plan = sources.plan("cifar-100", protocol, seed)
        known = [
            ClientData(name, *(np.ascontiguousarray(images[rows]) for rows in parts))
            for name, parts in plan.known.items()
        ]
        unknown = []
        for name, rows in plan.unknown.items():
            samples = np.ascontiguousarray(images[rows])
            unknown.append(ClientData(name, samples, samples[:0], samples[:0]))
        return _planned_dataset(
            Described("cifar-100", "image", spec, root, CIFAR_LICENCE),
            (known, unknown),
            _protocol_extra(root, protocol),
        )
    index = {
        name: [*rows, *(sources.test_samples or {}).get(name, [])]
        for name, rows in sources.index.items()
    }
    selected = select(index, selection)
    samples = {name: np.ascontiguousarray(images[rows]) for name, rows in selected.items()}
    return _finish(
        "cifar-100",
        "image",
        {"height": 32, "width": 32, "channels": 3},
        samples,
        root=root,
        skipped=0,
        licence=CIFAR_LICENCE,
        selection=selection,
    )


def cifar100_sources(root: Path) -> tuple[np.ndarray, Sources]:
    """CIFAR-100's images (uint8 ``[60000, 32, 32, 3]``: the training pickle's, then the test
    pickle's) and their rows by fine class, the test pickle's rows apart."""
    folder = root / "cifar-100-python"
    if not folder.is_dir() and (root / "meta").is_file():
        folder = root
    _folder(folder, "cifar-100", CIFAR_LAYOUT)
    parts = [
        _unpickle(_file(folder / part, "cifar-100", CIFAR_LAYOUT)) for part in ("train", "test")
    ]
    meta = _unpickle(_file(folder / "meta", "cifar-100", CIFAR_LAYOUT))
    try:
        pixels = [np.asarray(part[b"data"], dtype=np.uint8) for part in parts]
        labels = [np.asarray(part[b"fine_labels"], dtype=np.int64) for part in parts]
        names = [bytes(name).decode() for name in meta[b"fine_label_names"]]
    except KeyError as error:
        raise DatasetError(f"cifar-100: a pickle lacks the key {error.args[0]!r}") from None
    everything = np.concatenate(pixels)
    if (
        everything.ndim != 2
        or everything.shape[1] != 3072
        or any(len(rows) != len(classes) for rows, classes in zip(pixels, labels, strict=True))
    ):
        raise DatasetError("cifar-100: data must be [n, 3072] uint8 with one fine label each")
    every_label = np.concatenate(labels)
    if every_label.size and not 0 <= every_label.min() <= every_label.max() < len(names):
        raise DatasetError("cifar-100: a fine label has no name in meta")
    images = everything.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    offset = len(labels[0])
    train, test = (
        {
            names[label]: [int(row) + start for row in np.flatnonzero(classes == label)]
            for label in np.unique(classes)
        }
        for classes, start in ((labels[0], 0), (labels[1], offset))
    )
    return images, Sources(train, test_samples=test)
