"""The encrypted template store: one ``<store>/<user>.uvt`` file per user.

File layout (all integers big-endian)::

    magic   b"UVT2"                       4 bytes
    kdf     1 = scrypt(passphrase), 2 = random key in the OS keyring      1 byte
    log2_n, r, p   scrypt parameters (zero for the keyring)               3 bytes
    salt    random per file (for the keyring: the key's id)               16 bytes
    check   HMAC-SHA256(key, "uvsdk key check")[:16]                      16 bytes
    digest  SHA-256(all of the above)[:8]                                 8 bytes
    nonce   random per write                                              12 bytes
    sealed  AES-256-GCM(key, nonce, JSON payload, aad = all of the above) rest

The key check tells a wrong passphrase from a modified file (AES-GCM alone cannot); the unkeyed
digest tells a modified header (salt, scrypt parameters) from a wrong passphrase, which a keyed
check cannot. Both are authenticated with the rest. Version 1 files (``UVT1``, no digest) are
still read, and written as version 2 the next time they change.

The payload (codeword, prototype, threshold, back-off state, ...) exists in clear only in memory.
It carries a *generation* that grows with every write; the last generation written is also kept
outside the file (in the OS keyring beside a keyring key, or in a state folder outside the store
for passphrase templates), so a template rolled back to an older copy is refused (see
:mod:`uvsdk.freshness` for what each place can promise). Writes are
atomic: a temporary file in the same folder, fsync, ``os.replace``, mode 0600, all relative to the
store folder opened once, so a store deleted meanwhile is never recreated by an update.
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
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import oskeyring
from .backoff import BackoffPolicy, BackoffState
from .calibration import canonical_json
from .errors import (
    KeyUnavailableError,
    NotEnrolledError,
    RollbackError,
    TemplateError,
    UvsdkError,
    WrongKeyError,
)
from .files import (
    TEMPORARY_SUFFIX,
    atomic_write,
    check_private,
    check_private_file,
    make_private_dir,
    open_regular,
    read_at_most,
    user_lock,
)
from .freshness import (
    KEYRING_KEY_FRESHNESS,
    FileFreshness,
    Freshness,
    KeyringFreshness,
)

MAGIC = b"UVT2"
MAGIC_V1 = b"UVT1"
SUFFIX = ".uvt"
KDF_SCRYPT, KDF_KEYRING = 1, 2
SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P = 15, 8, 1
SCRYPT_LOG2_N_RANGE = (10, 16)
"""scrypt costs accepted, read or written: 2^16 x r=8 is 64 MiB and well under a second; anything
larger in a file's header is a modified file asking for gigabytes, refused before deriving."""
PASSPHRASE_NORMALIZATION = "NFKC"
"""Passphrases are Unicode-normalised (NIST SP 800-63B 5.1.1.2) before scrypt in version 2 files,
so the same passphrase typed as composed or decomposed characters, or on a full-width keyboard,
opens the same template."""
_HEADER_V1 = struct.Struct(">4sBBBB16s16s12s")
_HEADER = struct.Struct(">4sBBBB16s16s8s12s")
_DIGEST_BYTES = 8
_KEY_CHECK_LABEL = b"uvsdk key check"
_USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_MAX_FILE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Template:
    """A user's secrets and enrollment state (only ever in clear in memory).

    ``codeword`` (the codeword bits), ``user_id`` and ``code_sha256`` come from ``codeword new``;
    ``mode``, ``threshold``, ``target_tpr``, ``model_sha256`` and ``prototype`` (prototype mode)
    from enrollment; ``far`` and ``calibration`` (the SHA-256 of the bundle's calibration) when
    the threshold came from a calibrated FAR, ``None`` when it is the warm-up rule alone;
    ``cohort`` (the bundle's score scale, :attr:`uvsdk.bundle.Manifest.score_scale`: its cohort
    and ``score_norm``) when prototype scores are normalised, ``None`` for raw cosines. A
    template may hold a
    codeword and no enrollment yet. ``generation`` is the
    store's write counter (read from the file; the store sets it when writing).
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
    far: float | None = None
    calibration: str | None = None
    cohort: str | None = None
    model_sha256: str | None = None
    enrolled: float | None = None
    samples: int = 0
    policy: BackoffPolicy = BackoffPolicy()
    backoff: BackoffState = BackoffState()
    generation: int = field(default=0, compare=False)

    @property
    def is_enrolled(self) -> bool:
        """Whether enrollment (warm-up) has been done."""
        return self.mode is not None and self.threshold is not None

    def replace(self, **changes: Any) -> Template:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def to_payload(self) -> bytes:
        """The JSON plaintext that gets sealed, as RFC 8785 canonical JSON (docs/spec.md §10.5):
        the bytes every implementation writes for the same template. Readers take any spelling
        (templates written before spec version 7 are ``json.dumps``'s)."""
        data = {
            "version": 3,
            "generation": self.generation,
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
            "far": self.far,
            "calibration": self.calibration,
            "cohort": self.cohort,
            "model_sha256": self.model_sha256,
            "enrolled": self.enrolled,
            "samples": self.samples,
            "policy": dataclasses.asdict(self.policy),
            "backoff": dataclasses.asdict(self.backoff),
        }
        return canonical_json(data).encode()

    @classmethod
    def from_payload(cls, payload: bytes) -> Template:
        """Parse a decrypted payload; anything malformed is a :class:`TemplateError`."""
        try:
            data = json.loads(payload)
            if data["version"] not in (1, 2, 3):
                raise ValueError(f"unknown template version {data['version']!r}")
            generation = int(data["generation"]) if data["version"] >= 2 else 0
            if generation < 0:
                raise ValueError("negative generation")
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
                far=data.get("far"),  # absent before calibrated thresholds (warm-up alone)
                calibration=data.get("calibration"),
                cohort=_cohort(data) if data["version"] >= 3 else None,
                model_sha256=data["model_sha256"],
                enrolled=data["enrolled"],
                samples=int(data["samples"]),
                policy=BackoffPolicy(**data["policy"]),
                backoff=BackoffState(**data["backoff"]),
                generation=generation,
            )
        except (ValueError, KeyError, TypeError, OverflowError) as error:
            raise TemplateError(
                f"the template's content is malformed ({type(error).__name__})",
                code="template.malformed",
            ) from None


def _cohort(data: dict) -> str | None:
    """Version 3's ``cohort``: the score scale (cohort and rule) the threshold is on."""
    value = data["cohort"]
    if value is not None and not (isinstance(value, str) and len(value) == 64):
        raise ValueError("cohort is not a SHA-256")
    return value


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
    version: int = 2

    def _fields(self) -> bytes:
        magic = MAGIC if self.version == 2 else MAGIC_V1
        return struct.pack(
            ">4sBBBB16s16s", magic, self.kdf, self.log2_n, self.r, self.p, self.salt, self.check
        )

    def digest(self) -> bytes:
        """The unkeyed digest of the header's fields (version 2)."""
        return hashlib.sha256(self._fields()).digest()[:_DIGEST_BYTES]

    def pack(self) -> bytes:
        if self.version == 1:
            return self._fields() + self.nonce
        return self._fields() + self.digest() + self.nonce

    @property
    def size(self) -> int:
        return _HEADER.size if self.version == 2 else _HEADER_V1.size


def parse_file(blob: bytes, name: str = "template") -> tuple[_Header, bytes]:
    """Split a template file into its header and sealed payload (no key needed).

    Everything that can be checked without the key is checked here, before any key is derived:
    the magic, the key-derivation kind, the scrypt parameters (only the bounded set the SDK
    writes) and, in version 2, the header digest.
    """
    magic = blob[:4]
    if magic == MAGIC:
        layout, version = _HEADER, 2
    elif magic == MAGIC_V1:
        layout, version = _HEADER_V1, 1
    elif len(blob) < 4 + 16:
        raise TemplateError(
            f"{name}: not a uvsdk template (too short: {len(blob)} bytes)",
            code="template.not-a-template",
        )
    else:
        raise TemplateError(
            f"{name}: not a uvsdk template (bad magic)", code="template.not-a-template"
        )
    if len(blob) < layout.size + 16:
        raise TemplateError(
            f"{name}: not a uvsdk template (too short: {len(blob)} bytes)",
            code="template.not-a-template",
        )
    if version == 2:
        _, kdf, log2_n, r, p, salt, check, digest, nonce = layout.unpack_from(blob)
    else:
        _, kdf, log2_n, r, p, salt, check, nonce = layout.unpack_from(blob)
    header = _Header(kdf, log2_n, r, p, salt, check, nonce, version)
    if version == 2 and not hmac.compare_digest(header.digest(), digest):
        raise TemplateError(
            f"{name}: the template's header was modified or is damaged",
            code="template.header-modified",
        )
    if kdf == KDF_SCRYPT:
        low, high = SCRYPT_LOG2_N_RANGE
        if not (low <= log2_n <= high and r == SCRYPT_R and p == SCRYPT_P):
            raise TemplateError(
                f"{name}: the template's key parameters are not ones this SDK writes (modified?)",
                code="template.key-parameters",
            )
    elif kdf == KDF_KEYRING:
        if (log2_n, r, p) != (0, 0, 0):
            raise TemplateError(
                f"{name}: the template's key parameters are malformed (modified?)",
                code="template.key-parameters",
            )
    else:
        raise TemplateError(
            f"{name}: unknown key derivation {kdf} (modified?)", code="template.key-parameters"
        )
    return header, blob[layout.size :]


def _key_check(key: bytes) -> bytes:
    return hmac.new(key, _KEY_CHECK_LABEL, hashlib.sha256).digest()[:16]


def passphrase_bytes(passphrase: str, *, normalize: bool = True) -> bytes:
    """The bytes scrypt derives from: NFKC-normalised UTF-8 (version 2 files).

    A passphrase that is not valid Unicode text (an invalid UTF-8 byte in ``$UVSDK_PASSPHRASE``
    reaches Python as a lone surrogate) is refused without echoing any part of it.
    """
    try:
        text = (
            unicodedata.normalize(PASSPHRASE_NORMALIZATION, passphrase) if normalize else passphrase
        )
        return text.encode("utf-8")
    except UnicodeError:
        raise KeyUnavailableError(
            "the passphrase is not valid UTF-8 text; type it again or fix UVSDK_PASSPHRASE"
        ) from None


def _scrypt(secret: bytes, salt: bytes, log2_n: int, r: int, p: int) -> bytes:
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    kdf = Scrypt(salt=salt, length=32, n=2**log2_n, r=r, p=p)
    return kdf.derive(secret)


PassphraseSource = str | Callable[[bool], str] | None


def passphrase_from_environment(confirm: bool) -> str:
    """``$UVSDK_PASSPHRASE``, else a hidden prompt when stdin is a terminal, else an error.

    ``confirm`` asks twice (for a template that is being created). The environment variable is
    read, not removed: a library does not edit its host's environment (the ``uvsdk`` command,
    a process of its own, removes it once read).
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
        The store folder (created with mode 0700 on first write). It must belong to the user (or
        root) and not be writable by group or others, as ssh asks of ``~/.ssh``.
    passphrase:
        A string, or a callable ``(confirm: bool) -> str`` asked only when a key is needed
        (default: :func:`passphrase_from_environment`). A callable is asked again after a wrong
        passphrase.
    use_keyring:
        New templates get a random key kept in the OS keyring instead of a passphrase.
        Existing templates are always opened with the kind of key they were made with.
    scrypt_log2_n:
        scrypt cost for new templates (2^15 by default: 32 MiB, about 0.15 s here).
    freshness:
        Where the generation of passphrase templates is kept: ``"file"`` (default: a state
        folder outside the store, :class:`FileFreshness`) or ``"keyring"``
        (:class:`KeyringFreshness`, rollback-proof; needs a working keyring), or an object with
        ``get``/``set``/``delete``. Keyring-key templates always keep it beside their key.
    lock_timeout:
        How long one holder may keep a user's lock before :meth:`locked` gives up with a
        ``store.locked`` error naming the lock file (default
        :data:`uvsdk.files.LOCK_TIMEOUT_SECONDS`).
    on_lock_wait:
        Told once, with a line saying what is awaited, when :meth:`locked` has waited a second
        (the command prints it on stderr).
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        passphrase: PassphraseSource = None,
        use_keyring: bool = False,
        scrypt_log2_n: int | None = None,
        freshness: str | Freshness = "file",
        lock_timeout: float | None = None,
        on_lock_wait: Callable[[str], None] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.lock_timeout = lock_timeout
        self.on_lock_wait = on_lock_wait
        self._passphrase_source = passphrase
        self._passphrase: str | None = None
        self.use_keyring = use_keyring
        low, high = SCRYPT_LOG2_N_RANGE
        if scrypt_log2_n is not None and not low <= scrypt_log2_n <= high:
            raise UvsdkError(
                f"scrypt_log2_n must be in [{low}, {high}], not {scrypt_log2_n}",
                code="argument.invalid",
            )
        self.scrypt_log2_n = scrypt_log2_n
        if freshness == "file":
            self.freshness: Freshness = FileFreshness()
        elif freshness == "keyring":
            self.freshness = KeyringFreshness()
        elif isinstance(freshness, str):
            raise UvsdkError(
                f"freshness must be 'file' or 'keyring', not {freshness!r}", code="argument.invalid"
            )
        else:
            self.freshness = freshness
        self._keys: dict[str, tuple[_Header, bytes]] = {}  # user -> header and key last used
        self._generations: dict[str, int] = {}  # user -> generation last read or written
        # (kdf, salt, parameters) -> key, so scrypt runs once
        self._derived: dict[tuple, bytes] = {}

    # -- paths and listing -------------------------------------------------------------------

    def path(self, user: str) -> Path:
        """``<store>/<user>.uvt`` for a valid user name."""
        if not isinstance(user, str) or not _USER_NAME.fullmatch(user):
            raise UvsdkError(
                f"invalid user name {user!r:.80}: use 1-64 letters, digits, '.', '_' or '-'",
                code="store.user-name",
            )
        return self.directory / f"{user}{SUFFIX}"

    def exists(self, user: str) -> bool:
        """Whether the user has a template file."""
        return self.path(user).is_file()

    def users(self) -> list[str]:
        """The users with a template, sorted (entries that are not templates are skipped; see
        :meth:`ignored`)."""
        return [name for name, problem in self._entries() if problem is None]

    def ignored(self) -> list[tuple[str, str]]:
        """``(file name, why)`` for each ``*.uvt`` entry that is not a usable template file."""
        return [(name, problem) for name, problem in self._entries() if problem is not None]

    def _entries(self) -> list[tuple[str, str | None]]:
        if not self.directory.is_dir():
            return []
        found = []
        try:
            entries = sorted(os.scandir(self.directory), key=lambda e: e.name)
        except OSError as error:
            raise UvsdkError(
                f"cannot list the store {self.directory} ({error.strerror or error})",
                code="store.user-name",
            ) from None
        for entry in entries:
            if not entry.name.endswith(SUFFIX) or entry.name.startswith("."):
                continue
            user = entry.name[: -len(SUFFIX)]
            if not _USER_NAME.fullmatch(user):
                found.append((entry.name, "not a valid user name"))
            elif entry.is_symlink():
                found.append((entry.name, "a symbolic link, not a template file"))
            elif not entry.is_file(follow_symlinks=False):
                found.append((entry.name, "not a regular file"))
            else:
                found.append((user, None))
        return found

    # -- checks ------------------------------------------------------------------------------

    def check_permissions(self) -> None:
        """Refuse a store folder another user could write to (as ssh refuses such a ``~/.ssh``):
        owned by someone else than this user or root, or writable by group or others."""
        check_private(self.directory, "store")

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
            passphrase_bytes(value)  # refuses text that is not valid Unicode
            self._passphrase = value
        return self._passphrase

    def ask_new_passphrase(self, user: str) -> None:
        """For a user without a template, ask for the new passphrase now (twice, on a
        terminal), before long work that ends in writing the template (an enrollment embeds
        every sample first), so that a typo loses no work (issue 47). A user with a template is
        left alone: its key is checked when the template is opened, where docs/spec.md §9.1
        (step 4) places that check."""
        if not self.use_keyring and not self.exists(user):
            self._get_passphrase(confirm=True)

    def _open_key(self, header: _Header, name: str) -> bytes:
        cache_key = (header.version, header.kdf, header.salt, header.log2_n, header.r, header.p)
        cached = self._derived.get(cache_key)
        if cached is not None and hmac.compare_digest(_key_check(cached), header.check):
            return cached
        if header.kdf == KDF_KEYRING:
            key = oskeyring.get_key(header.salt)
            if key is None:
                raise WrongKeyError(
                    f"{name}: its key is not in this keyring", code="template.wrong-key"
                )
            candidates = [key]
        else:
            passphrase = self._get_passphrase(confirm=False)
            secrets_to_try = [passphrase_bytes(passphrase)]
            if header.version == 1:
                # Version 1 derived from the passphrase as given; NFKC is tried second.
                raw = passphrase_bytes(passphrase, normalize=False)
                secrets_to_try = [raw] + [s for s in secrets_to_try if s != raw]
            candidates = [
                _scrypt(secret, header.salt, header.log2_n, header.r, header.p)
                for secret in secrets_to_try
            ]
        for key in candidates:
            if hmac.compare_digest(_key_check(key), header.check):
                self._derived[cache_key] = key
                return key
        if header.kdf == KDF_KEYRING:
            raise WrongKeyError(f"{name}: wrong keyring key", code="template.wrong-key")
        if not isinstance(self._passphrase_source, str):
            self._passphrase = None  # ask again next time instead of keeping a mistyped one
        hint = "" if header.version == 2 else " (or its header was modified)"
        raise WrongKeyError(f"{name}: wrong passphrase{hint}")

    def _new_key(self) -> tuple[_Header, bytes]:
        salt = secrets.token_bytes(16)
        if self.use_keyring:
            key = secrets.token_bytes(32)
            oskeyring.set_key(salt, key)
            return _Header(KDF_KEYRING, 0, 0, 0, salt, _key_check(key), b""), key
        passphrase = self._get_passphrase(confirm=True)
        log2_n = self.scrypt_log2_n or SCRYPT_LOG2_N
        key = _scrypt(passphrase_bytes(passphrase), salt, log2_n, SCRYPT_R, SCRYPT_P)
        return _Header(KDF_SCRYPT, log2_n, SCRYPT_R, SCRYPT_P, salt, _key_check(key), b""), key

    def _freshness_for(self, header: _Header) -> Freshness:
        return KEYRING_KEY_FRESHNESS if header.kdf == KDF_KEYRING else self.freshness

    # -- reading and writing -----------------------------------------------------------------

    def load(self, user: str) -> Template:
        """Decrypt and authenticate the user's template, and check it was not rolled back."""
        path = self.path(user)
        name = path.name
        if self.directory.is_dir():
            self.check_permissions()
        try:
            with os.fdopen(open_regular(path), "rb") as handle:
                check_private_file(handle.fileno(), path)
                blob = read_at_most(handle, _MAX_FILE_BYTES)
        except FileNotFoundError:
            raise NotEnrolledError(
                f"user {user!r} is not enrolled in {self.directory} (run uvsdk enroll)"
            ) from None
        except OSError as error:
            raise TemplateError(
                f"{name}: cannot read ({error.strerror or error})", code="template.unreadable"
            ) from None
        if len(blob) > _MAX_FILE_BYTES:
            raise TemplateError(
                f"{name}: too large to be a template", code="template.not-a-template"
            )
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
            raise TemplateError(
                f"{name}: the template belongs to another user (renamed file?)",
                code="template.wrong-user",
            )
        recorded = self._freshness_for(header).get(header.salt)
        if recorded is not None and template.generation < recorded:
            raise RollbackError(
                f"{name}: the template is older than the last one written on this device "
                f"(generation {template.generation} < {recorded}): it was rolled back or "
                f"restored from a copy. Nothing was changed; if you restored it yourself, "
                f"re-enroll (uvsdk delete --user {user}, then uvsdk enroll)"
            )
        self._keys[user] = (header, key)
        self._generations[user] = max(template.generation, recorded or 0)
        return template

    def save(self, template: Template, *, create: bool | None = None) -> Path:
        """Encrypt and write atomically, with the next generation.

        A fresh nonce every time; the salt and key are kept when this store opened the user's
        file before, else made anew. ``create`` (default: whether this store has not read the
        user's template) allows making the store folder and a new file; an update (``create``
        false) never recreates a store or template that was deleted meanwhile.
        """
        path = self.path(template.user)
        known = self._keys.get(template.user)
        if create is None:
            create = known is None
        if create:
            make_private_dir(self.directory)
        if self.directory.is_dir():
            self.check_permissions()
        header, key = known or self._new_key()
        header = dataclasses.replace(header, nonce=secrets.token_bytes(12), version=2)
        generation = max(template.generation, self._generations.get(template.user, 0)) + 1
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        aad = header.pack()
        sealed = template.replace(generation=generation).to_payload()
        blob = aad + AESGCM(key).encrypt(header.nonce, sealed, aad)
        self._freshness_for(header).check_permissions()  # before the file: never half a write
        atomic_write(path, blob, must_exist=not create)
        self._keys[template.user] = (header, key)
        self._generations[template.user] = generation
        try:
            self._freshness_for(header).set(header.salt, generation)
        except UvsdkError as error:
            raise UvsdkError(
                f"{path.name} was written, but its freshness record was not ({error})",
                code="template.freshness",
            ) from None
        return path

    def delete(self, user: str) -> None:
        """Remove the user's template, its stale temporary files, its freshness record and its
        keyring key."""
        path = self.path(user)
        stale = self._stale_temporaries(user)
        if not path.is_file() and not path.is_symlink():
            for leftover in stale:
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()
            raise NotEnrolledError(f"user {user!r} has no template in {self.directory}")
        header = None
        with contextlib.suppress(TemplateError, OSError):
            header, _ = parse_file(path.read_bytes(), path.name)  # a damaged file is still deleted
        path.unlink()
        for leftover in stale:
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        if header is not None:
            with contextlib.suppress(UvsdkError):
                self._freshness_for(header).delete(header.salt)
            if header.kdf == KDF_KEYRING:
                oskeyring.delete_key(header.salt)
        self._keys.pop(user, None)
        self._generations.pop(user, None)

    def _stale_temporaries(self, user: str) -> list[Path]:
        """Temporary files of interrupted writes of this user's template: ``.<user>.uvt.<12 hex
        digits>.tmp``, and 0.1's ``.<user>.uvt.<8 characters>`` (never another user's lock file,
        ``.<user>.uvt.lock`` being user ``<user>.uvt``'s)."""
        if not self.directory.is_dir():
            return []
        name = re.escape(self.path(user).name)
        pattern = re.compile(
            rf"\.{name}\.([0-9a-f]{{12}}{re.escape(TEMPORARY_SUFFIX)}|[a-z0-9_]{{8}})"
        )
        return [p for p in self.directory.iterdir() if pattern.fullmatch(p.name)]

    @contextlib.contextmanager
    def locked(self, user: str, *, create: bool = False) -> Iterator[None]:
        """Hold the user's lock for a read-modify-write of the user's template.

        The lock is the file ``<store>/.<user>.lock`` (:func:`uvsdk.files.user_lock`), the same
        one the TypeScript port takes, so processes of either exclude each other. With
        ``create`` the folder is made first (mode 0700), so writers racing to create a store are
        serialised too; without it a missing store is not created, and there is nothing to lock.
        Under the lock, temporary files left by an interrupted write of this user are removed.
        """
        self.path(user)  # validates the name
        if create:
            make_private_dir(self.directory)
        if not self.directory.is_dir():
            yield
            return
        self.check_permissions()
        with user_lock(self.directory, user, timeout=self.lock_timeout, on_wait=self.on_lock_wait):
            for leftover in self._stale_temporaries(user):
                with contextlib.suppress(OSError):
                    leftover.unlink()
            yield
