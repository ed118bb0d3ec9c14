"""User-level differential privacy for the one round (:mod:`uvtrain.rounds`): one mechanism
(:class:`UserLevelDP`: clipping, Gaussian noise central or distributed, independent or tree
aggregated, adaptive clipping) and a run's plan (:class:`PrivacyPlan`), whose figures the
accountant computes (:mod:`uvtrain.accounting`, pure numbers). The simulator (:class:`PrivateUsers`, :class:`PrivateSum`), the audit (the same
over its SecAgg+ transport) and the Flower devices and server (``uvdeploy``) all run it.

The mechanism is DP-FedAvg (McMahan et al., ICLR 2018) with the noise placed as in Kairouz et al.
(ICML 2021) when the server must not see it:

1. each participating client's update ``δ_k = θ_k − θ`` is clipped to L2 norm ``C`` over all of
   its trainable parameters, ``δ̂_k = δ_k · min(1, C / ‖δ_k‖)`` (:meth:`UserLevelDP.user_half`);
2. the round's *sum* ``Σ_k δ̂_k`` carries Gaussian noise of standard deviation ``z·C``
   (``z`` the noise multiplier):

   - ``central``: the server adds ``N(0, z²C²)`` after summing (:meth:`UserLevelDP.server_half`); it protects
     the released model and trusts the server;
   - ``distributed``: each client adds its share ``N(0, z²C²/m)`` before secure aggregation
     (in the user half), so that the sum of the ``m`` shares has the full noise and the
     server only ever sees the noisy sum;

3. the new model is ``θ + (Σ_k δ̂_k + noise) / (qN)``: the sum divided by the *expected* cohort
   ``qN``, fixed before training, not by the realised count (McMahan et al.'s fixed-denominator
   estimator ``f̃_f``, Algorithm 1: the realised count would be one more thing to protect);
   every client weighs the same (a sample-count weight would let one user's influence exceed
   ``C``).

**Sampling.** Each round's cohort is Poisson-sampled: each of the ``N`` users takes part
independently with probability ``q`` (:func:`uvtrain.rounds.poisson_cohort`, from ``(seed,
round)``; the simulator's clients and the Flower server's devices alike), so the cohort's size
varies around ``qN`` and may be 0 — such a round releases the noise alone.

**Adaptive clipping** (Andrew, Thakkar, McMahan and Ramaswamy, "Differentially Private
Learning with Adaptive Clipping", NeurIPS 2021; :class:`AdaptiveClipping`): instead of a fixed
``C``, the clip norm follows the ``γ``-quantile of the clients' update norms. Each round every
client also reports the bit ``b_k = 1[‖δ_k‖ ≤ C_r] − ½``, shifted to ``±½`` as in their Sec. 3.1
(and TFF's ``QuantileAdaptiveClipSumQuery``, TF-Privacy's ``QuantileEstimatorQuery``); the
server sees ``b̃ = (Σ_k b_k + N(0, σ_b²)) / (qN) + ½`` (in ``distributed`` each client adds its
share of that noise too) and moves the norm geometrically, ``C_{r+1} = C_r · exp(−η_C (b̃ − γ))``.
Adding or removing a user moves the sum of shifted bits by ½ and the sum of updates by ``C``:
the pair is one Gaussian mechanism of multiplier ``z = (z_Δ⁻² + (2σ_b)⁻²)^(−½)``, and the
update's share of a budget ``z`` is ``z_Δ = (z⁻² − (2σ_b)⁻²)^(−½)`` (their Theorem 1,
:func:`update_noise_multiplier`).

**Simulated deployment scale** (pfl-research's ``noise_cohort_size``; :attr:`PrivacyPlan.
noise_cohort`): a simulation trains cohorts of ``m`` (expected) from its ``N`` users but adds the
noise a deployment's cohort of ``M ≥ m`` would get, scaled by ``m/M``: the sum carries
``N(0, (z_Δ·C·m/M)²)`` and the count ``N(0, (σ_b·m/M)²)``, so after the division by ``m`` the
model and the clip fraction carry exactly the noise of the deployment's ``(sum + N(0, (z_Δ C)²))
/ M``. The accountant takes the deployment's rate ``q = M / N_dep`` (``N_dep`` its population),
``δ`` defaults from ``N_dep``, and ``σ_b`` from ``M``. What the simulation cannot give is the
averaging of ``M`` users' signal (it averages ``m``): its accuracy is the deployment's only as far
as the ``m``-user mean stands for the ``M``-user one, which is why every report names such a run
"simulated deployment scale", never a real cohort.

**Accounting: two ε, against two adversaries.** Both under add/remove-one adjacency (one user's
data present or absent), for the same ``δ``:

- :func:`epsilon_release` (and :func:`noise_multiplier`, which a budget sets the noise by): the
  Poisson-subsampled Gaussian (``PoissonSampledDpEvent(q, GaussianDpEvent(z))``) composed over
  the run's rounds, read from Google's ``dp-accounting`` privacy loss distribution (PLD;
  pessimistic, so an upper bound within its loss bucket of the exact ``ε``), with its RDP
  accountant (Mironov, Talwar and Zhang, "Rényi Differential Privacy of the Sampled Gaussian
  Mechanism", 2019; the figure DP-FedAvg's literature states, McMahan et al. 2018, Andrew et al.
  2021) beside it as the cross-check: the smaller of the two upper bounds, which is the PLD's.
  It rests on amplification by subsampling, so it holds against whoever sees the released
  models but does not know who was sampled.
- :func:`epsilon_server`: the server draws each round's cohort (from a seed it holds, in the
  simulator and on Flower alike), so against it there is no amplification: a user who joined
  ``k`` rounds is protected by the Gaussian mechanism of multiplier ``z`` composed ``k`` times,
  which is exactly one Gaussian mechanism of multiplier ``z/√k``, computed in closed form
  (Balle and Wang, ICML 2018, Theorem 8; dp-accounting's PLD ``GaussianPrivacyLoss``). Before
  training ``k`` is the most rounds a user can join (Poisson sampling has no cap: every round),
  with the expected ``⌈qR⌉`` beside it; after a simulation, the most rounds any of its users
  joined. In ``distributed`` the server sees only the noisy sums, so this is the guarantee
  against it; in ``central`` it adds the noise itself and sees the updates, so nothing bounds
  it, and this ε holds against anyone else who learns the cohorts (its logs, its operator).

:func:`membership_eer_floor` (the lowest EER of any test of "was this user in training", which
bounds FedUV's codeword verification) reads the same PLD: RDP overstates ``δ(ε)`` most where
the floor is decided (small ``ε``), and at the deployment-scale sampling rates RDP's ``ε`` is
1.18–2.92× the PLD's (``python benchmarks/pld_slack.py``; docs/privacy.md), which is why both
figures are the PLD's since issue 45.

Everything random is drawn from ``(seed, round, client)``, so a resumed DP run is bit-exact.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from .accounting import (
    capped_noise_multiplier,
    default_delta,
    epsilon_release_after,
    epsilon_release_rdp,
    epsilon_server,
    gaussian_eer_floor,
    gaussian_epsilon,
    membership_eer_floor,
    noise_multiplier,
    participation_units,
    period_lengths,
    tree_depth,
    update_noise_multiplier,
)
from .algorithms.base import Tensors
from .errors import ConfigError, TrainingError
from .rounds import Aggregator, ClientUpdates, RoundPlan

#: The placements of the noise (``off``: no differential privacy).
MECHANISMS = ("off", "central", "distributed")
#: How each round's noise relates to the others' (``--dp-noise``): ``independent`` (DP-FedAvg:
#: fresh noise on every round's sum) or ``tree`` (DP-FTRL: the noise of a binary tree over the
#: rounds of a period, :class:`TreeNoise`).
NOISES = ("independent", "tree")


#: What the accountant assumes, stated in every report (see the module's docstring).
SAMPLING = "poisson"
NEIGHBORING_RELATION = "add-or-remove-one"
ACCOUNTANT = (
    "PLD (pessimistic, loss bucket 1e-3), dp-accounting PoissonSampledDpEvent(q, "
    "GaussianDpEvent(z)); RDP of the same events as the cross-check, the smaller stated"
)
SERVER_ACCOUNTANT = (
    "PLD, dp-accounting GaussianPrivacyLoss(z/sqrt(k)): the Gaussian mechanism composed over k "
    "participations, no amplification, exact (Balle and Wang 2018)"
)
#: Who each ε holds against, by placement (``report.json``'s ``privacy.adversaries``).
ADVERSARIES = {
    "distributed": "epsilon_release: against anyone who sees the released models but not who "
    "was sampled (amplification by subsampling); epsilon_server: against the server that ran "
    "training, which draws the cohorts and sees only noisy sums (no amplification, over "
    "server_participations rounds)",
    "central": "epsilon_release: against anyone who sees the released models but not who was "
    "sampled (amplification by subsampling); epsilon_server: against anyone who also knows the "
    "cohorts (no amplification, over server_participations rounds); nothing bounds the server "
    "itself, which adds the noise and sees the updates",
}
#: What the accountant assumes under a participation rule (``--dp-period``, either noise).
PERIOD_SAMPLING = "at most one round in each period of b rounds (the server's selection)"
PERIOD_ACCOUNTANT = (
    "PLD, dp-accounting GaussianPrivacyLoss(z/sqrt(S)): the whole run is one Gaussian mechanism "
    "of sensitivity sqrt(S)·C (S = the periods a user can join, or with tree noise the sum over "
    "the periods of their trees' depths), no amplification, exact (Balle and Wang 2018); checked "
    "against dp-accounting's RDP of the same events"
)
#: Who each ε holds against under a participation rule, by placement: no amplification is
#: assumed, so the same ε holds whether or not the adversary knows the cohorts.
PERIOD_ADVERSARIES = {
    "distributed": "epsilon_release = epsilon_server: against anyone who sees the released "
    "models, and against the server that ran training, which draws the cohorts and sees only "
    "noisy sums (no amplification, at most one round per period)",
    "central": "epsilon_release = epsilon_server: against anyone who sees the released models, "
    "whether or not they know who took part (no amplification, at most one round per period); "
    "nothing bounds the server itself, which adds the noise and sees each round's sum",
}
#: The clip-count bits' convention (:meth:`UserLevelDP.user_half`).
COUNT_BITS = "±½"


@dataclass(frozen=True)
class AdaptiveClipping:
    """Adaptive clipping (Andrew et al., NeurIPS 2021): the clip norm moves towards the
    ``target_quantile`` (``γ``) of the clients' update norms by geometric steps of
    ``learning_rate`` (``η_C``), from a count of unclipped clients (bits shifted to ``±½``)
    carrying noise of standard deviation ``count_std`` (``σ_b``, on the sum). Their defaults:
    ``γ = 0.5``, ``η_C = 0.2``, ``σ_b = m / 20`` (``m = qN`` the expected cohort)."""

    target_quantile: float = 0.5
    learning_rate: float = 0.2
    count_std: float = 1.0

    def next_clip_norm(self, clip_norm: float, unclipped: float) -> float:
        """``C_{r+1} = C_r · exp(−η_C (b̃ − γ))`` from the noisy fraction ``b̃`` of unclipped
        clients."""
        return clip_norm * math.exp(-self.learning_rate * (unclipped - self.target_quantile))

    def report(self, noise: float) -> dict[str, Any]:
        return {
            "target_quantile": self.target_quantile,
            "learning_rate": self.learning_rate,
            "count_std": self.count_std,
            "count_bits": COUNT_BITS,
            "update_noise_multiplier": update_noise_multiplier(noise, self.count_std),
        }


@dataclass(frozen=True)
class PrivacyPlan:
    """A run's mechanism, fixed before training: what ``report.json`` calls ``privacy``.
    ``noise_multiplier`` is ``z``, the multiplier the run is as private as (with adaptive
    clipping the update carries ``z_Δ`` and the count ``σ_b``, :func:`update_noise_multiplier`);
    each round Poisson-samples each of ``users`` with probability ``q = cohort / users``, so
    ``cohort`` is the expected cohort ``qN``, the aggregate's fixed denominator.

    ``period`` (``b``, ``--dp-period``): the participation rule instead — each round's cohort is
    ``cohort`` users of those who have not taken part in the current period of ``b`` rounds
    (:func:`uvtrain.rounds.period_cohort`), so a user joins at most ``⌈R/b⌉`` rounds and nothing
    rests on a secret sample: both ``ε`` are one Gaussian mechanism's (:meth:`mu`).
    ``noise`` is ``independent`` (DP-FedAvg) or ``tree`` (DP-FTRL, :class:`TreeNoise`, whose
    tree restarts at every period)."""

    mechanism: str
    noise_multiplier: float
    clip_norm: float
    delta: float
    rounds: int
    cohort: int
    users: int
    target_epsilon: float | None = None
    adaptive: AdaptiveClipping | None = None
    noise_cohort: int | None = None
    population: int | None = None
    noise: str = "independent"
    period: int | None = None

    @property
    def capped(self) -> bool:
        """Whether a participation rule (:attr:`period`) replaces Poisson sampling."""
        return self.period is not None

    def units(self, rounds: int) -> int:
        """``S`` of the first ``rounds`` rounds (:func:`participation_units`)."""
        assert self.period is not None
        return participation_units(rounds, self.period, self.noise)

    def mu(self, rounds: int) -> float:
        """``μ = √S / z``: under the participation rule the first ``rounds`` rounds are one
        Gaussian mechanism with this many standard deviations of sensitivity (the rounds' noises
        independent, or the tree's nodes'; with adaptive clipping the pair ``z_Δ``, ``σ_b`` is
        as private as ``z`` per participation)."""
        return math.sqrt(self.units(rounds)) / self.noise_multiplier

    @property
    def sampling_period(self) -> int:
        """The period the cohorts are drawn under: the rule's ``b``, or at simulated deployment
        scale the simulation's own ``⌊N/m⌋`` (its users cannot keep a deployment's ``b``)."""
        assert self.period is not None
        if self.noise_cohort is not None:
            return max(1, self.users // self.cohort)
        return self.period

    def simulated_users_mu(self) -> float:
        """At simulated deployment scale, a bound on ``μ`` for one of the simulation's own users:
        it joins one round of each of its own periods (:attr:`sampling_period`), so ``j_t`` of
        a tree's rounds; a node holds at most ``j_t`` of its updates, and at most ``j_t·d_t`` of
        them over the tree's nodes, so ``μ² ≤ Σ_t j_t² d_t / (z·m/M)²`` (independent noise:
        ``Σ`` of its rounds over ``(z·m/M)²``)."""
        assert self.period is not None
        own, start, total = self.sampling_period, 0, 0.0
        for length in period_lengths(self.rounds, self.period):
            joined = len({(start + r) // own for r in range(length)})
            total += joined**2 * tree_depth(length) if self.noise == "tree" else joined
            start += length
        return math.sqrt(total) / (self.noise_multiplier * self.noise_scale)

    @property
    def cohort_rate(self) -> float:
        """``m / N``: each of the run's own users' chance to be in a round's cohort (what the
        simulation samples)."""
        return min(1.0, self.cohort / self.users)

    @property
    def sampling_rate(self) -> float:
        """``q``, the accountant's rate: ``m / N``, or at simulated deployment scale the
        deployment's ``M / N_dep``."""
        if self.noise_cohort is None:
            return self.cohort_rate
        return min(1.0, self.noise_cohort / self.population)

    @property
    def noise_scale(self) -> float:
        """``m / M``: the factor on the sum's noise at simulated deployment scale (1 else)."""
        return 1.0 if self.noise_cohort is None else self.cohort / self.noise_cohort

    @property
    def update_noise(self) -> float:
        """The update's noise multiplier: ``z``, or ``z_Δ`` with adaptive clipping."""
        if self.adaptive is None:
            return self.noise_multiplier
        return update_noise_multiplier(self.noise_multiplier, self.adaptive.count_std)

    @property
    def count_std(self) -> float | None:
        """``σ_b``, the clip count's noise (``None`` with a fixed clip norm)."""
        return None if self.adaptive is None else self.adaptive.count_std

    @property
    def epsilon_release(self) -> float:
        """The ``ε`` of the whole run against whoever sees the released models
        (:func:`epsilon_release`, with amplification by subsampling)."""
        return self.spent_release(self.rounds)

    def spent_release(self, rounds: int) -> float:
        """The release's ``ε`` after ``rounds`` rounds (:func:`epsilon_release_after` of ``z``: with
        adaptive clipping the pair ``z_Δ``, ``σ_b`` is as private as ``z``); under the
        participation rule the one Gaussian mechanism's (:meth:`mu`), no amplification."""
        if self.capped:
            return gaussian_epsilon(self.mu(rounds), self.delta)
        return epsilon_release_after(
            self.noise_multiplier, self.sampling_rate, rounds, self.rounds, self.delta
        )

    def spent_server(self, rounds: int) -> float:
        """The ``ε`` against the server after ``rounds`` rounds for a user in every one of
        them, the most Poisson sampling allows (:func:`epsilon_server` of ``z``); under the
        participation rule the release's (nothing was amplified)."""
        if self.capped:
            return self.spent_release(rounds)
        return self.epsilon_server_at(rounds)

    def epsilon_server_at(self, participations: int) -> float:
        """The ``ε`` against the server of a user who joined ``participations`` rounds (at
        simulated deployment scale: a deployment's user, whose rounds carry the full ``z``)."""
        return epsilon_server(self.noise_multiplier, participations, self.delta)

    @property
    def epsilon_server(self) -> float:
        """The ``ε`` against the server of a user who joins every round
        (:attr:`server_participations`); under the participation rule the release's."""
        if self.capped:
            return self.spent_release(self.rounds)
        return self.epsilon_server_at(self.server_participations)

    @property
    def server_participations(self) -> int:
        """The most rounds one user can join: all of them (Poisson sampling has no cap), or
        one per period under the participation rule."""
        if self.period is not None:
            return len(period_lengths(self.rounds, self.period))
        return self.rounds

    @property
    def expected_participations(self) -> float:
        """``qR``: the rounds a user joins on average (a deployment's user at simulated
        deployment scale: ``M/N_dep · R``)."""
        return self.sampling_rate * self.rounds

    @property
    def expected_server_participations(self) -> int:
        """``⌈qR⌉``: the expected rounds rounded up to a count a user can join (at least 1)."""
        return max(1, math.ceil(round(self.expected_participations, 9)))

    def simulated_users_epsilon_server(self, participations: int) -> float:
        """At simulated deployment scale, the ``ε`` against the server of one of the
        simulation's own users who joined ``participations`` rounds: each of its rounds
        carries the noise scaled by ``m/M`` (:attr:`noise_scale`), multiplier ``z·m/M``."""
        return epsilon_server(self.noise_multiplier * self.noise_scale, participations, self.delta)

    @property
    def membership_eer_floor(self) -> float:
        """The lowest EER a verification test that is a membership test can reach under this
        run's noise (:func:`membership_eer_floor`): FedUV's codeword protocol, the baselines'
        class-row protocol. Enrollment after training is not bounded by it. Under the
        participation rule the Gaussian mechanism's, in closed form (:func:`gaussian_eer_floor`)."""
        if self.capped:
            return gaussian_eer_floor(self.mu(self.rounds))
        return membership_eer_floor(self.noise_multiplier, self.sampling_rate, self.rounds)

    def report(self, joined: int | None = None) -> dict[str, Any]:
        """``report.json``'s ``privacy``. ``joined``: the most rounds any of the run's own users
        joined (the simulator's selection, after training); ``None`` before training, where
        the most they can join (every round) stands in.

        ``epsilon_server`` is at ``server_participations``: ``joined`` (or every round) for a
        run's own users; at simulated deployment scale every round for a deployment's user, and
        the simulation's own users' far larger figure under ``simulated_deployment``."""
        if self.capped:
            return self._capped_report(joined)
        actual = self.server_participations if joined is None else joined
        simulated = self.noise_cohort is not None
        participations = self.server_participations if simulated else actual
        if simulated:
            basis = "the most rounds a deployment's user can join (Poisson sampling: every round)"
        elif joined is None:
            basis = "the most rounds a user can join (Poisson sampling: every round)"
        else:
            basis = "the most rounds any of the run's users joined (its selection)"
        expected = self.expected_server_participations
        return {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon_release,
            "epsilon_release": self.epsilon_release,
            "epsilon_release_rdp": epsilon_release_rdp(
                self.noise_multiplier, self.sampling_rate, self.rounds, self.delta
            ),
            "epsilon_server": self.epsilon_server_at(participations),
            "server_participations": participations,
            "server_participations_basis": basis,
            "expected_participations": self.expected_participations,
            "epsilon_server_expected": self.epsilon_server_at(expected),
            "adversaries": ADVERSARIES[self.mechanism],
            **self._mechanism_report(),
            "sampling_rate": self.sampling_rate,
            "sampling": SAMPLING,
            "accountant": ACCOUNTANT,
            "server_accountant": SERVER_ACCOUNTANT,
            "simulated_deployment": None
            if not simulated
            else {
                **self._deployment_report(),
                "note": "noise and ε of cohorts of noise_cohort from population; the "
                "simulation averaged expected_cohort of users real users per round",
                "simulated_users_participations": actual,
                "simulated_users_epsilon_server": self.simulated_users_epsilon_server(actual),
                "simulated_users_note": "the simulation's own users are far less private than "
                "the deployment's: each of their rounds carries noise_scale of the noise",
            },
        }

    def _mechanism_report(self) -> dict[str, Any]:
        """What :meth:`report` states of the mechanism whatever the sampling: the floor, δ, the
        noise and clipping, the schedule and the adjacency."""
        return {
            "membership_eer_floor": self.membership_eer_floor,
            "delta": self.delta,
            "noise_multiplier": self.noise_multiplier,
            "update_noise_multiplier": self.update_noise,
            "clip_count_std": self.count_std,
            "clip_count_bits": None if self.adaptive is None else COUNT_BITS,
            "clip_norm": self.clip_norm,
            "rounds": self.rounds,
            "expected_cohort": self.cohort,
            "users": self.users,
            "neighboring_relation": NEIGHBORING_RELATION,
            "adaptive_clipping": None
            if self.adaptive is None
            else self.adaptive.report(self.noise_multiplier),
        }

    def _deployment_report(self) -> dict[str, Any]:
        """The simulated deployment's cohort, population and the noise's scale onto the
        simulation (:meth:`report`'s ``simulated_deployment``, before what each sampling adds)."""
        return {
            "noise_cohort": self.noise_cohort,
            "population": self.population,
            "noise_scale": self.noise_scale,
        }

    def _capped_report(self, joined: int | None) -> dict[str, Any]:
        """:meth:`report` under the participation rule: both ``ε`` the one Gaussian
        mechanism's, for a user in one round of every period."""
        assert self.period is not None
        epsilon = self.spent_release(self.rounds)
        tree = self.noise == "tree"
        return {
            "mechanism": self.mechanism,
            "noise": self.noise,
            "algorithm": "DP-FTRL, tree aggregation" if tree else "DP-FedAvg",
            "epsilon": epsilon,
            "epsilon_release": epsilon,
            "epsilon_server": epsilon,
            "server_participations": self.server_participations,
            "server_participations_basis": "the most rounds a user can join under the "
            "participation rule (one per period)",
            "joined": joined,
            "participation": {
                "period": self.period,
                "rule": PERIOD_SAMPLING,
                "max_participations": self.server_participations,
                "sensitivity_units": self.units(self.rounds),
                "tree_depths": [tree_depth(n) for n in period_lengths(self.rounds, self.period)]
                if tree
                else None,
                "mu": self.mu(self.rounds),
            },
            "adversaries": PERIOD_ADVERSARIES[self.mechanism],
            **self._mechanism_report(),
            "sampling_rate": self.cohort_rate,
            "sampling": "period",
            "accountant": PERIOD_ACCOUNTANT,
            "server_accountant": PERIOD_ACCOUNTANT,
            "simulated_deployment": None
            if self.noise_cohort is None
            else {
                **self._deployment_report(),
                "note": "noise and ε of a deployment's cohorts of noise_cohort from population "
                "under its participation rule; the simulation averaged expected_cohort of users "
                "real users per round",
                "simulated_users_period": self.sampling_period,
                "simulated_users_epsilon_server": gaussian_epsilon(
                    self.simulated_users_mu(), self.delta
                ),
                "simulated_users_note": "an upper bound: the simulation's own users join one "
                "round of each of their own periods, each with noise_scale of the noise",
            },
        }

    def describe_server(self) -> str:
        """``ε = 151 against the server that ran training, for a user in all 800 rounds (28.2
        in the expected 80)``: the server's ``ε`` and who it holds against, for a terminal."""
        whom = {
            "distributed": "the server that ran training",
            "central": "anyone who knows the cohorts (with central noise not the server, which "
            "sees the updates)",
        }[self.mechanism]
        user = "a deployment's user" if self.noise_cohort is not None else "a user"
        expected = self.expected_server_participations
        text = (
            f"ε = {self.epsilon_server:.3g} against {whom}, for {user} in all {self.rounds} "
            f"rounds ({self.epsilon_server_at(expected):.3g} in the expected {expected})"
        )
        if self.noise_cohort is not None:
            text += (
                f"; the simulation's own users far less private: each of their rounds has "
                f"{self.noise_scale:.3g} of that noise, ε = "
                f"{self.simulated_users_epsilon_server(self.rounds):.3g} in all {self.rounds}"
            )
        return text

    def describe(self) -> str:
        """One line for a terminal: the mechanism, both ``ε`` and ``δ``, and what they rest on."""
        if self.capped:
            return self._describe_capped()
        count = "" if self.adaptive is None else f", z_Δ = {self.update_noise:.4g}, σ_b = "
        count += "" if self.adaptive is None else f"{self.count_std:.3g} on {COUNT_BITS} bits"
        if self.noise_cohort is None:
            cohort = f"expected cohort {self.cohort} of {self.users}"
        else:
            cohort = (
                f"SIMULATED DEPLOYMENT SCALE: the noise of expected cohorts of "
                f"{self.noise_cohort:,} from {self.population:,} users, scaled by "
                f"{self.noise_scale:.3g} onto the {self.cohort} of {self.users} simulated"
            )
        return (
            f"user-level DP, {self.mechanism}: ε = {self.epsilon_release:.3g} against anyone who "
            f"sees the released model, {self.describe_server()}; δ = {self.delta:.2g} "
            f"({NEIGHBORING_RELATION}) over {self.rounds} rounds (z = {self.noise_multiplier:.4g}"
            f"{count}, C = {self.clip_norm:g}{', adaptive' if self.adaptive else ''}, "
            f"{SAMPLING} sampling q = {self.sampling_rate:.3g}: {cohort})"
        )

    def _describe_capped(self) -> str:
        """:meth:`describe` under the participation rule."""
        assert self.period is not None
        name = "DP-FTRL (tree aggregation)" if self.noise == "tree" else "DP-FedAvg"
        whom = {
            "distributed": "against anyone who sees the released model and against the server "
            "that ran training",
            "central": "against anyone who sees the released model, whether or not they know "
            "who took part (not the server, which adds the noise)",
        }[self.mechanism]
        count = "" if self.adaptive is None else f", z_Δ = {self.update_noise:.4g}, σ_b = "
        count += "" if self.adaptive is None else f"{self.count_std:.3g} on {COUNT_BITS} bits"
        trees = ", the tree restarting each period" if self.noise == "tree" else ""
        cohorts = f"cohorts of {self.cohort} of {self.users}"
        if self.noise_cohort is not None:
            cohorts = (
                f"SIMULATED DEPLOYMENT SCALE: the noise of cohorts of {self.noise_cohort:,} from "
                f"{self.population:,} users, scaled by {self.noise_scale:.3g} onto the "
                f"{self.cohort} of {self.users} simulated, who join one round in "
                f"{self.sampling_period}"
            )
        return (
            f"user-level {name}, {self.mechanism}: ε = {self.epsilon_release:.3g} {whom}; "
            f"δ = {self.delta:.2g} ({NEIGHBORING_RELATION}) over {self.rounds} rounds, each user "
            f"in at most one round of each period of {self.period} (at most "
            f"{self.server_participations}){trees} (z = {self.noise_multiplier:.4g}{count}, "
            f"C = {self.clip_norm:g}{', adaptive' if self.adaptive else ''}, {cohorts})"
        )


def plan_privacy(
    mechanism: str,
    *,
    clip_norm: float,
    rounds: int,
    cohort: int,
    users: int,
    target_epsilon: float | None = None,
    noise: float | None = None,
    delta: float | None = None,
    adaptive: bool = False,
    clip_quantile: float = 0.5,
    clip_learning_rate: float = 0.2,
    clip_count_std: float | None = None,
    noise_cohort: int | None = None,
    population: int | None = None,
    dp_noise: str = "independent",
    period: int | None = None,
) -> PrivacyPlan | None:
    """The run's mechanism from its settings (``None`` when off): given a target ``ε`` the noise
    multiplier is computed for the run's ``rounds`` and Poisson-sampled cohorts of expected size
    ``cohort`` of ``users`` (``q = cohort / users``); given
    the noise multiplier, the ``ε`` follows. ``adaptive``: adaptive clipping from ``clip_norm``
    (:class:`AdaptiveClipping`; ``clip_count_std`` defaults to ``cohort / 20``).

    ``noise_cohort`` (``M``): simulated deployment scale (see the module's docstring): the noise,
    ``δ``'s default, ``σ_b``'s default and ``q`` are those of cohorts of ``M`` from
    ``population`` (default ``M·users/cohort``, the simulation's own rate kept).

    ``period`` (``b``): the participation rule instead of Poisson sampling (each user in at most
    one round of each period of ``b`` rounds; :attr:`PrivacyPlan.period`); ``dp_noise`` ``tree``
    (DP-FTRL) needs it and defaults it to ``⌊users/cohort⌋`` (every user can take part once a
    period), and needs ``central`` placement and a fixed clip norm (:func:`check_tree`)."""
    if mechanism == "off":
        return None
    if mechanism not in MECHANISMS:
        raise ConfigError(f"--dp must be one of {', '.join(MECHANISMS)}, not {mechanism!r}")
    if not clip_norm > 0:
        raise ConfigError(f"--clip-norm must be positive, not {clip_norm}")
    if dp_noise not in NOISES:
        raise ConfigError(f"--dp-noise must be one of {', '.join(NOISES)}, not {dp_noise!r}")
    if dp_noise == "tree":
        check_tree(mechanism, adaptive)
    cohort = min(cohort, users)
    accounted, expected = users, cohort  # the population and cohort the accountant sees
    if noise_cohort is not None:
        if noise_cohort < cohort:
            raise ConfigError(
                f"--dp-noise-cohort {noise_cohort} is smaller than the simulated cohort {cohort}: "
                "it simulates a deployment's larger cohort"
            )
        if population is None:
            population = max(noise_cohort, round(noise_cohort * users / cohort))
        if population < noise_cohort:
            raise ConfigError(f"--dp-population {population} < --dp-noise-cohort {noise_cohort}")
        accounted, expected = population, noise_cohort
    elif population is not None:
        raise ConfigError("--dp-population is the population of --dp-noise-cohort: give both")
    if dp_noise == "tree" and period is None:
        period = max(1, accounted // expected)
    if period is not None:
        if not 1 <= period <= 10**6:
            raise ConfigError(f"--dp-period must be in [1, 10^6], not {period}")
        if period * expected > accounted:
            raise ConfigError(
                f"--dp-period {period}: {period} rounds of cohorts of {expected} need "
                f"{period * expected} users, there are {accounted} (at most "
                f"{max(1, accounted // expected)})"
            )
    delta = default_delta(accounted) if delta is None else delta
    if not 0 < delta < 1:
        raise ConfigError(f"--dp-delta must be in (0, 1), not {delta}")
    if noise is None:
        if target_epsilon is None:
            raise ConfigError("--dp needs --dp-epsilon (or --dp-noise-multiplier)")
        if period is None:
            noise = noise_multiplier(target_epsilon, expected / accounted, rounds, delta)
        else:
            units = participation_units(rounds, period, dp_noise)
            noise = capped_noise_multiplier(target_epsilon, units, delta)
    elif not noise > 0:
        raise ConfigError(f"--dp-noise-multiplier must be positive, not {noise}")
    clipping = None
    if adaptive:
        count_std = expected / 20 if clip_count_std is None else clip_count_std
        clipping = AdaptiveClipping(clip_quantile, clip_learning_rate, float(count_std))
        update_noise_multiplier(float(noise), clipping.count_std)  # refused when impossible
    plan = PrivacyPlan(
        mechanism, float(noise), clip_norm, delta, rounds, cohort, users, target_epsilon,
        clipping, noise_cohort, population, noise=dp_noise, period=period,
    )  # fmt: skip
    if target_epsilon is not None and plan.epsilon_release > target_epsilon * (1 + 1e-6):
        raise ConfigError(
            f"this run would spend ε = {plan.epsilon_release:.3g} > the budget {target_epsilon:g}: "
            "lower --rounds or raise --dp-epsilon"
        )
    return plan


def check_tree(mechanism: str, adaptive: bool) -> None:
    """Refuse what tree noise (DP-FTRL) cannot be here, in one line each:

    - ``distributed``: a round's release must carry the *difference* of two prefix sums' tree
      noises, which subtracts the noise of nodes that earlier cohorts' devices drew; a device
      of this cohort cannot know it, and the server must not. Doing it needs secret resharing
      from each cohort's devices to later ones (the distributed matrix mechanism, arXiv
      2410.16161), which SecAgg+ does not give. Fresh shares per round are DP-FedAvg again.
    - adaptive clipping: a node sums the rounds below it under one noise scale, so every round
      of a tree must clip to the same ``C``."""
    if mechanism == "distributed":
        raise ConfigError(
            "--dp-noise tree needs --dp central: a round's tree noise subtracts noise that "
            "earlier cohorts' devices drew, which no device of this cohort holds (docs/privacy.md)"
        )
    if adaptive:
        raise ConfigError(
            "--dp-noise tree needs a fixed --clip-norm: a tree node sums rounds under one noise "
            "scale (drop --adaptive-clipping)"
        )


def plan_from_settings(
    settings: Any,
    mechanism: str,
    *,
    rounds: int,
    cohort: int,
    users: int,
    default_epsilon: float | None = None,
    default_period: int | None = None,
) -> PrivacyPlan | None:
    """:func:`plan_privacy` from a run's privacy settings (:class:`uvtrain.config.Privacy`) with
    the placement ``mechanism`` (the simulator's ``settings.dp``, a deployment's resolved one);
    ``default_epsilon`` is the budget when neither ``ε`` nor ``z`` is given (a deployment's
    :data:`~uvtrain.config.SECURE_DEFAULT_EPSILON`). ``dp_period``: unset takes
    ``default_period`` (``None``: Poisson sampling; a deployment's ``users/cohort``); ``0`` is
    Poisson sampling whatever the default."""
    period = settings.dp_period if settings.dp_period is not None else default_period
    if settings.dp_period == 0 and settings.dp_noise == "tree":
        raise ConfigError("--dp-noise tree needs a participation period (--dp-period 0 is none)")
    target = settings.dp_epsilon
    if target is None and settings.dp_noise_multiplier is None:
        target = default_epsilon
    return plan_privacy(
        mechanism,
        clip_norm=settings.clip_norm,
        rounds=rounds,
        cohort=cohort,
        users=users,
        target_epsilon=target,
        noise=settings.dp_noise_multiplier,
        delta=settings.dp_delta,
        adaptive=settings.adaptive_clipping,
        clip_quantile=settings.clip_quantile,
        clip_learning_rate=settings.clip_learning_rate,
        clip_count_std=settings.clip_count_std,
        noise_cohort=settings.dp_noise_cohort,
        population=settings.dp_population,
        dp_noise=settings.dp_noise,
        period=period or None,
    )


# ----------------------------------------------------------------------------------------------
# The mechanism as steps of the round
# ----------------------------------------------------------------------------------------------


def _generator(seed: int, round_number: int, stream: int, client: int) -> torch.Generator:
    """A torch generator for one client's (or the server's) noise of one round."""
    entropy = np.random.SeedSequence([seed, round_number, stream, client]).generate_state(2)
    return torch.Generator().manual_seed(int(entropy[0]) << 32 | int(entropy[1]))


def secret_generator() -> torch.Generator:
    """A torch generator seeded from the operating system's secret randomness (``secrets``),
    fresh at each call: the noise of a real device or server, whose seed must never be known
    (noise drawn from the run's public seed could be subtracted)."""
    return torch.Generator().manual_seed(secrets.randbits(63))


def update_norms(deltas: Tensors) -> Tensor:
    """``[m]`` each client's L2 norm over all its parameters' updates."""
    squares = [
        value.flatten(1).double().pow(2).sum(1) if value.dim() > 1 else value.double().pow(2)
        for value in deltas.values()
    ]
    return torch.stack(squares).sum(0).sqrt()


def clip_updates(deltas: Tensors, clip_norm: float) -> tuple[Tensors, Tensor]:
    """Each client's update (``[m, ...]``) clipped to L2 norm ``clip_norm`` over all its
    parameters, ``δ̂_k = δ_k · min(1, C / ‖δ_k‖)``, and the norms ``‖δ_k‖`` before clipping: the
    the mechanism's (:meth:`UserLevelDP.user_half`) and a server's re-clipping (``uvdeploy``)."""
    norms = update_norms(deltas)
    scale = torch.clamp(clip_norm / norms.clamp_min(1e-12), max=1.0)
    clipped = {
        name: value * scale.to(value.dtype).reshape(-1, *[1] * (value.dim() - 1))
        for name, value in deltas.items()
    }
    return clipped, norms


def add_noise(values: Tensors, std: float, generator: torch.Generator) -> Tensors:
    """``values`` plus ``N(0, std²)`` in every entry, drawn from ``generator`` in the order of
    ``values`` (float32 draws): a client's noise share, or the server's noise on a sum."""
    noisy = {}
    for name, value in values.items():
        noise = torch.randn(value.shape, generator=generator, dtype=torch.float32)
        noisy[name] = value + std * noise.to(value.device, value.dtype)
    return noisy


def scalar_noise(std: float, generator: torch.Generator) -> float:
    """One draw of ``N(0, std²)`` (float64): the noise, or a client's share of it, on the count
    of unclipped clients."""
    return std * float(torch.randn((), generator=generator, dtype=torch.float64))


#: The noise's streams: what ``(seed, round, stream, client)`` draws in the simulator
#: (:data:`TREE_NOISE`: ``(seed, tree + 1, stream, node)``).
CLIENT_UPDATE_NOISE, SERVER_UPDATE_NOISE, CLIENT_COUNT_NOISE, SERVER_COUNT_NOISE = 1, 2, 3, 4
TREE_NOISE = 5

NoiseSource = Callable[[int, int, int], torch.Generator]
"""Where a draw of the mechanism comes from: ``(round, stream, client)`` → a generator."""


def seeded_noise(seed: int) -> NoiseSource:
    """The simulator's noise: a generator from ``(seed, round, stream, client)``, so that a
    resumed run is bit-exact (and the audit can reproduce a round)."""
    return partial(_generator, seed)


def secret_noise(round_number: int, stream: int, client: int) -> torch.Generator:
    """A real device's or server's noise: a fresh secret generator at every draw
    (:func:`secret_generator`), whatever the round, stream and client."""
    return secret_generator()


def prefix_nodes(position: int) -> set[tuple[int, int]]:
    """The nodes ``(level, index)`` of a binary tree whose sums add up to the sum of leaves
    ``1..position``: one per set bit ``l`` of ``position``, the node ``(l, ⌊position/2^l⌋ − 1)``
    covering leaves ``index·2^l + 1 … (index + 1)·2^l`` (the binary counter of Dwork et al. 2010
    and Chan et al. 2011; Kairouz et al. 2021, Algorithm 2)."""
    return {
        (level, (position >> level) - 1)
        for level in range(position.bit_length())
        if position >> level & 1
    }


@dataclass
class TreeNoise:
    """DP-FTRL's noise (Kairouz, McMahan, Song, Thakkar, Thakurta and Xu, "Practical and
    Private (Deep) Learning without Sampling or Shuffling", ICML 2021, Sec. 3 and Appendix D),
    in the residual form that composes with any server optimiser (TFF's
    ``TreeResidualSumQuery``): every node of a binary tree over a period's rounds carries its own
    ``N(0, σ²)``, the noisy sum of rounds ``1..p`` of the period is the sum of its
    :func:`prefix_nodes` with theirs, and round ``p`` releases the difference of two such
    prefix sums — its own sum plus :meth:`residual` — so that the model after round ``p`` holds
    the prefix sum's noise, at most :func:`tree_depth` nodes' worth, where independent noise
    would hold ``p`` rounds'. The tree restarts at every period (Appendix D's restarts).

    A node's noise is drawn again, identically, when it leaves a prefix, from ``source`` at
    ``(tree + 1, TREE_NOISE, node)``: the simulator's seeded noise, or on a real server a key
    from its secret randomness (``key``), which its checkpoint keeps (the server that adds
    the noise can subtract it: central placement trusts it)."""

    period: int
    source: NoiseSource
    key: int | None = None

    @classmethod
    def for_source(cls, period: int, source: NoiseSource) -> TreeNoise:
        """The tree over ``source``; a real server's :func:`secret_noise` (fresh at every draw,
        so no node could be drawn twice) becomes a secret key of its own."""
        if source is secret_noise:
            key = secrets.randbits(63)
            return cls(period, seeded_noise(key), key)
        return cls(period, source)

    def residual(self, like: Tensors, std: float, round_number: int) -> Tensors:
        """The noise round ``round_number`` adds to its sum (shaped as ``like``): the nodes that
        enter the prefix minus those that leave it, each ``N(0, std²)`` (float32 draws)."""
        tree, position = divmod(round_number - 1, self.period)
        now, before = prefix_nodes(position + 1), prefix_nodes(position)
        noise = {
            name: torch.zeros(value.shape, dtype=torch.float32) for name, value in like.items()
        }
        for sign, nodes in ((1.0, now - before), (-1.0, before - now)):
            for level, index in sorted(nodes):
                generator = self.source(tree + 1, TREE_NOISE, index << 6 | level)
                for name, value in like.items():
                    draw = torch.randn(value.shape, generator=generator, dtype=torch.float32)
                    noise[name] += sign * std * draw
        return noise

    def state_dict(self) -> dict[str, int]:
        return {} if self.key is None else {"tree_key": self.key}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.key is not None and "tree_key" in state:
            self.key = int(state["tree_key"])
            self.source = seeded_noise(self.key)


@dataclass
class UserLevelDP:
    """The one user-level DP mechanism (see the module's docstring), in two halves as
    pfl-research's postprocessors: :meth:`user_half` runs on each user's update (the simulator's
    cohort stacked, a Flower device alone, the audit's clients), :meth:`server_half` on the sum
    the transport delivers (a plain sum, the audit's SecAgg+, Flower's SecAgg+ or plain replies).
    Each returns its metrics. Adaptive clipping is this object's state: ``clip_norm`` is the
    current round's ``C_r``; :meth:`server_half` moves it (:meth:`state_dict` keeps it).

    ``update_noise`` is ``z_Δ`` (``σ = z_Δ·C_r`` on the sum); ``denominator`` the expected cohort
    ``qN``; ``noise`` where each draw comes from (:func:`seeded_noise`, :func:`secret_noise`);
    ``survivors`` the count each distributed share is calibrated to (Flower's ``m_min``;
    ``None``: the round's cohort ``m′``); ``plan`` the run's accounting (``ε`` per round)."""

    mechanism: str
    clip_norm: float
    update_noise: float
    denominator: float
    adaptive: AdaptiveClipping | None = None
    noise: NoiseSource = secret_noise
    survivors: int | None = None
    plan: PrivacyPlan | None = None
    tree: TreeNoise | None = None

    @classmethod
    def from_plan(
        cls, plan: PrivacyPlan, noise: NoiseSource = secret_noise, survivors: int | None = None
    ) -> UserLevelDP:
        """The mechanism of a run's plan, its clip norm the plan's initial one; at simulated
        deployment scale both noises scaled by ``m/M`` (:attr:`PrivacyPlan.noise_scale`)."""
        scale = plan.noise_scale
        adaptive = plan.adaptive
        if adaptive is not None and scale != 1.0:
            adaptive = replace(adaptive, count_std=adaptive.count_std * scale)
        tree = None
        if plan.noise == "tree":
            assert plan.period is not None
            tree = TreeNoise.for_source(plan.period, noise)
        return cls(
            plan.mechanism,
            plan.clip_norm,
            plan.update_noise * scale,
            float(plan.cohort),
            adaptive,
            noise,
            survivors,
            plan,
            tree,
        )

    @property
    def distributed(self) -> bool:
        return self.mechanism == "distributed"

    def clip(self, deltas: Tensors) -> Tensors:
        """Each update (``[m, ...]``) clipped to this round's ``C_r`` (:func:`clip_updates`)."""
        return clip_updates(deltas, self.clip_norm)[0]

    def user_half(
        self, deltas: Tensors, clients: Sequence[int] | Tensor, round_number: int
    ) -> tuple[Tensors, Tensor | None, dict[str, Any]]:
        """What each user sends: its update (``[m, ...]``, one row per user of ``clients``)
        clipped to ``C_r``; in ``distributed`` plus its share ``N(0, σ²/m′)`` (``m′``: the
        ``survivors`` or the cohort); with adaptive clipping its bit ``1[‖δ_k‖ ≤ C_r] − ½``
        (``[m]`` float64; distributed: plus its share ``N(0, σ_b²/m′)``), else ``None``; and
        the clipping's metrics (a device keeps them)."""
        clients = [int(client) for client in clients]
        clipped, norms = clip_updates(deltas, self.clip_norm)
        metrics = {  # an empty cohort's are NaN (null in metrics.jsonl)
            "clipped": float((norms > self.clip_norm).double().mean()),
            "update_norm": float(norms.median()) if len(norms) else math.nan,
            "clip_norm": self.clip_norm,
        }
        count = len(clients)
        sharing = self.distributed and count > 0
        if sharing:
            share = self.update_noise * self.clip_norm / math.sqrt(self.survivors or count)
            clipped = self._add_shares(clipped, share, clients, round_number)
        bits = None
        if self.adaptive is not None:
            bits = (norms <= self.clip_norm).double() - 0.5  # ±½ (Andrew et al. 2021, Sec. 3.1)
            if sharing:
                share = self.adaptive.count_std / math.sqrt(self.survivors or count)
                draws = [
                    scalar_noise(share, self.noise(round_number, CLIENT_COUNT_NOISE, client))
                    for client in clients
                ]
                bits = bits + torch.tensor(draws, dtype=torch.float64)
        return clipped, bits, metrics

    def _add_shares(
        self, clipped: Tensors, share: float, clients: list[int], round_number: int
    ) -> Tensors:
        noisy = {name: value.clone() for name, value in clipped.items()}
        for row, client in enumerate(clients):
            generator = self.noise(round_number, CLIENT_UPDATE_NOISE, client)
            own = add_noise({name: value[row] for name, value in noisy.items()}, share, generator)
            for name, value in own.items():
                noisy[name][row] = value
        return noisy

    def server_half(
        self,
        base: Tensors,
        total: Tensors,
        bits: float | None,
        count: int,
        round_number: int,
    ) -> tuple[Tensors, dict[str, Any]]:
        """The release from the transport's sum of ``count`` users' updates ``total`` (and of
        their bits ``bits``): ``θ' = θ + (Σ_k δ̂_k + n) / (qN)``, ``n`` the server's
        ``N(0, σ²)`` (``central``, or an empty cohort's noise alone; in ``distributed`` the
        users' shares are in the sum already); with adaptive clipping the next ``C_r`` from
        ``b̃ = (Σ_k b_k + N(0, σ_b²)) / (qN) + ½`` (the server's count noise only where the
        users added none). Metrics: the round's clip norm, ``b̃`` and the ``ε`` spent, against
        the release and against the server (:meth:`PrivacyPlan.spent_server`)."""
        clip_norm = self.clip_norm
        server_adds = not (self.distributed and count > 0)
        std = self.update_noise * clip_norm if server_adds else 0.0
        released = {}
        generator = self.noise(round_number, SERVER_UPDATE_NOISE, 0) if std > 0 else None
        tree = None
        if self.tree is not None:  # DP-FTRL: the tree's residual instead of fresh noise
            tree, generator = self.tree.residual(base, std, round_number), None
        for name, value in base.items():
            summed = total[name]
            if tree is not None:
                summed = summed + tree[name].to(summed.device, summed.dtype)
            if generator is not None:
                noise = torch.randn(value.shape, generator=generator, dtype=torch.float32)
                summed = summed + (std * noise).to(summed.device, summed.dtype)
            released[name] = value + (summed / self.denominator).to(value.dtype)
        metrics: dict[str, Any] = {"clip_norm": clip_norm}
        if self.adaptive is not None:
            if bits is None:
                raise TrainingError(f"round {round_number}: no count of unclipped users")
            if server_adds:
                generator = self.noise(round_number, SERVER_COUNT_NOISE, 0)
                bits += scalar_noise(self.adaptive.count_std, generator)
            fraction = bits / self.denominator + 0.5
            metrics["unclipped"] = fraction
            self.clip_norm = self.adaptive.next_clip_norm(clip_norm, fraction)
        if self.plan is not None:
            metrics["epsilon"] = self.plan.spent_release(round_number)
            metrics["epsilon_server"] = self.plan.spent_server(round_number)
        return released, metrics

    def state_dict(self) -> dict[str, float]:
        tree = {} if self.tree is None else self.tree.state_dict()
        return {"clip_norm": float(self.clip_norm), **tree}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clip_norm = float(state["clip_norm"])
        if self.tree is not None:
            self.tree.load_state_dict(state)


@dataclass
class PrivateUsers:
    """The mechanism's user half as the simulator's per-client postprocessing step
    (:data:`uvtrain.rounds.UpdateStep`): the cohort's updates clipped (and noised), their bits
    in ``clip_bits``, the clipping's metrics in the round's."""

    mechanism: UserLevelDP

    def __call__(self, updates: ClientUpdates, base: Tensors, plan: RoundPlan) -> ClientUpdates:
        updates = updates.as_deltas(base)
        assert updates.deltas is not None
        clients = updates.clients.tolist()
        deltas, bits, metrics = self.mechanism.user_half(updates.deltas, clients, plan.number)
        return replace(
            updates, deltas=deltas, clip_bits=bits, metrics={**updates.metrics, **metrics}
        )

    def state_dict(self) -> dict[str, float]:
        return self.mechanism.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mechanism.load_state_dict(state)


class Summation(Protocol):
    """A transport under the mechanism: the sum of the users' (clipped, noised) updates
    ``Σ_k δ̂_k`` as the server obtains it (the audit's SecAgg+), with its metrics."""

    def sum(
        self, updates: ClientUpdates, base: Tensors, plan: RoundPlan
    ) -> tuple[Tensors, dict[str, Any]]: ...


@dataclass
class PrivateSum(Aggregator):
    """The mechanism's server half over a transport (composition, as Flower's DP strategy
    wrappers): the sum comes from ``updates.total`` (a transport that summed as the users
    trained: Flower's SecAgg+), from ``transport`` (the audit's SecAgg+) or, plain, from the
    users' updates; the bits are summed alike; :meth:`UserLevelDP.server_half` releases."""

    mechanism: UserLevelDP
    transport: Summation | None = None

    def __call__(
        self, updates: ClientUpdates, base: Tensors, plan: RoundPlan
    ) -> tuple[Tensors, dict[str, Any]]:
        metrics: dict[str, Any] = {}
        if updates.total is not None:
            total = updates.total
        elif self.transport is not None:
            total, metrics = self.transport.sum(updates, base, plan)
        elif updates.deltas is not None:
            total = {name: updates.deltas[name].sum(0) for name in base}
        else:
            raise TrainingError("the DP sum needs the round's clipped updates or their sum")
        bits = None if updates.clip_bits is None else float(updates.clip_bits.double().sum())
        count = len(updates.clients)
        new, released = self.mechanism.server_half(base, total, bits, count, plan.number)
        return new, {**metrics, **released}

    def fusable(self) -> bool:
        """A transport that sums as the users train (Flower's SecAgg+) hands over the sum."""
        return True

    def fused_weights(self, sizes: Tensor) -> Tensor:
        return torch.ones_like(sizes)  # every user weighs the same
