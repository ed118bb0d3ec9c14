"""The SDK's error types.

Every error the SDK raises on bad input is a :class:`UvsdkError`: its message is one line meant for
a person, it never contains a secret (codeword, prototype, threshold, key or passphrase), and the
CLI turns it into that line on stderr and exit code 2.
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


class UvsdkError(Exception):
    """Base class of every error the SDK raises on purpose (CLI exit code 2)."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        # One line, always: a message with a newline would break the CLI's contract; control
        # characters from a file name are escaped.
        super().__init__(printable(" ".join(str(message).split())))


class BundleError(UvsdkError):
    """The model bundle is missing, truncated, tampered, of an unknown format or inconsistent."""


class SignatureError(BundleError):
    """The bundle's signature is missing or does not verify against a trusted key."""


class MediaError(UvsdkError):
    """An input file could not be used.

    ``reason`` is a short machine-readable word: ``undecodable``, ``truncated``, ``too_short``,
    ``too_long``, ``silent``, ``clipped``, ``non_finite``, ``out_of_range``, ``empty`` or
    ``not_image``.
    """

    def __init__(self, message: str, reason: str = "undecodable") -> None:
        super().__init__(message)
        self.reason = reason


class TemplateError(UvsdkError):
    """A template file is corrupt or was modified."""


class WrongKeyError(TemplateError):
    """The passphrase (or keyring key) does not open this template."""


class RollbackError(TemplateError):
    """The template is older than the last one written on this device (a copy was put back)."""


class ModelMismatchError(TemplateError):
    """The template was made with another model (or code) than the bundle in use."""


class StorePermissionError(UvsdkError):
    """The store folder or a template file can be written by another user, or is theirs."""


class KeyUnavailableError(UvsdkError):
    """No passphrase or keyring key could be had (e.g. no tty and no $UVSDK_PASSPHRASE)."""


class NotEnrolledError(UvsdkError):
    """The user has no template, or only a codeword and no enrollment yet."""


class EnrollmentError(UvsdkError):
    """Enrollment could not be completed (e.g. fewer usable samples than required)."""


class AttemptNotRecordedError(UvsdkError):
    """Verification was refused because the attempt could not be written into the template."""


class LockedOutError(UvsdkError):
    """Too many consecutive rejections: verification is refused until ``until`` (Unix time)."""

    def __init__(self, message: str, until: float) -> None:
        super().__init__(message)
        self.until = until


class CalibrationError(UvsdkError):
    """A FAR outside (0, 0.5], or one the bundle's calibration cannot state."""
