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
from uvtrain.cli import app  # noqa: E402
from uvtrain.data.base import ClientData, DatasetError, FederatedDataset  # noqa: E402
from uvtrain.data.registry import build_dataset, load_dataset  # noqa: E402
from uvtrain.data.stream import read_stream_folder, write_stream_folder  # noqa: E402
from uvtrain.engine import EngineConfig, HostSamples, Simulation  # noqa: E402
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
    loaded = FederatedDataset.load(folder)
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
}


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_a_malformed_stream_folder_is_one_line_exit_2(tmp_path: Path, kind: str) -> None:
    folder = write_stream_folder(tiny_dataset(), tmp_path / "tiny.stream")
    _break(folder, kind)
    with pytest.raises(DatasetError, match=MALFORMED[kind].replace("(", r"\(").replace(")", r"\)")):
        FederatedDataset.load(folder)
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
