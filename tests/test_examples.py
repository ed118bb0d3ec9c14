"""The examples a user copies from: ``app_verifier.py`` (an app embedding ``uvsdk.Verifier``) and
the parts of ``quickstart.py`` that are not the commands themselves (CI runs the whole quickstart;
``.ci/run``)."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from .conftest import PASSPHRASE

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str) -> ModuleType:
    """Import ``examples/NAME.py`` (examples are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


app = load_example("app_verifier")
sdk_demo = load_example("sdk_demo")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """sdk_demo's reference voice bundle, its enrollment clips of one speaker and its test clips
    (``me-*.wav`` of that speaker, ``stranger*.wav`` of five others)."""
    root = tmp_path_factory.mktemp("demo")
    enroll, test = sdk_demo.write_clips(root)
    return sdk_demo.REFERENCE_BUNDLE, enroll, test


def test_the_committed_reference_bundle_is_what_the_demo_builder_makes(tmp_path: Path) -> None:
    """``examples/reference-voice.uvb`` lets the SDK-only demo run without onnx
    (tests/test_sdk_only.py); it must stay what ``build_bundle`` makes (rebuild it with
    ``python examples/sdk_demo.py --write-reference``)."""
    import zipfile

    built = sdk_demo.build_bundle(tmp_path / "voice.uvb")
    with zipfile.ZipFile(built) as fresh, zipfile.ZipFile(sdk_demo.REFERENCE_BUNDLE) as shipped:
        assert sorted(fresh.namelist()) == sorted(shipped.namelist())
        for name in fresh.namelist():
            assert fresh.read(name) == shipped.read(name), (
                f"{name} differs: run python examples/sdk_demo.py --write-reference"
            )


def run_app(capsys, *args: object) -> tuple[int, str, str]:
    code = app.main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, match: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("app: "), err
    assert match in lines[0], lines[0]


def test_app_enrolls_then_accepts_the_owner_and_rejects_a_stranger(
    demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    bundle, enroll, test = demo
    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    device = ["--bundle", bundle, "--store", tmp_path / "store"]

    code, out, _ = run_app(capsys, *device, "enroll", enroll)
    assert code == 0 and "Enrolled default from 8 recordings" in out
    code, out, _ = run_app(capsys, *device, "verify", test / "me-0.wav")
    assert code == 0 and out.startswith("Welcome back, default.")
    code, out, _ = run_app(capsys, *device, "verify", test / "stranger1-0.wav")
    assert code == 1 and out.startswith("Not recognised.")

    # A file that is no audio: one friendly line, exit 2; the app carries on afterwards.
    bad = tmp_path / "notes.wav"
    bad.write_text("not audio")
    code, _, err = run_app(capsys, *device, "verify", bad)
    assert_one_line_error(code, err, "cannot be read as audio")
    short = tmp_path / "short.wav"
    import soundfile as sf

    sf.write(short, np.full(1600, 0.1, np.float32), 16000)
    code, _, err = run_app(capsys, *device, "verify", short)
    assert_one_line_error(code, err, "is too short")

    # Another passphrase cannot open the profile.
    monkeypatch.setenv("UVSDK_PASSPHRASE", "not the passphrase")
    code, _, err = run_app(capsys, *device, "verify", test / "me-0.wav")
    assert_one_line_error(code, err, "Wrong passphrase")


def test_app_backoff_locks_out_after_five_rejections(
    demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    bundle, enroll, test = demo
    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    device = ["--bundle", bundle, "--store", tmp_path / "store", "--user", "alice"]
    assert run_app(capsys, *device, "enroll", enroll)[0] == 0
    for _ in range(5):
        assert run_app(capsys, *device, "verify", test / "stranger1-0.wav")[0] == 1
    code, _, err = run_app(capsys, *device, "verify", test / "me-0.wav")
    assert_one_line_error(code, err, "Too many failed attempts: try again after")


def test_app_errors_without_a_model_or_an_enrollment(
    demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    bundle, _, test = demo
    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    monkeypatch.setenv("UVSDK_BUNDLE", str(tmp_path / "missing.uvb"))
    code, _, err = run_app(capsys, "--store", tmp_path / "store", "verify", test / "me-0.wav")
    assert_one_line_error(code, err, "The voice model cannot be used")
    code, _, err = run_app(
        capsys, "--bundle", bundle, "--store", tmp_path / "store", "verify", test / "me-0.wav"
    )
    assert_one_line_error(code, err, "No voice enrolled yet")
    other_key = tmp_path / "other.pub.pem"
    from uvexport.bundle import generate_signing_key, save_signing_key

    save_signing_key(generate_signing_key(), tmp_path / "other.pem")
    code, _, err = run_app(
        capsys, "--bundle", bundle, "--store", tmp_path, "--trust", other_key, "verify", "x.wav"
    )
    assert_one_line_error(code, err, "The voice model cannot be used")  # unsigned: refused


def test_app_interactive_reads_file_paths_from_stdin(
    demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    bundle, enroll, test = demo
    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    lines = [*sorted(map(str, enroll.iterdir())), "", str(test / "me-1.wav"), "nowhere.wav"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    code, out, _ = run_app(capsys, "--bundle", bundle, "--store", tmp_path / "store")
    assert code == 0
    assert "Enrolled default from 8 recordings" in out
    assert "Welcome back, default." in out
    assert "That recording" in out  # the missing file: said, and the loop went on to the end


def test_quickstart_never_replaces_a_folder_it_did_not_make(tmp_path: Path, capsys) -> None:
    quickstart = load_example("quickstart")
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    assert quickstart.main(["--out", str(tmp_path), "--small"]) == 2
    assert "was not made by the quickstart" in capsys.readouterr().err
    assert precious.read_text() == "keep me"


def test_quickstart_table_and_results_hold_no_threshold(tmp_path: Path, capsys) -> None:
    quickstart = load_example("quickstart")
    decisions = [
        {"file": "t/genuine-0.wav", "score": 0.61, "threshold": 0.4, "accepted": True},
        {"file": "t/genuine-1.wav", "score": 0.31, "threshold": 0.4, "accepted": False},
        {"file": "t/known-spk1.wav", "score": 0.05, "threshold": 0.4, "accepted": False},
        {"file": "t/unseen-spk2.wav", "score": 0.45, "threshold": 0.4, "accepted": True},
    ]
    who = {Path(d["file"]).name: "someone" for d in decisions}
    summary = quickstart.report(decisions, who, tmp_path)
    assert summary["genuine_accept_rate"] == 0.5 and summary["impostor_reject_rate"] == 0.5
    out = capsys.readouterr().out
    assert "genuine accepted:   1 of 2 (50%)" in out and "impostors rejected: 1 of 2 (50%)" in out
    assert out.count("WRONG") == 2
    written = json.loads((tmp_path / "results.json").read_text())
    assert "threshold" not in json.dumps(written)


def test_quickstart_provisions_the_trained_codeword_and_enrolls_in_codeword_mode(
    feduv_run_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    from uvexport.export import export_run
    from uvsdk import Verifier
    from uvsdk.template import TemplateStore
    from uvtrain.algorithms.feduv import client_codewords

    from .conftest import TINY_RUN

    quickstart = load_example("quickstart")
    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    run = feduv_run_copy  # uvtrain run --method feduv, formant-voices, 8 clients, 2 rounds
    clients = int(TINY_RUN[TINY_RUN.index("--clients") + 1])
    bundle = export_run(run, tmp_path / "voice.uvb").path
    store = tmp_path / "store"

    user_id, dataset = quickstart.provision_codeword(run, 2, bundle, store, "client2")
    template = TemplateStore(store).load("client2")
    assert np.array_equal(template.codeword, client_codewords(clients, 127, 0)[2])
    assert template.user_id == user_id and not template.is_enrolled
    who = quickstart.write_clips(dataset, 2, tmp_path / "enroll", tmp_path / "test")
    assert sum(name.startswith("genuine-") for name in who) == len(dataset.clients[2].test)
    verifier = Verifier(bundle, store=store)
    report = verifier.enroll(tmp_path / "enroll", user="client2", mode="codeword")
    assert report.mode == "codeword"  # asked for: the tiny run measured prototype mode better
    assert verifier.bundle.manifest.training.enrollment == "prototype"
    with pytest.raises(quickstart.StepFailed, match=f"clients are 0 to {clients - 1}"):
        quickstart.provision_codeword(run, clients, bundle, tmp_path / "other", "client6")
