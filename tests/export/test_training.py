"""``uvexport`` states how a run was trained in the manifest's ``training`` (docs/spec.md §3.10),
and a DP-trained FedUV bundle enrolls by prototype unless codeword mode is asked for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from uvexport.cli import main  # noqa: E402
from uvexport.provenance import run_training  # noqa: E402
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
    assert main([str(dp_feduv_run), "--out", str(bundle_path)]) == 0
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
    assert run_training({"privacy": None}, "feduv", "codeword")["enrollment"] == "codeword"
    assert run_training({"privacy": None}, "fedhide", "embedding")["enrollment"] == "prototype"
    assert run_training({"privacy": privacy}, "fedhide", "embedding")["enrollment"] == "prototype"
