"""The federated dataset: clients are identities, each with its own train/val/test samples.

Samples are fixed-shape numpy arrays so that a round's clients can be stacked into one tensor:
audio ``float32 [n, samples]`` (mono, in [-1, 1], at ``sample_rate``, cropped or repeat-padded to
``samples``), images ``uint8 [n, height, width, channels]``. The model's own preprocessing (log-mel,
pixel normalisation) runs inside the model, exactly as after export.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from uvsdk.inputs import ModelInput, input_class, model_input

from ..errors import DatasetError
from ..io import atomic_write, parse_json


@dataclass(frozen=True)
class ClientData:
    """One identity's samples, split into train, validation and test.

    ``lengths`` (int64 ``[len(train)]``, or ``None``): audio training utterances kept whole, each
    train row holding ``lengths[i]`` samples of its utterance followed by zero padding; the
    engine then crops each at random within its own length (:func:`uvtrain.batches.draw_batches`).
    ``None``: every row is a whole sample.
    """

    identity: str
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    lengths: np.ndarray | None = None

    def __post_init__(self) -> None:
        if len(self.train) == 0:
            raise DatasetError(f"client {self.identity!r} has no training samples")
        if self.lengths is not None and (
            self.lengths.shape != (len(self.train),)
            or self.lengths.min() < 1
            or self.lengths.max() > self.train.shape[-1]
        ):
            raise DatasetError(
                f"client {self.identity!r}: lengths must give each training row's samples"
            )


@dataclass(frozen=True)
class FederatedDataset:
    """Known clients (they train) and unknown identities (held out of training entirely).

    ``spec`` is the bundle's input contract: ``{"sample_rate", "window_seconds", "hop_seconds",
    "min_seconds"}`` for audio, ``{"height", "width", "channels"}`` for images.
    """

    name: str
    modality: str
    spec: dict[str, Any]
    clients: list[ClientData]
    unknown: list[ClientData]
    licence: str = "unknown"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            input_class(self.modality)
        except ValueError as error:
            raise DatasetError(str(error)) from None
        if not self.clients:
            raise DatasetError(f"dataset {self.name!r} has no clients")

    @property
    def input(self) -> ModelInput:
        """The model's input (:mod:`uvsdk.inputs`): what loads, checks, windows and crops this
        dataset's samples, and names its default backbone."""
        return model_input(self.modality, self.spec)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """The shape of one sample."""
        return tuple(self.clients[0].train.shape[1:])

    @property
    def sample_type(self) -> tuple[str, tuple[int, ...]]:
        """The modality and shape of one sample: what one backbone trains on."""
        return self.modality, self.sample_shape

    @property
    def streamed(self) -> bool:
        """Whether the samples stay on disk, memory-mapped (a stream folder), rather than in
        memory."""
        return isinstance(self.clients[0].train, np.memmap)

    def save(self, path: str | Path) -> Path:
        """Write the dataset to one ``.npz`` file (atomically)."""
        import json

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {}
        meta = self.meta()
        for group, members in (("clients", self.clients), ("unknown", self.unknown)):
            for index, client in enumerate(members):
                for split in ("train", "val", "test"):
                    arrays[f"{group}/{index}/{split}"] = getattr(client, split)
                if client.lengths is not None:
                    arrays[f"{group}/{index}/lengths"] = client.lengths
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        atomic_write(path, lambda file: np.savez(file, **arrays))
        return path

    def meta(self) -> dict[str, Any]:
        """Everything but the arrays, as a saved dataset (``.npz`` or stream folder) holds it."""
        return dataset_meta(
            self.name,
            self.modality,
            self.spec,
            self.licence,
            self.extra,
            [client.identity for client in self.clients],
            [client.identity for client in self.unknown],
        )

    @classmethod
    def from_meta(
        cls, meta: dict[str, Any], clients: list[ClientData], unknown: list[ClientData]
    ) -> FederatedDataset:
        """The dataset of a saved :meth:`meta` and its identities' arrays."""
        return cls(
            meta["name"],
            meta["modality"],
            meta["spec"],
            clients,
            unknown,
            meta.get("licence", "unknown"),
            meta.get("extra", {}),
        )

    @classmethod
    def load(cls, path: str | Path) -> FederatedDataset:
        """Read a dataset written by :meth:`save` into memory (a stream folder, or either:
        :func:`uvtrain.data.stream.open_dataset`); :class:`DatasetError` naming the file when it
        is not one (not a zip, truncated, corrupt, missing arrays, pickled objects: refused)."""
        import zipfile
        import zlib

        path = Path(path)
        if not path.is_file():
            raise DatasetError(f"no dataset file at {path}")
        if not zipfile.is_zipfile(path):  # np.load would try it as a pickle next: never
            raise DatasetError(
                f"{path}: not a readable dataset (not an .npz archive, or truncated)"
            )
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = parse_json(bytes(data["meta"]).decode())
                groups = {}
                for group in ("clients", "unknown"):
                    groups[group] = [
                        ClientData(
                            identity,
                            data[f"{group}/{index}/train"],
                            data[f"{group}/{index}/val"],
                            data[f"{group}/{index}/test"],
                            _lengths(data, f"{group}/{index}/lengths"),
                        )
                        for index, identity in enumerate(meta[group])
                    ]
                for key in ("name", "modality", "spec"):
                    meta[key]  # noqa: B018 - a KeyError names what is missing
        except KeyError as error:
            missing = str(error.args[0]).split(" is not a file")[0] if error.args else "?"
            raise DatasetError(
                f"{path}: not a readable dataset (no {missing!r} in it: not written by uvtrain)"
            ) from None
        except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as error:
            reason = " ".join(str(error).split()) or type(error).__name__
            raise DatasetError(
                f"{path}: not a readable dataset (truncated or corrupt: {reason})"
            ) from None
        except (ValueError, TypeError, UnicodeDecodeError) as error:
            reason = " ".join(str(error).split())[:160] or type(error).__name__
            if "allow_pickle" in reason:
                reason = "it holds pickled Python objects: refused, nothing in it was run"
            elif reason.startswith("EOF"):
                reason = f"truncated or corrupt: {reason}"
            raise DatasetError(f"{path}: not a readable dataset ({reason})") from None
        return cls.from_meta(meta, groups["clients"], groups["unknown"])


def dataset_meta(
    name: str,
    modality: str,
    spec: dict[str, Any],
    licence: str,
    extra: dict[str, Any],
    clients: list[str],
    unknown: list[str],
) -> dict[str, Any]:
    """:meth:`FederatedDataset.meta` of a dataset with these fields and identities (a corpus
    streamed into a folder has its identities' names before their samples are decoded)."""
    return {
        "name": name,
        "modality": modality,
        "spec": spec,
        "licence": licence,
        "extra": extra,
        "clients": clients,
        "unknown": unknown,
    }


def _lengths(data: Any, key: str) -> np.ndarray | None:
    """A client's training lengths from an open ``.npz`` (``None`` when it has none)."""
    return data[key] if key in data.files else None


# --------------------------------------------------------------------------------------------------
# Helpers shared by the dataset builders (generated sets, packaged sets, corpus loaders).

#: Environment variable naming the folder of datasets (caches, and the default corpus roots).
DATA_ENV = "UVTRAIN_DATA"
#: Fraction of an identity's samples that goes to validation, and the same fraction to test.
HOLDOUT_FRACTION = 0.2
#: Fraction of the identities held out of training as unknown users.
UNKNOWN_FRACTION = 0.2


def data_root() -> Path:
    """The folder of datasets: ``$UVTRAIN_DATA``, else the user cache folder of ``uvtrain``."""
    import os

    configured = os.environ.get(DATA_ENV)
    if configured:
        return Path(configured).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("uvtrain"))


def cache_path(name: str, params: dict[str, Any], folder: str | Path | None = None) -> Path:
    """Where the dataset ``name`` built with ``params`` is cached: ``FOLDER/NAME-HASH.npz``, the
    folder defaulting to :func:`data_root`.

    The hash covers every parameter (JSON with sorted keys), so another parameter value is another
    file and a cache hit is always the dataset those parameters describe.
    """
    import hashlib
    import json

    digest = hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()
    return Path(folder or data_root()).expanduser() / f"{name}-{digest[:16]}.npz"


def split_counts(n: int, holdout: float = HOLDOUT_FRACTION) -> tuple[int, int, int]:
    """Sizes of the train, validation and test splits of ``n`` samples.

    Validation and test each get ``max(1, round(holdout * n))`` samples and train the rest
    (10 → 6/2/2, 16 → 10/3/3, 6 → 4/1/1); with fewer than 3 samples, train keeps one and test the
    other.
    """
    if n < 1:
        raise DatasetError("an identity needs at least one sample")
    if n < 3:
        return 1, 0, n - 1
    held = max(1, round(holdout * n))
    held = min(held, (n - 1) // 2)
    return n - 2 * held, held, held


def split_client(identity: str, samples: np.ndarray) -> ClientData:
    """Split one identity's samples, in their order, into train, validation and test."""
    train, val, _ = split_counts(len(samples))
    return ClientData(
        identity, samples[:train], samples[train : train + val], samples[train + val :]
    )


def unknown_count(n_identities: int, fraction: float = UNKNOWN_FRACTION) -> int:
    """How many of ``n_identities`` are held out as unknown: ``round(fraction * n)``, leaving at
    least one known identity."""
    if not 0.0 <= fraction < 1.0:
        raise DatasetError(f"the unknown fraction must lie in [0, 1), got {fraction}")
    return min(round(fraction * n_identities), n_identities - 1)


def assemble(
    name: str,
    modality: str,
    spec: dict[str, Any],
    samples: dict[str, np.ndarray],
    *,
    unknown_fraction: float = UNKNOWN_FRACTION,
    seed: int = 0,
    licence: str = "unknown",
    extra: dict[str, Any] | None = None,
) -> FederatedDataset:
    """Make a federated dataset from each identity's samples.

    A seeded random ``unknown_fraction`` of the identities is held out as unknown users; every
    identity's samples are split in their given order by :func:`split_client` (unknown identities
    too: they never train, and their train split can serve as enrollment samples when they are
    evaluated, e.g. in the FedHide pair protocol).

    Parameters
    ----------
    name, modality, spec, licence, extra
        As in :class:`FederatedDataset`.
    samples : dict of str to numpy.ndarray
        Each identity's samples, stacked, in the order they are to be split.
    unknown_fraction : float, optional
        Fraction of the identities held out.
    seed : int, optional
        Seed of the choice of unknown identities.

    Returns
    -------
    FederatedDataset
        Known clients and unknown identities, each in the order of ``samples``.
    """
    if not samples:
        raise DatasetError(f"dataset {name!r} has no identity with enough samples")
    identities = list(samples)
    rng = np.random.default_rng([seed, 0x5E1EC7])
    held = set(rng.permutation(len(identities))[: unknown_count(len(identities), unknown_fraction)])
    clients, unknown = [], []
    for index, identity in enumerate(identities):
        (unknown if index in held else clients).append(split_client(identity, samples[identity]))
    return FederatedDataset(name, modality, spec, clients, unknown, licence, dict(extra or {}))


def fit_length(signal: np.ndarray, length: int, offset: int = 0, gap: int = 0) -> np.ndarray:
    """Crop ``signal`` to ``length`` samples from ``offset``, or repeat it to fill ``length``.

    A signal shorter than ``length`` is repeated, each copy followed by ``gap`` zeros, and the
    result cut to ``length``; a longer one is cropped to ``signal[offset : offset + length]``.
    """
    signal = np.asarray(signal, dtype=np.float32)
    if signal.size == 0:
        raise DatasetError("cannot fit an empty signal to a length")
    if signal.size >= length:
        offset = int(np.clip(offset, 0, signal.size - length))
        return signal[offset : offset + length].copy()
    unit = np.concatenate([signal, np.zeros(gap, dtype=np.float32)])
    return np.resize(unit, length).astype(np.float32)


def combine(datasets: list[FederatedDataset]) -> FederatedDataset:
    """Several datasets as one, for cross-silo parties that each hold a different dataset (the
    FedFace paper's MS1M, Asian-DeepGlint and VGGFace2): every identity is renamed
    ``"<dataset>/<identity>"``, so identities of different datasets are distinct by construction
    (a person in two corpora counts twice, as nothing links them), known and unknown identities
    stay as each dataset split them, and ``extra["sources"]`` maps every identity to its dataset
    (``extra["datasets"]``: the names in order; :func:`uvtrain.crosssilo.partition` reads them).
    The datasets must share modality and sample shape (one backbone trains on all); the spec is the
    first's. Datasets' names must differ."""
    if len(datasets) < 2:
        raise DatasetError("combine needs at least two datasets")
    names = [d.name for d in datasets]
    if len(set(names)) != len(names):
        raise DatasetError(f"the same dataset twice: {', '.join(names)}")
    first = datasets[0]
    for other in datasets[1:]:
        if other.sample_type != first.sample_type:
            raise DatasetError(
                f"{other.name} ({other.modality} {other.sample_shape}) cannot train beside "
                f"{first.name} ({first.modality} {first.sample_shape}): one backbone for all"
            )
        rate = first.spec.get("sample_rate")
        if rate is not None and other.spec.get("sample_rate") != rate:
            raise DatasetError(f"{other.name}: another sample rate than {first.name}'s")

    def renamed(dataset: FederatedDataset, people: list[ClientData]) -> list[ClientData]:
        return [replace(p, identity=f"{dataset.name}/{p.identity}") for p in people]

    clients = [c for d in datasets for c in renamed(d, d.clients)]
    unknown = [c for d in datasets for c in renamed(d, d.unknown)]
    sources = {f"{d.name}/{p.identity}": d.name for d in datasets for p in [*d.clients, *d.unknown]}
    return FederatedDataset(
        "+".join(names),
        first.modality,
        dict(first.spec),
        clients,
        unknown,
        "; ".join(f"{d.name}: {d.licence}" for d in datasets),
        {"sources": sources, "datasets": names},
    )
