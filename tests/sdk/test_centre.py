"""A recording chain's mean taken out of prototype-mode vectors (``score_norm.centre``,
docs/spec.md §3.9 and §6.8): the score against a hand computation, with raw cosines and under a
cohort's rule, every malformed centre refused (API error, CLI one line and exit 2, nothing
written), a template bound to the centre it was enrolled under, and ``info`` naming the people
behind it and no value of it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

from uvexport.bundle import write_bundle
from uvsdk import Verifier
from uvsdk.bundle import Bundle, Manifest
from uvsdk.cohort import CentreSpec, CohortSpec, ScoreNorm
from uvsdk.errors import BundleError, ModelMismatchError

from ..conftest import PASSPHRASE, enrolled_clip, enrollment_dir, held_out
from .test_cohort import assert_one_line_exit_2, folder_bundle, hand_statistics, uvsdk

DIM = 40


def mean_vector(seed: int, norm: float = 0.6) -> bytes:
    """A plausible chain mean: a direction of norm ``norm`` (< 1, as a mean of unit vectors)."""
    direction = np.random.default_rng(seed).normal(size=DIM)
    return (direction / np.linalg.norm(direction) * norm).astype("<f4").tobytes()


def centred_bundle(
    source: Path, out: Path, centre: bytes, *, cohort: bytes | None = None, people: int = 12
) -> Path:
    """``source``'s model with ``centre`` (and, given, a cohort under AS-norm top 4)."""
    loaded = Bundle(source)
    spec = CentreSpec(people, hashlib.sha256(centre).hexdigest())
    cohort_spec = None
    norm = ScoreNorm("cosine", None, spec)
    if cohort is not None:
        cohort_spec = CohortSpec(len(cohort) // (4 * DIM), hashlib.sha256(cohort).hexdigest())
        norm = ScoreNorm("as-norm", 4, spec)
    manifest = dataclasses.replace(
        loaded.manifest, cohort=cohort_spec, score_norm=norm, calibration=None
    )
    manifest = Manifest.from_dict(json.loads(json.dumps(manifest.to_dict())))
    return write_bundle(out, loaded.model_bytes, manifest, cohort=cohort, centre=centre)


def hand_centred(vector: np.ndarray, mean: np.ndarray) -> np.ndarray:
    unit = vector / math.sqrt(float(vector @ vector))
    centred = unit - mean
    return centred / math.sqrt(float(centred @ centred))


@pytest.fixture(scope="module")
def chain_bundle(spectral_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return centred_bundle(
        spectral_bundle, tmp_path_factory.mktemp("centre") / "centre.uvb", mean_vector(3)
    )


# -- the arithmetic --------------------------------------------------------------------------


@pytest.mark.parametrize("rule", ["cosine", "as-norm"])
def test_scores_take_the_chains_mean_out_first(
    spectral_bundle: Path, voice_dir: Path, tmp_path: Path, rule: str
) -> None:
    """The prototype is of the centred enrollment vectors; each test vector is centred the
    same way; under a cohort's rule the statistics are of the centred vectors (the cohort's
    own vectors as stored)."""
    mean_bytes = mean_vector(3)
    mean = np.frombuffer(mean_bytes, "<f4").astype(np.float64)
    cohort = None
    if rule == "as-norm":
        cohort = np.random.default_rng(11).normal(size=(16, DIM)).astype("<f4").tobytes()
    bundle = centred_bundle(spectral_bundle, tmp_path / "b.uvb", mean_bytes, cohort=cohort)
    verifier = Verifier(bundle, store=tmp_path / "s", passphrase=PASSPHRASE)
    samples = enrollment_dir(voice_dir, 0, tmp_path, count=5)
    verifier.enroll(samples)
    template = verifier.store.load("default")
    enrolled = [hand_centred(verifier.embed(f).astype(np.float64), mean) for f in samples.iterdir()]
    expected_prototype = np.mean(enrolled, axis=0)
    expected_prototype /= np.linalg.norm(expected_prototype)
    assert np.allclose(template.prototype, expected_prototype, atol=1e-6)
    prototype = template.prototype.astype(np.float64)
    others = [clip for speaker in range(1, 6) for clip in held_out(voice_dir, speaker)]
    moved = 0
    for clip in [*held_out(voice_dir, 0, first=5), *others]:
        raw = verifier.embed(clip).astype(np.float64)
        vector = hand_centred(raw, mean)
        expected = float(prototype @ vector / np.linalg.norm(prototype))
        if cohort is not None:
            rows = np.frombuffer(cohort, "<f4").reshape(16, DIM)
            enrolled_stats = hand_statistics(prototype, rows, 4)
            mu, sigma = hand_statistics(vector, rows, 4)
            cosine = expected
            expected = 0.5 * (
                (cosine - enrolled_stats[0]) / enrolled_stats[1] + (cosine - mu) / sigma
            )
        decision = verifier.verify(clip, backoff=False)
        assert decision.score == pytest.approx(expected, abs=1e-6)
        assert decision.accepted == (expected >= template.threshold)
        uncentred = float(raw @ prototype / np.linalg.norm(raw))
        moved += abs(uncentred - float(prototype @ vector)) > 0.05
    assert moved > 10  # centring changed the cosines: the test could fail


# -- malformed centres -----------------------------------------------------------------------


def _rehash(files: dict, data: dict) -> None:
    data["score_norm"]["centre"]["sha256"] = hashlib.sha256(files["centre.f32"]).hexdigest()
    files["manifest.json"] = json.dumps(data).encode()


def _member(values: np.ndarray):
    def change(files: dict, data: dict) -> None:
        files["centre.f32"] = np.asarray(values, "<f4").tobytes()
        _rehash(files, data)

    return change


def _with_centre_file(files: dict, data: dict) -> None:
    files["centre.f32"] = mean_vector(4)


MALFORMED = {
    "member without key": (
        lambda d: d.pop("score_norm"),
        _with_centre_file,
        "centre.f32 is not named in the manifest",
    ),
    "key without member": (None, lambda f, d: f.pop("centre.f32"), "there is no centre.f32"),
    "wrong sha256": (
        lambda d: d["score_norm"]["centre"].update(sha256="0" * 64),
        None,
        "does not match the manifest's score_norm.centre.sha256",
    ),
    "sha256 not hex": (
        lambda d: d["score_norm"]["centre"].update(sha256="X" * 64),
        None,
        "score_norm.centre.sha256 is not",
    ),
    "wrong size": (None, _member(np.zeros(DIM - 1)), "centre.f32 is 156 bytes, not dim x 4"),
    "NaN value": (None, _member([math.nan] + [0.0] * (DIM - 1)), "non-finite value"),
    "infinite value": (None, _member([math.inf] + [0.0] * (DIM - 1)), "non-finite value"),
    "norm 1 (one vector, not a mean)": (
        None,
        _member([1.0] + [0.0] * (DIM - 1)),
        "not a mean of unit vectors",
    ),
    "norm above 1": (None, _member([0.9, 0.9] + [0.0] * (DIM - 2)), "not a mean of unit"),
    "people 0": (
        lambda d: d["score_norm"]["centre"].update(people=0),
        None,
        "score_norm.centre.people must be an integer",
    ),
    "people true": (
        lambda d: d["score_norm"]["centre"].update(people=True),
        None,
        "score_norm.centre.people",
    ),
    "people as text": (
        lambda d: d["score_norm"]["centre"].update(people="12"),
        None,
        "score_norm.centre.people",
    ),
    "unknown file": (
        lambda d: d["score_norm"]["centre"].update(file="mean.f32"),
        None,
        "score_norm.centre.file must be",
    ),
    "not an object": (
        lambda d: d["score_norm"].update(centre=[0.1]),
        None,
        "score_norm.centre must be an object",
    ),
    "unknown key": (
        lambda d: d["score_norm"]["centre"].update(weights=1),
        None,
        "score_norm.centre has an unknown key",
    ),
    "as-norm without a cohort": (
        lambda d: d["score_norm"].update(method="as-norm", top_k=4),
        None,
        "score_norm.method must be 'cosine' without a cohort",
    ),
    "top_k with cosine": (
        lambda d: d["score_norm"].update(top_k=4),
        None,
        "score_norm.top_k is for as-norm",
    ),
    "cosine rule without a centre": (
        lambda d: d["score_norm"].pop("centre"),
        lambda f, d: f.pop("centre.f32"),
        "score_norm needs a cohort",
    ),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_centre_is_refused(
    chain_bundle: Path, voice_dir: Path, tmp_path: Path, case: str
) -> None:
    manifest, members, message = MALFORMED[case]

    def with_centre(files: dict, data: dict) -> None:
        bundle = Bundle(chain_bundle)
        files["centre.f32"] = bundle.centre_bytes
        if members:
            members(files, data)

    folder = folder_bundle(chain_bundle, tmp_path / "b", manifest, with_centre)
    with pytest.raises(BundleError, match=message):
        Bundle(folder)
    assert_one_line_exit_2(uvsdk("info", "--bundle", folder, "--store", tmp_path / "s"), message)
    result = uvsdk(
        "verify", enrolled_clip(voice_dir, 0), "--bundle", folder, "--store", tmp_path / "s"
    )
    assert_one_line_exit_2(result, message)
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").rglob("*.uvt"))


def test_a_cosine_rule_with_a_cohort_is_refused(tmp_path: Path, spectral_bundle: Path) -> None:
    cohort = np.random.default_rng(11).normal(size=(16, DIM)).astype("<f4").tobytes()
    with_cohort = centred_bundle(spectral_bundle, tmp_path / "c.uvb", mean_vector(3), cohort=cohort)

    def to_cosine(data: dict) -> None:
        data["score_norm"].update(method="cosine")
        data["score_norm"].pop("top_k")

    def keep_centre(files: dict, data: dict) -> None:
        files["centre.f32"] = Bundle(with_cohort).centre_bytes

    folder = folder_bundle(with_cohort, tmp_path / "b", to_cosine, keep_centre)
    with pytest.raises(BundleError, match="score_norm.method must be one of as-norm, s-norm"):
        Bundle(folder)


# -- templates, scale and what is shown ------------------------------------------------------


def test_a_template_is_bound_to_the_centre_it_was_enrolled_under(
    chain_bundle: Path, spectral_bundle: Path, voice_dir: Path, tmp_path: Path
) -> None:
    """Another chain's mean, or none, is another scale: re-enroll (the threshold and the
    prototype were taken under this mean)."""
    store = tmp_path / "store"
    enrolled = uvsdk(
        "enroll",
        "--samples",
        enrollment_dir(voice_dir, 0, tmp_path),
        "--bundle",
        chain_bundle,
        "--store",
        store,
    )
    assert enrolled.exit_code == 0, enrolled.stderr
    clip = enrolled_clip(voice_dir, 0)
    assert Verifier(chain_bundle, store=store, passphrase=PASSPHRASE).verify(clip, backoff=False)
    other = centred_bundle(spectral_bundle, tmp_path / "other.uvb", mean_vector(5))
    fewer = centred_bundle(spectral_bundle, tmp_path / "fewer.uvb", mean_vector(3), people=11)
    for bundle in (other, spectral_bundle, fewer):
        verifier = Verifier(bundle, store=store, passphrase=PASSPHRASE)
        with pytest.raises(ModelMismatchError, match="another score normalisation"):
            verifier.verify(clip, backoff=False)
        result = uvsdk("verify", clip, "--bundle", bundle, "--store", store)
        assert_one_line_exit_2(result, "re-enroll")


def test_the_scale_of_a_bundle_without_a_centre_is_unchanged(chain_bundle: Path) -> None:
    """Spec version 9 adds ``centre`` to the scale's ``score_norm`` only where it is: the scale
    of a cohort bundle is spec version 4's formula, and a centre alone has a scale."""
    manifest = Bundle(chain_bundle).manifest
    norm = manifest.score_norm
    expected = hashlib.sha256(
        json.dumps({"score_norm": norm.to_dict()}, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    assert manifest.score_scale == expected
    cohort = CohortSpec(16, "ab" * 32)
    plain = dataclasses.replace(manifest, cohort=cohort, score_norm=ScoreNorm("s-norm"))
    assert (
        plain.score_scale
        == hashlib.sha256(
            b'{"cohort":"' + b"ab" * 32 + b'","score_norm":{"method":"s-norm"}}'
        ).hexdigest()
    )


def test_info_names_the_people_behind_the_centre_and_none_of_its_values(
    chain_bundle: Path, tmp_path: Path
) -> None:
    result = uvsdk("info", "--bundle", chain_bundle, "--store", tmp_path / "s")
    assert result.exit_code == 0, result.stderr
    assert "recording chain: its mean voice, from 12 people" in result.stdout
    mean = np.frombuffer(Bundle(chain_bundle).centre_bytes, "<f4")
    for value in mean[:5]:
        assert f"{value:.4f}" not in result.stdout


@pytest.mark.parametrize(
    "release",
    [
        None,
        "federation",
        {"source": "people", "devices": 4, "privacy": None},
        {"source": "federation", "devices": True, "privacy": None},
        {"source": "federation", "devices": 0, "privacy": None},
        {"source": "federation", "devices": 4, "privacy": "dp"},
        {"source": "federation", "devices": 4, "privacy": {"epsilon": float("nan"), "delta": 0}},
        {"source": "federation", "devices": 4, "privacy": {"epsilon": "8", "delta": 1e-6}},
    ],
)
def test_info_says_nothing_of_a_centre_release_it_cannot_read(release) -> None:
    """``centre_release`` (docs/formats.md) is printed only when it has the federation's form;
    anything else in a (signed) manifest is passed over, never a crash or a made-up line."""
    from uvsdk.cli import _centre_release

    assert _centre_release(release) is None


def test_info_states_a_federations_release() -> None:
    from uvsdk.cli import _centre_release

    plain = {"source": "federation", "devices": 1200, "summed": 1190, "privacy": None}
    assert _centre_release(plain) == (
        "measured on 1,200 devices under SecAgg+, without DP (their exact mean)"
    )
    private = {**plain, "privacy": {"epsilon": 8.0, "delta": 1e-6}}
    assert _centre_release(private) == (
        "measured on 1,200 devices under SecAgg+ with DP: ε = 8, δ = 1e-06 (add-or-remove-one "
        "device) against the server and anyone holding this bundle"
    )
