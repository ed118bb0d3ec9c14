"""A device's folders, as ``uvtrain deploy`` reads them, made from the test voice corpus."""

from __future__ import annotations

from pathlib import Path


def device_folder(voice_dir: Path, speaker: int, root: Path) -> Path:
    """``device/samples`` (clips 0-5 of a speaker) and ``device/test`` (clips 6-7)."""
    folder = root / f"device-{speaker}"
    for split, clips in (("samples", range(6)), ("test", range(6, 8))):
        (folder / split).mkdir(parents=True)
        for index in clips:
            source = voice_dir / f"speaker{speaker}" / f"clip{index}.wav"
            (folder / split / source.name).write_bytes(source.read_bytes())
    return folder
