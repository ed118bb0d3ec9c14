"""``report.json``: its shape (:func:`make_report`; docs/formats.md, "``report.json``") and writing it
(:func:`write_report`: strict JSON, atomic)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..io import write_json
from .metrics import REPORT_FPRS, _fpr_key

#: The splits of ``report.json`` (docs/formats.md, "``report.json``"), in order.
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


def _report_splits(
    splits: Mapping[str, Mapping[str, Any]],
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, int]]]:
    """``splits`` in the report's shape (every split of :data:`SPLITS`; one left out: ``null``
    metrics) and their trial counts."""
    unknown = set(splits) - set(SPLITS)
    if unknown:
        raise ValueError(f"unknown split(s) {sorted(unknown)}; the splits are {list(SPLITS)}")
    report_splits: dict[str, dict[str, Any]] = {}
    trials: dict[str, dict[str, int]] = {}
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
    return report_splits, trials


def _warmup(warmup: Mapping[str, Any]) -> dict[str, float]:
    return {
        "target_tpr": _number(warmup.get("target_tpr")),
        "tpr": _number(warmup.get("tpr")),
        "fpr": _number(warmup.get("fpr")),
    }


def _section(protocol: str, scored: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A protocol reported beside ``splits`` (``class_row``, ``enrollment``): its splits,
    warm-up and trial counts in the shape of the top level's."""
    if scored is None:
        return None
    section_splits, section_trials = _report_splits(scored.get("splits", {}))
    section_warmup = scored.get("warmup", {})
    if "users" in section_warmup:
        section_trials["warmup_users"] = int(section_warmup["users"])
    return {
        "protocol": protocol,
        "splits": section_splits,
        "warmup": _warmup(section_warmup),
        "trials": section_trials,
    }


def make_report(
    method: str,
    dataset: str,
    rounds: int,
    splits: Mapping[str, Mapping[str, Any]],
    warmup: Mapping[str, Any],
    leakage: float | None,
    throughput: Mapping[str, Any],
    class_row: Mapping[str, Any] | None = None,
    enrollment: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Assemble ``report.json`` in the shape docs/formats.md states ("``report.json``").

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
    class_row
        The FedUV paper's protocol for its baselines (softmax, FedAwS): each user's samples
        against their learnt class row, ``{"splits": {split: split_metrics}, "warmup":
        warmup_evaluation}`` (:func:`uvtrain.evaluation.scoring.class_row_splits`), reported as
        ``report["class_row"]`` in the shape of ``splits`` and ``warmup``, beside — never mixed
        with — ``splits``, which hold the SDK's enrollment protocol. ``None`` (``null``) for
        methods that do not verify by class row.
    enrollment
        A codeword model (FedUV) verified by enrollment, the SDK's prototype mode
        (:func:`uvtrain.evaluation.scoring.enrollment_splits`), in the same shape: reported as
        ``report["enrollment"]`` (``"protocol": "enrollment"``) beside ``splits``, which hold the
        codeword protocol; ``None`` (``null``) for embedding models, whose ``splits`` are it.
    **extra
        More top-level keys (provenance, configuration, ...).

    Returns
    -------
    dict
        ``{"method", "dataset", "rounds", "splits": {split: {"eer", "tpr_at_fpr": {"0.01", "0.1",
        ...}, "min_dcf"}}, "warmup": {"target_tpr", "tpr", "fpr"}, "leakage", "throughput":
        {"client_updates_per_s", "device"}, "class_row": null or {"protocol": "class-row",
        "splits": {...}, "warmup": {...}, "trials": {split: {"genuine", "impostor"}, ...}},
        "trials": {...}, **extra}``. The nested objects hold
        exactly these keys (``tpr_at_fpr`` also any further FPR points the split carries); the trial
        counts of each split and the number of warm-up users go to the top-level ``trials``.
        Metrics may be NaN; :func:`write_report` writes them as ``null``.
    """
    if "trials" in extra:
        raise ValueError("'trials' is a key make_report fills itself")
    report_splits, trials = _report_splits(splits)
    if "users" in warmup:
        trials["warmup_users"] = int(warmup["users"])
    return {
        "method": str(method),
        "dataset": str(dataset),
        "rounds": int(rounds),
        "splits": report_splits,
        "warmup": _warmup(warmup),
        "leakage": None if leakage is None else float(leakage),
        "throughput": {
            "client_updates_per_s": _number(throughput.get("client_updates_per_s")),
            "device": str(throughput.get("device", "cpu")),
        },
        "class_row": _section("class-row", class_row),
        "enrollment": _section("enrollment", enrollment),
        "trials": trials,
        **extra,
    }
