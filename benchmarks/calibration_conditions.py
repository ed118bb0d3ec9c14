"""Which recording condition decides a calibration? Each condition's own threshold, side by side.

``uvexport calibrate`` states, for each FAR, the threshold that accepts at most that fraction of
impostors in every condition: the worst condition decides. This prints, for one FAR, each
condition's own threshold (the table's rule, :func:`uvsdk.calibration.far_threshold`, on that
condition's impostor trials alone), the FRR there, and the FRR and observed FAR at the stated
threshold, so that a reader sees which condition decides and what it costs the others. The
trials are the calibration's own (:func:`uvsdk.calibration.enrollment_trials`, AS-norm against
the cohort :func:`uvexport.calibrate.build_cohort` draws): this describes the calibration, it
does not test it (``far_generalisation.py`` does, on sources left out).

    python benchmarks/calibration_conditions.py --speakers real-speech/speakers \\
        --bundle MODEL.uvb --cache emb.npz [--far 0.01]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from uvexport.calibrate import (
    DEFAULT_COHORT_SIZE,
    DEFAULT_TOP_K,
    build_cohort,
    embed_conditions,
    people_folders,
    print_progress,
)
from uvsdk.bundle import Bundle
from uvsdk.calibration import DEFAULT_ENROLL_SAMPLES, enrollment_trials, far_threshold
from uvsdk.cohort import Cohort


def condition_trials(
    vectors: dict[str, dict[str, np.ndarray]],
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{condition: (genuine, impostor)}`` AS-norm scores, as the calibration scores them."""
    cohort_vectors, cohort_people = build_cohort(vectors, DEFAULT_COHORT_SIZE)
    cohort = Cohort(cohort_vectors, max(2, min(DEFAULT_TOP_K, len(cohort_vectors) // 2)))
    trials = {}
    for condition, by_person in vectors.items():
        _, genuine, impostor = enrollment_trials(
            by_person, DEFAULT_ENROLL_SAMPLES, cohort=cohort, cohort_people=cohort_people
        )
        trials[condition] = (
            np.concatenate(list(genuine.values())),
            np.concatenate(list(impostor.values())),
        )
    return trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speakers", type=Path, required=True, help="one folder per speaker")
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--cache", type=Path, help="uvexport calibrate's --cache")
    parser.add_argument("--far", type=float, default=0.01)
    args = parser.parse_args()
    embedded = embed_conditions(
        Bundle(args.bundle),
        people_folders(args.speakers),
        progress=print_progress,
        cache=args.cache,
    )
    trials = condition_trials(embedded.vectors)
    own = {
        condition: far_threshold(impostor, args.far) for condition, (_, impostor) in trials.items()
    }
    stated = max(own.values())
    print(f"FAR {args.far}: stated threshold {stated:.3f} (the worst condition's)")
    print("condition        own threshold  FRR at own  FRR at stated  FAR at stated")
    for condition in sorted(own, key=own.__getitem__):
        genuine, impostor = trials[condition]
        print(
            f"{condition:15s}  {own[condition]:13.3f}  {np.mean(genuine < own[condition]):10.3f}"
            f"  {np.mean(genuine < stated):13.3f}  {np.mean(impostor >= stated):13.4f}"
        )


if __name__ == "__main__":
    main()
