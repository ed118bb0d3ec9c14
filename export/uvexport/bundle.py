"""Writing ``.uvb`` bundles and Ed25519 signing keys.

The manifest schema is the SDK's (:class:`uvsdk.bundle.Manifest`): the exporter builds a manifest
object, and the SDK's own validation runs on it before anything is written, so a bundle this module
writes is one the SDK reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import IO, Any

from uvsdk.bundle import (
    CENTRE_FILE,
    COHORT_FILE,
    FORMAT,
    MANIFEST_FILE,
    MODEL_FILE,
    ORT_FILE,
    SIGNATURE_FILE,
    Code,
    Manifest,
)
from uvsdk.inputs import ModelInput
from uvtrain.io import atomic_write


def make_manifest(
    model: bytes,
    *,
    name: str,
    method: str,
    source: ModelInput,
    output_kind: str,
    dim: int,
    code: Code | None = None,
    extra: dict[str, Any] | None = None,
) -> Manifest:
    """A validated manifest for the given model bytes."""
    manifest = Manifest(
        name=name,
        method=method,
        input=source,
        output_kind=output_kind,
        dim=dim,
        model_sha256=hashlib.sha256(model).hexdigest(),
        code=code,
        extra=dict(extra or {}),
    )
    return Manifest.from_dict(manifest.to_dict())  # the SDK's validation, before writing


def write_bundle(
    path: str | Path,
    model: bytes,
    manifest: Manifest,
    *,
    sign_key: Any | None = None,
    directory: bool = False,
    ort: bytes | None = None,
    cohort: bytes | None = None,
    centre: bytes | None = None,
) -> Path:
    """Write a bundle (zip ``.uvb``, or a folder with ``directory=True``), optionally signed, with
    ``model.ort`` when ``ort`` is given (the manifest's ``ort.sha256`` must name it),
    ``cohort.f32`` when ``cohort`` is (the manifest's ``cohort.sha256`` must name it) and
    ``centre.f32`` when ``centre`` is (its ``score_norm.centre.sha256`` must name it).

    The zip is written atomically (:func:`uvtrain.io.atomic_write`: a temporary file beside
    ``path``, fsync, moved into place), so an interrupted export never leaves a half-written
    bundle.
    """
    if hashlib.sha256(model).hexdigest() != manifest.model_sha256:
        raise ValueError("the manifest's model_sha256 does not match the model")
    named = manifest.extra.get("ort")
    if (ort is None) != (named is None) or (
        ort is not None and hashlib.sha256(ort).hexdigest() != named["sha256"]
    ):
        raise ValueError("the manifest's ort.sha256 does not match model.ort")
    spec = manifest.cohort
    if (cohort is None) != (spec is None) or (
        cohort is not None and hashlib.sha256(cohort).hexdigest() != spec.sha256
    ):
        raise ValueError("the manifest's cohort.sha256 does not match cohort.f32")
    named_centre = None if manifest.score_norm is None else manifest.score_norm.centre
    if (centre is None) != (named_centre is None) or (
        centre is not None and hashlib.sha256(centre).hexdigest() != named_centre.sha256
    ):
        raise ValueError("the manifest's score_norm.centre.sha256 does not match centre.f32")
    data = manifest.to_dict()
    assert data["format"] == FORMAT
    manifest_bytes = (json.dumps(data, indent=2) + "\n").encode("utf-8")
    members = {MANIFEST_FILE: manifest_bytes, MODEL_FILE: model}
    if ort is not None:
        members[ORT_FILE] = ort
    if cohort is not None:
        members[COHORT_FILE] = cohort
    if centre is not None:
        members[CENTRE_FILE] = centre
    if sign_key is not None:
        members[SIGNATURE_FILE] = sign_key.sign(manifest_bytes)
    path = Path(path)
    if directory:
        path.mkdir(parents=True, exist_ok=True)
        for name, blob in members.items():
            (path / name).write_bytes(blob)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)

    def write_zip(handle: IO[bytes]) -> None:
        with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name, blob in members.items():
                archive.writestr(name, blob)
        if hasattr(os, "fchmod"):  # readable by all, as a bundle is meant to be (not 0600)
            os.fchmod(handle.fileno(), 0o644)

    atomic_write(path, write_zip)
    return path


def generate_signing_key() -> Any:
    """A new Ed25519 private key."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate()


def save_signing_key(key: Any, path: str | Path) -> tuple[Path, Path]:
    """Write the private key (PEM, mode 0600) and its public key beside it (``.pub.pem``)."""
    from cryptography.hazmat.primitives import serialization

    path = Path(path)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(private)
    public_path = path.with_name(path.name.removesuffix(".pem") + ".pub.pem")
    public_path.write_bytes(public)
    return path, public_path


def load_signing_key(path: str | Path) -> Any:
    """An Ed25519 private key from a PEM file."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key = load_pem_private_key(Path(path).read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 private key")
    return key
