"""``uvtrain`` end to end on a tiny generated dataset: run, resume, eval, and its errors."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
from typer.testing import CliRunner  # noqa: E402

from tests.processes import wait_until  # noqa: E402
from uvtrain.cli import app  # noqa: E402

runner = CliRunner()
TINY = ["--dataset", "formant-voices", "--clients", "8", "--fraction", "0.5", "--batch-size", "4"]


def uvtrain(*args: str | Path, env: dict | None = None):
    return runner.invoke(
        app, [str(a) for a in args], env={"UVTRAIN_DATA": str(env or "")} if env else None
    )


@pytest.fixture()
def data_root(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path_factory.mktemp("uvtrain-data")
    monkeypatch.setenv("UVTRAIN_DATA", str(root))
    return root


@pytest.mark.parametrize("method", ["feduv", "fedhide", "softmax", "fedaws"])
def test_run_writes_the_run_folder_and_resumes(
    data_root: Path, tmp_path: Path, method: str
) -> None:
    out = tmp_path / "run"
    result = uvtrain("run", "--method", method, *TINY, "--rounds", "2", "--out", out)
    assert result.exit_code == 0, result.output
    files = (
        "config.json",
        "checkpoint.pt",
        "metrics.jsonl",
        "report.json",
        "roc.png",
        "scores.npz",
    )
    for name in files:
        assert (out / name).is_file(), name
    assert (out / "roc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads((out / "report.json").read_text())
    assert report["method"] == method and report["rounds"] == 2
    assert set(report["splits"]) == {"train", "test_known", "unknown"}
    for split in report["splits"].values():
        assert 0.0 <= split["eer"] <= 1.0 and set(split["tpr_at_fpr"]) >= {"0.01", "0.1"}
    assert set(report["warmup"]) >= {"target_tpr", "tpr", "fpr"}
    assert report["throughput"]["device"] == "cpu"
    assert (report["leakage"] is None) == (method == "feduv")
    # Prototype methods are scored as the SDK enrolls (mean of the enrollment embeddings); the
    # learnt prototypes w_c are scored beside that.
    assert ("learnt_prototypes" in report) == (method != "feduv")
    if method in ("softmax", "fedaws"):  # the server holds every class embedding
        assert report["leakage"] == 1.0
    if method != "feduv":
        assert set(report["learnt_prototypes"]) == {"train", "test_known"}
        assert "learnt prototypes" in result.output
    # which protocol each split of "splits" is: the two unknown-user protocols are never mixed
    unknown = "codeword-unseen-impostors" if method == "feduv" else "unseen-pairs"
    assert report["split_protocols"]["unknown"] == unknown
    # softmax and FedAwS are also scored as the FedUV paper scores them, against their learnt
    # class rows, in a section of their own beside the SDK's enrollment protocol
    if method in ("softmax", "fedaws"):
        rows = report["class_row"]
        assert rows["protocol"] == "class-row"
        assert set(rows["splits"]) == {"train", "test_known", "unknown"}
        for split in rows["splits"].values():
            assert 0.0 <= split["eer"] <= 1.0 and set(split["tpr_at_fpr"]) >= {"0.01", "0.1"}
        # unknown: the known users' test samples against unseen people, not pairs of the unseen
        assert rows["trials"]["unknown"]["genuine"] == report["trials"]["test_known"]["genuine"]
        assert rows["trials"]["unknown"] != report["trials"]["unknown"]
        assert set(rows["warmup"]) == {"target_tpr", "tpr", "fpr"}
        with np.load(out / "scores.npz") as scores:
            assert {"class_row_test_known_genuine", "class_row_unknown_impostor"} <= set(scores)
        assert "learnt class rows" in result.output
    else:
        assert report["class_row"] is None
    assert "EER" in result.output

    resumed = uvtrain("run", "--method", method, *TINY, "--rounds", "3", "--out", out)
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stderr.startswith(f"{method}: resumed from round 2\n"), resumed.stderr
    assert f"{method}: round 3/3 (100%)" in resumed.stderr
    assert "resumed" not in result.stderr  # the fresh run
    rounds = [
        json.loads(line)["round"] for line in (out / "metrics.jsonl").read_text().splitlines()
    ]
    assert rounds == [1, 2, 3]  # resumed at round 3, not started over
    again = uvtrain("eval", out)
    assert again.exit_code == 0, again.output
    assert json.loads((out / "report.json").read_text())["rounds"] == 3


def test_config_file_and_precedence(data_root: Path, tmp_path: Path) -> None:
    config = tmp_path / "run.toml"
    config.write_text('method = "feduv"\ndataset = "formant-voices"\nclients = 6\nrounds = 5\n')
    out = tmp_path / "run"
    result = uvtrain("run", "--config", config, "--rounds", "1", "--batch-size", "4", "--out", out)
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "config.json").read_text())
    assert saved["rounds"] == 1 and saved["clients"] == 6  # CLI beats the file beats the default


def test_the_papers_schedule_options_reach_the_engine_and_the_report(
    data_root: Path, tmp_path: Path
) -> None:
    config = tmp_path / "fedhide.toml"
    config.write_text('[schedule]\naggregation = "mean"\nsampling = "round-robin"\n')
    out = tmp_path / "run"
    args = ["--method", "fedhide", *TINY, "--config", config, "--local-epochs", "1"]
    result = uvtrain("run", *args, "--rounds", "1", "--out", out)
    assert result.exit_code == 0, result.output
    for echoed in (
        json.loads((out / "config.json").read_text()),
        json.loads((out / "report.json").read_text())["config"],
    ):
        assert echoed["aggregation"] == "mean" and echoed["sampling"] == "round-robin"
        assert echoed["local_epochs"] == 1 and echoed["local_steps"] == 1
    resumed = uvtrain("run", *args, "--rounds", "2", "--out", out)
    assert resumed.exit_code == 0, resumed.output
    changed = uvtrain("run", *args[:-2], "--rounds", "2", "--out", out)  # no --local-epochs
    assert "other settings (local_epochs)" in one_error_line(changed)
    # a folder from before embedding_dim and window trained the backbone's own dimension and the
    # Hann window: today's defaults are other settings, not a resume onto a model that differs
    saved = json.loads((out / "config.json").read_text())
    del saved["embedding_dim"], saved["window"]
    (out / "config.json").write_text(json.dumps(saved))
    older = uvtrain("run", *args, "--rounds", "3", "--out", out)
    assert "other settings (embedding_dim, window)" in one_error_line(older)
    defaults = uvtrain("run", "--method", "feduv", *TINY, "--rounds", "1", "--out", tmp_path / "d")
    assert defaults.exit_code == 0, defaults.output
    saved = json.loads((tmp_path / "d" / "config.json").read_text())
    assert saved["aggregation"] == "weighted" and saved["local_epochs"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--sampling", "round-robin", "--dp", "central", "--dp-noise-multiplier", "1"],
            "--dp accounts for randomly sampled cohorts",
        ),
        (["--aggregation", "median"], "aggregation must be 'weighted' or 'mean'"),
        (["--local-steps", "2", "--local-epochs", "1"], "not both"),
    ],
)
def test_schedule_options_that_cannot_go_together_are_one_line(
    data_root: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    result = uvtrain("run", "--method", "feduv", *TINY, *args, "--out", tmp_path / "run")
    assert message in one_error_line(result)
    assert not (tmp_path / "run").exists()


def test_cross_silo_refuses_the_cross_device_schedule_options(
    data_root: Path, tmp_path: Path
) -> None:
    args = ["--method", "fedface", "--dataset", "formant-voices", "--parties", "2"]
    result = uvtrain("run", *args, "--aggregation", "mean", "--out", tmp_path / "run")
    assert "cross-device options; fedface is cross-silo" in one_error_line(result)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--method", "feduv", "--dataset", "no-such-set"], "unknown dataset 'no-such-set'"),
        (["--method", "magic", "--dataset", "formant-voices"], "unknown method 'magic'"),
        (
            ["--method", "feduv", "--dataset", "formant-voices", "--code-length", "100"],
            "code_length",
        ),
        (["--method", "feduv", "--dataset", "formant-voices", "--fraction", "2"], "fraction"),
        (["--method", "feduv", "--dataset", "/nowhere/data.npz"], "/nowhere/data.npz"),
        (["--dataset", "formant-voices"], "no method"),
    ],
)
def test_errors_are_one_line(
    data_root: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    result = uvtrain("run", *args, "--rounds", "1", "--out", tmp_path / "run")
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert line.startswith("uvtrain: error: ") and "\n" not in line and message in line, line
    assert not (tmp_path / "run").exists()  # refused before the run folder is made


def test_bad_config_file(data_root: Path, tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('method = "feduv"\ndataset = "formant-voices"\nlearning_rate = 3\n')
    result = uvtrain("run", "--config", config, "--out", tmp_path / "run")
    assert result.exit_code == 2 and "unknown config key(s): learning_rate" in result.stderr
    config.write_text("this is = not [toml")
    result = uvtrain("run", "--config", config, "--out", tmp_path / "run")
    assert result.exit_code == 2 and "not a valid TOML file" in result.stderr


def test_eval_of_a_folder_that_is_no_run(tmp_path: Path) -> None:
    result = uvtrain("eval", tmp_path)
    assert result.exit_code == 2 and "is not a run folder" in result.stderr


def test_data_build_shows_its_progress(data_root: Path) -> None:
    """Synthesis says how far it is (issue 30: 93 s of silence), in lines when stderr is no
    terminal."""
    result = uvtrain("data", "build", "synth-voices", "--speakers", "4")
    assert result.exit_code == 0, result.output
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("synth-voices: speaker 4/4 (100%), "), result.stderr
    assert " elapsed" in lines[-1] and "\r" not in result.stderr
    assert result.stdout.startswith("built synth-voices: ")


def test_data_list_names_the_builtin_sets() -> None:
    result = uvtrain("data", "list")
    assert result.exit_code == 0
    for name in ("synth-voices", "orl-faces", "formant-voices"):
        assert name in result.output


def test_a_killed_run_resumes_to_the_same_parameters(data_root: Path, tmp_path: Path) -> None:
    """Kill a real ``uvtrain run`` process after its first checkpoint, run it again, and compare
    with a run that was never interrupted."""
    import os
    import signal
    import subprocess
    import sys

    import torch

    args = ["--method", "feduv", *TINY, "--rounds", "40", "--lr", "0.2"]
    straight = tmp_path / "straight"
    assert uvtrain("run", *args, "--out", straight).exit_code == 0
    killed = tmp_path / "killed"
    command = [sys.executable, "-m", "uvtrain.cli", "run", *args, "--out", str(killed)]
    env = {**os.environ, "UVTRAIN_DATA": str(data_root)}
    config = tmp_path / "every2.toml"
    config.write_text("checkpoint_every = 2\n")
    process = subprocess.Popen(
        [*command, "--config", str(config)],
        env=env,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_until((killed / "checkpoint.pt").exists, process, stall_seconds=300)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert (killed / "checkpoint.pt").exists()
    done = [
        json.loads(line)["round"] for line in (killed / "metrics.jsonl").read_text().splitlines()
    ]
    assert done and done[-1] < 40  # it really stopped half-way
    resumed = uvtrain("run", *args, "--config", config, "--out", killed)
    assert resumed.exit_code == 0, resumed.output
    rounds = [
        json.loads(line)["round"] for line in (killed / "metrics.jsonl").read_text().splitlines()
    ]
    assert rounds == list(range(1, 41))  # rounds after the last checkpoint were logged once
    first = torch.load(straight / "checkpoint.pt", weights_only=True)["params"]
    second = torch.load(killed / "checkpoint.pt", weights_only=True)["params"]
    for name in first:
        torch.testing.assert_close(second[name], first[name], atol=0, rtol=0)


def test_eval_every_logs_eer_curves(data_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["--method", "fedgn", *TINY, "--rounds", "4", "--eval-every", "2", "--out", out]
    result = uvtrain("run", *args)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert ["eer" in line for line in lines] == [False, True, False, True]
    assert set(lines[1]["eer"]) == {"test_known", "unknown"}
    assert all(0.0 <= value <= 1.0 for value in lines[3]["eer"].values())
    # eval_every changes no training: resuming with another value is the same run
    again = uvtrain("run", *args[:-4], "--rounds", "5", "--eval-every", "0", "--out", out)
    assert again.exit_code == 0, again.output


# -- bad files, bad numbers, no folder left behind, quiet logs -----------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-round FedUV run folder (and its dataset cache beside it, in ``data``)."""
    root = tmp_path_factory.mktemp("tiny-run")
    out = root / "run"
    result = runner.invoke(
        app,
        ["run", "--method", "feduv", *TINY, "--rounds", "1", "--out", str(out)],
        env={"UVTRAIN_DATA": str(root / "data")},
    )
    assert result.exit_code == 0, result.output
    return out


#: A progress line of the rounds done before an error (uvtrain.progress.progress_line).
PROGRESS_LINE = re.compile(r"[\w-]+: round \d+/\d+ \(\d+%\), .* elapsed(, ETA .*)?")


def one_error_line(result) -> str:
    """The error: one line on stderr, after the progress of any rounds trained before it."""
    *progress, line = result.stderr.strip().splitlines() or [""]
    assert result.exit_code == 2, result.output
    assert line.startswith("uvtrain: error: "), result.stderr
    assert all(PROGRESS_LINE.fullmatch(shown) for shown in progress), result.stderr
    return line


def _pickle_payload(path: Path, marker: Path) -> None:
    """A checkpoint that would run code when unpickled without ``weights_only``."""
    import torch

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"round": 1, "params": Payload()}, path)


BROKEN_CHECKPOINTS = {
    "truncated": ("not a readable checkpoint (truncated or corrupt", None),
    "garbage": ("not a PyTorch checkpoint", None),
    "pickle": ("refused: it holds pickled Python objects", None),
    "list": ("not a uvtrain checkpoint", None),
    "other-state": ("not a uvtrain checkpoint of this run", None),
}


@pytest.mark.parametrize("kind", list(BROKEN_CHECKPOINTS))
def test_a_broken_checkpoint_is_one_line_in_eval_resume_and_export(
    tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    import shutil

    import torch

    from uvexport.cli import main as uvexport_main

    monkeypatch.setenv("UVTRAIN_DATA", str(tiny_run.parent / "data"))
    folder = tmp_path / "run"
    shutil.copytree(tiny_run, folder)
    checkpoint = folder / "checkpoint.pt"
    marker = tmp_path / "payload-ran"
    if kind == "truncated":
        checkpoint.write_bytes(checkpoint.read_bytes()[:5000])
    elif kind == "garbage":
        checkpoint.write_bytes(b"this is not a checkpoint\n" * 10)
    elif kind == "pickle":
        _pickle_payload(checkpoint, marker)
    elif kind == "list":
        torch.save([1, 2, 3], checkpoint)
    else:
        torch.save({"round": 1, "params": {}}, checkpoint)
    message = BROKEN_CHECKPOINTS[kind][0]
    for args in (["eval", folder], ["run", "--method", "feduv", *TINY, "--rounds", "2", "--out", folder]):  # fmt: skip
        line = one_error_line(uvtrain(*args))
        assert str(checkpoint) in line and message in line, line
    assert uvexport_main([str(folder), "--out", str(tmp_path / "x.uvb")]) == 2
    assert not marker.exists()  # the payload never ran
    assert not (tmp_path / "x.uvb").exists()


@pytest.mark.parametrize("kind", ["truncated", "garbage", "pickled", "no-meta", "cut-member"])
def test_a_broken_dataset_file_is_one_line(tiny_run: Path, tmp_path: Path, kind: str) -> None:
    import zipfile

    import numpy as np

    built = next((tiny_run.parent / "data").glob("formant-voices-*.npz"))
    path = tmp_path / f"{kind}.npz"
    if kind == "truncated":
        path.write_bytes(built.read_bytes()[:30000])
    elif kind == "garbage":
        path.write_bytes(b"\x80\x04K\x01." + b"garbage" * 100)  # np.load would unpickle it
    elif kind == "pickled":
        np.savez(path, meta=np.array([{"name": "x"}], dtype=object))
    elif kind == "no-meta":
        np.savez(path, other=np.zeros(3))
    else:
        with zipfile.ZipFile(built) as source, zipfile.ZipFile(path, "w") as target:
            for name in source.namelist():
                blob = source.read(name)
                target.writestr(name, blob[: len(blob) // 2] if "clients/0/train" in name else blob)
    out = tmp_path / "run"
    line = one_error_line(uvtrain("run", "--method", "feduv", "--dataset", path, "--out", out))
    assert f"{path}: not a readable dataset" in line, line
    expected = {
        "truncated": "not an .npz archive, or truncated",
        "garbage": "not an .npz archive",
        "pickled": "pickled Python objects: refused",
        "no-meta": "no 'meta' in it",
        "cut-member": "truncated or corrupt",
    }[kind]
    assert expected in line, line
    assert not out.exists()


HOSTILE_JSON = {
    "infinity": ('{"method": "feduv", "lr": Infinity}', "a number that is not finite"),
    "nested": ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
    "long-number": ('{"rounds": ' + "9" * 5000 + "}", "a number of 5000 characters"),
}


@pytest.mark.parametrize("kind", list(HOSTILE_JSON))
def test_json_files_of_a_run_folder_or_dataset_are_read_within_limits(
    tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture, kind: str
) -> None:
    """A run folder's config.json or report.json, or a dataset's meta, with Infinity, 100,000
    nested brackets or a 5,000-digit number (issue 46: OverflowError, RecursionError, a
    ValueError traceback): one line in eval, export and run, through the SDK's JSON limits."""
    import shutil

    import numpy as np

    from uvexport.cli import main as uvexport

    text, problem = HOSTILE_JSON[kind]
    folder = tmp_path / "run"
    shutil.copytree(tiny_run, folder)
    (folder / "config.json").write_text(text)
    line = one_error_line(uvtrain("eval", folder))
    assert f"config.json: not valid JSON ({problem}" in line, line
    # --force: the tiny run is at chance, which uvexport refuses before it reads config.json
    assert uvexport([str(folder), "--force", "--out", str(tmp_path / "m.uvb")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert problem in err, err
    shutil.copy(tiny_run / "config.json", folder / "config.json")
    (folder / "report.json").write_text(text)
    assert uvexport([str(folder), "--out", str(tmp_path / "m.uvb")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"report.json: not valid JSON ({problem}" in err and "\n" not in err, err
    dataset = tmp_path / "hostile.npz"
    np.savez(dataset, meta=np.frombuffer(text.encode(), dtype=np.uint8))
    line = one_error_line(uvtrain("run", "--method", "feduv", "--dataset", dataset, "--out", tmp_path / "r"))  # fmt: skip
    assert f"{dataset}: not a readable dataset ({problem}" in line, line


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--lr", "inf", "lr must be a finite number, not inf"),
        ("--lr", "nan", "lr must be a finite number"),
        ("--lr", "-0.1", "lr must be positive"),
        ("--lr-decay", "-1", "lr_decay >= 0"),
        ("--fraction", "nan", "fraction must be a finite number"),
        ("--fraction", "0", "fraction must be in (0, 1]"),
        ("--lambda", "inf", "weight must be a finite number"),
        ("--crop-seconds", "-inf", "crop_seconds must be a finite number"),
        ("--batch-size", "0", "batch_size must be >= 1"),
        ("--local-steps", "0", "local_steps must be >= 1"),
        ("--rounds", "-1", "rounds and seed must be >= 0"),
        ("--seed", "-3", "rounds and seed must be >= 0"),
        ("--margin-scale", "inf", "margin_scale must be a finite number"),
        # finite extremes that passed --dry-run and ended in a 70-line traceback (issue 46)
        ("--lr", "1e308", "lr must be at most 100, not 1e+308"),
        ("--server-lr", "1e308", "server_lr must be at most 100, not 1e+308"),
        ("--server-tau", "1e-320", "server_tau must be at least 1e-09, not 1e-320"),
        ("--clip-norm", "1e308", "clip_norm must be at most 1000, not 1e+308"),
        ("--batch-size", "100000000000000000000", "batch_size must be at most 65536"),
        ("--local-steps", "100000000000000000000", "local_steps must be at most 1000000"),
        ("--seed", "100000000000000000000", "seed must be at most 2^32 - 1"),
    ],
)
@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_numeric_options_are_checked_before_anything_is_made(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    option: str,
    value: str,
    message: str,
    dry_run: bool,
) -> None:
    # No UVTRAIN_DATA: the check comes before the dataset is built, read or even looked up.
    monkeypatch.setenv("UVTRAIN_DATA", str(tmp_path / "data"))
    out = tmp_path / "deep" / "run"
    extra = {"--server-tau": ["--server-optimizer", "adam"], "--clip-norm": ["--dp", "central"]}
    args = [*extra.get(option, []), option, value, *(["--dry-run"] if dry_run else [])]
    result = uvtrain("run", "--method", "feduv", "--dataset", "formant-voices", *args, "--out", out)  # fmt: skip
    assert message in one_error_line(result)
    assert not (tmp_path / "deep").exists() and not (tmp_path / "data").exists()


def _diverge(monkeypatch: pytest.MonkeyPatch, where: str, round_number: int) -> None:
    """Make a run diverge in ``round_number`` without a setting that does (none in the ranges
    the options allow was found to: lr and server lr 100, τ 1e-9, clip norm 1000 all train):
    ``"model"``: the global model becomes inf after the round; ``"loss"``: the clients' loss is
    NaN in the round's local training."""
    from uvtrain.algorithms.feduv import FedUV
    from uvtrain.engine import Simulation

    if where == "model":
        advance = Simulation.advance  # the round uvtrain.fit.fit runs

        def diverging_advance(self, plan, local, aggregator=None):
            result = advance(self, plan, local, aggregator)
            if self.round == round_number:
                name = sorted(self.params)[0]
                self.params[name] = self.params[name] * float("inf")
            return result

        monkeypatch.setattr(Simulation, "advance", diverging_advance)
    else:
        loss = FedUV.loss
        train = Simulation.train

        def diverging_train(self, plan, fused, path=None):
            if plan.number == round_number:
                monkeypatch.setattr(FedUV, "loss", lambda *args: loss(*args) * float("nan"))
            return train(self, plan, fused, path)

        monkeypatch.setattr(Simulation, "train", diverging_train)


@pytest.mark.parametrize("where", ["model", "loss"])
def test_a_run_that_diverges_ends_in_one_line_and_marks_its_folder(
    data_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    where: str,
) -> None:
    """A run whose model or loss stops being finite in round 3: one line that says where and
    what to lower (exit 2, no NaN traceback, no evaluation of a NaN model); the folder stays,
    report.json says diverged, the checkpoint is the last finite model (round 2), and eval,
    export and another run of that folder refuse it in one line."""
    config = tmp_path / "run.toml"
    config.write_text("checkpoint_every = 1\n")
    out = tmp_path / "new" / "run"
    _diverge(monkeypatch, where, 3)
    args = ["--method", "feduv", *TINY, "--rounds", "5", "--server-optimizer", "adam"]
    line = one_error_line(uvtrain("run", *args, "--config", config, "--out", out))
    what = "the model (" if where == "model" else "the training loss is not finite"
    assert line.startswith(f"uvtrain: error: training diverged in round 3: {what}"), line
    assert "lower --lr (now 0.1) or --server-lr (now" in line
    assert "or raise --server-tau (now 0.001)" in line and "new folder" in line
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "diverged" and report["diverged_in_round"] == 3
    assert report["last_checkpoint_round"] == 2 and report["error"] in line
    import torch

    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["round"] == 2
    assert all(bool(torch.isfinite(v).all()) for v in state["params"].values())
    rounds = [json.loads(x)["round"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert rounds[:2] == [1, 2]
    assert not (out / "scores.npz").exists()  # nothing evaluated a model that is not finite
    monkeypatch.undo()
    for command in (["eval", out], ["run", *args, "--out", out]):
        refused = one_error_line(uvtrain(*command))
        assert "holds a run that diverged in round 3" in refused
    from uvexport.cli import main as uvexport

    assert uvexport([str(out), "--out", str(tmp_path / "m.uvb")]) == 2
    stderr = capsys.readouterr().err.strip()
    assert "diverged in round 3" in stderr and "\n" not in stderr, stderr
    assert not (tmp_path / "m.uvb").exists()


def test_a_run_that_fails_removes_only_the_folder_it_made(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from uvtrain.engine import Simulation
    from uvtrain.errors import TrainingError

    def failing_advance(self, plan, local, aggregator=None):  # the round uvtrain.fit.fit runs
        raise TrainingError("a failure in round 1")

    monkeypatch.setattr(Simulation, "advance", failing_advance)
    diverging = ["--method", "feduv", *TINY, "--rounds", "3"]
    made = tmp_path / "new" / "run"
    line = one_error_line(uvtrain("run", *diverging, "--out", made))
    assert "a failure in round 1" in line
    assert not (tmp_path / "new").exists()  # made by the failed command: removed, parents too
    existing = tmp_path / "mine"
    existing.mkdir()
    (existing / "notes.txt").write_text("keep me")
    one_error_line(uvtrain("run", *diverging, "--out", existing))
    assert (existing / "notes.txt").read_text() == "keep me"  # a folder that was there stays
    one_error_line(uvtrain("run", "--method", "feduv", "--dataset", "nowhere.npz", "--out", existing))  # fmt: skip
    assert existing.is_dir()
    file = tmp_path / "a-file"
    file.write_text("x")
    assert "a file, not a folder" in one_error_line(uvtrain("run", *TINY, "--method", "feduv", "--out", file))  # fmt: skip


def test_run_files_are_strict_json(tiny_run: Path) -> None:
    """No NaN / Infinity tokens (not JSON) in any file of a run, whatever the values."""
    from uvtrain.io import json_text

    def strict(text: str):
        return json.loads(text, parse_constant=lambda token: pytest.fail(f"{token} in JSON"))

    for line in (tiny_run / "metrics.jsonl").read_text().splitlines():
        strict(line)
    strict((tiny_run / "config.json").read_text())
    strict((tiny_run / "report.json").read_text())
    values = {"loss": float("nan"), "lr": float("inf"), "eer": {"x": float("-inf")}, "n": 3}
    assert strict(json_text(values)) == {"loss": None, "lr": None, "eer": {"x": None}, "n": 3}


def test_a_line_cut_by_a_kill_is_dropped_on_resume(tmp_path: Path) -> None:
    from uvtrain.io import trim_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"round": 1, "loss": 0.9}\n{"round": 2, "loss": 0.8}\n{"round": 3, "lo')
    trim_metrics(path, 2)
    assert path.read_text() == '{"round": 1, "loss": 0.9}\n{"round": 2, "loss": 0.8}\n'


def test_progress_is_a_compact_line_when_stderr_is_no_terminal(
    tiny_run: Path, data_root: Path, tmp_path: Path
) -> None:
    result = uvtrain("run", "--method", "feduv", *TINY, "--rounds", "2", "--out", tmp_path / "r")
    assert result.exit_code == 0, result.output
    assert "\r" not in result.stderr and "it/s" not in result.stderr and "%|" not in result.stderr
    first, last = result.stderr.strip().splitlines()  # after the first round, and the last
    time = r"\d+ (s|min \d+ s|min|h \d\d min)"  # uvtrain.progress.duration_text
    assert re.fullmatch(
        rf"feduv: round 1/2 \(50%\), loss \d\.\d{{4}}, {time} elapsed, ETA {time}", first
    )
    assert re.fullmatch(rf"feduv: round 2/2 \(100%\), loss \d\.\d{{4}}, {time} elapsed", last)
    assert "is at chance" in result.output and "--rounds 800" in result.output


def test_run_help_shows_the_defaults_and_settings_that_learn() -> None:
    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())
    for shown in ("Federated rounds. [default: (50)]", "Learning rate. [default: (0.1)]",
                  "Local batch size (B). [default: (16)]", "[default: (--pfm)]"):  # fmt: skip
        assert shown in text, shown
    assert "feduv --rounds 800 --fraction 0.1" in text and "--lr 0.5 --lr-decay 0.005" in text
    assert "fedhide --rounds 600" in text


def test_the_server_optimizer_is_in_the_run_folder_and_a_resume_keeps_it(
    data_root: Path, tmp_path: Path
) -> None:
    """FedUV's default server lr is written to config.json and report.json; a resume with another
    optimiser, or of a folder from before server optimisers (plain FedAvg, lr decay 0.01), is
    refused in one line, as are bad values."""
    out = tmp_path / "run"
    result = uvtrain("run", "--method", "feduv", *TINY, "--rounds", "1", "--out", out)
    assert result.exit_code == 0, result.output
    for echoed in (
        json.loads((out / "config.json").read_text()),
        json.loads((out / "report.json").read_text())["config"],
    ):
        assert echoed["server_optimizer"] == "sgd" and echoed["server_lr"] == 5.0
    other = uvtrain("run", "--method", "feduv", *TINY, "--rounds", "2", "--server-optimizer",
                    "adam", "--out", out)  # fmt: skip
    assert "other settings (server_optimizer)" in one_error_line(other)
    resumed = uvtrain("run", "--method", "feduv", *TINY, "--rounds", "2", "--out", out)
    assert resumed.exit_code == 0, resumed.output
    saved = json.loads((out / "config.json").read_text())
    for key in ("server_optimizer", "server_lr", "server_momentum"):
        del saved[key]
    saved["lr_decay"] = 0.01  # FedUV's default before server optimisers
    (out / "config.json").write_text(json.dumps(saved))
    older = uvtrain("run", "--method", "feduv", *TINY, "--rounds", "3", "--out", out)
    assert "other settings (lr_decay, server_lr)" in one_error_line(older)
    bad = uvtrain("run", "--method", "feduv", *TINY, "--server-tau", "0", "--out", tmp_path / "b")
    assert "server_tau must be positive" in one_error_line(bad)
    fedface = uvtrain("run", "--method", "fedface", *TINY, "--server-optimizer", "adam",
                      "--out", tmp_path / "f")  # fmt: skip
    assert "fedface is cross-silo" in one_error_line(fedface)


def test_a_run_near_chance_points_to_settings_that_learn(tiny_run: Path) -> None:
    from uvtrain.chance import chance_note, learning

    report = json.loads((tiny_run / "report.json").read_text())
    assert report["splits"]["test_known"]["eer"] > 0.3  # one round learns nothing
    report.setdefault("enrollment", {"splits": {"test_known": {"eer": 0.45}}})
    assert learning(report).at_chance
    hint = chance_note(report)
    assert hint is not None and "is at chance" in hint and "--rounds 800" in hint
    assert "uvexport refuses it without --force" in hint
    report["method"] = "fedhide"
    assert "fedhide --rounds 600" in chance_note(report)
    # the codeword at chance, enrollment learned (a DP-trained FedUV model): a note, no refusal
    report["enrollment"]["splits"]["test_known"]["eer"] = 0.12
    assert not learning(report).at_chance
    assert chance_note(report).startswith("note: verification by codeword is near chance")
    report["splits"]["test_known"]["eer"] = 0.12
    assert chance_note(report) is None and learning(report).near_chance == []
    # nothing measured (a deployment's server): not "at chance", and no refusal
    assert not learning({"method": "feduv", "splits": {}}).at_chance


def test_eval_says_a_model_is_at_chance_and_plots_every_protocol(
    feduv_run_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47: ``uvtrain eval`` printed codeword EER 0.50 without the note ``run`` printed, and
    roc.png left out the enrollment curves printed beside the codeword ones."""
    from uvtrain import evaluation

    plotted: dict = {}
    real_plot = evaluation.plot_roc

    def plot_roc(curves, path, title="ROC"):
        plotted.update(curves=dict(curves), title=title)
        return real_plot(curves, path, title)

    monkeypatch.setattr(evaluation, "plot_roc", plot_roc)
    result = uvtrain("eval", feduv_run_copy)
    assert result.exit_code == 0, result.output
    assert "note: this model is at chance: test_known EER 0.50 (by codeword)" in result.stdout
    assert "uvexport refuses it without --force" in result.stdout
    assert {"test_known", "test_known, by enrollment", "unknown, by enrollment"} <= set(
        plotted["curves"]
    )
    assert plotted["title"].endswith(": at chance, has not learned")
    # and not silent: a line a step, with the ETA until the last
    assert "uvtrain eval: step 1/3 (33%), done loaded the run, " in result.stderr
    assert "uvtrain eval: step 3/3 (100%), done report and ROC written, " in result.stderr
    assert (feduv_run_copy / "roc.png").is_file()


def test_ctrl_c_says_which_round_the_run_resumes_from(
    feduv_run_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47: Ctrl-C kept the last checkpoint without saying which round it resumes from."""
    from uvtrain import run as run_module

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "train", interrupted)
    result = uvtrain("run", "--method", "feduv", *TINY, "--rounds", "4", "--out", feduv_run_copy)
    assert result.exit_code == 130
    assert result.stderr.strip() == (
        f"uvtrain: interrupted: {feduv_run_copy} keeps its checkpoint of round 2; the same "
        "command resumes from round 2"
    )
    fresh = tmp_path / "fresh"
    result = uvtrain("run", "--method", "feduv", *TINY, "--out", fresh)
    assert result.exit_code == 130
    assert "has no checkpoint yet; the same command starts again from round 0" in result.stderr
