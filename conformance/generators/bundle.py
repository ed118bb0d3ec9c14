"""``vectors/bundle.json``: manifests and archives (spec §3)."""

from __future__ import annotations

import hashlib
import json
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from uvsdk.bundle import Bundle, Manifest
from uvsdk.errors import UvsdkError

from .shared import CONFORMANCE, b64, document, outcome


def generate() -> dict[str, Any]:
    source = CONFORMANCE / "bundles/voice-codeword.uvb"
    with zipfile.ZipFile(source) as archive:
        base = json.loads(archive.read("manifest.json"))
    model_sha = base["model_sha256"]

    def patched(path: str, value: Any) -> dict[str, Any]:
        data = json.loads(json.dumps(base))
        *parents, last = path.split(".")
        target = data
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        if value is _DELETE:
            del target[last]
        elif last.isdigit():
            target[int(last)] = value
        else:
            target[last] = value
        return data

    rows = "calibration.prototype.rows"
    changes = [
        ("valid", None, None),
        ("format", "format", "uvsdk-bundle/2"),
        ("method", "method", "magic"),
        ("modality", "modality", "smell"),
        ("sample-rate-low", "input.sample_rate", 999),
        ("sample-rate-float", "input.sample_rate", 16000.5),
        ("window-long", "input.window_seconds", 31.0),
        ("hop-above-window", "input.hop_seconds", 2.5),
        ("hop-tiny", "input.hop_seconds", 0.04),
        ("min-above-window", "input.min_seconds", 2.5),
        ("min-zero", "input.min_seconds", 0),
        ("kind", "output.kind", "vector"),
        ("dim-zero", "output.dim", 0),
        ("dim-not-n", "output.dim", 128),
        ("sha-upper", "model_sha256", model_sha.upper()),
        ("sha-other", "model_sha256", "0" * 64),
        ("code-missing", "code", _DELETE),
        ("id-bits-k", "code.id_bits", 64),
        ("generator-short", "code.generator", base["code"]["generator"][:-8]),
        ("calibration-version", "calibration.version", 2),
        ("calibration-unknown-key", "calibration.extra", 1),
        ("far-not-falling", f"{rows}.1.far", 0.5),
        ("far-too-large", f"{rows}.0.far", 0.6),
        ("threshold-falling", f"{rows}.1.threshold", -1.0),
        ("count-negative", "calibration.prototype.people", -1),
        ("codeword-table-in-embedding", "output.kind", "embedding"),
        ("extra-keys-kept", "licence", "CC0"),
        ("description", "description", "a line"),
    ]
    manifests = []
    for name, path, value in changes:
        data = base if path is None else patched(path, value)
        change: dict[str, Any] = (
            {}
            if path is None
            else ({"delete": [path]} if value is _DELETE else {"set": {path: value}})
        )
        if name == "codeword-table-in-embedding":
            del data["code"]
            change["delete"] = ["code"]
        _, error = outcome(lambda d=data: Manifest.from_dict(d))
        if error is None and data["model_sha256"] != model_sha:
            error = UvsdkError("model.onnx does not match the manifest's model_sha256")
        manifests.append(
            {
                "name": name,
                **change,
                "valid": error is None,
                **({"error": str(error)} if error is not None else {}),
            }
        )

    image = (CONFORMANCE / "bundles/image-embedding.uvb").read_bytes()
    with zipfile.ZipFile(CONFORMANCE / "bundles/image-embedding.uvb") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}

    def rezip(**changed: bytes | None) -> bytes:
        import io

        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name, blob in {**members, **changed}.items():
                if blob is not None:
                    archive.writestr(zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)), blob)
        return buffer.getvalue()

    public = (CONFORMANCE / "keys/conformance.pub.hex").read_text().strip()
    other = hashlib.sha256(b"not the conformance key").digest()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    other_public = (
        Ed25519PrivateKey.from_private_bytes(other)
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        .hex()
    )
    manifest_bytes = members["manifest.json"]
    archives = [
        ("signed", rezip(), [public]),
        ("signed-no-trusted-keys", rezip(), []),
        ("signed-other-key", rezip(), [other_public]),
        ("signed-two-keys", rezip(), [other_public, public]),
        ("unsigned-trusted-keys", rezip(**{"signature.ed25519": None}), [public]),
        ("unsigned-no-keys", rezip(**{"signature.ed25519": None}), []),
        ("manifest-whitespace-edited", rezip(**{"manifest.json": manifest_bytes + b" "}), [public]),
        (
            "manifest-whitespace-edited-no-keys",
            rezip(**{"manifest.json": manifest_bytes + b" "}),
            [],
        ),
        ("model-edited", rezip(**{"model.onnx": members["model.onnx"] + b"\0"}), []),
        ("no-manifest", rezip(**{"manifest.json": None}), []),
        ("no-model", rezip(**{"model.onnx": None}), []),
        ("manifest-not-json", rezip(**{"manifest.json": b"{nope"}), []),
        ("truncated", image[: len(image) // 2], []),
        ("not-a-zip", b"hello, world" * 10, []),
    ]
    archive_cases = []
    with tempfile.TemporaryDirectory() as folder:
        for name, blob, keys in archives:
            path = Path(folder) / f"{name}.uvb"
            path.write_bytes(blob)
            pems = [_pem(k) for k in keys]
            loaded, error = outcome(lambda p=path, t=pems: Bundle(p, trusted_keys=t or None))
            archive_cases.append(
                {
                    "name": name,
                    "file_b64": b64(blob),
                    "trusted_keys_hex": keys,
                    "valid": error is None,
                    **(
                        {"error": type(error).__name__}
                        if error is not None
                        else {"signed_by": loaded.signed_by}
                    ),
                }
            )
    return document(
        "bundle",
        "Manifests to accept or refuse: base_manifest (the voice-codeword bundle's) with `set` "
        "(dotted paths, numbers index arrays) and `delete` applied; model_sha256 must match "
        "the bundle's model; `error` is the SDK's message, which names the key (a port's "
        "wording may differ). Then whole archives, with the trusted Ed25519 public keys (raw, hex) they are "
        "opened with: valid or the SDK's exception, and the signing key's fingerprint "
        "(first 16 hex digits of SHA-256 of the raw key) (spec §3).",
        base_manifest=base,
        manifests=manifests,
        archives=archive_cases,
    )


_DELETE = object()


def _pem(raw_hex: str) -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(raw_hex))
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
