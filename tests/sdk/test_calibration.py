"""Calibrated thresholds: the table (measured, validated, round-tripped through a bundle), the
floor enrollment applies, ``--far``, and templates and bundles from before calibration."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from uvexport.bundle import write_bundle
from uvexport.calibrate import calibrate_bundle
from uvexport.cli import main as uvexport_main
from uvsdk import Verifier
from uvsdk.bundle import Bundle, Manifest
from uvsdk.calibration import (
    FAR_GRID,
    MIN_FALSE_ACCEPTS,
    Calibration,
    check_far,
    enrollment_trials,
    table_from_scores,
)
from uvsdk.cli import app
from uvsdk.errors import BundleError, CalibrationError
from uvsdk.template import Template
from uvtrain.data.formant import voice_corpus

from ..conftest import PASSPHRASE, SAMPLE_RATE, enrollment_dir, held_out

runner = CliRunner()


def samples_of(voice_dir: Path, speaker: int, where: Path) -> Path:
    """A fresh samples folder with the speaker's enrollment clips, under ``where``."""
    where.mkdir(parents=True, exist_ok=True)
    return enrollment_dir(voice_dir, speaker, where)


def uvsdk(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args], env={"UVSDK_PASSPHRASE": PASSPHRASE})


@pytest.fixture(scope="session")
def people_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twenty calibration people (other voices than the test corpus's), eight clips each."""
    import soundfile as sf

    root = tmp_path_factory.mktemp("people")
    for person, clips in enumerate(voice_corpus(20, 8, 2.5, SAMPLE_RATE, seed=2024)):
        folder = root / f"person{person:02d}"
        folder.mkdir()
        for index, clip in enumerate(clips):
            sf.write(folder / f"c{index}.wav", clip, SAMPLE_RATE, subtype="PCM_16")
    return root


@pytest.fixture(scope="session")
def calibrated_bundle(
    spectral_bundle: Path, people_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    out = tmp_path_factory.mktemp("calibrated") / "calibrated.uvb"
    path, _ = calibrate_bundle(spectral_bundle, people_dir, out, data="synthetic test people")
    return path


# -- the table -----------------------------------------------------------------------------


def test_table_states_only_what_its_trials_resolve_and_each_row_holds() -> None:
    rng = np.random.default_rng(0)
    genuine, impostor = rng.normal(0.8, 0.1, 400), rng.normal(0.2, 0.15, 5000)
    table = table_from_scores("prototype", genuine, impostor, people=40, enroll_samples=5)
    assert table.fars == tuple(f for f in FAR_GRID if f * 5000 >= MIN_FALSE_ACCEPTS)
    assert min(table.fars) == 0.002
    for row in table.rows:
        assert np.mean(impostor >= row.threshold) <= row.far  # the stated FAR is not exceeded
        assert row.false_accepts == np.count_nonzero(impostor >= row.threshold)
        # the smallest such threshold: one impostor more would be accepted just below it
        assert np.count_nonzero(impostor >= np.nextafter(row.threshold, -np.inf)) > row.far * 5000
        assert row.frr == pytest.approx(np.mean(genuine < row.threshold))
    thresholds = [row.threshold for row in table.rows]
    assert thresholds == sorted(thresholds)


def test_too_few_impostor_trials_state_no_far() -> None:
    with pytest.raises(ValueError, match="cannot state any FAR"):
        table_from_scores("prototype", np.ones(3), np.zeros(15), people=2, enroll_samples=5)


def test_a_requested_far_takes_the_stricter_row_and_one_below_the_table_is_refused() -> None:
    impostor = np.linspace(-1, 1, 2000)
    table = table_from_scores("prototype", np.ones(10), impostor, people=5, enroll_samples=5)
    assert table.row_for(0.03).far == 0.02
    assert table.row_for(0.01).far == 0.01
    with pytest.raises(CalibrationError, match="FAR down to 0.005 .2000 impostor trials"):
        table.row_for(0.001)


@pytest.mark.parametrize("far", [0, -0.1, 0.51, 1, math.nan, math.inf, "x"])
def test_far_outside_the_open_interval_is_refused(far: object) -> None:
    with pytest.raises(CalibrationError, match=r"FAR must be"):
        check_far(far)  # type: ignore[arg-type]


def test_calibration_round_trips_through_a_bundle(calibrated_bundle: Path) -> None:
    manifest = Bundle(calibrated_bundle).manifest
    calibration = manifest.calibration
    assert calibration is not None and set(calibration.tables) == {"prototype"}
    table = calibration.tables["prototype"]
    assert (table.people, table.enroll_samples) == (20, 5)
    assert table.genuine_trials == 20 * 3 and table.impostor_trials == 20 * 19 * 8
    assert calibration.data == "synthetic test people: 20 people; 160 samples used, 0 unusable"
    again = Manifest.from_dict(json.loads(json.dumps(manifest.to_dict())))
    assert again.calibration == calibration and again.calibration.sha256 == calibration.sha256
    assert "calibration" not in manifest.extra


def _broken(calibrated_bundle: Path, tmp_path: Path, change) -> Path:
    bundle = Bundle(calibrated_bundle)
    data = bundle.manifest.to_dict()
    change(data["calibration"])
    manifest_bytes = json.dumps(data).encode()
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "manifest.json").write_bytes(manifest_bytes)
    (folder / "model.onnx").write_bytes(bundle.model_bytes)
    return folder


def _rows(c: dict) -> list:
    return c["prototype"]["rows"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: _rows(c)[1].update(threshold=_rows(c)[0]["threshold"] - 0.1), "must not fall"),
        (lambda c: _rows(c)[0].update(threshold=math.nan), "finite"),
        (lambda c: _rows(c)[0].update(threshold="0.5"), "must be a number"),
        (lambda c: _rows(c).reverse(), "strictly decreasing FAR"),
        (lambda c: _rows(c)[0].update(false_accepts=10**6), "exceed FAR"),
        (lambda c: _rows(c)[0].update(false_accepts=-1), "integer >= 0"),
        (lambda c: _rows(c)[0].update(frr=0.999), "disagree"),
        (
            lambda c: c["prototype"].update(
                impostor_trials=100, rows=[dict(_rows(c)[3], far=0.05, false_accepts=5)]
            ),
            "fewer than 10 expected",
        ),
        (lambda c: c["prototype"].update(rows=[]), "non-empty list"),
        (lambda c: c.update(version=2), "calibration version"),
        (lambda c: c.update(extra=1), "unknown key"),
        (lambda c: c.pop("prototype"), "no table"),
        (lambda c: c.update(codeword=c["prototype"]), "needs a codeword bundle"),
    ],
)
def test_a_damaged_table_is_refused_naming_the_key(
    calibrated_bundle: Path, tmp_path: Path, change, message: str
) -> None:
    with pytest.raises(BundleError, match=message):
        Bundle(_broken(calibrated_bundle, tmp_path, change))


# -- the decision ----------------------------------------------------------------------------


def test_an_enrolled_threshold_is_never_below_the_floor(
    calibrated_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    table = Bundle(calibrated_bundle).manifest.calibration.tables["prototype"]
    for far in table.fars:
        for speaker in (0, 3):
            store = tmp_path / f"s{far}-{speaker}"
            verifier = Verifier(calibrated_bundle, store=store, passphrase=PASSPHRASE, far=far)
            report = verifier.enroll(
                samples_of(voice_dir, speaker, tmp_path / f"in-{far}-{speaker}"), user="u"
            )
            template = verifier.store.load("u")
            assert template.threshold >= table.row_for(far).threshold
            assert (template.far, template.calibration) == (
                far,
                verifier.bundle.manifest.calibration.sha256,
            )
            assert report.calibrated and report.far == far and report.expected_far


def test_warmup_only_and_an_uncalibrated_bundle_keep_the_old_rule(
    spectral_bundle: Path, calibrated_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    thresholds = []
    for bundle, far in ((spectral_bundle, 0.01), (calibrated_bundle, None)):
        store = tmp_path / f"s{len(thresholds)}"
        verifier = Verifier(bundle, store=store, passphrase=PASSPHRASE, far=far)
        report = verifier.enroll(samples_of(voice_dir, 1, store.with_suffix(".in")), user="u")
        template = verifier.store.load("u")
        assert not report.calibrated and template.far is None and template.calibration is None
        thresholds.append(template.threshold)
    assert thresholds[0] == pytest.approx(thresholds[1])  # same model, same warm-up rule


def test_the_floor_cuts_impostors_on_the_test_voices(
    calibrated_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    """Enrolled at FAR 1 %, the synthetic test speakers accept fewer impostors than warm-up alone
    (and never more)."""
    accepted = {}
    for far in (None, 0.01):
        store = tmp_path / f"s{far}"
        verifier = Verifier(calibrated_bundle, store=store, passphrase=PASSPHRASE, far=far)
        count = 0
        for speaker in range(10):
            verifier.enroll(
                samples_of(voice_dir, speaker, tmp_path / f"in{far}-{speaker}"), user=f"u{speaker}"
            )
            for other in range(10):
                if other != speaker:
                    for clip in held_out(voice_dir, other):
                        count += verifier.verify(clip, user=f"u{speaker}", backoff=False).accepted
        accepted[far] = count
    assert accepted[0.01] <= accepted[None]
    assert accepted[0.01] <= 0.05 * 10 * 9 * 2


def test_far_below_the_calibration_is_refused_before_any_work(
    calibrated_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    verifier = Verifier(calibrated_bundle, store=store, passphrase=PASSPHRASE)
    with pytest.raises(CalibrationError, match="cannot be stated"):
        verifier.enroll(enrollment_dir(voice_dir, 0, tmp_path), far=1e-4)
    assert not store.exists() or not any(store.iterdir())


def test_varied_samples_get_re_record_advice(
    calibrated_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    """A floor above most of the user's own leave-one-out scores: enrolled, with advice."""
    bundle = Bundle(calibrated_bundle)
    calibration = bundle.manifest.calibration
    table = calibration.tables["prototype"]
    rows = tuple(dataclasses.replace(row, threshold=0.9999) for row in table.rows)
    strict = Calibration("strict", {"prototype": dataclasses.replace(table, rows=rows)})
    manifest = dataclasses.replace(bundle.manifest, calibration=strict)
    path = write_bundle(tmp_path / "strict.uvb", bundle.model_bytes, manifest)
    verifier = Verifier(path, store=tmp_path / "store", passphrase=PASSPHRASE)
    report = verifier.enroll(enrollment_dir(voice_dir, 2, tmp_path))
    assert report.floored and report.own_rejected >= 5
    assert report.advice and "Re-record" in report.advice


def test_a_template_from_before_calibration_still_loads() -> None:
    template = Template(user="old", created=1.0, mode="prototype", threshold=0.5, target_tpr=0.95)
    data = json.loads(template.to_payload())
    del data["far"], data["calibration"]
    data["prototype"] = base64.b64encode(np.ones(4, "<f4").tobytes()).decode()
    loaded = Template.from_payload(json.dumps(data).encode())
    assert loaded.is_enrolled and loaded.far is None and loaded.calibration is None


# -- the commands ------------------------------------------------------------------------------


def test_enroll_states_the_expected_rates_and_info_shows_the_table(
    calibrated_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    samples = enrollment_dir(voice_dir, 4, tmp_path)
    result = uvsdk("enroll", "--samples", samples, "--bundle", calibrated_bundle, "--store", store)
    assert result.exit_code == 0, result.stderr
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith("expected on the bundle's calibration people: FAR ")
    assert "FRR " in line and "(--far 0.01; set by " in line
    info = uvsdk("info", "--bundle", calibrated_bundle, "--store", store)
    assert info.exit_code == 0
    assert "calibration: synthetic test people" in info.stdout
    assert "prototype: 20 people, enrolled on 5 samples, 3040 impostor / 60 genuine" in info.stdout
    assert "FAR 0.01    at score >= " in info.stdout
    template = Verifier(calibrated_bundle, store=store, passphrase=PASSPHRASE).store.load("default")
    assert f"{template.threshold:+.4f}" not in result.stdout  # the user's own threshold: never


def test_uncalibrated_enroll_says_no_far_is_stated(
    spectral_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    samples = enrollment_dir(voice_dir, 4, tmp_path)
    result = uvsdk(
        "enroll", "--samples", samples, "--bundle", spectral_bundle, "--store", tmp_path / "s"
    )
    assert result.exit_code == 0, result.stderr
    assert "no false-accept rate is stated: this bundle has no calibration" in result.stdout
    info = uvsdk("info", "--bundle", spectral_bundle, "--store", tmp_path / "s")
    assert "calibration: none" in info.stdout


@pytest.mark.parametrize("far", ["0", "-0.01", "0.6", "nan", "abc", "0.0001"])
def test_bad_far_is_one_line_and_exit_2_and_writes_nothing(
    calibrated_bundle: Path, voice_dir: Path, tmp_path: Path, far: str
) -> None:
    store = tmp_path / "store"
    samples = enrollment_dir(voice_dir, 0, tmp_path)
    result = uvsdk(
        "enroll",
        "--samples",
        samples,
        "--bundle",
        calibrated_bundle,
        "--store",
        store,
        "--far",
        far,
    )
    assert result.exit_code == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("uvsdk: error"), result.stderr
    assert "FAR" in lines[0] or "--far" in lines[0]
    assert not store.exists() or not any(p.suffix == ".uvt" for p in store.rglob("*"))


def test_uvexport_calibrate_command(
    spectral_bundle: Path, people_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "c.uvb"
    assert (
        uvexport_main(["calibrate", str(spectral_bundle), str(people_dir), "--out", str(out)]) == 0
    )
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed
    assert (
        "calibration (prototype): 20 people, 3040 impostor / 60 genuine trials; FAR 0.05" in printed
    )
    assert Bundle(out).manifest.calibration is not None
    assert Bundle(out).manifest.model_sha256 == Bundle(spectral_bundle).manifest.model_sha256
    # too few people: one line, exit 2, nothing written
    lonely = tmp_path / "lonely"
    (lonely / "a").mkdir(parents=True)
    (lonely / "a" / "x.wav").write_bytes((people_dir / "person00" / "c0.wav").read_bytes())
    assert (
        uvexport_main(
            ["calibrate", str(spectral_bundle), str(lonely), "--out", str(tmp_path / "n.uvb")]
        )
        == 2
    )
    assert "at least 2 are needed" in capsys.readouterr().err
    assert not (tmp_path / "n.uvb").exists()


def test_codeword_bundles_calibrate_against_codewords_of_their_code(
    initial_codeword_bundle: Path, people_dir: Path, tmp_path: Path
) -> None:
    path, calibration = calibrate_bundle(initial_codeword_bundle, people_dir, tmp_path / "cw.uvb")
    assert set(calibration.tables) == {"prototype", "codeword"}
    table = calibration.tables["codeword"]
    assert table.genuine_trials == 0 and all(row.frr is None for row in table.rows)
    assert table.impostor_trials == 160 * 20 * 16
    assert Bundle(path).manifest.calibration == calibration


def test_calibration_trials_enroll_as_the_sdk_does() -> None:
    rng = np.random.default_rng(1)
    vectors = {f"p{i}": rng.normal(size=(8, 6)) for i in range(3)}
    warmup, genuine, impostor = enrollment_trials(vectors, 5)
    assert {len(v) for v in warmup.values()} == {5}
    assert {len(v) for v in genuine.values()} == {3}
    assert {len(v) for v in impostor.values()} == {16}


def test_a_face_bundle_calibrates_on_orl_by_name(tmp_path: Path) -> None:
    from uvexport.bundle import make_manifest
    from uvexport.reference import image_embedding_model
    from uvsdk.bundle import ImageInput

    model = image_embedding_model(32, 32, 1, dim=16)
    manifest = make_manifest(
        model,
        name="faces",
        method="reference",
        source=ImageInput(32, 32, 1),
        output_kind="embedding",
        dim=16,
    )
    bundle = write_bundle(tmp_path / "faces.uvb", model, manifest)
    path, calibration = calibrate_bundle(bundle, "orl-faces", tmp_path / "faces-orl.uvb")
    table = calibration.tables["prototype"]
    assert (
        calibration.data.startswith("ORL / AT&T")
        and "40 people; 400 samples used" in calibration.data
    )
    assert (table.people, table.genuine_trials, table.impostor_trials) == (40, 40 * 5, 40 * 39 * 10)
    assert Bundle(path).manifest.calibration == calibration
