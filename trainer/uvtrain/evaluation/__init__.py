"""Verification metrics, the score protocols of the seed papers, plots and ``report.json``.

Everything here works on numpy arrays of scores or model outputs; the trainer runs its models and
hands the outputs in. The scores themselves come from the SDK (:mod:`uvsdk.scoring`), so a user's
score during evaluation is computed by the same code as on the device.

Conventions: a trial is *accepted* iff ``score >= threshold``; genuine trials are the user's own
samples against the user's reference, impostor trials are anyone else's.

The package, one job a module:

* :mod:`.metrics` — ROC, EER, TPR at an FPR, minDCF, a split's metrics, prototype leakage,
  nearest-prototype top-1 accuracy (pure numpy);
* :mod:`.protocols` — model outputs → genuine and impostor scores (codewords, prototypes,
  pairs, FedHide's ten-crop trial-list protocol), and the warm-up threshold's accuracy;
* :mod:`.plots` — the figures (ROC, DET, a metric by round, EER against leakage);
* :mod:`.report` — ``report.json``: :func:`make_report` and :func:`write_report`.

The papers are cited where they are used (:mod:`.metrics`, :mod:`.protocols`). Everything
is importable from here, as it was when this package was one module
(``from uvtrain import evaluation as ev; ev.split_metrics(...)``).
"""

from __future__ import annotations

from ..io import jsonable as jsonable
from .metrics import (
    REPORT_FPRS as REPORT_FPRS,
)
from .metrics import (
    equal_error_rate,
    min_dcf,
    nearest_prototype_accuracy,
    prototype_leakage,
    roc_curve,
    split_metrics,
    tpr_at_fpr,
)
from .plots import plot_det, plot_leakage_vs_eer, plot_metric_over_rounds, plot_roc
from .protocols import (
    class_row_protocol,
    codeword_protocol,
    crop_starts,
    evenly_spaced_crops,
    pair_protocol,
    prototype_protocol,
    trial_list_protocol,
    trial_scores,
    warmup_evaluation,
)
from .report import SPLITS, make_report, write_report
from .scoring import quick_metrics, score_run, score_splits, score_trial_list

__all__ = [
    "quick_metrics",
    "score_run",
    "score_splits",
    "SPLITS",
    "class_row_protocol",
    "codeword_protocol",
    "crop_starts",
    "evenly_spaced_crops",
    "equal_error_rate",
    "make_report",
    "min_dcf",
    "nearest_prototype_accuracy",
    "pair_protocol",
    "plot_det",
    "plot_metric_over_rounds",
    "plot_leakage_vs_eer",
    "plot_roc",
    "prototype_leakage",
    "prototype_protocol",
    "roc_curve",
    "score_trial_list",
    "split_metrics",
    "tpr_at_fpr",
    "trial_list_protocol",
    "trial_scores",
    "warmup_evaluation",
    "write_report",
]
