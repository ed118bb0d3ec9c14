"""uvsdk: on-device enrollment and verification of users with federatedly trained models.

The SDK needs numpy, onnxruntime and cryptography (plus soundfile, soxr and Pillow for decoding):
never torch or the trainer. Start with :class:`Verifier`.
"""

from .backoff import BackoffPolicy
from .bundle import Bundle, Manifest
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
from .verifier import Decision, EnrollmentReport, SampleReport, Verifier

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
