"""``report.json``: its shape (:func:`make_report`, DESIGN.md "The trainer") and writing it
(:func:`write_report`: strict JSON, atomic)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..io import write_json
from .metrics import REPORT_FPRS, _fpr_key

#: The splits of ``report.json`` (DESIGN.md, "The trainer"), in order.
SPLITS: tuple[str, ...] = ("train", "test_known", "unknown")


def write_report(path: str | os.PathLike[str], report: Mapping[str, Any]) -> Path:
    """Write ``report.json`` atomically: a temporary file in the same folder, fsync, ``os.replace``.

    A reader sees the old report or the new one, never half of one; on any failure the old file is
    left as it was and no temporary file stays behind.

    Parameters
    ----------
    path
        The report's path.
    report
        The report (e.g. from :func:`make_report`). NaN and ±inf become ``null``; numpy scalars and
        arrays become plain JSON numbers and lists.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_json(path, report)


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


def make_report(
    method: str,
    dataset: str,
    rounds: int,
    splits: Mapping[str, Mapping[str, Any]],
    warmup: Mapping[str, Any],
    leakage: float | None,
    throughput: Mapping[str, Any],
    **extra: Any,
) -> dict[str, Any]:
    """Assemble ``report.json`` in the shape DESIGN.md fixes ("The trainer").

    Parameters
    ----------
    method, dataset, rounds
        What was trained, on what, for how many rounds.
    splits
        ``train``, ``test_known``, ``unknown`` → :func:`split_metrics` results. A split left out
        (e.g. no unknown users) is reported with ``null`` metrics; any other name is an error.
    warmup
        :func:`warmup_evaluation`'s result.
    leakage
        :func:`prototype_leakage` for prototype-sharing methods, else ``None``.
    throughput
        ``{"client_updates_per_s": float, "device": str}``.
    **extra
        More top-level keys (provenance, configuration, ...).

    Returns
    -------
    dict
        ``{"method", "dataset", "rounds", "splits": {split: {"eer", "tpr_at_fpr": {"0.01", "0.1",
        ...}, "min_dcf"}}, "warmup": {"target_tpr", "tpr", "fpr"}, "leakage", "throughput":
        {"client_updates_per_s", "device"}, "trials": {...}, **extra}``. The nested objects hold
        exactly these keys (``tpr_at_fpr`` also any further FPR points the split carries); the trial
        counts of each split and the number of warm-up users go to the top-level ``trials``.
        Metrics may be NaN; :func:`write_report` writes them as ``null``.
    """
    unknown = set(splits) - set(SPLITS)
    if unknown:
        raise ValueError(f"unknown split(s) {sorted(unknown)}; the splits are {list(SPLITS)}")
    if "trials" in extra:
        raise ValueError("'trials' is a key make_report fills itself")
    report_splits: dict[str, dict[str, Any]] = {}
    trials: dict[str, Any] = {}
    for name in SPLITS:
        split = splits.get(name, {})
        points = dict(split.get("tpr_at_fpr", {}))
        tpr = {_fpr_key(f): _number(points.pop(_fpr_key(f), None)) for f in REPORT_FPRS}
        tpr.update({key: _number(value) for key, value in points.items()})
        report_splits[name] = {
            "eer": _number(split.get("eer")),
            "tpr_at_fpr": tpr,
            "min_dcf": _number(split.get("min_dcf")),
        }
        trials[name] = {
            "genuine": int(split.get("genuine", 0)),
            "impostor": int(split.get("impostor", 0)),
        }
    if "users" in warmup:
        trials["warmup_users"] = int(warmup["users"])
    return {
        "method": str(method),
        "dataset": str(dataset),
        "rounds": int(rounds),
        "splits": report_splits,
        "warmup": {
            "target_tpr": _number(warmup.get("target_tpr")),
            "tpr": _number(warmup.get("tpr")),
            "fpr": _number(warmup.get("fpr")),
        },
        "leakage": None if leakage is None else float(leakage),
        "throughput": {
            "client_updates_per_s": _number(throughput.get("client_updates_per_s")),
            "device": str(throughput.get("device", "cpu")),
        },
        "trials": trials,
        **extra,
    }
