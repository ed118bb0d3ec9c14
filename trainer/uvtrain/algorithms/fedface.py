"""FedFace (Bai, Wu, Shen, Li and Zhou, "Federated Face Recognition", 2021): cross-silo training of
one recognition backbone by a few organisations (parties), each with many identities and its own
classifier. Equation, algorithm, section and table numbers below are the paper's.

The maths of the method lives here as pure functions of tensors; :mod:`uvtrain.crosssilo` runs it.

**Margin losses** (Sec. 4.2; passed into the head, the backbone never sees them). For the unit
embedding ``f`` and the unit class centres ``W̃`` of a party's head, ``cos θ_j = W̃_jᵀ f``; the
logits are ``s cos θ_j`` for every class but the label ``y``, whose logit carries the margin:

* ArcFace (Deng et al., CVPR 2019), s = 64, m = 0.5: ``s cos(θ_y + m)`` (where ``θ_y + m > π``,
  insightface's monotone continuation ``s (cos θ_y − m sin m)``);
* CosFace (Wang et al., CVPR 2018), s = 64, m = 0.35: ``s (cos θ_y − m)``;

and the loss is the cross-entropy of those logits.

**Partially Federated Momentum** (PFM, Sec. 3.1, eqs. 1–6, Alg. 1). FedAvg with local momentum
gives every party its own buffer, which drifts from the centralised one the longer the parties
train apart. PFM keeps local momentum (β, our field ``momentum``) only for what is local — the
classifier ``ω_i`` of party ``i``, at step k of round r:

    (1)  M^ω_{i,r,k} = β M^ω_{i,r,k−1} + h_{i,r,k}      (2)  ω_{i,r,k} = ω_{i,r,k−1} − η_r M^ω_{i,r,k}

and gives the shared backbone, at each of the K local steps, the *global* momentum of the
previous round:

    (3)  θ_{i,r,k} = θ_{i,r,k−1} − η_r (g_{i,r,k} + β M^Θ_{r−1} / K)
    (4)  Θ_r = Σ_i w_i θ_{i,r,K}
    (5)  G_r = (Θ_{r−1} − Θ_r) / η_r − β M^Θ_{r−1}
    (6)  M^Θ_r = β M^Θ_{r−1} + G_r = (Θ_{r−1} − Θ_r) / η_r

``M^Θ_r`` is the round's summed step in gradient units, so ``M^Θ_r / K`` is the average momentum
of one step. With K = 1 and equal weights ``M^Θ_r = ḡ + β M^Θ_{r−1}``: exactly centralised
momentum SGD on the mean loss. The server sends ``Θ_r`` and ``M^Θ_r``; nothing of a party's
classifier leaves it.

**Federated Validation** (FV, Sec. 3.2, eqs. 7–13, Alg. 2). Validators hold private verification
sets (pairs of samples of people no party trains on). Each round the server forms T candidate
weightings — the first is the current ``w``, the others "uniformly sampled" (Alg. 2, line 4),
which we read as uniform on the probability simplex, i.e. Dirichlet(1, …, 1) — and scores each
candidate's backbone

    (7)  Θ̂ = ŵ_tᵀ θ'

on every validator ``i``: ``S_{i,t}``, here the verification accuracy at the best threshold,
cross-validated over the validator's folds (the LFW protocol of Sec. 4.2). Validators differ in
difficulty, so their scores are normalised (Norm, Alg. 2 line 11) — by the spread of one
validator's scores in this FV step (**Local Norm**, the paper's choice in all experiments after
the ablation of Sec. 4.4, Fig. 5):

    (8)  S'_i = S_i / √(σ²(S_i) + ε)

or by moving statistics over the rounds, rate γ (**Moving Norm**):

    (9)  μ = (1 − γ) μ_last + γ mean(S_i)
    (10) ν = (1 − γ) ν_last + γ Σ_{s ∈ S_i} (s − μ)² / |S_i|
    (11) S'_i = S_i / √(ν + ε)

or not at all (Fig. 5's "None"). The server then moves ``w`` toward the best candidate, rate φ:

    (12) t̂ = argmax_t Σ_i S'_{i,t}      (13) w = (1 − φ) w_last + φ ŵ_t̂

and the round's aggregate is eq. (4) with the new ``w``. T = 3, φ = 0.01, γ = 0.01, ε = 0.001 as
in Sec. 4.2. The paper does not say where (9)–(10) start; we start them at the first step's own
mean and variance. Neither norm subtracts a mean: a validator's mean over the candidates is the
same for every t, so it cannot change (12).

**Training loss** (Table 1): the paper reports training losses exponentially smoothed with a
factor of 0.99 (:func:`smoothed_losses`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional

from ..methods import FedFaceParameters
from .base import FedAvg, Tensors

#: The paper's margins by loss (s = 64 for both).
DEFAULT_MARGINS = {"arcface": 0.5, "cosface": 0.35}


# ----------------------------------------------------------------------------------------------
# Margin losses and the private classifier head
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArcFace:
    """Additive angular margin: the label's logit is ``s cos(θ_y + m)``."""

    scale: float = 64.0
    margin: float = 0.5

    def logits(self, cosine: Tensor, labels: Tensor) -> Tensor:
        """``[B, C]`` logits from ``[B, C]`` cosines and ``[B]`` labels."""
        cosine = cosine.clamp(-1.0, 1.0)
        sine = torch.sqrt((1.0 - cosine.square()).clamp_min(1e-12))
        shifted = cosine * math.cos(self.margin) - sine * math.sin(self.margin)  # cos(θ + m)
        # θ + m > π: cos(θ + m) would rise again; continue monotonically (insightface)
        fallback = cosine - math.sin(math.pi - self.margin) * self.margin
        shifted = torch.where(cosine > math.cos(math.pi - self.margin), shifted, fallback)
        return self.scale * _with_target(cosine, shifted, labels)


@dataclass(frozen=True)
class CosFace:
    """Additive cosine margin: the label's logit is ``s (cos θ_y − m)``."""

    scale: float = 64.0
    margin: float = 0.35

    def logits(self, cosine: Tensor, labels: Tensor) -> Tensor:
        """``[B, C]`` logits from ``[B, C]`` cosines and ``[B]`` labels."""
        return self.scale * _with_target(cosine, cosine - self.margin, labels)


def _with_target(cosine: Tensor, target: Tensor, labels: Tensor) -> Tensor:
    """``cosine`` with each row's label column taken from ``target``."""
    mask = functional.one_hot(labels, cosine.shape[1]).to(torch.bool)
    return torch.where(mask, target, cosine)


def make_margin_loss(
    name: str, scale: float = 64.0, margin: float | None = None
) -> ArcFace | CosFace:
    """``"arcface"`` or ``"cosface"`` with the paper's margin unless ``margin`` is given."""
    if name not in DEFAULT_MARGINS:
        raise ValueError(f"unknown margin loss {name!r}: arcface or cosface")
    margin = DEFAULT_MARGINS[name] if margin is None else margin
    return (ArcFace if name == "arcface" else CosFace)(scale, margin)


def head_loss(
    loss: ArcFace | CosFace, centres: Tensor, embeddings: Tensor, labels: Tensor
) -> Tensor:
    """Margin cross-entropy of unit ``embeddings`` ``[B, d]`` against ``centres`` ``[C, d]``."""
    cosine = functional.normalize(embeddings, dim=1) @ functional.normalize(centres, dim=1).T
    return functional.cross_entropy(loss.logits(cosine, labels), labels)


# ----------------------------------------------------------------------------------------------
# Partially Federated Momentum
# ----------------------------------------------------------------------------------------------


def momentum_step(param: Tensor, buffer: Tensor, grad: Tensor, lr: float, mu: float):
    """Eqs. (1)–(2), a classifier's local momentum (and every parameter's with PFM off):
    ``M ← β M + h``, ``ω ← ω − η M``."""
    buffer = mu * buffer + grad
    return param - lr * buffer, buffer


def pfm_backbone_step(
    param: Tensor, grad: Tensor, global_momentum: Tensor, steps: int, lr: float, mu: float
) -> Tensor:
    """Eq. (3): ``θ ← θ − η (g + β M^Θ / K)``."""
    return param - lr * (grad + mu * global_momentum / steps)


def server_momentum(before: Tensor, after: Tensor, lr: float) -> Tensor:
    """Eq. (6): ``M^Θ_r = (Θ_{r−1} − Θ_r) / η_r``."""
    return (before - after) / lr


# ----------------------------------------------------------------------------------------------
# Federated Validation
# ----------------------------------------------------------------------------------------------


def candidate_weightings(current: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """Alg. 2, line 4: ``[T, P]`` — the current weighting, then T − 1 drawn uniformly from the
    probability simplex, i.e. from Dirichlet(1, …, 1).

    (Normalising i.i.d. U(0, 1) draws, as this function once did, is not uniform on the simplex:
    it crowds the candidates toward equal weights — for P = 3 a coordinate's variance is about
    0.032 instead of Dirichlet(1)'s 2/36 ≈ 0.056.)"""
    current = np.asarray(current, dtype=np.float64)
    drawn = rng.dirichlet(np.ones(len(current)), size=count - 1)
    return np.vstack([current[None], drawn])


def local_norm(scores: np.ndarray, epsilon: float) -> np.ndarray:
    """Eq. (8), Local Norm: each validator's scores (rows of ``[V, T]``) divided by
    ``√(σ² + ε)``, σ² the population variance of that row (this FV step's candidates).

    The ε inside the root bounds the divisor below by √ε (≈ 0.032 at the paper's ε = 0.001), so
    a validator whose scores barely differ between candidates cannot amplify its noise into the
    choice of (12) — which dividing by ``σ + ε`` (an earlier version here) did."""
    scores = np.asarray(scores, dtype=np.float64)
    return scores / np.sqrt(scores.var(axis=1, keepdims=True) + epsilon)


def no_norm(scores: np.ndarray) -> np.ndarray:
    """The raw scores (Fig. 5's "None")."""
    return np.asarray(scores, dtype=np.float64)


@dataclass
class MovingNorm:
    """Eqs. (9)–(11), Moving Norm: per-validator running mean ``μ`` and variance ``ν`` of the
    scores (rate γ); the scores are divided by ``√(ν + ε)``.

    Eq. (10) measures the spread around the mean just updated by eq. (9). The paper does not
    say where ``μ`` and ``ν`` start: the first FV step starts them at that step's own mean and
    (population) variance."""

    gamma: float
    epsilon: float
    mean: np.ndarray | None = None
    var: np.ndarray | None = None

    def __call__(self, scores: np.ndarray) -> np.ndarray:
        scores = np.asarray(scores, dtype=np.float64)
        step_mean = scores.mean(axis=1)
        if self.mean is None or self.var is None:
            self.mean = step_mean
            self.var = scores.var(axis=1)
        else:
            self.mean = (1 - self.gamma) * self.mean + self.gamma * step_mean
            spread = ((scores - self.mean[:, None]) ** 2).mean(axis=1)
            self.var = (1 - self.gamma) * self.var + self.gamma * spread
        return scores / np.sqrt(self.var + self.epsilon)[:, None]


def fv_update(
    current: np.ndarray, candidates: np.ndarray, normalised: np.ndarray, rate: float
) -> tuple[np.ndarray, int]:
    """Eqs. (12)–(13): the best candidate (sum of the validators' normalised scores; the first —
    the current weighting — wins ties) and ``w ← (1 − φ) w + φ w^(t*)``."""
    totals = np.asarray(normalised).sum(axis=0)
    best = int(np.argmax(totals))  # argmax returns the first of equal maxima
    updated = (1 - rate) * np.asarray(current, dtype=np.float64) + rate * candidates[best]
    return updated / updated.sum(), best


def best_threshold_accuracy(scores: np.ndarray, same: np.ndarray, folds: int = 10) -> float:
    """Verification accuracy at the best threshold, cross-validated over folds (LFW protocol):
    for each fold, the threshold that maximises the accuracy on the other folds is applied to it;
    the mean of the folds' accuracies. ``scores`` are pair similarities, ``same`` their truth."""
    scores = np.asarray(scores, dtype=np.float64)
    same = np.asarray(same, dtype=bool)
    if len(scores) < 2:
        raise ValueError("need at least two pairs")
    folds = max(2, min(folds, len(scores)))
    assignment = np.arange(len(scores)) % folds  # pairs are given shuffled
    accuracies = []
    for fold in range(folds):
        held = assignment == fold
        threshold = _best_threshold(scores[~held], same[~held])
        accuracies.append(np.mean((scores[held] >= threshold) == same[held]))
    return float(np.mean(accuracies))


def _best_threshold(scores: np.ndarray, same: np.ndarray) -> float:
    """The threshold (between sorted scores) with the highest accuracy of ``score ≥ τ``."""
    order = np.argsort(scores)
    sorted_scores, sorted_same = scores[order], same[order]
    # τ just above sorted_scores[i−1]: rejects the first i pairs, accepts the rest
    rejected_different = np.concatenate([[0], np.cumsum(~sorted_same)])
    accepted_same = same.sum() - np.concatenate([[0], np.cumsum(sorted_same)])
    correct = rejected_different + accepted_same
    best = int(np.argmax(correct))
    if best == 0:
        return float(sorted_scores[0]) - 1e-6
    if best == len(scores):
        return float(sorted_scores[-1]) + 1e-6
    return float(sorted_scores[best - 1] + sorted_scores[best]) / 2


# ----------------------------------------------------------------------------------------------
# The training loss as the paper reports it
# ----------------------------------------------------------------------------------------------

#: Table 1: "The values are exponential smoothed with a factor of 0.99 for stability."
LOSS_SMOOTHING = 0.99


def smoothed_losses(
    previous: np.ndarray | None, steps: np.ndarray, factor: float = LOSS_SMOOTHING
) -> np.ndarray:
    """Table 1's training loss: each party's per-step losses exponentially smoothed,
    ``s ← factor · s + (1 − factor) · ℓ_k`` over the steps in order.

    ``previous`` is ``[P]`` (the smoothed losses after the last round) or ``None`` for the first
    round, which starts at its first step's loss; ``steps`` is ``[P, K]``. Returns ``[P]``."""
    steps = np.asarray(steps, dtype=np.float64)
    if steps.ndim != 2 or steps.shape[1] == 0:
        raise ValueError(f"steps must be [parties, steps], got shape {steps.shape}")
    if not 0 <= factor < 1:
        raise ValueError(f"factor must be in [0, 1), not {factor}")
    smoothed = steps[:, 0].copy() if previous is None else np.asarray(previous, np.float64).copy()
    for loss in steps.T:
        smoothed = factor * smoothed + (1 - factor) * loss
    return smoothed


# ----------------------------------------------------------------------------------------------
# The algorithm object
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FedFace(FedFaceParameters, FedAvg):
    """The cross-silo method as an algorithm object: its parameters, its model and its FedAvg
    aggregation (weighted by ``w``, the FV weighting). :mod:`uvtrain.crosssilo` runs it.

    ``pfm=False`` is FedAvg with local momentum on every parameter (the paper's baseline);
    ``fv=False`` keeps the weighting at the parties' sample shares.
    """

    def make_loss(self) -> ArcFace | CosFace:
        """The margin loss its heads compute."""
        return make_margin_loss(self.margin_loss, self.margin_scale, self.margin)

    def normaliser(self):
        """Norm of Alg. 2, line 11: Local Norm (eq. 8; a function), a fresh Moving Norm
        (eqs. 9–11; a stateful callable) or none."""
        if self.fv_norm == "moving":
            return MovingNorm(self.fv_gamma, self.fv_epsilon)
        if self.fv_norm == "none":
            return no_norm
        return lambda scores: local_norm(scores, self.fv_epsilon)

    # -- the round's hooks (run by uvtrain.crosssilo through uvtrain.rounds.run_round) --------

    def loss(
        self, outputs: Tensor, private: Tensors, constants: Tensors, shared: Tensors
    ) -> Tensor:
        """A party's margin loss on one batch: its private classifier ``private["head"]``
        ``[C_p, d]`` and the batch's labels ``constants["labels"]`` ``[B]``."""
        return head_loss(self.make_loss(), private["head"], outputs, constants["labels"])

    def init_optimiser(self, head: Tensor, params: Tensors) -> Tensors:
        """A party's optimiser state: the momentum of its head (eqs. 1–2) and, with PFM off
        (FedAvg with local momentum, the paper's baseline), of every backbone parameter."""
        state = {"head": torch.zeros_like(head)}
        if not self.pfm:
            state.update({f"backbone.{k}": torch.zeros_like(v) for k, v in params.items()})
        return state

    def local_step(
        self,
        params: Tensors,
        head: Tensor,
        grads: list[Tensor],
        state: Tensors,
        shared: Tensors,
        lr: float,
        steps: int,
    ) -> tuple[Tensors, Tensor]:
        """One local step of a party from the gradients of ``[*params, head]`` (weight decay
        added here): the head by local momentum (eqs. 1–2), the backbone by PFM (eq. 3, the global
        momentum ``shared["momentum.<name>"]`` of the previous round) or, with PFM off, by local
        momentum. Updates ``state`` in place; returns the new parameters and head."""
        mu = self.momentum
        leaves = [*params.values(), head]
        grads = [
            g + self.weight_decay * leaf.detach() for g, leaf in zip(grads, leaves, strict=True)
        ]
        head, state["head"] = momentum_step(head.detach(), state["head"], grads[-1], lr, mu)
        updated = {}
        for (name, value), grad in zip(params.items(), grads[:-1], strict=True):
            if self.pfm:
                updated[name] = pfm_backbone_step(
                    value.detach(), grad, shared[f"momentum.{name}"], steps, lr, mu
                )
            else:
                key = f"backbone.{name}"
                updated[name], state[key] = momentum_step(value.detach(), state[key], grad, lr, mu)
        return updated, head

    def server_update(
        self,
        shared: Tensors,
        messages: Tensors,
        clients: Tensor,
        lr: float,
        *,
        before: Tensors | None = None,
        after: Tensors | None = None,
    ) -> Tensors:
        """Eq. (6): the global momentum ``M^Θ_r = (Θ_{r−1} − Θ_r) / η_r`` the parties read next
        round (PFM)."""
        if before is None or after is None:
            return shared
        return {f"momentum.{k}": server_momentum(before[k], after[k], lr) for k in after}
