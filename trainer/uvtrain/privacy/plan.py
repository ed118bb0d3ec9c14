"""A run's differential privacy fixed before training: :func:`plan_privacy` makes the
:class:`PrivacyPlan` from the run's :class:`~uvtrain.config.Privacy` part, its rounds and
cohort; the plan states both ``ε`` (:mod:`uvtrain.accounting` computes them), the floor and what
they rest on (``report.json``'s ``privacy``). No torch is imported here."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..accounting import (
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
from ..config import Privacy
from ..errors import ConfigError

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


def plan_privacy(privacy: Privacy, *, rounds: int, cohort: int, users: int) -> PrivacyPlan | None:
    """The run's plan from its privacy part (``None`` when ``privacy.dp`` is ``off``), for
    ``rounds`` rounds and Poisson-sampled cohorts of expected size ``cohort`` of ``users``
    (``q = cohort / users``): given the budget ``dp_epsilon`` the noise multiplier is computed
    for them; given ``dp_noise_multiplier``, the ``ε`` follows. ``adaptive_clipping``: adaptive
    clipping from ``clip_norm`` (:class:`AdaptiveClipping`; ``clip_count_std`` defaults to
    ``cohort / 20``).

    ``dp_noise_cohort`` (``M``): simulated deployment scale (see :mod:`uvtrain.privacy`): the
    noise, ``δ``'s default, ``σ_b``'s default and ``q`` are those of cohorts of ``M`` from
    ``dp_population`` (default ``M·users/cohort``, the simulation's own rate kept).

    ``dp_period`` (``b``): the participation rule instead of Poisson sampling (each user in at
    most one round of each period of ``b`` rounds; :attr:`PrivacyPlan.period`; ``0``: Poisson
    sampling); ``dp_noise`` ``tree`` (DP-FTRL) needs it and defaults it to ``⌊users/cohort⌋``
    (every user can take part once a period), and needs ``central`` placement and a fixed clip
    norm (:func:`check_tree`). The part has checked each setting on its own (:class:`Privacy`);
    what is refused here depends on the run's rounds, cohort and users."""
    if privacy.dp == "off":
        return None
    dp_noise, adaptive = privacy.dp_noise, privacy.adaptive_clipping
    if dp_noise == "tree":
        if privacy.dp_period == 0:
            raise ConfigError(
                "--dp-noise tree needs a participation period (--dp-period 0 is none)"
            )
        check_tree(privacy.dp, adaptive)
    cohort = min(cohort, users)
    accounted, expected = users, cohort  # the population and cohort the accountant sees
    noise_cohort, population = privacy.dp_noise_cohort, privacy.dp_population
    if noise_cohort is not None:
        if noise_cohort < cohort:
            raise ConfigError(
                f"--dp-noise-cohort {noise_cohort} is smaller than the simulated cohort {cohort}: "
                "it simulates a deployment's larger cohort"
            )
        if population is None:
            population = max(noise_cohort, round(noise_cohort * users / cohort))
        accounted, expected = population, noise_cohort
    period = privacy.dp_period or None
    if dp_noise == "tree" and period is None:
        period = max(1, accounted // expected)
    if period is not None and period * expected > accounted:
        raise ConfigError(
            f"--dp-period {period}: {period} rounds of cohorts of {expected} need "
            f"{period * expected} users, there are {accounted} (at most "
            f"{max(1, accounted // expected)})"
        )
    delta = default_delta(accounted) if privacy.dp_delta is None else privacy.dp_delta
    target_epsilon, noise = privacy.dp_epsilon, privacy.dp_noise_multiplier
    if noise is None:
        assert target_epsilon is not None  # the part holds one of the two
        if period is None:
            noise = noise_multiplier(target_epsilon, expected / accounted, rounds, delta)
        else:
            units = participation_units(rounds, period, dp_noise)
            noise = capped_noise_multiplier(target_epsilon, units, delta)
    clipping = None
    if adaptive:
        count_std = expected / 20 if privacy.clip_count_std is None else privacy.clip_count_std
        clipping = AdaptiveClipping(
            privacy.clip_quantile, privacy.clip_learning_rate, float(count_std)
        )
        update_noise_multiplier(float(noise), clipping.count_std)  # refused when impossible
    plan = PrivacyPlan(
        privacy.dp, float(noise), privacy.clip_norm, delta, rounds, cohort, users,
        target_epsilon, clipping, noise_cohort, population, noise=dp_noise, period=period,
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
