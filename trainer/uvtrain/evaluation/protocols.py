"""The score protocols of the seed papers: from model outputs to genuine and impostor score
sets (FedUV's codewords, prototypes, the baselines' learnt class rows, verification pairs among
unseen users), and the warm-up threshold's accuracy.

The scores come from the SDK (:mod:`uvsdk.scoring`), so a user's score during evaluation is
computed by the same code as on the device.

References
----------
.. [FedUV] H. Hosseini, H. Park, S. Yun, C. Louizos, J. Soriaga, M. Welling. "Federated Learning
   of User Verification Models Without Sharing Embeddings." ICML 2021. Scores ``e = v·σ(W g(x))/c``
   (eq. 5), the warm-up threshold (Sec. 4.2, Algorithm 2), and the unknown-user evaluation
   (Sec. 6.4, Fig. 5c); its baselines scored against their learnt class rows (Sec. 6.2).
.. [FedHide] "FedHide: Federated Learning by Hiding in the Neighbors." Proxy prototypes and the
   prototype leakage ``P_leak``; verification pairs among users unseen in training; the
   VoxCeleb1 test protocol of its Sec. 4.1 ("we crop ten 3-second temporal segments from each
   utterance pair and compute the average scores across all segment pairs") over the official
   trial list (:func:`trial_list_protocol`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from uvsdk.scoring import codeword_scores, cosine_scores, rescale, warmup_threshold


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


def class_row_protocol(
    embeddings: ArrayLike,
    labels: ArrayLike,
    rows: ArrayLike,
    *,
    impostor_embeddings: ArrayLike | None = None,
    impostor_labels: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Genuine and impostor trials against the users' learnt class rows: the FedUV paper's
    protocol for its baselines, softmax and FedAwS [FedUV]_.

    The paper verifies with embedding-based classifiers, whose test example is accepted when its
    embedding is close to the user's class embedding ``w_y`` (Sec. 2.2, eq. 1), and gives the
    baselines a per-user warm-up threshold as for FedUV (Sec. 6.2, "Baselines"); Fig. 5 (Sec. 6.4)
    reports them on the training data, the known users' test data and the unknown users' data.

    Each known user verifies with their own *class row* ``w_u`` — the row of the class matrix
    that training learnt for them (softmax's FC layer, FedAwS's class embedding) — instead of a
    reference enrolled from their samples: a sample of user ``u`` against ``w_u`` is a genuine
    trial, any other person's sample against ``w_u`` an impostor trial. On the unknown split, as
    for FedUV's codewords (Fig. 5c), the genuine trials are the known users' test samples and the
    impostors every sample of the identities unseen in training against every known row (an
    unseen identity has no row: it cannot be enrolled in this protocol).

    The score is the cosine ``w_uᵀ f(x) / ‖w_u‖`` (the SDK's
    :func:`uvsdk.scoring.cosine_scores`). The paper does not say whether it scores the logit or
    the cosine; for one user the plain head's logit ``w_uᵀ f(x) + b_u`` of a unit embedding is
    ``‖w_u‖ · cosine + b_u``, an increasing function of the cosine, so each user's warm-up
    threshold accepts the same samples either way; only the pooled ROC across users differs, and
    the cosine is the one that needs no per-user offsets to be comparable.

    Parameters
    ----------
    embeddings
        ``[N, d]`` embeddings of samples of known users.
    labels
        ``[N]`` integer owner of each sample: an index into ``rows``.
    rows
        ``[U, d]`` the known users' learnt class rows (need not be normalised).
    impostor_embeddings, impostor_labels
        Samples of users unknown to training, as in :func:`codeword_protocol`.

    Returns
    -------
    genuine, impostor
        As in :func:`codeword_protocol`.
    """
    # the same trials as prototype_protocol, with the learnt rows as the references
    return prototype_protocol(
        embeddings,
        labels,
        rows,
        impostor_embeddings=impostor_embeddings,
        impostor_labels=impostor_labels,
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
    """The accuracy of each user's own warm-up threshold [FedUV]_ (Sec. 4.2, Algorithm 2).

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


#: FedHide's test crops (Sec. 4.1): ten segments of three seconds from each utterance.
TRIAL_CROPS = 10
TRIAL_CROP_SECONDS = 3.0


def crop_starts(
    length: int,
    sample_rate: int,
    crops: int = TRIAL_CROPS,
    crop_seconds: float = TRIAL_CROP_SECONDS,
) -> tuple[int, np.ndarray]:
    """The width and the start of each test crop of a ``length``-sample utterance, in samples.

    The starts are evenly spaced from the beginning to the last start that fits,
    ``floor(linspace(0, length − width, crops))`` (what the VoxCeleb trainer of the paper's
    backbone, Chung et al. 2020, does at test time; the paper itself says only "ten 3-second
    temporal segments"). An utterance no longer than one crop has every start at 0: it is
    repeat-padded to one crop (:func:`evenly_spaced_crops`), so its ten crops are the same.

    Returns
    -------
    width, starts
        ``round(crop_seconds · sample_rate)`` and ``[crops]`` int64 starts, non-decreasing.
    """
    width = round(crop_seconds * sample_rate)
    if width < 1 or crops < 1:
        raise ValueError("a crop must be at least one sample long, and there must be one")
    if length < 1:
        raise ValueError("an empty utterance has no crops")
    if length <= width:
        return width, np.zeros(crops, dtype=np.int64)
    return width, np.floor(np.linspace(0, length - width, crops)).astype(np.int64)


def evenly_spaced_crops(
    signal: ArrayLike,
    sample_rate: int,
    crops: int = TRIAL_CROPS,
    crop_seconds: float = TRIAL_CROP_SECONDS,
) -> np.ndarray:
    """The ``[crops, width]`` test crops of one utterance (:func:`crop_starts`).

    An utterance shorter than one crop is first repeat-padded, tiled from its start to exactly one
    crop, as the SDK pads a short clip (:func:`uvsdk.media.audio_windows`).
    """
    x = np.asarray(signal, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"expected 1-D samples, got shape {x.shape}")
    width, starts = crop_starts(x.size, sample_rate, crops, crop_seconds)
    if x.size < width:
        x = np.resize(x, width)
    return np.stack([x[s : s + width] for s in starts])


def trial_scores(
    left: Sequence[str],
    right: Sequence[str],
    load: Callable[[str], np.ndarray],
    embed: Callable[[np.ndarray], np.ndarray],
    *,
    sample_rate: int,
    crops: int = TRIAL_CROPS,
    crop_seconds: float = TRIAL_CROP_SECONDS,
    progress: bool = False,
) -> np.ndarray:
    """One score per trial ``(left[i], right[i])``: the mean cosine over all crop pairs [FedHide]_.

    Each utterance is loaded once and cut into ``crops`` crops (:func:`evenly_spaced_crops`); the
    score of a trial is the mean of the ``crops × crops`` cosines between the crops of one
    utterance and those of the other. That mean equals the dot product of the two utterances'
    mean *unit* crop embeddings (not renormalised), which is how it is computed.

    Parameters
    ----------
    left, right
        The utterances of each trial, as names ``load`` understands.
    load
        Name → 1-D samples at ``sample_rate``.
    embed
        ``[n, width]`` float32 crops → ``[n, d]`` embeddings (the trained model).
    sample_rate, crops, crop_seconds
        As for :func:`crop_starts`.
    progress
        Show a progress bar over the utterances.

    Returns
    -------
    numpy.ndarray
        ``[T]`` float64 scores in trial order, in [−1, 1].
    """
    if len(left) != len(right):
        raise ValueError("left and right must name one utterance each per trial")
    from ..progress import Progress

    names = list(dict.fromkeys(name for pair in zip(left, right, strict=True) for name in pair))
    means: dict[str, np.ndarray] = {}
    bar = Progress("trial utterances", len(names), unit="file", enabled=progress)
    for name in names:
        outputs = np.asarray(
            embed(evenly_spaced_crops(load(name), sample_rate, crops, crop_seconds)),
            dtype=np.float64,
        )
        if outputs.ndim != 2 or outputs.shape[0] != crops:
            raise ValueError(f"embed must return [{crops}, d], not {outputs.shape}")
        means[name] = rescale(outputs, 1.0).mean(axis=0)
        bar.update()
    return np.array(
        [means[a] @ means[b] for a, b in zip(left, right, strict=True)], dtype=np.float64
    )


def trial_list_protocol(
    labels: ArrayLike,
    left: Sequence[str],
    right: Sequence[str],
    load: Callable[[str], np.ndarray],
    embed: Callable[[np.ndarray], np.ndarray],
    *,
    sample_rate: int,
    crops: int = TRIAL_CROPS,
    crop_seconds: float = TRIAL_CROP_SECONDS,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Genuine and impostor scores of a verification trial list, FedHide's VoxCeleb1 protocol
    [FedHide]_ (Sec. 4.1): ten 3-s crops of each utterance, the mean cosine over all crop pairs.

    Parameters
    ----------
    labels
        ``[T]`` 1 for a same-speaker trial, 0 for a different-speaker one.
    left, right, load, embed, sample_rate, crops, crop_seconds, progress
        As for :func:`trial_scores`.

    Returns
    -------
    genuine, impostor
        The scores of the label-1 and of the label-0 trials, each in list order.
    """
    labels = np.asarray(labels)
    if labels.shape != (len(left),) or not np.isin(labels, (0, 1)).all():
        raise ValueError("labels must be one 0 or 1 per trial")
    scores = trial_scores(
        left,
        right,
        load,
        embed,
        sample_rate=sample_rate,
        crops=crops,
        crop_seconds=crop_seconds,
        progress=progress,
    )
    return scores[labels == 1], scores[labels == 0]
