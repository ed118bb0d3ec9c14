"""User-level differential privacy on real devices: the simulator's one mechanism
(:class:`uvtrain.privacy.UserLevelDP`) with its user half on the devices and its server half
on the server.

**The device** (:func:`private_update`), after its local training, runs the mechanism's user
half: its update ``δ_k = θ_k − θ`` over all trainable parameters is clipped to the round's norm
``C_r``; in ``distributed`` it then adds its share
``N(0, σ²/m_min)`` of the noise, ``σ = z_Δ·C_r``, drawn from a generator seeded by its own
secret randomness (:func:`~uvtrain.privacy.secret_generator`: fresh each round; the seed is
never sent, stored or logged). With adaptive clipping it also sends its bit shifted to ``±½``,
``b_k = 1[‖δ_k‖ ≤ C_r] − ½`` (plus, distributed, its share ``N(0, σ_b²/m_min)``) as one more
one-element array, summed with the update. Every device weighs the same (it reports one sample).

**The server** (:class:`FlowerPrivacy`; the round's aggregator is the mechanism's server half,
:class:`~uvtrain.privacy.PrivateSum`) Poisson-samples each round's devices
with the simulator's :func:`~uvtrain.rounds.poisson_cohort` (each registered device with
probability ``q``); it receives the sum of the survivors' updates (unmasked by SecAgg+, or summed
from plain replies), adds ``N(0, σ²)`` in ``central`` (from its own secret randomness, not from
the run's public seed), divides by the expected cohort ``qN`` (fixed, as the simulator) and moves
the clip norm (:meth:`~uvtrain.privacy.UserLevelDP.server_half`) from the noisy count
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from uvtrain.algorithms.base import Tensors
from uvtrain.config import SECURE_DEFAULT_EPSILON
from uvtrain.errors import ConfigError
from uvtrain.io import read_json, write_json
from uvtrain.privacy import (
    AdaptiveClipping,
    Distributed,
    Placement,
    PrivacyPlan,
    UserLevelDP,
    place,
    plan_privacy,
    secret_noise,
)

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
    """The run's mechanism for ``devices`` registered devices (``None`` when off): by default
    the participation rule with one period for every device to take part once
    (``dp_period = devices // cohort``; ``cohort``: :meth:`DeploySettings.cohort_size`), so that
    its ε holds against the server that draws the cohorts (docs/privacy.md: measured against
    Poisson sampling); ``dp_period = 0``: Poisson sampling at ``q = cohort / devices``, whose ε
    holds only against observers who do not know the cohorts. ``δ = min(devices^−1.1, 10⁻⁶)``
    unless given, ``ε`` =
    :data:`~uvtrain.config.SECURE_DEFAULT_EPSILON` unless ``dp_epsilon`` or
    ``dp_noise_multiplier`` is given. A run whose rounds cannot stay within the budget is
    refused (:class:`ConfigError`)."""
    mechanism = settings.mechanism
    if mechanism == "off":
        return None
    if settings.run.privacy.dp_noise_cohort is not None:
        raise ConfigError(
            "dp_noise_cohort simulates a deployment's cohort in the simulator; a deployment's "
            "noise is that of its own cohort"
        )
    cohort = settings.cohort_size(devices)
    min_survivors(settings, cohort)  # refused here when SecAgg+ cannot enforce it
    given = settings.run.privacy
    defaults: dict[str, Any] = {"dp": mechanism}
    if given.dp_period is None:
        defaults["dp_period"] = max(1, devices // cohort)
    if given.dp_epsilon is None and given.dp_noise_multiplier is None:
        defaults["dp_epsilon"] = SECURE_DEFAULT_EPSILON
    privacy = replace(given, **defaults)
    return plan_privacy(privacy, rounds=settings.run.schedule.rounds, cohort=cohort, users=devices)


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


def device_mechanism(
    instructions: dict[str, Any], generator: torch.Generator | None = None
) -> Placement:
    """The run's mechanism as a device holds it for one round, from the round's instructions
    (:meth:`FlowerPrivacy.instructions`): this round's clip norm, ``z_Δ``, ``m_min``, the count
    noise; its noise from fresh secret seeds (``generator``: a test's own, for every draw)."""
    mechanism = str(instructions["dp"])
    clip_norm = float(instructions["dp_clip_norm"])
    if mechanism not in ("central", "distributed") or not clip_norm > 0:
        raise DeviceError(f"bad DP instructions: dp {mechanism!r}, clip norm {clip_norm}")
    survivors = int(instructions.get("dp_survivors", 0))
    noise = float(instructions.get("dp_noise", 0.0))
    if mechanism == "distributed" and (survivors < 2 or not noise > 0):
        raise DeviceError(f"bad DP instructions: noise {noise}, {survivors} survivors")
    adaptive = None
    if instructions.get("dp_adaptive"):
        adaptive = AdaptiveClipping(count_std=float(instructions["dp_count_std"]))
    source = secret_noise if generator is None else (lambda *key: generator)
    return place(
        mechanism, UserLevelDP(clip_norm, noise, math.nan, adaptive, source), max(survivors, 1)
    )


def private_update(
    delta: Tensors, instructions: dict[str, Any], generator: torch.Generator | None = None
) -> list[np.ndarray]:
    """The device's DP step on its update ``δ_k`` (by parameter name): the mechanism's user half
    (:meth:`~uvtrain.privacy.Mechanism.user_half`: clipped to the round's ``C_r``; in
    ``distributed`` plus its share ``N(0, (z_Δ·C_r)²/m_min)``; with adaptive clipping its bit),
    as the arrays it sends: in name order, the bit last (one float32). The user half's metrics
    (its update's norm) stay on the device."""
    mechanism = device_mechanism(instructions, generator)
    names = sorted(delta)
    stacked = {name: delta[name][None] for name in names}
    sent, bits, _ = mechanism.user_half(stacked, [0], int(instructions.get("round", 0)))
    arrays = [sent[name][0].numpy() for name in names]
    if bits is not None:
        arrays.append(np.array([float(bits[0])], dtype=np.float32))
    return arrays


# -- the server ---------------------------------------------------------------------------------


@dataclass
class FlowerPrivacy:
    """The server's side of a DP deployment around the one mechanism (``mechanism``, its noise
    from the server's secret randomness, its shares calibrated to ``survivors`` = ``m_min``):
    the round's instructions to the devices, SecAgg+'s range, and the ledger — every noisy
    aggregate counted before it is released, so that a round is never released twice
    unaccounted (a resumed run that would do so is refused). The release itself is the
    aggregator's, :class:`~uvtrain.privacy.PrivateSum` over the mechanism."""

    mechanism: Placement
    survivors: int  # m_min
    ledger: Path | None = None
    releases: int = 0

    @property
    def plan(self) -> PrivacyPlan:
        assert self.mechanism.plan is not None
        return self.mechanism.plan

    @property
    def clip_norm(self) -> float:
        return self.mechanism.underlying.clip_norm

    @property
    def distributed(self) -> bool:
        return isinstance(self.mechanism, Distributed)

    def instructions(self) -> dict[str, Any]:
        """What a device needs for its DP step this round (sent with its FitIns)."""
        mechanism = self.mechanism.underlying
        adaptive = mechanism.adaptive
        return {
            "dp": self.mechanism.name,
            "dp_clip_norm": float(mechanism.clip_norm),
            "dp_noise": float(mechanism.update_noise) if self.distributed else 0.0,
            "dp_survivors": int(self.survivors),
            "dp_adaptive": adaptive is not None,
            "dp_count_std": float(adaptive.count_std) if adaptive is not None else 0.0,
            "dp_period": int(self.plan.period or 0),
        }

    def quantization_range(self) -> float:
        """SecAgg+'s per-entry range for this round: Flower's 8.0, or wide enough that an entry
        of a clipped update (at most ``C_r``) plus 8 standard deviations of its noise share (and
        the bit with its share) is never cut by the quantization (which would cut the noise)."""
        mechanism = self.mechanism.underlying
        widest = mechanism.clip_norm
        if self.distributed:
            widest += 8 * mechanism.update_noise * mechanism.clip_norm / math.sqrt(self.survivors)
        if mechanism.adaptive is not None:
            count_share = mechanism.adaptive.count_std / math.sqrt(self.survivors)
            widest = max(widest, 0.5 + 8 * count_share)
        return max(8.0, widest)

    def record(self, survivors: int, round_number: int) -> None:
        """Count the release of a sum of ``survivors`` devices in the ledger, before it exists;
        a sum of fewer than ``m_min`` is refused (its noise would be too small)."""
        if survivors < self.survivors:
            raise DeploymentError(
                f"round {round_number}: {survivors} update(s) summed, fewer than the "
                f"{self.survivors} the noise is calibrated to: stopped"
            )
        self.releases += 1
        if self.ledger is not None:
            write_json(self.ledger, {"releases": self.releases, "round": round_number})

    def state_dict(self) -> dict[str, float]:
        return {**self.mechanism.state_dict(), "releases": self.releases}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mechanism.load_state_dict(state)
        self.releases = int(state["releases"])


def released(folder: Path) -> int:
    """How many noisy aggregates the run in ``folder`` has released (its ledger; 0 without)."""
    path = folder / LEDGER
    return int(read_json(path)["releases"]) if path.exists() else 0
