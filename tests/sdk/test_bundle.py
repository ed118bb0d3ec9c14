"""Bundles: every way a bundle can be wrong is a clear BundleError."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from uvexport.bundle import generate_signing_key, make_manifest, save_signing_key, write_bundle
from uvsdk.bundle import Bundle, Manifest
from uvsdk.errors import BundleError, SignatureError

from ..conftest import AUDIO, audio_bundle


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _rezip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, blob in members.items():
            archive.writestr(name, blob)
    return path


def test_zip_and_directory_load_the_same(spectral_bundle: Path, tmp_path: Path) -> None:
    folder = tmp_path / "unpacked"
    with zipfile.ZipFile(spectral_bundle) as archive:
        archive.extractall(folder)
    zipped, unpacked = Bundle(spectral_bundle), Bundle(folder)
    assert zipped.manifest == unpacked.manifest
    assert zipped.manifest.output_kind == "embedding" and zipped.manifest.dim == 40
    batch = np.random.default_rng(0).normal(0, 0.1, (3, 32000)).astype(np.float32)
    np.testing.assert_array_equal(zipped.run(batch), unpacked.run(batch))


def test_manifest_round_trip(initial_codeword_bundle: Path) -> None:
    manifest = Bundle(initial_codeword_bundle).manifest
    again = Manifest.from_dict(json.loads(json.dumps(manifest.to_dict())))
    assert again == manifest and again.code.fingerprint == manifest.code.fingerprint
    assert manifest.extra == {"note": "reference model built in tests"}


def test_edited_model_is_refused(spectral_bundle: Path, tmp_path: Path) -> None:
    members = _members(spectral_bundle)
    model = bytearray(members["model.onnx"])
    model[len(model) // 2] ^= 0x01
    members["model.onnx"] = bytes(model)
    with pytest.raises(BundleError, match="does not match the manifest's model_sha256"):
        Bundle(_rezip(tmp_path / "edited.uvb", members))


@pytest.mark.parametrize("keep", [0.0, 0.3, 0.9])
def test_truncated_bundle_is_refused(spectral_bundle: Path, tmp_path: Path, keep: float) -> None:
    blob = spectral_bundle.read_bytes()
    path = tmp_path / "truncated.uvb"
    path.write_bytes(blob[: int(len(blob) * keep)])
    with pytest.raises(BundleError, match="truncated or corrupt"):
        Bundle(path)


def test_missing_bundle_and_missing_members(spectral_bundle: Path, tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="not found"):
        Bundle(tmp_path / "nowhere.uvb")
    members = _members(spectral_bundle)
    del members["manifest.json"]
    with pytest.raises(BundleError, match="no manifest.json"):
        Bundle(_rezip(tmp_path / "nomanifest.uvb", members))


def _with_manifest(spectral_bundle: Path, path: Path, change) -> Path:
    members = _members(spectral_bundle)
    data = json.loads(members["manifest.json"])
    change(data)
    members["manifest.json"] = json.dumps(data).encode()
    return _rezip(path, members)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format="uvsdk-bundle/9"), "unknown bundle format 'uvsdk-bundle/9'"),
        (lambda d: d.pop("format"), "unknown bundle format None"),
        (lambda d: d.update(method="magic"), "unknown method"),
        (lambda d: d.update(modality="smell"), "unknown modality"),
        (lambda d: d["input"].update(sample_rate="fast"), "input.sample_rate must be a int"),
        (lambda d: d["input"].update(min_seconds=5.0), "min_seconds <= window_seconds"),
        (lambda d: d["input"].update(band="telephone"), "input.band 'telephone' is not one of"),
        (lambda d: d["input"].update(band=None), "input.band must be a str, not None"),
        (lambda d: d["input"].update(band=8000), "input.band must be a str, not 8000"),
        (lambda d: d["output"].update(kind="codeword"), "needs a 'code' object"),
        (lambda d: d.update(model_sha256="abc"), "model_sha256 is not 64"),
    ],
)
def test_bad_manifests_are_refused(spectral_bundle: Path, tmp_path: Path, change, message) -> None:
    with pytest.raises(BundleError, match=message.replace("(", r"\(")):
        Bundle(_with_manifest(spectral_bundle, tmp_path / "bad.uvb", change))


def test_manifest_that_is_not_json(spectral_bundle: Path, tmp_path: Path) -> None:
    members = _members(spectral_bundle)
    members["manifest.json"] = b"\xff{not json"
    with pytest.raises(BundleError, match="not valid JSON"):
        Bundle(_rezip(tmp_path / "bad.uvb", members))


def test_code_must_match_output(initial_codeword_bundle: Path, tmp_path: Path) -> None:
    def shrink(data: dict) -> None:
        data["code"]["n"] = 63

    with pytest.raises(BundleError, match="n = output.dim"):
        Bundle(_with_manifest(initial_codeword_bundle, tmp_path / "bad.uvb", shrink))


def test_signatures(spectral_bundle: Path, tmp_path: Path) -> None:
    key = generate_signing_key()
    private_path, public_path = save_signing_key(key, tmp_path / "key.pem")
    assert oct(private_path.stat().st_mode & 0o777) == "0o600"
    model = _members(spectral_bundle)["model.onnx"]
    signed = audio_bundle(tmp_path / "signed.uvb", model, "embedding", 40, sign_key=key)
    assert Bundle(signed, trusted_keys=[public_path]).signed_by is not None
    assert Bundle(signed).signed_by is None  # no trusted keys configured: not checked

    with pytest.raises(SignatureError, match="not signed"):
        Bundle(spectral_bundle, trusted_keys=[public_path])
    _, stranger = save_signing_key(generate_signing_key(), tmp_path / "other.pem")
    with pytest.raises(SignatureError, match="does not verify"):
        Bundle(signed, trusted_keys=[stranger])

    def rename(data: dict) -> None:
        data["name"] = "evil"

    edited = _with_manifest(signed, tmp_path / "edited.uvb", rename)
    with pytest.raises(SignatureError, match="does not verify"):
        Bundle(edited, trusted_keys=[public_path])
    (tmp_path / "junk.pem").write_text("not a key")
    with pytest.raises(SignatureError, match="cannot read trusted key"):
        Bundle(signed, trusted_keys=[tmp_path / "junk.pem"])


def _tiny_model(input_name: str = "input", dtype: int = TensorProto.FLOAT) -> bytes:
    node = helper.make_node("ReduceMean", [input_name], ["output"], axes=[1], keepdims=1)
    graph = helper.make_graph(
        [node],
        "tiny",
        [helper.make_tensor_value_info(input_name, dtype, ["batch", "samples"])],
        [helper.make_tensor_value_info("output", dtype, ["batch", 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_model_that_breaks_the_contract(tmp_path: Path) -> None:
    def bundle_of(model: bytes, name: str, dim: int = 1) -> Bundle:
        manifest = make_manifest(
            model, name=name, method="reference", source=AUDIO, output_kind="embedding", dim=dim
        )
        return Bundle(write_bundle(tmp_path / f"{name}.uvb", model, manifest))

    with pytest.raises(BundleError, match="one input 'input'"):
        _ = bundle_of(_tiny_model("audio"), "renamed").session
    with pytest.raises(BundleError, match="does not load"):
        _ = bundle_of(b"this is not onnx", "garbage").session
    with pytest.raises(BundleError, match="promises"):
        bundle_of(_tiny_model(), "wrongdim", dim=8).run(np.zeros((2, 100), np.float32))
    good = bundle_of(_tiny_model(), "good")
    assert good.run(np.ones((2, 100), np.float32)).shape == (2, 1)
    onnx.checker.check_model(onnx.load_from_string(_tiny_model()))


def test_directory_bundle_missing_model(spectral_bundle: Path, tmp_path: Path) -> None:
    folder = tmp_path / "dir"
    with zipfile.ZipFile(spectral_bundle) as archive:
        archive.extractall(folder)
    (folder / "model.onnx").unlink()
    with pytest.raises(BundleError, match="no model.onnx"):
        Bundle(folder)
    shutil.rmtree(folder)
