"""FedFace (Bai et al., "Federated Face Recognition", 2021): cross-silo training of one recognition
backbone by a few organisations (parties), each with many identities and its own classifier.

The maths of the method lives here as pure functions of tensors; :mod:`uvtrain.crosssilo` runs it.

**Margin losses** (passed into the head; the backbone never sees them). For the unit embedding
``f`` and the unit class centres ``W̃`` of a party's head, ``cos θ_j = W̃_jᵀ f``; the logits are
``s cos θ_j`` for every class but the label ``y``, whose logit carries the margin:

* ArcFace (Deng et al., CVPR 2019), s = 64, m = 0.5: ``s cos(θ_y + m)`` (where ``θ_y + m > π``,
  insightface's monotone continuation ``s (cos θ_y − m sin m)``);
* CosFace (Wang et al., CVPR 2018), s = 64, m = 0.35: ``s (cos θ_y − m)``;

and the loss is the cross-entropy of those logits.

**Partially Federated Momentum** (PFM, paper eqs. 1–6, Alg. 1). Centralised momentum SGD is

    (1)  m_t = μ m_{t−1} + g_t,      (2)  θ_t = θ_{t−1} − η m_t.

FedAvg with local momentum gives every party its own buffer, which drifts from the centralised
one the longer the parties train apart. PFM keeps local momentum only for what is local — the
classifier ``C_p`` of party ``p``:

    (3)  m^C_{p,k} = μ m^C_{p,k−1} + ∇_C L_p,          C_{p,k} = C_{p,k−1} − η_r m^C_{p,k}

and gives the shared backbone, at each of the K local steps, the *global* momentum estimated
from the previous round:

    (4)  θ_{p,k} = θ_{p,k−1} − η_r (∇_θ L_p(θ_{p,k−1}) + μ M_{r−1} / K)
    (5)  Θ_r = Σ_p w_p θ_{p,K}
    (6)  M_r = (Θ_{r−1} − Θ_r) / η_r

``M_r`` is the round's summed step in gradient units, so ``M_r / K`` is the average momentum of
one step. With K = 1 and equal weights ``M_r = ḡ + μ M_{r−1}``: exactly (1)–(2) on the mean
loss. The server sends ``Θ_r`` and ``M_r``; nothing of a party's classifier leaves it.

**Federated Validation** (FV, paper eqs. 7–13, Alg. 2). Validators hold private verification sets
(pairs of samples of people no party trains on). After each round the server forms T candidate
weightings — the first is the current ``w``, the others drawn uniformly from the simplex:

    (7)  w^(1) = w_r,   w^(t) = u_t / Σ_i u_{t,i},  u_{t,i} ~ U(0, 1)

    (8)  Θ^(t) = Σ_p w^(t)_p θ_{p,K}

Each validator ``v`` scores each candidate's backbone by its verification accuracy at the best
threshold, cross-validated over its folds (the LFW protocol): ``a_{v,t}``. Validators differ in
difficulty, so their scores are normalised before they are combined — per FV step (Local Norm)

    (9)  â_{v,t} = (a_{v,t} − mean_t a_{v,t}) / (std_t a_{v,t} + ε)

or by moving statistics over the rounds (Moving Norm, rate γ)

    (10) μ_v ← (1 − γ) μ_v + γ mean_t a_{v,t},   σ²_v ← (1 − γ) σ²_v + γ mean_t (a_{v,t} − μ_v)²
    (11) â_{v,t} = (a_{v,t} − μ_v) / (σ_v + ε)

and the server moves ``w`` toward the best candidate with rate φ:

    (12) t* = argmax_t Σ_v â_{v,t}      (13) w_{r+1} = (1 − φ) w_r + φ w^(t*)

The round's aggregate is then ``Θ_r`` with ``w_{r+1}``. T = 3, φ = 0.01, γ = 0.01, ε = 0.001 as in
the paper. The paper's own text was not available offline when this was written: the equations
above are reconstructed from its description (the candidates' distribution and the Moving Norm's
exact form are our reading); ``docs/trainer.md`` says so too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional

from ..errors import ConfigError
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
    """Eqs. (1)–(2) (and (3) for a classifier): ``m ← μ m + g``, ``θ ← θ − η m``."""
    buffer = mu * buffer + grad
    return param - lr * buffer, buffer


def pfm_backbone_step(
    param: Tensor, grad: Tensor, global_momentum: Tensor, steps: int, lr: float, mu: float
) -> Tensor:
    """Eq. (4): ``θ ← θ − η (g + μ M / K)``."""
    return param - lr * (grad + mu * global_momentum / steps)


def server_momentum(before: Tensor, after: Tensor, lr: float) -> Tensor:
    """Eq. (6): ``M_r = (Θ_{r−1} − Θ_r) / η_r``."""
    return (before - after) / lr


# ----------------------------------------------------------------------------------------------
# Federated Validation
# ----------------------------------------------------------------------------------------------


def candidate_weightings(current: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """Eq. (7): ``[T, P]`` — the current weighting, then T − 1 drawn uniformly from the simplex."""
    current = np.asarray(current, dtype=np.float64)
    drawn = rng.uniform(0.0, 1.0, size=(count - 1, len(current)))
    drawn /= drawn.sum(axis=1, keepdims=True)
    return np.vstack([current[None], drawn])


def local_norm(scores: np.ndarray, epsilon: float) -> np.ndarray:
    """Eq. (9): each validator's scores (rows of ``[V, T]``) normalised across the candidates."""
    scores = np.asarray(scores, dtype=np.float64)
    mean = scores.mean(axis=1, keepdims=True)
    return (scores - mean) / (scores.std(axis=1, keepdims=True) + epsilon)


@dataclass
class MovingNorm:
    """Eqs. (10)–(11): per-validator running mean and variance of the scores (rate γ).

    The first FV step starts the statistics at that step's own mean and variance."""

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
        return (scores - self.mean[:, None]) / (np.sqrt(self.var)[:, None] + self.epsilon)


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
# The algorithm object
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FedFace(FedAvg):
    """The cross-silo method as an algorithm object: its parameters, its model and its FedAvg
    aggregation (weighted by ``w``, the FV weighting). :mod:`uvtrain.crosssilo` runs it.

    ``pfm=False`` is FedAvg with local momentum on every parameter (the paper's baseline);
    ``fv=False`` keeps the weighting at the parties' sample shares.
    """

    name: ClassVar[str] = "fedface"
    output_kind: ClassVar[str] = "embedding"
    setting: ClassVar[str] = "cross-silo"
    audits: ClassVar[frozenset[str]] = frozenset()
    margin_loss: str = field(default="arcface", metadata={"help": "FedFace: arcface or cosface."})
    margin_scale: float = field(default=64.0, metadata={"help": "FedFace: logit scale s."})
    margin: float | None = field(
        default=None, metadata={"help": "FedFace: margin m (default 0.5 / 0.35)."}
    )
    momentum: float = field(default=0.9, metadata={"help": "FedFace: momentum μ."})
    weight_decay: float = field(default=5e-4, metadata={"help": "FedFace: weight decay."})
    pfm: bool = field(default=True, metadata={"help": "FedFace: Partially Federated Momentum."})
    fv: bool = field(default=True, metadata={"help": "FedFace: Federated Validation."})
    fv_candidates: int = field(default=3, metadata={"help": "FedFace FV: candidates T."})
    fv_rate: float = field(default=0.01, metadata={"help": "FedFace FV: step φ toward the best."})
    fv_gamma: float = field(default=0.01, metadata={"help": "FedFace FV: Moving Norm rate γ."})
    fv_epsilon: float = field(default=0.001, metadata={"help": "FedFace FV: ε of the norms."})
    fv_norm: str = field(default="local", metadata={"help": "FedFace FV: local or moving."})
    # the cross-silo trainer's: parties, how identities are split among them, validators, folds
    parties: int = field(
        default=3, metadata={"help": "FedFace: parties P (1: centralised baseline)."}
    )
    partition: str = field(default="auto", metadata={"help": "FedFace: auto, language or random."})
    validators: int = field(
        default=2, metadata={"help": "FedFace: validators V holding verification sets."}
    )
    fv_folds: int = field(default=10, metadata={"cli": False})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.parties < 1 or self.validators < 0 or self.fv_folds < 2:
            raise ConfigError("parties must be >= 1, validators >= 0 and fv_folds >= 2")
        if self.partition not in ("auto", "language", "random"):
            raise ConfigError(f"partition must be auto, language or random, not {self.partition!r}")
        if self.margin_loss not in ("arcface", "cosface"):
            raise ConfigError(f"margin_loss must be arcface or cosface, not {self.margin_loss!r}")
        if self.margin_scale <= 0 or (self.margin is not None and not 0 <= self.margin < 3.14):
            raise ConfigError("margin_scale must be positive and margin in [0, π)")
        if not 0 <= self.momentum < 1 or self.weight_decay < 0:
            raise ConfigError("momentum must be in [0, 1) and weight_decay >= 0")
        if self.fv_candidates < 2 or not 0 < self.fv_rate <= 1 or not 0 < self.fv_gamma <= 1:
            raise ConfigError("fv_candidates must be >= 2, fv_rate and fv_gamma in (0, 1]")
        if self.fv_epsilon <= 0 or self.fv_norm not in ("local", "moving"):
            raise ConfigError("fv_epsilon must be positive and fv_norm local or moving")

    def deployment_problem(self) -> str | None:
        return "fedface is cross-silo (a client is an organisation): not on devices"

    def make_loss(self) -> ArcFace | CosFace:
        """The margin loss its heads compute."""
        return make_margin_loss(self.margin_loss, self.margin_scale, self.margin)

    def normaliser(self):
        """Local Norm (a function) or a fresh Moving Norm (a stateful callable)."""
        if self.fv_norm == "moving":
            return MovingNorm(self.fv_gamma, self.fv_epsilon)
        return lambda scores: local_norm(scores, self.fv_epsilon)

    # -- the round's hooks (run by uvtrain.crosssilo through uvtrain.rounds.run_round) --------

    def loss(
        self, outputs: Tensor, private: Tensors, constants: Tensors, shared: Tensors
    ) -> Tensor:
        """A party's margin loss on one batch: its private classifier ``private["head"]``
        ``[C_p, d]`` and the batch's labels ``constants["labels"]`` ``[B]``."""
        return head_loss(self.make_loss(), private["head"], outputs, constants["labels"])

    def init_optimiser(self, head: Tensor, params: Tensors) -> Tensors:
        """A party's optimiser state: the momentum of its head (eq. 3) and, with PFM off
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
        added here): the head by local momentum (eq. 3), the backbone by PFM (eq. 4, the global
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
        """Eq. (6): the global momentum ``M_r = (Θ_{r−1} − Θ_r) / η_r`` the parties read next
        round (PFM)."""
        if before is None or after is None:
            return shared
        return {f"momentum.{k}": server_momentum(before[k], after[k], lr) for k in after}
