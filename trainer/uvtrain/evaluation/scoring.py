"""The scoring step of a run: every sample through the trained model, scored as the SDK would
score it (the protocols of :mod:`.protocols`), and the figures the report holds (EERs, the
warm-up thresholds, the learnt prototypes and their leakage).

``uvtrain run`` and ``uvtrain eval`` call :func:`score_run`; ``--eval-every`` calls
:func:`quick_metrics` during training; ``uvtrain eval --trials`` calls :func:`score_trial_list`
(FedHide's VoxCeleb1 protocol over an official trial list, reported apart from the splits).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from uvsdk.scoring import codeword_scores, cosine_scores, leave_one_out_scores, prototype

from ..data.base import FederatedDataset
from .metrics import nearest_prototype_accuracy, prototype_leakage, split_metrics
from .protocols import (
    TRIAL_CROP_SECONDS,
    TRIAL_CROPS,
    class_row_protocol,
    codeword_protocol,
    pair_protocol,
    prototype_protocol,
    trial_list_protocol,
    warmup_evaluation,
)

#: Datasets whose identities are classes (FedHide reports CIFAR-100 as classification
#: accuracy, Sec. 4.1): their reports carry ``classification`` beside the verification splits.
CLASSIFICATION_DATASETS = frozenset({"cifar-100"})
#: The report key of the trial-list protocol (FedHide Sec. 4.1), never mixed with ``splits``.
TRIAL_LIST_KEY = "trial_list"


class JoinedRows:
    """Several arrays' rows as one sequence, read a slice at a time: the model embeds every
    client's samples batch by batch (:meth:`uvtrain.engine.GlobalModel.outputs`) without a copy
    of them all in memory, and reads only each batch's rows of a memory-mapped stream folder."""

    def __init__(self, arrays: list[np.ndarray]) -> None:
        self.arrays = arrays
        self.starts = np.concatenate([[0], np.cumsum([len(array) for array in arrays])])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, rows: slice) -> np.ndarray:
        """Rows ``rows`` (a slice with step 1) of the arrays joined, as one array."""
        start, stop, step = rows.indices(len(self))
        if step != 1:
            raise ValueError("JoinedRows reads contiguous slices only")
        pieces = []
        for array, first in zip(self.arrays, self.starts[:-1], strict=True):
            low, high = max(start - first, 0), min(stop - first, len(array))
            if low < high:
                pieces.append(np.asarray(array[low:high]))
        return np.concatenate(pieces) if pieces else self.arrays[0][:0]


def _stack(dataset: FederatedDataset, split: str) -> tuple[JoinedRows, np.ndarray]:
    arrays = [getattr(client, split) for client in dataset.clients]
    labels = np.concatenate([np.full(len(a), i) for i, a in enumerate(arrays)])
    return JoinedRows(arrays), labels


def score_splits(
    simulation: Any, dataset: FederatedDataset, splits: tuple[str, ...]
) -> dict[str, Any]:
    """Outputs of every sample, each user's reference, and the genuine/impostor scores of the
    asked splits (``train``, ``test_known``, ``unknown``) as the SDK would score them."""
    algorithm = simulation.algorithm
    users = len(dataset.clients)
    outputs, labels = {}, {}
    needed = {"val", "test"} | ({"train"} if "train" in splits else set())
    for split in ("train", "val", "test"):
        if split in needed:
            samples, labels[split] = _stack(dataset, split)
            outputs[split] = simulation.outputs(samples)
    # Unknown identities never train: every sample of theirs is a probe.
    unknown, unknown_labels = None, None
    if dataset.unknown:
        pools = [[c.train, c.val, c.test] for c in dataset.unknown]
        unknown = JoinedRows([split for pool in pools for split in pool])
        unknown_labels = np.concatenate(
            [np.full(sum(len(split) for split in pool), i) for i, pool in enumerate(pools)]
        )
    unknown_outputs = simulation.outputs(unknown) if unknown is not None else None

    if algorithm.output_kind == "codeword":
        references = simulation.constants["codeword"].cpu().numpy()
        protocol = codeword_protocol
    else:
        # What the SDK does with an embedding bundle: the user's reference is the normalised
        # mean of their enrollment (here: validation) embeddings, the warm-up scores are the
        # enrollment clips' leave-one-out cosines. The learnt prototypes w_c are reported too.
        references = enrollment_references(outputs["val"], labels["val"], users)
        protocol = prototype_protocol

    curves = {}
    for name, split in (("train", "train"), ("test_known", "test")):
        if name in splits:
            curves[name] = protocol(outputs[split], labels[split], references)
    if unknown_outputs is not None and "unknown" in splits:
        if algorithm.output_kind == "codeword":
            genuine, _ = protocol(outputs["test"], labels["test"], references)
            _, impostor = protocol(
                outputs["test"],
                labels["test"],
                references,
                impostor_outputs=unknown_outputs,
                impostor_labels=unknown_labels,
            )
        else:
            genuine, impostor = pair_protocol(unknown_outputs, unknown_labels)
        curves["unknown"] = (genuine, impostor)
    return {
        "outputs": outputs,
        "labels": labels,
        "unknown_outputs": unknown_outputs,
        "unknown_labels": unknown_labels,
        "references": references,
        "protocol": protocol,
        "curves": curves,
    }


#: The protocol behind each split of ``report["splits"]``, by output kind: FedUV's codewords
#: (``unknown``: the unseen identities as impostors against every known codeword, FedUV Fig. 5c),
#: or the SDK's enrollment reference of an embedding bundle (``unknown``: pairs among the unseen
#: identities, which an embedding model enrolls without training). ``report["class_row"]`` has
#: its own (:data:`CLASS_ROW_PROTOCOLS`): the two ``unknown`` protocols are never one figure.
SPLIT_PROTOCOLS: dict[str, dict[str, str]] = {
    "codeword": {
        "train": "codeword",
        "test_known": "codeword",
        "unknown": "codeword-unseen-impostors",
    },
    "embedding": {"train": "enrollment", "test_known": "enrollment", "unknown": "unseen-pairs"},
}
CLASS_ROW_PROTOCOLS: dict[str, str] = {
    "train": "class-row",
    "test_known": "class-row",
    "unknown": "class-row-unseen-impostors",
}


def _class_row_warmup(scored: dict[str, Any], rows: np.ndarray, target_tpr: float) -> dict:
    """The warm-up threshold's accuracy in the class-row protocol: each user sets τ from their
    validation samples' cosines with their own row (FedUV Sec. 6.2: a warm-up phase for the
    baselines too), then accepts or rejects the test samples and the unseen identities'."""
    outputs, labels, unknown = scored["outputs"], scored["labels"], scored["unknown_outputs"]
    val = cosine_scores(rows, outputs["val"])
    warmups = {user: val[labels["val"] == user, user] for user in range(rows.shape[0])}
    return _warmup_of_users(
        warmups,
        cosine_scores(rows, outputs["test"]),
        labels["test"],
        cosine_scores(rows, unknown) if unknown is not None else None,
        target_tpr,
    )


def class_row_splits(
    scored: dict[str, Any], rows: np.ndarray
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Genuine and impostor scores of :func:`class_row_protocol` on train, test_known and
    unknown: the known users' samples against their learnt class ``rows`` (the FedUV paper's
    protocol for softmax and FedAwS). ``unknown``: the known users' test samples as genuine
    trials, every unseen identity's sample against every known row as impostors (FedUV Fig. 5c,
    the same trials as FedUV's codeword protocol there) — never enrolled, unlike the SDK's
    protocol, whose ``unknown`` is pairs among the unseen identities."""
    outputs, labels = scored["outputs"], scored["labels"]
    curves = {
        name: class_row_protocol(outputs[split], labels[split], rows)
        for name, split in (("train", "train"), ("test_known", "test"))
        if split in outputs
    }
    if scored["unknown_outputs"] is not None and "test_known" in curves:
        _, impostor = class_row_protocol(
            outputs["test"],
            labels["test"],
            rows,
            impostor_embeddings=scored["unknown_outputs"],
            impostor_labels=scored["unknown_labels"],
        )
        curves["unknown"] = (curves["test_known"][0], impostor)
    return curves


def enrollment_references(vectors: np.ndarray, labels: np.ndarray, users: int) -> np.ndarray:
    """``[users, dim]``: each user's reference as the SDK makes it, the prototype of their
    enrollment (here: validation) vectors."""
    return np.stack([prototype(vectors[labels == user]) for user in range(users)])


def _warmup_of_users(
    warmups: dict[int, np.ndarray],
    test_scores: np.ndarray,
    test_labels: np.ndarray,
    unknown_scores: np.ndarray | None,
    target_tpr: float,
) -> dict[str, Any]:
    """:func:`warmup_evaluation` of the users in ``warmups`` (their warm-up scores): each user's
    test samples as genuine trials, every other test sample and every unseen identity's as
    impostors, from the ``[samples, users]`` score matrices."""
    genuine, impostor = {}, {}
    for user in warmups:
        mine = test_labels == user
        genuine[user] = test_scores[mine, user]
        others = [test_scores[~mine, user]]
        if unknown_scores is not None:
            others.append(unknown_scores[:, user])
        impostor[user] = np.concatenate(others)
    return warmup_evaluation(warmups, genuine, impostor, target_tpr)


def enrollment_splits(scored: dict[str, Any], users: int, target_tpr: float) -> dict[str, Any]:
    """A codeword model verified by enrollment (issue 34): its outputs scored as the SDK's
    prototype mode scores any bundle (spec §9.1), ignoring the trained codewords. Each user's
    reference is the prototype of their validation outputs, the warm-up scores their
    leave-one-out cosines, ``unknown`` pairs among the unseen identities — the same protocol,
    trials and warm-up as an embedding model's ``splits``. Under user-level DP this is the
    protocol whose accuracy the guarantee does not bound (docs/privacy.md, "Verifying by
    enrollment"): the template is made after training, on the device.
    Returns ``{"splits", "warmup", "curves"}``."""
    outputs, labels = scored["outputs"], scored["labels"]
    references = enrollment_references(outputs["val"], labels["val"], users)
    curves = {
        name: prototype_protocol(outputs[split], labels[split], references)
        for name, split in (("train", "train"), ("test_known", "test"))
        if split in outputs
    }
    if scored["unknown_outputs"] is not None:
        curves["unknown"] = pair_protocol(scored["unknown_outputs"], scored["unknown_labels"])
    unknown = scored["unknown_outputs"]
    warmups = {}
    for user in range(users):
        enrolled = outputs["val"][labels["val"] == user]
        if len(enrolled) >= 2:
            warmups[user] = leave_one_out_scores(enrolled)
    warmup = _warmup_of_users(
        warmups,
        cosine_scores(references, outputs["test"]),
        labels["test"],
        cosine_scores(references, unknown) if unknown is not None else None,
        target_tpr,
    )
    return {
        "splits": {name: split_metrics(*pair) for name, pair in curves.items()},
        "warmup": warmup,
        "curves": curves,
    }


def quick_metrics(simulation: Any, dataset: FederatedDataset) -> dict[str, Any]:
    """EER and TPR figures on test_known and unknown (``--eval-every``: curves over rounds); a
    codeword model's by enrollment too (``enrollment_test_known``, ``enrollment_unknown``)."""
    scored = score_splits(simulation, dataset, ("test_known", "unknown"))
    metrics = {name: split_metrics(*pair) for name, pair in scored["curves"].items()}
    if simulation.algorithm.output_kind == "codeword":
        users = len(dataset.clients)
        enrolled = enrollment_splits(scored, users, 0.95)["splits"]
        metrics.update({f"enrollment_{name}": enrolled[name] for name in ("test_known", "unknown")
                        if name in enrolled})  # fmt: skip
    return metrics


def score_run(simulation: Any, dataset: FederatedDataset, target_tpr: float) -> dict[str, Any]:
    """Score a trained model on train / test_known / unknown: ``splits`` (EER, TPR at FPRs),
    ``warmup`` (each user's warm-up threshold at ``target_tpr``, as the SDK sets it), ``leakage``
    (P_leak, ``None`` without class vectors), ``class_row`` (the FedUV paper's protocol for its
    baselines, :func:`class_row_splits`, for methods that verify by class row; else ``None``),
    ``enrollment`` (a codeword model verified by enrollment, :func:`enrollment_splits`; else
    ``None``), ``extra`` (the EERs against the learnt prototypes),
    ``curves`` (genuine and impostor scores per split, of every protocol measured: the
    enrollment and class-row ones named ``"SPLIT, by enrollment"``, ``"SPLIT, class row"``) and
    ``arrays`` (the same, for
    ``scores.npz``)."""
    algorithm = simulation.algorithm
    users = len(dataset.clients)
    scored = score_splits(simulation, dataset, ("train", "test_known", "unknown"))
    outputs, labels = scored["outputs"], scored["labels"]
    unknown_outputs, references = scored["unknown_outputs"], scored["references"]
    protocol, curves = scored["protocol"], scored["curves"]
    score = codeword_scores if algorithm.output_kind == "codeword" else cosine_scores
    splits = {name: split_metrics(*pair) for name, pair in curves.items()}
    # the genuine and impostor scores behind the ROC, for comparisons across runs
    arrays = {
        f"{name}_{kind}": pair[i]
        for name, pair in curves.items()
        for i, kind in enumerate(("genuine", "impostor"))
    }

    # One [samples, users] matrix per split (the SDK scores a stack of references at once).
    val_scores = score(references, outputs["val"])
    warmups = {}
    for user in range(users):
        enrolled = labels["val"] == user
        if algorithm.output_kind == "codeword" or enrolled.sum() < 2:
            warmups[user] = val_scores[enrolled, user]
        else:
            warmups[user] = leave_one_out_scores(outputs["val"][enrolled])
    warmup = _warmup_of_users(
        warmups,
        score(references, outputs["test"]),
        labels["test"],
        score(references, unknown_outputs) if unknown_outputs is not None else None,
        target_tpr,
    )

    codeword = algorithm.output_kind == "codeword"
    enrollment = None
    # every curve the report's figures come from, for roc.png (issue 47: the enrollment curves
    # printed beside the codeword ones were not plotted)
    plotted = dict(curves)
    if codeword:
        enrollment = enrollment_splits(scored, users, target_tpr)
        enrollment_curves = enrollment.pop("curves")
        plotted.update({f"{name}, by enrollment": pair for name, pair in enrollment_curves.items()})
        arrays.update(
            {
                f"enrollment_{name}_{kind}": pair[i]
                for name, pair in enrollment_curves.items()
                for i, kind in enumerate(("genuine", "impostor"))
            }
        )
    extra: dict[str, Any] = {
        "split_protocols": SPLIT_PROTOCOLS["codeword" if codeword else "embedding"]
    }
    leakage, class_row_metrics = None, None
    vectors = algorithm.prototypes(simulation.params, simulation.private, simulation.shared)
    if vectors is not None:
        learnt, seen = (value.detach().cpu().numpy() for value in vectors)
        extra["learnt_prototypes"] = {
            name: {"eer": split_metrics(*protocol(outputs[split], labels[split], learnt))["eer"]}
            for name, split in (("train", "train"), ("test_known", "test"))
        }
        leakage = prototype_leakage(learnt, seen)
        if algorithm.verifies_by_class_row:
            class_row = class_row_splits(scored, learnt)
            plotted.update({f"{name}, class row": pair for name, pair in class_row.items()})
            arrays.update(
                {
                    f"class_row_{name}_{kind}": pair[i]
                    for name, pair in class_row.items()
                    for i, kind in enumerate(("genuine", "impostor"))
                }
            )
            class_row_metrics = {
                "splits": {name: split_metrics(*pair) for name, pair in class_row.items()},
                "warmup": _class_row_warmup(scored, learnt, target_tpr),
            }
    if dataset.name in CLASSIFICATION_DATASETS:
        extra["classification"] = classification_accuracy(
            outputs["test"],
            labels["test"],
            references,
            None if vectors is None else vectors[0].detach().cpu().numpy(),
        )
    return {
        "splits": splits,
        "warmup": warmup,
        "leakage": leakage,
        "class_row": class_row_metrics,
        "enrollment": enrollment,
        "extra": extra,
        "curves": plotted,
        "arrays": arrays,
    }


def classification_accuracy(
    outputs: np.ndarray,
    labels: np.ndarray,
    references: np.ndarray,
    learnt: np.ndarray | None,
) -> dict[str, Any]:
    """Top-1 accuracy on the known classes' test samples (``test_known``), the report's
    ``classification`` section.

    ``accuracy`` classifies by the class vectors the method learnt (FedHide's private prototypes
    ``w_c``: ``argmax_c w_cᵀ f(x)``, the classifier its loss trains; ``null`` for a method without
    them); ``accuracy_references`` by the run's references (the SDK's enrollment prototypes, or
    FedUV's codewords). The FedHide paper says only "classification accuracy using the global
    model on the test set" (Sec. 4.1), so both are reported.
    """
    if outputs.shape[0] == 0:
        nan = float("nan")
        return {"split": "test_known", "accuracy": nan, "accuracy_references": nan, "samples": 0}
    return {
        "split": "test_known",
        "accuracy": None if learnt is None else nearest_prototype_accuracy(outputs, labels, learnt),
        "accuracy_references": nearest_prototype_accuracy(outputs, labels, references),
        "classes": int(references.shape[0]),
        "samples": int(outputs.shape[0]),
    }


def score_trial_list(
    simulation: Any,
    trials: Any,
    wav_root: Path,
    sample_rate: int,
    *,
    progress: bool = False,
) -> dict[str, Any]:
    """FedHide's VoxCeleb1 test protocol (Sec. 4.1) over a trial list: ten 3-s crops of each
    utterance, the mean cosine over all 10×10 crop pairs, EER / minDCF / TPR over the trials.

    Parameters
    ----------
    simulation
        The trained model (its ``outputs``).
    trials
        A :class:`uvtrain.data.trials.TrialList`.
    wav_root
        The folder its paths are relative to (every file is checked before anything is scored).
    sample_rate
        The model's input sample rate; files are decoded and resampled to it by the SDK.
    progress
        Show a progress bar.

    Returns
    -------
    dict
        The report's ``trial_list`` section: ``protocol``, ``list``, ``wav_root``, ``crops``,
        ``crop_seconds``, ``score`` and the :func:`split_metrics` of the trials.
    """
    from uvsdk.errors import MediaError
    from uvsdk.media import load_audio

    from ..data.corpora import MAX_AUDIO_SECONDS
    from ..errors import DatasetError

    files = trials.check_paths(wav_root)

    def load(name: str) -> np.ndarray:
        try:
            signal = load_audio(files[name], sample_rate, max_seconds=MAX_AUDIO_SECONDS)
        except MediaError as error:
            raise DatasetError(f"{files[name]}: {error}") from None
        if signal.size == 0:
            raise DatasetError(f"{files[name]}: no audio in the file")
        return signal

    genuine, impostor = trial_list_protocol(
        trials.labels,
        trials.left,
        trials.right,
        load,
        simulation.outputs,
        sample_rate=sample_rate,
        progress=progress,
    )
    return {
        "protocol": "fedhide-sec4.1: 10 evenly spaced 3-s crops, mean cosine of the 10x10 pairs",
        "list": str(trials.path),
        "wav_root": str(wav_root),
        "crops": TRIAL_CROPS,
        "crop_seconds": TRIAL_CROP_SECONDS,
        **split_metrics(genuine, impostor),
    }
