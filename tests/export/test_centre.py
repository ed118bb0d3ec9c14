"""A deployment's recording-chain mean (``uvexport calibrate --centre``, ``uvexport centre``;
docs/spec.md §6.8): through the real SDK, a bundle calibrated on milder chains accepts far more
strangers than it states on a harsher chain it never saw, and the same calibration with that
chain's own mean holds its stated FAR; the leave-out means the calibration scores with; the
thresholds that hold on every chain; and the command line's refusals (one line, exit 2, nothing
written)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from uvexport.calibrate import calibrate_bundle
from uvexport.cli import main
from uvsdk import Verifier
from uvsdk.calibration import MIN_FALSE_ACCEPTS
from uvsdk.errors import ModelMismatchError
from uvsdk.measurement import ChainMeans, far_threshold, table_from_scores
from uvtrain.data.formant import voice_corpus

from ..conftest import PASSPHRASE, SAMPLE_RATE

FAR = 0.05
#: each calibration chain's hum level, and the deployment's: a harsher chain than any calibrated
CHAINS = {"a": 0.0, "b": 0.05, "c": 0.1}
DEPLOYMENT = 0.5


def chain(clip: np.ndarray, seed: int, level: float) -> np.ndarray:
    """One recording chain: a fixed mains hum with its harmonics, the same on every clip."""
    if not level:
        return clip
    rng = np.random.default_rng(seed)
    t = np.arange(len(clip)) / SAMPLE_RATE
    base = rng.uniform(80, 200)
    hum = sum(np.sin(2 * np.pi * base * k * t + rng.uniform(0, 6)) / k for k in range(1, 6))
    out = clip + level * hum
    return (out / np.max(np.abs(out)) * 0.5).astype(np.float32)


def write_people(folder: Path, people: list, seed: int, level: float, prefix: str = "") -> None:
    for number, clips in enumerate(people):
        person = folder / f"{prefix}p{number:02d}"
        person.mkdir(parents=True)
        for index, clip in enumerate(clips):
            sf.write(person / f"c{index}.wav", chain(clip, seed, level), SAMPLE_RATE, "PCM_16")


@pytest.fixture(scope="module")
def chains(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Three calibration chains of 7 synthetic speakers (a folder the real-speech fetch would
    write: ``<chain>-<person>`` beside ``sources.json``) and a deployment of 8 others on a
    harsher chain."""
    root = tmp_path_factory.mktemp("chains")
    calibration = root / "calibration"
    calibration.mkdir()
    (calibration / "sources.json").write_text("{}")
    for number, (name, level) in enumerate(CHAINS.items()):
        people = voice_corpus(7, 8, 2.5, SAMPLE_RATE, seed=2024 + number)
        write_people(calibration, people, 11 + number, level, prefix=f"{name}-")
    deployment = root / "deployment"
    write_people(deployment, voice_corpus(8, 8, 2.5, SAMPLE_RATE, seed=77), 99, DEPLOYMENT)
    return calibration, deployment


def observed(bundle: Path, people: Path, store: Path) -> tuple[float, int, float]:
    """Each person enrolled on 5 clips through the SDK at FAR :data:`FAR`, every other person's
    clips verified against them: the share of strangers accepted, the trials, the FRR."""
    accepts = trials = rejects = genuine = 0
    folders = sorted(people.iterdir())
    verifier = Verifier(bundle, store=store, passphrase=PASSPHRASE, far=FAR)
    for owner in folders:
        files = sorted(owner.iterdir())
        verifier.enroll(files[:5], user="owner")
        for file in files[5:]:
            genuine += 1
            rejects += not verifier.verify(file, user="owner", backoff=False).accepted
        for other in folders:
            for file in sorted(other.iterdir()) if other != owner else ():
                trials += 1
                accepts += verifier.verify(file, user="owner", backoff=False).accepted
        verifier.delete("owner")
    return accepts / trials, trials, rejects / genuine


def test_a_deployments_own_mean_holds_the_stated_far_where_the_calibration_alone_did_not(
    spectral_bundle: Path, chains: tuple[Path, Path], tmp_path: Path
) -> None:
    calibration, deployment = chains
    plain, _ = calibrate_bundle(
        spectral_bundle, calibration, tmp_path / "plain.uvb", conditions=("clean",),
        score_norm="none",
    )  # fmt: skip
    centred, _ = calibrate_bundle(
        spectral_bundle, calibration, tmp_path / "centred.uvb", conditions=("clean",),
        score_norm="none", centre=deployment,
    )  # fmt: skip
    far_plain, trials, _ = observed(plain, deployment, tmp_path / "s1")
    far_centred, _, frr = observed(centred, deployment, tmp_path / "s2")
    assert trials == 8 * 7 * 8
    assert far_plain > 4 * FAR  # observed 0.70: the harsher chain's strangers sound alike
    assert far_centred <= 2 * FAR  # observed 0.013
    assert frr < 0.5
    # the bundle takes out the deployment people's mean: each clip's unit vector weighing the same
    verifier = Verifier(centred, store=tmp_path / "s3")
    centre = verifier.bundle.manifest.score_norm.centre
    assert centre.people == 8
    vectors = [verifier.embed(f) for person in deployment.iterdir() for f in person.iterdir()]
    units = [v / np.linalg.norm(v.astype(np.float64)) for v in vectors]
    np.testing.assert_allclose(verifier.bundle.centre.mean, np.mean(units, axis=0), atol=1e-6)
    data = verifier.bundle.manifest.calibration.data
    assert "centred by its recording chain's mean without its people" in data


def test_a_leave_out_mean_never_holds_a_trials_people() -> None:
    """An impostor pair's mean is of its chain's other people; a genuine trial's of everyone but
    the owner; a chain of fewer than 3 people is pooled with the whole condition."""
    rng = np.random.default_rng(3)
    vectors = {name: rng.normal(size=(4, 6)) for name in ("a1", "a2", "a3", "a4", "b1", "b2")}
    chains = {name: name[0] for name in vectors}
    means = ChainMeans(vectors, chains)

    def unit_mean(names: list[str]) -> np.ndarray:
        rows = np.concatenate([vectors[name] for name in names])
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).mean(axis=0)

    np.testing.assert_allclose(means.without("a1", "a2").mean, unit_mean(["a3", "a4"]))
    np.testing.assert_allclose(means.without("a1").mean, unit_mean(["a2", "a3", "a4"]))
    # chain b has 2 people: pooled with everyone of the condition, the pair still left out
    np.testing.assert_allclose(means.without("b1", "b2").mean, unit_mean(["a1", "a2", "a3", "a4"]))
    np.testing.assert_allclose(means.without("b1").mean, unit_mean(["a1", "a2", "a3", "a4", "b2"]))
    moved = dict(vectors, a1=vectors["a1"] * 5 + 1)  # the pair's own vectors do not move it
    np.testing.assert_allclose(
        ChainMeans(moved, chains).without("a1", "a2").mean, means.without("a1", "a2").mean
    )


def test_each_chain_thresholds_hold_on_every_chain_that_resolves_them() -> None:
    rng = np.random.default_rng(4)
    genuine = rng.normal(0.8, 0.1, 400)
    easy, hard = rng.normal(0.0, 0.1, 3000), rng.normal(0.3, 0.1, 1000)
    tiny = rng.normal(0.9, 0.01, 100)  # resolves FAR 0.1 (10 false accepts), no smaller FAR
    pooled = table_from_scores(
        "prototype", {"clean": (genuine, np.concatenate([easy, hard]))}, people=10,
        enroll_samples=5, score="cosine",
    )  # fmt: skip
    each = table_from_scores(
        "prototype", {"clean": (genuine, np.concatenate([easy, hard]))}, people=10,
        enroll_samples=5, score="cosine",
        each_chain={"clean/easy": easy, "clean/hard": hard, "clean/tiny": tiny},
    )  # fmt: skip
    previous = -math.inf  # a stricter FAR never takes a lower threshold than a laxer one
    for row, plain in zip(each.rows, pooled.rows, strict=True):
        resolved = [s for s in (easy, hard, tiny) if row.far * s.size >= MIN_FALSE_ACCEPTS - 1e-9]
        expected = max([previous, plain.threshold, *(far_threshold(s, row.far) for s in resolved)])
        assert row.threshold == pytest.approx(expected)
        previous = row.threshold
        for scores in resolved:
            assert np.mean(scores >= row.threshold) <= row.far + 1e-12
    at_one_percent = {row.far: row for row in each.rows}[0.01]
    assert at_one_percent.threshold > {row.far: row for row in pooled.rows}[0.01].threshold
    assert np.mean(hard >= at_one_percent.threshold) <= 0.01


def _error(capsys: pytest.CaptureFixture, *args: str | Path) -> str:
    assert main([str(a) for a in args]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def test_the_command_line_sets_a_deployments_mean_and_refuses_in_one_line(
    spectral_bundle: Path,
    chains: tuple[Path, Path],
    voice_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    calibration, deployment = chains
    few = tmp_path / "few"
    for person in sorted(deployment.iterdir())[:4]:
        shutil.copytree(person, few / person.name)
    out = tmp_path / "out.uvb"
    common = ("--conditions", "clean", "--score-norm", "none")
    line = _error(
        capsys, "calibrate", spectral_bundle, calibration, "--out", out, "--centre", few, *common
    )
    assert "4 people; a recording chain's mean needs at least 5" in line
    line = _error(
        capsys, "calibrate", spectral_bundle, calibration, "--out", out, "--each-chain",
        "--impostors", "all", *common,
    )  # fmt: skip
    assert "--each-chain needs --impostors chain" in line
    assert not out.exists()
    line = _error(capsys, "centre", spectral_bundle, deployment, "--out", out)
    assert "takes no recording chain's mean out" in line and not out.exists()

    key = tmp_path / "key.pem"
    assert main(["keygen", "--out", str(key)]) == 0
    args = ["calibrate", str(spectral_bundle), str(calibration), "--out", str(out)]
    assert (
        main([*args, "--centre", str(deployment), "--each-chain", "--sign-key", str(key), *common])
        == 0
    )
    printed = capsys.readouterr().out
    assert f"the mean voice of 8 people of {deployment} is taken out" in printed
    store = tmp_path / "store"
    verifier = Verifier(out, store=store, passphrase=PASSPHRASE)
    samples = sorted((deployment / "p00").iterdir())
    verifier.enroll(samples[:5])
    assert verifier.verify(samples[6], backoff=False).accepted
    # a new mean (two more people recorded): same calibration, users enroll again
    more = tmp_path / "more"
    shutil.copytree(deployment, more)
    write_people(more, voice_corpus(2, 6, 2.5, SAMPLE_RATE, seed=78), 99, DEPLOYMENT, "new-")
    again = tmp_path / "again.uvb"
    assert main(["centre", str(out), str(more), "--out", str(again), "--sign-key", str(key)]) == 0
    assert "the mean of 10 people's 76 clips" in capsys.readouterr().out
    replaced = Verifier(again, store=store, passphrase=PASSPHRASE)
    assert replaced.bundle.manifest.calibration == verifier.bundle.manifest.calibration
    assert replaced.bundle.signature is not None
    assert not math.isclose(
        float(replaced.bundle.centre.mean[0]), float(verifier.bundle.centre.mean[0])
    )
    with pytest.raises(ModelMismatchError, match="re-enroll"):
        replaced.verify(samples[6], backoff=False)
