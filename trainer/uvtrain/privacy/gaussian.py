"""DP-FedAvg's user-level Gaussian mechanism apart from where its noise is added
(:class:`UserLevelDP`; pfl-research's ``GaussianMechanism``, a ``CentrallyApplicablePrivacyMechanism``):
clipping each user's update to ``C_r`` with its clip-count bit, the noise of ``N(0, σ²)`` on a
round's sum (fresh every round), a user's share of it, and the release with adaptive clipping.
A placement (:mod:`uvtrain.privacy.mechanism`: central, distributed) composes these into the two
halves the round runs; another mechanism overrides what differs (DP-FTRL's tree noise,
:mod:`uvtrain.privacy.tree`: :meth:`UserLevelDP.sum_noise` only)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..algorithms.base import Tensors
from ..errors import TrainingError
from .noise import (
    CLIENT_COUNT_NOISE,
    CLIENT_UPDATE_NOISE,
    SERVER_COUNT_NOISE,
    SERVER_UPDATE_NOISE,
    NoiseSource,
    add_noise,
    clip_updates,
    scalar_noise,
    secret_noise,
)
from .plan import AdaptiveClipping, PrivacyPlan


@dataclass
class UserLevelDP:
    """The user-level Gaussian mechanism (see :mod:`uvtrain.privacy`). Adaptive clipping is this
    object's state: ``clip_norm`` is the current round's ``C_r``; :meth:`release` moves it
    (:meth:`state_dict` keeps it).

    ``update_noise`` is ``z_Δ`` (``σ = z_Δ·C_r`` on the sum); ``denominator`` the expected cohort
    ``qN``; ``noise`` where each draw comes from (:func:`~uvtrain.privacy.noise.seeded_noise`,
    :func:`~uvtrain.privacy.noise.secret_noise`); ``plan`` the run's accounting (``ε`` per
    round)."""

    clip_norm: float
    update_noise: float
    denominator: float
    adaptive: AdaptiveClipping | None = None
    noise: NoiseSource = secret_noise
    plan: PrivacyPlan | None = None

    #: Whether the noise on the sum can be split into the users' shares (distributed placement).
    distributable: ClassVar[bool] = True

    @classmethod
    def from_plan(cls, plan: PrivacyPlan, noise: NoiseSource = secret_noise) -> UserLevelDP:
        """The mechanism of a run's plan, its clip norm the plan's initial one; at simulated
        deployment scale both noises scaled by ``m/M`` (:attr:`PrivacyPlan.noise_scale`)."""
        scale = plan.noise_scale
        adaptive = plan.adaptive
        if adaptive is not None and scale != 1.0:
            adaptive = replace(adaptive, count_std=adaptive.count_std * scale)
        return cls(
            plan.clip_norm, plan.update_noise * scale, float(plan.cohort), adaptive, noise, plan
        )

    def clip(self, deltas: Tensors) -> Tensors:
        """Each update (``[m, ...]``) clipped to this round's ``C_r`` (:func:`clip_updates`)."""
        return clip_updates(deltas, self.clip_norm)[0]

    def constrain(self, deltas: Tensors) -> tuple[Tensors, Tensor | None, dict[str, Any]]:
        """Each user's update (``[m, ...]``) clipped to ``C_r``; with adaptive clipping its bit
        ``1[‖δ_k‖ ≤ C_r] − ½`` (``[m]`` float64), else ``None``; and the clipping's metrics."""
        clipped, norms = clip_updates(deltas, self.clip_norm)
        metrics = {  # an empty cohort's are NaN (null in metrics.jsonl)
            "clipped": float((norms > self.clip_norm).double().mean()),
            "update_norm": float(norms.median()) if len(norms) else math.nan,
            "clip_norm": self.clip_norm,
        }
        bits = None
        if self.adaptive is not None:
            bits = (norms <= self.clip_norm).double() - 0.5  # ±½ (Andrew et al. 2021, Sec. 3.1)
        return clipped, bits, metrics

    def shares(
        self,
        clipped: Tensors,
        bits: Tensor | None,
        clients: list[int],
        round_number: int,
        survivors: int,
    ) -> tuple[Tensors, Tensor | None]:
        """Each user's share of the noise added to its clipped update, ``N(0, σ²/m′)``, and to
        its bit, ``N(0, σ_b²/m′)`` (``m′``: ``survivors``), so that the sum of ``m′`` shares
        carries the full noise."""
        share = self.update_noise * self.clip_norm / math.sqrt(survivors)
        noisy = {name: value.clone() for name, value in clipped.items()}
        for row, client in enumerate(clients):
            generator = self.noise(round_number, CLIENT_UPDATE_NOISE, client)
            own = add_noise({name: value[row] for name, value in noisy.items()}, share, generator)
            for name, value in own.items():
                noisy[name][row] = value
        if self.adaptive is not None and bits is not None:
            share = self.adaptive.count_std / math.sqrt(survivors)
            draws = [
                scalar_noise(share, self.noise(round_number, CLIENT_COUNT_NOISE, client))
                for client in clients
            ]
            bits = bits + torch.tensor(draws, dtype=torch.float64)
        return noisy, bits

    def sum_noise(self, like: Tensors, round_number: int) -> Tensors | None:
        """The server's noise on round ``round_number``'s sum (shaped as ``like``): fresh
        ``N(0, σ²)``, ``σ = z_Δ·C_r`` (float32 draws); ``None`` when ``σ`` is 0."""
        std = self.update_noise * self.clip_norm
        if not std > 0:
            return None
        generator = self.noise(round_number, SERVER_UPDATE_NOISE, 0)
        return {
            name: std * torch.randn(value.shape, generator=generator, dtype=torch.float32)
            for name, value in like.items()
        }

    def release(
        self,
        base: Tensors,
        total: Tensors,
        noise: Tensors | None,
        bits: float | None,
        count_noise: bool,
        round_number: int,
    ) -> tuple[Tensors, dict[str, Any]]:
        """``θ' = θ + (Σ_k δ̂_k + n) / (qN)`` from the sum ``total`` and the server's ``noise``
        ``n`` (``None``: the users' shares are in the sum already); with adaptive clipping the
        next ``C_r`` from ``b̃ = (Σ_k b_k + N(0, σ_b²)) / (qN) + ½`` (the server's count noise
        when ``count_noise``). Metrics: the round's clip norm, ``b̃`` and the ``ε`` spent,
        against the release and against the server (:meth:`PrivacyPlan.spent_server`)."""
        clip_norm = self.clip_norm
        released = {}
        for name, value in base.items():
            summed = total[name]
            if noise is not None:
                summed = summed + noise[name].to(summed.device, summed.dtype)
            released[name] = value + (summed / self.denominator).to(value.dtype)
        metrics: dict[str, Any] = {"clip_norm": clip_norm}
        if self.adaptive is not None:
            if bits is None:
                raise TrainingError(f"round {round_number}: no count of unclipped users")
            if count_noise:
                generator = self.noise(round_number, SERVER_COUNT_NOISE, 0)
                bits += scalar_noise(self.adaptive.count_std, generator)
            fraction = bits / self.denominator + 0.5
            metrics["unclipped"] = fraction
            self.clip_norm = self.adaptive.next_clip_norm(clip_norm, fraction)
        if self.plan is not None:
            metrics["epsilon"] = self.plan.spent_release(round_number)
            metrics["epsilon_server"] = self.plan.spent_server(round_number)
        return released, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"clip_norm": float(self.clip_norm)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clip_norm = float(state["clip_norm"])
