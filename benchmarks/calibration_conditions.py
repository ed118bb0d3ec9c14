"""Which recording condition decides a calibration? Each condition's own threshold, side by side.

``uvexport calibrate`` states, for each FAR, the threshold that accepts at most that fraction of
impostors in every condition: the worst condition decides. This calibrates the speakers as it
does (:func:`uvexport.calibrate.calibrate_vectors`), rebuilds the calibration's trials with
``far_rules.py``'s :func:`fold_trials` (which checks that its cohort is the one calibrated) and
prints, for one FAR, the table's threshold, then each condition's own threshold
(:func:`uvsdk.measurement.far_threshold` on that condition's impostor trials alone), the FRR there,
and the FRR and observed FAR at the table's threshold: which condition decides and what it costs
the others. These are the calibration's own trials: this describes the calibration, it does not
test it (``far_generalisation.py`` does, on sources left out).

    python benchmarks/calibration_conditions.py --speakers real-speech/speakers \\
        --bundle MODEL.uvb --cache emb.npz [--far 0.01] [--conditions clean,long]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from far_rules import fold_trials

from uvexport.calibrate import calibrate_vectors, embed_conditions, people_folders, print_progress
from uvsdk.bundle import Bundle
from uvsdk.calibration import DEFAULT_ENROLL_SAMPLES
from uvsdk.measurement import far_threshold


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speakers", type=Path, required=True, help="one folder per speaker")
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--cache", type=Path, help="uvexport calibrate's --cache")
    parser.add_argument("--far", type=float, default=0.01)
    parser.add_argument("--conditions", help="comma-separated (default: all, as calibrate)")
    args = parser.parse_args()
    embedded = embed_conditions(
        Bundle(args.bundle),
        people_folders(args.speakers),
        *([args.conditions.split(",")] if args.conditions else []),
        progress=print_progress,
        cache=args.cache,
    )
    calibrated = calibrate_vectors(embedded.vectors, data=str(args.speakers))
    trials, _ = fold_trials(
        embedded.vectors, embedded.seconds, {}, {}, calibrated, DEFAULT_ENROLL_SAMPLES
    )
    stated = calibrated.calibration.tables["prototype"].row_for(args.far).threshold
    own = {condition: far_threshold(t.impostor, args.far) for condition, t in trials.items()}
    print(
        f"FAR {args.far}: the table's threshold {stated:.3f}; "
        f"the worst condition's own {max(own.values()):.3f}"
    )
    print("condition        own threshold  FRR at own  FRR at stated  FAR at stated")
    for condition in sorted(own, key=own.__getitem__):
        genuine, impostor = trials[condition].genuine, trials[condition].impostor
        print(
            f"{condition:15s}  {own[condition]:13.3f}  {np.mean(genuine < own[condition]):10.3f}"
            f"  {np.mean(genuine < stated):13.3f}  {np.mean(impostor >= stated):13.4f}"
        )


if __name__ == "__main__":
    main()
