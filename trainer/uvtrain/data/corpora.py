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
import pickle
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from uvsdk.errors import MediaError
from uvsdk.media import load_audio, load_image

from ..progress import Progress
from .base import UNKNOWN_FRACTION, DatasetError, FederatedDataset, assemble, fit_length

__all__ = ["celeba", "cifar100", "mnist_uv", "vggface2", "voxceleb1", "voxceleb2"]

#: Version of the loaders: part of the cache key.
VERSION = 1
#: Sample rate of the audio corpora, Hz.
SAMPLE_RATE = 16000
#: Longest audio file decoded, seconds (VoxCeleb's longest utterances last about 2.5 minutes).
MAX_AUDIO_SECONDS = 300.0
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


def _audio_clip(path: Path, clip_seconds: float) -> np.ndarray:
    """The centre ``clip_seconds`` of a file at 16 kHz (repeated when the file is shorter)."""
    signal = load_audio(path, SAMPLE_RATE, max_seconds=MAX_AUDIO_SECONDS)
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


# --------------------------------------------------------------------------------------------------
# VoxCeleb

VOXCELEB_LICENCE = "VoxCeleb (CC BY 4.0; audio from YouTube, research use)"
VOXCELEB1_LAYOUT = "ROOT/wav/idXXXXX/<video>/<nnnnn>.wav"
VOXCELEB2_LAYOUT = "ROOT/dev/aac/idXXXXX/<video>/<nnnnn>.m4a, or .wav/.flac in the same layout"
_AUDIO_PREFERENCE = {".wav": 0, ".flac": 1, ".m4a": 2}


def _voxceleb(
    corpus: str,
    root: Path,
    index: dict[str, list[Path]],
    *,
    clip_seconds: float,
    max_identities: int | None,
    max_per_identity: int | None,
    min_per_identity: int,
    unknown_fraction: float,
    seed: int,
    progress: bool,
    hint: str = "",
) -> FederatedDataset:
    if not index:
        raise DatasetError(f"{corpus}: no identity folder with audio under {root}{hint}")
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


def voxceleb1(
    root: str | Path,
    *,
    clip_seconds: float = 2.0,
    max_identities: int | None = 200,
    max_per_identity: int | None = 20,
    min_per_identity: int = 3,
    unknown_fraction: float = UNKNOWN_FRACTION,
    seed: int = 0,
    progress: bool = True,
) -> FederatedDataset:
    """Load a local VoxCeleb1 copy (``root/wav/idXXXXX/<video>/<nnnnn>.wav``).

    One sample per utterance file: its centre ``clip_seconds`` at 16 kHz (repeated when shorter).

    Parameters
    ----------
    root : str or Path
        The folder holding ``wav/``.
    clip_seconds : float, optional
        Length of each sample.
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

    Returns
    -------
    FederatedDataset
        Audio, float32 ``[n, clip_seconds * 16000]``; identities are the ``idXXXXX`` folders.
    """
    root = Path(root).expanduser()
    wav = _folder(root / "wav", "voxceleb1", VOXCELEB1_LAYOUT)
    index = _index_identity_folders([wav], "*/*.wav")
    return _voxceleb(
        "voxceleb1",
        root,
        index,
        clip_seconds=clip_seconds,
        max_identities=max_identities,
        max_per_identity=max_per_identity,
        min_per_identity=min_per_identity,
        unknown_fraction=unknown_fraction,
        seed=seed,
        progress=progress,
    )


def _prefer_decodable(files: list[Path]) -> list[Path]:
    """One file per utterance: a ``.wav`` or ``.flac`` conversion rather than the ``.m4a``."""
    best: dict[Path, Path] = {}
    for path in files:
        key = path.with_suffix("")
        if key not in best or _AUDIO_PREFERENCE[path.suffix] < _AUDIO_PREFERENCE[best[key].suffix]:
            best[key] = path
    return sorted(best.values())


def voxceleb2(
    root: str | Path,
    *,
    clip_seconds: float = 2.0,
    max_identities: int | None = 200,
    max_per_identity: int | None = 20,
    min_per_identity: int = 3,
    unknown_fraction: float = UNKNOWN_FRACTION,
    seed: int = 0,
    progress: bool = True,
) -> FederatedDataset:
    """Load a local VoxCeleb2 copy (``root/dev/aac/idXXXXX/<video>/<nnnnn>.m4a``, and ``test/aac``).

    The published files are AAC (``.m4a``), which libsndfile (hence the SDK) does not decode:
    convert them to ``.wav`` or ``.flac`` in the same layout (e.g. ``ffmpeg -i 00001.m4a -ac 1 -ar
    16000 00001.wav``); a conversion is used in preference to the ``.m4a`` beside it.
    Parameters as for :func:`voxceleb1`.
    """
    root = Path(root).expanduser()
    parts = [root / part / "aac" for part in ("dev", "test") if (root / part / "aac").is_dir()]
    if not parts:
        _folder(root / "dev" / "aac", "voxceleb2", VOXCELEB2_LAYOUT)
    index: dict[str, list[Path]] = {}
    for pattern in ("*/*.m4a", "*/*.wav", "*/*.flac"):
        for name, files in _index_identity_folders(parts, pattern).items():
            index.setdefault(name, []).extend(files)
    index = {name: _prefer_decodable(files) for name, files in index.items()}
    hint = (
        ": .m4a (AAC) does not decode with libsndfile; convert to .wav or .flac in the same layout"
    )
    return _voxceleb(
        "voxceleb2",
        root,
        index,
        clip_seconds=clip_seconds,
        max_identities=max_identities,
        max_per_identity=max_per_identity,
        min_per_identity=min_per_identity,
        unknown_fraction=unknown_fraction,
        seed=seed,
        progress=progress,
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
    index: dict[str, list[Path]],
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
) -> FederatedDataset:
    selected = select(
        index,
        min_per_identity=min_per_identity,
        max_identities=max_identities,
        max_per_identity=max_per_identity,
        seed=seed,
    )
    samples, skipped = _decode(
        selected,
        lambda path: load_image(path, height, width, channels),
        min_per_identity=min_per_identity,
        corpus=corpus,
        progress=progress,
    )
    spec = {"height": height, "width": width, "channels": channels}
    return _finish(
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

    Returns
    -------
    FederatedDataset
        Images, uint8 ``[n, height, width, channels]``; identities are CelebA's identity numbers.
    """
    root = Path(root).expanduser()
    images = _folder(root / "Img" / "img_align_celeba", "celeba", CELEBA_LAYOUT)
    annotation = _file(root / "Anno" / "identity_CelebA.txt", "celeba", CELEBA_LAYOUT)
    index = _celeba_index(annotation, images)
    return _images(
        "celeba",
        root,
        index,
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
    )


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
) -> FederatedDataset:
    """Load a local VGGFace2 copy: ``root/train/`` and ``root/test/`` identity folders of JPEGs.

    The two parts hold disjoint identities; both are read when present. Parameters as for
    :func:`celeba`.
    """
    root = Path(root).expanduser()
    parts = [root / part for part in ("train", "test") if (root / part).is_dir()]
    if not parts:
        _folder(root / "train", "vggface2", VGGFACE2_LAYOUT)
    index = _index_identity_folders(parts, "*.jpg")
    if not index:
        raise DatasetError(f"vggface2: no identity folder with .jpg images under {root}")
    return _images(
        "vggface2",
        root,
        index,
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
) -> FederatedDataset:
    """Build MNIST-UV from a local LEAF FEMNIST copy: one client per writer.

    The FedUV paper (Hosseini et al., 2021, Sec. 6.1) makes a handwriting-verification task from
    EMNIST by stacking, per writer, one image each of the digits 2, 3, 4 and 5 into a 28×28×4
    example. Here each writer gives as many examples as its rarest of those digits allows, each
    image used once. LEAF's ``x`` holds 784 floats in [0, 1] with the paper's white background at
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

    Returns
    -------
    FederatedDataset
        Images, uint8 ``[n, 28, 28, len(digits)]``; identities are LEAF's writer ids.
    """
    root = Path(root).expanduser()
    _folder(root, "mnist-uv", FEMNIST_LAYOUT)
    writers = _femnist_digits(_femnist_files(root), tuple(digits), invert, progress)
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
    spec = {"height": FEMNIST_SIDE, "width": FEMNIST_SIDE, "channels": len(digits)}
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
) -> FederatedDataset:
    """Load a local CIFAR-100 copy (python version) with one identity per fine class.

    The FedHide paper (Sec. 4.1, Table 1) treats each of the 100 fine classes as a client's
    identity, with the 500 training images of the class, and tests on the other 100. Here the
    train and test pickles are pooled (600 images a class) and re-split 60/20/20.

    Parameters
    ----------
    root : str or Path
        The folder holding ``cifar-100-python/`` (or that folder itself).
    max_identities, max_per_identity, min_per_identity, unknown_fraction, seed, progress
        As for :func:`voxceleb1` (``progress`` is accepted for a uniform signature).

    Returns
    -------
    FederatedDataset
        Images, uint8 ``[n, 32, 32, 3]``; identities are the fine label names.
    """
    del progress
    root = Path(root).expanduser()
    folder = root / "cifar-100-python"
    if not folder.is_dir() and (root / "meta").is_file():
        folder = root
    _folder(folder, "cifar-100", CIFAR_LAYOUT)
    parts = [
        _unpickle(_file(folder / part, "cifar-100", CIFAR_LAYOUT)) for part in ("train", "test")
    ]
    meta = _unpickle(_file(folder / "meta", "cifar-100", CIFAR_LAYOUT))
    try:
        pixels = np.concatenate([np.asarray(part[b"data"], dtype=np.uint8) for part in parts])
        labels = np.concatenate(
            [np.asarray(part[b"fine_labels"], dtype=np.int64) for part in parts]
        )
        names = [bytes(name).decode() for name in meta[b"fine_label_names"]]
    except KeyError as error:
        raise DatasetError(f"cifar-100: a pickle lacks the key {error.args[0]!r}") from None
    if pixels.ndim != 2 or pixels.shape[1] != 3072 or len(pixels) != len(labels):
        raise DatasetError("cifar-100: data must be [n, 3072] uint8 with one fine label each")
    if labels.size and not 0 <= labels.min() <= labels.max() < len(names):
        raise DatasetError("cifar-100: a fine label has no name in meta")
    images = pixels.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    index = {names[label]: list(np.flatnonzero(labels == label)) for label in np.unique(labels)}
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
