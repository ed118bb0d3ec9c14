"""CelebA (:mod:`uvtrain.data.corpora`). Layout read: ``root/Img/img_align_celeba/*.jpg`` +
``root/Anno/identity_CelebA.txt`` (Liu et al., 2015).
"""

from __future__ import annotations

from pathlib import Path

from ..base import UNKNOWN_FRACTION, DatasetError, FederatedDataset
from ..protocol import DataProtocol
from .common import (
    Selection,
    Sources,
    _file,
    _folder,
    _images,
)

CELEBA_LICENCE = "CelebA (non-commercial research use only)"
CELEBA_LAYOUT = "ROOT/Img/img_align_celeba/*.jpg + ROOT/Anno/identity_CelebA.txt"


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
        selection=Selection.of(locals()),
    )
