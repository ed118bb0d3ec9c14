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
    smoothed_losses,
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
    """Eq. (8), S / √(σ² + ε): scores (0.8, 0.9, 0.7) have population variance 0.02 / 3, so the
    divisor is √(0.00666667 + 0.001) = 0.0875595; equal scores (σ = 0) divide by √ε."""
    normalised = local_norm(np.array([[0.8, 0.9, 0.7], [0.5, 0.5, 0.5]]), 0.001)
    assert normalised[0] == pytest.approx([9.136644, 10.278724, 7.994563], rel=1e-6)
    assert normalised[1] == pytest.approx([0.5 / math.sqrt(0.001)] * 3)


def test_a_flat_validators_noise_does_not_pick_the_winner() -> None:
    """Validator 1 prefers candidate 1 (0.8, 0.9, 0.8); validator 2 barely differs between them
    (0.50, 0.49, 0.51). Eq. (8) sums to (29.403, 30.858, 29.709): candidate 1. Dividing centred
    scores by σ + ε instead (−0.692, 0.293, 0.399) let validator 2's noise pick candidate 2."""
    scores = np.array([[0.8, 0.9, 0.8], [0.5, 0.49, 0.51]])
    normalised = local_norm(scores, 0.001)
    assert normalised.sum(axis=0) == pytest.approx([29.402596, 30.858071, 29.708782], rel=1e-6)
    candidates = np.array([[0.5, 0.5], [0.8, 0.2], [0.1, 0.9]])
    assert fv_update(np.array([0.5, 0.5]), candidates, normalised, 0.01)[1] == 1


def test_moving_norm_by_hand() -> None:
    """Eqs. (9)–(11). Step 1 starts at the step's own statistics (mean 0.8, var 0.02/3), so it
    equals Local Norm. Step 2, scores (0.9, 1.0, 0.8), γ = 0.01: μ = 0.99·0.8 + 0.01·0.9 = 0.801;
    spread = mean of (0.099², 0.199², 0.001²) = 0.049403 / 3 = 0.01646767; ν = 0.99·0.00666667 +
    0.01·0.01646767 = 0.00676467; the first score is 0.9 / √(0.00676467 + 0.001) = 10.21365."""
    norm = MovingNorm(gamma=0.01, epsilon=0.001)
    first = norm(np.array([[0.8, 0.9, 0.7]]))
    assert first[0] == pytest.approx([9.136644, 10.278724, 7.994563], rel=1e-6)
    second = norm(np.array([[0.9, 1.0, 0.8]]))
    assert norm.mean == pytest.approx([0.801])
    assert norm.var == pytest.approx([0.00676467], rel=1e-5)
    assert second[0] == pytest.approx([10.21365, 11.34850, 9.07880], rel=1e-5)


def test_the_norm_is_chosen_by_fv_norm() -> None:
    scores = np.array([[0.8, 0.9, 0.7]])
    assert FedFace().normaliser()(scores) == pytest.approx(local_norm(scores, 0.001))
    assert isinstance(FedFace(fv_norm="moving").normaliser(), MovingNorm)
    assert FedFace(fv_norm="none").normaliser()(scores) == pytest.approx(scores)


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


def test_candidates_are_uniform_on_the_simplex() -> None:
    """Alg. 2, line 4: uniform on the simplex is Dirichlet(1, 1, 1), whose coordinates are
    Beta(1, 2): mean 1/3, variance 2/36 = 0.0556, P(smallest < 0.1) = 1 − (1 − 0.3)² = 0.51.
    Normalised i.i.d. uniforms (variance 0.032, P = 0.32) crowd toward equal weights."""
    drawn = candidate_weightings(np.full(3, 1 / 3), 20001, np.random.default_rng(1))[1:]
    assert drawn.mean(axis=0) == pytest.approx([1 / 3] * 3, abs=0.01)
    assert drawn.var(axis=0) == pytest.approx([2 / 36] * 3, abs=0.002)
    assert np.mean(drawn.min(axis=1) < 0.1) == pytest.approx(0.51, abs=0.015)


def test_smoothed_losses_by_hand() -> None:
    """Table 1's smoothing, factor 0.99: the first round starts at its first step (2.0), then
    2.0 → 0.99·2 + 0.01·2 = 2.0 → 0.99·2 + 0.01·1 = 1.99; the next round continues from 1.99:
    0.99·1.99 + 0.01·0.99 = 1.98."""
    first = smoothed_losses(None, np.array([[2.0, 1.0], [1.0, 1.0]]))
    assert first == pytest.approx([1.99, 1.0])
    assert smoothed_losses(first, np.array([[0.99], [1.0]])) == pytest.approx([1.98, 1.0])
    with pytest.raises(ValueError, match="steps"):
        smoothed_losses(None, np.array([1.0, 2.0]))


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
