"""The manifest's ``training`` (how the model was trained) and the enrollment mode it sets:
a DP-trained FedUV bundle enrolls by prototype unless codeword mode is asked for (spec §3.10,
§9.1). The malformed ``training`` objects are conformance vectors (vectors/bundle.json)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from uvexport.bundle import generate_signing_key, save_signing_key, write_bundle
from uvsdk import Verifier
from uvsdk.bundle import Bundle, Manifest
from uvsdk.errors import BundleError, EnrollmentError, SignatureError
from uvsdk.template import TemplateStore
from uvsdk.verifier import enrollment_mode

from ..conftest import N_SPEAKERS, PASSPHRASE, enrollment_dir, trained_codeword_bundle
from .test_cli import uvsdk
from .test_verifier import _spectral

DP_FEDUV = {
    "method": "feduv",
    "privacy": {
        "mechanism": "central",
        "epsilon": 8,
        "delta": 1e-06,
        "simulated_deployment": True,
        "membership_eer_floor": 0.39,
    },
    "enrollment": "prototype",
}


def with_training(bundle: Path, out: Path, training: dict[str, Any] | None, **kw: Any) -> Path:
    """``bundle`` written again to ``out`` with ``training`` in its manifest."""
    loaded = Bundle(bundle)
    data = loaded.manifest.to_dict()
    data["training"] = training
    return write_bundle(out, loaded.model_bytes, Manifest.from_dict(data), **kw)


def test_training_round_trips_and_absent_means_not_stated(
    initial_codeword_bundle: Path, tmp_path: Path
) -> None:
    assert Bundle(initial_codeword_bundle).manifest.training is None
    manifest = Bundle(
        with_training(initial_codeword_bundle, tmp_path / "dp.uvb", DP_FEDUV)
    ).manifest
    assert manifest.training is not None and "training" not in manifest.extra
    assert manifest.training.privacy is not None and manifest.training.privacy.epsilon == 8.0
    assert manifest.to_dict()["training"] == {
        **DP_FEDUV,
        "privacy": {**DP_FEDUV["privacy"], "epsilon": 8.0},
    }
    assert Manifest.from_dict(manifest.to_dict()).training == manifest.training
    plain = with_training(initial_codeword_bundle, tmp_path / "null.uvb", None)
    assert Bundle(plain).manifest.training is None
    # epsilon_server: absent (bundles before spec version 5) is not stated; present, validated
    from uvsdk.training import Privacy

    assert manifest.training.privacy.epsilon_server is None
    stated = {**DP_FEDUV["privacy"], "epsilon_server": 22.4}
    privacy = Privacy.from_dict(stated)
    assert privacy.epsilon_server == 22.4 and privacy.to_dict() == {**stated, "epsilon": 8}
    for bad in (0, -1.0, "22", True, None, float("inf")):
        with pytest.raises(BundleError, match="epsilon_server"):
            Privacy.from_dict({**stated, "epsilon_server": bad})


def test_codeword_enrollment_is_refused_on_an_embedding_bundle(spectral_bundle: Path) -> None:
    data = Bundle(spectral_bundle).manifest.to_dict()
    data["training"] = {"method": "fedhide", "privacy": None, "enrollment": "codeword"}
    with pytest.raises(BundleError, match="'codeword' needs output.kind 'codeword'"):
        Manifest.from_dict(data)


def test_the_signature_covers_training(initial_codeword_bundle: Path, tmp_path: Path) -> None:
    key = generate_signing_key()
    save_signing_key(key, tmp_path / "key.pem")
    public = tmp_path / "key.pub.pem"
    signed = with_training(initial_codeword_bundle, tmp_path / "signed.uvb", DP_FEDUV, sign_key=key)
    assert Bundle(signed, trusted_keys=[public]).manifest.training is not None
    members = {}
    with zipfile.ZipFile(signed) as archive:
        for name in archive.namelist():
            members[name] = archive.read(name)
    data = json.loads(members["manifest.json"])
    data["training"].update(privacy=None, enrollment="codeword")  # valid, but not signed so
    members["manifest.json"] = json.dumps(data, indent=2).encode()
    edited = tmp_path / "edited.uvb"
    with zipfile.ZipFile(edited, "w") as archive:
        for name, blob in members.items():
            archive.writestr(name, blob)
    assert Bundle(edited).manifest.training.enrollment == "codeword"  # no keys: not checked
    with pytest.raises(SignatureError, match="does not verify"):
        Bundle(edited, trusted_keys=[public])


@pytest.mark.parametrize(
    ("requested", "training", "holds", "expected"),
    [
        ("auto", None, True, "codeword"),
        ("auto", None, False, "prototype"),
        ("auto", DP_FEDUV, True, "prototype"),
        ("auto", {**DP_FEDUV, "privacy": None, "enrollment": "codeword"}, True, "codeword"),
        ("prototype", None, True, "prototype"),
        ("codeword", DP_FEDUV, True, "codeword"),
    ],
)
def test_enrollment_mode_choice(
    initial_codeword_bundle: Path, requested: str, training: Any, holds: bool, expected: str
) -> None:
    data = Bundle(initial_codeword_bundle).manifest.to_dict()
    data["training"] = training
    assert enrollment_mode(requested, Manifest.from_dict(data), holds) == expected


def test_enrollment_mode_refusals(initial_codeword_bundle: Path, spectral_bundle: Path) -> None:
    codeword = Bundle(initial_codeword_bundle).manifest
    with pytest.raises(EnrollmentError, match="holds none"):
        enrollment_mode("codeword", codeword, False)
    with pytest.raises(EnrollmentError, match="needs a codeword bundle"):
        enrollment_mode("codeword", Bundle(spectral_bundle).manifest, True)
    with pytest.raises(EnrollmentError, match="auto, prototype or codeword"):
        enrollment_mode("Codeword", codeword, True)


@pytest.fixture()
def dp_codeword_store(
    initial_codeword_bundle: Path, voice_dir: Path, corpus: list, bch127, tmp_path: Path
) -> tuple[Path, Path, Path]:
    """A user (speaker 2) holding a codeword, a stand-in FedUV bundle trained with it under DP
    (``training.enrollment`` prototype), and the store."""
    store = tmp_path / "store"
    Verifier(initial_codeword_bundle, store=store, passphrase=PASSPHRASE).new_codeword(user_id=7)
    secret = TemplateStore(store, passphrase=PASSPHRASE).load("default").codeword
    rng = np.random.default_rng(3)
    others = {s: rng.integers(0, 2, 127).astype(np.uint8) for s in range(N_SPEAKERS) if s != 2}
    trained = trained_codeword_bundle(
        tmp_path / "trained.uvb", corpus, _spectral(tmp_path), {2: secret, **others}, bch127
    )
    dp = with_training(trained, tmp_path / "dp.uvb", DP_FEDUV)
    return dp, store, enrollment_dir(voice_dir, 2, tmp_path)


def test_a_dp_codeword_bundle_enrolls_by_prototype_unless_asked(dp_codeword_store) -> None:
    bundle, store, samples = dp_codeword_store
    verifier = Verifier(bundle, store=store, passphrase=PASSPHRASE)
    assert verifier.enroll(samples).mode == "prototype"
    template = TemplateStore(store, passphrase=PASSPHRASE).load("default")
    assert template.mode == "prototype" and template.codeword is not None  # kept, unused
    assert verifier.enroll(samples, mode="codeword").mode == "codeword"
    assert verifier.enroll(samples, mode="prototype").mode == "prototype"


def test_enroll_mode_on_the_command_line(dp_codeword_store, spectral_bundle: Path) -> None:
    bundle, store, samples = dp_codeword_store
    common = ["--samples", samples, "--store", store]
    auto = uvsdk("enroll", *common, "--bundle", bundle)
    assert auto.exit_code == 0 and "in prototype mode" in auto.stdout, auto.stderr
    insisted = uvsdk("enroll", *common, "--bundle", bundle, "--mode", "codeword")
    assert insisted.exit_code == 0 and "in codeword mode" in insisted.stdout, insisted.stderr
    before = (store / "default.uvt").read_bytes()
    for arguments, message in [
        (["--bundle", spectral_bundle, "--mode", "codeword"], "needs a codeword bundle"),
        (["--bundle", bundle, "--mode", "codewords"], "auto, prototype or codeword"),
        (["--bundle", bundle, "--mode", "codeword", "--user", "bob"], "holds none"),
    ]:
        refused = uvsdk("enroll", *common, *arguments)
        lines = refused.stderr.strip().splitlines()
        assert refused.exit_code == 2 and len(lines) == 1 and message in lines[0], refused.stderr
        assert "Traceback" not in refused.stdout + refused.stderr
    assert (store / "default.uvt").read_bytes() == before
    assert not (store / "bob.uvt").exists()


def test_info_states_the_training_and_what_codeword_mode_costs(
    initial_codeword_bundle: Path, spectral_bundle: Path, tmp_path: Path
) -> None:
    dp = with_training(initial_codeword_bundle, tmp_path / "dp.uvb", DP_FEDUV)
    shown = uvsdk("info", "--bundle", dp, "--store", tmp_path / "store")
    assert shown.exit_code == 0, shown.stderr
    assert (
        "training: feduv, user-level DP: ε = 8 against anyone who sees the released model, ε "
        "against the server that ran training not stated (δ = 1e-06, central), at a simulated "
        "deployment scale" in shown.stdout
    )
    stated = {**DP_FEDUV, "privacy": {**DP_FEDUV["privacy"], "epsilon_server": 22.4245,
                                       "mechanism": "distributed", "simulated_deployment": False}}  # fmt: skip
    server = with_training(initial_codeword_bundle, tmp_path / "server.uvb", stated)
    shown = uvsdk("info", "--bundle", server, "--store", tmp_path / "store")
    assert shown.exit_code == 0, shown.stderr
    assert (
        "training: feduv, user-level DP: ε = 8 against anyone who sees the released model, "
        "ε = 22.4 against the server that ran training (δ = 1e-06, distributed)\n" in shown.stdout
    )
    assert "enrollment: prototype by default" in shown.stdout
    assert "its EER cannot go below 0.39 here" in shown.stdout
    assert "enrolls by prototype unless --mode codeword" in shown.stdout
    plain = with_training(
        spectral_bundle,
        tmp_path / "plain.uvb",
        {"method": "fedhide", "privacy": None, "enrollment": "prototype"},
    )
    shown = uvsdk("info", "--bundle", plain, "--store", tmp_path / "store")
    assert "training: fedhide, without differential privacy" in shown.stdout
    assert "EER cannot go below" not in shown.stdout
    unstated = uvsdk("info", "--bundle", spectral_bundle, "--store", tmp_path / "store")
    assert "training: not stated" in unstated.stdout
