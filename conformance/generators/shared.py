"""What every generator uses: the conformance folder's paths, the document's frame and the
encodings of ``conformance/README.md`` ("Encodings used in every file")."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from uvsdk.errors import UvsdkError
from uvsdk.verifier import Verifier

#: The conformance folder (inputs: ``bundles/``, ``audio/``, ``keys/``, ``known-users.json``).
CONFORMANCE = Path(__file__).parent.parent
ROOT = CONFORMANCE.parent
FORMAT = "uvsdk-conformance/1"
DEFAULT_BUNDLE = "sdk/uvsdk/data/default.uvb"  # relative to the repository root


def f32(array: np.ndarray) -> list[float]:
    """A float32 array as JSON numbers (each the exact float32 value, printed round-trip)."""
    return [float(x) for x in np.asarray(array, dtype=np.float32).ravel()]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def f32_b64(array: np.ndarray) -> str:
    return b64(np.asarray(array, dtype="<f4").tobytes())


def bits(array: np.ndarray) -> str:
    return "".join(str(int(b)) for b in np.asarray(array).ravel())


def wav(name: str) -> np.ndarray:
    samples, rate = sf.read(CONFORMANCE / "audio" / name, dtype="float32")
    assert rate == 16000 and samples.ndim == 1
    return samples


def verifier(bundle: str) -> Verifier:
    return Verifier(
        ROOT / bundle if bundle == DEFAULT_BUNDLE else CONFORMANCE / bundle, store=CONFORMANCE
    )


def outcome(action: Callable[[], Any]) -> tuple[Any, UvsdkError | None]:
    try:
        return action(), None
    except UvsdkError as error:
        return None, error


def document(kind: str, about: str, **sections: Any) -> dict[str, Any]:
    return {"format": FORMAT, "kind": kind, "about": about, **sections}


def start_of(samples: np.ndarray, part: np.ndarray) -> int:
    """Where ``part`` starts in ``samples`` (the trimmed clip in the clip)."""
    for start in range(samples.size - part.size + 1):
        if np.array_equal(samples[start : start + part.size], part):
            return start
    raise AssertionError("the trimmed clip is not a slice of the clip")
