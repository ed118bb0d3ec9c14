"""``uvexport``: a trained run folder → a signed bundle the SDK runs, with the trainer's scores."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from typer.testing import CliRunner  # noqa: E402

from uvexport.cli import main  # noqa: E402
from uvsdk.bundle import Bundle  # noqa: E402
from uvsdk.errors import SignatureError  # noqa: E402
from uvsdk.scoring import codeword_scores  # noqa: E402
from uvtrain.cli import app  # noqa: E402

TINY = ["--dataset", "formant-voices", "--clients", "8", "--fraction", "0.5", "--batch-size", "4"]


@pytest.fixture(scope="module")
def feduv_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("export")
    out = root / "run"
    result = CliRunner().invoke(
        app,
        ["run", "--method", "feduv", *TINY, "--rounds", "2", "--out", str(out)],
        env={"UVTRAIN_DATA": str(root / "data")},
    )
    assert result.exit_code == 0, result.output
    return out


def test_export_signed_bundle_scores_like_the_trainer(
    feduv_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("UVTRAIN_DATA", str(feduv_run.parent / "data"))
    key = tmp_path / "key.pem"
    assert main(["keygen", "--out", str(key)]) == 0
    assert main(["keygen", "--out", str(key)]) == 2  # never overwrites a key
    bundle_path = tmp_path / "voice.uvb"
    assert main([str(feduv_run), "--out", str(bundle_path), "--sign-key", str(key)]) == 0
    printed = capsys.readouterr().out
    assert "max abs difference" in printed and "signed" in printed

    bundle = Bundle(bundle_path, trusted_keys=[tmp_path / "key.pub.pem"])
    manifest = bundle.manifest
    assert manifest.method == "feduv" and manifest.output_kind == "codeword"
    assert manifest.dim == 127 and manifest.code is not None and manifest.code.n == 127
    assert manifest.extra["parity"]["max_abs_diff"] <= manifest.extra["parity"]["tolerance"]
    assert manifest.extra["provenance"]["rounds"] == 2

    # The SDK's scores from the bundle equal the trainer's scores from the checkpoint.
    from uvtrain.run import load_run

    config, dataset, simulation = load_run(feduv_run)
    model = simulation.load_into_model().eval()
    from uvsdk.codeword import bipolar
    from uvtrain.algorithms.feduv import client_codewords

    codewords = np.stack([bipolar(b) for b in client_codewords(8, 127, config.seed)])
    clips = np.concatenate([client.test for client in dataset.clients])
    with torch.no_grad():
        trainer = codeword_scores(codewords, model(torch.as_tensor(clips)).numpy())
    sdk = codeword_scores(codewords, bundle.run(clips))
    assert np.abs(sdk - trainer).max() < 1e-5  # scores are cosines in [-1, 1]
    # Other lengths and batch sizes run too (dynamic axes).
    assert bundle.run(clips[:3, :12345]).shape == (3, 127)

    other = tmp_path / "other.pem"
    assert main(["keygen", "--out", str(other)]) == 0
    with pytest.raises(SignatureError):
        Bundle(bundle_path, trusted_keys=[tmp_path / "other.pub.pem"])


def test_export_errors_are_one_line_exit_2(tmp_path: Path, capsys) -> None:
    assert main([str(tmp_path), "--out", str(tmp_path / "x.uvb")]) == 2
    assert "is not a run folder" in capsys.readouterr().err
    assert not (tmp_path / "x.uvb").exists()
    (tmp_path / "bad.pem").write_text("not a key")
    assert (
        main(
            [
                str(tmp_path),
                "--out",
                str(tmp_path / "x.uvb"),
                "--sign-key",
                str(tmp_path / "bad.pem"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "signing key" in err and len(err.strip().splitlines()) == 1


def test_manifest_reports_only_public_figures(feduv_run: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("UVTRAIN_DATA", str(feduv_run.parent / "data"))
    assert main([str(feduv_run), "--out", str(tmp_path / "v.uvb")]) == 0
    text = json.dumps(Bundle(tmp_path / "v.uvb").manifest.to_dict())
    assert "codeword" in text  # the output kind, and nothing per user:
    for secret in ("threshold", "prototype", "private"):
        assert secret not in text
