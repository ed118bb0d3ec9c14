"""``uvexport --ort``: ``model.ort`` (ORT format, for ONNX Runtime Mobile) inside the bundle,
named by the signed manifest, checked against ``model.onnx``; the SDK keeps running model.onnx."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from tests.conftest import AUDIO, spectral_model_path
from uvexport import ort as uvexport_ort
from uvexport.bundle import generate_signing_key, make_manifest, write_bundle
from uvexport.errors import ExportError
from uvexport.reference import codeword_model
from uvsdk.bundle import Bundle, Manifest
from uvsdk.errors import BundleError


def _ort_bundle(path: Path, model: bytes, kind: str, dim: int, code=None, **kw) -> Path:
    """A bundle of a reference model with ``model.ort``, as ``uvexport --ort`` writes it."""
    ort_bytes, info = uvexport_ort.convert(model, uvexport_ort.parity_inputs(AUDIO))
    info["mobile_check"] = uvexport_ort.mobile_check(model)
    manifest = make_manifest(
        model,
        name=path.stem,
        method="reference",
        source=AUDIO,
        output_kind=kind,
        dim=dim,
        code=code,
        extra={"ort": info},
    )
    return write_bundle(path, model, manifest, ort=ort_bytes, **kw)


@pytest.fixture(scope="module")
def codeword_onnx(bch127) -> bytes:
    rng = np.random.default_rng(3)
    centroids = rng.normal(size=(4, 40))
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    return codeword_model(16000, centroids, rng.choice([-1.0, 1.0], size=(4, 127)), n_bands=40)


def _rewrite(source: Path, target: Path, **replace: bytes | None) -> Path:
    """A copy of a zip bundle with members replaced (``None``: left out)."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        members = {name: old.read(name) for name in old.namelist()}
        members.update(replace)
        for name, blob in members.items():
            if blob is not None:
                new.writestr(name, blob)
    return target


def test_the_bundle_carries_model_ort_named_by_the_signed_manifest(
    codeword_onnx: bytes, bch127, tmp_path: Path
) -> None:
    key = generate_signing_key()
    path = _ort_bundle(tmp_path / "cw.uvb", codeword_onnx, "codeword", 127, bch127, sign_key=key)
    with zipfile.ZipFile(path) as archive:
        ort_bytes, onnx_bytes = archive.read("model.ort"), archive.read("model.onnx")
        manifest = json.loads(archive.read("manifest.json"))
    entry = manifest["ort"]
    assert entry["file"] == "model.ort" and entry["optimization"] == "basic"
    assert entry["sha256"] == hashlib.sha256(ort_bytes).hexdigest()
    assert entry["onnxruntime"] == ort.__version__
    assert entry["parity"]["max_abs_diff"] <= entry["parity"]["tolerance"] == 1e-5
    assert ort_bytes[4:8] == b"ORTM"  # the ORT format's flatbuffer identifier, not ONNX

    # model.ort loads in ONNX Runtime and gives model.onnx's outputs (inputs not seen at export).
    batch = np.random.default_rng(7).uniform(-1, 1, (2, 24000)).astype(np.float32)
    outputs = [
        ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(
            ["output"], {"input": batch}
        )[0]
        for blob in (onnx_bytes, ort_bytes)
    ]
    assert outputs[0].shape == (2, 127)
    assert np.abs(outputs[0] - outputs[1]).max() <= 1e-5

    # The SDK loads it, verifies the signature (which covers model.ort) and runs model.onnx.
    bundle = Bundle(path, trusted_keys=[key.public_key()])
    assert bundle.signed_by is not None and bundle.ort_bytes == ort_bytes
    assert bundle.manifest.extra["ort"] == entry
    assert Manifest.from_dict(bundle.manifest.to_dict()).to_dict() == manifest  # round trip
    assert np.allclose(bundle.run(batch), outputs[0], atol=1e-6)


def test_the_sdk_refuses_a_model_ort_the_manifest_does_not_name(
    codeword_onnx: bytes, bch127, tmp_path: Path
) -> None:
    path = _ort_bundle(tmp_path / "cw.uvb", codeword_onnx, "codeword", 127, bch127)
    with zipfile.ZipFile(path) as archive:
        ort_bytes = archive.read("model.ort")
        manifest = json.loads(archive.read("manifest.json"))
    tampered = bytearray(ort_bytes)
    tampered[len(tampered) // 2] ^= 1
    refused = {
        "tampered": _rewrite(path, tmp_path / "t.uvb", **{"model.ort": bytes(tampered)}),
        # a model.ort slipped into a bundle whose manifest names none
        "unnamed": _rewrite(
            path,
            tmp_path / "u.uvb",
            **{
                "manifest.json": json.dumps(
                    {k: v for k, v in manifest.items() if k != "ort"}
                ).encode()
            },
        ),
    }
    codes = {"tampered": "bundle.digest-mismatch", "unnamed": "bundle.member-unexpected"}
    for name, bundle in refused.items():
        with pytest.raises(BundleError) as refusal:
            Bundle(bundle)
        assert refusal.value.code == codes[name], (name, str(refusal.value))
    # The manifest's own ort object is validated.
    for bad, message in (
        ({"file": "other.ort"}, "ort.file must be 'model.ort'"),
        ({"sha256": manifest["ort"]["sha256"].upper()}, "ort.sha256 is not 64 lowercase hex"),
        ({"sha256": 5}, "ort.sha256 must be a str"),
    ):
        with pytest.raises(BundleError, match=message):
            Manifest.from_dict({**manifest, "ort": {**manifest["ort"], **bad}})
    with pytest.raises(BundleError, match="ort must be an object"):
        Manifest.from_dict({**manifest, "ort": "model.ort"})
    # Taking model.ort out leaves a bundle the SDK runs (it runs model.onnx).
    stripped = Bundle(_rewrite(path, tmp_path / "s.uvb", **{"model.ort": None}))
    assert stripped.ort_bytes is None and stripped.manifest.extra["ort"] == manifest["ort"]
    # The writer refuses a manifest and a model.ort that disagree.
    with pytest.raises(ValueError, match="ort.sha256"):
        write_bundle(tmp_path / "x.uvb", codeword_onnx, stripped.manifest, ort=bytes(tampered))
    with pytest.raises(ValueError, match="ort.sha256"):
        write_bundle(tmp_path / "x.uvb", codeword_onnx, stripped.manifest)
    assert not (tmp_path / "x.uvb").exists()


def test_conversion_and_parity_failures_are_export_errors(
    codeword_onnx: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = uvexport_ort.parity_inputs(AUDIO)
    with pytest.raises(ExportError, match=r"^--ort: ONNX Runtime could not convert the model"):
        uvexport_ort.convert(b"not an onnx model", inputs)
    monkeypatch.setattr(uvexport_ort, "PARITY_TOLERANCE", -1.0)  # read when convert runs
    with pytest.raises(ExportError, match=r"^--ort: model.ort differs from model.onnx by .*-1"):
        uvexport_ort.convert(codeword_onnx, inputs)


def test_the_mobile_check_states_facts_per_execution_provider(codeword_onnx: bytes) -> None:
    facts = uvexport_ort.mobile_check(codeword_onnx)
    assert facts["dynamic_inputs"] == ["input"]  # dynamic batch and length
    for provider in ("nnapi", "coreml"):
        entry = facts[provider]
        assert entry["verdict"] in ("yes", "maybe", "no")
        assert entry["verdict_if_fixed_shape"] in ("yes", "maybe", "no")
        assert 0 <= entry["nodes"] <= entry["of"] and entry["of"] > 5
        assert all(isinstance(op, str) and ":" not in op for op in entry["unsupported_ops"])
    entry = {"onnxruntime": "1", "optimization": "basic", "parity": {"max_abs_diff": 0.0}}
    lines = uvexport_ort.summary({**entry, "mobile_check": facts}, 1_000_000, 900_000)
    assert lines[0].startswith("model.ort: 0.90 MB (model.onnx 1.00 MB)")
    assert any("NNAPI (Android)" in line for line in lines)
    assert any("CoreML (iOS)" in line for line in lines)


def test_calibrate_keeps_model_ort(spectral_bundle: Path, voice_dir: Path, tmp_path: Path) -> None:
    from uvexport.calibrate import calibrate_bundle

    model = spectral_model_path(spectral_bundle).read_bytes()
    source = _ort_bundle(tmp_path / "spectral.uvb", model, "embedding", 40)
    before = Bundle(source)
    out, _ = calibrate_bundle(
        source, voice_dir, tmp_path / "calibrated.uvb", conditions=("clean",), cohort_size=32
    )
    after = Bundle(out)
    assert after.manifest.calibration is not None
    assert after.ort_bytes == before.ort_bytes is not None
    assert after.manifest.extra["ort"] == before.manifest.extra["ort"]
    assert after.manifest.cohort.count == 32 and after.cohort is not None  # the cohort added


def test_uvexport_ort_on_a_trained_run(
    tiny_feduv_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    pytest.importorskip("torch")
    from uvexport.cli import main

    monkeypatch.setenv("UVTRAIN_DATA", str(tiny_feduv_run.parent / "data"))
    out = tmp_path / "voice.uvb"
    assert main([str(tiny_feduv_run), "--force", "--out", str(out), "--ort"]) == 0
    printed = capsys.readouterr().out
    assert "model.ort: " in printed and "NNAPI (Android): " in printed, printed
    bundle = Bundle(out)
    entry = bundle.manifest.extra["ort"]
    assert bundle.ort_bytes is not None
    assert entry["sha256"] == hashlib.sha256(bundle.ort_bytes).hexdigest()
    assert set(entry["mobile_check"]) == {"dynamic_inputs", "nnapi", "coreml"}
    clips = np.random.default_rng(1).uniform(-1, 1, (3, 32000)).astype(np.float32)
    session = ort.InferenceSession(bundle.ort_bytes, providers=["CPUExecutionProvider"])
    assert np.abs(session.run(["output"], {"input": clips})[0] - bundle.run(clips)).max() <= 1e-5

    # A parity failure writes nothing: one line, exit 2.
    monkeypatch.setattr(uvexport_ort, "PARITY_TOLERANCE", -1.0)
    failed = tmp_path / "failed.uvb"
    assert main([str(tiny_feduv_run), "--force", "--out", str(failed), "--ort"]) == 2
    err = [
        line
        for line in capsys.readouterr().err.strip().splitlines()
        if not line.startswith(("uvexport: step ", "uvexport: warning: "))  # progress, --force
    ]
    assert len(err) == 1 and "model.ort differs from model.onnx" in err[0], err
    assert not failed.exists()


def test_an_oversized_model_ort_is_refused_before_reading(
    codeword_onnx: bytes, bch127, tmp_path: Path
) -> None:
    folder = _ort_bundle(tmp_path / "cw", codeword_onnx, "codeword", 127, bch127, directory=True)
    assert Bundle(folder).ort_bytes == (folder / "model.ort").read_bytes()  # a folder bundle too
    with open(folder / "model.ort", "r+b") as handle:
        handle.truncate(3 * 1024**3)  # sparse: costs no disk, would cost 3 GB of memory
    with pytest.raises(BundleError, match="model.ort is 3221225472 bytes, more than the"):
        Bundle(folder)
