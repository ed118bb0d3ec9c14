"""FedFace's maths (uvtrain.algorithms.fedface) against values computed by hand: the margin losses,
Partially Federated Momentum, Federated Validation, and its parameters checking themselves. The
cross-silo trainer that runs them is tests/trainer/test_crosssilo.py's."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from uvtrain.algorithms.fedface import (
    ArcFace,
    CosFace,
    FedFace,
    MovingNorm,
    best_threshold_accuracy,
    candidate_weightings,
    fv_update,
    head_loss,
    local_norm,
    make_margin_loss,
    pfm_backbone_step,
    server_momentum,
)
from uvtrain.config import ConfigError, RunConfig

# -- margin losses ---------------------------------------------------------------------------------


def test_arcface_logits_follow_the_formula() -> None:
    cosine = torch.tensor([[0.9, 0.1, -0.3], [0.2, -0.95, 0.5], [0.0, 0.3, 0.7]])
    labels = torch.tensor([0, 1, 2])
    logits = ArcFace(64.0, 0.5).logits(cosine, labels)
    for row, label in enumerate(labels.tolist()):
        for column in range(3):
            c = float(cosine[row, column])
            if column != label:
                expected = 64.0 * c
            elif math.acos(c) + 0.5 <= math.pi:
                expected = 64.0 * math.cos(math.acos(c) + 0.5)  # s cos(θ + m)
            else:  # θ + m beyond π: insightface's continuation s (cos θ − m sin m)
                expected = 64.0 * (c - math.sin(math.pi - 0.5) * 0.5)
            assert float(logits[row, column]) == pytest.approx(expected, abs=1e-4)
    # row 1's label has cos = −0.95: θ = 2.82 rad, θ + m > π, so the fallback was exercised
    assert math.acos(-0.95) + 0.5 > math.pi


def test_cosface_logits_follow_the_formula() -> None:
    cosine = torch.tensor([[0.9, 0.1], [0.2, -0.4]])
    logits = CosFace(64.0, 0.35).logits(cosine, torch.tensor([1, 0]))
    expected = 64.0 * torch.tensor([[0.9, 0.1 - 0.35], [0.2 - 0.35, -0.4]])
    torch.testing.assert_close(logits, expected)


def test_margin_losses_default_to_the_papers_margins() -> None:
    assert make_margin_loss("arcface") == ArcFace(64.0, 0.5)
    assert make_margin_loss("cosface") == CosFace(64.0, 0.35)
    assert make_margin_loss("cosface", 30.0, 0.2) == CosFace(30.0, 0.2)
    with pytest.raises(ValueError, match="arcface or cosface"):
        make_margin_loss("sphereface")


def test_head_loss_is_the_cross_entropy_of_the_margin_logits() -> None:
    torch.manual_seed(0)
    centres, embeddings = torch.randn(4, 6), torch.randn(3, 6)
    labels = torch.tensor([2, 0, 3])
    loss = head_loss(CosFace(64.0, 0.35), centres, embeddings, labels)
    unit = nn.functional.normalize
    cosine = unit(embeddings, dim=1) @ unit(centres, dim=1).T
    logits = 64.0 * (cosine - 0.35 * nn.functional.one_hot(labels, 4))
    expected = -torch.log_softmax(logits, dim=1)[torch.arange(3), labels].mean()
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)


# -- Partially Federated Momentum ------------------------------------------------------------------


def test_pfm_two_parties_two_steps_by_hand() -> None:
    """Party p minimises ½ a_p (θ − b_p)², a = (1, 2), b = (0, 3); θ = 1, M = 0.5, μ = 0.9,
    η = 0.1, K = 2, w = (½, ½). Worked by hand (eq. 4: θ ← θ − η (g + μ M / K), μ M / K = 0.225):

    party 1: g = 1        → θ = 1 − 0.1·1.225       = 0.8775
             g = 0.8775   → θ = 0.8775 − 0.1·1.1025 = 0.76725
    party 2: g = −4       → θ = 1 + 0.1·3.775       = 1.3775
             g = −3.245   → θ = 1.3775 + 0.1·3.02   = 1.6795
    Θ = ½ (0.76725 + 1.6795) = 1.223375;  M = (1 − 1.223375) / 0.1 = −2.23375   (eqs. 5, 6)
    """
    theta, momentum = torch.tensor(1.0), torch.tensor(0.5)
    finals = []
    for a, b, path in ((1.0, 0.0, (0.8775, 0.76725)), (2.0, 3.0, (1.3775, 1.6795))):
        local = theta.clone()
        for expected in path:
            local = pfm_backbone_step(local, a * (local - b), momentum, 2, 0.1, 0.9)
            assert float(local) == pytest.approx(expected, abs=1e-6)
        finals.append(local)
    aggregate = FedFace().aggregate({"theta": torch.stack(finals)}, torch.tensor([0.5, 0.5]))
    assert float(aggregate["theta"]) == pytest.approx(1.223375, abs=1e-6)
    assert float(server_momentum(theta, aggregate["theta"], 0.1)) == pytest.approx(
        -2.23375, abs=1e-5
    )


# -- Federated Validation --------------------------------------------------------------------------


def test_local_norm_by_hand() -> None:
    """Scores (0.8, 0.9, 0.7): mean 0.8, population std √(0.02 / 3) = 0.0816497; ε = 0.001."""
    normalised = local_norm(np.array([[0.8, 0.9, 0.7], [0.5, 0.5, 0.5]]), 0.001)
    assert normalised[0] == pytest.approx([0.0, 0.1 / 0.0826497, -0.1 / 0.0826497], rel=1e-5)
    assert normalised[1] == pytest.approx([0.0, 0.0, 0.0])  # equal scores: no preference


def test_moving_norm_by_hand() -> None:
    """Step 1 starts at the step's own statistics (mean 0.8, var 0.02/3). Step 2, scores
    (0.9, 1.0, 0.8), γ = 0.01: mean = 0.99·0.8 + 0.01·0.9 = 0.801; spread = mean of
    (0.099², 0.199², 0.001²) = 0.049403 / 3 = 0.01646767; var = 0.99·0.00666667 + 0.01·0.01646767
    = 0.00676467; the first score normalises to 0.099 / (√0.00676467 + 0.001) = 1.18923."""
    norm = MovingNorm(gamma=0.01, epsilon=0.001)
    first = norm(np.array([[0.8, 0.9, 0.7]]))
    assert first[0] == pytest.approx([0.0, 0.1 / 0.0826497, -0.1 / 0.0826497], rel=1e-5)
    second = norm(np.array([[0.9, 1.0, 0.8]]))
    assert norm.mean == pytest.approx([0.801])
    assert norm.var == pytest.approx([0.00676467], rel=1e-5)
    assert second[0, 0] == pytest.approx(1.18923, rel=1e-4)


def test_fv_update_by_hand() -> None:
    """Candidate 2 wins (normalised sums 0, 2, −2): w = 0.99·(½, ½) + 0.01·(0.8, 0.2)."""
    candidates = np.array([[0.5, 0.5], [0.8, 0.2], [0.1, 0.9]])
    normalised = np.array([[0.0, 1.0, -1.0], [0.0, 1.0, -1.0]])
    updated, best = fv_update(np.array([0.5, 0.5]), candidates, normalised, 0.01)
    assert best == 1
    assert updated == pytest.approx([0.503, 0.497])
    # a tie keeps the current weighting (the first candidate)
    same, best = fv_update(np.array([0.5, 0.5]), candidates, np.zeros((2, 3)), 0.01)
    assert best == 0 and same == pytest.approx([0.5, 0.5])


def test_candidates_start_with_the_current_weighting() -> None:
    current = np.array([0.2, 0.3, 0.5])
    candidates = candidate_weightings(current, 3, np.random.default_rng(0))
    assert candidates.shape == (3, 3)
    assert candidates[0] == pytest.approx(current)
    assert candidates.sum(axis=1) == pytest.approx([1, 1, 1])
    assert (candidates >= 0).all()


def test_best_threshold_accuracy_by_hand() -> None:
    same = np.array([False, False, True, True])
    assert best_threshold_accuracy(np.array([0.1, 0.2, 0.8, 0.9]), same, folds=2) == 1.0
    # folds {0.1 F, 0.4 T} and {0.6 F, 0.9 T}: the threshold of one (0.75, 0.25) misclassifies
    # one pair of the other: accuracy ½ on each
    assert best_threshold_accuracy(np.array([0.1, 0.6, 0.4, 0.9]), same, folds=2) == 0.5


# -- parameters ------------------------------------------------------------------------------------


def _flat(**values) -> RunConfig:
    """A config from the flat keys a user writes."""
    return RunConfig.from_flat(values)


def test_fedface_config_is_checked() -> None:
    _flat(method="fedface", dataset="x", pfm=False, fv=True)
    for bad in (
        {"margin_loss": "softmax"},
        {"fv_norm": "global"},
        {"fv_candidates": 1},
        {"parties": 0},
        {"pfm": 1},  # not a bool
        {"momentum": 1.0},
    ):
        with pytest.raises(ConfigError):
            _flat(method="fedface", dataset="x", **bad)
