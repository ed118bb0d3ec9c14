"""Model bundles (``.uvb``): manifest schema, integrity, signatures and the ONNX Runtime session.

A bundle is a zip archive, or an unpacked directory, holding ``model.onnx``, ``manifest.json`` and
optionally ``signature.ed25519`` (Ed25519 over the exact bytes of ``manifest.json``) and
``model.ort`` (the model in ORT format, for ONNX Runtime Mobile; the SDK runs ``model.onnx``). The
manifest names the SHA-256 of each model, so a signature over the manifest covers them too.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import zipfile
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .archive import read_zip_members, too_large
from .calibration import Calibration, canonical_json
from .codeword import code_fingerprint, pack_generator, unpack_generator
from .cohort import (
    CENTRE_FILE,
    COHORT_FILE,
    MAX_CENTRE_BYTES,
    MAX_COHORT_BYTES,
    Centre,
    Cohort,
    CohortSpec,
    ScoreNorm,
)
from .errors import BundleError, SignatureError
from .files import read_at_most
from .inputs import INPUTS, ModelInput, input_fields, input_spec
from .jsonlimits import JsonLimitError, load_bounded_json
from .training import Training

FORMAT = "uvsdk-bundle/1"
METHODS = ("feduv", "fedhide", "fedaws", "softmax", "fedface", "fedgn", "fedcs", "reference")
MODEL_FILE = "model.onnx"
ORT_FILE = "model.ort"
MANIFEST_FILE = "manifest.json"
SIGNATURE_FILE = "signature.ed25519"
MAX_MEMBER_BYTES = 512 * 1024 * 1024  # refuse a model larger than this (zip bombs, huge files)
MAX_MANIFEST_BYTES = 1024 * 1024  # a manifest is a few KiB (generator, calibration table)
MAX_SIGNATURE_BYTES = 1024  # an Ed25519 signature is 64 bytes
_MEMBER_LIMITS = {
    "model.onnx": MAX_MEMBER_BYTES,
    "model.ort": MAX_MEMBER_BYTES,
    "manifest.json": MAX_MANIFEST_BYTES,
    "signature.ed25519": MAX_SIGNATURE_BYTES,
    COHORT_FILE: MAX_COHORT_BYTES,
    CENTRE_FILE: MAX_CENTRE_BYTES,
}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Code:
    """A binary linear code: ``n``, ``k``, minimum distance, id bits and generator ``G`` (k × n)."""

    family: str
    n: int
    k: int
    d_min: int
    id_bits: int
    generator: np.ndarray = field(repr=False, compare=False)

    @property
    def fingerprint(self) -> str:
        """SHA-256 naming this code; a codeword is bound to it."""
        return code_fingerprint(self.generator)


@dataclass(frozen=True)
class Manifest:
    """The validated content of ``manifest.json``."""

    name: str
    method: str
    input: ModelInput
    output_kind: str
    dim: int
    model_sha256: str
    code: Code | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    calibration: Calibration | None = field(default=None, compare=False)
    cohort: CohortSpec | None = field(default=None, compare=False)
    training: Training | None = field(default=None, compare=False)
    score_norm: ScoreNorm | None = field(default=None, compare=False)

    @property
    def modality(self) -> str:
        """``audio`` or ``image``: the manifest's name of its input's class."""
        return self.input.modality

    @property
    def prototype_score(self) -> str:
        """What prototype-mode scores are: ``score_norm.method`` with a cohort, else ``cosine``."""
        return "cosine" if self.score_norm is None else self.score_norm.method

    @property
    def score_scale(self) -> str | None:
        """The scale prototype scores (and so a user's threshold) are on: ``None`` for raw
        cosines, else the SHA-256 of the RFC 8785 form of ``{"cohort": <cohort.sha256>,
        "score_norm": <score_norm>}`` (``cohort`` absent without one: a centre alone,
        docs/spec.md §3.9). A template records it, and a bundle with another cohort, rule or
        centre is another scale: re-enroll."""
        if self.score_norm is None:
            return None
        scale: dict[str, Any] = {"score_norm": self.score_norm.to_dict()}
        if self.cohort is not None:
            scale["cohort"] = self.cohort.sha256
        return hashlib.sha256(canonical_json(scale).encode("utf-8")).hexdigest()

    @classmethod
    def from_dict(cls, data: Any) -> Manifest:
        """Validate a parsed manifest; every problem is a :class:`BundleError` naming the key."""
        if not isinstance(data, dict):
            raise BundleError("manifest: not a JSON object")
        fmt = data.get("format")
        if fmt != FORMAT:
            raise BundleError(
                f"unknown bundle format {fmt!r}: this SDK reads {FORMAT!r}",
                code="bundle.unsupported",
            )
        name = _get(data, "name", str)
        method = _get(data, "method", str)
        if method not in METHODS:
            raise BundleError(f"manifest: unknown method {method!r} (one of {', '.join(METHODS)})")
        modality = _get(data, "modality", str)
        spec = _get(data, "input", dict)
        kind = INPUTS.get(modality)
        if kind is None:
            raise BundleError(f"manifest: unknown modality {modality!r} (audio or image)")
        source = kind(
            **{
                key: _get(spec, key, type_, "input.")
                for key, type_, default in input_fields(kind)
                if key in spec or default is MISSING
            }
        )
        output = _get(data, "output", dict)
        kind = _get(output, "kind", str, "output.")
        dim = _get(output, "dim", int, "output.")
        if kind not in ("codeword", "embedding") or not 0 < dim <= 65536:
            raise BundleError("manifest: output needs kind codeword|embedding and 0 < dim <= 65536")
        sha = _get(data, "model_sha256", str)
        if not _SHA256.match(sha):
            raise BundleError("manifest: model_sha256 is not 64 lowercase hex digits")
        code = _parse_code(data.get("code"), kind, dim)
        _check_ort(data.get("ort"))
        cohort = norm = None
        if data.get("cohort") is not None:
            cohort = CohortSpec.from_dict(data["cohort"])
        if data.get("score_norm") is not None:
            norm = ScoreNorm.from_dict(data["score_norm"], cohort)
        elif cohort is not None:
            raise BundleError("manifest: a cohort needs score_norm (as-norm or s-norm)")
        calibration = None
        if data.get("calibration") is not None:
            calibration = Calibration.from_dict(
                data["calibration"],
                output_kind=kind,
                prototype_score="cosine" if norm is None else norm.method,
            )
        training = None
        if data.get("training") is not None:
            training = Training.from_dict(data["training"], kind)
        known = {
            "format",
            "name",
            "method",
            "modality",
            "input",
            "output",
            "code",
            "model_sha256",
            "calibration",
            "cohort",
            "score_norm",
            "training",
        }
        extra = {key: value for key, value in data.items() if key not in known}
        return cls(
            name,
            method,
            source,
            kind,
            dim,
            sha,
            code,
            extra,
            calibration,
            cohort,
            training,
            norm,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``format`` first); ``from_dict(to_dict())`` is the identity."""
        data: dict[str, Any] = {
            "format": FORMAT,
            "name": self.name,
            "method": self.method,
            "modality": self.modality,
            "input": input_spec(self.input),
            "output": {"kind": self.output_kind, "dim": self.dim},
        }
        if self.code is not None:
            code = self.code
            data["code"] = {
                "family": code.family,
                "n": code.n,
                "k": code.k,
                "d_min": code.d_min,
                "id_bits": code.id_bits,
                "generator": pack_generator(code.generator),
            }
        data["model_sha256"] = self.model_sha256
        if self.cohort is not None:
            data["cohort"] = self.cohort.to_dict()
        if self.score_norm is not None:
            data["score_norm"] = self.score_norm.to_dict()
        if self.calibration is not None:
            data["calibration"] = self.calibration.to_dict()
        if self.training is not None:
            data["training"] = self.training.to_dict()
        data.update(self.extra)
        return data


def _get(data: dict, key: str, kind: type, prefix: str = "") -> Any:
    value = data.get(key)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BundleError(f"manifest: {prefix}{key} must be a {kind.__name__}, not {value!r:.40}")
    if kind is float and not math.isfinite(value):
        raise BundleError(f"manifest: {prefix}{key} must be finite")
    return value


def _check_ort(spec: Any) -> None:
    """The optional ``ort`` object: ``model.ort`` and its SHA-256 (other keys are facts)."""
    if spec is None:
        return
    if not isinstance(spec, dict):
        raise BundleError("manifest: ort must be an object")
    if spec.get("file") != ORT_FILE:
        raise BundleError(f"manifest: ort.file must be {ORT_FILE!r}")
    if not _SHA256.match(_get(spec, "sha256", str, "ort.")):
        raise BundleError("manifest: ort.sha256 is not 64 lowercase hex digits")


def _parse_code(spec: Any, kind: str, dim: int) -> Code | None:
    if kind != "codeword":
        if spec is not None:
            raise BundleError("manifest: 'code' is present but output.kind is not 'codeword'")
        return None
    if not isinstance(spec, dict):
        raise BundleError("manifest: a codeword bundle needs a 'code' object")
    n, k = _get(spec, "n", int, "code."), _get(spec, "k", int, "code.")
    id_bits, d_min = _get(spec, "id_bits", int, "code."), _get(spec, "d_min", int, "code.")
    if n != dim or not 0 < k <= n or not 0 < id_bits < k or not 0 < d_min <= n:
        raise BundleError(
            "manifest: code needs n = output.dim, 0 < id_bits < k <= n, 0 < d_min <= n"
        )
    generator = unpack_generator(_get(spec, "generator", str, "code."), k, n)
    return Code(_get(spec, "family", str, "code."), n, k, d_min, id_bits, generator)


def _read_members(path: Path) -> dict[str, bytes]:
    """The bundle's files, from a zip archive or a directory."""
    names = (MODEL_FILE, MANIFEST_FILE, SIGNATURE_FILE, ORT_FILE, COHORT_FILE, CENTRE_FILE)
    members: dict[str, bytes] = {}
    try:
        if path.is_dir():
            for name in names:
                if (path / name).exists():  # a FIFO or a folder is refused, not skipped
                    members[name] = _read_bounded(path / name, path.name)
            return members
        with _open_regular(path, path.name) as handle:
            return read_zip_members(handle, _MEMBER_LIMITS, path.name)
    except FileNotFoundError:
        raise BundleError(f"bundle not found: {path}", code="bundle.not-found") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, ValueError) as error:
        raise BundleError(
            f"{path.name}: not a readable bundle (truncated or corrupt: {error})",
            code="bundle.unreadable",
        ) from None
    except OSError as error:
        raise BundleError(
            f"{path.name}: cannot read the bundle ({error.strerror or error})",
            code="bundle.unreadable",
        ) from None
    return members


def _open_regular(path: Path, bundle: str) -> BinaryIO:
    """``path`` open for reading if it is a regular file (a symbolic link to one is followed):
    a FIFO or a device is refused at once, never waited on (``O_NONBLOCK``, then ``fstat``); a
    FIFO given as the bundle hung ``verify`` while it held the user's lock (issue 46)."""
    descriptor = os.open(
        path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    )
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        what = "the bundle" if path.name == bundle else path.name
        raise BundleError(
            f"{bundle}: {what} is not a regular file (a FIFO or a device?)",
            code="bundle.unreadable",
        )
    return os.fdopen(descriptor, "rb")


def _too_large(bundle: str, member: str, size: int) -> str:
    return too_large(bundle, member, size, _MEMBER_LIMITS[member])


def _read_bounded(path: Path, bundle: str) -> bytes:
    """A member of a bundle folder, refused before reading if larger than its limit."""
    limit = _MEMBER_LIMITS[path.name]
    with _open_regular(path, bundle) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise BundleError(_too_large(bundle, path.name, size), code="bundle.unreadable")
        data = read_at_most(handle, limit)
    if len(data) > limit:  # grew while being read
        raise BundleError(_too_large(bundle, path.name, len(data)), code="bundle.unreadable")
    return data


def load_public_keys(sources: Iterable[str | Path | bytes]) -> list[Any]:
    """Ed25519 public keys from PEM files (paths) or PEM bytes."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    keys = []
    for source in sources:
        try:
            pem = source if isinstance(source, bytes) else Path(source).read_bytes()
            key = load_pem_public_key(pem)
        except (OSError, ValueError) as error:
            raise SignatureError(
                f"cannot read trusted key {source!s:.80}: {error}", code="bundle.trusted-key"
            ) from None
        if not isinstance(key, Ed25519PublicKey):
            raise SignatureError(
                f"trusted key {source!s:.80} is not an Ed25519 public key",
                code="bundle.trusted-key",
            )
        keys.append(key)
    return keys


def key_fingerprint(public_key: Any) -> str:
    """First 16 hex digits of the SHA-256 of the raw public key."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw = public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


class Bundle:
    """A loaded, checked bundle and (lazily) its ONNX Runtime session.

    Parameters
    ----------
    path:
        A ``.uvb`` zip archive or a directory with the same files.
    trusted_keys:
        Ed25519 public keys (objects, PEM paths or PEM bytes). When given, the bundle must carry
        a signature made by one of them.
    threads:
        ONNX Runtime intra-op threads (``None``: its default).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        trusted_keys: Sequence[Any] | None = None,
        threads: int | None = None,
    ) -> None:
        self.path = Path(path)
        members = _read_members(self.path)
        for name in (MANIFEST_FILE, MODEL_FILE):
            if name not in members:
                raise BundleError(
                    f"{self.path.name}: the bundle has no {name}", code="bundle.member-missing"
                )
        try:
            data = load_bounded_json(members[MANIFEST_FILE].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, JsonLimitError) as error:
            raise BundleError(
                f"{self.path.name}: manifest.json is not valid JSON ({error})"
            ) from None
        self.manifest = Manifest.from_dict(data)
        self.model_bytes = members[MODEL_FILE]
        if hashlib.sha256(self.model_bytes).hexdigest() != self.manifest.model_sha256:
            raise BundleError(
                f"{self.path.name}: model.onnx does not match the manifest's model_sha256 "
                "(the bundle was modified or damaged)",
                code="bundle.digest-mismatch",
            )
        self.ort_bytes = members.get(ORT_FILE)
        ort = self.manifest.extra.get("ort")
        if self.ort_bytes is not None and ort is None:
            raise BundleError(
                f"{self.path.name}: model.ort is not named in the manifest (no ort key)",
                code="bundle.member-unexpected",
            )
        if (
            self.ort_bytes is not None
            and hashlib.sha256(self.ort_bytes).hexdigest() != ort["sha256"]
        ):
            raise BundleError(
                f"{self.path.name}: model.ort does not match the manifest's ort.sha256 "
                "(the bundle was modified or damaged)",
                code="bundle.digest-mismatch",
            )
        self.cohort_bytes = members.get(COHORT_FILE)
        self.cohort = self._load_cohort()
        self.centre_bytes = members.get(CENTRE_FILE)
        self.centre = self._load_centre()
        self.signature = members.get(SIGNATURE_FILE)
        self.signed_by: str | None = None
        if trusted_keys:
            self.signed_by = self._check_signature(members[MANIFEST_FILE], trusted_keys)
        self.threads = threads
        self._session: Any = None

    def _load_cohort(self) -> Cohort | None:
        """``cohort.f32`` checked against the manifest's ``cohort``: both or neither."""
        spec, data = self.manifest.cohort, self.cohort_bytes
        if not self._named(spec, data, COHORT_FILE, "cohort", "cohort key"):
            return None
        norm = self.manifest.score_norm
        assert norm is not None and spec is not None and data is not None  # a cohort needs a rule
        return Cohort.from_member(data, spec, norm, self.manifest.dim, self.path.name)

    def _load_centre(self) -> Centre | None:
        """``centre.f32`` checked against the manifest's ``score_norm.centre``: both or neither."""
        norm, data = self.manifest.score_norm, self.centre_bytes
        spec = None if norm is None else norm.centre
        if not self._named(spec, data, CENTRE_FILE, "centre", "score_norm.centre"):
            return None
        assert spec is not None and data is not None
        return Centre.from_member(data, spec, self.manifest.dim, self.path.name)

    def _named(self, spec: Any, data: bytes | None, member: str, what: str, key: str) -> bool:
        """Whether the optional ``member`` is there, refusing it without its manifest ``key``
        (it would be unsigned) and the key without it."""
        if spec is None and data is None:
            return False
        if spec is None:
            raise BundleError(
                f"{self.path.name}: {member} is not named in the manifest (no {key})",
                code="bundle.member-unexpected",
            )
        if data is None:
            raise BundleError(
                f"{self.path.name}: the manifest names a {what} and there is no {member}",
                code="bundle.member-missing",
            )
        return True

    def centred(self, vectors: np.ndarray) -> np.ndarray:
        """Prototype-mode vectors as the bundle scores them: its recording chain's mean taken
        out (docs/spec.md §6.8), or unchanged without a centre."""
        return vectors if self.centre is None else self.centre.apply(vectors)

    def _check_signature(self, manifest_bytes: bytes, trusted_keys: Sequence[Any]) -> str:
        from cryptography.exceptions import InvalidSignature

        if self.signature is None:
            raise SignatureError(
                f"{self.path.name}: the bundle is not signed, and trusted keys are set"
            )
        paths_or_pem = [key for key in trusted_keys if isinstance(key, str | Path | bytes)]
        keys = [key for key in trusted_keys if not isinstance(key, str | Path | bytes)]
        for key in keys + load_public_keys(paths_or_pem):
            try:
                key.verify(self.signature, manifest_bytes)
            except InvalidSignature:
                continue
            return key_fingerprint(key)
        raise SignatureError(
            f"{self.path.name}: the signature does not verify with any trusted key"
        )

    @property
    def session(self) -> Any:
        """The ONNX Runtime session, created on first use and checked against the contract."""
        if self._session is None:
            self._session = self._open_session()
        return self._session

    def _open_session(self) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        if self.threads:
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
        try:
            session = ort.InferenceSession(
                self.model_bytes, options, providers=["CPUExecutionProvider"]
            )
        except Exception as error:  # onnxruntime raises its own unexported exception types
            message = str(error).splitlines()[0][:200]
            raise BundleError(
                f"{self.path.name}: model.onnx does not load ({message})", code="bundle.model"
            ) from None
        inputs, outputs = session.get_inputs(), session.get_outputs()
        expected = self.manifest.input.onnx_input
        if [i.name for i in inputs] != ["input"] or "output" not in [o.name for o in outputs]:
            raise BundleError(
                f"{self.path.name}: the model needs one input 'input' and an 'output'",
                code="bundle.model",
            )
        if (inputs[0].type, len(inputs[0].shape)) != expected:
            raise BundleError(
                f"{self.path.name}: the model's input is {inputs[0].type} of rank "
                f"{len(inputs[0].shape)}, the {self.manifest.modality} contract is {expected}",
                code="bundle.model",
            )
        return session

    def run(self, batch: np.ndarray) -> np.ndarray:
        """Model outputs ``[batch, dim]`` for a batch of windows or images."""
        dtype = self.manifest.input.dtype
        try:
            (output,) = self.session.run(["output"], {"input": np.ascontiguousarray(batch, dtype)})
        except Exception as error:  # onnxruntime's own exception types
            message = str(error).splitlines()[0][:200]
            raise BundleError(
                f"{self.path.name}: the model failed to run ({message})", code="bundle.model"
            ) from None
        if output.ndim != 2 or output.shape != (batch.shape[0], self.manifest.dim):
            raise BundleError(
                f"{self.path.name}: the model returned shape {output.shape}, "
                f"the manifest promises [{batch.shape[0]}, {self.manifest.dim}]",
                code="bundle.model",
            )
        if not np.all(np.isfinite(output)):
            raise BundleError(
                f"{self.path.name}: the model returned non-finite values", code="bundle.model"
            )
        return output.astype(np.float32)
