"""Verification trial lists in the format of VoxCeleb1's official lists, read from the user's copy.

The official VoxCeleb1 test lists (``veri_test.txt``, 37,720 trials, and the cleaned
``veri_test2.txt``, 37,611 trials — the count the FedHide paper gives in its Sec. 4.1) hold one
trial a line::

    1 id10270/x6uYqmx31kE/00001.wav id10270/8jEAjG6SegY/00008.wav
    0 id10270/x6uYqmx31kE/00001.wav id10300/ize_eiCFEg0/00003.wav

``1``: the two utterances are of the same speaker, ``0``: of different speakers. Paths are relative
to VoxCeleb1's ``wav/`` folder (the layout :func:`uvtrain.data.corpora.voxceleb1` reads). Nothing
is downloaded: the user points ``--trials`` at their copy of the list and ``--wav-root`` at their
copy of the audio.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .base import DatasetError

__all__ = ["TrialList", "read_trial_list", "resolve_wav_root"]


@dataclass(frozen=True)
class TrialList:
    """A parsed trial list.

    Attributes
    ----------
    path : Path
        The file it was read from.
    labels : numpy.ndarray
        ``[T]`` int8, 1 for a same-speaker (target) trial, 0 for a different-speaker one.
    left, right : tuple of str
        ``[T]`` the two utterances of each trial, as the list names them (relative paths).
    lines : tuple of int
        ``[T]`` the 1-based line number of each trial in the file (for error messages).
    """

    path: Path
    labels: np.ndarray
    left: tuple[str, ...]
    right: tuple[str, ...]
    lines: tuple[int, ...]

    def __len__(self) -> int:
        return int(self.labels.size)

    def check_paths(self, wav_root: Path) -> dict[str, Path]:
        """Every utterance's file under ``wav_root``; the first one missing is a one-line error.

        Returns
        -------
        dict
            Relative path (as in the list) → the file.
        """
        files: dict[str, Path] = {}
        for left, right, line in zip(self.left, self.right, self.lines, strict=True):
            for name in (left, right):
                if name in files:
                    continue
                file = wav_root / name
                if not file.is_file():
                    raise DatasetError(
                        f"{self.path}: line {line}: {name} is not under the wav root {wav_root}"
                    )
                files[name] = file
        return files


def _relative(name: str) -> bool:
    """A path relative to the wav root that cannot leave it (no absolute path, no ``..``)."""
    parts = name.replace("\\", "/").split("/")
    return not name.startswith(("/", "\\")) and ".." not in parts and ":" not in parts[0]


def read_trial_list(path: str | Path) -> TrialList:
    """Read a trial list in the official VoxCeleb1 format (``LABEL PATH1 PATH2`` a line).

    Blank lines are skipped; any other line must be exactly three fields separated by white
    space, the label ``0`` or ``1`` and two relative paths.

    Parameters
    ----------
    path : str or Path
        The list (e.g. the user's ``veri_test2.txt``).

    Returns
    -------
    TrialList
        The trials, in file order.

    Raises
    ------
    DatasetError
        No such file, a file that is not UTF-8 text, a malformed line (its number is given), or
        a list with no trial or with no trial of one kind (no EER can be computed).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise DatasetError(f"trial list {path} not found (give your local copy with --trials)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise DatasetError(f"trial list {path} cannot be read as text ({error})") from None
    labels: list[int] = []
    left: list[str] = []
    right: list[str] = []
    lines: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 3 or fields[0] not in ("0", "1"):
            raise DatasetError(
                f"{path}: line {number}: expected 'LABEL PATH1 PATH2' with LABEL 0 or 1, "
                f"got {line.strip()[:80]!r}"
            )
        for name in fields[1:]:
            if not _relative(name):
                raise DatasetError(
                    f"{path}: line {number}: {name!r} must be a path relative to the wav root"
                )
        labels.append(int(fields[0]))
        left.append(fields[1])
        right.append(fields[2])
        lines.append(number)
    if not labels:
        raise DatasetError(f"{path}: no trial in the list")
    array = np.asarray(labels, dtype=np.int8)
    if array.min() == array.max():
        kind = "different-speaker (0)" if array[0] == 1 else "same-speaker (1)"
        raise DatasetError(f"{path}: the list has no {kind} trial, so no EER")
    return TrialList(path, array, tuple(left), tuple(right), tuple(lines))


def resolve_wav_root(root: str | Path) -> Path:
    """The folder the list's paths are relative to: ``root/wav`` when there is one (``root`` is
    the VoxCeleb1 root that ``--root`` names for the ``voxceleb1`` dataset), else ``root``.

    Raises
    ------
    DatasetError
        ``root`` is not a folder.
    """
    root = Path(root).expanduser()
    if (root / "wav").is_dir():
        return (root / "wav").resolve()
    if not root.is_dir():
        raise DatasetError(f"wav root {root} is not a folder (give your VoxCeleb1 copy's wav/)")
    return root.resolve()
