"""A deployment's own recording-chain mean (docs/spec.md §6.8): the mean voice of an app's own
people, which a bundle calibrated with ``uvexport calibrate --centre`` takes out of every vector
(:func:`uvexport.calibrate.calibrate_bundle` writes it; ``uvexport centre`` replaces it,
:func:`set_centre`). Its calibration, the table measured on centred scores, is
:func:`uvexport.calibrate.calibrate_vectors`'."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from uvsdk.bundle import Bundle, Manifest
from uvsdk.cohort import CentreSpec
from uvsdk.errors import UvsdkError
from uvsdk.inputs import ModelInput

from .bundle import write_bundle
from .calibrate import MAX_SAMPLES_PER_PERSON, calibration_mean, embed_conditions, gather_people
from .errors import ExportError

MIN_DEPLOYMENT_PEOPLE = 5
"""The fewest people a deployment's mean is taken from: from 5 of a held-out chain's people the
stated FAR held on every held-out chain in three draws, from 2 on 4 to 7 of 10
(docs/model-card.md, benchmarks/far_centring.py --centre-people)."""


def deployment_mean(
    bundle: Bundle,
    people: dict[str, list[Path]],
    root: str | Path,
    *,
    max_samples: int = MAX_SAMPLES_PER_PERSON,
    progress: Callable[[str], None] | None = None,
) -> tuple[bytes, int, int]:
    """The mean ``centre.f32`` of ``people`` (:func:`deployment_people` of ``root``): their
    clips as recorded (condition ``clean``: recorded through the deployment's chain already),
    each clip's unit vector weighing the same; with the people and the clips behind it."""
    embedded = embed_conditions(
        bundle, people, ("clean",), max_samples=max_samples, progress=progress
    )
    used = {name: v for name, v in embedded.vectors["clean"].items() if len(v)}
    if len(used) < MIN_DEPLOYMENT_PEOPLE:
        raise ExportError(
            f"{root}: only {len(used)} people have a usable clip; a recording chain's "
            f"mean needs at least {MIN_DEPLOYMENT_PEOPLE}"
        )
    return calibration_mean({"clean": used}), len(used), sum(len(v) for v in used.values())


def deployment_people(root: str | Path, kind: type[ModelInput]) -> dict[str, list[Path]]:
    """The people of a deployment's folder, refused (before any work) below
    :data:`MIN_DEPLOYMENT_PEOPLE`."""
    people, _, _ = gather_people(root, kind)
    if len(people) < MIN_DEPLOYMENT_PEOPLE:
        raise ExportError(
            f"{root}: {len(people)} people; a recording chain's mean needs at least "
            f"{MIN_DEPLOYMENT_PEOPLE} (a mean of fewer carries their voices, and the FAR "
            "among their strangers is not the one stated: docs/model-card.md)"
        )
    return people


def with_centre(manifest: Manifest, mean: bytes, people: int) -> Manifest:
    """``manifest`` (whose ``score_norm`` has a centre) naming ``mean`` of ``people``."""
    norm = manifest.score_norm
    assert norm is not None and norm.centre is not None
    spec = CentreSpec(people, hashlib.sha256(mean).hexdigest())
    changed = dataclasses.replace(manifest, score_norm=dataclasses.replace(norm, centre=spec))
    return Manifest.from_dict(json.loads(json.dumps(changed.to_dict())))


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
    norm = bundle.manifest.score_norm
    if norm is None or norm.centre is None:
        raise ExportError(
            f"{Path(source).name} takes no recording chain's mean out: its table was measured "
            "on uncentred scores; calibrate it with uvexport calibrate --centre PEOPLE instead"
        )
    found = deployment_people(root, type(bundle.manifest.input))
    mean, people, clips = deployment_mean(
        bundle, found, root, max_samples=max_samples, progress=progress
    )
    manifest = with_centre(bundle.manifest, mean, people)
    if bundle.ort_bytes is None:
        manifest.extra.pop("ort", None)
    written = write_bundle(
        out,
        bundle.model_bytes,
        manifest,
        sign_key=sign_key,
        ort=bundle.ort_bytes,
        cohort=bundle.cohort_bytes,
        centre=mean,
    )
    return written, people, clips
