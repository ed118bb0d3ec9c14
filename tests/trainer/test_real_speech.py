"""``uvtrain data real-speech`` on a tiny .deb made here: extraction, speaker folders, the cache,
the pinned hash and the one-line errors. Nothing is downloaded."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from uvtrain.cli import app
from uvtrain.data import real_speech
from uvtrain.data.real_speech import (
    SOURCES,
    DatasetError,
    Source,
    extract_deb,
    fetch_real_speech,
)

RATE = 22050
PREFIX = "usr/share/fake"


def _clip(seconds: float, pitch: float = 220.0, channels: int = 1) -> bytes:
    t = np.arange(int(seconds * RATE)) / RATE
    tone = (0.3 * np.sin(2 * np.pi * pitch * t)).astype(np.float32)
    audio = np.stack([tone] * channels, axis=1) if channels > 1 else tone
    buffer = io.BytesIO()
    sf.write(buffer, audio, RATE, format="OGG", subtype="VORBIS")
    return buffer.getvalue()


def make_deb(path: Path, files: dict[str, bytes]) -> Path:
    """A minimal .deb: an ar archive of debian-binary, control.tar.xz and data.tar.xz."""

    def tar(entries: dict[str, bytes]) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:xz") as archive:
            for name, content in entries.items():
                info = tarfile.TarInfo(f"./{name}")
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))
        return buffer.getvalue()

    members = [
        ("debian-binary", b"2.0\n"),
        ("control.tar.xz", tar({"control": b"Package: fake\n"})),
        ("data.tar.xz", tar(files)),
    ]
    blob = bytearray(b"!<arch>\n")
    for name, content in members:
        header = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(content):<10}`\n"
        blob += header.encode("ascii") + content + (b"\n" if len(content) % 2 else b"")
    path.write_bytes(bytes(blob))
    return path


def _fake_clips(tree: Path) -> Iterator[tuple[str, str, Path]]:
    for path in sorted((tree / PREFIX).glob("*/*.ogg")):
        yield path.parent.name, path.stem, path


@pytest.fixture()
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Source, Path]:
    """A source ``fake`` (package ``fake-voices``) and its .deb: speaker ``anna`` has three usable
    clips, one duplicate and one too short; ``bert`` has two (one stereo); ``carl`` has one (no
    genuine pair: left out). A file outside the source's members is never extracted."""
    files = {
        f"{PREFIX}/anna/one.ogg": _clip(1.0, 200),
        f"{PREFIX}/anna/two.ogg": _clip(0.8, 210),
        f"{PREFIX}/anna/three.ogg": _clip(0.6, 190),
        f"{PREFIX}/anna/again.ogg": _clip(1.0, 200),  # one.ogg again
        f"{PREFIX}/anna/short.ogg": _clip(0.2, 200),
        f"{PREFIX}/bert/one.ogg": _clip(1.2, 120, channels=2),
        f"{PREFIX}/bert/two.ogg": _clip(0.9, 125),
        f"{PREFIX}/carl/one.ogg": _clip(1.0, 300),
        "usr/share/doc/fake-voices/copyright": b"GPL",
    }
    deb = make_deb(tmp_path / "fake-voices_1.0-1_all.deb", files)
    source = Source(
        name="fake",
        package="fake-voices",
        version="1.0-1",
        arch="all",
        sha256=hashlib.sha256(deb.read_bytes()).hexdigest(),
        licence="GPL-2+",
        description="test voices",
        evidence="made here",
        members=(PREFIX + "/",),
        clips=_fake_clips,
    )
    monkeypatch.setattr(real_speech, "SOURCES", {"fake": source})
    return source, deb


def test_extract_deb_takes_only_the_members(tmp_path: Path, fake: tuple[Source, Path]) -> None:
    _, deb = fake
    assert extract_deb(deb, tmp_path / "tree", (PREFIX + "/anna/",)) == 5
    assert sorted(p.name for p in (tmp_path / "tree" / PREFIX / "anna").iterdir())[0] == "again.ogg"
    assert not (tmp_path / "tree" / "usr/share/doc").exists()


def test_local_deb_writes_one_folder_per_speaker(tmp_path: Path, fake: tuple[Source, Path]) -> None:
    _, deb = fake
    speakers = fetch_real_speech(tmp_path / "out", progress=False, debs={"fake-voices": deb})
    assert speakers == tmp_path / "out" / "speakers"
    folders = sorted(p.name for p in speakers.iterdir() if p.is_dir())
    assert folders == ["fake-anna", "fake-bert"]  # carl's single clip makes no pair
    # again.ogg and one.ogg are one recording: the first by name is kept.
    assert sorted(p.name for p in (speakers / "fake-anna").iterdir()) == [
        "again.wav",
        "three.wav",
        "two.wav",
    ]
    audio, rate = sf.read(speakers / "fake-bert" / "one.wav", dtype="int16")
    info = sf.info(speakers / "fake-bert" / "one.wav")
    assert rate == RATE and audio.ndim == 1 and info.subtype == "PCM_16"
    index = json.loads((speakers / "sources.json").read_text())
    (row,) = index["sources"]
    assert row["name"] == "fake" and row["speakers"] == 2 and row["clips"] == 5
    assert row["licence"] == "GPL-2+" and row["clips_per_speaker"]["min"] == 2
    assert "| fake | fake-voices 1.0-1 | GPL-2+ | 2 | 5 |" in (speakers / "SOURCES.md").read_text()
    assert not (tmp_path / "out" / "downloads").exists()  # a local .deb is not copied


def test_download_is_cached_and_a_second_run_rewrites_nothing(
    tmp_path: Path, fake: tuple[Source, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, deb = fake
    calls = []

    def download(entry: Source, folder: Path) -> Path:
        calls.append(entry.package)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / entry.filename
        target.write_bytes(deb.read_bytes())
        return target

    monkeypatch.setattr(real_speech, "_apt_download", download)
    root = tmp_path / "out"
    speakers = fetch_real_speech(root, ["fake"], progress=False)
    assert calls == ["fake-voices"] and (root / "downloads" / source.filename).is_file()
    stamps = {p: p.stat().st_mtime_ns for p in speakers.rglob("*") if p.is_file()}
    fetch_real_speech(root, ["fake"], progress=False)
    assert calls == ["fake-voices"]
    assert {p: p.stat().st_mtime_ns for p in speakers.rglob("*") if p.is_file()} == stamps
    # A folder removed by hand is written again, from the cached .deb (no download).
    for path in (speakers / "fake-bert").iterdir():
        path.unlink()
    fetch_real_speech(root, ["fake"], progress=False)
    assert calls == ["fake-voices"] and (speakers / "fake-bert" / "two.wav").is_file()
    # A new revision of the source's selection (bert dropped) rewrites it: no stale folder.
    only_anna = dataclasses.replace(
        source,
        revision=2,
        clips=lambda tree: (clip for clip in _fake_clips(tree) if clip[0] == "anna"),
    )
    monkeypatch.setattr(real_speech, "SOURCES", {"fake": only_anna})
    fetch_real_speech(root, ["fake"], progress=False)
    assert calls == ["fake-voices"] and not (speakers / "fake-bert").exists()
    assert json.loads((speakers / "sources.json").read_text())["sources"][0]["speakers"] == 1


def test_a_deb_with_another_hash_is_refused(tmp_path: Path, fake: tuple[Source, Path]) -> None:
    _, deb = fake
    other = tmp_path / "other.deb"
    other.write_bytes(deb.read_bytes() + b"\0")
    with pytest.raises(
        DatasetError, match=r"fake-voices 1\.0-1.*SHA-256 differs.*--deb fake-voices="
    ):
        fetch_real_speech(tmp_path / "out", progress=False, debs={"fake-voices": other})
    assert not (tmp_path / "out" / "speakers" / "fake-anna").exists()


def test_a_version_the_mirror_no_longer_has_names_the_option(
    tmp_path: Path, fake: tuple[Source, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Done:
        returncode = 100
        stderr = "E: Version '1.0-1' for 'fake-voices' was not found\n"

    monkeypatch.setattr(real_speech.subprocess, "run", lambda *a, **k: Done())
    with pytest.raises(DatasetError) as error:
        fetch_real_speech(tmp_path / "out", progress=False)
    message = str(error.value)
    assert "\n" not in message and "fake-voices 1.0-1" in message
    assert "was not found" in message and "--deb fake-voices=PATH" in message


def test_cli_summary_and_one_line_errors(tmp_path: Path, fake: tuple[Source, Path]) -> None:
    _, deb = fake
    runner = CliRunner()
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["data", "real-speech", "--out", str(out), "--deb", f"fake-voices={deb}"]
    )
    assert result.exit_code == 0, result.output
    assert "fake: 2 speakers, 5 clips, 0.1 min" in result.output
    for args, expected in (
        (["--source", "nope"], "unknown real-speech source 'nope'"),
        (["--deb", "fake-voices"], "expected PACKAGE=PATH"),
        (["--deb", "other=x.deb"], "--deb other: not a package"),
    ):
        result = runner.invoke(app, ["data", "real-speech", "--out", str(out), *args])
        assert result.exit_code == 2, result.output
        assert expected in result.output and result.output.count("\n") == 1


def test_the_pinned_sources_are_complete() -> None:
    for name, source in SOURCES.items():
        assert name == source.name and len(source.sha256) == 64
        assert source.licence and source.description and source.evidence and source.members
        assert source.filename.startswith(f"{source.package}_") and source.filename.endswith(".deb")
