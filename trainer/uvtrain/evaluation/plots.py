"""The figures of a run and of the benchmarks (matplotlib without pyplot): ROC, DET, a metric
by round, EER against prototype leakage. Each is a PNG at 120 dpi written atomically by
:func:`uvtrain.io.save_figure`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..io import save_figure
from .metrics import equal_error_rate, roc_curve


def new_figure(title: str) -> tuple[Any, Any]:
    """A new figure (no pyplot: no global state, no GUI backend) and its axes."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.0, 4.5), layout="constrained")
    axes = figure.add_subplot()
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    return figure, axes


def _label(name: str, genuine: ArrayLike, impostor: ArrayLike) -> str:
    return f"{name} (EER {100 * equal_error_rate(genuine, impostor):.2f}%)"


def plot_roc(
    curves: Mapping[str, tuple[ArrayLike, ArrayLike]],
    path: str | os.PathLike[str],
    title: str = "ROC",
) -> Path:
    """Plot ROC curves: FPR on a log axis from 1e-4 to 1, TPR linear; PNG at 120 dpi.

    Parameters
    ----------
    curves
        Legend name → ``(genuine, impostor)`` scores; the legend shows each curve's EER. A
        split with no genuine or no impostor trial has no curve and is left out.
    path
        Where to write the PNG (written atomically).
    title
        The plot's title.

    Returns
    -------
    Path
        ``path``.
    """
    figure, axes = new_figure(title)
    for name, (genuine, impostor) in curves.items():
        if np.size(genuine) == 0 or np.size(impostor) == 0:
            continue  # no curve (e.g. one unknown identity: no impostor pair); its EER is null
        fpr, tpr, _ = roc_curve(genuine, impostor)
        axes.step(fpr, tpr, where="post", label=_label(name, genuine, impostor))
    axes.set_xscale("log")
    axes.set_xlim(1e-4, 1.0)
    axes.set_ylim(0.0, 1.01)
    axes.set_xlabel("false positive rate")
    axes.set_ylabel("true positive rate")
    if curves:
        axes.legend(loc="lower right")
    return save_figure(figure, path)


def _probit(p: np.ndarray) -> np.ndarray:
    """The standard normal deviate of each probability (clipped just off the plotted range)."""
    from statistics import NormalDist

    inverse = NormalDist().inv_cdf
    clipped = np.clip(p, 1e-6, 1.0 - 1e-6)
    return np.array([inverse(float(value)) for value in clipped])


def plot_det(
    curves: Mapping[str, tuple[ArrayLike, ArrayLike]],
    path: str | os.PathLike[str],
    title: str = "DET",
) -> Path:
    """Plot DET curves: FNR against FPR, both on normal-deviate axes; PNG at 120 dpi.

    Parameters
    ----------
    curves
        Legend name → ``(genuine, impostor)`` scores; the legend shows each curve's EER. A
        split with no genuine or no impostor trial has no curve and is left out.
    path
        Where to write the PNG (written atomically).
    title
        The plot's title.

    Returns
    -------
    Path
        ``path``.
    """
    figure, axes = new_figure(title)
    for name, (genuine, impostor) in curves.items():
        if np.size(genuine) == 0 or np.size(impostor) == 0:
            continue  # no curve (e.g. one unknown identity: no impostor pair); its EER is null
        fpr, tpr, _ = roc_curve(genuine, impostor)
        axes.plot(_probit(fpr), _probit(1.0 - tpr), label=_label(name, genuine, impostor))
    ticks = np.array([1e-4, 1e-3, 1e-2, 0.05, 0.2, 0.5, 0.8, 0.95, 0.99])
    labels = [f"{100 * t:g}" for t in ticks]
    limits = _probit(np.array([5e-5, 0.995]))
    for set_ticks, set_limits in (
        (axes.set_xticks, axes.set_xlim),
        (axes.set_yticks, axes.set_ylim),
    ):
        set_ticks(_probit(ticks), labels)
        set_limits(*limits)
    axes.set_xlabel("false positive rate (%)")
    axes.set_ylabel("false negative rate (%)")
    if curves:
        axes.legend(loc="upper right")
    return save_figure(figure, path)


def plot_metric_over_rounds(
    rounds: Sequence[int],
    values: Mapping[str, Sequence[float | None]],
    path: str | os.PathLike[str],
    ylabel: str,
    title: str | None = None,
) -> Path:
    """Plot metrics against the training round (e.g. EER per split); PNG at 120 dpi.

    Parameters
    ----------
    rounds
        The rounds at which the metrics were logged.
    values
        Series name → one value per round; ``None`` or NaN leaves a gap.
    path
        Where to write the PNG (written atomically).
    ylabel
        The y axis label.
    title
        The plot's title (default: ``ylabel`` by round).

    Returns
    -------
    Path
        ``path``.
    """
    figure, axes = new_figure(title or f"{ylabel} by round")
    x = np.asarray(rounds, dtype=np.float64)
    for name, series in values.items():
        y = np.array([np.nan if v is None else float(v) for v in series])
        if y.shape != x.shape:
            raise ValueError(f"series {name!r} has {y.size} values for {x.size} rounds")
        axes.plot(x, y, marker="." if x.size < 50 else None, label=name)
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("round")
    axes.set_ylabel(ylabel)
    if values:
        axes.legend()
    return save_figure(figure, path)


def plot_leakage_vs_eer(
    points: Mapping[str, tuple[tuple[float, float], tuple[float, float]]],
    path: str | os.PathLike[str],
    title: str = "EER against prototype leakage",
    chance: float | None = None,
    reference: float | None = None,
) -> Path:
    """Plot EER against prototype leakage ``P_leak``, one point per method (FedHide Fig. 4).

    Parameters
    ----------
    points
        Name → ``((P_leak mean, std), (EER mean, std))``; the std become error bars. Names that
        start alike (``FedGN σ=…``) share a colour and are joined in order.
    path
        Where to write the PNG (written atomically).
    title
        The plot's title.
    chance
        ``1/C``: the leakage of a proxy that says nothing, drawn as a vertical line.
    reference
        An EER to draw as a horizontal line (e.g. the untrained network's).

    Returns
    -------
    Path
        ``path``.
    """
    figure, axes = new_figure(title)
    families: dict[str, list[tuple[str, tuple[float, float], tuple[float, float]]]] = {}
    for name, (leak, eer) in points.items():
        families.setdefault(name.split(" ")[0], []).append((name, leak, eer))
    for family, members in families.items():
        x = [leak[0] for _, leak, _ in members]
        y = [eer[0] for _, _, eer in members]
        axes.errorbar(
            x,
            y,
            xerr=[leak[1] for _, leak, _ in members],
            yerr=[eer[1] for _, _, eer in members],
            marker="o",
            capsize=3,
            label=family,
            linestyle="-" if len(members) > 1 else "none",
        )
        for name, leak, eer in members:
            tag = name[len(family) :].strip()
            if tag:
                axes.annotate(tag, (leak[0], eer[0]), fontsize=6, alpha=0.7)
    if chance is not None:
        axes.axvline(chance, color="grey", linestyle=":", label=f"1/C = {chance:.3f}")
    if reference is not None:
        axes.axhline(reference, color="black", linestyle="--", label=f"untrained: {reference:.3f}")
    axes.set_xlabel("prototype leakage P_leak")
    axes.set_ylabel("EER")
    axes.set_xlim(-0.02, 1.02)
    if points:
        axes.legend(fontsize=8)
    return save_figure(figure, path)


def plot_weights(
    metrics: str | os.PathLike[str], path: str | os.PathLike[str], parties: Sequence[str], fv: bool
) -> None:
    """The aggregation weighting ``w`` of each of ``parties`` over the rounds (FedFace, the
    paper's Fig. 6), from a run's ``metrics.jsonl`` (each round's ``weights``); ``fv``: moved by
    Federated Validation (said in the title). Nothing is drawn before the first round."""
    import json

    text = Path(metrics).read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    rows = [line for line in lines if "weights" in line]
    if not rows:
        return
    series = {party: [row["weights"][index] for row in rows] for index, party in enumerate(parties)}
    title = "aggregation weights w by round" + (" (FV)" if fv else "")
    plot_metric_over_rounds([row["round"] for row in rows], series, path, "w", title)
