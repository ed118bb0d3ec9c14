"""What a bundle's manifest says about where its model came from: the run's method, data,
rounds, backbone and metrics (``provenance``), the licences of the data and of the starting
weights, and the input and code of the bundle contract."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from uvsdk.bundle import Code
from uvtrain.io import REPORT, read_json


def _pretrained_provenance(pretrained: str) -> dict[str, Any]:
    """Where the run's starting weights came from: a known entry of :mod:`uvtrain.pretrained`
    (by name or by hash), else the file's name and SHA-256."""
    import hashlib

    from uvtrain.pretrained import WEIGHTS, identify

    entry = WEIGHTS.get(pretrained) or identify(pretrained)
    if entry is None:
        digest = hashlib.sha256(Path(pretrained).read_bytes()).hexdigest()
        return {"file": Path(pretrained).name, "sha256": digest, "licence": "unknown"}
    fields = ("name", "requirement", "member", "sha256", "licence", "description", "training_data")
    return {key: entry.to_dict()[key] for key in fields}


def run_extra(
    run_dir: Path,
    config: Any,
    dataset: Any,
    model: Any,
    extra: dict[str, Any] | None,
    method: str | None = None,
) -> dict[str, Any]:
    """The manifest's extra keys for a run folder: ``provenance`` (method, dataset, rounds,
    backbone, the report's EER per split — by enrollment too for a codeword model —, the
    pretrained weights), ``data_licence``, then ``extra`` (the caller's), ``training``
    (:func:`run_training`; ``method``: the manifest's, default the run's), then
    ``weights_licence`` when the run started from pretrained weights.

    A run folder without ``report.json`` (stopped before its evaluation) still gets
    ``training``: its privacy is its plan's (the ε of all its rounds, at least what it spent), and
    with nothing measured it enrolls by prototype."""
    report = run_report(run_dir)
    provenance = {
        "method": config.method.name,
        "dataset": dataset.name,
        "rounds": report.get("rounds"),
        "backbone": type(model.backbone).__name__,
        "metrics": _eers(report),
    }
    if report.get("enrollment"):
        provenance["metrics_by_enrollment"] = _eers(report["enrollment"])
    extra = {"provenance": provenance, "data_licence": dataset.licence, **(extra or {})}
    if not report:
        from uvtrain.run import privacy_plan

        plan = privacy_plan(config, config.data.clients)
        report = {"privacy": None if plan is None else plan.report()}
    extra["training"] = run_training(report, method or config.method.name, model.output_kind)
    if config.model.pretrained:
        provenance["pretrained"] = _pretrained_provenance(config.model.pretrained)
        extra["weights_licence"] = provenance["pretrained"]["licence"]
    return extra


def run_report(run_dir: Path) -> dict[str, Any]:
    """The run folder's ``report.json``; empty for a run stopped before its evaluation."""
    report_path = Path(run_dir) / REPORT
    return read_json(report_path) if report_path.is_file() else {}


def _eers(section: dict[str, Any]) -> dict[str, Any]:
    """A report section's EER per split."""
    return {name: split.get("eer") for name, split in section.get("splits", {}).items()}


def run_training(report: dict[str, Any], method: str, output_kind: str) -> dict[str, Any]:
    """The manifest's ``training`` (docs/spec.md §3.10) from a run's ``report.json``.

    Parameters
    ----------
    report:
        The run's report; its ``privacy`` is ``None`` without DP. A FedUV report's ``splits``
        hold the codeword protocol and its ``enrollment.splits`` the SDK's prototype mode;
        a Flower deployment's report has neither (its server holds no labelled data).
    method:
        The training method's name (``feduv``, ``fedhide``, ...).
    output_kind:
        ``codeword`` or ``embedding``.

    Returns
    -------
    dict
        ``method``, ``privacy`` (mechanism, ε against the released model, δ, whether the noise
        is a simulated deployment's, the membership EER floor, ε against the server; ``None``
        without DP) and ``enrollment`` (:func:`default_enrollment`).
    """
    spent = report.get("privacy")
    privacy = None
    if spent is not None:
        privacy = {
            "mechanism": spent["mechanism"],
            "epsilon": spent["epsilon"],
            "delta": spent["delta"],
            "simulated_deployment": spent.get("simulated_deployment") is not None,
            "membership_eer_floor": _membership_eer_floor(spent),
            "epsilon_server": _epsilon_server(spent),
        }
    return {
        "method": method,
        "privacy": privacy,
        "enrollment": default_enrollment(report, output_kind),
    }


#: The split whose EER decides a codeword bundle's default mode: the known users' held-out
#: samples, the people codeword mode is for (users who trained with their codeword).
DECIDING_SPLIT = "test_known"


def default_enrollment(report: dict[str, Any], output_kind: str) -> str:
    """The mode the SDK enrolls in by default: ``prototype``, unless the model is a codeword
    model trained without DP whose codeword protocol verified better than enrollment on the
    run's own evaluation (``splits`` against ``enrollment.splits``, :data:`DECIDING_SPLIT`'s
    EER, strictly lower); then ``codeword``.

    Under DP codeword mode is a membership test its privacy floors (``membership_eer_floor``);
    without DP it has verified 3–8× worse than enrollment in every run the project has measured
    (issue 45), so it must be measured better to be chosen. Nothing measured (a Flower
    deployment, a run stopped before its evaluation, a missing or NaN EER): ``prototype``.
    """
    if output_kind != "codeword" or report.get("privacy") is not None:
        return "prototype"
    codeword = _eer(report, DECIDING_SPLIT)
    enrolled = _eer(report.get("enrollment") or {}, DECIDING_SPLIT)
    if codeword is None or enrolled is None:
        return "prototype"
    return "codeword" if codeword < enrolled else "prototype"


def _eer(section: dict[str, Any], split: str) -> float | None:
    """A section's EER on ``split``; ``None`` when absent or not a finite number."""
    value = (section.get("splits") or {}).get(split, {}).get("eer")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _membership_eer_floor(privacy: dict[str, Any]) -> float:
    """The report's floor; computed from its noise, sampling rate and rounds for a report
    written before the trainer stated it."""
    floor = privacy.get("membership_eer_floor")
    if floor is None:
        from uvtrain.accounting import membership_eer_floor

        floor = membership_eer_floor(
            privacy["noise_multiplier"], privacy["sampling_rate"], privacy["rounds"]
        )
    return float(floor)


def _epsilon_server(privacy: dict[str, Any]) -> float:
    """The report's ε against the server; for a report written before the trainer stated it,
    computed from its noise for a user in every round (the most Poisson sampling allows)."""
    value = privacy.get("epsilon_server")
    if value is None:
        from uvtrain.accounting import epsilon_server

        value = epsilon_server(privacy["noise_multiplier"], privacy["rounds"], privacy["delta"])
    return float(value)


def bundle_code(model: Any, code_length: int) -> Code | None:
    """The manifest's ``code``: the BCH code of a codeword model, ``None`` for an embedding one."""
    code = None
    if model.output_kind == "codeword":
        from uvtrain.codes import bch_code

        code = bch_code(code_length)
    return code
