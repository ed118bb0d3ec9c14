"""Every preset reads its paper's data protocol from a copy in the dataset's official layout, given
nothing but ``--root`` (issue 35).

Fake copies are written here at the papers' numbers of identities, each sample an empty file (or
an all-zero image), and checked through what ``uvtrain run --preset NAME --root DIR`` does before
it decodes anything (:func:`uvtrain.run.plan_data`: the same config resolution, corpus index and
choice as :func:`uvtrain.run.load_data`). Two presets then run end to end for one round on tiny
real copies. The papers' numbers are transcribed here from the paper texts (../shared/papers),
independently of ``uvtrain/presets.py``.
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from uvtrain.cli import app
from uvtrain.config import resolve
from uvtrain.data.base import ClientData, FederatedDataset
from uvtrain.data.corpora import MNIST_UV_DIGITS, stack_split
from uvtrain.data.protocol import Plan
from uvtrain.run import plan_data

runner = CliRunner()

# FedUV Sec. 6.1: VoxCeleb "1,000 speakers ... 25 training, 10 validation and 10 test examples
# ... 5 utterances from 200 of the remaining speakers"; CelebA "1,000 identities from those who
# had at least 30 images ... 20, 5 and 5 ... 1,000 images from individuals that were not selected
# for training (one example per person)"; MNIST-UV "1,000 writers each with 50 training, 15
# validation, and 15 test examples ... 1,000 examples from writers that were not selected for
# training (one example per writer)".
FEDUV = {
    "feduv-voxceleb": (1000, (25, 10, 10), 200, 5),
    "feduv-celeba": (1000, (20, 5, 5), 1000, 1),
    "feduv-mnistuv": (1000, (50, 15, 15), 1000, 1),
}
# FedHide Sec. 4.1 and Table 1: CIFAR-100 "100 clients, each with 500 images from the same class.
# The remaining 100 images per class are reserved for testing" (validation: "100 seen clients");
# VoxCeleb1 "Following the standard split, we employ 1,211 clients ... The remaining 40
# speakers"; VGGFace2 "8,631 clients for training ... The remaining 500 users".
CIFAR_CLIENTS, CIFAR_TRAIN, CIFAR_TEST = 100, 500, 100
VOXCELEB1_SPEAKERS, VOXCELEB1_DEVELOPMENT = 1251, 1211
VOXCELEB1_TEST = {f"id{number}" for number in range(10270, 10310)}  # the official test speakers
VGGFACE2_TRAIN, VGGFACE2_TEST = 8631, 500


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    """A folder for the module's fake copies: in memory where the machine has /dev/shm (tens of
    thousands of empty files are written and read)."""
    memory = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=memory) as name:
        yield Path(name)


@pytest.fixture(autouse=True)
def _data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cache goes to a fresh folder, never the developer's cache."""
    monkeypatch.setenv("UVTRAIN_DATA", str(tmp_path / "uvtrain-data"))


def touch(folder: Path, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        os.close(os.open(folder / name, os.O_CREAT | os.O_WRONLY))


def preset_plan(name: str, root: Path) -> tuple[Plan, int]:
    """The plan and the client count of ``uvtrain run --preset NAME --root ROOT``."""
    config = resolve({"root": str(root)}, preset=name, parameters_only=True)
    return plan_data(config), config.data.clients


def split_sizes(plan: Plan) -> set[tuple[int, int, int]]:
    return {tuple(len(part) for part in parts) for parts in plan.known.values()}


@pytest.fixture(scope="module")
def voxceleb1(folder: Path) -> Path:
    """VoxCeleb1's ``wav/idXXXXX/<video>/<n>.wav``: 1,251 speakers id10001-id11251; 1,000 of
    the development speakers with 45 utterances, the other 251 (the 40 test speakers among
    them) with 5."""
    root = folder / "voxceleb1"
    speakers = [f"id{10001 + number}" for number in range(VOXCELEB1_SPEAKERS)]
    development = [name for name in speakers if name not in VOXCELEB1_TEST]
    many = set(development[:1000])
    for name in speakers:
        touch(
            root / "wav" / name / "video",
            [f"{n:05d}.wav" for n in range(45 if name in many else 5)],
        )
    return root


def test_feduv_voxceleb_is_sec_6_1(voxceleb1: Path) -> None:
    plan, clients = preset_plan("feduv-voxceleb", voxceleb1)
    identities, split, unknown, unknown_samples = FEDUV["feduv-voxceleb"]
    assert len(plan.known) == clients == identities and split_sizes(plan) == {split}
    assert len(plan.unknown) == unknown and not set(plan.unknown) & set(plan.known)
    assert {len(items) for items in plan.unknown.values()} == {unknown_samples}
    for name, parts in plan.known.items():  # a speaker's own files, each in one split
        files = [path for part in parts for path in part]
        assert len(set(files)) == sum(split) and {path.parent.parent.name for path in files} == {
            name
        }


def test_fedhide_voxceleb1_is_the_standard_split(voxceleb1: Path) -> None:
    plan, clients = preset_plan("fedhide-voxceleb1", voxceleb1)
    assert len(plan.known) == clients == VOXCELEB1_DEVELOPMENT
    assert not set(plan.known) & VOXCELEB1_TEST and set(plan.unknown) == VOXCELEB1_TEST
    assert {len(items) for items in plan.unknown.values()} == {5}  # all of each test speaker's
    assert {sum(sizes) for sizes in split_sizes(plan)} == {5, 45}  # every utterance


def test_feduv_celeba_is_sec_6_1(folder: Path) -> None:
    """1,000 identities with 30 images, 1,000 with 29 (too few to train: unknown ones only)."""
    root = folder / "celeba"
    (root / "Img" / "img_align_celeba").mkdir(parents=True)
    lines, image = [], 0
    for identity in range(1, 2001):
        for _ in range(30 if identity <= 1000 else 29):
            image += 1
            lines.append(f"{image:06d}.jpg {identity}")
    (root / "Anno").mkdir()
    (root / "Anno" / "identity_CelebA.txt").write_text("\n".join(lines) + "\n")
    plan, clients = preset_plan("feduv-celeba", root)
    identities, split, unknown, unknown_samples = FEDUV["feduv-celeba"]
    assert len(plan.known) == clients == identities and split_sizes(plan) == {split}
    assert set(plan.known) == {str(identity) for identity in range(1, 1001)}
    assert len(plan.unknown) == unknown and not set(plan.unknown) & set(plan.known)
    assert {len(items) for items in plan.unknown.values()} == {unknown_samples}


def leaf_writer(counts: dict[int, int]) -> str:
    """One LEAF FEMNIST writer's record: ``counts[digit]`` blank 28x28 images of each digit."""
    labels = [digit for digit, count in counts.items() for _ in range(count)]
    blank = "[" + ",".join(["1"] * 784) + "]"
    return f'{{"x": [{",".join([blank] * len(labels))}], "y": {json.dumps(labels)}}}'


def test_feduv_mnistuv_is_sec_6_1(folder: Path) -> None:
    """1,000 writers with 8 images of each digit 2-5 (enough for 50/15/15 distinct combinations
    in disjoint images) and 1,000 with one of each (one example: unknown only)."""
    root = folder / "femnist"
    (root / "train").mkdir(parents=True)
    rich, poor = (
        leaf_writer(dict.fromkeys(MNIST_UV_DIGITS, 8)),
        leaf_writer({2: 1, 3: 1, 4: 1, 5: 1, 7: 2}),
    )
    writers = {f"f{n:04d}": rich if n < 1000 else poor for n in range(2000)}
    records = ",".join(f'"{name}": {record}' for name, record in writers.items())
    (root / "train" / "all_data_0.json").write_text(
        f'{{"users": {json.dumps(list(writers))}, "user_data": {{{records}}}}}'
    )
    plan, clients = preset_plan("feduv-mnistuv", root)
    identities, split, unknown, unknown_samples = FEDUV["feduv-mnistuv"]
    assert len(plan.known) == clients == identities and split_sizes(plan) == {split}
    assert set(plan.known) == {f"f{n:04d}" for n in range(1000)}
    assert len(plan.unknown) == unknown and not set(plan.unknown) & set(plan.known)
    assert {len(items) for items in plan.unknown.values()} == {unknown_samples}


def test_mnist_uv_examples_share_no_image_across_splits() -> None:
    """FedUV Sec. 6.1: "the training examples are unique; however, the same sub-image ... might
    appear in several examples ... The sub images are, however, not shared between training,
    validation, and test sets"."""
    per_digit = {
        digit: [np.full((28, 28), 10 * digit + n, np.uint8) for n in range(8)]
        for digit in MNIST_UV_DIGITS
    }
    splits = stack_split(per_digit, MNIST_UV_DIGITS, (50, 15, 15), np.random.default_rng(0))
    assert [len(part) for part in splits] == [50, 15, 15]
    used = []
    for part in splits:
        combinations = {tuple(example[0, 0]) for example in part}
        assert len(combinations) == len(part)  # unique examples
        used.append({(channel, value) for c in combinations for channel, value in enumerate(c)})
    assert not used[0] & used[1] and not used[0] & used[2] and not used[1] & used[2]


def test_fedhide_cifar100_is_table_1(folder: Path) -> None:
    """CIFAR-100's python pickles: 500 training and 100 test images of each of 100 classes."""
    data = folder / "cifar100" / "cifar-100-python"
    data.mkdir(parents=True)
    for part, count in (("train", CIFAR_TRAIN), ("test", CIFAR_TEST)):
        labels = [label for label in range(CIFAR_CLIENTS) for _ in range(count)]
        pixels = np.zeros((len(labels), 3072), np.uint8)
        record = {b"data": pixels, b"fine_labels": labels}
        (data / part).write_bytes(pickle.dumps(record, protocol=2))
    names = [f"class{label:02d}".encode() for label in range(CIFAR_CLIENTS)]
    (data / "meta").write_bytes(pickle.dumps({b"fine_label_names": names}, protocol=2))
    plan, clients = preset_plan("fedhide-cifar100", data.parent)
    assert len(plan.known) == clients == CIFAR_CLIENTS and not plan.unknown  # all seen clients
    training_rows = CIFAR_TRAIN * CIFAR_CLIENTS  # the train pickle's rows come first
    for train, val, test in plan.known.values():
        assert len(train) + len(val) == CIFAR_TRAIN and len(val) >= 1
        assert max(train + val) < training_rows <= min(test) and len(test) == CIFAR_TEST


def test_fedhide_vggface2_is_the_standard_split(folder: Path) -> None:
    root = folder / "vggface2"
    train = [f"n{number:06d}" for number in range(VGGFACE2_TRAIN)]
    test = [f"n{number:06d}" for number in range(VGGFACE2_TRAIN, VGGFACE2_TRAIN + VGGFACE2_TEST)]
    for name in train:
        touch(root / "train" / name, ["0001_01.jpg", "0002_01.jpg", "0003_01.jpg"])
    for name in test:
        touch(root / "test" / name, ["0001_01.jpg"])
    plan, clients = preset_plan("fedhide-vggface2", root)
    assert clients == VGGFACE2_TRAIN and set(plan.known) == set(train)
    assert set(plan.unknown) == set(test) and split_sizes(plan) == {(1, 1, 1)}


def test_a_copy_too_small_for_the_protocol_and_bad_keys_are_one_line(folder: Path) -> None:
    root = folder / "small-celeba"
    (root / "Img" / "img_align_celeba").mkdir(parents=True)
    (root / "Anno").mkdir()
    lines = [f"{n:06d}.jpg {1 + n % 4}" for n in range(40)]
    (root / "Anno" / "identity_CelebA.txt").write_text("\n".join(lines))
    with pytest.raises(
        Exception, match="1000 identities with at least 30 samples asked, the copy has 0"
    ):
        preset_plan("feduv-celeba", root)
    for flags, message in (
        (["--samples-per-split", "25,10"], "samples_per_split must be three counts"),
        (["--samples-per-split", "0,1,1"], "train >= 1"),
        (["--unknown-samples", "0"], "unknown_samples must be at least 1"),
        (["--identities", "1"], "identities must be at least 2"),
    ):
        result = runner.invoke(app, ["run", "--preset", "feduv-celeba", "--dry-run", *flags])
        assert result.exit_code == 2 and message in result.output
        assert len(result.output.strip().splitlines()) == 1
    result = runner.invoke(
        app, ["data", "build", "celeba", "--root", str(root), "--identities", "9"]
    )
    assert result.exit_code == 2 and "9 identities with at least 3 samples asked" in result.output
    result = runner.invoke(app, ["data", "build", "formant-voices", "--identities", "9"])
    assert result.exit_code == 2 and "not from a generated set" in result.output


def write_jpg(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(path)


def test_feduv_celeba_runs_end_to_end_from_root(folder: Path, tmp_path: Path) -> None:
    """``uvtrain run --preset feduv-celeba --root DIR`` on a real (tiny) CelebA copy, one round;
    the data keys shrink the paper's 1,000 x 20/5/5 to 4 x 2/1/1 and the schedule to one round of
    two clients."""
    root = tmp_path / "celeba"
    lines = []
    for image in range(27):  # identities 1-6 with 4 images, 7-9 with 1
        identity = 1 + image // 4 if image < 24 else 7 + image - 24
        write_jpg(root / "Img" / "img_align_celeba" / f"{image:06d}.jpg", 9 * image)
        lines.append(f"{image:06d}.jpg {identity}")
    (root / "Anno").mkdir()
    (root / "Anno" / "identity_CelebA.txt").write_text("\n".join(lines))
    out = tmp_path / "run"
    small = "--identities 4 --samples-per-split 2,1,1 --unknown-identities 3 --clients 4"
    schedule = "--rounds 1 --fraction 0.5 --local-epochs 1"
    arguments = ["run", "--preset", "feduv-celeba", "--root", str(root), "--out", str(out)]
    result = runner.invoke(app, [*arguments, *small.split(), *schedule.split()])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["clients"] == 4 and report["unknown_identities"] == 3
    assert report["config"]["samples_per_split"] == "2,1,1"


def party(name: str, people: int, seed: int) -> FederatedDataset:
    rng = np.random.default_rng(seed)

    def person(index: int) -> ClientData:
        faces = rng.integers(0, 256, (4, 112, 112, 3), dtype=np.uint8)
        return ClientData(f"p{index}", faces[:2], faces[2:3], faces[3:])

    spec = {"height": 112, "width": 112, "channels": 3}
    clients = [person(index) for index in range(people)]
    unknown = [person(people + index) for index in range(4)]
    return FederatedDataset(name, "image", spec, clients, unknown)


def test_fedface_runs_end_to_end_from_root(tmp_path: Path) -> None:
    """``uvtrain run --preset fedface-3party --root DIR``: DIR holds the three parties' files
    (Sec. 4.1: MS1M, GA, VGG at 112x112), tiny; one round of one local step of batch 2, on the
    small IR (the preset's IR-18 takes half a minute of CPU here)."""
    files = ("ms1mv2-112.npz", "asian-deepglint-112.npz", "vggface2-112.npz")
    for seed, name in enumerate(files):
        party(name.removesuffix("-112.npz"), 3, seed).save(tmp_path / "parties" / name)
    out = tmp_path / "run"
    arguments = ["run", "--preset", "fedface-3party", "--root", str(tmp_path / "parties")]
    schedule = "--rounds 1 --local-steps 1 --batch-size 2 --backbone ir-small"
    result = runner.invoke(app, [*arguments, "--out", str(out), *schedule.split()])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["clients"] == 9 and report["config"]["parties"] == 3


# -- FedHide Sec. 4.1's data preparation (issue 35, item 2) ---------------------------------------


def test_batches_without_lengths_are_drawn_as_before() -> None:
    """Runs without ``random_crop`` draw exactly the batches they drew before lengths existed
    (the first value of each window, recorded with the code before the change)."""
    from uvtrain.batches import draw_batches, epoch_batches

    samples = torch.arange(5 * 40, dtype=torch.float32).reshape(5, 40)
    drawn = draw_batches(samples, 2, 3, 8, np.random.default_rng(7))
    assert drawn[..., 0].long().tolist() == [[89, 148, 190], [120, 56, 107]]
    epochs = epoch_batches(samples, 1, 2, 8, np.random.default_rng(7))
    assert [batch[:, 0].long().tolist() for batch in epochs] == [[99, 25], [187, 47], [121]]


def test_random_crops_stay_inside_each_utterance_and_change_at_every_draw() -> None:
    """Sec. 4.1: "we randomly crop a 2-second temporal segment from each utterance": row r holds
    r * 1000 + t for t below its length, then padding (-1) that no crop may reach."""
    from uvtrain.batches import draw_batches, epoch_batches

    lengths = np.array([8, 12, 20, 40])
    rows = np.full((4, 40), -1.0, np.float32)
    for row, length in enumerate(lengths):
        rows[row, :length] = row * 1000 + np.arange(length)
    samples = torch.as_tensor(rows)
    rng = np.random.default_rng(0)
    starts: dict[int, set[int]] = {row: set() for row in range(4)}
    for _ in range(3):
        batches = [draw_batches(samples, 5, 4, 8, rng, lengths)]
        batches += epoch_batches(samples, 2, 3, 8, rng, lengths)
        for window in torch.cat([batch.reshape(-1, 8) for batch in batches]):
            row, start = divmod(int(window[0]), 1000)
            assert torch.equal(window, samples[row, start : start + 8])  # a piece of it, no pad
            starts[row].add(start)
    assert starts[0] == {0}  # no longer than a crop: the whole of it
    assert len(starts[2]) > 3 and len(starts[3]) > 5 and max(starts[3]) > 12  # fresh crops


def write_wav(path: Path, seconds: float, value: float) -> None:
    import soundfile

    path.parent.mkdir(parents=True, exist_ok=True)
    steps = np.arange(round(seconds * 16000))
    signal = value * np.sin(steps / 7.0) + 1e-4 * steps / steps.size
    soundfile.write(path, signal.astype(np.float32), 16000, subtype="PCM_16")


def test_fedhide_voxceleb1_keeps_training_utterances_whole(tmp_path: Path) -> None:
    """The preset's ``random_crop``: training utterances whole up to 6 s (lengths 3, 4.5 and the
    centre 6 s of 7 s), evaluation utterances and the unknown speakers' the centre 2 s, exactly as
    without it."""
    from uvtrain.data.corpora import voxceleb1
    from uvtrain.data.protocol import DataProtocol

    root = tmp_path / "voxceleb1"
    for speaker, name in enumerate(["id10001", "id10002", "id10270"]):
        for number, seconds in enumerate([3.0, 4.5, 7.0, 2.5, 3.5]):
            write_wav(root / "wav" / name / "v" / f"{number:05d}.wav", seconds, 0.1 + speaker / 10)
    config = resolve({"root": str(root)}, preset="fedhide-voxceleb1", parameters_only=True)
    assert config.data.random_crop and config.data.crop_seconds == 2.0
    assert not resolve({}, preset="fedhide-cifar100", parameters_only=True).data.random_crop
    protocol = DataProtocol.from_keys(2, None, "3,1,1", None, True)
    whole = voxceleb1(root, whole_seconds=6.0, protocol=protocol, progress=False)
    clipped = voxceleb1(root, protocol=protocol, progress=False)
    pairs = zip(whole.clients + whole.unknown, clipped.clients + clipped.unknown, strict=True)
    for mine, centre in pairs:
        np.testing.assert_array_equal(mine.val, centre.val)
        np.testing.assert_array_equal(mine.test, centre.test)
    assert [c.identity for c in whole.unknown] == ["id10270"] and whole.unknown[0].lengths is None
    np.testing.assert_array_equal(whole.unknown[0].train, clipped.unknown[0].train)
    for client in whole.clients:
        assert client.train.shape == (3, 96000) and client.val.shape == (1, 32000)
        assert set(client.lengths.tolist()) <= {48000, 56000, 72000, 96000}
        for row, length in zip(client.train, client.lengths, strict=True):
            assert np.all(row[length:] == 0) and np.any(row[length - 100 : length] != 0)
    loaded = FederatedDataset.load(whole.save(tmp_path / "whole.npz"))
    np.testing.assert_array_equal(loaded.clients[1].lengths, whole.clients[1].lengths)
    with pytest.raises(Exception, match="needs a data protocol"):
        voxceleb1(root, whole_seconds=6.0, progress=False)
    result = runner.invoke(
        app, ["run", "--method", "fedhide", "--dataset", "cifar-100", "--random-crop", "--dry-run"]
    )
    assert result.exit_code == 2 and "random_crop applies to voxceleb1" in result.output


def test_fedhide_voxceleb1_simulation_draws_random_crops_from_root(tmp_path: Path) -> None:
    """What ``uvtrain run --preset fedhide-voxceleb1 --root DIR`` trains on (a tiny real copy, a
    small backbone): the simulation holds the whole utterances with their lengths and every
    batch sample is a 2-s piece of one of them, starting anywhere in it."""
    from uvtrain.run import load_data, make_simulation

    root = tmp_path / "voxceleb1"
    for speaker, name in enumerate(["id10001", "id10002", "id10270"]):
        for number, seconds in enumerate([3.0, 4.5, 2.5, 3.5, 2.2]):
            write_wav(root / "wav" / name / "v" / f"{number:05d}.wav", seconds, 0.1 + speaker / 10)
    config = resolve(
        {"root": str(root), "samples_per_split": "3,1,1", "identities": 2, "clients": 2,
         "backbone": "voxceleb-conv1d", "device": "cpu"},
        preset="fedhide-voxceleb1",
    )  # fmt: skip
    simulation = make_simulation(config, load_data(config))
    starts = set()
    for round_number in range(1, 4):
        clients = simulation.clients_of_round(round_number)
        batches = simulation.batches_of_round(round_number, clients)
        assert batches.shape[-1] == 32000
        for position, client in enumerate(clients):
            rows, lengths = simulation.data[client].numpy(), simulation.lengths[client]
            for window in batches[position].reshape(-1, 32000).numpy():
                found = [
                    (row, start)
                    for row in range(len(rows))
                    for start in np.flatnonzero(rows[row, : lengths[row] - 32000 + 1] == window[0])
                    if np.array_equal(rows[row, start : start + 32000], window)
                ]
                assert found, "a crop that is not a piece of one of the client's utterances"
                starts.add(found[0][1])
    assert len(starts) > 5


def test_rotate_images_flips_and_turns_about_the_centre() -> None:
    """Plain-torch flips and rotations (torchvision does not load beside our torch): a flip
    mirrors left-right, a quarter turn is ``rot90`` anticlockwise, 0 degrees changes nothing,
    and a small turn leaves the centre where it was and blackens the corners."""
    from uvtrain.batches import rotate_images

    images = torch.randint(1, 256, (2, 3, 8, 8, 3), dtype=torch.uint8)  # any leading dimensions
    same = rotate_images(images, np.zeros(6), np.zeros(6, bool))
    assert torch.equal(same, images)
    flips = np.array([True, False] * 3)
    mirrored = rotate_images(images, np.zeros(6), flips).reshape(6, 8, 8, 3)
    flat = images.reshape(6, 8, 8, 3)
    assert torch.equal(mirrored[0], flat[0].flip(1)) and torch.equal(mirrored[1], flat[1])
    turned = rotate_images(images, np.full(6, 90.0), np.zeros(6, bool)).reshape(6, 8, 8, 3)
    assert torch.equal(turned, torch.rot90(flat, 1, dims=(1, 2)))  # anticlockwise, rows down
    tilted = rotate_images(images, np.full(6, 30.0), np.zeros(6, bool)).reshape(6, 8, 8, 3)
    assert torch.equal(tilted[:, 3:5, 3:5], flat[:, 3:5, 3:5]) and (tilted[:, 0, 0] == 0).all()


def test_fedhide_cifar100_augments_training_batches_only() -> None:
    """The preset's ``augment``: every training image of a batch is a flip and rotation of a
    client's image, drawn afresh each round; off (the default), the batches are the images as
    stored; evaluation embeds the stored images."""
    from uvtrain.algorithms import FedHide
    from uvtrain.batches import flip_and_rotate
    from uvtrain.engine import EngineConfig, Simulation
    from uvtrain.models import build_backbone

    config = resolve({"dataset": "cifar-100"}, preset="fedhide-cifar100", parameters_only=True)
    assert config.data.augment
    assert not resolve({}, preset="fedhide-vggface2", parameters_only=True).data.augment
    rng = np.random.default_rng(0)
    data = [rng.integers(0, 256, (3, 8, 8, 3), dtype=np.uint8) for _ in range(4)]
    spec = {"height": 8, "width": 8, "channels": 3}

    def simulation(augment: bool) -> Simulation:
        schedule = EngineConfig(fraction=0.5, batch_size=3, seed=2, augment=augment)
        torch.manual_seed(0)
        return Simulation(FedHide(), build_backbone("celeba-conv2d", spec), data, schedule)

    plain, augmented = simulation(False), simulation(True)
    clients = plain.clients_of_round(1)
    stored = plain.batches_of_round(1, clients)
    rng = np.random.default_rng([2, 1, 1])
    for _ in clients:  # the draws of the plain batches, then the augmentation's
        rng.choice(3, size=3, replace=False)
    expected = flip_and_rotate(stored, rng)
    assert torch.equal(augmented.batches_of_round(1, clients), expected)
    assert not torch.equal(expected, stored)
    assert not torch.equal(augmented.batches_of_round(2, clients), stored)
    rows = {tuple(image.flatten().tolist()) for client in data for image in client}
    assert all(tuple(image.flatten().tolist()) in rows for image in stored.reshape(-1, 8, 8, 3))
    np.testing.assert_array_equal(augmented.outputs(data[0]), plain.outputs(data[0]))


def test_vggface2_cuts_each_image_to_its_official_loose_box(tmp_path: Path) -> None:
    """Without ``detect_faces`` (MTCNN: tests/trainer/test_mtcnn.py), VGGFace2's own loose boxes
    (``bb_landmark/loose_bb_*.csv``) cut the faces. Each 48x48 image is grey with a 16x24 "face" of
    its own colour: cut to the box, the 8x8 sample is the face's colour; without the files the
    image is resized whole (grey at the corners)."""
    from uvtrain.data.corpora import vggface2
    from uvtrain.data.protocol import DataProtocol

    root = tmp_path / "vggface2"
    rows = {"train": ["NAME_ID,X,Y,W,H"], "test": ["NAME_ID,X,Y,W,H"]}
    faces = {}
    for number in range(4):
        part, name = ("train" if number < 3 else "test"), f"n{number:06d}"
        for image in range(3):
            pixels = np.full((48, 48, 3), 128, np.uint8)
            colour = (40 * number + 20, 200 - 30 * image, 60 * image)
            left, top = 4 + 8 * image, 6 + 4 * number
            pixels[top : top + 24, left : left + 16] = colour
            path = root / part / name / f"{image + 1:04d}_01.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels).save(path, quality=100)
            rows[part].append(f"{name}/{image + 1:04d}_01,{left + 2},{top + 3},12,18")
            faces[(name, image)] = colour
    protocol = DataProtocol.from_keys(None, None, "1,1,1", None, True)
    whole = vggface2(root, height=8, width=8, protocol=protocol, progress=False)
    assert whole.extra["face_boxes"] == "none" and np.all(whole.clients[0].train[0, 0, 0] > 110)
    (root / "bb_landmark").mkdir()
    for part, lines in rows.items():
        (root / "bb_landmark" / f"loose_bb_{part}.csv").write_text("\n".join(lines) + "\n")
    cut = vggface2(root, height=8, width=8, protocol=protocol, progress=False)
    assert (
        cut.extra["face_boxes"] == "bb_landmark/loose_bb" and cut.unknown[0].identity == "n000003"
    )
    colours = {colour for colour in faces.values()}
    for person in cut.clients + cut.unknown:
        for sample in np.concatenate([person.train, person.val, person.test]):
            mean = sample.reshape(-1, 3).mean(0)
            assert min(np.abs(mean - colour).max() for colour in colours) < 6
            assert np.ptp(sample.reshape(-1, 3), axis=0).max() < 16  # the face alone, uniform
    (root / "bb_landmark" / "loose_bb_test.csv").write_text("NAME_ID,X,Y,W,H\nn000003/0001_01,a\n")
    with pytest.raises(Exception, match="loose_bb_test.csv line 2 is not NAME_ID,X,Y,W,H"):
        vggface2(root, height=8, width=8, protocol=protocol, progress=False)
