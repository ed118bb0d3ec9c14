"""The stream folder (uvtrain.data.stream): written and read back as the same dataset, every array
memory-mapped; a malformed folder refused in one line; a simulation and a run from it train
exactly as from the dataset in memory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from typer.testing import CliRunner  # noqa: E402

from tests.trainer.test_datasets import same  # noqa: E402
from tests.trainer.test_engine import TinyBackbone, _clients  # noqa: E402
from uvtrain.algorithms import FedHide, FedUV  # noqa: E402
from uvtrain.batches import HostSamples  # noqa: E402
from uvtrain.cli import app  # noqa: E402
from uvtrain.data.base import ClientData, DatasetError, FederatedDataset  # noqa: E402
from uvtrain.data.registry import build_dataset, load_dataset  # noqa: E402
from uvtrain.data.stream import open_dataset, read_stream_folder, write_stream_folder  # noqa: E402
from uvtrain.engine import EngineConfig, Simulation  # noqa: E402
from uvtrain.evaluation.scoring import JoinedRows  # noqa: E402

SPEC = {"sample_rate": 800, "window_seconds": 1.0, "hop_seconds": 0.5, "min_seconds": 0.5}


def tiny_dataset(with_lengths: bool = True) -> FederatedDataset:
    """Ten clients of six 800-step samples (the engine tests' data), the first half with the
    signal lengths of utterances kept whole, and two unknown identities."""
    arrays = _clients(12)
    rng = np.random.default_rng(1)

    def lengths(count: int, client: int) -> np.ndarray | None:
        if not with_lengths or client >= 5:
            return None
        return rng.integers(600, 801, count).astype(np.int64)

    people = [
        ClientData(f"id{client}", samples[:4], samples[4:5], samples[5:], lengths(4, client))
        for client, samples in enumerate(arrays)
    ]
    return FederatedDataset("tiny", "audio", SPEC, people[:10], people[10:], "test", {"k": [1]})


def test_a_stream_folder_reads_back_the_same_dataset_memory_mapped(tmp_path: Path) -> None:
    dataset = tiny_dataset()
    folder = write_stream_folder(dataset, tmp_path / "tiny.stream")
    loaded = open_dataset(folder)
    assert same(dataset, loaded) and loaded.streamed and not dataset.streamed
    assert (loaded.name, loaded.modality, loaded.spec, loaded.licence, loaded.extra) == (
        "tiny", "audio", SPEC, "test", {"k": [1]},
    )  # fmt: skip
    people = zip(dataset.clients + dataset.unknown, loaded.clients + loaded.unknown, strict=True)
    for mine, theirs in people:
        for split in ("train", "val", "test"):
            assert isinstance(getattr(theirs, split), np.memmap)  # nothing read yet
        if mine.lengths is None:
            assert theirs.lengths is None
        else:
            assert isinstance(theirs.lengths, np.memmap)
            assert np.array_equal(mine.lengths, theirs.lengths)
    assert [name for name in tmp_path.iterdir()] == [folder]  # no staging folder left
    smaller = FederatedDataset("tiny", "audio", SPEC, dataset.clients[:2], [])
    write_stream_folder(smaller, folder)  # replaces the earlier one
    again = read_stream_folder(folder)
    assert same(smaller, again) and again.unknown == []


def test_samples_of_several_dtypes_cannot_make_one_stream_folder(tmp_path: Path) -> None:
    dataset = tiny_dataset(with_lengths=False)
    odd = ClientData("odd", np.zeros((2, 800), np.float64), np.zeros((0, 800)), np.zeros((0, 800)))
    mixed = FederatedDataset("mixed", "audio", SPEC, [*dataset.clients, odd], [])
    with pytest.raises(DatasetError, match="'odd' train is float64"):
        write_stream_folder(mixed, tmp_path / "mixed")
    assert not (tmp_path / "mixed").exists()


def _break(folder: Path, kind: str) -> None:
    index_path = folder / "index.json"
    index = json.loads(index_path.read_text())
    if kind == "no-index":
        index_path.unlink()
    elif kind == "not-json":
        index_path.write_text("{")
    elif kind == "other-format":
        index["format"] = "uvtrain-stream-0"
    elif kind == "no-meta":
        del index["meta"]
    elif kind == "missing-array":
        (folder / "clients-val.npy").unlink()
    elif kind == "offsets":
        index["groups"]["clients"]["rows"]["train"][3] = 1
    elif kind == "rows":
        index["groups"]["clients"]["rows"]["test"][-1] += 1
    elif kind == "garbage-array":
        (folder / "clients-train.npy").write_bytes(b"\x80\x04K\x01." + b"garbage" * 50)
    elif kind == "dtype":
        np.save(folder / "unknown-test.npy", np.zeros((2, 800), np.float64))
    if kind in ("other-format", "no-meta", "offsets", "rows"):
        index_path.write_text(json.dumps(index))
    # issue 46: what Python's json module turned into an OverflowError or RecursionError
    text = json.dumps(index)
    offsets = json.dumps(index["groups"]["clients"]["rows"]["train"])
    if kind == "infinity":
        index_path.write_text(text.replace(offsets, "[0, Infinity" + offsets[2:]))
    elif kind == "huge-float":
        index_path.write_text(text.replace(offsets, "[0, 1e999" + offsets[2:]))
    elif kind == "nested":
        index_path.write_text(text.replace(offsets, "[" * 100_000 + "]" * 100_000))
    elif kind == "long-number":
        index_path.write_text(text.replace(offsets, "[0, " + "7" * 5000 + offsets[2:]))


MALFORMED = {
    "no-index": "not a stream folder (no index.json in it)",
    "not-json": "not a readable index",
    "other-format": "format 'uvtrain-stream-0', not 'uvtrain-stream-2'",
    "no-meta": "not a stream folder (index.json has no 'meta')",
    "missing-array": "not a complete stream folder (no clients-val.npy)",
    "offsets": "the index's clients train offsets are malformed",
    "rows": "clients-test.npy has 10 rows, the index 11",
    "garbage-array": "not a readable array",
    "dtype": "float64 (800,), the index says float32 (800,)",
    "infinity": "not a readable index (a number that is not finite (inf; not JSON))",
    "huge-float": "not a readable index (a number that is not finite (inf; not JSON))",
    "nested": "not a readable index (nested deeper than 64 levels)",
    "long-number": "not a readable index (a number of 5000 characters, more than the 64",
}


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_a_malformed_stream_folder_is_one_line_exit_2(tmp_path: Path, kind: str) -> None:
    folder = write_stream_folder(tiny_dataset(), tmp_path / "tiny.stream")
    _break(folder, kind)
    with pytest.raises(DatasetError, match=MALFORMED[kind].replace("(", r"\(").replace(")", r"\)")):
        open_dataset(folder)
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app, ["run", "--method", "feduv", "--dataset", str(folder), "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        line for line in result.stderr.strip().splitlines() if line.startswith("uvtrain: error: ")
    ]
    assert MALFORMED[kind] in result.stderr and not out.exists()


PATHS = {
    "batched": {"local_steps": 1},
    "vmap": {"local_steps": 2},
    "loop": {"local_steps": 2, "vectorised": False},
    "epochs": {"local_epochs": 2},
}


@pytest.mark.parametrize("path", list(PATHS))
def test_a_simulation_from_a_stream_folder_trains_as_from_memory(tmp_path: Path, path: str) -> None:
    dataset = tiny_dataset()
    streamed = read_stream_folder(write_stream_folder(dataset, tmp_path / "tiny.stream"))
    algorithm = (
        FedHide(weight=10.0, alpha=0.1, neighbours=3)
        if path == "epochs"
        else FedUV(code_length=127)
    )
    config = EngineConfig(
        rounds=2, fraction=0.4, batch_size=3, lr=0.1, seed=3, crop=600, chunk_size=3,
        **PATHS[path],
    )  # fmt: skip
    states = []
    for source in (dataset, streamed):
        torch.manual_seed(0)
        simulation = Simulation(
            algorithm,
            TinyBackbone(),
            [client.train for client in source.clients],
            config,
            lengths=[client.lengths for client in source.clients],
        )
        assert simulation.streams == (source is streamed)
        assert all(isinstance(samples, HostSamples) for samples in simulation.data) == (
            source is streamed
        )
        for _ in range(2):
            simulation.step()
        states.append(simulation.state_dict())
    for group in ("params", "private"):
        assert states[0][group].keys() == states[1][group].keys()
        for name, value in states[0][group].items():
            assert torch.equal(value, states[1][group][name]), (group, name)
    assert states[0]["round"] == states[1]["round"] == 2


def test_a_dataset_name_finds_its_stream_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("UVTRAIN_DATA", str(tmp_path))
    build = ["data", "build", "formant-voices", "--speakers", "3", "--format", "stream"]
    result = CliRunner().invoke(app, build)
    assert result.exit_code == 0, result.output
    folder = next(tmp_path.glob("formant-voices-*.stream"))
    assert f"built formant-voices: {folder}" in result.stdout
    assert load_dataset("formant-voices", speakers=3).streamed  # no .npz: its stream folder
    build_dataset("formant-voices", speakers=3, progress=False)
    assert not load_dataset("formant-voices", speakers=3).streamed  # the .npz comes first
    refused = CliRunner().invoke(app, [*build[:-1], "zip"])
    assert refused.exit_code == 2 and "--format 'zip': one of npz, stream" in refused.stderr


def test_a_run_from_a_stream_folder_writes_the_same_checkpoint_and_scores(
    tmp_path: Path,
) -> None:
    npz = build_dataset("formant-voices", root=tmp_path, speakers=6, utterances=4, progress=False)
    folder = write_stream_folder(FederatedDataset.load(npz), tmp_path / "voices.stream")
    run = ["run", "--method", "feduv", "--fraction", "0.5", "--batch-size", "2", "--rounds", "2"]
    notes = {}
    for name, source in (("streamed", folder), ("memory", npz)):
        result = CliRunner().invoke(
            app, [*run, "--dataset", str(source), "--out", str(tmp_path / name)]
        )
        assert result.exit_code == 0, result.output
        notes[name] = result.stderr
    assert "data: formant-voices streamed from disk" in notes["streamed"]
    assert "data:" not in notes["memory"]  # in memory, as before stream folders
    states = [torch.load(tmp_path / name / "checkpoint.pt") for name in ("streamed", "memory")]
    for name, value in states[0]["params"].items():
        assert torch.equal(value, states[1]["params"][name]), name
    scores = [np.load(tmp_path / name / "scores.npz") for name in ("streamed", "memory")]
    assert scores[0].files == scores[1].files
    assert all(np.array_equal(scores[0][key], scores[1][key]) for key in scores[0].files)


def test_joined_rows_read_any_slice_of_the_arrays_as_one() -> None:
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=(count, 3)) for count in (2, 0, 5, 1, 3)]
    joined, whole = JoinedRows(arrays), np.concatenate(arrays)
    assert len(joined) == len(whole) == 11
    for start in range(12):
        for stop in range(start, 13):
            assert np.array_equal(joined[start:stop], whole[start:stop]), (start, stop)
    with pytest.raises(ValueError, match="contiguous"):
        joined[::2]


# -- Building a corpus straight into a stream folder (issue 35: larger than memory) ---------------


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh dataset cache for the test (never the developer's)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("UVTRAIN_DATA", str(folder))
    return folder


def same_files(first: Path, second: Path) -> bool:
    """Whether two folders hold the same file names with the same bytes."""
    names = sorted(path.name for path in first.iterdir())
    if names != sorted(path.name for path in second.iterdir()):
        return False
    return all((first / name).read_bytes() == (second / name).read_bytes() for name in names)


def test_a_corpus_streamed_into_its_folder_is_byte_identical_to_one_built_in_memory(
    tmp_path: Path, cache: Path
) -> None:
    """``uvtrain data build voxceleb1 --random-crop --format stream`` under a protocol: decoded
    identity by identity into the folder, it holds the bytes written from the dataset in memory
    (training utterances kept whole, evaluation clips shorter, unknown speakers); the same for
    VGGFace2 with its face boxes noted in ``extra``."""
    from tests.trainer.test_paper_data import write_jpg, write_wav
    from uvtrain.data.corpora import vggface2, voxceleb1
    from uvtrain.data.protocol import DataProtocol

    voices = tmp_path / "voxceleb1"
    for speaker, name in enumerate(["id10001", "id10002", "id10003", "id10270"]):
        for number, seconds in enumerate([3.0, 4.5, 7.0, 2.5, 3.5]):
            write_wav(
                voices / "wav" / name / "v" / f"{number:05d}.wav", seconds, 0.1 + speaker / 10
            )
    faces = tmp_path / "vggface2"
    for number in range(4):
        part = "train" if number < 3 else "test"
        for image in range(5):
            write_jpg(
                faces / part / f"n{number:06d}" / f"{image + 1:04d}_01.jpg", 60 * number + image
            )
    protocol = DataProtocol.from_keys(None, None, "3,1,1", None, True)
    arguments = {"protocol": protocol, "progress": False}
    cases = [
        ("voxceleb1", voices, voxceleb1, {"whole_seconds": 6.0}),
        ("vggface2", faces, vggface2, {"height": 8, "width": 8}),
    ]
    for name, root, loader, options in cases:
        folder = build_dataset(name, root=root, storage="stream", **arguments, **options)
        streamed = open_dataset(folder)
        in_memory = loader(root, **arguments, **options)
        assert not in_memory.streamed and streamed.streamed and same(in_memory, streamed)
        assert same_files(folder, write_stream_folder(in_memory, tmp_path / f"{name}.stream"))
        assert folder.parent == cache and not list(cache.glob(".*"))  # no staging folder left
    assert streamed.extra["face_boxes"] == "none"
    whole = read_stream_folder(build_dataset("voxceleb1", root=voices, storage="stream",
                                             whole_seconds=6.0, **arguments))  # fmt: skip
    assert whole.clients[0].train.shape == (3, 96000) and whole.clients[0].val.shape == (1, 32000)
    assert whole.unknown[0].train.shape == (5, 32000) and whole.clients[0].lengths is not None


def test_a_build_stopped_half_way_leaves_no_folder_that_loads(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decode that fails after some identities were written: no stream folder, no staging
    folder; an earlier complete folder at the same place is kept."""
    from tests.trainer.test_paper_data import write_jpg
    from uvtrain.data import corpora
    from uvtrain.data.corpora import common

    root = tmp_path / "celeba"
    lines = []
    for image in range(30):
        write_jpg(root / "Img" / "img_align_celeba" / f"{image:06d}.jpg", 8 * image)
        lines.append(f"{image:06d}.jpg {1 + image // 5}")
    (root / "Anno").mkdir()
    (root / "Anno" / "identity_CelebA.txt").write_text("\n".join(lines))
    keys = {"protocol": common.DataProtocol.from_keys(4, 2, "3,1,1"), "progress": False}
    folder = build_dataset("celeba", root=root, storage="stream", height=8, width=8, **keys)
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    decoded = []
    real = common.load_image

    def failing(*arguments, **options):
        if len(decoded) == 17:  # the fourth known identity's
            raise common.MediaError("stopped")
        decoded.append(1)
        return real(*arguments, **options)

    # load_image is looked up where the image loaders decode: corpora.common
    monkeypatch.setattr(common, "load_image", failing)
    with pytest.raises(DatasetError, match="does not decode"):
        build_dataset("celeba", root=root, storage="stream", height=8, width=8, **keys)
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before
    assert [path.name for path in cache.iterdir()] == [folder.name]
    decoded.clear()
    fresh = tmp_path / "fresh.stream"
    with pytest.raises(DatasetError, match="does not decode"):
        corpora.celeba(root, height=8, width=8, stream_to=fresh, **keys)
    assert list(tmp_path.glob("*fresh*")) == [] and len(decoded) == 17


#: builds a CelebA copy in memory, then streamed, each under tracemalloc, in a fresh interpreter:
#: tracemalloc counts every thread's allocations and a pytest worker's state (what earlier test
#: files left to collect, threads, log capture) is not this build's; the peaks come back as JSON
_TRACED_BUILDS = """
import gc, json, sys, threading, tracemalloc
from uvtrain.data import corpora
from uvtrain.data.corpora import common
root, stream, side = sys.argv[1], sys.argv[2], int(sys.argv[3])
keys = {"height": side, "width": side, "progress": False}
keys["protocol"] = common.DataProtocol.from_keys(20, 4, "8,2,2")
assert threading.active_count() == 1, threading.enumerate()
peaks = {}
for name, folder in (("memory", None), ("streamed", stream)):
    gc.collect()
    tracemalloc.start()
    try:
        dataset = corpora.celeba(root, stream_to=folder, **keys)
        peaks[name] = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(dataset.clients) == 20 and len(dataset.unknown) == 4
    assert dataset.streamed == (folder is not None)
    del dataset
print(json.dumps(peaks))
"""


def test_a_streamed_build_holds_a_few_identities_in_memory_not_the_corpus(
    tmp_path: Path,
) -> None:
    """Peak memory (numpy's allocations, traced) while a CelebA copy of 24 identities of 12
    96x96 faces is built: in memory it holds the corpus (24 identities' bytes and more); streamed
    into its folder, at most a few identities' (the one decoded, stacked, and the one written).
    Measured in a fresh interpreter (``_TRACED_BUILDS``): in a pytest worker that had run other
    files first, CI once traced 8.8 MB for the streamed build, more than the in-memory one."""
    import subprocess
    import sys

    from tests.trainer.test_paper_data import write_jpg

    people, each, side = 24, 12, 96
    root = tmp_path / "celeba"
    lines = []
    for image in range(people * each):
        write_jpg(root / "Img" / "img_align_celeba" / f"{image:06d}.jpg", image % 250)
        lines.append(f"{image:06d}.jpg {1 + image // each}")
    (root / "Anno").mkdir()
    (root / "Anno" / "identity_CelebA.txt").write_text("\n".join(lines))
    stream = tmp_path / "celeba.stream"
    command = [sys.executable, "-c", _TRACED_BUILDS, str(root), str(stream), str(side)]
    built = subprocess.run(command, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr[-2000:]
    peaks = json.loads(built.stdout.splitlines()[-1])
    identity = each * side * side * 3  # one identity's decoded bytes
    assert peaks["memory"] >= people * identity
    assert peaks["streamed"] < 6 * identity, peaks
    assert read_stream_folder(stream).streamed
