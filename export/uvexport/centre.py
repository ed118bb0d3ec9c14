"""``uvexport centre``: a new recording-chain mean (docs/spec.md §6.8) for a bundle calibrated
with ``uvexport calibrate --centre``, everything else kept. The mean itself, and the first one a
bundle gets, are :mod:`uvexport.calibrate`'s (:func:`~uvexport.calibrate.deployment_mean`); a
federation's devices measure it under SecAgg+ and DP (``uvdeploy.centre``), and
:func:`write_centred` writes either into the bundle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from uvsdk.bundle import Bundle
from uvsdk.errors import UvsdkError

from .bundle import write_bundle
from .calibrate import (
    CENTRE_RELEASE,
    MAX_SAMPLES_PER_PERSON,
    deployment_mean,
    deployment_people,
    with_centre,
)
from .errors import ExportError


def set_centre(
    source: str | Path,
    root: str | Path,
    out: str | Path,
    *,
    sign_key: Any | None = None,
    max_samples: int = MAX_SAMPLES_PER_PERSON,
    progress: Callable[[str], None] | None = None,
) -> tuple[Path, int, int]:
    """Write ``out``: the bundle ``source`` (calibrated with ``--centre``) with the mean of the
    people under ``root`` as its recording chain's mean (:func:`deployment_mean`). Everything
    else is kept (calibration, cohort, ``model.ort``); re-signed with ``sign_key``. Returns the
    path, the people and the clips behind the mean."""
    try:
        bundle = Bundle(source)
    except UvsdkError as error:
        raise ExportError(str(error)) from None
    centred_spec(bundle, Path(source).name)
    found = deployment_people(root, type(bundle.manifest.input))
    mean, people, clips = deployment_mean(
        bundle, found, root, max_samples=max_samples, progress=progress
    )
    return write_centred(bundle, mean, people, out, sign_key=sign_key), people, clips


def centred_spec(bundle: Bundle, name: str) -> None:
    """Refuse ``bundle`` (called ``name``) unless its score rule takes a chain's mean out."""
    norm = bundle.manifest.score_norm
    if norm is None or norm.centre is None:
        raise ExportError(
            f"{name} takes no recording chain's mean out: its table was measured "
            "on uncentred scores; calibrate it with uvexport calibrate --centre PEOPLE instead"
        )


def write_centred(
    bundle: Bundle,
    mean: bytes,
    people: int,
    out: str | Path,
    *,
    sign_key: Any | None = None,
    release: dict[str, Any] | None = None,
) -> Path:
    """Write ``out``: ``bundle`` (its score rule centred, :func:`centred_spec`) with ``mean``
    (``centre.f32``) of ``people`` as its recording chain's mean; everything else kept
    (calibration, cohort, ``model.ort``); re-signed with ``sign_key``. ``release``: how a
    federation measured it (the manifest's ``centre_release``, docs/formats.md); a bundle's
    earlier one is dropped with its mean."""
    manifest = with_centre(bundle.manifest, mean, people)
    manifest.extra.pop(CENTRE_RELEASE, None)
    if release is not None:
        manifest.extra[CENTRE_RELEASE] = release
    if bundle.ort_bytes is None:
        manifest.extra.pop("ort", None)
    return write_bundle(
        out,
        bundle.model_bytes,
        manifest,
        sign_key=sign_key,
        ort=bundle.ort_bytes,
        cohort=bundle.cohort_bytes,
        centre=mean,
    )
