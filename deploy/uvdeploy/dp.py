"""User-level differential privacy on real devices: the simulator's mechanism
(:mod:`uvtrain.privacy`) with the clipping and the noise on the devices.

**The device** (:func:`private_update`), after its local training: its update
``δ_k = θ_k − θ`` over all trainable parameters is clipped to the round's norm ``C_r`` with the
simulator's own :func:`~uvtrain.privacy.clip_updates`; in ``distributed`` it then adds its share
``N(0, σ²/m_min)`` of the noise, ``σ = z_Δ·C_r``, drawn from a generator seeded by its own
secret randomness (:func:`~uvtrain.privacy.secret_generator`: fresh each round; the seed is
never sent, stored or logged). With adaptive clipping it also sends its bit shifted to ``±½``,
``b_k = 1[‖δ_k‖ ≤ C_r] − ½`` (plus, distributed, its share ``N(0, σ_b²/m_min)``) as one more
one-element array, summed with the update. Every device weighs the same (it reports one sample).

**The server** (:class:`DeviceDP`, the round's aggregator) Poisson-samples each round's devices
with the simulator's :func:`~uvtrain.rounds.poisson_cohort` (each registered device with
probability ``q``); it receives the sum of the survivors' updates (unmasked by SecAgg+, or summed
from plain replies), adds ``N(0, σ²)`` in ``central`` (from its own secret randomness, not from
the run's public seed), divides by the expected cohort ``qN`` (fixed, as the simulator) and moves
the clip norm with :meth:`~uvtrain.privacy.AdaptiveClipping.next_clip_norm` from the noisy count
(``Σ b_k`` plus noise, over ``qN``, plus ½).

**Dropouts.** A share is calibrated to ``m_min`` (:func:`min_survivors`), the fewest devices
whose updates a completed secure round can sum: the server gives SecAgg+ the reconstruction
threshold ``max(t, min_cohort)`` (``t`` SecAgg+'s own threshold for the cohort), and SecAgg+
cannot unmask a sum of fewer devices than its threshold. So every sum the server ever sees
carries noise of standard deviation ``σ·√(m′/m_min) ≥ σ``; when no device drops out, the extra
noise is the price of tolerating ``m − m_min`` dropouts. A round that samples fewer than
``m_min`` devices releases nothing (:func:`can_release`: the model stays, the round still counts
in the accountant); one whose survivors fall below ``m_min`` stops the run without releasing
anything, as before. The accountant is the simulator's (:meth:`~uvtrain.privacy.PrivacyPlan.
spent`: Poisson sampling at ``q``, add/remove adjacency) with ``z``: the guarantee holds,
conservatively, whoever survives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from uvtrain.algorithms.base import Tensors
from uvtrain.config import SECURE_DEFAULT_EPSILON
from uvtrain.errors import ConfigError
from uvtrain.io import read_json, write_json
from uvtrain.privacy import (
    PrivacyPlan,
    add_noise,
    clip_updates,
    noisy_mean_update,
    plan_from_settings,
    scalar_noise,
    secret_generator,
)
from uvtrain.rounds import Aggregator, ClientUpdates, RoundPlan

from .errors import DeploymentError, DeviceError
from .settings import DeploySettings

#: The server's count of the noisy aggregates it has seen (a DP run's ledger, in ``OUT``).
LEDGER = "privacy.json"


def secagg_threshold(settings: DeploySettings, cohort: int) -> tuple[int, int]:
    """SecAgg+'s number of shares and reconstruction threshold for a cohort of ``cohort``, as
    Flower's ``SecAggPlusWorkflow`` (1.41) computes them from ``num_shares`` and
    ``reconstruction_threshold`` (fractions of the cohort when at most 1)."""
    if settings.num_shares > 1:
        shares = int(settings.num_shares)
    else:
        shares = round(settings.num_shares * cohort)
        if shares < cohort and shares % 2 == 0:
            shares += 1
        if shares <= 2:
            shares = cohort
    if settings.reconstruction_threshold > 1:
        return shares, int(settings.reconstruction_threshold)
    return shares, max(round(settings.reconstruction_threshold * shares), 2)


def min_survivors(settings: DeploySettings, cohort: int) -> int:
    """``m_min``: the fewest devices a DP round may finish with, for an expected cohort of
    ``cohort``. Secure rounds: the threshold the server gives SecAgg+, ``max(t, min_cohort)``
    (``t``, SecAgg+'s threshold for the expected cohort: half of it by default, so that a
    Poisson-sampled cohort rarely falls below it, :func:`skip_probability`); a completed round
    sums at least that many updates. Plain rounds (``central`` only): one device (every sampled
    device must reply: a failure stops)."""
    if not settings.secure:
        return 1
    if cohort < settings.min_cohort:
        raise ConfigError(
            f"{cohort} device(s) in a round: a secure round needs min_cohort = "
            f"{settings.min_cohort}"
        )
    shares, threshold = secagg_threshold(settings, cohort)
    survivors = max(threshold, settings.min_cohort)
    if survivors > min(shares, cohort):
        raise ConfigError(
            f"dp: a round must sum at least min_cohort = {settings.min_cohort} updates, but "
            f"SecAgg+ shares each device's secrets with {shares} of the {cohort}: raise "
            "num_shares"
        )
    return survivors


def can_release(settings: DeploySettings, survivors: int, sampled: int) -> bool:
    """Whether a round that Poisson-sampled ``sampled`` devices can release a sum of at least
    ``survivors`` (``m_min``): enough devices, and (secure) SecAgg+ shares each one's secrets with
    at least ``m_min`` of them. A round that cannot releases nothing (it depends on the realised
    count only, not on anyone's data)."""
    if sampled < survivors:
        return False
    return not settings.secure or secagg_threshold(settings, sampled)[0] >= survivors


def skip_probability(devices: int, sampling_rate: float, survivors: int) -> float:
    """``P(Binomial(N, q) < m_min)``: the chance that a round samples too few devices to release
    anything (:func:`can_release`)."""
    rate = min(1.0, max(0.0, sampling_rate))
    terms = (
        math.comb(devices, count) * rate**count * (1 - rate) ** (devices - count)
        for count in range(min(survivors, devices + 1))
    )
    return float(sum(terms))


def plan(settings: DeploySettings, devices: int) -> PrivacyPlan | None:
    """The run's mechanism for ``devices`` registered devices (``None`` when off): Poisson
    sampling at ``q = cohort / devices`` (``cohort``: :meth:`DeploySettings.cohort_size`, the
    expected cohort), ``δ = min(devices^−1.1, 10⁻⁶)`` unless given, ``ε`` =
    :data:`~uvtrain.config.SECURE_DEFAULT_EPSILON` unless ``dp_epsilon`` or
    ``dp_noise_multiplier`` is given. A run whose rounds cannot stay within the budget is
    refused (:class:`ConfigError`)."""
    mechanism = settings.mechanism
    if mechanism == "off":
        return None
    cohort = settings.cohort_size(devices)
    min_survivors(settings, cohort)  # refused here when SecAgg+ cannot enforce it
    return plan_from_settings(
        settings.run.privacy,
        mechanism,
        rounds=settings.run.schedule.rounds,
        cohort=cohort,
        users=devices,
        default_epsilon=SECURE_DEFAULT_EPSILON,
    )


def check_rounds(settings: DeploySettings, previous: dict[str, Any], folder: Path) -> None:
    """Refuse to resume a DP run (``previous``: its ``config.json``) with other rounds: its rounds
    are part of its mechanism, and its budget is spent at its last round."""
    if settings.mechanism != "off" and previous.get("rounds") != settings.run.schedule.rounds:
        raise ConfigError(
            f"{folder} holds a DP run planned for {previous.get('rounds')} rounds: its rounds "
            "are part of its mechanism (its ε is spent at its last round); train further in a "
            "new run folder"
        )


# -- the device ---------------------------------------------------------------------------------


def private_update(
    delta: Tensors, instructions: dict[str, Any], generator: torch.Generator | None = None
) -> list[np.ndarray]:
    """The device's DP step on its update ``δ_k`` (by parameter name): clipped to the round's
    ``dp_clip_norm``; in ``distributed`` plus its noise share ``N(0, (z_Δ·C_r)²/m_min)``; with
    adaptive clipping one more array, its (noisy) bit. The arrays in name order, the bit last.
    ``generator``: the noise's source, a fresh secret one unless a test passes its own."""
    mechanism = str(instructions["dp"])
    clip_norm = float(instructions["dp_clip_norm"])
    if mechanism not in ("central", "distributed") or not clip_norm > 0:
        raise DeviceError(f"bad DP instructions: dp {mechanism!r}, clip norm {clip_norm}")
    names = sorted(delta)
    clipped, norms = clip_updates({name: delta[name][None] for name in names}, clip_norm)
    own = {name: clipped[name][0] for name in names}
    distributed = mechanism == "distributed"
    survivors = int(instructions.get("dp_survivors", 0))
    if distributed:
        noise = float(instructions["dp_noise"])
        if survivors < 2 or not noise > 0:
            raise DeviceError(f"bad DP instructions: noise {noise}, {survivors} survivors")
        generator = generator or secret_generator()
        own = add_noise(own, noise * clip_norm / math.sqrt(survivors), generator)
    arrays = [own[name].numpy() for name in names]
    if instructions.get("dp_adaptive"):
        bit = float(norms[0] <= clip_norm) - 0.5  # ±½ (Andrew et al. 2021, Sec. 3.1)
        if distributed:
            assert generator is not None
            count_std = float(instructions["dp_count_std"])
            bit += scalar_noise(count_std / math.sqrt(survivors), generator)
        arrays.append(np.array([bit], dtype=np.float32))
    return arrays


# -- the server ---------------------------------------------------------------------------------


@dataclass
class DeviceDP(Aggregator):
    """The round's aggregator of a DP deployment: the devices clipped (and, distributed, noised)
    their updates; :meth:`release` turns the survivors' sum into ``θ'`` (see the module's
    docstring). It aggregates as the devices train (``secure``: inside Flower's SecAgg+ workflow;
    plain: from the replies), so it is fusable and hands on the new parameters.

    ``clip_norm`` is the next round's norm (adaptive clipping moves it; the server's checkpoint
    keeps it); ``ledger`` counts every noisy aggregate released, so that a round is never
    released twice unaccounted (a resumed run that would do so is refused)."""

    plan: PrivacyPlan
    survivors: int  # m_min
    secure: Any = None  # the FlowerSecAggPlus aggregator of secure rounds
    ledger: Path | None = None

    def __post_init__(self) -> None:
        self.clip_norm = self.plan.clip_norm
        self.releases = 0

    def fusable(self) -> bool:
        return True

    def __call__(
        self, updates: ClientUpdates, base: Tensors, plan: RoundPlan | None = None
    ) -> Tensors:
        if updates.aggregate is None:
            raise DeploymentError("a DP round aggregates as the devices train: nothing released")
        return updates.aggregate

    def instructions(self) -> dict[str, Any]:
        """What a device needs for its DP step this round (sent with its FitIns)."""
        adaptive = self.plan.adaptive
        distributed = self.plan.mechanism == "distributed"
        return {
            "dp": self.plan.mechanism,
            "dp_clip_norm": float(self.clip_norm),
            "dp_noise": float(self.plan.update_noise) if distributed else 0.0,
            "dp_survivors": int(self.survivors),
            "dp_adaptive": adaptive is not None,
            "dp_count_std": float(adaptive.count_std) if adaptive is not None else 0.0,
        }

    def quantization_range(self) -> float:
        """SecAgg+'s per-entry range for this round: Flower's 8.0, or wide enough that an entry
        of a clipped update (at most ``C_r``) plus 8 standard deviations of its noise share (and
        the bit with its share) is never cut by the quantization (which would cut the noise)."""
        widest = self.clip_norm
        if self.plan.mechanism == "distributed":
            widest += 8 * self.plan.update_noise * self.clip_norm / math.sqrt(self.survivors)
        if self.plan.adaptive is not None:
            count_share = self.plan.adaptive.count_std / math.sqrt(self.survivors)
            widest = max(widest, 0.5 + 8 * count_share)
        return max(8.0, widest)

    def release(
        self,
        base: Tensors,
        total: Tensors,
        unclipped: float | None,
        survivors: int,
        round_number: int,
    ) -> tuple[Tensors, dict[str, Any]]:
        """``θ' = θ + (Σ δ̂_k + n) / (qN)`` from the survivors' sum (``n``: the server's
        ``N(0, σ²)`` in ``central``, in the sum already in ``distributed``; ``qN`` the expected
        cohort), and the next clip norm from the noisy sum of the devices' ``±½`` bits
        ``unclipped``: the fraction ``(Σ b_k + noise) / (qN) + ½``."""
        if survivors < self.survivors:
            raise DeploymentError(
                f"round {round_number}: {survivors} update(s) summed, fewer than the "
                f"{self.survivors} the noise is calibrated to: stopped"
            )
        self.releases += 1
        if self.ledger is not None:  # before anything can fail: this aggregate exists now
            write_json(self.ledger, {"releases": self.releases, "round": round_number})
        central = self.plan.mechanism == "central"
        generator = secret_generator()
        clip_norm = self.clip_norm
        std = self.plan.update_noise * clip_norm if central else 0.0
        denominator = float(self.plan.cohort)
        new = noisy_mean_update(base, total, denominator, std, generator)
        metrics: dict[str, Any] = {
            "survivors": survivors,
            "clip_norm": clip_norm,
            "epsilon": self.plan.spent(round_number),
        }
        if self.plan.adaptive is not None:
            if unclipped is None:
                raise DeploymentError(f"round {round_number}: no count of unclipped devices")
            count = unclipped
            if central:
                count += scalar_noise(self.plan.adaptive.count_std, generator)
            fraction = count / denominator + 0.5
            metrics["unclipped"] = fraction
            self.clip_norm = self.plan.adaptive.next_clip_norm(clip_norm, fraction)
        return new, metrics

    def state_dict(self) -> dict[str, float]:
        return {"clip_norm": float(self.clip_norm), "releases": self.releases}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clip_norm = float(state["clip_norm"])
        self.releases = int(state["releases"])


def released(folder: Path) -> int:
    """How many noisy aggregates the run in ``folder`` has released (its ledger; 0 without)."""
    path = folder / LEDGER
    return int(read_json(path)["releases"]) if path.exists() else 0
