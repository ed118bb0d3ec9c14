"""``uvexport fuse``: two embedding bundles as one model whose cosine is the weighted mean of
theirs; what it refuses, in one line and exit 2, leaving nothing behind."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import (
    AUDIO,
    CALIBRATION_CONDITIONS,
    PASSPHRASE,
    SAMPLE_RATE,
    audio_bundle,
    enrollment_dir,
    held_out,
)
from uvexport.bundle import make_manifest, write_bundle
from uvexport.cli import main
from uvexport.reference import spectral_embedding_model
from uvsdk import Bundle, Verifier
from uvsdk.inputs import AudioInput


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory, spectral_bundle: Path) -> tuple[Path, Path]:
    """The tests' spectral embedding bundle (40 bands, centred) and another of 24 bands."""
    other = spectral_embedding_model(SAMPLE_RATE, 24, fmin=100.0)
    folder = tmp_path_factory.mktemp("fuse")
    return spectral_bundle, audio_bundle(folder / "bands24.uvb", other, "embedding", 24)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_a_fused_bundle_scores_the_weighted_mean_of_its_two_models_cosines(
    parts: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    first, second = parts
    out = tmp_path / "fused.uvb"
    assert main(["fuse", str(first), str(second), "--out", str(out), "--weight", "0.7"]) == 0
    printed = capsys.readouterr().out
    assert "wrote" in printed and "uvexport calibrate" in printed
    fused, a, b = Bundle(out), Bundle(first), Bundle(second)
    assert fused.manifest.dim == 64 and fused.manifest.output_kind == "embedding"
    fusion = fused.manifest.extra["fusion"]
    assert fusion["weight"] == 0.7 and fusion["max_abs_diff"] <= fusion["tolerance"]
    assert [p["model_sha256"] for p in fusion["parts"]] == [
        a.manifest.model_sha256,
        b.manifest.model_sha256,
    ]
    assert fused.manifest.calibration is None and fused.manifest.cohort is None
    rng = np.random.default_rng(1)
    windows = (0.1 * rng.standard_normal((5, 2 * SAMPLE_RATE))).astype(np.float32)
    joined, ea, eb = fused.run(windows), _unit(a.run(windows)), _unit(b.run(windows))
    np.testing.assert_allclose(
        joined, np.concatenate([np.sqrt(0.7) * ea, np.sqrt(0.3) * eb], axis=1), atol=1e-6
    )
    cosines = _unit(joined) @ _unit(joined).T
    np.testing.assert_allclose(cosines, 0.7 * (ea @ ea.T) + 0.3 * (eb @ eb.T), atol=1e-5)


def test_the_sdk_enrolls_and_verifies_with_a_fused_bundle_and_it_calibrates(
    parts: tuple[Path, Path],
    tmp_path: Path,
    voice_dir: Path,
    people_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fused bundle is an embedding bundle like any other: the SDK enrolls a user on it and
    scores their held-out clips above a stranger's, and ``uvexport calibrate`` gives it a cohort
    and a table."""
    from uvexport.calibrate import calibrate_bundle

    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    fused = tmp_path / "fused.uvb"
    assert main(["fuse", str(parts[0]), str(parts[1]), "--out", str(fused)]) == 0
    calibrated, calibration = calibrate_bundle(
        fused,
        people_dir,
        tmp_path / "calibrated.uvb",
        conditions=CALIBRATION_CONDITIONS,
        cohort_size=64,
    )
    assert Bundle(calibrated).manifest.cohort.count == 64
    assert calibration.tables["prototype"].people > 0
    verifier = Verifier(fused, store=tmp_path / "store")
    verifier.enroll(enrollment_dir(voice_dir, 0, tmp_path), user="ann")
    owner = [verifier.verify(clip, user="ann").score for clip in held_out(voice_dir, 0)]
    stranger = [verifier.verify(clip, user="ann").score for clip in held_out(voice_dir, 1)]
    assert min(owner) > max(stranger)  # (the 24-band part alone scores everyone above 0.98)


def _members(path: Path) -> set[str]:
    return set(zipfile.ZipFile(path).namelist())


@pytest.mark.parametrize("case", ["weight", "missing", "codeword", "input", "privacy"])
def test_fuse_refuses_in_one_line_and_writes_nothing(
    case: str,
    parts: tuple[Path, Path],
    initial_codeword_bundle: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    first, second = parts
    model = spectral_embedding_model(SAMPLE_RATE, 24)
    extra: list[str] = []
    expected = ""
    if case == "weight":
        extra, expected = ["--weight", "1"], "--weight must be between 0 and 1"
    elif case == "missing":
        second, expected = tmp_path / "nothing.uvb", "not found"
    elif case == "codeword":
        second, expected = initial_codeword_bundle, "only embedding models fuse"
    elif case == "input":
        other = AudioInput(
            sample_rate=SAMPLE_RATE, window_seconds=1.5, hop_seconds=1.0, min_seconds=0.5
        )
        manifest = make_manifest(
            model, name="w15", method="reference", source=other, output_kind="embedding", dim=24
        )
        second = write_bundle(tmp_path / "w15.uvb", model, manifest)
        expected = "take different inputs"
    elif case == "privacy":
        training = {
            "method": "fedhide",
            "privacy": {
                "mechanism": "central",
                "epsilon": 8.0,
                "delta": 1e-5,
                "simulated_deployment": False,
                "membership_eer_floor": 0.3,
            },
            "enrollment": "prototype",
        }
        manifest = make_manifest(
            model,
            name="dp",
            method="fedhide",
            source=AUDIO,
            output_kind="embedding",
            dim=24,
            extra={"training": training},
        )
        second = write_bundle(tmp_path / "dp.uvb", model, manifest)
        expected = "trained with differential privacy"
    out = tmp_path / "fused.uvb"
    status = main(["fuse", str(first), str(second), "--out", str(out), *extra])
    err = capsys.readouterr().err
    assert status == 2 and expected in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    assert json.loads(zipfile.ZipFile(first).read("manifest.json"))["output"]["dim"] == 40
    assert "model.onnx" in _members(first)  # the inputs are untouched
