"""``vectors/bundle.json``: manifests and archives (spec §3)."""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from uvsdk.bundle import Bundle, Manifest
from uvsdk.errors import UvsdkError

from . import rawzip
from .shared import CONFORMANCE, b64, document, outcome


def _patch(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``base`` with ``value`` at the dotted ``path`` (numbers index arrays)."""
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


def _manifest_cases(base: dict[str, Any]) -> list[dict[str, Any]]:
    """``base`` with each change applied (one path, or several in order) → valid or the error."""
    model_sha = base["model_sha256"]
    rows = "calibration.prototype.rows"
    cohort = {"file": "cohort.f32", "count": 64, "sha256": "0" * 64}
    norm = {"method": "as-norm", "top_k": 10}
    with_cohort = {"cohort": cohort, "score_norm": norm, "calibration.prototype.score": "as-norm"}
    s_norm = {**with_cohort, "score_norm": {"method": "s-norm"},
              "calibration.prototype.score": "s-norm"}  # fmt: skip
    centre = {"file": "centre.f32", "people": 12, "sha256": "0" * 64}
    with_centre = {"score_norm": {"method": "cosine", "centre": centre}}
    conditions = "calibration.prototype.conditions"
    changes: list[tuple[str, Any]] = [
        ("valid", {}),
        ("format", {"format": "uvsdk-bundle/2"}),
        ("method", {"method": "magic"}),
        ("modality", {"modality": "smell"}),
        ("sample-rate-low", {"input.sample_rate": 999}),
        ("sample-rate-float", {"input.sample_rate": 16000.5}),
        ("window-long", {"input.window_seconds": 31.0}),
        ("hop-above-window", {"input.hop_seconds": 2.5}),
        ("hop-tiny", {"input.hop_seconds": 0.04}),
        ("min-above-window", {"input.min_seconds": 2.5}),
        ("min-zero", {"input.min_seconds": 0}),
        ("band-narrow", {"input.band": "narrow"}),
        ("band-wide", {"input.band": "wide"}),
        ("band-unknown", {"input.band": "telephone"}),
        ("band-upper-case", {"input.band": "Narrow"}),
        ("band-null", {"input.band": None}),
        ("band-number", {"input.band": 8000}),
        ("kind", {"output.kind": "vector"}),
        ("dim-zero", {"output.dim": 0}),
        ("dim-not-n", {"output.dim": 128}),
        ("sha-upper", {"model_sha256": model_sha.upper()}),
        ("sha-other", {"model_sha256": "0" * 64}),
        ("code-missing", {"code": _DELETE}),
        ("id-bits-k", {"code.id_bits": 64}),
        ("generator-short", {"code.generator": base["code"]["generator"][:-8]}),
        ("calibration-version-1", {"calibration.version": 1}),
        ("calibration-version-3", {"calibration.version": 3}),
        ("calibration-version-float", {"calibration.version": 2.0}),
        ("calibration-unknown-key", {"calibration.extra": 1}),
        ("far-not-falling", {f"{rows}.1.far": 0.5}),
        ("far-too-large", {f"{rows}.0.far": 0.6}),
        ("threshold-falling", {f"{rows}.1.threshold": -1.0}),
        ("threshold-above-cosine-range", {f"{rows}.6.threshold": 1.5}),
        ("count-negative", {"calibration.prototype.people": -1}),
        ("codeword-table-in-embedding", {"output.kind": "embedding", "code": _DELETE}),
        ("score-missing", {"calibration.prototype.score": _DELETE}),
        ("score-unknown", {"calibration.prototype.score": "plda"}),
        ("score-codeword-on-prototype", {"calibration.prototype.score": "codeword"}),
        ("score-as-norm-without-cohort", {"calibration.prototype.score": "as-norm"}),
        ("score-cosine-on-codeword", {"calibration.codeword.score": "cosine"}),
        ("score-not-a-string", {"calibration.codeword.score": 1}),
        ("conditions-missing", {conditions: _DELETE}),
        ("conditions-empty", {conditions: []}),
        ("conditions-not-a-list", {conditions: "clean"}),
        ("conditions-upper-case", {conditions: ["Clean"]}),
        ("conditions-leading-dash", {"calibration.codeword.conditions": ["-clean"]}),
        ("conditions-name-33", {conditions: ["a" * 33]}),
        ("conditions-name-32", {conditions: ["a" * 32]}),
        ("conditions-not-strings", {conditions: [1]}),
        ("conditions-twice", {conditions: ["clean", "noise", "clean"]}),
        ("conditions-32", {conditions: [f"c{i}" for i in range(32)]}),
        ("conditions-33", {conditions: [f"c{i}" for i in range(33)]}),
        ("conditions-several", {"calibration.codeword.conditions": ["clean", "telephone-gsm"]}),
        ("cohort-null", {"cohort": None}),
        ("cohort-as-norm", with_cohort),
        ("cohort-cosine-table", {"cohort": cohort, "score_norm": norm}),
        ("cohort-as-norm-threshold-high", {**with_cohort, f"{rows}.6.threshold": 999.5}),
        ("cohort-as-norm-threshold-range", {**with_cohort, f"{rows}.6.threshold": 1000.5}),
        (
            "cohort-not-an-object",
            {"cohort": "cohort.f32", "score_norm": norm, "calibration.prototype.score": "as-norm"},
        ),
        ("cohort-file", {**with_cohort, "cohort.file": "cohort.bin"}),
        ("cohort-count-1", {**with_cohort, "cohort.count": 1, "score_norm.top_k": 2}),
        ("cohort-count-2", {**with_cohort, "cohort.count": 2, "score_norm.top_k": 2}),
        ("cohort-count-16384", {**with_cohort, "cohort.count": 16384}),
        ("cohort-count-16385", {**with_cohort, "cohort.count": 16385}),
        ("cohort-count-float", {**with_cohort, "cohort.count": 64.0}),
        ("cohort-top-k-before-spec-4", {**with_cohort, "cohort.top_k": 10}),
        ("score-norm-top-k-1", {**with_cohort, "score_norm.top_k": 1}),
        ("score-norm-top-k-count", {**with_cohort, "score_norm.top_k": 64}),
        ("score-norm-top-k-above-count", {**with_cohort, "score_norm.top_k": 65}),
        ("score-norm-top-k-missing", {**with_cohort, "score_norm.top_k": _DELETE}),
        ("score-norm-top-k-float", {**with_cohort, "score_norm.top_k": 10.0}),
        ("score-norm-s-norm", s_norm),
        ("score-norm-s-norm-top-k", {**s_norm, "score_norm.top_k": 10}),
        ("score-norm-s-norm-as-norm-table", {**s_norm, "calibration.prototype.score": "as-norm"}),
        (
            "score-norm-as-norm-s-norm-table",
            {**with_cohort, "calibration.prototype.score": "s-norm"},
        ),
        ("score-norm-method-unknown", {**with_cohort, "score_norm.method": "z-norm"}),
        ("score-norm-method-missing", {**with_cohort, "score_norm.method": _DELETE}),
        ("score-norm-missing", {"cohort": cohort, "calibration.prototype.score": "as-norm"}),
        ("score-norm-null", {**with_cohort, "score_norm": None}),
        ("score-norm-without-cohort", {"score_norm": norm}),
        ("score-norm-not-an-object", {**with_cohort, "score_norm": "as-norm"}),
        ("score-norm-unknown-key", {**with_cohort, "score_norm.impostors": "chain"}),
        ("cohort-sha-upper", {**with_cohort, "cohort.sha256": "AB" * 32}),
        ("cohort-sha-short", {**with_cohort, "cohort.sha256": "ab" * 31}),
        ("cohort-sha-newline", {**with_cohort, "cohort.sha256": "ab" * 32 + "\n"}),
        ("cohort-unknown-key", {**with_cohort, "cohort.extra": 1}),
        # spec version 9: a recording chain's mean in score_norm (its member is checked with the
        # archives); without a cohort the rule is cosine, and only with a centre
        ("centre-cosine", with_centre),
        ("centre-as-norm", {**with_cohort, "score_norm.centre": centre}),
        ("centre-s-norm", {**s_norm, "score_norm.centre": centre}),
        (
            "centre-cosine-with-cohort",
            {**with_cohort, "score_norm": {"method": "cosine", "centre": centre}},
        ),
        (
            "centre-as-norm-without-cohort",
            {**with_centre, "score_norm.method": "as-norm", "score_norm.top_k": 10},
        ),
        ("centre-cosine-top-k", {**with_centre, "score_norm.top_k": 10}),
        ("centre-cosine-without-centre", {**with_centre, "score_norm.centre": _DELETE}),
        ("centre-method-missing", {**with_centre, "score_norm.method": _DELETE}),
        ("centre-null", {**with_centre, "score_norm.centre": None}),
        ("centre-not-an-object", {**with_centre, "score_norm.centre": "centre.f32"}),
        ("centre-file", {**with_centre, "score_norm.centre.file": "mean.f32"}),
        ("centre-people-0", {**with_centre, "score_norm.centre.people": 0}),
        ("centre-people-1", {**with_centre, "score_norm.centre.people": 1}),
        ("centre-people-max", {**with_centre, "score_norm.centre.people": 2**31 - 1}),
        ("centre-people-above-max", {**with_centre, "score_norm.centre.people": 2**31}),
        ("centre-people-float", {**with_centre, "score_norm.centre.people": 12.0}),
        ("centre-people-missing", {**with_centre, "score_norm.centre.people": _DELETE}),
        ("centre-sha-upper", {**with_centre, "score_norm.centre.sha256": "AB" * 32}),
        ("centre-sha-missing", {**with_centre, "score_norm.centre.sha256": _DELETE}),
        ("centre-unknown-key", {**with_centre, "score_norm.centre.weights": 1}),
        ("conditions-newline", {"calibration.prototype.conditions": ["clean\n"]}),
        *_training_changes(),
        *_held_out_changes(base),
        ("extra-keys-kept", {"licence": "CC0"}),
        ("description", {"description": "a line"}),
    ]
    cases = []
    for name, paths in changes:
        data = base
        for path, value in paths.items():
            data = _patch(data, path, value)
        change: dict[str, Any] = {}
        values = {path: value for path, value in paths.items() if value is not _DELETE}
        if values:
            change["set"] = values
        deleted = [path for path, value in paths.items() if value is _DELETE]
        if deleted:
            change["delete"] = deleted
        _, error = outcome(lambda d=data: Manifest.from_dict(d))
        if error is None and data["model_sha256"] != model_sha:
            error = UvsdkError(
                "model.onnx does not match the manifest's model_sha256",
                code="bundle.digest-mismatch",
            )
        digest = {}
        if error is None and name.startswith("held-out"):  # both cores' digest covers it
            digest["calibration_sha256"] = Manifest.from_dict(data).calibration.sha256
        cases.append(
            {
                "name": name,
                **change,
                "valid": error is None,
                **({"error": error.code} if error is not None else {}),
                **digest,
            }
        )
    return cases


def _held_out_changes(base: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The prototype table's ``held_out`` (spec §3.6): valid forms (their calibration digest
    given), and each malformed one."""
    fars = [row["far"] for row in base["calibration"]["prototype"]["rows"]]
    row = {"far": fars[1], "false_accepts": 61, "impostor_trials": 1000, "far_low": 0.0,
           "far_high": 0.25, "false_rejects": 25, "genuine_trials": 200, "frr_low": 0.05,
           "frr_high": 0.2}  # fmt: skip
    second = {**row, "far": fars[2], "false_accepts": 30, "far_high": 0.125}
    where = "calibration.prototype.held_out"
    held = {where: {"chains": 8, "min_seconds": 2.0, "rows": [row, second]}}
    at = f"{where}.rows.0"
    return [
        ("held-out", held),
        ("held-out-one-row", {where: {"chains": 2, "min_seconds": 0, "rows": [second]}}),
        ("held-out-null", {where: None}),
        ("held-out-chains-1", {**held, f"{where}.chains": 1}),
        ("held-out-chains-float", {**held, f"{where}.chains": 8.0}),
        ("held-out-min-seconds-negative", {**held, f"{where}.min_seconds": -1}),
        ("held-out-min-seconds-61", {**held, f"{where}.min_seconds": 61}),
        ("held-out-rows-empty", {**held, f"{where}.rows": []}),
        ("held-out-rows-reversed", {**held, f"{where}.rows": [second, row]}),
        ("held-out-rows-twice", {**held, f"{where}.rows": [row, row]}),
        ("held-out-far-not-a-row", {**held, f"{at}.far": 0.3}),
        ("held-out-accepts-over-trials", {**held, f"{at}.false_accepts": 1001}),
        ("held-out-trials-0", {**held, f"{at}.impostor_trials": 0}),
        ("held-out-pooled-outside-range", {**held, f"{at}.far_high": 0.05}),
        ("held-out-rate-above-1", {**held, f"{at}.frr_high": 1.5}),
        ("held-out-row-missing-key", {**held, f"{at}.frr_low": _DELETE}),
        ("held-out-row-unknown-key", {**held, f"{at}.chain": "fotaq"}),
        ("held-out-unknown-key", {**held, f"{where}.conditions": ["clean"]}),
        ("held-out-not-an-object", {where: [row]}),
        ("held-out-on-codeword-table", {"calibration.codeword.held_out": held[where]}),
    ]


#: a DP-trained FedUV model's ``training`` (spec §3.10)
TRAINING = {
    "method": "feduv",
    "privacy": {
        "mechanism": "central",
        "epsilon": 8,
        "delta": 1e-06,
        "simulated_deployment": False,
        "membership_eer_floor": 0.39,
    },
    "enrollment": "prototype",
}


def _training_changes() -> list[tuple[str, dict[str, Any]]]:
    """The manifest's ``training``: valid forms, and each malformed one (spec §3.10)."""
    privacy = "training.privacy"
    with_training = {"training": TRAINING}
    embedding = {"output.kind": "embedding", "code": _DELETE, "calibration": _DELETE}
    return [
        ("training", with_training),
        ("training-null", {"training": None}),
        ("training-without-dp", {"training": {**TRAINING, "privacy": None}}),
        (
            "training-codeword-enrollment",
            {**with_training, "training.enrollment": "codeword", privacy: None},
        ),
        ("training-distributed", {**with_training, f"{privacy}.mechanism": "distributed"}),
        ("training-simulated", {**with_training, f"{privacy}.simulated_deployment": True}),
        (
            "training-floor-0",
            {**with_training, f"{privacy}.epsilon": 50, f"{privacy}.membership_eer_floor": 0},
        ),
        (
            "training-epsilon-1e-300-floor-at-its-bound",
            {
                **with_training,
                f"{privacy}.epsilon": 1e-300,
                f"{privacy}.membership_eer_floor": (1 - 1e-06) / 2,
            },
        ),  # fmt: skip
        ("training-floor-half", {**with_training, f"{privacy}.membership_eer_floor": 0.5}),
        ("training-epsilon-float", {**with_training, f"{privacy}.epsilon": 0.25}),
        ("training-epsilon-server", {**with_training, f"{privacy}.epsilon_server": 22.4}),
        ("training-on-embedding", {**embedding, **with_training}),
        ("training-not-an-object", {"training": "feduv"}),
        ("training-unknown-key", {**with_training, "training.rounds": 200}),
        ("training-method-missing", {**with_training, "training.method": _DELETE}),
        ("training-method-empty", {**with_training, "training.method": ""}),
        ("training-method-not-a-string", {**with_training, "training.method": 1}),
        ("training-privacy-missing", {**with_training, privacy: _DELETE}),
        ("training-privacy-not-an-object", {**with_training, privacy: "central"}),
        ("training-privacy-unknown-key", {**with_training, f"{privacy}.rounds": 200}),
        ("training-mechanism-unknown", {**with_training, f"{privacy}.mechanism": "local"}),
        ("training-mechanism-missing", {**with_training, f"{privacy}.mechanism": _DELETE}),
        ("training-epsilon-zero", {**with_training, f"{privacy}.epsilon": 0}),
        ("training-epsilon-negative", {**with_training, f"{privacy}.epsilon": -1.0}),
        ("training-epsilon-string", {**with_training, f"{privacy}.epsilon": "8"}),
        ("training-epsilon-boolean", {**with_training, f"{privacy}.epsilon": True}),
        ("training-epsilon-missing", {**with_training, f"{privacy}.epsilon": _DELETE}),
        ("training-epsilon-server-zero", {**with_training, f"{privacy}.epsilon_server": 0}),
        ("training-epsilon-server-string", {**with_training, f"{privacy}.epsilon_server": "22"}),
        ("training-epsilon-server-null", {**with_training, f"{privacy}.epsilon_server": None}),
        ("training-delta-zero", {**with_training, f"{privacy}.delta": 0}),
        ("training-delta-one", {**with_training, f"{privacy}.delta": 1}),
        ("training-delta-null", {**with_training, f"{privacy}.delta": None}),
        ("training-simulated-number", {**with_training, f"{privacy}.simulated_deployment": 1}),
        (
            "training-simulated-missing",
            {**with_training, f"{privacy}.simulated_deployment": _DELETE},
        ),
        ("training-floor-negative", {**with_training, f"{privacy}.membership_eer_floor": -0.01}),
        ("training-floor-above-half", {**with_training, f"{privacy}.membership_eer_floor": 0.51}),
        ("training-floor-missing", {**with_training, f"{privacy}.membership_eer_floor": _DELETE}),
        ("training-enrollment-unknown", {**with_training, "training.enrollment": "auto"}),
        ("training-enrollment-missing", {**with_training, "training.enrollment": _DELETE}),
        # spec version 6: claims that contradict each other (issue 46)
        (
            "training-codeword-enrollment-with-dp",
            {**with_training, "training.enrollment": "codeword"},
        ),
        (
            "training-floor-below-its-epsilon",
            {**with_training, f"{privacy}.membership_eer_floor": 0},
        ),
        (
            "training-epsilon-1e-300-floor-0",
            {**with_training, f"{privacy}.epsilon": 1e-300, f"{privacy}.membership_eer_floor": 0},
        ),
        (
            "training-codeword-enrollment-on-embedding",
            {**embedding, **with_training, "training.enrollment": "codeword"},
        ),
    ]


def generate() -> dict[str, Any]:
    source = CONFORMANCE / "bundles/voice-codeword.uvb"
    with zipfile.ZipFile(source) as archive:
        base = json.loads(archive.read("manifest.json"))
    manifests = _manifest_cases(base)

    image = (CONFORMANCE / "bundles/image-embedding.uvb").read_bytes()
    members = _members(CONFORMANCE / "bundles/image-embedding.uvb")

    def rezip(**changed: bytes | None) -> bytes:
        return _zip(members, changed)

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
        *_cohort_archives(members, public),
        *_centre_archives(members),
        *_ort_archives(members),
        *_lying_zip_archives(members),
        *_hostile_json_archives(members),
    ]
    archive_cases = []
    with tempfile.TemporaryDirectory() as folder:
        for name, blob, keys in archives:
            path = Path(folder) / f"{name}.uvb"
            path.write_bytes(blob)
            pems = [_pem(k) for k in keys]
            loaded, error = outcome(lambda p=path, t=pems: Bundle(p, trusted_keys=t or None))
            expected = _COHORT_REFUSALS.get(name) or _READING_REFUSALS.get(name)
            assert expected is None or expected in str(error), (name, error)
            archive_cases.append(
                {
                    "name": name,
                    "file_b64": b64(blob),
                    "trusted_keys_hex": keys,
                    "valid": error is None,
                    **(
                        {"error": error.code}
                        if error is not None
                        else {"signed_by": loaded.signed_by}
                    ),
                }
            )
    return document(
        "bundle",
        "Manifests to accept or refuse: base_manifest (the voice-codeword bundle's) with `set` "
        "(dotted paths, numbers index arrays) and `delete` applied; model_sha256 must match "
        "the bundle's model; `error` is the error code (spec §14). Then whole archives, with the trusted Ed25519 public keys (raw, hex) they are "
        "opened with: valid or the error code, and the signing key's fingerprint "
        "(first 16 hex digits of SHA-256 of the raw key); the cohort archives "
        "(cohort.f32 and the manifest's cohort, spec §3.9) are the image bundle given a small "
        "cohort, signed with the conformance key or edited; the centre-* archives (spec version 9: "
        "centre.f32 and score_norm.centre, spec §3.9) give it a recording chain's mean, alone or "
        "beside a cohort, then edited; the ort-* archives add a model.ort, "
        "the zip-* archives have zip entries that lie about their size, CRC or method, and the "
        "json-* archives hostile manifest JSON at and over the limits of spec §3.3 (spec §3).",
        base_manifest=base,
        manifests=manifests,
        archives=archive_cases,
    )


_DELETE = object()

#: what the SDK's refusal of each cohort archive says (checked here, so that each case reaches
#: the check it is named after; the vectors give the class)
_COHORT_REFUSALS = {
    "cohort-member-without-manifest-key": "is not named in the manifest",
    "cohort-manifest-without-member": "there is no cohort.f32",
    "cohort-member-edited": "does not match the manifest's cohort.sha256",
    "cohort-short": "not count x dim x 4",
    "cohort-long": "not count x dim x 4",
    "cohort-nan": "holds a non-finite value",
    "cohort-infinity": "holds a non-finite value",
    "cohort-zero-vector": "too short to normalise",
    "cohort-subnormal-vector": "too short to normalise",
    "cohort-too-large": "more than the 16777216 accepted",
    "cohort-count-above-member": "not count x dim x 4",
    "cohort-top-k-above-count": "score_norm.top_k must be an integer in [2, 8]",
    "cohort-file-name": "cohort.file must be 'cohort.f32'",
    "cohort-member-edited-trusted-keys": "does not match the manifest's cohort.sha256",
    "centre-member-without-manifest-key": "centre.f32 is not named in the manifest",
    "centre-manifest-without-member": "there is no centre.f32",
    "centre-member-edited": "does not match the manifest's score_norm.centre.sha256",
    "centre-short": "not dim x 4",
    "centre-long": "not dim x 4",
    "centre-nan": "holds a non-finite value",
    "centre-infinity": "holds a non-finite value",
    "centre-norm-1": "not a mean of unit vectors",
    "centre-norm-above-1": "not a mean of unit vectors",
    "centre-too-large": "more than the 262144 accepted",
    "centre-with-cohort-member-edited": "does not match the manifest's score_norm.centre.sha256",
}


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _zip(members: dict[str, bytes], changed: dict[str, bytes | None]) -> bytes:
    """The archive of ``members`` with ``changed`` replacing (``None``: removing) some."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, blob in {**members, **changed}.items():
            if blob is not None:
                # stored, as the SDK's own writer would not: a member over 1 MiB (the cohort
                # over its limit) deflated, so that the vector stays small
                deflate = zipfile.ZIP_DEFLATED if len(blob) > 1 << 20 else None
                info = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
                archive.writestr(info, blob, compress_type=deflate)
    return buffer.getvalue()


def _cohort_archives(image: dict[str, bytes], public: str) -> list[tuple[str, bytes, list[str]]]:
    """The image bundle given a small cohort (8 vectors, AS-norm top_k 4: small vectors), signed with
    the published conformance key, then with the member or the manifest's cohort edited (the
    manifest rewritten to match an edited member, unsigned: opened without trusted keys)."""
    manifest = json.loads(image["manifest.json"])
    dim, count = manifest["output"]["dim"], 8
    data = np.random.default_rng(7).normal(size=(count, dim)).astype("<f4").tobytes()
    manifest["cohort"] = {
        "file": "cohort.f32",
        "count": count,
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    manifest["score_norm"] = {"method": "as-norm", "top_k": 4}
    signed_manifest = (json.dumps(manifest, indent=2) + "\n").encode()
    signature = _signing_key().sign(signed_manifest)
    signed = _zip(
        image,
        {"manifest.json": signed_manifest, "cohort.f32": data, "signature.ed25519": signature},
    )

    def edited(cohort: bytes | None = None, norm: dict | None = None, **spec: Any) -> bytes:
        """The image bundle with ``cohort`` as cohort.f32, its manifest naming it (+ ``spec``,
        and ``norm`` in its score_norm)."""
        changed = json.loads(json.dumps(manifest))
        if cohort is not None:
            changed["cohort"]["sha256"] = hashlib.sha256(cohort).hexdigest()
        changed["cohort"].update(spec)
        changed["score_norm"].update(norm or {})
        blob = (json.dumps(changed, indent=2) + "\n").encode()
        return _zip(
            image,
            {
                "manifest.json": blob,
                "cohort.f32": data if cohort is None else cohort,
                "signature.ed25519": None,
            },
        )

    def value_at(index: int, value: float) -> bytes:
        vectors = np.frombuffer(data, dtype="<f4").copy()
        vectors[index] = value
        return vectors.astype("<f4").tobytes()

    zero = np.frombuffer(data, dtype="<f4").copy()
    zero[dim : 2 * dim] = 0.0
    subnormal = np.frombuffer(data, dtype="<f4").copy()
    subnormal[dim : 2 * dim] = np.float32(1e-40)  # not zero, yet no rescale makes it unit length
    flipped = bytearray(data)
    flipped[100] ^= 0x01
    valid = edited(data)
    return [
        ("cohort-signed", signed, [public]),
        ("cohort-signed-no-trusted-keys", signed, []),
        ("cohort-member-edited-trusted-keys", _replace_member(signed, bytes(flipped)), [public]),
        ("cohort-unsigned-trusted-keys", valid, [public]),
        ("cohort-unsigned", valid, []),
        ("cohort-member-without-manifest-key", _zip(image, {"cohort.f32": data}), []),
        ("cohort-member-in-a-folder", _zip(image, {"x/cohort.f32": data}), []),
        ("cohort-manifest-without-member", _without_member(valid), []),
        ("cohort-member-edited", _replace_member(valid, bytes(flipped)), []),
        ("cohort-short", edited(data[:-4]), []),
        ("cohort-long", edited(data + bytes(4 * dim)), []),
        ("cohort-nan", edited(value_at(5, float("nan"))), []),
        ("cohort-infinity", edited(value_at(dim + 3, float("-inf"))), []),
        ("cohort-zero-vector", edited(zero.tobytes()), []),
        ("cohort-subnormal-vector", edited(subnormal.tobytes()), []),
        ("cohort-too-large", _zip(image, {"cohort.f32": bytes(16 * 1024 * 1024 + 4)}), []),
        ("cohort-count-above-member", edited(None, count=count + 1), []),
        ("cohort-top-k-above-count", edited(None, {"top_k": count + 1}), []),
        ("cohort-file-name", edited(None, file="cohort.bin"), []),
    ]


def _centre_archives(image: dict[str, bytes]) -> list[tuple[str, bytes, list[str]]]:
    """The image bundle given a recording chain's mean (spec version 9): valid without a cohort
    (rule cosine) and beside the small cohort of :func:`_cohort_archives`, then with the member
    or the manifest edited (each manifest naming the member's digest, so that only the edit is
    wrong; unsigned)."""
    manifest = json.loads(image["manifest.json"])
    dim = manifest["output"]["dim"]
    direction = np.random.default_rng(9).normal(size=dim)
    data = (direction / np.linalg.norm(direction) * 0.5).astype("<f4").tobytes()

    def with_centre(centre: bytes, cohort: bytes | None = None) -> bytes:
        changed = json.loads(json.dumps(manifest))
        spec = {"file": "centre.f32", "people": 12, "sha256": hashlib.sha256(centre).hexdigest()}
        changed["score_norm"] = {"method": "cosine", "centre": spec}
        members: dict[str, bytes | None] = {"centre.f32": centre, "signature.ed25519": None}
        if cohort is not None:
            count = len(cohort) // (4 * dim)
            digest = hashlib.sha256(cohort).hexdigest()
            changed["cohort"] = {"file": "cohort.f32", "count": count, "sha256": digest}
            changed["score_norm"] = {"method": "as-norm", "top_k": 4, "centre": spec}
            members["cohort.f32"] = cohort
        members["manifest.json"] = (json.dumps(changed, indent=2) + "\n").encode()
        return _zip(image, members)

    def values(*head: float) -> bytes:
        return np.array([*head] + [0.0] * (dim - len(head)), "<f4").tobytes()

    cohort = np.random.default_rng(7).normal(size=(8, dim)).astype("<f4").tobytes()
    valid = with_centre(data)
    flipped = bytearray(data)
    flipped[12] ^= 0x01
    with_cohort = with_centre(data, cohort)
    return [
        ("centre-cosine", valid, []),
        ("centre-with-cohort", with_cohort, []),
        ("centre-member-without-manifest-key", _zip(image, {"centre.f32": data}), []),
        ("centre-member-in-a-folder", _zip(image, {"x/centre.f32": data}), []),
        ("centre-manifest-without-member", _without(valid, "centre.f32"), []),
        ("centre-member-edited", _with_member(valid, "centre.f32", bytes(flipped)), []),
        ("centre-with-cohort-member-edited",
         _with_member(with_cohort, "centre.f32", bytes(flipped)), []),
        ("centre-short", with_centre(data[:-4]), []),
        ("centre-long", with_centre(data + bytes(4)), []),
        ("centre-nan", with_centre(values(0.1, float("nan"))), []),
        ("centre-infinity", with_centre(values(float("-inf"))), []),
        ("centre-norm-1", with_centre(values(1.0)), []),
        ("centre-norm-above-1", with_centre(values(0.8, 0.8)), []),
        ("centre-zero", with_centre(values()), []),
        ("centre-too-large", _zip(image, {"centre.f32": bytes(262144 + 4)}), []),
    ]  # fmt: skip


def _without(blob: bytes, name: str) -> bytes:
    """The archive ``blob`` without the member ``name``."""
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        members = {member: archive.read(member) for member in archive.namelist()}
    return _zip(members, {name: None})


def _with_member(blob: bytes, name: str, content: bytes) -> bytes:
    """The archive ``blob`` with ``content`` as its member ``name`` (the manifest unchanged)."""
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        members = {member: archive.read(member) for member in archive.namelist()}
    return _zip(members, {name: content})


def _signing_key() -> Any:
    """The published conformance test key (its seed is in make_inputs.py)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    seed = hashlib.sha256(b"uvsdk conformance signing key, version 1").digest()
    return Ed25519PrivateKey.from_private_bytes(seed)


def _without_member(blob: bytes) -> bytes:
    """The archive ``blob`` without cohort.f32."""
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    return _zip(members, {"cohort.f32": None})


def _replace_member(blob: bytes, cohort: bytes) -> bytes:
    """The archive ``blob`` with ``cohort`` as cohort.f32 (its manifest unchanged)."""
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    return _zip(members, {"cohort.f32": cohort})


def _pem(raw_hex: str) -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(raw_hex))
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


#: what the SDK's refusal of each model.ort, lying-zip and hostile-JSON archive says (checked here)
_READING_REFUSALS = {
    "ort-member-unnamed": "model.ort is not named in the manifest (no ort key)",
    "ort-sha-mismatch": "model.ort does not match the manifest's ort.sha256",
    "ort-file-name": "ort.file must be 'model.ort'",
    "zip-model-inflates-past-declared-size": "model.onnx inflates to more than the",
    "zip-manifest-declares-1000-bytes": "manifest.json inflates to more than the 1000 bytes",
    "zip-model-shorter-than-declared": "its zip entry declares",
    "zip-stored-longer-than-declared": "its zip entry declares",
    "zip-crc-mismatch": "does not match its zip entry's CRC-32",
    "zip-encrypted": "model.onnx is encrypted",
    "zip-method-bzip2": "compression method 12",
    "zip-deflate-stream-cut": "not a readable bundle",
    "zip-model-entry-eight-times": "names model.onnx more than once",
    "zip-manifest-twice": "names manifest.json more than once",
    "zip-compressed-size-past-the-end": "more than the archive holds after it",
    "json-calibration-count-10^400": "a number of 401 characters",
    "json-integer-4301-digits": "a number of 4301 characters",
    "json-integer-2^53": "an integer beyond 2**53 - 1",
    "json-number-65-characters": "a number of 65 characters",
    "json-depth-65": "nested deeper than 64 levels",
    "json-depth-10000": "nested deeper than 64 levels",
}


def _ort_archives(image: dict[str, bytes]) -> list[tuple[str, bytes, list[str]]]:
    """The image bundle with a model.ort member, named by the manifest's ``ort`` or not."""
    ort = b"an ORT-format model (conformance: its bytes are never run)"
    digest = hashlib.sha256(ort).hexdigest()

    def with_ort(spec: dict[str, Any] | None) -> bytes:
        manifest = json.loads(image["manifest.json"])
        if spec is not None:
            manifest["ort"] = spec
        text = (json.dumps(manifest, indent=2) + "\n").encode()
        return _zip(image, {"manifest.json": text, "model.ort": ort, "signature.ed25519": None})

    return [
        ("ort-named", with_ort({"file": "model.ort", "sha256": digest}), []),
        ("ort-member-unnamed", with_ort(None), []),
        ("ort-sha-mismatch", with_ort({"file": "model.ort", "sha256": "0" * 64}), []),
        ("ort-file-name", with_ort({"file": "model.onnx.ort", "sha256": digest}), []),
    ]


def _lying_zip_archives(image: dict[str, bytes]) -> list[tuple[str, bytes, list[str]]]:
    """The image bundle (unsigned) with one zip entry lying; the declared size and CRC are the
    real content's, so a reader that stops quietly at the declared size loads the bundle."""
    image = {name: data for name, data in image.items() if name != "signature.ed25519"}

    def entry(name: str, **lie: Any) -> dict[str, Any]:
        return rawzip.entry(name, image[name], **lie)

    def lying(name: str, **lie: Any) -> bytes:
        return rawzip.raw_zip(
            [entry(member, **(lie if member == name else {})) for member in image]
        )

    def with_entries(*extra: dict[str, Any]) -> bytes:
        return rawzip.raw_zip([entry(member) for member in image] + list(extra))

    model, manifest = image["model.onnx"], image["manifest.json"]
    cut = rawzip.deflate(model)[: len(rawzip.deflate(model)) // 2]
    return [
        ("zip-written-entry-by-entry", lying("model.onnx"), []),
        (
            "zip-model-inflates-past-declared-size",
            lying("model.onnx", payload=rawzip.deflate(model + bytes(1 << 20))),
            [],
        ),
        (
            "zip-manifest-declares-1000-bytes",
            lying("manifest.json", payload=rawzip.deflate(manifest + b" " * (1 << 20)), size=1000),
            [],
        ),
        (
            "zip-model-shorter-than-declared",
            lying("model.onnx", payload=rawzip.deflate(model[:-10])),
            [],
        ),
        (
            "zip-stored-longer-than-declared",
            lying("model.onnx", payload=model + bytes(4), method=zipfile.ZIP_STORED),
            [],
        ),
        ("zip-crc-mismatch", lying("model.onnx", crc=zlib.crc32(model) ^ 1), []),
        ("zip-encrypted", lying("model.onnx", flags=1), []),
        ("zip-method-bzip2", lying("model.onnx", method=zipfile.ZIP_BZIP2), []),
        ("zip-deflate-stream-cut", lying("model.onnx", payload=cut), []),
        # spec version 6: each member read once, within the archive (issue 46)
        ("zip-model-entry-eight-times", with_entries(*[entry("model.onnx", repeat=True)] * 7), []),
        (
            "zip-manifest-twice",
            with_entries(
                entry(
                    "manifest.json",
                    payload=rawzip.deflate(manifest + b" "),
                    size=len(manifest) + 1,
                    crc=zlib.crc32(manifest + b" "),
                )
            ),
            [],
        ),  # fmt: skip
        (
            "zip-compressed-size-past-the-end",
            lying("model.onnx", compressed=len(rawzip.deflate(model)) + (1 << 20)),
            [],
        ),
    ]


def _hostile_json_archives(image: dict[str, bytes]) -> list[tuple[str, bytes, list[str]]]:
    """The image bundle (unsigned) given the voice-embedding bundle's calibration, its manifest
    text then edited: numbers and nesting at and over the limits of spec §3.3."""
    manifest = json.loads(image["manifest.json"])
    with zipfile.ZipFile(CONFORMANCE / "bundles/voice-embedding.uvb") as voice:
        manifest["calibration"] = json.loads(voice.read("manifest.json"))["calibration"]
    text = json.dumps(manifest, indent=2)

    def archive(changed: str) -> bytes:
        return _zip(image, {"manifest.json": changed.encode(), "signature.ed25519": None})

    def with_key(value: str) -> bytes:
        return archive(text[:-1] + f', "extra": {value}}}')

    def nested(levels: int) -> str:
        return "[" * (levels - 1) + "]" * (levels - 1)

    huge = "1" + "0" * 400
    return [
        ("json-calibrated", archive(text), []),
        (
            "json-calibration-count-10^400",
            archive(text.replace('"people": 24', f'"people": {huge}')),
            [],
        ),
        ("json-integer-4301-digits", with_key("9" * 4301), []),
        ("json-integer-2^53", with_key(str(2**53)), []),
        ("json-integer-2^53-1", with_key(str(-(2**53 - 1))), []),
        ("json-number-65-characters", with_key("0." + "1" * 63), []),
        ("json-number-64-characters", with_key("0." + "1" * 62), []),
        ("json-depth-64", with_key(nested(64)), []),
        ("json-depth-65", with_key(nested(65)), []),
        ("json-depth-10000", with_key(nested(10_000)), []),
        ("json-brackets-in-strings", with_key('"' + "[" * 100 + '\\"' + "{" * 100 + '"'), []),
    ]
