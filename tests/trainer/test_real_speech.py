"""``uvtrain data real-speech`` on a tiny .deb made here: extraction, speaker folders, the cache,
the pinned hash and the one-line errors. Nothing is downloaded."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
import struct
import sys
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
    MIN_SECONDS,
    Source,
    bass,
    extract_deb,
    fetch_real_speech,
)
from uvtrain.data.real_speech import fetch as real_speech_fetch
from uvtrain.data.real_speech import sources as real_speech_sources
from uvtrain.errors import DatasetError

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
    monkeypatch.setattr(real_speech_sources, "SOURCES", {"fake": source})
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

    monkeypatch.setattr(real_speech_fetch, "_apt_download", download)
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
    monkeypatch.setattr(real_speech_sources, "SOURCES", {"fake": only_anna})
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

    monkeypatch.setattr(real_speech_fetch.subprocess, "run", lambda *a, **k: Done())
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
    for name, source in real_speech_sources.SOURCES.items():
        assert name == source.name and len(source.sha256) == 64
        assert source.licence and source.description and source.evidence and source.members
        assert source.filename.startswith(f"{source.package}_") and source.filename.endswith(".deb")
        for package in source.extra:
            assert len(package.sha256) == 64 and package.members and package.version
        assert source.min_seconds >= MIN_SECONDS


def _fillets_debs(folder: Path) -> dict[str, Path]:
    """The three Fish Fillets packages in their real layout: the level scripts (which font,
    i.e. which character, speaks each dialog) and the Czech and Dutch voices."""
    root = real_speech_sources.FILLETS_ROOT
    dialogs = (
        'dialogId("let-v-oko", "font_big", "Can you see that eye?")\n'
        'dialogStr("Vidíš to oko?")\n'
        'dialogId("let-m-oko", "font_small", "This is not a glass eye.")\n'
        'dialogId("let-m-short", "font_small", "Hm.")\n'
        'dialogId("let-x-papousek", "font_parrot", "Polly!")\n'
        'dialogId("let-both", "font_both", "Together!")\n'
        'dialogId("let-mixed", "font_big", "Which of us?")\n'
        'for i = 0, 3 do dialogId("key"..i, "", "") end\n'
    )
    scripts = {
        f"{root}/script/airplane/dialogs_cs.lua": dialogs.encode(),
        f"{root}/script/airplane/dialogs_nl.lua": dialogs.replace(
            '"let-mixed", "font_big"', '"let-mixed", "font_small"'
        ).encode(),
        f"{root}/script/airplane/code.lua": b'dialogId("let-x-code", "font_big", "")\n',
        f"{root}/script/hanoi/dialogs_nl.lua": b'dialogId("han-v-disky", "font_big", "Disks.")\n',
        f"{root}/script/share/border_dialogs_cs.lua": (
            b'dialogId("cil-m-hlaska0", "font_small", "Nothing.")\n'
            b'dialogId("cil-v-hlaska0", "font_big", "No.")\n'
        ),
    }
    voices = {}
    for language, pitch in (("cs", 100), ("nl", 300)):
        voices[language] = {
            f"{root}/sound/airplane/{language}/let-v-oko.ogg": _clip(3.0, pitch),
            f"{root}/sound/airplane/{language}/let-m-oko.ogg": _clip(2.5, pitch + 50),
            f"{root}/sound/airplane/{language}/let-m-short.ogg": _clip(1.5, pitch + 50),
            f"{root}/sound/airplane/{language}/let-x-papousek.ogg": _clip(2.5, pitch + 90),
            f"{root}/sound/airplane/{language}/let-both.ogg": _clip(2.5, pitch + 20),
            f"{root}/sound/airplane/{language}/let-mixed.ogg": _clip(2.5, pitch + 30),
            f"{root}/sound/airplane/{language}/let-x-code.ogg": _clip(2.5, pitch + 40),
            f"{root}/sound/airplane/{language}/unscripted.ogg": _clip(2.5, pitch + 60),
            f"{root}/sound/share/border/{language}/cil-m-hlaska0.ogg": _clip(2.2, pitch + 55),
            f"{root}/sound/share/border/{language}/cil-v-hlaska0.ogg": _clip(2.4, pitch + 5),
            f"{root}/sound/hanoi/{language}/han-v-disky.ogg": _clip(2.6, pitch + 7),
        }
    return {
        "fillets-ng-data": make_deb(folder / "fillets-ng-data.deb", scripts),
        "fillets-ng-data-cs": make_deb(folder / "fillets-ng-data-cs.deb", voices["cs"]),
        "fillets-ng-data-nl": make_deb(folder / "fillets-ng-data-nl.deb", voices["nl"]),
    }


def _pinned_to(source: Source, debs: dict[str, Path]) -> Source:
    """``source`` with every package's hash set to the given fake .deb's."""

    def digest(package: str) -> str:
        return hashlib.sha256(debs[package].read_bytes()).hexdigest()

    extra = tuple(dataclasses.replace(p, sha256=digest(p.package)) for p in source.extra)
    return dataclasses.replace(source, sha256=digest(source.package), extra=extra)


def _fetch_pinned(
    name: str, debs: dict[str, Path], out: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, dict[str, list[str]]]:
    """Source ``name`` alone, pinned to the given fake .debs, fetched into ``out``: the speakers
    folder, and each speaker folder's file names."""
    source = _pinned_to(real_speech_sources.SOURCES[name], debs)
    monkeypatch.setattr(real_speech_sources, "SOURCES", {name: source})
    speakers = fetch_real_speech(out, progress=False, debs=debs)
    folders = {
        p.name: sorted(q.name for q in p.iterdir()) for p in speakers.iterdir() if p.is_dir()
    }
    return speakers, folders


def test_fillets_keeps_each_fish_per_language_by_its_dialog_font(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    debs = _fillets_debs(tmp_path)
    speakers, folders = _fetch_pinned("fillets", debs, tmp_path / "out", monkeypatch)
    # The fish's lines of 2 s or more, by their dialogs' fonts (any language's script names the
    # font), the shared jokes included; not the parrot, both fish at once, a dialog whose scripts
    # disagree on the font, a dialog of a file that is not a dialog script, an unscripted file,
    # nor the 1.5 s line. A level Fillets NG added (hanoi) is kept in Dutch only: its Czech lines
    # are not the credited voices.
    big = ["airplane-let-v-oko.wav", "share-cil-v-hlaska0.wav"]
    small = ["airplane-let-m-oko.wav", "share-cil-m-hlaska0.wav"]
    assert folders == {
        "fillets-cs-big-fish-vit-musil": big,
        "fillets-cs-small-fish-gabriela-pysna": small,
        "fillets-nl-big-fish": sorted([*big, "hanoi-han-v-disky.wav"]),
        "fillets-nl-small-fish": small,
    }
    assert sf.info(speakers / "fillets-nl-big-fish" / big[0]).duration == pytest.approx(3.0, 0.01)
    (row,) = json.loads((speakers / "sources.json").read_text())["sources"]
    assert row["min_seconds"] == 2.0 and [e["package"] for e in row["extra"]] == [
        "fillets-ng-data-cs",
        "fillets-ng-data-nl",
    ]
    text = (speakers / "SOURCES.md").read_text()
    assert "fillets-ng-data 1.0.1-1.1 + fillets-ng-data-cs + fillets-ng-data-nl |" in text
    assert "Clips of at least 2.0 s." in text


def test_fillets_extra_packages_are_downloaded_checked_and_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    debs = _fillets_debs(tmp_path)
    source = _pinned_to(real_speech_sources.SOURCES["fillets"], debs)
    monkeypatch.setattr(real_speech_sources, "SOURCES", {"fillets": source})
    calls = []

    def download(entry: real_speech.Package, folder: Path) -> Path:
        calls.append(entry.package)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / entry.filename
        target.write_bytes(debs[entry.package].read_bytes())
        return target

    monkeypatch.setattr(real_speech_fetch, "_apt_download", download)
    root = tmp_path / "out"
    # A local Dutch .deb that is not the pinned one is refused, naming its package.
    wrong = tmp_path / "wrong.deb"
    wrong.write_bytes(debs["fillets-ng-data-cs"].read_bytes())
    with pytest.raises(DatasetError, match=r"not the pinned fillets-ng-data-nl 1\.0\.1-1\.1"):
        fetch_real_speech(root, progress=False, debs={"fillets-ng-data-nl": wrong})
    assert not (root / "speakers" / "fillets-cs-big-fish-vit-musil").exists()
    assert calls == ["fillets-ng-data", "fillets-ng-data-cs"]  # fetched before, and kept
    fetch_real_speech(root, progress=False)
    assert calls == ["fillets-ng-data", "fillets-ng-data-cs", "fillets-ng-data-nl"]
    assert (root / "speakers" / "fillets-nl-small-fish").is_dir()
    fetch_real_speech(root, progress=False)
    assert len(calls) == 3  # cached: nothing downloaded again
    # A new pin of an extra package alone makes the source's folders stale: read again.
    repinned = dataclasses.replace(
        source, extra=(source.extra[0], dataclasses.replace(source.extra[1], sha256="0" * 64))
    )
    monkeypatch.setattr(real_speech_sources, "SOURCES", {"fillets": repinned})
    assert real_speech.written_summary(root / "speakers", "fillets").speakers == {}
    with pytest.raises(DatasetError, match=r"fillets-ng-data-nl .*SHA-256 differs"):
        fetch_real_speech(root, progress=False)


def test_fillets_without_its_scripts_says_so(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="fillets-ng-data: no dialog scripts"):
        list(real_speech_sources._fillets(tmp_path))


def test_hedgewars_keeps_the_credited_voices_and_rewrites_an_older_selection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stephen Alexander's plain packs are one speaker and mtg90pl another; the uncredited packs
    GE2E cannot tell from him (``Default_es`` among them since revision 2), his acted accents and
    the grunts are left out. A folder written under an older selection is removed on the next
    run, not kept beside the new ones."""
    root = real_speech_sources.HEDGEWARS_ROOT
    clips = {
        f"{root}/{pack}/{name}.ogg": _clip(1.0, 150 + 10 * index)
        for index, (pack, name) in enumerate(
            [
                ("Default", "Hello"),
                ("Default", "Incoming"),
                ("Classic", "Coward"),
                ("Default_pl", "Hello"),
                ("Default_pl", "Incoming"),
                ("Default_es", "Hello"),
                ("Default_es", "Incoming"),
                ("Default_ru", "Hello"),
                ("Pirate", "Hello"),
                ("Default", "Jump1"),
                ("Default", "Laugh"),
            ]
        )
    }
    debs = {"hedgewars-data": make_deb(tmp_path / "hedgewars-data.deb", clips)}
    source = _pinned_to(real_speech_sources.SOURCES["hedgewars"], debs)
    monkeypatch.setattr(real_speech_sources, "SOURCES", {"hedgewars": source})
    out = tmp_path / "out"
    older = dataclasses.replace(source, revision=source.revision - 1)
    monkeypatch.setattr(real_speech_sources, "HEDGEWARS_SPEAKERS", {"Default_es": "default_es"})
    monkeypatch.setattr(real_speech_sources, "SOURCES", {"hedgewars": older})
    written = fetch_real_speech(out, progress=False, debs=debs)
    assert (written / "hedgewars-default_es").is_dir()
    monkeypatch.undo()
    monkeypatch.setattr(real_speech_sources, "SOURCES", {"hedgewars": source})
    speakers = fetch_real_speech(out, progress=False, debs=debs)
    folders = {
        p.name: sorted(q.name for q in p.iterdir()) for p in speakers.iterdir() if p.is_dir()
    }
    assert folders == {
        "hedgewars-mtg90pl": ["Default_pl-Hello.wav", "Default_pl-Incoming.wav"],
        "hedgewars-stephen-alexander": [
            "Classic-Coward.wav",
            "Default-Hello.wav",
            "Default-Incoming.wav",
        ],
    }


def _queen(entries: dict[str, bytes]) -> bytes:
    """A rebuilt (QTBL) queen.1c holding ``entries``: ScummVM's layout, version CEM10, MP3."""
    count = len(entries)
    table, body = b"", b""
    start = 15 + 21 * count
    for name, content in entries.items():
        table += name.encode().ljust(12, b"\0") + b"\1"
        table += struct.pack(">II", start + len(body), len(content))
        body += content
    return b"QTBL" + b"CEM10\0" + b"\0\0" + b"\1" + struct.pack(">H", count) + table + body


def _dialogue(talk_key: int) -> bytes:
    """A .DOG file's first bytes: 20 header bytes, level, unique, then the talk key."""
    return bytes(20) + struct.pack(">hhh", 1, 1, talk_key) + bytes(8)


def _mp3(seconds: float, pitch: float) -> bytes:
    t = np.arange(int(seconds * 11025)) / 11025
    buffer = io.BytesIO()
    sf.write(buffer, 0.3 * np.sin(2 * np.pi * pitch * t), 11025, format="MP3")
    return buffer.getvalue()


def test_fotaq_lines_go_to_the_credited_actor_of_their_dialogue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line's speaker is its dialogue file's character (the talk key in the .DOG header),
    filed under the actor the credits name; Joe's side of every dialogue and his descriptions are
    Brad Lavelle; left-out characters (Sparky), cutaway lines and lines under 2 s are not
    written. A table that runs past the file is one error naming queen.1c."""
    entries = {
        "JIM1.DOG": _dialogue(12),
        "SPARKY1.DOG": _dialogue(13),
        "120001P1.SB": _mp3(2.5, 180),
        "12XXXXP2.SB": _mp3(2.2, 185),
        "120002P1.SB": _mp3(1.0, 190),  # under 2 s
        "130001P1.SB": _mp3(2.5, 200),  # Sparky: left out
        "130001J1.SB": _mp3(2.4, 120),  # Joe, in Sparky's dialogue
        "JOE00001.SB": _mp3(2.6, 125),
        "C1A_001.SB": _mp3(2.5, 130),  # a cutaway line
    }
    archive = real_speech_sources.FOTAQ_ARCHIVE
    debs = {"flight-of-the-amazon-queen": make_deb(tmp_path / "q.deb", {archive: _queen(entries)})}
    speakers, folders = _fetch_pinned("fotaq", debs, tmp_path / "out", monkeypatch)
    assert folders == {
        "fotaq-tom-hill": ["120001P1.wav", "12XXXXP2.wav"],
        "fotaq-brad-lavelle": ["130001J1.wav", "JOE00001.wav"],
    }
    rate = sf.info(str(speakers / "fotaq-tom-hill" / "120001P1.wav")).samplerate
    assert rate == 11025

    broken = _queen(entries)[:-20_000]
    debs = {"flight-of-the-amazon-queen": make_deb(tmp_path / "b.deb", {archive: broken})}
    with pytest.raises(DatasetError, match=r"^queen.1c: entry .* runs past the end of the file$"):
        _fetch_pinned("fotaq", debs, tmp_path / "out2", monkeypatch)


def _pcm8(seconds: float, pitch: float) -> bytes:
    """Unsigned 8-bit mono PCM at 11,025 Hz, as Beneath a Steel Sky stores its speech."""
    t = np.arange(int(seconds * 11025)) / 11025
    return (128 + 80 * np.sin(2 * np.pi * pitch * t)).astype(np.uint8).tobytes()


def _sky(speech: dict[int, bytes], calls: list[tuple[int, str]], pack: set[int]) -> dict:
    """sky.dnr, sky.dsk and sky.cpt (the files of the beneath-a-steel-sky package) holding
    ``speech`` (text number -> PCM), and a script making ``calls`` (text, talk animation name):
    ``push 0; push text; push animation; call_mcode 3, 35*4`` each. The texts in ``pack`` are
    stored RNC-compressed, the others plain."""
    import propack

    s = bass
    animations = sorted({name for _, name in calls})
    compacts = {s.TALK_TABLE: ("talk_table", [i + 1 for i in range(len(animations))])}
    compacts.update({i + 1: (name, [0]) for i, name in enumerate(animations)})
    words: list[int] = []
    names = b""
    for element in range(s.TALK_TABLE + 1):
        name, data = compacts.get(element, ("", []))
        words += [len(data), 0, *data] if data else [0]
        names += (name.encode() + b"\0") if data else b""
    cpt = struct.pack("<HHHII", 0, 1, s.TALK_TABLE + 1, 0, len(words))
    cpt += struct.pack(f"<{len(words)}H", *words) + struct.pack("<I", len(names)) + names
    cpt += struct.pack("<H", 0)  # no aliases
    script = []
    for text, name in calls:
        animation = animations.index(name)
        script += [s.PUSH_NUMBER, 0, s.PUSH_NUMBER, text]
        script += [s.PUSH_NUMBER, animation, s.CALL_MCODE, 3, 35 * 4]
    files = {module: bytes(22) for module in s.SCRIPTS}
    files[s.SCRIPTS[0]] = bytes(22) + struct.pack(f"<{len(script)}H", *script)
    packed = set()
    for text, pcm in speech.items():
        number = s.SPEECH + s.SECTIONS[text >> 12] + (text & 0xFFF)
        if text in pack:
            files[number] = struct.pack("<H", 0x80) + bytes(20) + propack.pack(pcm)
            packed.add(number)
        else:
            files[number] = bytes(22) + pcm
    disk, index = b"", struct.pack("<I", len(files))
    for number, data in files.items():
        flags = len(data) | (0 if number in packed else 1 << 23)
        index += struct.pack("<H", number) + len(disk).to_bytes(3, "little")
        index += flags.to_bytes(3, "little")
        disk += data
    root = s.ROOT
    return {f"{root}/sky.dnr": index, f"{root}/sky.dsk": disk, f"{root}/sky.cpt": cpt}


def test_bass_lines_go_to_the_character_of_their_talk_animation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line's speaker is the kept character whose talk animation the script's fnSpeak* call
    names; a line another character's animation also claims, a left-out character's line and a
    line under 2 s are not written; RNC-compressed speech decodes (propack) to the same audio.
    A container that ends early is one error naming sky.dsk."""
    speech = {
        1: _pcm8(2.5, 130),
        0x1002: _pcm8(2.3, 140),  # text section 1: file 50000 + 600 + 2
        2: _pcm8(2.4, 200),
        3: _pcm8(2.6, 150),  # claimed by Foster and by Joey: left out
        4: _pcm8(2.2, 160),  # Joey (a processed voice): left out
        5: _pcm8(1.0, 135),  # under 2 s
        6: _pcm8(2.1, 210),
    }
    calls = [
        (1, "smlfost_conv"),
        (0x1002, "smlfost_conv"),
        (2, "lamb_normal"),
        (3, "smlfost_conv"),
        (3, "joey_talk_up"),
        (4, "joey_talk_up"),
        (5, "smlfost_conv"),
        (2, "lamb_talk_right"),  # the same character under another animation
        (6, "lamb_talk_right"),
    ]
    debs = {"beneath-a-steel-sky": make_deb(tmp_path / "s.deb", _sky(speech, calls, {0x1002}))}
    speakers, folders = _fetch_pinned("bass", debs, tmp_path / "out", monkeypatch)
    assert folders == {
        "bass-foster": ["00001.wav", "04098.wav"],
        "bass-lamb": ["00002.wav", "00006.wav"],
    }
    audio, rate = sf.read(str(speakers / "bass-foster" / "04098.wav"), dtype="int16")
    assert rate == 11025
    expected = (np.frombuffer(speech[0x1002], np.uint8).astype(np.int16) - 128) * 256
    np.testing.assert_allclose(audio, expected, atol=1)  # unpacked exactly (the int16 rounding)

    # without its decompressor installed: one line saying what to install
    monkeypatch.setitem(sys.modules, "propack", None)
    with pytest.raises(DatasetError, match=r"^Beneath a Steel Sky's speech needs the propack"):
        fetch_real_speech(tmp_path / "out3", progress=False, debs=debs)
    monkeypatch.delitem(sys.modules, "propack")

    broken = _sky(speech, calls, {0x1002})
    dsk = f"{bass.ROOT}/sky.dsk"
    broken[dsk] = broken[dsk][:-3000]
    debs = {"beneath-a-steel-sky": make_deb(tmp_path / "b.deb", broken)}
    with pytest.raises(
        DatasetError, match=r"^sky.dsk: file \d+ runs past the end of the container$"
    ):
        _fetch_pinned("bass", debs, tmp_path / "out2", monkeypatch)


def test_the_voice_measurement_and_the_source_name_the_same_characters() -> None:
    """benchmarks/bass_voices.py (the measurement that chose the kept characters) attributes
    every animation the source keeps to the same character; a pair's EER is within-character
    clip pairs against cross-character ones."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bass_voices.py"
    spec = importlib.util.spec_from_file_location("bass_voices", path)
    assert spec is not None and spec.loader is not None
    bass_voices = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bass_voices)
    for animation, name in bass.SPEAKERS.items():
        assert bass_voices.character(animation) == name, animation
    assert bass_voices.character("dad_to_foster") == "dad"  # not Foster's
    assert not set(bass.SPEAKERS.values()) & bass_voices.PROCESSED
    apart = {"a": np.eye(3)[[0, 0, 0]], "b": np.eye(3)[[1, 1, 1]], "c": np.eye(3)[[1, 1, 1]]}
    eers = bass_voices.pair_eers(apart)
    assert eers[("a", "b")] == 0.0 and eers[("a", "c")] == 0.0  # told apart
    assert eers[("b", "c")] == pytest.approx(0.5, abs=0.1)  # one voice


def _table_speakers() -> dict[str, set[str]]:
    """Every speaker each pinned source's ``clips`` can name, from the sources' own tables."""
    s = real_speech_sources
    return {
        "klettres": set(s.KLETTRES_LANGUAGES),
        "alsa": {"voice"},
        "ktuberling": set(s.KTUBERLING_LANGUAGES),
        "hedgewars": set(s.HEDGEWARS_SPEAKERS.values()),
        "warzone": set(s.WARZONE_SPEAKERS),
        "tuxpaint": set(s.TUXPAINT_SPEAKERS),
        "fillets": set(s.FILLETS_SPEAKERS),
        "fotaq": {*s.FOTAQ_SPEAKERS.values(), s.FOTAQ_JOE},
        "bass": set(bass.SPEAKERS.values()),
    }


def test_every_speaker_has_a_gender_and_a_language_and_says_how() -> None:
    """labels.json labels exactly the speakers the sources' tables name; a gender taken from
    pitch alone is what the pitch module's thresholds give for the recorded F0 and spread, and
    a credit that decides is named."""
    from uvtrain.data.real_speech.pitch import gender_from_f0

    expected = _table_speakers()
    assert set(expected) == set(real_speech_sources.SOURCES)
    for name, source in real_speech_sources.SOURCES.items():
        assert set(source.labels) == expected[name], name
        for speaker, label in source.labels.items():
            where = f"{name}-{speaker}"
            assert label["gender"] in real_speech.GENDERS, where
            assert re.fullmatch(r"[a-z]{2,3}", label["language"]), where
            assert label["gender_from"] and label["language_from"], where
            assert f"{label['f0_hz']:.1f} Hz" in label["gender_from"], where
            measured = gender_from_f0(label["f0_hz"], label["f0_spread"])
            if (
                "no credit names the voice" in label["gender_from"]
                or "nickname" in (label["gender_from"])
            ):
                assert label["gender"] == measured, where
            elif label["gender"] != "unknown":  # a credit, or the game's text, names them
                assert "credits" in label["gender_from"] or "game's text" in label["gender_from"]
                assert measured in (label["gender"], "unknown"), where  # never contradicted
    assert len(real_speech.folder_labels()) == sum(len(v) for v in expected.values())


def test_the_index_writes_every_folders_labels(
    tmp_path: Path, fake: tuple[Source, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, deb = fake
    label = {
        "gender": "female",
        "gender_from": "made here: median F0 200.0 Hz",
        "language": "en",
        "language_from": "made here",
    }
    labelled = dataclasses.replace(source, labels={"anna": label})
    monkeypatch.setattr(real_speech_sources, "SOURCES", {"fake": labelled})
    speakers = fetch_real_speech(tmp_path / "out", progress=False, debs={"fake-voices": deb})
    index = json.loads((speakers / "sources.json").read_text())
    people = index["sources"][0]["people"]
    assert people["fake-anna"] == label
    assert people["fake-bert"] == real_speech_fetch.UNLABELLED  # none recorded: said so
    assert index["labels"]["f0_thresholds"]
    text = (speakers / "SOURCES.md").read_text()
    assert "By gender: 1 female, 1 unknown; by language: ? 1, en 1." in text
    assert "| fake-anna | 3 | female | made here: median F0 200.0 Hz | en | made here |" in text


@pytest.mark.parametrize("f0", [85.0, 120.0, 210.0, 300.0, 440.0])
def test_the_pitch_estimator_finds_a_voices_f0(f0: float) -> None:
    """A harmonic voice-like signal with a weak fundamental (where autocorrelation can land on
    an octave), its loudness moving, at 22.05 kHz: the median F0 within 1 %."""
    from uvtrain.data.real_speech import pitch

    rate = 22050
    t = np.arange(int(1.5 * rate)) / rate
    voice = sum(
        (0.3 if k == 1 else 1 / k) * np.sin(2 * np.pi * f0 * k * t + k) for k in range(1, 20)
    )
    voice = voice * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))
    voice += 0.01 * np.random.default_rng(0).standard_normal(len(t))
    measured = pitch.median_f0([(voice.astype(np.float32), rate), (voice[: rate // 2], rate)])
    assert measured.f0 == pytest.approx(f0, rel=0.01)
    assert measured.clips == 2 and measured.voiced_frames > 100
    assert measured.spread == pytest.approx(1.0, abs=0.02)
    silent = pitch.median_f0([(np.zeros(rate), rate)])
    assert silent.f0 is None and silent.gender() == "unknown"


def test_the_pitch_thresholds() -> None:
    from uvtrain.data.real_speech.pitch import gender_from_f0

    assert gender_from_f0(120.0) == "male" and gender_from_f0(150.0) == "male"
    assert gender_from_f0(160.0) == "unknown"  # between
    assert gender_from_f0(170.0) == "female" and gender_from_f0(255.0) == "female"
    assert gender_from_f0(300.0) == "unknown"  # a child's or a raised voice
    assert gender_from_f0(120.0, spread=2.5) == "unknown"  # two voices, or not followed
    assert gender_from_f0(None) == "unknown"
