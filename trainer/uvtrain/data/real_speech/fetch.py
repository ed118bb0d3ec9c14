"""Download, check and unpack the :data:`~.sources.SOURCES` into one folder per speaker."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from ...errors import DatasetError
from ...io import atomic_write, file_sha256
from . import sources as catalogue
from .sources import GENDERS, MIN_SECONDS, Package, Source, safe_path

#: A clip whose peak is below this (full scale 1) is silence, left out.
MIN_PEAK = 1e-3
#: The layout of the written folders; a source written under another layout is written again.
LAYOUT = 1


# --- download, check, extract ---------------------------------------------------------------


def _apt_download(source: Package, folder: Path) -> Path:
    """``apt-get download PACKAGE=VERSION`` into ``folder``; the ``.deb``'s path."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".apt-") as scratch:
        spec = f"{source.package}={source.version}"
        if source.arch != "all":
            spec = f"{source.package}:{source.arch}={source.version}"
        try:
            done = subprocess.run(
                ["apt-get", "download", spec], cwd=scratch, capture_output=True, text=True
            )
        except FileNotFoundError:
            raise DatasetError(
                f"{source.package}: apt-get is not installed; pass a local copy of "
                f"{source.filename} with --deb {source.package}=PATH"
            ) from None
        debs = sorted(Path(scratch).glob("*.deb"))
        if done.returncode != 0 or not debs:
            last = (done.stderr.strip().splitlines() or ["no .deb"])[-1]
            raise DatasetError(
                f"{source.package} {source.version} ({source.arch}) could not be downloaded "
                f"({last.strip()}); pass a local copy of {source.filename} with "
                f"--deb {source.package}=PATH"
            )
        target = folder / source.filename
        shutil.move(str(debs[0]), target)
    return target


def _deb(source: Package, downloads: Path, local: Path | None, progress: bool) -> Path:
    """The source's hash-checked ``.deb``: a local copy, the cache, or a download."""
    if local is not None:
        path = Path(local)
        if not path.is_file():
            raise DatasetError(f"{path}: no such .deb (given for {source.package})")
    else:
        path = downloads / source.filename
        if not path.is_file():
            if progress:
                print(f"downloading {source.package} {source.version} ...", flush=True)
            path = _apt_download(source, downloads)
    if file_sha256(path) != source.sha256:
        raise DatasetError(
            f"{path.name} is not the pinned {source.package} {source.version} ({source.arch}): "
            f"its SHA-256 differs; pass a copy of {source.filename} with "
            f"--deb {source.package}=PATH"
        )
    return path


def _ar_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    """The members of an ``ar`` archive (a ``.deb``)."""
    if not data.startswith(b"!<arch>\n"):
        raise DatasetError("not a .deb (no ar header)")
    at = 8
    while at + 60 <= len(data):
        header = data[at : at + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip() or 0)
        yield name, data[at + 60 : at + 60 + size]
        at += 60 + size + (size % 2)


def extract_deb(deb: Path, target: Path, members: Iterable[str]) -> int:
    """Unpack the regular files of ``deb``'s data whose path starts with one of ``members``
    (paths as in the installed system, without the leading ``/``) into ``target``; returns how
    many. Reads ``data.tar.xz``, ``.gz``, ``.bz2`` or an uncompressed ``data.tar``."""
    prefixes = tuple(members)
    data = next(
        (blob for name, blob in _ar_members(deb.read_bytes()) if name.startswith("data.tar")), None
    )
    if data is None:
        raise DatasetError(f"{deb.name}: no data.tar in the package")
    count = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            for member in archive:
                name = member.name.removeprefix("./")
                if not member.isfile() or not name.startswith(prefixes):
                    continue
                path = safe_path(target, name)
                path.parent.mkdir(parents=True, exist_ok=True)
                stream = archive.extractfile(member)
                assert stream is not None
                path.write_bytes(stream.read())
                count += 1
    except (tarfile.TarError, lzma.LZMAError, EOFError) as error:
        raise DatasetError(f"{deb.name}: cannot read its data ({error})") from None
    return count


# --- writing the speakers' folders ----------------------------------------------------------


def _mono16(path: Path, min_seconds: float = MIN_SECONDS) -> tuple[np.ndarray, int] | None:
    """The clip as int16 mono at its own rate, or ``None`` when shorter than ``min_seconds``,
    silent or unreadable."""
    try:
        audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, ValueError):
        return None
    audio = audio.mean(axis=1)
    peak = float(np.abs(audio).max(initial=0.0))
    if len(audio) < min_seconds * rate or peak < MIN_PEAK:
        return None
    if peak > 1.0:  # a few Vorbis files decode past full scale: scaled down, not clipped
        audio = audio * (0.99 / peak)
    return (np.clip(audio, -1.0, 1.0) * 32767).round().astype(np.int16), rate


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "x"


def _write_source(source: Source, tree: Path, speakers: Path) -> dict[str, Any]:
    """Write the source's speaker folders from its extracted ``tree``; their summary."""
    clips: dict[str, list[tuple[str, Path]]] = {}
    for speaker, name, path in source.clips(tree):
        clips.setdefault(speaker, []).append((name, path))
    written: dict[str, dict[str, Any]] = {}
    for speaker, entries in sorted(clips.items()):
        folder = speakers / f"{source.name}-{_slug(speaker)}"
        if folder.exists():
            shutil.rmtree(folder)
        seen: set[bytes] = set()
        files: dict[str, int] = {}
        seconds = 0.0
        for name, path in entries:
            clip = _mono16(path, source.min_seconds)
            if clip is None:
                continue
            audio, rate = clip
            digest = hashlib.sha256(audio.tobytes()).digest()
            if digest in seen:  # the same recording filed twice under two names
                continue
            seen.add(digest)
            folder.mkdir(parents=True, exist_ok=True)
            out = folder / f"{_slug(name)}.wav"
            buffer = io.BytesIO()
            sf.write(buffer, audio, rate, subtype="PCM_16", format="WAV")
            atomic_write(out, buffer.getvalue())
            files[out.name] = out.stat().st_size
            seconds += len(audio) / rate
        if len(files) >= 2:  # one clip makes no genuine pair
            written[folder.name] = {"clips": len(files), "seconds": seconds, "files": files}
        elif folder.exists():
            shutil.rmtree(folder)
    return written


@dataclass
class SourceSummary:
    """What one source gave: its speaker folders with their clips and seconds."""

    name: str
    speakers: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def clips(self) -> int:
        return sum(entry["clips"] for entry in self.speakers.values())

    @property
    def minutes(self) -> float:
        return sum(entry["seconds"] for entry in self.speakers.values()) / 60


def _done_path(speakers: Path, name: str) -> Path:
    return speakers.parent / "manifests" / f"{name}.json"


def _forget(source: Source, speakers: Path) -> None:
    """Remove the folders an earlier run wrote for ``source`` (its selection may have changed)."""
    try:
        done = json.loads(_done_path(speakers, source.name).read_text(encoding="utf-8"))
        folders = list(done.get("speakers", {}))
    except (OSError, ValueError, AttributeError):
        return
    for folder in folders:
        path = speakers / folder
        if folder and "/" not in folder and folder not in (".", "..") and path.is_dir():
            shutil.rmtree(path)
    _done_path(speakers, source.name).unlink(missing_ok=True)


def _cached(source: Source, speakers: Path) -> dict[str, dict[str, Any]] | None:
    """The written folders of ``source`` when they are complete and current, else ``None``."""
    try:
        done = json.loads(_done_path(speakers, source.name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (done.get("sha256"), done.get("layout"), done.get("revision")) != (
        source.sha256,
        LAYOUT,
        source.revision,
    ) or done.get("extra", []) != [p.sha256 for p in source.extra]:
        return None
    written = done.get("speakers", {})
    for folder, entry in written.items():
        for name, size in entry["files"].items():
            path = speakers / folder / name
            if not path.is_file() or path.stat().st_size != size:
                return None
    return written


def written_summary(speakers: Path, name: str) -> SourceSummary:
    """What :func:`fetch_real_speech` wrote for source ``name`` under ``speakers`` (nothing
    when it has not been written)."""
    return SourceSummary(name, _cached(catalogue.SOURCES[name], Path(speakers)) or {})


#: What a speaker folder without a recorded label is given (a source added without labels).
UNLABELLED = {
    "gender": "unknown",
    "gender_from": "no label recorded for this speaker",
    "language": None,
    "language_from": "no label recorded for this speaker",
}


def source_folder_labels(source: Source) -> dict[str, dict[str, Any]]:
    """``<source>-<speaker>`` folder name -> the speaker's labels (:data:`.sources.LABELS`)."""
    return {
        f"{source.name}-{_slug(speaker)}": dict(label) for speaker, label in source.labels.items()
    }


def folder_labels() -> dict[str, dict[str, Any]]:
    """Every speaker folder the sources write -> its gender and language labels and how each
    was determined (``gender``, ``gender_from``, ``language``, ``language_from``, ...)."""
    return {
        folder: label
        for source in catalogue.SOURCES.values()
        for folder, label in source_folder_labels(source).items()
    }


def describe_sources() -> str:
    """One line naming the packages the speakers come from (a calibration's ``data``)."""
    packages = ", ".join(
        f"{p.package} {p.version}" for s in catalogue.SOURCES.values() for p in s.packages
    )
    return f"real recorded speakers of {packages}"


def summary_text(summary: SourceSummary) -> str:
    """One line: ``klettres: 16 speakers, 1003 clips, 14.1 min``."""
    return (
        f"{summary.name}: {len(summary.speakers)} speakers, {summary.clips} clips, "
        f"{summary.minutes:.1f} min"
    )


def fetch_real_speech(
    root: Path,
    sources: list[str] | None = None,
    progress: bool = True,
    debs: dict[str, Path] | None = None,
) -> Path:
    """Download (once), check and unpack the real-speech sources into ``root/speakers``.

    Parameters
    ----------
    root : path
        Folder for ``downloads/`` (the ``.deb`` cache) and ``speakers/`` (one folder per speaker).
    sources : list of str, optional
        Names of :data:`~.sources.SOURCES` to fetch (default: all).
    progress : bool
        Print what is downloaded and one summary line per source.
    debs : dict, optional
        Local copies of packages, by package name (``{"klettres-data": Path(...)}``): read instead
        of downloading; their SHA-256 is checked all the same.

    Returns
    -------
    Path
        ``root/speakers``.
    """
    root = Path(root)
    names = list(catalogue.SOURCES) if not sources else list(dict.fromkeys(sources))
    unknown = [name for name in names if name not in catalogue.SOURCES]
    if unknown:
        raise DatasetError(
            f"unknown real-speech source {unknown[0]!r}; known: {', '.join(catalogue.SOURCES)}"
        )
    debs = dict(debs or {})
    packages = {p.package for source in catalogue.SOURCES.values() for p in source.packages}
    strange = [package for package in debs if package not in packages]
    if strange:
        raise DatasetError(
            f"--deb {strange[0]}: not a package of a real-speech source "
            f"({', '.join(sorted(packages))})"
        )
    downloads, speakers = root / "downloads", root / "speakers"
    speakers.mkdir(parents=True, exist_ok=True)
    summaries = []
    for name in names:
        source = catalogue.SOURCES[name]
        written = _cached(source, speakers)
        if written is None:
            files = [
                (_deb(package, downloads, debs.get(package.package), progress), package.members)
                for package in source.packages
            ]
            _forget(source, speakers)
            with tempfile.TemporaryDirectory(dir=root, prefix=f".extract-{name}-") as scratch:
                tree = Path(scratch)
                for deb, members in files:
                    extract_deb(deb, tree, members)
                written = _write_source(source, tree, speakers)
            done = {
                "sha256": source.sha256,
                "extra": [p.sha256 for p in source.extra],
                "layout": LAYOUT,
                "revision": source.revision,
                "speakers": written,
            }
            _done_path(speakers, name).parent.mkdir(parents=True, exist_ok=True)
            atomic_write(_done_path(speakers, name), json.dumps(done, indent=1, sort_keys=True))
        summary = SourceSummary(name, written)
        summaries.append(summary)
        if progress:
            print(summary_text(summary), flush=True)
    _write_index(speakers)
    return speakers


def _write_index(speakers: Path) -> None:
    """``sources.json`` and ``SOURCES.md`` for every source written so far (rewritten only when
    they change)."""
    rows = []
    for name, source in catalogue.SOURCES.items():
        written = _cached(source, speakers)
        if written is None:
            continue
        labels = source_folder_labels(source)
        summary = SourceSummary(name, written)
        counts = sorted(entry["clips"] for entry in written.values())
        rows.append(
            {
                **source.to_dict(),
                "speakers": len(written),
                "clips": summary.clips,
                "minutes": round(summary.minutes, 2),
                "clips_per_speaker": {
                    "min": counts[0] if counts else 0,
                    "median": float(np.median(counts)) if counts else 0.0,
                    "max": counts[-1] if counts else 0,
                },
                "folders": {folder: entry["clips"] for folder, entry in sorted(written.items())},
                "people": {folder: labels.get(folder, UNLABELLED) for folder in sorted(written)},
            }
        )
    about = catalogue.LABELS_ABOUT
    text = (
        json.dumps(
            {"min_seconds": MIN_SECONDS, "labels": about, "sources": rows},
            indent=1,
            ensure_ascii=False,
        )
        + "\n"
    )
    lines = [
        "# Real recorded speakers",
        "",
        "Written by `uvtrain data real-speech` (uvtrain.data.real_speech). One folder per "
        f"speaker, 16-bit PCM mono WAV at the original rate, clips of at least {MIN_SECONDS} s.",
        "",
        "| source | package | licence | speakers | clips | minutes |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        also = "".join(f" + {extra['package']}" for extra in row["extra"])
        lines.append(
            f"| {row['name']} | {row['package']} {row['version']}{also} | {row['licence']} | "
            f"{row['speakers']} | {row['clips']} | {row['minutes']:.1f} |"
        )
    total = sum(row["speakers"] for row in rows)
    people = [label for row in rows for label in row["people"].values()]
    genders = Counter(label["gender"] for label in people)
    languages = Counter(label["language"] or "?" for label in people)
    lines += [
        "",
        f"Speakers in all: {total}. By gender: "
        + ", ".join(f"{genders[g]} {g}" for g in GENDERS if genders[g])
        + "; by language: "
        + ", ".join(f"{code} {count}" for code, count in sorted(languages.items()))
        + ".",
        "",
        f"Labels (each speaker's below, with how it was determined): {about.get('about', '')}",
        "",
        f"Pitch: {about.get('f0_method', '')}; {about.get('f0_thresholds', '')} "
        f"(`{about.get('f0_command', '')}`).",
        "",
    ]
    for row in rows:
        lines += [f"## {row['name']}", "", row["description"] + ".", ""]
        if row["extra"]:
            also = ", ".join(f"{extra['package']} {extra['version']}" for extra in row["extra"])
            lines += [f"Also read: {also}.", ""]
        if row["min_seconds"] != MIN_SECONDS:
            lines += [f"Clips of at least {row['min_seconds']} s.", ""]
        lines += [f"Speaker identity: {row['evidence']}.", ""]
        if row["notes"]:
            lines += [f"Left out: {row['notes']}", ""]
        lines += [
            "| folder | clips | gender | how | language | how |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for folder, label in row["people"].items():
            lines.append(
                f"| {folder} | {row['folders'][folder]} | {label['gender']} | "
                f"{label['gender_from']} | {label['language'] or '?'} | {label['language_from']} |"
            )
        lines.append("")
    markdown = "\n".join(lines)
    for name, content in (("sources.json", text), ("SOURCES.md", markdown)):
        path = speakers / name
        if not path.is_file() or path.read_text(encoding="utf-8") != content:
            atomic_write(path, content)
