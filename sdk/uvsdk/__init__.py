"""uvsdk: on-device enrollment and verification of users with federatedly trained models.

The SDK needs numpy, onnxruntime and cryptography (plus soundfile, soxr and Pillow for decoding):
never torch or the trainer. Start with :class:`Verifier`.

The errors are imported with the package; :class:`Verifier`, :class:`Bundle` and the rest on
first use (``from uvsdk import Verifier`` as before), so that ``import uvsdk.errors`` or the
``uvsdk`` command's own module (:mod:`uvsdk.cli`) loads no numpy or onnxruntime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    AttemptNotRecordedError,
    BundleError,
    EnrollmentError,
    KeyUnavailableError,
    LockedOutError,
    MediaError,
    ModelMismatchError,
    NotEnrolledError,
    RollbackError,
    SignatureError,
    StorePermissionError,
    TemplateError,
    UvsdkError,
    WrongKeyError,
)

if TYPE_CHECKING:
    from .backoff import BackoffPolicy
    from .bundle import Bundle, Manifest
    from .verifier import Decision, EnrollmentReport, SampleReport, Verifier

#: The names imported on first use, by the module that defines them.
LAZY = {
    "BackoffPolicy": "backoff",
    "Bundle": "bundle",
    "Manifest": "bundle",
    "Decision": "verifier",
    "EnrollmentReport": "verifier",
    "SampleReport": "verifier",
    "Verifier": "verifier",
}


def __getattr__(name: str) -> Any:
    module = LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # once: later reads find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *LAZY})


__version__ = "0.1.0"

__all__ = [
    "AttemptNotRecordedError",
    "BackoffPolicy",
    "Bundle",
    "BundleError",
    "Decision",
    "EnrollmentError",
    "EnrollmentReport",
    "KeyUnavailableError",
    "LockedOutError",
    "Manifest",
    "MediaError",
    "ModelMismatchError",
    "NotEnrolledError",
    "RollbackError",
    "SampleReport",
    "SignatureError",
    "StorePermissionError",
    "TemplateError",
    "UvsdkError",
    "Verifier",
    "WrongKeyError",
]
