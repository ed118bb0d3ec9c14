"""``uvexport`` states how a run was trained in the manifest's ``training`` (docs/spec.md §3.10):
a DP-trained FedUV bundle enrolls by prototype unless codeword mode is asked for, and one trained
without DP in the mode that verified better on the run's own evaluation (prototype unless
codeword measured better)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from uvexport.cli import main  # noqa: E402
from uvexport.provenance import default_enrollment, run_training  # noqa: E402
from uvsdk import Verifier  # noqa: E402
from uvsdk.bundle import Bundle  # noqa: E402

from ..conftest import PASSPHRASE, TINY_RUN, enrollment_dir  # noqa: E402


@pytest.fixture(scope="module")
def dp_feduv_run(tiny_feduv_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's tiny FedUV run again, with central DP at ε = 30 (its dataset cache reused)."""
    from typer.testing import CliRunner

    from uvtrain.cli import app

    out = tmp_path_factory.mktemp("dp-feduv") / "run"
    arguments = ["run", "--method", "feduv", *TINY_RUN, "--rounds", "2"]
    arguments += ["--dp", "central", "--dp-epsilon", "30", "--out", str(out)]
    result = CliRunner().invoke(
        app, arguments, env={"UVTRAIN_DATA": str(tiny_feduv_run.parent / "data")}
    )
    assert result.exit_code == 0, result.output
    return out


def test_a_dp_feduv_export_says_so_and_enrolls_by_prototype(
    dp_feduv_run: Path, tiny_feduv_run: Path, voice_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("UVTRAIN_DATA", str(tiny_feduv_run.parent / "data"))
    bundle_path = tmp_path / "dp.uvb"
    assert main([str(dp_feduv_run), "--force", "--out", str(bundle_path)]) == 0
    spent = json.loads((dp_feduv_run / "report.json").read_text())["privacy"]
    training = Bundle(bundle_path).manifest.training
    assert training is not None and training.method == "feduv"
    assert training.enrollment == "prototype"
    privacy = training.privacy
    assert privacy is not None and privacy.mechanism == "central"
    assert (privacy.epsilon, privacy.delta) == (spent["epsilon"], spent["delta"])
    assert privacy.membership_eer_floor == spent["membership_eer_floor"]
    assert privacy.epsilon_server == spent["epsilon_server"] > spent["epsilon"]
    assert privacy.simulated_deployment is False

    verifier = Verifier(bundle_path, store=tmp_path / "store", passphrase=PASSPHRASE)
    verifier.new_codeword(user_id=3)
    samples = enrollment_dir(voice_dir, 0, tmp_path)
    assert verifier.enroll(samples, far=None).mode == "prototype"
    assert verifier.enroll(samples, far=None, mode="codeword").mode == "codeword"


def test_run_training_follows_the_output_kind_and_the_privacy() -> None:
    privacy = {
        "mechanism": "distributed",
        "epsilon": 8.0,
        "delta": 1e-6,
        "membership_eer_floor": 0.39,
        "simulated_deployment": {"noise_cohort": 1000, "population": 10**6},
        "epsilon_server": 22.4,
    }
    stated = run_training({"privacy": privacy}, "feduv", "codeword")
    assert stated["enrollment"] == "prototype"
    assert stated["privacy"] == {
        "mechanism": "distributed",
        "epsilon": 8.0,
        "delta": 1e-6,
        "simulated_deployment": True,
        "membership_eer_floor": 0.39,
        "epsilon_server": 22.4,
    }
    # a report from before ε against the server: computed from its noise, a user in every
    # round; z = 1 over one round at δ 1e-6 is the Gaussian mechanism's 4.8866 (Balle and
    # Wang's closed form, by hand in tests/trainer/test_privacy.py)
    older = {**privacy, "noise_multiplier": 1.0, "rounds": 1}
    del older["epsilon_server"]
    computed = run_training({"privacy": older}, "feduv", "codeword")["privacy"]
    assert computed["epsilon_server"] == pytest.approx(4.886554, abs=1e-5)
    # without DP and nothing measured (a Flower deployment's report): prototype
    assert run_training({"privacy": None}, "feduv", "codeword")["enrollment"] == "prototype"
    assert run_training({"privacy": None}, "fedhide", "embedding")["enrollment"] == "prototype"
    assert run_training({"privacy": privacy}, "fedhide", "embedding")["enrollment"] == "prototype"


def _report(codeword: float | None, prototype: float | None, privacy: dict | None = None) -> dict:
    """A FedUV report: ``splits`` the codeword protocol, ``enrollment.splits`` prototype mode."""
    known = {"eer": codeword, "tpr_at_fpr": {}, "min_dcf": None}
    enrolled = {"eer": prototype, "tpr_at_fpr": {}, "min_dcf": None}
    return {"privacy": privacy, "splits": {"test_known": known, "unknown": {"eer": 0.01}},
            "enrollment": {"splits": {"test_known": enrolled, "unknown": {"eer": 0.9}}}}  # fmt: skip


def test_without_dp_a_codeword_bundle_enrolls_in_the_mode_measured_better() -> None:
    """Prototype unless codeword mode's test_known EER is strictly lower; nothing measured (no
    splits, a missing or NaN EER): prototype; DP or an embedding model: prototype whatever the
    figures."""
    assert default_enrollment(_report(0.272, 0.083), "codeword") == "prototype"  # issue 45's
    assert default_enrollment(_report(0.05, 0.083), "codeword") == "codeword"
    assert default_enrollment(_report(0.083, 0.083), "codeword") == "prototype"  # a tie
    assert default_enrollment(_report(0.05, None), "codeword") == "prototype"
    assert default_enrollment(_report(float("nan"), 0.1), "codeword") == "prototype"
    assert default_enrollment({"privacy": None, "splits": {}}, "codeword") == "prototype"
    dp = {"mechanism": "central"}
    assert default_enrollment(_report(0.05, 0.083, dp), "codeword") == "prototype"
    assert default_enrollment(_report(0.05, 0.083), "embedding") == "prototype"


def test_an_exported_feduv_run_without_dp_enrolls_in_the_mode_its_report_measured_better(
    feduv_run_copy: Path, voice_dir: Path, tmp_path: Path
) -> None:
    """``uvexport RUN`` on the tiny FedUV run (no DP): its own report decides, and the SDK's
    ``auto`` follows the manifest for a user who holds a codeword. The same run with a report
    whose codeword EER is the lower enrolls in codeword mode."""
    report_path = feduv_run_copy / "report.json"
    report = json.loads(report_path.read_text())
    codeword = report["splits"]["test_known"]["eer"]
    enrolled = report["enrollment"]["splits"]["test_known"]["eer"]
    assert enrolled < codeword  # the tiny run, like every run measured: prototype is better
    samples = enrollment_dir(voice_dir, 0, tmp_path)
    for case, (codeword_eer, expected) in {"as run": (codeword, "prototype"),
                                           "codeword better": (enrolled / 2, "codeword")}.items():  # fmt: skip
        report["splits"]["test_known"]["eer"] = codeword_eer
        report_path.write_text(json.dumps(report))
        bundle_path = tmp_path / f"{expected}.uvb"
        assert main([str(feduv_run_copy), "--force", "--out", str(bundle_path)]) == 0, case
        manifest = Bundle(bundle_path).manifest
        training = manifest.training
        assert training is not None and training.privacy is None
        assert training.enrollment == expected, case
        by_enrollment = manifest.extra["provenance"]["metrics_by_enrollment"]
        assert by_enrollment["test_known"] == enrolled
        assert manifest.extra["provenance"]["metrics"]["test_known"] == codeword_eer
        verifier = Verifier(bundle_path, store=tmp_path / expected, passphrase=PASSPHRASE)
        verifier.new_codeword(user_id=3)
        assert verifier.enroll(samples, far=None).mode == expected, case


def test_a_run_without_a_report_states_its_plans_privacy_and_enrolls_by_prototype(
    dp_feduv_run: Path, tiny_feduv_run: Path, tmp_path: Path, monkeypatch
) -> None:
    """A run folder stopped before its evaluation (no report.json) still gets ``training``: the
    privacy of its plan (the ε of all its rounds), prototype mode (nothing measured)."""
    import shutil

    monkeypatch.setenv("UVTRAIN_DATA", str(tiny_feduv_run.parent / "data"))
    stopped = tmp_path / "stopped"
    shutil.copytree(dp_feduv_run, stopped)
    spent = json.loads((stopped / "report.json").read_text())["privacy"]
    (stopped / "report.json").unlink()
    assert main([str(stopped), "--force", "--out", str(tmp_path / "s.uvb")]) == 0
    training = Bundle(tmp_path / "s.uvb").manifest.training
    assert training is not None and training.enrollment == "prototype"
    assert training.privacy is not None
    assert (training.privacy.epsilon, training.privacy.delta) == (spent["epsilon"], spent["delta"])
