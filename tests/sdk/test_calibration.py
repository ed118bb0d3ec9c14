"""Calibrated thresholds: the table (measured in several recording conditions, validated,
round-tripped through a bundle), the threshold enrollment takes from it, ``--far``, and templates
and bundles from before calibration."""

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
    THRESHOLD_FLOOR,
    Calibration,
    HeldOut,
    HeldOutRow,
    Row,
    Table,
    check_far,
    user_threshold,
)
from uvsdk.cli import app
from uvsdk.errors import BundleError, CalibrationError
from uvsdk.measurement import enrollment_trials, far_threshold, measure, table_from_scores
from uvsdk.scoring import warmup_threshold
from uvsdk.template import Template

from ..conftest import CALIBRATION_CONDITIONS, PASSPHRASE, enrollment_dir, held_out

runner = CliRunner()


def samples_of(voice_dir: Path, speaker: int, where: Path) -> Path:
    """A fresh samples folder with the speaker's enrollment clips, under ``where``."""
    where.mkdir(parents=True, exist_ok=True)
    return enrollment_dir(voice_dir, speaker, where)


def uvsdk(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args], env={"UVSDK_PASSPHRASE": PASSPHRASE})


# -- the table -----------------------------------------------------------------------------


def test_table_states_only_what_its_trials_resolve_and_each_row_holds() -> None:
    rng = np.random.default_rng(0)
    genuine, impostor = rng.normal(0.8, 0.1, 400), rng.normal(0.2, 0.15, 5000)
    table = table_from_scores(
        "prototype", {"clean": (genuine, impostor)}, people=40, enroll_samples=5, score="cosine"
    )
    assert (table.score, table.conditions) == ("cosine", ("clean",))
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
        table_from_scores(
            "prototype",
            {"clean": (np.ones(3), np.zeros(15))},
            people=2,
            enroll_samples=5,
            score="cosine",
        )
    with pytest.raises(ValueError, match="cannot state any FAR"):  # the fewest decide
        table_from_scores(
            "prototype",
            {"clean": (np.ones(3), np.zeros(5000)), "long": (np.ones(3), np.zeros(15))},
            people=2,
            enroll_samples=5,
            score="cosine",
        )


def test_a_requested_far_takes_the_stricter_row_and_one_below_the_table_is_refused() -> None:
    impostor = np.linspace(-1, 1, 2000)
    table = table_from_scores(
        "prototype", {"clean": (np.ones(10), impostor)}, people=5, enroll_samples=5, score="cosine"
    )
    assert table.row_for(0.03).far == 0.02
    assert table.row_for(0.01).far == 0.01
    with pytest.raises(CalibrationError, match="FAR down to 0.005 .2000 impostor trials"):
        table.row_for(0.001)


def test_the_worst_condition_decides_each_row_and_the_counts_are_pooled() -> None:
    """Two conditions, telephone impostors scoring higher: each row's threshold is the larger of
    the two conditions' own thresholds, and the false accepts and the FRR are counted over both."""
    rng = np.random.default_rng(3)
    trials = {
        "clean": (rng.normal(0.8, 0.1, 300), rng.normal(0.1, 0.15, 4000)),
        "telephone-gsm": (rng.normal(0.7, 0.15, 200), rng.normal(0.3, 0.15, 3000)),
    }
    table = table_from_scores("prototype", trials, people=30, enroll_samples=5, score="cosine")
    assert table.conditions == ("clean", "telephone-gsm")
    assert (table.genuine_trials, table.impostor_trials) == (500, 7000)
    # the condition with fewer impostor trials decides which FARs can be stated
    assert table.fars == tuple(f for f in FAR_GRID if f * 3000 >= MIN_FALSE_ACCEPTS)
    genuine = np.concatenate([g for g, _ in trials.values()])
    impostor = np.concatenate([i for _, i in trials.values()])
    telephone_decided = 0
    for row in table.rows:
        own = {name: far_threshold(i, row.far) for name, (_, i) in trials.items()}
        assert row.threshold == max(own.values())
        telephone_decided += own["telephone-gsm"] > own["clean"]
        for _, condition_impostors in trials.values():  # the FAR holds in every condition
            assert np.mean(condition_impostors >= row.threshold) <= row.far
        assert row.false_accepts == np.count_nonzero(impostor >= row.threshold)
        assert row.false_rejects == np.count_nonzero(genuine < row.threshold)
        assert row.frr == pytest.approx(np.mean(genuine < row.threshold))
    assert telephone_decided == len(table.rows)  # the harder condition set every row
    # the pooled impostors alone would have allowed a lower threshold: the worst one is stricter
    pooled = table_from_scores(
        "prototype", {"all": (genuine, impostor)}, people=30, enroll_samples=5, score="cosine"
    )
    assert all(
        mine.threshold > theirs.threshold
        for mine, theirs in zip(table.rows, pooled.rows, strict=False)
        if mine.far == theirs.far
    )


def _table(mode: str, threshold: float, genuine: int) -> Calibration:
    frr = 0.05 if genuine else None
    rejects = round(frr * genuine) if genuine else None
    row = Row(0.01, threshold, 10, frr, rejects)
    score = "cosine" if mode == "prototype" else "codeword"
    table = Table(mode, 20, 5 if genuine else 0, genuine, 1000, (row,), score, ("clean",))
    return Calibration("hand-made", {mode: table})


def test_a_prototype_table_sets_the_threshold_even_below_a_higher_warm_up() -> None:
    """An owner whose five clips are very alike has a warm-up threshold above the calibrated
    one: the calibrated one is theirs (the warm-up would lock them out of their next room)."""
    consistent = np.array([0.97, 0.98, 0.985, 0.99, 0.995])
    assert warmup_threshold(consistent, 0.95) == 0.97
    calibration = _table("prototype", 0.6, genuine=100)
    threshold, row = user_threshold(consistent, 0.95, calibration, "prototype", 0.01)
    assert threshold == 0.6 and row is calibration.tables["prototype"].rows[0]
    # a warm-up below the calibrated threshold does not lower it either
    varied = np.array([0.2, 0.5, 0.7, 0.8, 0.9])
    assert user_threshold(varied, 0.95, calibration, "prototype", 0.01)[0] == 0.6
    # no FAR asked: the warm-up rule alone
    assert user_threshold(consistent, 0.95, calibration, "prototype", None) == (0.97, None)


def test_a_codeword_table_still_floors_the_warm_up() -> None:
    """Calibration people hold no trained codeword (no genuine trials): the table only floors."""
    calibration = _table("codeword", 0.3, genuine=0)
    high = np.array([0.8, 0.85, 0.9, 0.92, 0.95])
    assert user_threshold(high, 0.95, calibration, "codeword", 0.01)[0] == 0.8
    low = np.array([0.1, 0.15, 0.2, 0.25, 0.26])
    threshold, row = user_threshold(low, 0.95, calibration, "codeword", 0.01)
    assert threshold == 0.3 and row is not None


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
    conditions = len(CALIBRATION_CONDITIONS)
    assert table.genuine_trials == 20 * 3 * conditions
    assert table.impostor_trials == 20 * 19 * 8 * conditions
    assert (table.score, table.conditions) == ("as-norm", CALIBRATION_CONDITIONS)
    assert manifest.cohort is not None and "cohort" not in manifest.extra
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
    (folder / "cohort.f32").write_bytes(bundle.cohort_bytes)
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
        (lambda c: c.update(version=1), "calibration version"),
        (lambda c: c.update(version=3), "calibration version"),
        (lambda c: c["prototype"].pop("score"), "score must be one of cosine, as-norm"),
        (lambda c: c["prototype"].update(score="cosine"), "calibrated on cosine scores"),
        (lambda c: c["prototype"].update(score="codeword"), "score must be one of"),
        (lambda c: c["prototype"].pop("conditions"), "conditions must be a list of 1 to 32"),
        (lambda c: c["prototype"].update(conditions="clean"), "conditions must be a list"),
        (lambda c: c["prototype"].update(conditions=[]), "conditions must be a list"),
        (lambda c: c["prototype"].update(conditions=["c"] * 33), "conditions must be a list"),
        (lambda c: c["prototype"].update(conditions=["Clean"]), "is not a condition name"),
        (lambda c: c["prototype"].update(conditions=["a" * 33]), "is not a condition name"),
        (lambda c: c["prototype"].update(conditions=[7]), "is not a condition name"),
        (lambda c: c["prototype"].update(conditions=["x", "x"]), "names a condition twice"),
        (lambda c: _rows(c)[-1].update(threshold=1001.0), "threshold"),
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


def test_an_enrolled_prototype_threshold_is_the_tables(
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
            # never below chance, whatever the row says (spec §4.3, version 6)
            assert template.threshold == max(table.row_for(far).threshold, THRESHOLD_FLOOR)
            assert (template.far, template.calibration) == (
                far,
                verifier.bundle.manifest.calibration.sha256,
            )
            assert report.calibrated and report.far == far and report.expected_far


def test_warmup_only_and_an_uncalibrated_bundle_keep_the_old_rule(
    spectral_bundle: Path, calibrated_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    """No calibration, or no FAR asked: the warm-up rule over the leave-one-out scores, raw
    cosines without a cohort and AS-norm normalised with one."""
    from uvsdk.calibration import normalised_leave_one_out
    from uvsdk.scoring import leave_one_out_scores

    for number, (bundle, far) in enumerate(((spectral_bundle, 0.01), (calibrated_bundle, None))):
        store = tmp_path / f"s{number}"
        verifier = Verifier(bundle, store=store, passphrase=PASSPHRASE, far=far)
        samples = samples_of(voice_dir, 1, store.with_suffix(".in"))
        report = verifier.enroll(samples, user="u")
        template = verifier.store.load("u")
        assert not report.calibrated and template.far is None and template.calibration is None
        vectors = np.stack([verifier.embed(clip) for clip in sorted(samples.iterdir())])
        cohort = verifier.bundle.cohort
        scores = (
            leave_one_out_scores(vectors)
            if cohort is None
            else normalised_leave_one_out(vectors, cohort)
        )
        assert template.threshold == pytest.approx(warmup_threshold(scores, 0.95), abs=1e-9)
        assert (cohort is None) == (template.cohort is None)


def test_the_calibrated_threshold_cuts_impostors_on_the_test_voices(
    calibrated_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    """Enrolled at FAR 1 %, the synthetic test speakers (other voices than the calibration's)
    accept at most 5 % of impostor clips, and no more than at FAR 5 %."""
    accepted = {}
    for far in (0.05, 0.01):
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
    assert accepted[0.01] <= accepted[0.05]
    assert accepted[0.01] <= 0.05 * 10 * 9 * 2, f"{accepted[0.01]} of 180 impostor clips accepted"


def test_the_owner_is_accepted(calibrated_bundle: Path, voice_dir: Path, tmp_path: Path) -> None:
    """Each synthetic test speaker enrolled from 5 clips: at least 95 % of their 3 fresh clips
    are accepted, pooled over the speakers, at the strictest FAR whose calibrated FRR is at most
    5 % (the spectral test model is weak: at FAR 1 % its calibration states an FRR near 50 %)."""
    table = Bundle(calibrated_bundle).manifest.calibration.tables["prototype"]
    far = min(row.far for row in table.rows if row.frr is not None and row.frr <= 0.05)
    verifier = Verifier(calibrated_bundle, store=tmp_path / "s", passphrase=PASSPHRASE, far=far)
    accepted = trials = 0
    for speaker in range(10):
        samples = enrollment_dir(voice_dir, speaker, tmp_path, count=5)
        verifier.enroll(samples, user=f"u{speaker}")
        for clip in held_out(voice_dir, speaker, first=5):
            accepted += verifier.verify(clip, user=f"u{speaker}", backoff=False).accepted
            trials += 1
    assert trials == 30
    assert accepted >= 0.95 * trials, (
        f"{accepted} of {trials} fresh owner clips accepted ({accepted / trials:.0%}) at FAR {far}"
    )


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
    rows = tuple(dataclasses.replace(row, threshold=999.0) for row in table.rows)  # AS-norm
    strict = Calibration("strict", {"prototype": dataclasses.replace(table, rows=rows)})
    manifest = dataclasses.replace(bundle.manifest, calibration=strict)
    path = write_bundle(
        tmp_path / "strict.uvb", bundle.model_bytes, manifest, cohort=bundle.cohort_bytes
    )
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
    table = Bundle(calibrated_bundle).manifest.calibration.tables["prototype"]
    row = table.row_for(0.01)
    one_in = round(1 / row.frr)
    assert line == (
        "About 1 in 100 attempts by someone else would be accepted, and about "
        f"1 in {one_in} of your own (FRR {row.frr:.3f}) rejected, as measured on 20 people in "
        "2 recording conditions (--far 0.01); strangers recorded unlike them can be accepted far "
        "more often."
    )
    info = uvsdk("info", "--bundle", calibrated_bundle, "--store", store)
    assert info.exit_code == 0
    assert "calibration: synthetic test people" in info.stdout
    assert "prototype: 20 people, enrolled on 5 samples, 6080 impostor / 120 genuine" in info.stdout
    assert (
        "as-norm scores, in 2 recording condition(s), the worst deciding: clean, telephone-gsm"
        in info.stdout
    )
    assert "FAR 0.01    at score >= " in info.stdout
    manifest = Bundle(calibrated_bundle).manifest
    count, top_k = manifest.cohort.count, manifest.score_norm.top_k
    assert (
        f"score normalisation: AS-norm over the {top_k} nearest of {count:,} cohort" in info.stdout
    )
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
    assert result.stdout.strip().splitlines()[-1] == (
        "No false-accept rate is stated: this bundle has no calibration for prototype mode, "
        "so what is accepted rests on your own samples alone."
    )
    info = uvsdk("info", "--bundle", spectral_bundle, "--store", tmp_path / "s")
    assert "calibration: none" in info.stdout
    assert "score normalisation: none (prototype scores are raw cosines)" in info.stdout


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
    arguments = ["calibrate", str(spectral_bundle), str(people_dir), "--out", str(out)]
    chosen = ["--conditions", "clean,telephone-gsm", "--cohort-size", "64"]
    assert uvexport_main([*arguments, *chosen]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed
    assert (
        "calibration (prototype, as-norm scores): 20 people, 6080 impostor / 120 genuine trials "
        "in 2 condition(s), the worst deciding; FAR 0.05" in printed
    )
    written = Bundle(out)
    assert written.manifest.calibration.tables["prototype"].conditions == (
        "clean",
        "telephone-gsm",
    )
    assert written.manifest.cohort.count == 64 and len(written.cohort_bytes) == 64 * 40 * 4
    assert written.cohort.vectors.shape == (64, 40)
    assert written.manifest.model_sha256 == Bundle(spectral_bundle).manifest.model_sha256
    # an unknown condition: one line, exit 2, nothing written, before any work
    bogus = tmp_path / "bogus.uvb"
    assert uvexport_main([*arguments[:3], "--out", str(bogus), "--conditions", "bogus"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bogus" in err[0], err
    assert not bogus.exists()
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


def test_uvexport_calibrate_takes_several_folders_of_people_together(
    spectral_bundle: Path, people_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The recipe the model card measures for an app whose users record unlike the shipped
    calibration: the shipped real speech and the app's own people, calibrated on together. Split
    in two folders, the same people give the same calibration and cohort as one folder."""
    everyone = sorted(p for p in people_dir.iterdir() if p.is_dir())
    shipped, own = tmp_path / "shipped", tmp_path / "own"
    for number, person in enumerate(everyone):
        target = (shipped if number < 12 else own) / person.name
        target.parent.mkdir(exist_ok=True)
        target.symlink_to(person, target_is_directory=True)
    chosen = ["--conditions", "clean,telephone-gsm", "--cohort-size", "64"]
    one, two = tmp_path / "one.uvb", tmp_path / "two.uvb"
    assert uvexport_main(["calibrate", str(spectral_bundle), str(people_dir), "--out", str(one), *chosen]) == 0  # fmt: skip
    assert uvexport_main(["calibrate", str(spectral_bundle), str(shipped), str(own), "--out", str(two), *chosen, "--impostors", "all"]) == 0  # fmt: skip
    printed = capsys.readouterr()
    assert "20 people, 6080 impostor / 120 genuine trials" in printed.out
    assert "warning" not in printed.err  # 12 and 8 people: enough of each
    # by default each folder is a recording chain, and the impostor pairs stay within one:
    # (12 x 11 + 8 x 7) pairs x 8 test vectors x 2 conditions
    chains = tmp_path / "chains.uvb"
    assert uvexport_main(["calibrate", str(spectral_bundle), str(shipped), str(own), "--out", str(chains), *chosen]) == 0  # fmt: skip
    assert "20 people, 3008 impostor / 120 genuine trials" in capsys.readouterr().out
    assert Bundle(chains).manifest.calibration.data.endswith(
        "impostors: other people of the same recording chain (2 of 2 chains hold several people)"
    )
    # two chains of several people: each held out in turn, its figures in the table
    held = Bundle(chains).manifest.calibration.tables["prototype"].held_out
    assert held is not None and held.chains == 2 and held.min_seconds == 2.0, held
    assert all(row.genuine_trials > 0 and row.impostor_trials > 0 for row in held.rows)
    assert Bundle(one).manifest.calibration.tables["prototype"].held_out is None  # one chain
    few = tmp_path / "few"
    for person in everyone[:2]:
        (few / person.name).parent.mkdir(exist_ok=True)
        (few / person.name).symlink_to(person, target_is_directory=True)
    rest = tmp_path / "rest"
    for person in everyone[2:]:
        (rest / person.name).parent.mkdir(exist_ok=True)
        (rest / person.name).symlink_to(person, target_is_directory=True)
    three = tmp_path / "three.uvb"
    assert uvexport_main(["calibrate", str(spectral_bundle), str(rest), str(few), "--out", str(three), *chosen]) == 0  # fmt: skip
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and f"{few} holds 2 people" in warnings[0], warnings
    joined = Bundle(two)
    assert joined.manifest.calibration.data.startswith("shipped + own: 20 people")
    assert joined.manifest.calibration.tables == Bundle(one).manifest.calibration.tables
    assert joined.cohort_bytes == Bundle(one).cohort_bytes
    # a real-speech folder (sources.json) whose sources hold one person each: no pairs within a
    # chain, said in one line before any work
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "sources.json").write_text("{}")
    for number, person in enumerate(everyone[:3]):
        (lone / f"source{number}-{person.name}").symlink_to(person, target_is_directory=True)
    alone = tmp_path / "alone.uvb"
    assert uvexport_main(["calibrate", str(spectral_bundle), str(lone), "--out", str(alone), *chosen]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "every recording chain holds one person" in err[0], err
    assert "--impostors all" in err[0] and not alone.exists()
    # one person in two of the folders: one line, exit 2, nothing written
    clash = tmp_path / "clash.uvb"
    assert uvexport_main(["calibrate", str(spectral_bundle), str(shipped), str(people_dir), "--out", str(clash), *chosen]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is in both" in err[0] and everyone[0].name in err[0], err
    assert not clash.exists()


def test_codeword_bundles_calibrate_against_codewords_of_their_code(
    initial_codeword_bundle: Path, people_dir: Path, tmp_path: Path
) -> None:
    path, calibration = calibrate_bundle(
        initial_codeword_bundle, people_dir, tmp_path / "cw.uvb", conditions=("clean",)
    )
    assert set(calibration.tables) == {"prototype", "codeword"}
    table = calibration.tables["codeword"]
    assert table.genuine_trials == 0 and all(row.frr is None for row in table.rows)
    assert (table.score, table.conditions) == ("codeword", ("clean",))
    assert calibration.tables["prototype"].score == "as-norm"  # the cohort: prototype only
    assert table.impostor_trials == 160 * 20 * 16
    assert Bundle(path).manifest.calibration == calibration


def test_calibration_trials_enroll_as_the_sdk_does() -> None:
    rng = np.random.default_rng(1)
    vectors = {f"p{i}": rng.normal(size=(8, 6)) for i in range(3)}
    warmup, genuine, impostor = enrollment_trials(vectors, 5)
    assert {len(v) for v in warmup.values()} == {5}
    assert {len(v) for v in genuine.values()} == {3}
    assert {len(v) for v in impostor.values()} == {16}


def test_impostor_trials_stay_within_a_recording_chain() -> None:
    """With groups, a person's impostor trials are the other people of their own chain only,
    each score what it is among every pair; a person alone in a chain has none."""
    rng = np.random.default_rng(2)
    vectors = {f"p{i}": rng.normal(size=(7 + i, 6)) for i in range(5)}
    groups = {"p0": "a", "p1": "a", "p2": "a", "p3": "b", "p4": "c"}
    _, genuine, impostor = enrollment_trials(vectors, 5, groups=groups)
    _, all_genuine, all_impostor = enrollment_trials(vectors, 5)
    assert {k: len(v) for k, v in impostor.items()} == {"p0": 8 + 9, "p1": 7 + 9, "p2": 7 + 8, "p3": 0, "p4": 0}  # fmt: skip
    # p1's impostors: p0's 7 vectors then p2's 9, the same scores as among everyone
    assert np.array_equal(impostor["p1"], all_impostor["p1"][:16])
    assert all(np.array_equal(genuine[k], all_genuine[k]) for k in vectors)
    table = measure({"clean": vectors}, data="t", enroll_samples=5, groups=groups).tables
    assert table["prototype"].impostor_trials == 8 + 9 + 7 + 9 + 7 + 8


def _chains(seed: int = 3) -> tuple[dict, dict, dict]:
    """Three recording chains of three people each (people of a chain alike: a shared offset),
    12 vectors a person, and the seconds behind each vector (alternately 1 s and 3 s)."""
    rng = np.random.default_rng(seed)
    vectors, seconds, groups = {}, {}, {}
    for chain in "abc":
        offset = rng.normal(size=8)
        for person in range(3):
            name = f"{chain}{person}"
            centre = offset + 0.8 * rng.normal(size=8)
            vectors[name] = centre + 0.7 * rng.normal(size=(12, 8))
            seconds[name] = np.where(np.arange(12) % 2, 3.0, 1.0)
            groups[name] = chain
    return vectors, seconds, groups


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_held_out_figures_match_a_hand_computation() -> None:
    """Each chain held out in turn: thresholds fitted on the other two chains' within-chain
    impostor scores (the table's FARs, each threshold at least the previous one's), then the
    held-out chain's impostor pairs and its genuine clips of >= 2 s counted, here with plain
    numpy cosines."""
    vectors, seconds, groups = _chains()
    calibration = measure({"clean": vectors}, data="t", enroll_samples=3, groups=groups,
                          seconds={"clean": seconds})  # fmt: skip
    table = calibration.tables["prototype"]
    held = table.held_out
    assert isinstance(held, HeldOut) and held.chains == 3 and held.min_seconds == 2.0

    def trials(people: list[str]) -> tuple[np.ndarray, np.ndarray]:
        genuine, impostor = [], []
        for name in people:
            reference = _unit(_unit(vectors[name][:3]).sum(axis=0))
            tests = _unit(vectors[name][3:]) @ reference
            genuine.append(tests[seconds[name][3:] >= 2.0])
            for other in people:
                if other != name:
                    impostor.append(_unit(vectors[other]) @ reference)
        return np.concatenate(genuine), np.concatenate(impostor)

    expected: dict[float, list] = {}
    for chain in "abc":
        inside = [p for p in vectors if groups[p] == chain]
        fit_impostors = np.concatenate(
            [trials([p for p in vectors if groups[p] == other])[1] for other in "abc" if other != chain]
        )  # fmt: skip
        genuine, impostor = trials(inside)
        previous = -np.inf
        for row in table.rows:
            if row.far * fit_impostors.size < MIN_FALSE_ACCEPTS:
                continue
            previous = threshold = max(far_threshold(fit_impostors, row.far), previous)
            expected.setdefault(row.far, []).append(
                (int(np.sum(impostor >= threshold)), impostor.size,
                 int(np.sum(genuine < threshold)), genuine.size)
            )  # fmt: skip
    assert [r.far for r in held.rows] == [far for far in expected if len(expected[far]) >= 2]
    for row in held.rows:
        folds = expected[row.far]
        assert (row.false_accepts, row.impostor_trials, row.false_rejects, row.genuine_trials) == (
            tuple(sum(f[i] for f in folds) for i in range(4))
        )
        assert row.far_low == min(f[0] / f[1] for f in folds)
        assert row.far_high == max(f[0] / f[1] for f in folds)
        assert row.frr_low == min(f[2] / f[3] for f in folds)
        assert row.frr_high == max(f[2] / f[3] for f in folds)
    assert any(r.far_measured > r.far for r in held.rows)  # held out is not the stated rate
    # round trip through the manifest form, and the digest covers it
    again = Calibration.from_dict(calibration.to_dict())
    assert again.tables["prototype"].held_out == held and again.sha256 == calibration.sha256
    # one chain, or no seconds: nothing to hold out
    one = {p: "a" for p in vectors}
    assert measure({"clean": vectors}, data="t", enroll_samples=3, groups=one,
                   seconds={"clean": seconds}).tables["prototype"].held_out is None  # fmt: skip
    assert measure({"clean": vectors}, data="t", enroll_samples=3,
                   groups=groups).tables["prototype"].held_out is None  # fmt: skip


def test_enroll_says_the_held_out_figures(tmp_path: Path) -> None:
    """A table with held-out figures: the owner sentence gives them, not the in-sample row."""
    from uvsdk.cli import _expected_line
    from uvsdk.verifier import EnrollmentReport

    row = HeldOutRow(0.01, 61, 1000, 0.0, 0.25, 25, 200, 0.05, 0.2)
    report = EnrollmentReport("u", "prototype", 0.95, (), tmp_path, far=0.01, expected_far="0.01",
                              expected_frr="0.373", held_out=row, held_out_chains=8,
                              held_out_seconds=2.0)  # fmt: skip
    line = _expected_line(report, None)
    assert line.startswith("About 1 in 16 attempts by a stranger recorded like you would be "
                           "accepted, and about 1 in 8 of your own attempts of 2 s or more "
                           "rejected (measured on people of 8 recording chains")  # fmt: skip
    assert "0.0 %-25 % and 5.0 %-20 % by chain" in line and "0.373" not in line


def test_recording_chains_are_sources_of_the_real_speech_folder_else_folders(
    tmp_path: Path,
) -> None:
    from uvexport.calibrate import impostor_basis, recording_chains

    shipped, own = tmp_path / "speakers", tmp_path / "mine"
    shipped.mkdir()
    (shipped / "sources.json").write_text("{}")
    chains = recording_chains(
        {
            "fotaq-joe": shipped,
            "fotaq-king": shipped,
            "klettres-cs": shipped,
            "alice": own,
            "bob": own,
        }  # fmt: skip
    )
    assert chains == {
        "fotaq-joe": "speakers/fotaq",
        "fotaq-king": "speakers/fotaq",
        "klettres-cs": "speakers/klettres",
        "alice": str(own),
        "bob": str(own),
    }
    assert impostor_basis(chains).endswith("(2 of 3 chains hold several people)")


def test_a_face_bundle_calibrates_on_orl_by_name(tmp_path: Path) -> None:
    from uvexport.bundle import make_manifest
    from uvexport.reference import image_embedding_model
    from uvsdk.inputs import ImageInput

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


def test_re_record_advice_weighs_the_tables_frr() -> None:
    """Spec §9.1: at the table's FRR, a user is advised only when that many own samples below
    the threshold are unlikely (binomial tail < 0.05), not for what the FRR expects."""
    from math import comb

    from uvsdk.calibration import Row, binomial_tail, rerecord_advised

    for n, k, p in ((6, 3, 0.376), (6, 5, 0.376), (5, 2, 0.05), (12, 7, 0.2)):
        exact = sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))
        assert binomial_tail(n, k, p) == pytest.approx(exact, abs=1e-12)
    assert binomial_tail(10, 0, 0.3) == 1.0 and binomial_tail(5, 6, 0.5) == 0.0
    stated = Row(0.01, 3.2, 10, 0.376, 100)
    advised = [rerecord_advised(r, 6, 0.95, stated) for r in range(7)]
    assert advised == [False] * 5 + [True] * 2  # 3 of 6 is what FRR 0.376 expects
    unstated = Row(0.01, 0.4, 10, None, None)  # a codeword table: the count alone
    assert [rerecord_advised(r, 6, 0.95, unstated) for r in range(7)] == [False] * 2 + [True] * 5
    assert not rerecord_advised(6, 6, 0.95, None)  # the warm-up rule alone: no advice
