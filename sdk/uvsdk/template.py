"""The encrypted template store: one ``<store>/<user>.uvt`` file per user.

File layout (all integers big-endian)::

    magic   b"UVT1"                       4 bytes
    kdf     1 = scrypt(passphrase), 2 = random key in the OS keyring      1 byte
    log2_n, r, p   scrypt parameters (zero for the keyring)               3 bytes
    salt    random per file (for the keyring: the key's id)               16 bytes
    check   HMAC-SHA256(key, "uvsdk key check")[:16]                      16 bytes
    nonce   random per write                                              12 bytes
    sealed  AES-256-GCM(key, nonce, JSON payload, aad = all of the above) rest

The key check tells a wrong passphrase from a modified file (AES-GCM alone cannot); it is
authenticated with the rest. The payload (codeword, prototype, threshold, back-off state, ...)
exists in clear only in memory. Writes are atomic: a temporary file in the same folder, fsync,
``os.replace``, mode 0600.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import getpass
import hashlib
import hmac
import json
import os
import re
import secrets
import struct
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .backoff import BackoffPolicy, BackoffState
from .errors import KeyUnavailableError, NotEnrolledError, TemplateError, UvsdkError, WrongKeyError

MAGIC = b"UVT1"
SUFFIX = ".uvt"
KDF_SCRYPT, KDF_KEYRING = 1, 2
SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P = 15, 8, 1
KEYRING_SERVICE = "uvsdk"
_HEADER = struct.Struct(">4sBBBB16s16s12s")
_KEY_CHECK_LABEL = b"uvsdk key check"
_USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_MAX_FILE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Template:
    """A user's secrets and enrollment state (only ever in clear in memory).

    ``codeword`` (the codeword bits), ``user_id`` and ``code_sha256`` come from ``codeword new``;
    ``mode``, ``threshold``, ``target_tpr``, ``model_sha256`` and ``prototype`` (prototype mode)
    from enrollment. A template may hold a codeword and no enrollment yet.
    """

    user: str
    created: float
    codeword: np.ndarray | None = field(default=None, repr=False, compare=False)
    user_id: int | None = field(default=None, repr=False)
    code_sha256: str | None = None
    mode: str | None = None
    prototype: np.ndarray | None = field(default=None, repr=False, compare=False)
    threshold: float | None = field(default=None, repr=False)
    target_tpr: float | None = None
    model_sha256: str | None = None
    enrolled: float | None = None
    samples: int = 0
    policy: BackoffPolicy = BackoffPolicy()
    backoff: BackoffState = BackoffState()

    @property
    def is_enrolled(self) -> bool:
        """Whether enrollment (warm-up) has been done."""
        return self.mode is not None and self.threshold is not None

    def replace(self, **changes: Any) -> Template:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def to_payload(self) -> bytes:
        """The JSON plaintext that gets sealed."""
        data = {
            "version": 1,
            "user": self.user,
            "created": self.created,
            "codeword": _b64(np.packbits(self.codeword)) if self.codeword is not None else None,
            "codeword_length": int(self.codeword.size) if self.codeword is not None else None,
            "user_id": self.user_id,
            "code_sha256": self.code_sha256,
            "mode": self.mode,
            "prototype": _b64(self.prototype.astype("<f4")) if self.prototype is not None else None,
            "threshold": self.threshold,
            "target_tpr": self.target_tpr,
            "model_sha256": self.model_sha256,
            "enrolled": self.enrolled,
            "samples": self.samples,
            "policy": dataclasses.asdict(self.policy),
            "backoff": dataclasses.asdict(self.backoff),
        }
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def from_payload(cls, payload: bytes) -> Template:
        """Parse a decrypted payload; anything malformed is a :class:`TemplateError`."""
        try:
            data = json.loads(payload)
            if data["version"] != 1:
                raise ValueError(f"unknown template version {data['version']!r}")
            codeword = None
            if data["codeword"] is not None:
                packed = np.frombuffer(base64.b64decode(data["codeword"]), np.uint8)
                codeword = np.unpackbits(packed, count=int(data["codeword_length"]))
            prototype = None
            if data["prototype"] is not None:
                raw = base64.b64decode(data["prototype"])
                prototype = np.frombuffer(raw, "<f4").astype(np.float32)
            return cls(
                user=str(data["user"]),
                created=float(data["created"]),
                codeword=codeword,
                user_id=data["user_id"],
                code_sha256=data["code_sha256"],
                mode=data["mode"],
                prototype=prototype,
                threshold=data["threshold"],
                target_tpr=data["target_tpr"],
                model_sha256=data["model_sha256"],
                enrolled=data["enrolled"],
                samples=int(data["samples"]),
                policy=BackoffPolicy(**data["policy"]),
                backoff=BackoffState(**data["backoff"]),
            )
        except (ValueError, KeyError, TypeError) as error:
            raise TemplateError(
                f"the template's content is malformed ({type(error).__name__})"
            ) from None


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")


@dataclass(frozen=True)
class _Header:
    kdf: int
    log2_n: int
    r: int
    p: int
    salt: bytes
    check: bytes
    nonce: bytes

    def pack(self) -> bytes:
        return _HEADER.pack(
            MAGIC, self.kdf, self.log2_n, self.r, self.p, self.salt, self.check, self.nonce
        )


def parse_file(blob: bytes, name: str = "template") -> tuple[_Header, bytes]:
    """Split a template file into its header and sealed payload (no key needed)."""
    if len(blob) < _HEADER.size + 16:
        raise TemplateError(f"{name}: not a uvsdk template (too short: {len(blob)} bytes)")
    magic, kdf, log2_n, r, p, salt, check, nonce = _HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise TemplateError(f"{name}: not a uvsdk template (bad magic)")
    if kdf == KDF_SCRYPT and not (10 <= log2_n <= 22 and 1 <= r <= 32 and 1 <= p <= 16):
        raise TemplateError(f"{name}: the template's key parameters are out of range (modified?)")
    if kdf not in (KDF_SCRYPT, KDF_KEYRING):
        raise TemplateError(f"{name}: unknown key derivation {kdf} (modified?)")
    return _Header(kdf, log2_n, r, p, salt, check, nonce), blob[_HEADER.size :]


def _key_check(key: bytes) -> bytes:
    return hmac.new(key, _KEY_CHECK_LABEL, hashlib.sha256).digest()[:16]


def _scrypt(passphrase: str, salt: bytes, log2_n: int, r: int, p: int) -> bytes:
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    kdf = Scrypt(salt=salt, length=32, n=2**log2_n, r=r, p=p)
    return kdf.derive(passphrase.encode("utf-8"))


PassphraseSource = str | Callable[[bool], str] | None


def passphrase_from_environment(confirm: bool) -> str:
    """``$UVSDK_PASSPHRASE``, else a hidden prompt when stdin is a terminal, else an error.

    ``confirm`` asks twice (for a template that is being created).
    """
    value = os.environ.get("UVSDK_PASSPHRASE")
    if value:
        return value
    if not sys.stdin or not sys.stdin.isatty():
        raise KeyUnavailableError(
            "no passphrase: set UVSDK_PASSPHRASE or run in a terminal (stdin is not a tty)"
        )
    try:
        first = getpass.getpass("uvsdk passphrase: ")
        if confirm and getpass.getpass("repeat the passphrase: ") != first:
            raise KeyUnavailableError("the two passphrases differ")
    except (EOFError, KeyboardInterrupt):
        raise KeyUnavailableError("no passphrase given") from None
    return first


class TemplateStore:
    """A folder of encrypted templates.

    Parameters
    ----------
    directory:
        The store folder (created with mode 0700 on first write).
    passphrase:
        A string, or a callable ``(confirm: bool) -> str`` asked only when a key is needed
        (default: :func:`passphrase_from_environment`).
    use_keyring:
        New templates get a random key kept in the OS keyring instead of a passphrase.
        Existing templates are always opened with the kind of key they were made with.
    scrypt_log2_n:
        scrypt cost for new templates (2^15 by default: 32 MiB, about 0.15 s here).
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        passphrase: PassphraseSource = None,
        use_keyring: bool = False,
        scrypt_log2_n: int | None = None,
    ) -> None:
        self.directory = Path(directory)
        self._passphrase_source = passphrase
        self._passphrase: str | None = None
        self.use_keyring = use_keyring
        self.scrypt_log2_n = scrypt_log2_n
        self._keys: dict[str, tuple[_Header, bytes]] = {}  # user -> header and key last used
        self._derived: dict[
            tuple, bytes
        ] = {}  # (kdf, salt, parameters) -> key, so scrypt runs once

    # -- paths and listing -------------------------------------------------------------------

    def path(self, user: str) -> Path:
        """``<store>/<user>.uvt`` for a valid user name."""
        if not _USER_NAME.match(user):
            raise UvsdkError(
                f"invalid user name {user!r}: use 1-64 letters, digits, '.', '_' or '-'"
            )
        return self.directory / f"{user}{SUFFIX}"

    def exists(self, user: str) -> bool:
        """Whether the user has a template file."""
        return self.path(user).is_file()

    def users(self) -> list[str]:
        """The users with a template, sorted."""
        if not self.directory.is_dir():
            return []
        return sorted(p.name[: -len(SUFFIX)] for p in self.directory.glob(f"*{SUFFIX}"))

    # -- keys --------------------------------------------------------------------------------

    def _get_passphrase(self, confirm: bool) -> str:
        if self._passphrase is None:
            source = self._passphrase_source
            if isinstance(source, str):
                value = source
            else:
                value = (source or passphrase_from_environment)(confirm)
            if not value:
                raise KeyUnavailableError("the passphrase is empty")
            self._passphrase = value
        return self._passphrase

    def _open_key(self, header: _Header, name: str) -> bytes:
        cached = self._derived.get((header.kdf, header.salt, header.log2_n, header.r, header.p))
        if cached is not None and hmac.compare_digest(_key_check(cached), header.check):
            return cached
        if header.kdf == KDF_KEYRING:
            key = _keyring_get(header.salt)
            if key is None:
                raise WrongKeyError(f"{name}: its key is not in this keyring")
        else:
            passphrase = self._get_passphrase(confirm=False)
            key = _scrypt(passphrase, header.salt, header.log2_n, header.r, header.p)
        if not hmac.compare_digest(_key_check(key), header.check):
            kind = "keyring key" if header.kdf == KDF_KEYRING else "passphrase"
            raise WrongKeyError(f"{name}: wrong {kind}")
        self._derived[(header.kdf, header.salt, header.log2_n, header.r, header.p)] = key
        return key

    def _new_key(self) -> tuple[_Header, bytes]:
        salt = secrets.token_bytes(16)
        if self.use_keyring:
            key = secrets.token_bytes(32)
            _keyring_set(salt, key)
            return _Header(KDF_KEYRING, 0, 0, 0, salt, _key_check(key), b""), key
        passphrase = self._get_passphrase(confirm=True)
        log2_n = self.scrypt_log2_n or SCRYPT_LOG2_N
        key = _scrypt(passphrase, salt, log2_n, SCRYPT_R, SCRYPT_P)
        return _Header(KDF_SCRYPT, log2_n, SCRYPT_R, SCRYPT_P, salt, _key_check(key), b""), key

    # -- reading and writing -----------------------------------------------------------------

    def load(self, user: str) -> Template:
        """Decrypt and authenticate the user's template."""
        path = self.path(user)
        name = path.name
        try:
            with open(path, "rb") as handle:
                blob = handle.read(_MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            raise NotEnrolledError(
                f"user {user!r} is not enrolled in {self.directory} (run uvsdk enroll)"
            ) from None
        except OSError as error:
            raise TemplateError(f"{name}: cannot read ({error.strerror or error})") from None
        if len(blob) > _MAX_FILE_BYTES:
            raise TemplateError(f"{name}: too large to be a template")
        header, sealed = parse_file(blob, name)
        key = self._open_key(header, name)
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        try:
            payload = AESGCM(key).decrypt(header.nonce, sealed, header.pack())
        except InvalidTag:
            raise TemplateError(f"{name}: the template was modified or is damaged") from None
        template = Template.from_payload(payload)
        if template.user != user:
            raise TemplateError(f"{name}: the template belongs to another user (renamed file?)")
        self._keys[user] = (header, key)
        return template

    def save(self, template: Template) -> Path:
        """Encrypt and write atomically (a fresh nonce every time; the salt and key are kept
        when this store opened the user's file before, else made anew)."""
        path = self.path(template.user)
        header, key = self._keys.get(template.user) or self._new_key()
        header = dataclasses.replace(header, nonce=secrets.token_bytes(12))
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        aad = header.pack()
        blob = aad + AESGCM(key).encrypt(header.nonce, template.to_payload(), aad)
        _atomic_write(path, blob)
        self._keys[template.user] = (header, key)
        return path

    def delete(self, user: str) -> None:
        """Remove the user's template (and its keyring key, if it has one)."""
        path = self.path(user)
        if not path.is_file():
            raise NotEnrolledError(f"user {user!r} has no template in {self.directory}")
        try:
            header, _ = parse_file(path.read_bytes(), path.name)
            if header.kdf == KDF_KEYRING:
                _keyring_delete(header.salt)
        except TemplateError:
            pass  # a damaged file is still deleted
        path.unlink()
        self._keys.pop(user, None)

    @contextlib.contextmanager
    def locked(self, user: str) -> Iterator[None]:
        """Hold an exclusive lock for a read-modify-write of the user's template.

        The lock is ``flock`` on the store folder itself, so no lock file is left behind; with no
        store folder yet there is nothing to protect and no folder is created. Where ``fcntl`` is
        missing (Windows) writes stay atomic through ``os.replace`` but are not serialised.
        """
        self.path(user)  # validates the name
        try:
            import fcntl
        except ImportError:
            yield
            return
        if not self.directory.is_dir():
            yield
            return
        descriptor = os.open(self.directory, os.O_RDONLY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)  # closing releases the lock

    def forget_keys(self) -> None:
        """Drop cached keys from memory."""
        self._keys.clear()
        self._derived.clear()
        self._passphrase = None


def _make_store_dir(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise UvsdkError(
            f"cannot create the store {directory} ({error.strerror or error})"
        ) from None


def _atomic_write(path: Path, blob: bytes) -> None:
    """Write via a temporary file in the same folder, fsync, then ``os.replace`` (mode 0600)."""
    _make_store_dir(path.parent)
    try:
        # mkstemp creates the file with mode 0600, readable by its owner alone.
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as error:
        raise UvsdkError(f"cannot write to {path.parent} ({error.strerror or error})") from None
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(blob)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise UvsdkError(f"cannot write {path} ({error.strerror or error})") from None
        raise
    if hasattr(os, "O_DIRECTORY"):
        with contextlib.suppress(OSError):
            directory = os.open(path.parent, os.O_DIRECTORY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)


def _keyring() -> Any:
    try:
        import keyring
        import keyring.errors
    except ImportError:
        raise KeyUnavailableError(
            "the OS keyring needs the 'keyring' package: pip install 'uvsdk[keyring]'"
        ) from None
    return keyring


def _keyring_entry(key_id: bytes) -> str:
    return f"template-key-{key_id.hex()}"


def _keyring_set(key_id: bytes, key: bytes) -> None:
    keyring = _keyring()
    try:
        keyring.set_password(
            KEYRING_SERVICE, _keyring_entry(key_id), base64.b64encode(key).decode()
        )
    except keyring.errors.KeyringError as error:
        raise KeyUnavailableError(f"the OS keyring is not available ({error})") from None


def _keyring_get(key_id: bytes) -> bytes | None:
    keyring = _keyring()
    try:
        value = keyring.get_password(KEYRING_SERVICE, _keyring_entry(key_id))
    except keyring.errors.KeyringError as error:
        raise KeyUnavailableError(f"the OS keyring is not available ({error})") from None
    return base64.b64decode(value) if value else None


def _keyring_delete(key_id: bytes) -> None:
    keyring = _keyring()
    with contextlib.suppress(keyring.errors.KeyringError):
        keyring.delete_password(KEYRING_SERVICE, _keyring_entry(key_id))
