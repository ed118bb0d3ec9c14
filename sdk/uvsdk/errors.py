"""The SDK's error types.

Every error the SDK raises on bad input is a :class:`UvsdkError`: its message is one line meant for
a person, it never contains a secret (codeword, prototype, threshold, key or passphrase), and the
CLI turns it into that line on stderr and exit code 2. Its ``code`` (one of :data:`ERROR_CODES`,
docs/spec.md §14) is what a program branches on: the same in the TypeScript port, stable across
releases, while the message's wording may change and differs between the two.
"""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` safe to print on one line: control characters (a newline could forge an output
    line, an escape sequence could rewrite the terminal) and undecodable bytes of a file name
    (lone surrogates) are escaped as ``\\n``, ``\\x1b``, ``\\udcff``."""
    out = []
    for ch in text:
        code = ord(ch)
        if 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


ERROR_CODES = (
    "bundle.not-found",
    "bundle.unreadable",
    "bundle.member-missing",
    "bundle.member-unexpected",
    "bundle.digest-mismatch",
    "bundle.manifest",
    "bundle.member-invalid",
    "bundle.unsupported",
    "bundle.model",
    "bundle.wrong-kind",
    "bundle.signature",
    "bundle.trusted-key",
    "media.undecodable",
    "media.truncated",
    "media.too-short",
    "media.too-long",
    "media.silent",
    "media.clipped",
    "media.non-finite",
    "media.out-of-range",
    "media.empty",
    "media.not-image",
    "template.not-a-template",
    "template.header-modified",
    "template.key-parameters",
    "template.wrong-passphrase",
    "template.wrong-key",
    "template.modified",
    "template.malformed",
    "template.wrong-user",
    "template.rolled-back",
    "template.model-mismatch",
    "template.unreadable",
    "template.freshness",
    "key.unavailable",
    "store.permissions",
    "store.io",
    "store.locked",
    "store.user-name",
    "user.not-enrolled",
    "codeword.exists",
    "codeword.user-id",
    "enroll.samples",
    "enroll.too-few-samples",
    "enroll.mode",
    "calibration.far-invalid",
    "calibration.far-unstated",
    "verify.locked-out",
    "verify.attempt-not-recorded",
    "argument.invalid",
)
"""Every error code, in the order of docs/spec.md §14 (js/src/errors.ts lists the same)."""


class UvsdkError(Exception):
    """Base class of every error the SDK raises on purpose (CLI exit code 2).

    Parameters
    ----------
    message:
        One line for a person (whitespace runs collapse, control characters are escaped).
    code:
        The error code (:data:`ERROR_CODES`); by default the class's ``code``. This base class has
        none: raising it needs one.
    """

    exit_code = 2
    code: str = ""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        # One line, always: a message with a newline would break the CLI's contract; control
        # characters from a file name are escaped.
        super().__init__(printable(" ".join(str(message).split())))
        if code is not None:
            self.code = code
        if self.code not in ERROR_CODES:
            raise TypeError(f"{type(self).__name__} needs an error code, not {self.code!r}")


class BundleError(UvsdkError):
    """The model bundle is missing, truncated, tampered, of an unknown format or inconsistent."""

    code = "bundle.manifest"


class SignatureError(BundleError):
    """The bundle's signature is missing or does not verify against a trusted key."""

    code = "bundle.signature"


class MediaError(UvsdkError):
    """An input file could not be used.

    ``reason`` is a short machine-readable word: ``undecodable``, ``truncated``, ``too_short``,
    ``too_long``, ``silent``, ``clipped``, ``non_finite``, ``out_of_range``, ``empty`` or
    ``not_image``; the code is ``media.`` and the reason with hyphens (``media.too-short``).
    """

    def __init__(self, message: str, reason: str = "undecodable") -> None:
        super().__init__(message, code="media." + reason.replace("_", "-"))
        self.reason = reason


class TemplateError(UvsdkError):
    """A template file is corrupt or was modified."""

    code = "template.modified"


class WrongKeyError(TemplateError):
    """The passphrase (or keyring key) does not open this template."""

    code = "template.wrong-passphrase"


class RollbackError(TemplateError):
    """The template is older than the last one written on this device (a copy was put back)."""

    code = "template.rolled-back"


class ModelMismatchError(TemplateError):
    """The template was made with another model (or code) than the bundle in use."""

    code = "template.model-mismatch"


class StorePermissionError(UvsdkError):
    """The store folder or a template file can be written by another user, or is theirs."""

    code = "store.permissions"


class KeyUnavailableError(UvsdkError):
    """No passphrase or keyring key could be had (e.g. no tty and no $UVSDK_PASSPHRASE)."""

    code = "key.unavailable"


class NotEnrolledError(UvsdkError):
    """The user has no template, or only a codeword and no enrollment yet."""

    code = "user.not-enrolled"


class EnrollmentError(UvsdkError):
    """Enrollment could not be completed (e.g. fewer usable samples than required)."""

    code = "enroll.too-few-samples"


class AttemptNotRecordedError(UvsdkError):
    """Verification was refused because the attempt could not be written into the template."""

    code = "verify.attempt-not-recorded"


class LockedOutError(UvsdkError):
    """Too many consecutive rejections: verification is refused until ``until`` (Unix time)."""

    code = "verify.locked-out"

    def __init__(self, message: str, until: float) -> None:
        super().__init__(message)
        self.until = until


class CalibrationError(UvsdkError):
    """A FAR outside (0, 0.5], or one the bundle's calibration cannot state."""

    code = "calibration.far-unstated"
