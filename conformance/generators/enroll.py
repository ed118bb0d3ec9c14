"""``vectors/enroll.json``: outputs → reference, threshold; scores (spec §4, §6, §9)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from uvsdk.bundle import Manifest
from uvsdk.calibration import (
    check_far,
    normalised_leave_one_out,
    rerecord_advised,
    user_threshold,
    warmup_threshold,
)
from uvsdk.codeword import bipolar, encode
from uvsdk.cohort import as_norm
from uvsdk.scoring import codeword_scores, cosine_scores, leave_one_out_scores, prototype
from uvsdk.verifier import MIN_ENROLLMENT_SAMPLES, REQUESTED_MODES, enrollment_mode

from .bundle import TRAINING
from .shared import CONFORMANCE, DEFAULT_BUNDLE, bits, document, f32, outcome, verifier, wav

COHORT = "bundles/voice-embedding-cohort.uvb"
S_NORM = "bundles/voice-embedding-s-norm.uvb"
CENTRE = "bundles/voice-embedding-centre.uvb"
COHORT_CENTRE = "bundles/voice-embedding-cohort-centre.uvb"
MIXED = [
    "speaker0-0.wav",
    "speaker1-0.wav",
    "speaker2-0.wav",
    "speaker0-1.wav",
    "speaker1-1.wav",
    "speaker2-1.wav",
]


def _centred(outputs: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Spec §6.8 written out: each output unit-normalised, the mean out, normalised again."""
    wide = outputs.astype(np.float64)
    units = wide / np.linalg.norm(wide, axis=1, keepdims=True)
    return (units - mean) / np.linalg.norm(units - mean, axis=1, keepdims=True)


def _mode_cases() -> list[dict[str, Any]]:
    """The enrollment mode (spec §9.1 step 5) for each bundle kind, manifest ``training``
    (absent, ``enrollment`` prototype, ``enrollment`` codeword), requested mode and whether the
    user's template holds a codeword → the mode, or the error."""
    cases = []
    trainings = [None, TRAINING, {**TRAINING, "privacy": None, "enrollment": "codeword"}]
    for bundle in ("bundles/voice-codeword.uvb", "bundles/voice-embedding.uvb"):
        base = verifier(bundle).bundle.manifest.to_dict()
        for training in trainings:
            codeword_enrollment = training is not None and training["enrollment"] == "codeword"
            if codeword_enrollment and base["output"]["kind"] != "codeword":
                continue  # refused with the manifest (vectors/bundle.json)
            manifest = Manifest.from_dict({**base, "training": training})
            for requested in (*REQUESTED_MODES, "Codeword"):
                for holds in (True, False):
                    mode, error = outcome(
                        lambda r=requested, m=manifest, h=holds: enrollment_mode(r, m, h)
                    )
                    case: dict[str, Any] = {
                        "bundle": bundle,
                        "training": training,
                        "requested": requested,
                        "holds_codeword": holds,
                    }
                    if error is None:
                        case["mode"] = mode
                    else:
                        case["error"] = error.code
                    cases.append(case)
    return cases


def generate() -> dict[str, Any]:
    known = json.loads((CONFORMANCE / "known-users.json").read_text())["messages"]
    cases = []
    plans = [
        # (bundle, mode, enrollment clips, target tpr, far, verification clips)
        (
            "bundles/voice-embedding.uvb",
            "prototype",
            [f"speaker0-{j}.wav" for j in range(6)],
            0.95,
            0.01,
        ),
        (
            "bundles/voice-embedding.uvb",
            "prototype",
            [f"speaker0-{j}.wav" for j in range(6)],
            0.95,
            None,
        ),
        (
            "bundles/voice-embedding.uvb",
            "prototype",
            [f"speaker1-{j}.wav" for j in range(8)],
            0.75,
            0.05,
        ),
        (
            "bundles/voice-embedding.uvb",
            "prototype",
            [f"speaker2-{j}.wav" for j in range(5)],
            0.95,
            0.03,
        ),
        (
            "bundles/voice-embedding.uvb",
            "prototype",
            [f"speaker2-{j}.wav" for j in range(5)],
            0.95,
            0.0001,
        ),
        # samples of three people: the warm-up threshold is low, the calibrated row floors it
        ("bundles/voice-embedding.uvb", "prototype", MIXED, 0.95, 0.01),
        # a lax row: the calibrated prototype threshold is the row's, below the warm-up one
        (
            "bundles/voice-embedding.uvb",
            "prototype",
            [f"speaker0-{j}.wav" for j in range(6)],
            0.95,
            0.5,
        ),
        # a cohort: AS-norm normalised warm-up and verification scores, as-norm table rows
        (COHORT, "prototype", [f"speaker0-{j}.wav" for j in range(6)], 0.95, 0.01),
        (COHORT, "prototype", [f"speaker0-{j}.wav" for j in range(6)], 0.95, None),
        (COHORT, "prototype", [f"speaker1-{j}.wav" for j in range(8)], 0.75, 0.05),
        (COHORT, "prototype", [f"speaker2-{j}.wav" for j in range(5)], 0.95, 0.5),
        (COHORT, "prototype", [f"speaker2-{j}.wav" for j in range(5)], 0.95, 0.0001),
        (COHORT, "prototype", MIXED, 0.95, 0.01),
        # the same cohort under S-norm: every cohort vector in the statistics
        (S_NORM, "prototype", [f"speaker0-{j}.wav" for j in range(6)], 0.95, 0.01),
        (S_NORM, "prototype", [f"speaker1-{j}.wav" for j in range(8)], 0.75, 0.05),
        (S_NORM, "prototype", MIXED, 0.95, 0.01),
        # spec version 9: a recording chain's mean taken out of every vector first (§6.8),
        # alone (raw cosines of centred vectors) and before a cohort's statistics; no tables
        (CENTRE, "prototype", [f"speaker0-{j}.wav" for j in range(6)], 0.95, None),
        (CENTRE, "prototype", [f"speaker1-{j}.wav" for j in range(8)], 0.75, None),
        (CENTRE, "prototype", MIXED, 0.95, None),
        (COHORT_CENTRE, "prototype", [f"speaker0-{j}.wav" for j in range(6)], 0.95, None),
        (COHORT_CENTRE, "prototype", [f"speaker2-{j}.wav" for j in range(5)], 0.9, None),
        (
            "bundles/voice-codeword.uvb",
            "codeword",
            [f"speaker0-{j}.wav" for j in range(6)],
            0.95,
            0.01,
        ),
        # a lax codeword row: no genuine trials, so the warm-up rule floors it (max)
        (
            "bundles/voice-codeword.uvb",
            "codeword",
            [f"speaker0-{j}.wav" for j in range(6)],
            0.95,
            0.5,
        ),
        (
            "bundles/voice-codeword.uvb",
            "codeword",
            [f"speaker0-{j}.wav" for j in range(6)],
            0.9,
            None,
        ),
    ]
    trials = [f"speaker{s}-{j}.wav" for s, j in ((0, 6), (0, 7), (1, 6), (1, 7), (2, 6), (2, 7))]
    for bundle, mode, clips, tpr, far in plans:
        v = verifier(bundle)
        manifest = v.bundle.manifest
        cohort = v.bundle.cohort if mode == "prototype" else None
        centre = v.bundle.centre if mode == "prototype" else None
        raw = np.stack([v.embed(wav(c)) for c in clips])
        case: dict[str, Any] = {
            "bundle": bundle,
            "mode": mode,
            "target_tpr": tpr,
            "far": far,
            "cohort": manifest.score_scale if mode == "prototype" else None,
            "enrollment_outputs": [f32(o) for o in raw],
        }
        outputs = raw if centre is None else _centred(raw, centre.mean)
        if mode == "codeword":
            codeword = encode(
                np.array([int(b) for b in known["0"]], np.uint8), manifest.code.generator
            )
            case["codeword"] = bits(codeword)
            scores = codeword_scores(bipolar(codeword), outputs)
        else:
            case["prototype"] = f32(prototype(outputs).astype(np.float32))
            if cohort is None:
                scores = leave_one_out_scores(outputs)
            else:
                scores = normalised_leave_one_out(outputs, cohort)
        case["warmup_scores"] = [float(s) for s in scores]
        case["warmup_threshold"] = warmup_threshold(scores, tpr)
        result, error = outcome(
            lambda s=scores, q=tpr, c=manifest.calibration, m=mode, f=far: user_threshold(
                s, q, c, m, f
            )
        )
        if error is not None:
            case["error"] = error.code
            cases.append(case)
            continue
        threshold, row = result
        case["row"] = None if row is None else {"far": row.far, "threshold": row.threshold}
        case["threshold"] = threshold
        case["own_rejected"] = int(np.count_nonzero(scores < threshold))
        case["rerecord_advice"] = rerecord_advised(case["own_rejected"], len(scores), tpr, row)
        reference = (
            bipolar(codeword) if mode == "codeword" else prototype(outputs).astype(np.float32)
        )
        verify = []
        for clip in trials:
            output = v.embed(wav(clip))
            vector = output if centre is None else _centred(output[None], centre.mean)[0]
            if mode == "codeword":
                score = float(codeword_scores(reference, vector[None])[0])
            else:
                score = float(cosine_scores(reference, vector[None])[0])
                if cohort is not None:
                    score = float(
                        as_norm(score, cohort.statistics(reference), cohort.statistics(vector))[0]
                    )
            verify.append({"output": f32(output), "score": score, "accepted": score >= threshold})
        case["verify"] = verify
        cases.append(case)
    too_few = verifier("bundles/voice-embedding.uvb")
    short = [f32(too_few.embed(wav(f"speaker0-{j}.wav"))) for j in range(4)]
    calibrations = {}
    for bundle in (
        "bundles/voice-embedding.uvb",
        "bundles/voice-codeword.uvb",
        COHORT,
        DEFAULT_BUNDLE,
    ):
        calibration = verifier(bundle).bundle.manifest.calibration
        calibrations[bundle] = calibration.sha256
    far_checks = []
    for far in (0.5, 0.01, 1e-5, 0.0, 0.51, -0.1, 1.0):
        _, error = outcome(lambda f=far: check_far(f))
        far_checks.append(
            {"far": far, "valid": error is None, **({"error": error.code} if error else {})}
        )
    return document(
        "enroll",
        "Enrollment from the model's outputs (the enrollment_outputs stand in for embedding the "
        "clips): the reference (prototype mode) or the codeword's scores, the warm-up scores "
        "(normalised by the bundle's score_norm against its cohort in prototype mode when it "
        "has one; a bundle whose score_norm has a centre takes it out of every output first, "
        "spec §6.8; `cohort` is the score scale in prototype mode, spec §3.9, what the template "
        "records, null without a score_norm) and "
        "threshold, the "
        "calibration row and the final threshold (the row's for a table with genuine trials, "
        "max(warm-up, row) for one without), the own samples it rejects and whether the "
        "re-record advice applies; then verification of other outputs (normalised likewise). "
        "Scores within 1e-9, the prototype within 1e-6; `error` is the error code "
        "(spec §4, §6, §9). `modes`: the enrollment mode chosen from the requested mode, the "
        "bundle's kind and manifest `training`, and whether the template holds a codeword "
        "(spec §9.1 step 5).",
        minimum_samples=MIN_ENROLLMENT_SAMPLES,
        cases=cases,
        too_few={
            "bundle": "bundles/voice-embedding.uvb",
            "enrollment_outputs": short,
            "error": "enroll.too-few-samples",
        },
        calibration_sha256=calibrations,
        far_checks=far_checks,
        modes=_mode_cases(),
    )
