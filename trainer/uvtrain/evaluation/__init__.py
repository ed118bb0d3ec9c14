"""Verification metrics, the score protocols of the seed papers, plots and ``report.json``.

Everything here works on numpy arrays of scores or model outputs; the trainer runs its models and
hands the outputs in. The scores themselves come from the SDK (:mod:`uvsdk.scoring`), so a user's
score during evaluation is computed by the same code as on the device.

Conventions: a trial is *accepted* iff ``score >= threshold``; genuine trials are the user's own
samples against the user's reference, impostor trials are anyone else's.

References
----------
.. [FedUV] H. Hosseini, H. Park, S. Yun, C. Louizos, J. Soriaga, M. Welling. "Federated Learning
   of User Verification Models Without Sharing Embeddings." ICML 2021. Scores ``e = v·σ(W g(x))/c``
   (eq. 8), the warm-up threshold (Sec. 3.3), and the unknown-user evaluation (Fig. 5c).
.. [FedHide] "FedHide: Federated Learning by Hiding in the Neighbors." Proxy prototypes and the
   prototype leakage ``P_leak``; verification pairs among users unseen in training.
.. [NIST] NIST Speaker Recognition Evaluation plans: the normalised detection cost
   ``C_det / min(C_miss·P_target, C_fa·(1 − P_target))``, as in WeSpeaker's ``score_metrics.py``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from uvsdk.scoring import codeword_scores, cosine_scores, rescale, warmup_threshold

__all__ = [
    "SPLITS",
    "codeword_protocol",
    "equal_error_rate",
    "make_report",
    "min_dcf",
    "pair_protocol",
    "plot_det",
    "plot_metric_over_rounds",
    "plot_leakage_vs_eer",
    "plot_roc",
    "prototype_leakage",
    "prototype_protocol",
    "roc_curve",
    "split_metrics",
    "tpr_at_fpr",
    "warmup_evaluation",
    "write_report",
]

#: The splits of ``report.json`` (DESIGN.md, "The trainer"), in order.
SPLITS: tuple[str, ...] = ("train", "test_known", "unknown")
#: The FPR operating points every split reports.
REPORT_FPRS: tuple[float, ...] = (0.01, 0.1)

_DPI = 120


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


def _scores(values: ArrayLike, name: str) -> np.ndarray:
    """A flat float64 copy of a score set, refusing empty sets and NaN."""
    array = np.asarray(values, dtype=np.float64).ravel()
    if array.size == 0:
        raise ValueError(f"the {name} score set is empty")
    if np.isnan(array).any():
        raise ValueError(f"the {name} scores contain NaN")
    return array


def _counts(genuine: ArrayLike, impostor: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Accepted genuine and impostor counts at every distinct threshold, highest first.

    Returns ``(true_accepts, false_accepts, thresholds)``; the first operating point is the
    threshold ``+inf`` (nothing accepted) and the last the smallest score (everything accepted).
    """
    genuine = _scores(genuine, "genuine")
    impostor = _scores(impostor, "impostor")
    scores = np.concatenate([genuine, impostor])
    is_genuine = np.concatenate([np.ones(genuine.size, bool), np.zeros(impostor.size, bool)])
    order = np.argsort(-scores, kind="stable")
    scores, is_genuine = scores[order], is_genuine[order]
    true_accepts = np.cumsum(is_genuine)
    false_accepts = np.arange(1, scores.size + 1) - true_accepts
    # The last position of each run of equal scores is where that threshold's counts are complete.
    last = np.flatnonzero(np.append(scores[1:] != scores[:-1], True))
    return (
        np.concatenate([[0], true_accepts[last]]),
        np.concatenate([[0], false_accepts[last]]),
        np.concatenate([[np.inf], scores[last]]),
    )


def roc_curve(genuine: ArrayLike, impostor: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact ROC curve: one operating point per distinct score.

    A trial is accepted iff ``score >= threshold``.

    Parameters
    ----------
    genuine, impostor
        Scores of genuine and impostor trials (any shape; flattened). Neither may be empty or
        contain NaN.

    Returns
    -------
    fpr, tpr, thresholds
        Arrays of equal length. ``thresholds[0]`` is ``+inf`` with ``(fpr, tpr) = (0, 0)``; the
        following thresholds are the distinct scores in decreasing order, the last (the smallest
        score) giving ``(1, 1)``. FPR and TPR are non-decreasing.
    """
    true_accepts, false_accepts, thresholds = _counts(genuine, impostor)
    return false_accepts / false_accepts[-1], true_accepts / true_accepts[-1], thresholds


def equal_error_rate(genuine: ArrayLike, impostor: ArrayLike) -> float:
    """The equal error rate: where the false-positive and false-negative rates cross.

    Along the ROC operating points (see :func:`roc_curve`) ``FNR − FPR`` falls from 1 to −1. With
    ``a`` the last point where it is ``>= 0`` and ``b`` the next, the EER is the point of the segment
    ``a → b`` (in (FPR, FNR) coordinates) where ``FPR = FNR``; when ``FNR = FPR`` exactly at ``a``
    that common value is returned. This is the linear interpolation of WeSpeaker's
    ``compute_eer``. It is 0 when every genuine score is above every impostor score and 0.5 in
    expectation when both come from one distribution.

    Parameters
    ----------
    genuine, impostor
        Scores of genuine and impostor trials.

    Returns
    -------
    float
        The EER in [0, 1].
    """
    fpr, tpr, _ = roc_curve(genuine, impostor)
    fnr = 1.0 - tpr
    gap = fnr - fpr
    a = int(np.flatnonzero(gap >= 0)[-1])
    if gap[a] == 0:
        return float(fpr[a])
    b = a + 1  # exists: the last point, (FPR, FNR) = (1, 0), has a gap of -1
    t = gap[a] / (gap[a] - gap[b])
    return float(fpr[a] + t * (fpr[b] - fpr[a]))


def tpr_at_fpr(genuine: ArrayLike, impostor: ArrayLike, fpr: float) -> float:
    """The largest true-positive rate of an operating point whose false-positive rate is <= ``fpr``.

    Operating points are the thresholds of :func:`roc_curve` (no interpolation between them), so
    the value is achievable by a threshold.

    Parameters
    ----------
    genuine, impostor
        Scores of genuine and impostor trials.
    fpr
        The largest acceptable false-positive rate, in [0, 1].

    Returns
    -------
    float
        The TPR in [0, 1].
    """
    if not 0.0 <= fpr <= 1.0:
        raise ValueError(f"the FPR must be in [0, 1], not {fpr}")
    rates_fp, rates_tp, _ = roc_curve(genuine, impostor)
    return float(rates_tp[rates_fp <= fpr + 1e-12].max())


def min_dcf(
    genuine: ArrayLike,
    impostor: ArrayLike,
    p_target: float = 0.01,
    c_miss: float = 1.0,
    c_fa: float = 1.0,
) -> float:
    """The normalised minimum detection cost (NIST SRE; WeSpeaker ``score_metrics.py``).

    ``C_det(τ) = C_miss·FNR(τ)·P_target + C_fa·FPR(τ)·(1 − P_target)`` minimised over the
    operating points of :func:`roc_curve` (both extremes included), divided by the cost of the
    better trivial system ``C_default = min(C_miss·P_target, C_fa·(1 − P_target))``; so the value is
    at most 1.

    Parameters
    ----------
    genuine, impostor
        Scores of target (genuine) and non-target (impostor) trials.
    p_target
        Prior probability of a target trial, in (0, 1).
    c_miss, c_fa
        Costs of a miss and of a false alarm (positive).

    Returns
    -------
    float
        The normalised minimum DCF in [0, 1].
    """
    if not 0.0 < p_target < 1.0:
        raise ValueError(f"p_target must be in (0, 1), not {p_target}")
    if c_miss <= 0 or c_fa <= 0:
        raise ValueError("the costs must be positive")
    fpr, tpr, _ = roc_curve(genuine, impostor)
    cost = c_miss * (1.0 - tpr) * p_target + c_fa * fpr * (1.0 - p_target)
    return float(cost.min() / min(c_miss * p_target, c_fa * (1.0 - p_target)))


def _fpr_key(fpr: float) -> str:
    """The JSON key of an FPR operating point: ``0.01 -> "0.01"``."""
    return str(float(fpr))


def split_metrics(
    genuine: ArrayLike, impostor: ArrayLike, fprs: Sequence[float] = REPORT_FPRS
) -> dict[str, Any]:
    """The metrics of one evaluation split, in the shape of a ``report.json`` split.

    Parameters
    ----------
    genuine, impostor
        Scores of genuine and impostor trials. When either set is empty (a split with no users,
        or a single known user and so no impostors) the metrics are NaN (``null`` in the report)
        and the counts say why.
    fprs
        The FPR operating points of ``tpr_at_fpr``.

    Returns
    -------
    dict
        ``{"eer": float, "tpr_at_fpr": {"0.01": float, "0.1": float}, "min_dcf": float,
        "genuine": int, "impostor": int}`` (``min_dcf`` at the defaults of :func:`min_dcf`).
    """
    genuine = np.asarray(genuine, dtype=np.float64).ravel()
    impostor = np.asarray(impostor, dtype=np.float64).ravel()
    counts = {"genuine": int(genuine.size), "impostor": int(impostor.size)}
    if genuine.size == 0 or impostor.size == 0:
        nan = float("nan")
        return {"eer": nan, "tpr_at_fpr": {_fpr_key(f): nan for f in fprs}, "min_dcf": nan} | counts
    return {
        "eer": equal_error_rate(genuine, impostor),
        "tpr_at_fpr": {_fpr_key(f): tpr_at_fpr(genuine, impostor, f) for f in fprs},
        "min_dcf": min_dcf(genuine, impostor),
    } | counts


# ---------------------------------------------------------------------------------------------
# Protocols: from model outputs to genuine and impostor score sets
# ---------------------------------------------------------------------------------------------


def _reference_protocol(
    score: Callable[[np.ndarray, np.ndarray], np.ndarray],
    outputs: ArrayLike,
    labels: ArrayLike,
    references: ArrayLike,
    impostor_outputs: ArrayLike | None,
    impostor_labels: ArrayLike | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Genuine and impostor scores of samples against per-user references (one score function)."""
    references = np.asarray(references, dtype=np.float64)
    outputs = np.asarray(outputs, dtype=np.float64)
    labels = np.asarray(labels)
    if labels.size == 0:
        labels = labels.astype(np.int64)  # ``np.array([])`` is float
    if references.ndim != 2 or references.shape[0] == 0:
        raise ValueError(
            f"the references must be a non-empty [users, dim] array, not {references.shape}"
        )
    if outputs.ndim != 2 or outputs.shape[1] != references.shape[1]:
        raise ValueError(
            f"the outputs must be [samples, {references.shape[1]}], not {outputs.shape}"
        )
    if labels.shape != (outputs.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError("the labels must be one integer user index per output")
    if labels.size and (labels.min() < 0 or labels.max() >= references.shape[0]):
        raise ValueError(f"a label is not a user index in [0, {references.shape[0]})")

    def matrix(vectors: np.ndarray) -> np.ndarray:
        """Scores ``[samples, users]``: every row against every user's reference."""
        if vectors.shape[0] == 0:
            return np.empty((0, references.shape[0]))
        return score(references, vectors)  # the SDK's scoring takes a stack of references

    rows = np.arange(labels.size)
    if impostor_outputs is None:
        if impostor_labels is not None:
            raise ValueError("impostor_labels is given without impostor_outputs")
        own = matrix(outputs)
        others = np.ones(own.shape, dtype=bool)
        others[rows, labels] = False
        return own[rows, labels], own[others]
    impostor_outputs = np.asarray(impostor_outputs, dtype=np.float64)
    if impostor_outputs.ndim != 2 or impostor_outputs.shape[1] != references.shape[1]:
        raise ValueError(
            f"the impostor outputs must be [samples, {references.shape[1]}], not {impostor_outputs.shape}"
        )
    if impostor_labels is not None and np.shape(impostor_labels) != (impostor_outputs.shape[0],):
        raise ValueError("impostor_labels must hold one identity per impostor output")
    # Genuine trials only: each user's reference against that user's own samples.
    genuine = np.empty(labels.size)
    for user in np.unique(labels):
        mine = labels == user
        genuine[mine] = score(references[user], outputs[mine])
    return genuine, matrix(impostor_outputs).ravel()


def codeword_protocol(
    outputs: ArrayLike,
    labels: ArrayLike,
    codewords: ArrayLike,
    *,
    impostor_outputs: ArrayLike | None = None,
    impostor_labels: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Genuine and impostor trials of FedUV's codeword verification [FedUV]_.

    Scores are the SDK's :func:`uvsdk.scoring.codeword_scores`, ``e = v·rescale(z)/n``.

    Parameters
    ----------
    outputs
        ``[N, n]`` model outputs of samples of known users.
    labels
        ``[N]`` integer owner of each sample: an index into ``codewords``.
    codewords
        ``[U, n]`` the known users' ±1 codewords.
    impostor_outputs
        ``[M, n]`` outputs of samples of users unknown to training (the "unknown" split, FedUV
        Fig. 5c). When given, the impostor trials are every one of these against every known
        user's codeword; when not (train and test_known splits), every sample against every
        codeword but its owner's.
    impostor_labels
        ``[M]`` identities of the unknown samples. Unknown users own no codeword, so every
        (unknown sample, known codeword) pair is an impostor trial whatever the identity; the
        labels are only checked for length (kept for symmetry with the data the trainer holds).

    Returns
    -------
    genuine
        ``[N]``: sample ``i`` against ``codewords[labels[i]]``, in sample order.
    impostor
        Sample-major: for each sample in order, its scores against the other users' codewords in
        user order (``[N·(U−1)]``), or for each unknown sample its scores against all ``U``
        codewords (``[M·U]``).
    """
    return _reference_protocol(
        codeword_scores, outputs, labels, codewords, impostor_outputs, impostor_labels
    )


def prototype_protocol(
    embeddings: ArrayLike,
    labels: ArrayLike,
    prototypes: ArrayLike,
    *,
    impostor_embeddings: ArrayLike | None = None,
    impostor_labels: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Genuine and impostor trials against per-user prototypes, scored by cosine [FedHide]_.

    The same protocol as :func:`codeword_protocol` with the SDK's
    :func:`uvsdk.scoring.cosine_scores` against each client's learnt prototype ``w_c`` (or an
    enrollment reference from :func:`uvsdk.scoring.prototype`) in place of the codeword score.

    Parameters
    ----------
    embeddings
        ``[N, d]`` embeddings of samples of known users.
    labels
        ``[N]`` integer owner of each sample: an index into ``prototypes``.
    prototypes
        ``[U, d]`` the known users' prototypes (need not be normalised).
    impostor_embeddings, impostor_labels
        Samples of users unknown to training, as in :func:`codeword_protocol`.

    Returns
    -------
    genuine, impostor
        As in :func:`codeword_protocol`.
    """
    return _reference_protocol(
        cosine_scores, embeddings, labels, prototypes, impostor_embeddings, impostor_labels
    )


def _sample_pairs(
    partners_start: np.ndarray, partners_end: np.ndarray, limit: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs ``(p, q)`` with ``partners_start[q] <= p < partners_end[q]``: all of them when there
    are at most ``limit``, else ``limit`` of them drawn uniformly without replacement.

    The pairs are numbered ``q``-major without listing them, so the draw costs O(limit + N).
    """
    per_q = partners_end - partners_start
    ends = np.cumsum(per_q)
    total = int(ends[-1]) if ends.size else 0
    if total <= limit:
        index = np.arange(total, dtype=np.int64)
    else:
        index = np.sort(rng.choice(total, size=limit, replace=False))
    q = np.searchsorted(ends, index, side="right")
    p = partners_start[q] + (index - (ends[q] - per_q[q]))
    return p, q


def pair_protocol(
    embeddings: ArrayLike, labels: ArrayLike, *, max_pairs: int = 200_000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Verification pairs among users unseen in training, scored by cosine [FedHide]_.

    Every unordered pair of distinct samples is a trial: genuine when both samples have the same
    identity, impostor otherwise. When a set has more than ``max_pairs`` pairs, ``max_pairs`` of
    them are drawn uniformly without replacement (each set on its own), reproducibly from
    ``seed``.

    Parameters
    ----------
    embeddings
        ``[N, d]`` embeddings (need not be normalised).
    labels
        ``[N]`` identity of each sample (any values numpy can sort).
    max_pairs
        The most trials of each kind.
    seed
        Seed of the draw.

    Returns
    -------
    genuine, impostor
        Cosines of the genuine and impostor pairs.
    """
    embeddings = np.asarray(embeddings, dtype=np.float64)
    labels = np.asarray(labels)
    if embeddings.ndim != 2 or labels.shape != (embeddings.shape[0],):
        raise ValueError("pair_protocol needs [N, d] embeddings and [N] labels")
    if max_pairs < 1:
        raise ValueError("max_pairs must be at least 1")
    # Sort by identity; in sorted order the samples of one identity are the block [start, q].
    order = np.argsort(labels, kind="stable")
    units = rescale(embeddings[order], 1.0)
    sorted_labels = labels[order]
    new_block = np.append(True, sorted_labels[1:] != sorted_labels[:-1])
    block_start = np.maximum.accumulate(np.where(new_block, np.arange(labels.size), 0))
    rng = np.random.default_rng(seed)
    zeros = np.zeros(labels.size, dtype=np.int64)
    positions = np.arange(labels.size, dtype=np.int64)

    def cosines(p: np.ndarray, q: np.ndarray) -> np.ndarray:
        return np.einsum("ij,ij->i", units[p], units[q])

    genuine = cosines(*_sample_pairs(block_start, positions, max_pairs, rng))
    impostor = cosines(*_sample_pairs(zeros, block_start, max_pairs, rng))
    return genuine, impostor


def warmup_evaluation(
    val_scores_by_user: Mapping[Hashable, ArrayLike],
    test_genuine_by_user: Mapping[Hashable, ArrayLike],
    test_impostor_by_user: Mapping[Hashable, ArrayLike],
    target_tpr: float = 0.95,
) -> dict[str, Any]:
    """The accuracy of each user's own warm-up threshold [FedUV]_ (Sec. 3.3).

    Each known user sets τ from their own validation scores with the SDK's
    :func:`uvsdk.scoring.warmup_threshold` (the ⌊n(1 − q)⌋-th smallest). The user's test genuine
    scores are then accepted iff ``e >= τ``, and so are their test impostor trials (other people's
    samples against this user's reference); the rates are pooled over all users' trials.

    Parameters
    ----------
    val_scores_by_user
        User → warm-up scores (the user's own validation samples). Users with no validation
        scores cannot set a threshold and are left out.
    test_genuine_by_user, test_impostor_by_user
        User → test genuine / impostor scores against that user's reference. A user missing from
        one of them contributes no trials of that kind.
    target_tpr
        The target TPR ``q``.

    Returns
    -------
    dict
        ``{"target_tpr": q, "tpr": float, "fpr": float, "users": int}``; a rate with no trials is
        NaN.
    """
    accepted_genuine = accepted_impostor = total_genuine = total_impostor = users = 0
    for user, val in val_scores_by_user.items():
        val = np.asarray(val, dtype=np.float64).ravel()
        if val.size == 0:
            continue
        threshold = warmup_threshold(val, target_tpr)
        users += 1
        genuine = np.asarray(test_genuine_by_user.get(user, ()), dtype=np.float64).ravel()
        impostor = np.asarray(test_impostor_by_user.get(user, ()), dtype=np.float64).ravel()
        accepted_genuine += int(np.count_nonzero(genuine >= threshold))
        accepted_impostor += int(np.count_nonzero(impostor >= threshold))
        total_genuine += genuine.size
        total_impostor += impostor.size
    return {
        "target_tpr": float(target_tpr),
        "tpr": accepted_genuine / total_genuine if total_genuine else float("nan"),
        "fpr": accepted_impostor / total_impostor if total_impostor else float("nan"),
        "users": users,
    }


def prototype_leakage(private: ArrayLike, shared: ArrayLike) -> float:
    """FedHide's prototype leakage ``P_leak = mean_c 1[argmax_c' w_c'ᵀ w̄_c = c]`` [FedHide]_.

    The fraction of clients whose shared vector ``w̄_c`` is nearer (by cosine) to their own true
    prototype ``w_c`` than to any other client's: what a server holding the shared vectors would
    identify, were the true prototypes known. Ties go to the lowest index (``numpy.argmax``).

    Parameters
    ----------
    private
        ``[C, d]`` the clients' true prototypes ``w_c``.
    shared
        ``[C, d]`` what the server saw from each client (``w̄_c``). Both are L2-normalised first.

    Returns
    -------
    float
        ``P_leak`` in [0, 1]: 1 when the prototypes themselves are shared, about ``1/C`` for
        shared vectors unrelated to them.
    """
    private = np.asarray(private, dtype=np.float64)
    shared = np.asarray(shared, dtype=np.float64)
    if private.ndim != 2 or private.shape != shared.shape or private.shape[0] == 0:
        raise ValueError("private and shared must be non-empty [C, d] arrays of one shape")
    similarity = rescale(shared, 1.0) @ rescale(private, 1.0).T
    nearest = np.argmax(similarity, axis=1)
    return float(np.mean(nearest == np.arange(private.shape[0])))


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------


def _save_figure(figure: Any, path: str | os.PathLike[str]) -> Path:
    """Render a figure to PNG with the Agg canvas and move it into place atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            figure.savefig(stream, format="png", dpi=_DPI)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _figure(title: str) -> tuple[Any, Any]:
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
        Legend name → ``(genuine, impostor)`` scores; the legend shows each curve's EER.
    path
        Where to write the PNG (written atomically).
    title
        The plot's title.

    Returns
    -------
    Path
        ``path``.
    """
    figure, axes = _figure(title)
    for name, (genuine, impostor) in curves.items():
        fpr, tpr, _ = roc_curve(genuine, impostor)
        axes.step(fpr, tpr, where="post", label=_label(name, genuine, impostor))
    axes.set_xscale("log")
    axes.set_xlim(1e-4, 1.0)
    axes.set_ylim(0.0, 1.01)
    axes.set_xlabel("false positive rate")
    axes.set_ylabel("true positive rate")
    if curves:
        axes.legend(loc="lower right")
    return _save_figure(figure, path)


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
        Legend name → ``(genuine, impostor)`` scores; the legend shows each curve's EER.
    path
        Where to write the PNG (written atomically).
    title
        The plot's title.

    Returns
    -------
    Path
        ``path``.
    """
    figure, axes = _figure(title)
    for name, (genuine, impostor) in curves.items():
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
    return _save_figure(figure, path)


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
    figure, axes = _figure(title or f"{ylabel} by round")
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
    return _save_figure(figure, path)


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
    figure, axes = _figure(title)
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
    return _save_figure(figure, path)


# ---------------------------------------------------------------------------------------------
# report.json
# ---------------------------------------------------------------------------------------------


def jsonable(value: Any) -> Any:
    """A copy with numpy types made plain and non-finite floats made ``None`` (JSON ``null``):
    every JSON file of a run (``report.json``, ``metrics.jsonl``, ``config.json``) goes through
    it and ``json.dumps(allow_nan=False)``, so none ever holds ``NaN`` or ``Infinity`` (not
    JSON; strict parsers refuse them)."""
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


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
    text = json.dumps(jsonable(report), indent=2, allow_nan=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


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
