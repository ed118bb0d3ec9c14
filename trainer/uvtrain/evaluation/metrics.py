"""Verification metrics on score sets, pure numpy: ROC, EER, TPR at a fixed FPR, minDCF, the
metrics of one ``report.json`` split, and FedHide's prototype leakage.

Conventions: a trial is *accepted* iff ``score >= threshold``; genuine trials are the user's own
samples against the user's reference, impostor trials are anyone else's.

References
----------
.. [FedHide] "FedHide: Federated Learning by Hiding in the Neighbors." Proxy prototypes and the
   prototype leakage ``P_leak``; verification pairs among users unseen in training.
.. [NIST] NIST Speaker Recognition Evaluation plans: the normalised detection cost
   ``C_det / min(C_miss·P_target, C_fa·(1 − P_target))``, as in WeSpeaker's ``score_metrics.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from uvsdk.scoring import rescale

#: The FPR operating points every split reports.
REPORT_FPRS: tuple[float, ...] = (0.01, 0.1)


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


def nearest_prototype_accuracy(
    embeddings: ArrayLike, labels: ArrayLike, prototypes: ArrayLike
) -> float:
    """Top-1 classification accuracy: each sample is given the class of its nearest prototype.

    Nearest is by cosine (both sides L2-normalised), i.e. ``argmax_c w_cᵀ f(x)``, the classifier
    a prototype method's embedding network and class prototypes make [FedHide]_ (CIFAR-100
    accuracy, Sec. 4.1, Fig. 3, Table 4). Ties go to the lowest class index (``numpy.argmax``).

    Parameters
    ----------
    embeddings
        ``[N, d]`` embeddings of labelled test samples.
    labels
        ``[N]`` the true class of each sample: an index into ``prototypes``.
    prototypes
        ``[C, d]`` one vector per class (need not be normalised).

    Returns
    -------
    float
        The fraction of samples classified correctly, in [0, 1].
    """
    embeddings = np.asarray(embeddings, dtype=np.float64)
    prototypes = np.asarray(prototypes, dtype=np.float64)
    labels = np.asarray(labels)
    if prototypes.ndim != 2 or prototypes.shape[0] == 0:
        raise ValueError(f"the prototypes must be a non-empty [C, d] array, not {prototypes.shape}")
    if (
        embeddings.ndim != 2
        or embeddings.shape[0] == 0
        or embeddings.shape[1] != prototypes.shape[1]
    ):
        raise ValueError(
            f"the embeddings must be a non-empty [N, {prototypes.shape[1]}] array, "
            f"not {embeddings.shape}"
        )
    if labels.shape != (embeddings.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError("the labels must be one integer class index per embedding")
    if labels.min() < 0 or labels.max() >= prototypes.shape[0]:
        raise ValueError(f"a label is not a class index in [0, {prototypes.shape[0]})")
    predicted = np.argmax(rescale(embeddings, 1.0) @ rescale(prototypes, 1.0).T, axis=1)
    return float(np.mean(predicted == labels))
