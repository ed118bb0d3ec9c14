"""Score normalisation against a bundle's cohort (``cohort`` and ``score_norm``): AS-norm's and
S-norm's statistics and the normalised score against a hand computation, the decision
``Verifier.verify`` takes, every malformed cohort or rule refused (API error, CLI one line and
exit 2), and templates enrolled against another cohort or rule refused."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from uvexport.bundle import write_bundle
from uvsdk import Verifier
from uvsdk.bundle import Bundle
from uvsdk.calibration import SCORE_RANGES, TABLE_SCORES, normalised_leave_one_out
from uvsdk.cli import app
from uvsdk.cohort import MIN_STD, SCORE_NORMS, SCORE_RULES, Cohort, CohortSpec, ScoreNorm, as_norm
from uvsdk.errors import BundleError, ModelMismatchError, SignatureError

from ..conftest import PASSPHRASE, enrolled_clip, enrollment_dir, held_out

runner = CliRunner()


def uvsdk(*args: str | Path, env: dict | None = None):
    return runner.invoke(
        app, [str(a) for a in args], env={"UVSDK_PASSPHRASE": PASSPHRASE, **(env or {})}
    )


def assert_one_line_exit_2(result, match: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("uvsdk: error: "), result.stderr
    assert match.lower() in lines[0].lower(), lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def hand_statistics(x: np.ndarray, cohort: np.ndarray, k: int) -> tuple[float, float]:
    """μ and σ of docs/spec.md §6.7, one value at a time."""
    unit = [float(v) for v in x / math.sqrt(sum(float(v) ** 2 for v in x))]
    scores = []
    for row in cohort:
        length = math.sqrt(sum(float(v) ** 2 for v in row))
        scores.append(sum(a * float(b) / length for a, b in zip(unit, row, strict=True)))
    top = sorted(scores, reverse=True)[:k]
    return statistics.fmean(top), max(statistics.pstdev(top), MIN_STD)


# -- the arithmetic --------------------------------------------------------------------------


def test_statistics_match_a_hand_computation() -> None:
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(9, 6))
    cohort = Cohort(vectors * rng.uniform(0.5, 3, (9, 1)), top_k=4)  # lengths do not matter
    tested = rng.normal(size=(3, 6))
    mean, std = cohort.statistics(tested)
    for row, m, s in zip(tested, mean, std, strict=True):
        assert (m, s) == pytest.approx(hand_statistics(row, vectors, 4), abs=1e-12)
    # excluded cohort vectors take no part: the same as a cohort without them
    exclude = np.zeros((3, 9), bool)
    exclude[:, [0, 4]] = True
    kept = np.delete(vectors, [0, 4], axis=0)
    mean, std = cohort.statistics(tested, exclude)
    for row, m, s in zip(tested, mean, std, strict=True):
        assert (m, s) == pytest.approx(hand_statistics(row, kept, 4), abs=1e-12)
    # identical cohort vectors: σ is floored, never zero
    same = Cohort(np.ones((5, 6)), top_k=3)
    assert same.statistics(tested)[1] == pytest.approx([MIN_STD] * 3)


def test_s_norm_statistics_take_the_whole_cohort() -> None:
    """S-norm: every cohort vector (``top_k`` ignored), and with exclusions every vector left,
    however many that is per row."""
    rng = np.random.default_rng(6)
    vectors = rng.normal(size=(9, 6))
    cohort = Cohort(vectors, top_k=2, method="s-norm")
    assert cohort.top_k == 9
    tested = rng.normal(size=(3, 6))
    mean, std = cohort.statistics(tested)
    for row, m, s in zip(tested, mean, std, strict=True):
        assert (m, s) == pytest.approx(hand_statistics(row, vectors, 9), abs=1e-12)
    exclude = np.zeros((3, 9), bool)
    exclude[0, [1, 2]] = True
    exclude[2, 8] = True
    mean, std = cohort.statistics(tested, exclude)
    for row, m, s, out in zip(tested, mean, std, exclude, strict=True):
        kept = vectors[~out]
        assert (m, s) == pytest.approx(hand_statistics(row, kept, len(kept)), abs=1e-12)
    with pytest.raises(ValueError, match="fewer than 2"):
        cohort.statistics(tested[:1], np.arange(9)[None, :] > 0)
    with pytest.raises(ValueError, match="unknown score normalisation"):
        Cohort(vectors, 3, method="z-norm")


def test_each_score_rule_is_one_object_behind_one_interface() -> None:
    """The rules of docs/spec.md §6.7 by name: the calibration tables' prototype scores and
    threshold ranges come from them, ``score_norm`` reads its parameter through them, and S-norm
    is AS-norm over the whole cohort."""
    assert tuple(SCORE_RULES) == ("cosine", "as-norm", "s-norm")
    assert SCORE_NORMS == ("as-norm", "s-norm")
    assert TABLE_SCORES["prototype"] == tuple(SCORE_RULES)
    assert SCORE_RANGES["cosine"] == SCORE_RULES["cosine"].threshold_range
    spec = CohortSpec(count=9, sha256="0" * 64)
    for method, data in (("as-norm", {"top_k": 4}), ("s-norm", {})):
        norm = ScoreNorm.from_dict({"method": method, **data}, spec)
        assert norm.rule is SCORE_RULES[method]
        assert norm.describe(9) == norm.rule.describe(norm.top_k, 9)
    rng = np.random.default_rng(7)
    vectors, tested = rng.normal(size=(9, 6)), rng.normal(size=(3, 6))
    s_norm, as_norm_all = Cohort(vectors, 2, "s-norm"), Cohort(vectors, 9, "as-norm")
    for (m1, s1), (m2, s2) in zip(
        zip(*s_norm.statistics(tested), strict=True),
        zip(*as_norm_all.statistics(tested), strict=True),
        strict=True,
    ):
        assert (m1, s1) == pytest.approx((m2, s2), abs=1e-12)
    raw = np.array([0.1, 0.5])
    cosine = SCORE_RULES["cosine"]
    assert np.array_equal(cosine.normalise(raw, (0.2, 0.1), (0.3, 0.1)), raw)
    expected = 0.5 * ((raw - 0.2) / 0.1 + (raw - 0.3) / 0.1)
    assert s_norm.rule.normalise(raw, (0.2, 0.1), (0.3, 0.1)) == pytest.approx(expected)


def test_the_score_scale_names_cohort_and_rule() -> None:
    """The template's ``cohort`` value: the SHA-256 of the canonical ``{cohort, score_norm}``
    (docs/spec.md §3.9), computed here by hand; another rule or top_k is another scale."""
    from uvsdk.bundle import Manifest

    sha = "ab" * 32
    base = {"format": "uvsdk-bundle/1", "name": "x", "method": "fedhide", "modality": "audio",
            "input": {"sample_rate": 16000, "window_seconds": 1.6, "hop_seconds": 0.8,
                      "min_seconds": 0.5},
            "output": {"kind": "embedding", "dim": 4}, "model_sha256": "0" * 64,
            "cohort": {"file": "cohort.f32", "count": 8, "sha256": sha}}  # fmt: skip
    scales = set()
    for rule, text in (
        ({"method": "as-norm", "top_k": 3}, '{"method":"as-norm","top_k":3}'),
        ({"method": "as-norm", "top_k": 4}, '{"method":"as-norm","top_k":4}'),
        ({"method": "s-norm"}, '{"method":"s-norm"}'),
    ):
        manifest = Manifest.from_dict({**base, "score_norm": rule})
        expected = hashlib.sha256(f'{{"cohort":"{sha}","score_norm":{text}}}'.encode()).hexdigest()
        assert manifest.score_scale == expected
        scales.add(manifest.score_scale)
    assert len(scales) == 3
    plain = {k: v for k, v in base.items() if k != "cohort"}
    assert Manifest.from_dict(plain).score_scale is None


def test_as_norm_is_the_symmetric_formula() -> None:
    s, enrolled, tested = 0.7, (0.2, 0.1), (0.3, 0.05)
    assert as_norm(s, enrolled, tested) == pytest.approx(0.5 * ((0.7 - 0.2) / 0.1 + 0.4 / 0.05))
    scores = np.array([0.1, 0.5])
    both = as_norm(scores, (np.array([0.0, 0.1]), 0.5), (0.2, np.array([0.1, 0.2])))
    assert both == pytest.approx([0.5 * (0.2 + (-1.0)), 0.5 * (0.8 + 1.5)])


def test_normalised_leave_one_out_matches_a_hand_computation() -> None:
    rng = np.random.default_rng(8)
    samples, cohort_vectors = rng.normal(size=(5, 6)), rng.normal(size=(12, 6))
    cohort = Cohort(cohort_vectors, top_k=5)
    got = normalised_leave_one_out(samples, cohort)
    units = samples / np.linalg.norm(samples, axis=1, keepdims=True)
    for i, unit in enumerate(units):
        rest = units.sum(axis=0) - unit
        rest = rest / np.linalg.norm(rest)
        score = float(rest @ unit)
        expected = 0.5 * (
            (score - hand_statistics(rest, cohort_vectors, 5)[0])
            / hand_statistics(rest, cohort_vectors, 5)[1]
            + (score - hand_statistics(unit, cohort_vectors, 5)[0])
            / hand_statistics(unit, cohort_vectors, 5)[1]
        )
        assert got[i] == pytest.approx(expected, abs=1e-9)


def test_verify_takes_the_decision_of_the_formula(
    calibrated_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    """The calibrated bundle with a cohort: ``verify``'s score is the AS-norm score of the
    stored prototype and the clip's vector, and it accepts iff that reaches the threshold."""
    verifier = Verifier(calibrated_bundle, store=tmp_path / "s", passphrase=PASSPHRASE, far=0.01)
    verifier.enroll(enrollment_dir(voice_dir, 0, tmp_path, count=5))
    template = verifier.store.load("default")
    manifest = verifier.bundle.manifest
    assert template.cohort == manifest.score_scale
    spec, top_k = manifest.cohort, manifest.score_norm.top_k
    assert manifest.score_norm.method == "as-norm"
    cohort = np.frombuffer(verifier.bundle.cohort_bytes, "<f4").reshape(spec.count, -1)
    prototype = template.prototype.astype(np.float64)
    enrolled = hand_statistics(prototype, cohort, top_k)
    decisions = set()
    others = [clip for speaker in range(1, 10) for clip in held_out(voice_dir, speaker)]
    for clip in [*held_out(voice_dir, 0, first=5), *others]:
        vector = verifier.embed(clip).astype(np.float64)
        cosine = float(prototype @ vector / np.linalg.norm(prototype) / np.linalg.norm(vector))
        mean, std = hand_statistics(vector, cohort, top_k)
        expected = 0.5 * ((cosine - enrolled[0]) / enrolled[1] + (cosine - mean) / std)
        decision = verifier.verify(clip, backoff=False)
        assert decision.score == pytest.approx(expected, abs=1e-6)
        assert decision.accepted == (expected >= template.threshold)
        assert abs(cosine - expected) > 0.1  # the score is not the raw cosine
        decisions.add(decision.accepted)
    assert decisions == {True, False}  # both outcomes were checked


# -- malformed cohorts ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def cohort_bundle(spectral_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The spectral bundle (same model) with a cohort of 16 vectors, AS-norm top 4, no
    calibration."""
    import dataclasses

    source = Bundle(spectral_bundle)
    data = np.random.default_rng(11).normal(size=(16, 40)).astype("<f4").tobytes()
    spec = CohortSpec(16, hashlib.sha256(data).hexdigest())
    norm = ScoreNorm("as-norm", 4)
    manifest = dataclasses.replace(source.manifest, cohort=spec, score_norm=norm)
    path = tmp_path_factory.mktemp("cohort") / "cohort.uvb"
    return write_bundle(path, source.model_bytes, manifest, cohort=data)


def folder_bundle(source: Path, where: Path, manifest=None, members=None) -> Path:
    """``source`` as a folder bundle, its manifest and members changed by the callables."""
    bundle = Bundle(source)
    data = bundle.manifest.to_dict()
    if manifest:
        manifest(data)
    files = {"manifest.json": json.dumps(data).encode(), "model.onnx": bundle.model_bytes}
    if bundle.cohort_bytes is not None:
        files["cohort.f32"] = bundle.cohort_bytes
    if members:
        members(files, data)
    where.mkdir()
    for name, content in files.items():
        (where / name).write_bytes(content)
    return where


def _rehash(files: dict, data: dict) -> None:
    """The manifest's cohort.sha256 made to match the (changed) member, so that only the
    change itself is wrong."""
    data["cohort"]["sha256"] = hashlib.sha256(files["cohort.f32"]).hexdigest()
    files["manifest.json"] = json.dumps(data).encode()


def _values(files: dict, data: dict, index: int, value: float) -> None:
    values = np.frombuffer(files["cohort.f32"], "<f4").copy()
    values[index : index + (40 if abs(value) < 1e-30 else 1)] = value
    files["cohort.f32"] = values.tobytes()
    _rehash(files, data)


MALFORMED = {
    "member without key": (
        lambda d: (d.pop("cohort"), d.pop("score_norm")),
        None,
        "not named in the manifest",
    ),
    "key without member": (None, lambda f, d: f.pop("cohort.f32"), "there is no cohort.f32"),
    "wrong sha256": (
        lambda d: d["cohort"].update(sha256="0" * 64),
        None,
        "does not match the manifest's cohort.sha256",
    ),
    "sha256 not hex": (lambda d: d["cohort"].update(sha256="X" * 64), None, "cohort.sha256"),
    "wrong size": (
        None,
        lambda f, d: (f.update({"cohort.f32": f["cohort.f32"][:-4]}), _rehash(f, d)),
        "cohort.f32 is 2556 bytes, not count x dim x 4 = 2560",
    ),
    "NaN value": (None, lambda f, d: _values(f, d, 7, math.nan), "non-finite value"),
    "infinite value": (None, lambda f, d: _values(f, d, 0, math.inf), "non-finite value"),
    "zero vector": (None, lambda f, d: _values(f, d, 40, 0.0), "too short to normalise"),
    # issue 46: subnormal values are not zero, yet no rescale makes the vector unit length
    "subnormal vector": (None, lambda f, d: _values(f, d, 40, 1e-40), "too short to normalise"),
    "count 1": (lambda d: d["cohort"].update(count=1), None, "cohort.count must be an integer"),
    "count too large": (lambda d: d["cohort"].update(count=16385), None, "cohort.count"),
    "count as text": (lambda d: d["cohort"].update(count="16"), None, "cohort.count"),
    "count true": (lambda d: d["cohort"].update(count=True), None, "cohort.count"),
    "top_k in the cohort (before spec 4)": (
        lambda d: d["cohort"].update(top_k=4),
        None,
        "cohort.top_k is score_norm.top_k since spec version 4",
    ),
    "top_k 1": (
        lambda d: d["score_norm"].update(top_k=1),
        None,
        "score_norm.top_k must be an integer in",
    ),
    "top_k above count": (lambda d: d["score_norm"].update(top_k=17), None, "score_norm.top_k"),
    "top_k missing": (lambda d: d["score_norm"].pop("top_k"), None, "score_norm.top_k"),
    "top_k with s-norm": (
        lambda d: d["score_norm"].update(method="s-norm"),
        None,
        "score_norm.top_k is for as-norm",
    ),
    "unknown method": (
        lambda d: d["score_norm"].update(method="z-norm"),
        None,
        "score_norm.method must be one of as-norm, s-norm",
    ),
    "rule not an object": (
        lambda d: d.update(score_norm="as-norm"),
        None,
        "score_norm must be an object",
    ),
    "rule unknown key": (
        lambda d: d["score_norm"].update(impostors=1),
        None,
        "score_norm has an unknown key",
    ),
    "cohort without rule": (
        lambda d: d.pop("score_norm"),
        None,
        "a cohort needs score_norm",
    ),
    "rule without cohort": (
        lambda d: d.pop("cohort"),
        lambda f, d: f.pop("cohort.f32"),
        "score_norm needs a cohort",
    ),
    "unknown file": (lambda d: d["cohort"].update(file="other.f32"), None, "cohort.file must be"),
    "not an object": (lambda d: d.update(cohort=[1]), None, "cohort must be an object"),
    "unknown key": (lambda d: d["cohort"].update(extra=1), None, "cohort has an unknown key"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_cohort_is_refused(
    cohort_bundle: Path, voice_dir: Path, tmp_path: Path, case: str
) -> None:
    manifest, members, message = MALFORMED[case]
    folder = folder_bundle(cohort_bundle, tmp_path / "b", manifest, members)
    with pytest.raises(BundleError, match=message):
        Bundle(folder)
    assert_one_line_exit_2(uvsdk("info", "--bundle", folder, "--store", tmp_path / "s"), message)
    result = uvsdk(
        "verify", enrolled_clip(voice_dir, 0), "--bundle", folder, "--store", tmp_path / "s"
    )
    assert_one_line_exit_2(result, message)
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").rglob("*.uvt"))


def _score(value: str):
    def change(data: dict) -> None:
        data["calibration"]["prototype"]["score"] = value

    return change


def test_a_table_score_that_disagrees_with_the_cohort_is_refused(
    calibrated_bundle: Path, tmp_path: Path
) -> None:
    """An as-norm table without a cohort, a cosine table with one."""

    def without_cohort(data: dict) -> None:
        data.pop("cohort")
        data.pop("score_norm")

    drop = folder_bundle(
        calibrated_bundle, tmp_path / "a", without_cohort, lambda f, d: f.pop("cohort.f32")
    )
    with pytest.raises(BundleError, match="calibrated on as-norm scores.*are cosine"):
        Bundle(drop)
    assert_one_line_exit_2(uvsdk("info", "--bundle", drop), "calibrated on as-norm scores")
    cosine = folder_bundle(calibrated_bundle, tmp_path / "c", _score("cosine"))
    with pytest.raises(BundleError, match="calibrated on cosine scores.*are as-norm"):
        Bundle(cosine)
    assert_one_line_exit_2(uvsdk("info", "--bundle", cosine), "calibrated on cosine scores")


def test_an_oversized_cohort_is_refused_before_reading(cohort_bundle: Path, tmp_path: Path) -> None:
    folder = folder_bundle(cohort_bundle, tmp_path / "b")
    with open(folder / "cohort.f32", "r+b") as handle:
        handle.truncate(2 * 1024**3)  # sparse: costs no disk, would cost 2 GB of memory
    message = "cohort.f32 is 2147483648 bytes, more than the 16777216 accepted"
    with pytest.raises(BundleError, match=message):
        Bundle(folder)
    assert_one_line_exit_2(uvsdk("info", "--bundle", folder), message)


def test_the_signature_covers_the_cohort(
    cohort_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    from uvexport.bundle import generate_signing_key, save_signing_key

    key = generate_signing_key()
    _, public = save_signing_key(key, tmp_path / "k.pem")
    source = Bundle(cohort_bundle)
    signed = write_bundle(
        tmp_path / "signed",
        source.model_bytes,
        source.manifest,
        cohort=source.cohort_bytes,
        sign_key=key,
        directory=True,
    )
    assert Bundle(signed, trusted_keys=[public]).signed_by
    # unsigned, where trusted keys are required: refused
    unsigned = folder_bundle(cohort_bundle, tmp_path / "u")
    with pytest.raises(SignatureError, match="not signed"):
        Bundle(unsigned, trusted_keys=[public])
    keys = {"UVSDK_TRUSTED_KEYS": str(public)}
    assert_one_line_exit_2(uvsdk("info", "--bundle", unsigned, env=keys), "not signed")
    result = uvsdk(
        "verify",
        enrolled_clip(voice_dir, 0),
        "--bundle",
        unsigned,
        "--store",
        tmp_path / "s",
        env=keys,
    )
    assert_one_line_exit_2(result, "not signed")
    # another cohort under the signed manifest: the manifest's digest no longer matches
    values = np.frombuffer((signed / "cohort.f32").read_bytes(), "<f4").copy()
    values[0] += 1.0
    (signed / "cohort.f32").write_bytes(values.tobytes())
    with pytest.raises(BundleError, match="cohort.sha256"):
        Bundle(signed, trusted_keys=[public])


# -- templates and cohorts -----------------------------------------------------------------


def test_a_template_enrolled_against_another_cohort_is_refused(
    calibrated_bundle: Path,
    cohort_bundle: Path,
    spectral_bundle: Path,
    voice_dir: Path,
    tmp_path: Path,
) -> None:
    """Same model, other score normalisation (another cohort, none, or the same cohort under
    another rule): the threshold means nothing there."""
    import dataclasses

    store = tmp_path / "store"
    enrolled = uvsdk(
        "enroll",
        "--samples",
        enrollment_dir(voice_dir, 0, tmp_path),
        "--bundle",
        calibrated_bundle,
        "--store",
        store,
    )
    assert enrolled.exit_code == 0, enrolled.stderr
    clip = enrolled_clip(voice_dir, 0)
    calibrated = Bundle(calibrated_bundle)
    s_norm = write_bundle(
        tmp_path / "s-norm.uvb",
        calibrated.model_bytes,
        dataclasses.replace(calibrated.manifest, score_norm=ScoreNorm("s-norm"), calibration=None),
        cohort=calibrated.cohort_bytes,
    )
    for other in (cohort_bundle, spectral_bundle, s_norm):  # another cohort, none, another rule
        verifier = Verifier(other, store=store, passphrase=PASSPHRASE)
        assert (
            verifier.bundle.manifest.model_sha256 == Bundle(calibrated_bundle).manifest.model_sha256
        )
        with pytest.raises(ModelMismatchError, match="cohort.*re-enroll"):
            verifier.verify(clip)
        result = uvsdk("verify", clip, "--bundle", other, "--store", store)
        assert_one_line_exit_2(result, "re-enroll")
    assert uvsdk("verify", clip, "--bundle", calibrated_bundle, "--store", store).exit_code == 0
    # and the other way: enrolled without a cohort, verified with one
    plain = tmp_path / "plain"
    Verifier(spectral_bundle, store=plain, passphrase=PASSPHRASE).enroll(
        enrollment_dir(voice_dir, 1, tmp_path)
    )
    with pytest.raises(ModelMismatchError, match="re-enroll"):
        Verifier(cohort_bundle, store=plain, passphrase=PASSPHRASE).verify(clip)
