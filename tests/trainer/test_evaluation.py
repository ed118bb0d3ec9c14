"""The evaluation module against values computed by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import uvtrain.io
from uvtrain.evaluation import (
    class_row_protocol,
    codeword_protocol,
    equal_error_rate,
    make_report,
    min_dcf,
    pair_protocol,
    plot_det,
    plot_metric_over_rounds,
    plot_roc,
    prototype_leakage,
    prototype_protocol,
    roc_curve,
    split_metrics,
    tpr_at_fpr,
    warmup_evaluation,
    write_report,
)

# Scores sorted: 0.9 G, 0.8 G, 0.75 I, 0.7 G, 0.2 I, 0.1 I.
GENUINE = [0.9, 0.8, 0.7]
IMPOSTOR = [0.1, 0.2, 0.75]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_roc_curve_by_hand() -> None:
    fpr, tpr, thresholds = roc_curve(GENUINE, IMPOSTOR)
    np.testing.assert_array_equal(thresholds, [np.inf, 0.9, 0.8, 0.75, 0.7, 0.2, 0.1])
    np.testing.assert_allclose(fpr, [0, 0, 0, 1 / 3, 1 / 3, 2 / 3, 1])
    np.testing.assert_allclose(tpr, [0, 1 / 3, 2 / 3, 2 / 3, 1, 1, 1])


def test_roc_curve_merges_ties_into_one_threshold() -> None:
    fpr, tpr, thresholds = roc_curve([0.5, 0.5, 0.9], [0.5, 0.1])
    np.testing.assert_array_equal(thresholds, [np.inf, 0.9, 0.5, 0.1])
    np.testing.assert_allclose(fpr, [0, 0, 0.5, 1])
    np.testing.assert_allclose(tpr, [0, 1 / 3, 1, 1])


def test_roc_curve_refuses_empty_or_nan() -> None:
    with pytest.raises(ValueError):
        roc_curve([], [0.1])
    with pytest.raises(ValueError):
        roc_curve([0.2, math.nan], [0.1])


def test_eer_by_hand() -> None:
    # At threshold 0.75: FPR = 1/3 (0.75 accepted), FNR = 1/3 (0.7 rejected).
    assert equal_error_rate(GENUINE, IMPOSTOR) == pytest.approx(1 / 3)
    # Perfectly separated.
    assert equal_error_rate([0.9, 0.8], [0.1, 0.2]) == 0.0
    assert equal_error_rate([0.9, 0.8], [0.8 - 1e-9]) == 0.0
    # Interpolated: (FPR, FNR) goes (1/2, 2/3) -> (1/2, 1/3) across the diagonal at 1/2.
    assert equal_error_rate([0.9, 0.5, 0.4], [0.6, 0.2]) == pytest.approx(0.5)
    # One tied pair: the segment (0, 1) -> (1, 0) crosses at 1/2.
    assert equal_error_rate([0.5], [0.5]) == pytest.approx(0.5)
    # Genuine [0.9, 0.3], impostor [0.6, 0.5, 0.4, 0.2]: (FPR, FNR) at 0.4 is (3/4, 1/2), at 0.3
    # (3/4, 0); at 0.9 (0, 1/2), at 0.6 (1/4, 1/2), at 0.5 (1/2, 1/2): FNR = FPR = 1/2 there.
    assert equal_error_rate([0.9, 0.3], [0.6, 0.5, 0.4, 0.2]) == pytest.approx(0.5)
    # Genuine [0.9, 0.7], impostor [0.8]: points (0, 1/2) -> (1, 1/2) at 0.8, crossing at 1/2.
    assert equal_error_rate([0.9, 0.7], [0.8]) == pytest.approx(0.5)
    # Genuine [1, 0.6, 0.5, 0.4], impostor [0.55]: at 1 (0, 3/4), at 0.6 (0, 1/2), at 0.55 (1, 1/2):
    # the gap goes 1/2 -> -1/2, so t = 1/2 and FPR = 1/2.
    assert equal_error_rate([1.0, 0.6, 0.5, 0.4], [0.55]) == pytest.approx(0.5)


def test_eer_of_identical_distributions_is_about_one_half() -> None:
    rng = np.random.default_rng(3)
    assert equal_error_rate(rng.normal(size=4000), rng.normal(size=4000)) == pytest.approx(
        0.5, abs=0.03
    )


def test_tpr_at_fpr_by_hand() -> None:
    assert tpr_at_fpr(GENUINE, IMPOSTOR, 0.0) == pytest.approx(2 / 3)
    assert tpr_at_fpr(GENUINE, IMPOSTOR, 0.01) == pytest.approx(2 / 3)
    assert tpr_at_fpr(GENUINE, IMPOSTOR, 0.3) == pytest.approx(2 / 3)
    assert tpr_at_fpr(GENUINE, IMPOSTOR, 1 / 3) == 1.0
    assert tpr_at_fpr(GENUINE, IMPOSTOR, 1.0) == 1.0
    # A top impostor: nothing can be accepted at FPR 0.
    assert tpr_at_fpr([0.5, 0.4], [0.9, 0.1], 0.1) == 0.0
    with pytest.raises(ValueError):
        tpr_at_fpr(GENUINE, IMPOSTOR, 1.5)


def test_min_dcf_by_hand() -> None:
    # (FNR, FPR) points: (1,0) (2/3,0) (1/3,0) (1/3,1/3) (0,1/3) (0,2/3) (0,1).
    # p = 0.01: the cost at (1/3, 0) is 0.01/3; C_default = 0.01.
    assert min_dcf(GENUINE, IMPOSTOR) == pytest.approx(1 / 3)
    # p = 0.5: min(FNR + FPR) / 2 = (1/3)/2, C_default = 0.5.
    assert min_dcf(GENUINE, IMPOSTOR, p_target=0.5) == pytest.approx(1 / 3)
    # p = 0.5, C_fa = 10: C_default = 0.5; best point (1/3, 0): 0.5/3 -> 1/3.
    assert min_dcf(GENUINE, IMPOSTOR, p_target=0.5, c_fa=10.0) == pytest.approx(1 / 3)
    # p = 0.5, C_miss = 10: C_default = 0.5; (0, 1/3): 0.5/3 -> 1/3; (1/3, 0): 5/3 -> worse.
    assert min_dcf(GENUINE, IMPOSTOR, p_target=0.5, c_miss=10.0) == pytest.approx(1 / 3)
    # p = 0.9 with genuine below all impostors: best is a trivial system, so 1.
    assert min_dcf([0.1], [0.9], p_target=0.9) == pytest.approx(1.0)
    assert min_dcf([0.9, 0.8], [0.1]) == 0.0


def test_split_metrics_shape_and_empty_sets() -> None:
    metrics = split_metrics(GENUINE, IMPOSTOR)
    assert metrics == {
        "eer": pytest.approx(1 / 3),
        "tpr_at_fpr": {"0.01": pytest.approx(2 / 3), "0.1": pytest.approx(2 / 3)},
        "min_dcf": pytest.approx(1 / 3),
        "genuine": 3,
        "impostor": 3,
    }
    empty = split_metrics(GENUINE, [])
    assert math.isnan(empty["eer"]) and math.isnan(empty["tpr_at_fpr"]["0.1"])
    assert (empty["genuine"], empty["impostor"]) == (3, 0)


# Codewords of 3 users, n = 4 (rows are users).
CODEWORDS = np.array([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1]], dtype=float)


def test_codeword_protocol_by_hand() -> None:
    outputs = np.array(
        [
            [2.0, 2.0, 2.0, 2.0],  # user 0; rescaled (1,1,1,1): scores 1, 0, 0
            [1.0, 0.0, 0.0, 0.0],  # user 1; rescaled (2,0,0,0): scores 0.5, 0.5, 0.5
            [3.0, -3.0, 3.0, -3.0],  # user 1; rescaled (1,-1,1,-1): scores 0, 1, 0
            [0.0, 0.0, 0.0, 5.0],  # user 2; rescaled (0,0,0,2): scores 0.5, -0.5, -0.5
        ]
    )
    labels = np.array([0, 1, 1, 2])
    genuine, impostor = codeword_protocol(outputs, labels, CODEWORDS)
    np.testing.assert_allclose(genuine, [1.0, 0.5, 1.0, -0.5])
    # Sample-major, the other users in order.
    np.testing.assert_allclose(impostor, [0, 0, 0.5, 0.5, 0, 0, 0.5, -0.5], atol=1e-12)

    unknown = np.array([[1.0, 1.0, -1.0, -1.0], [0.0, 1.0, 0.0, 0.0]])
    genuine, impostor = codeword_protocol(
        outputs, labels, CODEWORDS, impostor_outputs=unknown, impostor_labels=np.array([7, 8])
    )
    np.testing.assert_allclose(genuine, [1.0, 0.5, 1.0, -0.5])
    # Every unknown sample against every known codeword.
    np.testing.assert_allclose(impostor, [0, 0, 1, 0.5, -0.5, 0.5], atol=1e-12)


def test_codeword_protocol_refuses_bad_labels() -> None:
    with pytest.raises(ValueError):
        codeword_protocol(np.ones((2, 4)), np.array([0, 3]), CODEWORDS)
    with pytest.raises(ValueError):
        codeword_protocol(np.ones((2, 5)), np.array([0, 1]), CODEWORDS)
    with pytest.raises(ValueError):
        codeword_protocol(
            np.ones((1, 4)),
            np.array([0]),
            CODEWORDS,
            impostor_outputs=np.ones((2, 4)),
            impostor_labels=np.array([1]),
        )


def test_prototype_protocol_by_hand() -> None:
    prototypes = np.array([[1.0, 0.0], [0.0, 2.0]])
    embeddings = np.array([[3.0, 0.0], [1.0, 1.0], [0.0, -1.0]])
    labels = np.array([0, 1, 1])
    s = 1 / math.sqrt(2)
    genuine, impostor = prototype_protocol(embeddings, labels, prototypes)
    np.testing.assert_allclose(genuine, [1.0, s, -1.0])
    np.testing.assert_allclose(impostor, [0.0, s, 0.0], atol=1e-12)
    genuine, impostor = prototype_protocol(
        embeddings, labels, prototypes, impostor_embeddings=np.array([[-1.0, 1.0]])
    )
    np.testing.assert_allclose(impostor, [-s, s])


# Two known users' learnt class rows (w_0 not unit: the protocol scores cosines) and their
# unit embeddings; the cosines are written beside each sample.
ROWS = np.array([[2.0, 0.0], [0.0, 1.0]])
ROW_SAMPLES = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [0.6, 0.8]])  # vs w_0, w_1:
ROW_LABELS = np.array([0, 0, 1, 1])  # (1, 0), (0.6, 0.8), (0, 1), (0.6, 0.8)


def test_class_row_protocol_by_hand() -> None:
    genuine, impostor = class_row_protocol(ROW_SAMPLES, ROW_LABELS, ROWS)
    np.testing.assert_allclose(genuine, [1.0, 0.6, 1.0, 0.8])
    np.testing.assert_allclose(impostor, [0.0, 0.8, 0.0, 0.6], atol=1e-12)
    # τ in (0.6, 0.8]: one genuine trial of four rejected (0.6), one impostor accepted (0.8)
    assert equal_error_rate(genuine, impostor) == pytest.approx(0.25)
    # the logit w_uᵀ z would give w_0's samples 2.0 and 1.2: the row is normalised
    assert genuine.max() == pytest.approx(1.0)
    # unseen identities (no row of their own) against every known row
    unseen = np.array([[-1.0, 0.0], [0.8, -0.6]])
    _, impostor = class_row_protocol(
        ROW_SAMPLES, ROW_LABELS, ROWS, impostor_embeddings=unseen, impostor_labels=np.array([7, 8])
    )
    np.testing.assert_allclose(impostor, [-1.0, 0.0, 0.8, -0.6], atol=1e-12)


def test_class_row_splits_score_unknown_as_impostors_never_as_pairs() -> None:
    from uvtrain.evaluation.scoring import class_row_splits

    unseen = np.array([[-1.0, 0.0], [0.8, -0.6], [-0.6, -0.8]])
    scored = {
        "outputs": {"train": ROW_SAMPLES[:2], "test": ROW_SAMPLES},
        "labels": {"train": np.array([0, 1]), "test": ROW_LABELS},
        "unknown_outputs": unseen,
        "unknown_labels": np.array([0, 0, 1]),  # two unseen people
    }
    curves = class_row_splits(scored, ROWS)
    assert set(curves) == {"train", "test_known", "unknown"}
    np.testing.assert_allclose(curves["train"][0], [1.0, 0.8])  # (0.6, 0.8) now user 1's
    np.testing.assert_allclose(curves["unknown"][0], [1.0, 0.6, 1.0, 0.8])  # test_known's
    # 3 unseen samples × 2 rows; no pair among the unseen samples is a trial
    np.testing.assert_allclose(curves["unknown"][1], [-1.0, 0.0, 0.8, -0.6, -0.6, -0.8])
    # τ in (0.6, 0.8]: FPR 1/6 (the 0.8), FNR 1/4; at τ = 0.6 FNR is 0 at the same FPR, so the
    # rates cross at 1/6
    assert equal_error_rate(*curves["unknown"]) == pytest.approx(1 / 6)


def test_pair_protocol_counts_and_values() -> None:
    # Identities of sizes 3, 2, 1: genuine pairs 3 + 1 = 4, impostor pairs 15 - 4 = 11.
    labels = np.array([5, 9, 5, 2, 5, 9])
    embeddings = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [-1.0, 0.0], [3.0, 0.0], [0, 3.0]])
    genuine, impostor = pair_protocol(embeddings, labels)
    assert (genuine.size, impostor.size) == (4, 11)
    # Identity 5 is all along +x, identity 9 along +y: every genuine cosine is 1.
    np.testing.assert_allclose(genuine, 1.0)
    # Impostors: 2 vs 5 (3 pairs, -1), 2 vs 9 (2 pairs, 0), 5 vs 9 (6 pairs, 0).
    np.testing.assert_allclose(np.sort(impostor), [-1, -1, -1] + [0] * 8, atol=1e-12)


def test_pair_protocol_subsamples_deterministically() -> None:
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(60, 8))
    labels = np.repeat(np.arange(6), 10)  # 6 * 45 = 270 genuine, 1770 - 270 = 1500 impostor
    full_genuine, full_impostor = pair_protocol(embeddings, labels)
    assert (full_genuine.size, full_impostor.size) == (270, 1500)
    genuine, impostor = pair_protocol(embeddings, labels, max_pairs=100, seed=4)
    assert (genuine.size, impostor.size) == (100, 100)
    again = pair_protocol(embeddings, labels, max_pairs=100, seed=4)
    np.testing.assert_array_equal(genuine, again[0])
    np.testing.assert_array_equal(impostor, again[1])
    # A subset of the full sets, without repeats.
    assert np.isin(genuine, full_genuine).all() and np.unique(genuine).size == 100
    assert np.isin(impostor, full_impostor).all() and np.unique(impostor).size == 100
    other = pair_protocol(embeddings, labels, max_pairs=100, seed=5)
    assert not np.array_equal(genuine, other[0])


def test_warmup_evaluation_by_hand() -> None:
    val = {
        "a": np.array([0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 1.0]),  # q = 0.8 -> tau 0.2
        "b": np.array([0.6, 0.7, 0.8, 0.9, 0.5]),  # floor(5 * 0.2) = 1 -> tau 0.5
        "c": np.array([]),  # no warm-up scores: left out
    }
    genuine = {"a": [0.2, 0.15, 0.9], "b": [0.5, 0.49], "c": [1.0]}
    impostor = {"a": [0.25, 0.1], "b": [0.6, 0.1, 0.0]}
    result = warmup_evaluation(val, genuine, impostor, target_tpr=0.8)
    # Genuine accepted: a 2/3 (0.2, 0.9), b 1/2 (0.5) -> 3/5. Impostor: a 1/2, b 1/3 -> 2/5.
    assert result == {
        "target_tpr": 0.8,
        "tpr": pytest.approx(3 / 5),
        "fpr": pytest.approx(2 / 5),
        "users": 2,
    }
    assert math.isnan(warmup_evaluation({"a": [0.5]}, {}, {})["tpr"])


def test_prototype_leakage() -> None:
    rng = np.random.default_rng(1)
    private = rng.normal(size=(20, 16))
    assert prototype_leakage(private, private) == 1.0
    assert prototype_leakage(private, 3.0 * private) == 1.0  # normalised first
    chance = np.mean([prototype_leakage(private, rng.normal(size=(20, 16))) for _ in range(100)])
    assert chance == pytest.approx(1 / 20, abs=0.03)
    # By hand: client 1's shared vector lies nearest client 0's prototype.
    eye = np.eye(3)
    shared = np.array([[1.0, 0.1, 0.0], [1.0, 0.2, 0.0], [0.0, 0.3, 1.0]])
    assert prototype_leakage(eye, shared) == pytest.approx(2 / 3)


def test_plots_write_png(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    curves = {
        "train": (rng.normal(2, 1, 300), rng.normal(0, 1, 3000)),
        "unknown": (rng.normal(1, 1, 300), rng.normal(0, 1, 3000)),
    }
    paths = [
        plot_roc(curves, tmp_path / "roc.png", "ROC"),
        plot_det(curves, tmp_path / "plots" / "det.png", "DET"),
        plot_metric_over_rounds(
            [1, 2, 3],
            {"eer": [0.3, None, 0.1], "tpr": [0.5, 0.6, 0.9]},
            tmp_path / "eer.png",
            "EER",
        ),
    ]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 1000
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["det.png", "eer.png", "plots", "roc.png"]


def test_make_report_has_the_design_shape() -> None:
    splits = {
        "train": split_metrics(GENUINE, IMPOSTOR),
        "test_known": split_metrics([0.9, 0.8], [0.1]),
        "unknown": split_metrics(GENUINE, []),
    }
    warmup = {"target_tpr": 0.95, "tpr": 0.94, "fpr": 0.03, "users": 10}
    report = make_report(
        "feduv",
        "synth-voices",
        200,
        splits,
        warmup,
        None,
        {"client_updates_per_s": 12.5, "device": "cpu"},
        config={"lr": 0.1},
    )

    def keys(value: object) -> object:
        if isinstance(value, dict):
            return {key: keys(item) for key, item in value.items()}
        return None

    split_shape = {"eer": None, "tpr_at_fpr": {"0.01": None, "0.1": None}, "min_dcf": None}
    assert keys(report) == {
        "method": None,
        "dataset": None,
        "rounds": None,
        "splits": {"train": split_shape, "test_known": split_shape, "unknown": split_shape},
        "warmup": {"target_tpr": None, "tpr": None, "fpr": None},
        "leakage": None,
        "throughput": {"client_updates_per_s": None, "device": None},
        "class_row": None,
        "enrollment": None,
        "trials": {
            "train": {"genuine": None, "impostor": None},
            "test_known": {"genuine": None, "impostor": None},
            "unknown": {"genuine": None, "impostor": None},
            "warmup_users": None,
        },
        "config": {"lr": None},
    }
    assert list(report)[:7] == [
        "method",
        "dataset",
        "rounds",
        "splits",
        "warmup",
        "leakage",
        "throughput",
    ]
    assert (report["method"], report["rounds"], report["leakage"]) == ("feduv", 200, None)
    assert report["splits"]["test_known"]["eer"] == 0.0
    assert report["trials"]["unknown"] == {"genuine": 3, "impostor": 0}
    with pytest.raises(ValueError):
        make_report("feduv", "x", 1, {"test-known": {}}, warmup, None, {})


def test_make_report_keeps_the_class_row_protocol_apart() -> None:
    """softmax/FedAwS: the class-row protocol in its own section, in the shape of ``splits``."""
    enrolled = {"test_known": split_metrics([0.9, 0.8], [0.1]), "unknown": split_metrics([1], [0])}
    rows = {
        "test_known": split_metrics(GENUINE, IMPOSTOR),
        "unknown": split_metrics([0.9, 0.8], [0.85, 0.1]),
    }
    warmup = {"target_tpr": 0.95, "tpr": 0.9, "fpr": 0.1, "users": 3}
    row_warmup = {"target_tpr": 0.95, "tpr": 0.5, "fpr": 0.25, "users": 2}
    report = make_report(
        "softmax",
        "x",
        1,
        enrolled,
        warmup,
        1.0,
        {},
        class_row={"splits": rows, "warmup": row_warmup},
    )
    section = report["class_row"]
    assert section["protocol"] == "class-row"
    assert set(section["splits"]) == {"train", "test_known", "unknown"}
    assert section["splits"]["test_known"]["eer"] == pytest.approx(1 / 3)
    assert section["splits"]["unknown"]["eer"] == pytest.approx(0.5)
    assert math.isnan(section["splits"]["train"]["eer"])  # not given: null, as in splits
    assert section["warmup"] == {"target_tpr": 0.95, "tpr": 0.5, "fpr": 0.25}
    assert section["trials"]["unknown"] == {"genuine": 2, "impostor": 2}
    assert section["trials"]["warmup_users"] == 2
    # the enrollment protocol's figures are untouched by the class-row ones
    assert report["splits"]["test_known"]["eer"] == 0.0 and report["splits"]["unknown"]["eer"] == 0
    assert report["warmup"]["tpr"] == 0.9 and report["trials"]["warmup_users"] == 3


def test_write_report_nulls_nan_and_is_atomic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run" / "report.json"
    report = make_report(
        "fedhide",
        "orl",
        3,
        {"train": split_metrics(GENUINE, IMPOSTOR)},
        {"target_tpr": 0.95, "tpr": np.float32(0.5), "fpr": math.nan},
        np.float64(0.25),
        {"client_updates_per_s": math.inf, "device": "cuda"},
    )
    write_report(path, report)
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert text.startswith('{\n  "method": "fedhide"')  # indent 2
    loaded = json.loads(text)
    assert loaded["splits"]["unknown"]["eer"] is None
    assert loaded["warmup"] == {"target_tpr": 0.95, "tpr": 0.5, "fpr": None}
    assert loaded["throughput"] == {"client_updates_per_s": None, "device": "cuda"}
    assert loaded["leakage"] == 0.25
    assert loaded["splits"]["train"]["eer"] == pytest.approx(1 / 3)

    # A failure at the last step leaves the old report whole and no temporary file behind.
    def fail(source: str, target: str) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(uvtrain.io.os, "replace", fail)  # where write_json's atomic write is
    with pytest.raises(OSError):
        write_report(path, {"method": "other"})
    assert path.read_text() == text
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]
    # So does a report that cannot be serialised.
    monkeypatch.undo()
    with pytest.raises(TypeError):
        write_report(path, {"bad": object()})
    assert path.read_text() == text
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]


def test_a_codeword_model_is_scored_by_enrollment_without_its_codewords() -> None:
    """FedUV by enrollment (issue 34): outputs that cluster by person but carry nothing of the
    trained codewords verify by enrollment (EER near 0) though not by codeword (near 0.5)."""
    from uvtrain.evaluation.scoring import enrollment_splits

    rng = np.random.default_rng(0)
    users, dim = 12, 63
    centres = rng.choice([-1.0, 1.0], size=(users + 4, dim))

    def samples(people: range, count: int) -> tuple[np.ndarray, np.ndarray]:
        labels = np.repeat(np.arange(len(people)), count)
        values = centres[list(people)][labels] + 0.6 * rng.standard_normal((len(labels), dim))
        return values, labels

    outputs, labels = {}, {}
    for split, count in (("train", 6), ("val", 5), ("test", 5)):
        outputs[split], labels[split] = samples(range(users), count)
    unknown, unknown_labels = samples(range(users, users + 4), 6)
    scored = {"outputs": outputs, "labels": labels, "unknown_outputs": unknown,
              "unknown_labels": unknown_labels}  # fmt: skip
    enrolled = enrollment_splits(scored, users, 0.95)
    assert enrolled["splits"]["test_known"]["eer"] < 0.02
    assert enrolled["splits"]["unknown"]["eer"] < 0.05
    assert enrolled["warmup"]["users"] == users and enrolled["warmup"]["tpr"] > 0.8
    codewords = rng.choice([-1.0, 1.0], size=(users, dim))  # the secret targets, never learnt
    genuine, impostor = codeword_protocol(outputs["test"], labels["test"], codewords)
    assert split_metrics(genuine, impostor)["eer"] > 0.3
    report = make_report("feduv", "x", 1, {}, {}, None, {}, enrollment=enrolled)
    assert report["enrollment"]["protocol"] == "enrollment"
    assert report["enrollment"]["splits"]["unknown"]["eer"] < 0.05
    assert report["enrollment"]["trials"]["warmup_users"] == users
