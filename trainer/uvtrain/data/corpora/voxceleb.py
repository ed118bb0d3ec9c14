"""VoxCeleb1 and VoxCeleb2 (:mod:`uvtrain.data.corpora`). Layouts read:

* VoxCeleb1 — ``root/wav/idXXXXX/<video>/<nnnnn>.wav`` (Nagrani et al., 2017);
* VoxCeleb2 — ``root/dev/aac/idXXXXX/<video>/<nnnnn>.m4a`` and ``root/test/aac/...`` (Chung et al.,
  2018). libsndfile cannot decode AAC, so ``.wav``/``.flac`` conversions in the same layout are
  accepted (and preferred to the ``.m4a`` of the same name).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..base import UNKNOWN_FRACTION, DatasetError, FederatedDataset
from ..protocol import DataProtocol
from .common import (
    SAMPLE_RATE,
    Described,
    Selection,
    Sources,
    Stacking,
    _audio_clip,
    _audio_file,
    _audio_spec,
    _decode,
    _decode_planned,
    _finish,
    _folder,
    _index_identity_folders,
    select,
)

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
    selection: Selection,
    hint: str = "",
) -> FederatedDataset:
    index = {**sources.index, **(sources.test_identities or {})}
    if not index:
        raise DatasetError(f"{corpus}: no identity folder with audio under {root}{hint}")
    if selection.protocol is not None:
        length = int(round(clip_seconds * SAMPLE_RATE))
        whole = int(round(whole_seconds * SAMPLE_RATE)) if whole_seconds else 0
        return _decode_planned(
            Described(corpus, "audio", _audio_spec(clip_seconds), root, VOXCELEB_LICENCE),
            sources.plan(corpus, selection.protocol, selection.seed),
            _audio_file if whole else lambda path: _audio_clip(path, clip_seconds),
            Stacking((length,), np.float32, clip=length, whole=max(whole, length) if whole else 0),
            selection,
        )
    if whole_seconds:
        raise DatasetError(
            f"{corpus}: whole_seconds (random crops) needs a data protocol: set identities, "
            "samples_per_split, ... (the fedhide-voxceleb1 preset does)"
        )
    samples, skipped = _decode(
        select(index, selection),
        lambda path: _audio_clip(path, clip_seconds),
        corpus=corpus,
        selection=selection,
    )
    return _finish(
        corpus,
        "audio",
        _audio_spec(clip_seconds),
        samples,
        root=root,
        skipped=skipped,
        licence=VOXCELEB_LICENCE,
        selection=selection,
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
        selection=Selection.of(locals()),
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
        selection=Selection.of(locals()),
        hint=hint,
    )
