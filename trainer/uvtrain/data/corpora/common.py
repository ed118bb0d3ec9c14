"""Shared machinery of the corpus loaders: indexing, selection, plans, decoding, stacking and
assembling, and the constants the loaders share (:mod:`uvtrain.data.corpora`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from uvsdk.errors import MediaError
from uvsdk.media import load_audio, load_image

from ...progress import Progress
from ..base import (
    ClientData,
    DatasetError,
    FederatedDataset,
    assemble,
    dataset_meta,
    fit_length,
)
from ..protocol import DataProtocol, Plan, plan_identities
from ..stream import GROUPS, SPLITS, GroupLayout, StreamLayout, StreamWriter, read_stream_folder


class FaceBoxes(Protocol):
    """Where the face is in an image file (:class:`.vggface2_corpus.FaceCropper`: MTCNN)."""

    def box(self, path: Path) -> tuple[int, int, int, int] | None:
        """``(left, top, width, height)`` of the face; ``None`` when none is found."""
        ...


#: Version of the loaders: part of the cache key.
VERSION = 1
#: Sample rate of the audio corpora, Hz.
SAMPLE_RATE = 16000
#: Longest audio file decoded, seconds (VoxCeleb's longest utterances last about 2.5 minutes).
MAX_AUDIO_SECONDS = 300.0
#: Longest training utterance kept whole for random crops (the ``random_crop`` config key: the
#: loaders' ``whole_seconds``), seconds. VoxCeleb1's utterances last at least 4 s (8.2 s on
#: average); a longer one keeps its centre 6 s, so the training split takes at most 3 times the
#: memory of its centre 2-s clips (float32 ``[n, 96000]`` rows with lengths).
RANDOM_CROP_SECONDS = 6.0
#: Digits stacked as the channels of an MNIST-UV example (FedUV paper, Sec. 6.1).
MNIST_UV_DIGITS = (2, 3, 4, 5)
#: LEAF FEMNIST labels 0–9 are the digits (10–35 upper case, 36–61 lower case).
FEMNIST_SIDE = 28

Item = TypeVar("Item")


# --------------------------------------------------------------------------------------------------
# Shared steps


def _folder(path: Path, corpus: str, layout: str) -> Path:
    """``path`` if it is a folder, else a one-line error naming the expected layout."""
    if not path.is_dir():
        raise DatasetError(f"{corpus}: no folder {path} (expected layout: {layout})")
    return path


def _file(path: Path, corpus: str, layout: str) -> Path:
    """``path`` if it is a file, else a one-line error naming the expected layout."""
    if not path.is_file():
        raise DatasetError(f"{corpus}: no file {path} (expected layout: {layout})")
    return path


@dataclass(frozen=True)
class Selection:
    """What a corpus loader reads and how: its keyword arguments of these names, gathered
    once by the loader and passed whole to the machinery below.

    Attributes
    ----------
    max_identities, max_per_identity : int or None
        Caps (seeded random choice) without a protocol; ``None`` keeps all.
    min_per_identity : int
        Identities with fewer usable samples are dropped (without a protocol).
    unknown_fraction : float
        Share of the identities held out as unknown (without a protocol).
    seed : int
        Seed of every choice and split.
    progress : bool
        Show a progress bar.
    protocol : DataProtocol or None
        A paper's data protocol (:class:`uvtrain.data.protocol.DataProtocol`): it chooses, and
        the caps, ``min_per_identity`` and ``unknown_fraction`` are not used.
    stream_to : Path or None
        With a protocol: decode straight into this stream folder (``None``: in memory).
    """

    max_identities: int | None
    max_per_identity: int | None
    min_per_identity: int
    unknown_fraction: float
    seed: int
    progress: bool
    protocol: DataProtocol | None
    stream_to: Path | None = None

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> Selection:
        """The selection a loader was called with: its arguments of these names (a loader
        passes ``locals()`` before it binds any of them), ``stream_to`` ``None`` where it has
        none."""
        names = [field.name for field in dataclasses.fields(cls)]
        return cls(**{name: arguments[name] for name in names if name in arguments})

    def __post_init__(self) -> None:
        if self.stream_to is not None:
            object.__setattr__(self, "stream_to", Path(self.stream_to).expanduser())


def select(index: dict[str, list[Item]], selection: Selection) -> dict[str, list[Item]]:
    """Choose identities and samples before anything is decoded.

    Identities with at least ``min_per_identity`` items are eligible; at most ``max_identities`` of
    them are drawn at random (kept in sorted order), and each one's items are shuffled and cut to
    ``max_per_identity``. Everything is seeded.
    """
    rng = np.random.default_rng([selection.seed, 0xC0])
    eligible = sorted(
        name for name, items in index.items() if len(items) >= selection.min_per_identity
    )
    most = selection.max_identities
    if most is not None and len(eligible) > most:
        chosen = rng.choice(len(eligible), size=most, replace=False)
        eligible = [eligible[i] for i in sorted(chosen)]
    selected = {}
    for name in eligible:
        items = index[name]
        order = rng.permutation(len(items))[: selection.max_per_identity]
        selected[name] = [items[i] for i in order]
    return selected


def _decode(
    selected: dict[str, list[Path]],
    decode: Callable[[Path], np.ndarray],
    *,
    corpus: str,
    selection: Selection,
) -> tuple[dict[str, np.ndarray], int]:
    """Decode the selected files; skip those that fail and identities left with too few.

    Returns the identities' stacked samples and the number of files skipped.
    """
    samples: dict[str, np.ndarray] = {}
    skipped = 0
    total = sum(len(paths) for paths in selected.values())
    with Progress(corpus, total, unit="file", enabled=selection.progress) as bar:
        for name, paths in selected.items():
            decoded = []
            for path in paths:
                try:
                    decoded.append(decode(path))
                except MediaError:
                    skipped += 1
                bar.update(1)
            if len(decoded) >= selection.min_per_identity:
                samples[name] = np.stack(decoded)
    return samples, skipped


def _finish(
    corpus: str,
    modality: str,
    spec: dict[str, Any],
    samples: dict[str, np.ndarray],
    *,
    root: Path,
    skipped: int,
    licence: str,
    selection: Selection,
    hint: str = "",
) -> FederatedDataset:
    """Assemble the dataset, or say why there is nothing to assemble."""
    if len(samples) < 2:
        why = f"{skipped} files did not decode" if skipped else "too few samples per identity"
        raise DatasetError(
            f"{corpus}: fewer than 2 usable identities under {root} ({why}){hint}".rstrip()
        )
    extra = {"root": str(root), "skipped": skipped}
    return assemble(
        corpus,
        modality,
        spec,
        samples,
        unknown_fraction=selection.unknown_fraction,
        seed=selection.seed,
        licence=licence,
        extra=extra,
    )


def _audio_file(path: Path) -> np.ndarray:
    """A file's signal at 16 kHz (at most :data:`MAX_AUDIO_SECONDS` of it)."""
    return load_audio(path, SAMPLE_RATE, max_seconds=MAX_AUDIO_SECONDS)


def _audio_clip(path: Path, clip_seconds: float) -> np.ndarray:
    """The centre ``clip_seconds`` of a file at 16 kHz (repeated when the file is shorter)."""
    signal = _audio_file(path)
    length = int(round(clip_seconds * SAMPLE_RATE))
    return fit_length(signal, length, offset=(signal.size - length) // 2)


def _audio_spec(clip_seconds: float) -> dict[str, Any]:
    return {
        "sample_rate": SAMPLE_RATE,
        "window_seconds": clip_seconds,
        "hop_seconds": clip_seconds / 2,
        "min_seconds": 0.5,
    }


def _index_identity_folders(folders: Iterable[Path], pattern: str) -> dict[str, list[Path]]:
    """Files matching ``pattern`` under each identity folder, merged by folder name, sorted."""
    index: dict[str, list[Path]] = {}
    for folder in folders:
        for identity in sorted(p for p in folder.iterdir() if p.is_dir()):
            index.setdefault(identity.name, []).extend(sorted(identity.glob(pattern)))
    return {name: files for name, files in index.items() if files}


@dataclass(frozen=True)
class Sources:
    """A corpus's index: identity → its items, with the corpus's official test part apart
    (``test_identities``: other identities; ``test_samples``: other samples of the same ones)."""

    index: dict[str, list[Any]]
    test_identities: dict[str, list[Any]] | None = None
    test_samples: dict[str, list[Any]] | None = None

    def plan(self, corpus: str, protocol: DataProtocol, seed: int) -> Plan:
        """The protocol's plan: on the official split, or on every identity and sample pooled."""
        if protocol.official_split:
            return plan_identities(
                corpus,
                self.index,
                protocol,
                seed=seed,
                test_identities=self.test_identities,
                test_samples=self.test_samples,
            )
        pooled = {name: list(items) for name, items in self.index.items()}
        for part in (self.test_identities, self.test_samples):
            for name, items in (part or {}).items():
                pooled.setdefault(name, []).extend(items)
        return plan_identities(corpus, pooled, protocol, seed=seed)


@dataclass(frozen=True)
class Stacking:
    """How one identity's decoded samples become its splits: stacked as they are
    (``sample_shape``, ``dtype`` for an empty split), or, with ``whole`` > 0 (audio, the
    loaders' ``whole_seconds``), the training utterances kept whole up to ``whole`` samples
    (:func:`padded_rows`, with their lengths) and every other split (validation, test, the
    unknown identities') the centre ``clip`` samples of each, the deterministic crop evaluation
    scores."""

    sample_shape: tuple[int, ...]
    dtype: type
    clip: int = 0
    whole: int = 0

    def stack(self, decoded: list[np.ndarray]) -> np.ndarray:
        """The samples stacked (the centre clips when ``whole``)."""
        if self.whole:
            decoded = [fit_length(x, self.clip, offset=(x.size - self.clip) // 2) for x in decoded]
        return np.stack(decoded) if decoded else np.zeros((0, *self.sample_shape), self.dtype)

    def client(
        self, name: str, train: list[np.ndarray], val: list[np.ndarray], test: list[np.ndarray]
    ) -> ClientData:
        """A known identity's splits."""
        if not self.whole:
            return ClientData(name, *(self.stack(part) for part in (train, val, test)))
        rows, lengths = padded_rows(train, self.clip, self.whole)
        return ClientData(name, rows, self.stack(val), self.stack(test), lengths)

    def unknown(self, name: str, samples: list[np.ndarray]) -> ClientData:
        """An unknown identity: all its samples in its train split (it never trains)."""
        stacked = self.stack(samples)
        return ClientData(name, stacked, stacked[:0], stacked[:0])

    def layout(self, plan: Plan) -> StreamLayout:
        """The stream folder's arrays for ``plan``'s identities stacked so, before any is
        decoded (as :meth:`uvtrain.data.stream.StreamLayout.of_dataset` finds them once
        decoded)."""
        sample = tuple(self.sample_shape)
        counts = {
            split: [len(parts[position]) for parts in plan.known.values()]
            for position, split in enumerate(SPLITS)
        }
        train = (self.whole,) if self.whole else sample
        known = GroupLayout(counts, {"train": train, "val": sample, "test": sample},
                            [bool(self.whole)] * len(plan.known))  # fmt: skip
        rows = [len(items) for items in plan.unknown.values()]
        none = [0] * len(rows)
        shapes = dict.fromkeys(SPLITS, sample) if rows else known.shapes
        unknown = GroupLayout(
            {"train": rows, "val": none, "test": none}, shapes, [False] * len(rows)
        )
        return StreamLayout(np.dtype(self.dtype), {"clients": known, "unknown": unknown})


def padded_rows(signals: list[np.ndarray], clip: int, whole: int) -> tuple[np.ndarray, np.ndarray]:
    """Utterances kept whole for random crops: each one's centre ``whole`` samples when longer
    (repeated to ``clip`` when shorter than one crop), in a float32 ``[n, whole]`` row padded with
    zeros, and int64 ``[n]`` lengths (the samples of each row that are its utterance)."""
    rows = np.zeros((len(signals), whole), np.float32)
    lengths = np.zeros(len(signals), np.int64)
    for row, signal in enumerate(signals):
        size = min(max(signal.size, clip), whole)
        rows[row, :size] = fit_length(signal, size, offset=(signal.size - size) // 2)
        lengths[row] = size
    return rows, lengths


def _decode_plan(
    corpus: str,
    plan: Plan,
    decode: Callable[[Any], np.ndarray],
    stacking: Stacking,
    progress: bool,
) -> Iterator[tuple[str, ClientData]]:
    """Decode every planned item, one identity at a time: its group (``"clients"`` or
    ``"unknown"``) and its splits (all of an unknown identity's samples in its train split; they
    never train), the known clients first."""
    total = sum(len(part) for parts in plan.known.values() for part in parts)
    total += sum(len(items) for items in plan.unknown.values())

    def decoded(items: list[Any], bar: Progress) -> list[np.ndarray]:
        samples = []
        for item in items:
            try:
                samples.append(decode(item))
            except MediaError as error:
                raise DatasetError(f"{corpus}: {item} does not decode ({error})") from None
            bar.update(1)
        return samples

    with Progress(corpus, total, unit="file", enabled=progress) as bar:
        for name, parts in plan.known.items():
            yield "clients", stacking.client(name, *(decoded(part, bar) for part in parts))
        for name, items in plan.unknown.items():
            yield "unknown", stacking.unknown(name, decoded(items, bar))


@dataclass(frozen=True)
class Described:
    """What a corpus's dataset says of itself besides its samples."""

    corpus: str
    modality: str
    spec: dict[str, Any]
    root: Path
    licence: str

    def meta(self, extra: dict[str, Any], known: list[str], unknown: list[str]) -> dict[str, Any]:
        """The dataset's :meth:`~uvtrain.data.base.FederatedDataset.meta`, given its identities."""
        return dataset_meta(
            self.corpus, self.modality, self.spec, self.licence, extra, known, unknown
        )


def _decode_planned(
    described: Described,
    plan: Plan,
    decode: Callable[[Any], np.ndarray],
    stacking: Stacking,
    selection: Selection,
    notes: Callable[[], dict[str, Any]] | None = None,
) -> FederatedDataset:
    """The planned identities decoded into a dataset in memory or, with ``stream_to``, straight
    into that stream folder (:class:`uvtrain.data.stream.StreamWriter`: arrays made at their
    full size from the plan, then filled one identity at a time, so that only the identity being
    decoded and the one being written are in memory), returned memory-mapped. ``notes``: more
    ``extra`` once decoded."""
    if not plan.known:  # as FederatedDataset says, before a stream folder is written
        raise DatasetError(f"dataset {described.corpus!r} has no clients")
    identities = _decode_plan(described.corpus, plan, decode, stacking, selection.progress)
    stream_to = selection.stream_to
    extra = _protocol_extra(described.root, plan.protocol)
    if stream_to is None:
        groups: dict[str, list[ClientData]] = {group: [] for group in GROUPS}
        for group, person in identities:
            groups[group].append(person)
        extra.update(notes() if notes else {})
        return _planned_dataset(described, (groups["clients"], groups["unknown"]), extra)
    with StreamWriter(stream_to, stacking.layout(plan)) as writer:
        for group, person in identities:
            writer.add(group, person)
        extra.update(notes() if notes else {})
        writer.finish(described.meta(extra, list(plan.known), list(plan.unknown)))
    return read_stream_folder(stream_to)


def _planned_dataset(
    described: Described,
    clients: tuple[list[ClientData], list[ClientData]],
    extra: dict[str, Any],
) -> FederatedDataset:
    """The dataset of a plan's identities, in memory."""
    known, unknown = clients
    return FederatedDataset(
        described.corpus,
        described.modality,
        described.spec,
        known,
        unknown,
        described.licence,
        extra,
    )


def _protocol_extra(root: Path, protocol: DataProtocol) -> dict[str, Any]:
    """The ``extra`` of a dataset read under a protocol."""
    return {"root": str(root), "skipped": 0, "protocol": protocol.describe()}


# --------------------------------------------------------------------------------------------------
# Image corpora (CelebA, VGGFace2)


def _images(
    corpus: str,
    root: Path,
    sources: Sources,
    *,
    height: int,
    width: int,
    channels: int,
    licence: str,
    selection: Selection,
    boxes: dict[str, tuple[int, int, int, int]] | None = None,
    detector: FaceBoxes | None = None,
    notes: Callable[[], dict[str, Any]] | None = None,
) -> FederatedDataset:
    spec = {"height": height, "width": width, "channels": channels}

    def decode(path: Path) -> np.ndarray:
        box = None if boxes is None else boxes.get(f"{path.parent.name}/{path.stem}")
        if detector is not None:
            box = detector.box(path) or box
        return load_image(path, height, width, channels, box)

    if selection.protocol is not None:
        return _decode_planned(
            Described(corpus, "image", spec, root, licence),
            sources.plan(corpus, selection.protocol, selection.seed),
            decode,
            Stacking((height, width, channels), np.uint8),
            selection,
            notes=notes,
        )
    selected = select({**sources.index, **(sources.test_identities or {})}, selection)
    samples, skipped = _decode(selected, decode, corpus=corpus, selection=selection)
    dataset = _finish(
        corpus,
        "image",
        spec,
        samples,
        root=root,
        skipped=skipped,
        licence=licence,
        selection=selection,
    )
    dataset.extra.update(notes() if notes else {})
    return dataset
