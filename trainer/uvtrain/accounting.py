"""The accountant of user-level differential privacy (:mod:`uvtrain.privacy` runs the
mechanism and plans a run with these): ``δ``'s default, the ``ε`` of a run against whoever sees
the released models (the PLD of the Poisson-subsampled Gaussian, RDP beside it as the
cross-check) and against the server that draws
the cohorts (the Gaussian mechanism composed over the rounds a user joins, in closed form), the
noise a budget needs, the membership EER floor (from the PLD), adaptive clipping's split of the
budget, and under a participation rule (``--dp-period``, tree noise) the sensitivity ``S`` and
the one Gaussian mechanism it makes. Pure numbers: no torch. The choices, the adversaries and
the papers are in :mod:`uvtrain.privacy`'s docstring and docs/privacy.md §5.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from .errors import ConfigError


def default_delta(users: int) -> float:
    """``δ`` when none is given: ``min(N^−1.1, 10⁻⁶)`` for ``N`` users — below ``1/N^1.1`` at
    every population (a mechanism that publishes one random user's data whole is
    ``(0, 1/N)``-DP, so ``δ`` must be well below ``1/N``), and pfl-research's benchmark ``10⁻⁶``
    wherever that is smaller (up to ``N`` ≈ 285,000)."""
    return min(max(1, users) ** -1.1, 1e-6)


def round_event(noise: float, sampling_rate: float) -> Any:
    """One round as a ``dp_accounting`` event: the sum of the cohort's clipped updates with
    noise ``N(0, (noise·C)²)`` — a Gaussian mechanism of multiplier ``noise`` under add/remove
    adjacency (sensitivity ``C``) — on a Poisson-sampled cohort of rate ``sampling_rate``."""
    import dp_accounting

    return dp_accounting.PoissonSampledDpEvent(sampling_rate, dp_accounting.GaussianDpEvent(noise))


@lru_cache(maxsize=256)
def _rdp_per_round(noise: float, sampling_rate: float) -> tuple[tuple[float, ...], np.ndarray]:
    """The RDP orders and the Rényi divergence of one round (it composes by addition)."""
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    logging.getLogger("absl").setLevel(logging.ERROR)  # its convergence notes per order
    accountant = rdp.RdpAccountant(None, dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(round_event(noise, sampling_rate), 1)
    return tuple(accountant._orders), np.asarray(accountant._rdp, dtype=np.float64)


def epsilon_release(noise: float, sampling_rate: float, rounds: int, delta: float) -> float:
    """The add/remove ``ε`` of ``rounds`` rounds of the Gaussian sum with noise multiplier
    ``noise`` (relative to the clip norm ``C``) on Poisson-sampled cohorts of rate
    ``sampling_rate`` (:func:`round_event`), for ``δ`` (``inf`` without noise): the guarantee
    against whoever sees the released models but not the cohorts.

    Read from dp-accounting's privacy loss distribution (:func:`_composed_pld`: pessimistic,
    so an upper bound, and within its loss bucket of the exact ``ε``), and from its RDP
    accountant (:func:`epsilon_release_rdp`, also an upper bound, loosest at the small sampling
    rates of a deployment): the smaller of the two, which is the PLD's wherever the PLD's bucket
    did not have to widen (:data:`PLD_MAX_BUCKETS`); RDP's alone below
    :data:`PLD_MIN_NOISE`."""
    if rounds <= 0:
        return 0.0
    if noise <= 0:
        return math.inf
    rdp = epsilon_release_rdp(noise, sampling_rate, rounds, delta)
    if noise < PLD_MIN_NOISE:
        return rdp
    return min(rdp, _pld_epsilon(float(noise), float(sampling_rate), int(rounds), float(delta)))


#: Below this noise multiplier :func:`epsilon_release` states RDP's ``ε`` alone: so little noise
#: needs a PLD of millions of buckets (seconds to minutes: 18 s at z 0.1, q 0.1, 800 rounds,
#: where ``ε`` is in the thousands), and no claim rests on how loose such a bound is. The
#: docs' budgets (ε ≤ 8) need z ≥ 0.41 even at a deployment's q = 0.001.
PLD_MIN_NOISE = 0.25


def epsilon_release_rdp(noise: float, sampling_rate: float, rounds: int, delta: float) -> float:
    """:func:`epsilon_release` from dp-accounting's RDP accountant alone (Mironov, Talwar and
    Zhang, "Rényi Differential Privacy of the Sampled Gaussian Mechanism", 2019): the figure
    DP-FedAvg's literature states (McMahan et al. 2018, Andrew et al. 2021), kept as the
    cross-check of the PLD and for noise below :data:`PLD_MIN_NOISE`."""
    if rounds <= 0:
        return 0.0
    if noise <= 0:
        return math.inf
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    orders, per_round = _rdp_per_round(float(noise), float(sampling_rate))
    value, _ = rdp.compute_epsilon(orders, per_round * rounds, delta)
    return float(value)


@lru_cache(maxsize=4096)
def _pld_epsilon(noise: float, sampling_rate: float, rounds: int, delta: float) -> float:
    """``ε`` at ``δ`` of :func:`_composed_pld` (cached: a run's plan, its progress lines and
    its report ask for the same few)."""
    return float(_composed_pld(noise, sampling_rate, rounds).get_epsilon_for_delta(delta))


#: How many points of the run :func:`epsilon_release_after` reads the PLD at.
SPENT_STEPS = 16


def epsilon_release_after(
    noise: float, sampling_rate: float, rounds: int, planned: int, delta: float
) -> float:
    """The release's ``ε`` spent after ``rounds`` of a run of ``planned`` rounds, for its
    progress lines: the PLD's at the first of :data:`SPENT_STEPS` evenly spaced rounds at or
    after ``rounds`` (the PLD costs up to a second a point: not one per round), or RDP's at
    ``rounds`` where that is smaller. Both are upper bounds and grow with the rounds, so the
    figure never falls as the run goes on, and it is exactly :func:`epsilon_release` at the
    run's last round."""
    if rounds <= 0 or rounds >= planned:
        return epsilon_release(noise, sampling_rate, rounds, delta)
    step = -(-rounds * SPENT_STEPS // planned) * planned // SPENT_STEPS
    point = max(rounds, min(planned, step))
    return min(
        epsilon_release_rdp(noise, sampling_rate, rounds, delta),
        epsilon_release(noise, sampling_rate, point, delta),
    )


@lru_cache(maxsize=4096)
def epsilon_server(noise: float, participations: int, delta: float) -> float:
    """The add/remove ``ε`` against the server that picks the cohorts, for a user who joined
    ``participations`` rounds of the Gaussian sum with noise multiplier ``noise``: no
    amplification by subsampling (the server knows who was sampled), so the Gaussian mechanism
    of sensitivity ``C`` composed ``k`` times — exactly one Gaussian mechanism of multiplier
    ``noise/√k`` (the sum of ``k`` independent Gaussian releases is sufficient for them).

    Its privacy profile is in closed form (Balle and Wang, "Improving the Gaussian Mechanism for
    Differential Privacy", ICML 2018, Theorem 8), ``δ(ε) = Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ)``
    with ``σ = noise/√k``: dp-accounting's PLD ``GaussianPrivacyLoss.get_delta_for_epsilon``;
    ``ε`` is found by bisection to a relative 10⁻⁹. ``0`` for no participation, ``inf``
    without noise.

    Parameters
    ----------
    noise:
        ``z``, the noise multiplier of each round's sum (relative to the clip norm).
    participations:
        ``k``, the rounds the user joined (or can join).
    delta:
        ``δ``.
    """
    if participations <= 0:
        return 0.0
    if noise <= 0:
        return math.inf
    from dp_accounting.pld.privacy_loss_mechanism import GaussianPrivacyLoss

    loss = GaussianPrivacyLoss(noise / math.sqrt(participations), sensitivity=1.0)

    def profile(value: float) -> float:
        return float(loss.get_delta_for_epsilon(value))

    if profile(0.0) <= delta:
        return 0.0
    return _smallest_at_most(profile, delta, 1e-9)


def _smallest_at_most(
    falling: Callable[[float], float], target: float, tolerance: float, limit: float = math.inf
) -> float:
    """The smallest ``x > 0`` (to a relative ``tolerance``) at which the non-increasing
    ``falling(x) <= target``: doubling from 1, then bisection. :class:`ValueError` when ``x``
    would pass ``limit``."""
    low, high = 0.0, 1.0
    while falling(high) > target:
        low, high = high, high * 2
        if high > limit:
            raise ValueError(f"no x up to {limit:g} reaches {target:g}")
    while high - low > tolerance * high:
        middle = (low + high) / 2
        if falling(middle) > target:
            low = middle
        else:
            high = middle
    return high


#: The privacy-loss bucket of the PLD that :func:`epsilon_release` and
#: :func:`membership_eer_floor` read (dp-accounting's ``value_discretization_interval``).
#: dp-accounting rounds each loss up (its pessimistic estimate), so a coarser bucket only
#: overstates ``δ(ε)``: ``ε`` stays an upper bound and the floor a lower one. 10⁻³ gives the docs'
#: runs' floors within 0.001 of 10⁻⁴'s and their ``ε`` within 1.5 % (``python
#: benchmarks/pld_slack.py``), about ten times faster (0.2–0.3 s for 800 rounds on one core);
#: results are cached.
PLD_LOSS_INTERVAL = 1e-3


#: The most buckets the composed PLD may need in the worst case (:func:`_composed_pld`): with
#: little noise the losses span so far that ``rounds`` rounds at :data:`PLD_LOSS_INTERVAL`
#: would not fit in memory (a simulation's own users, noise ``z·m/M``), and the bucket grows.
PLD_MAX_BUCKETS = 1e8


@lru_cache(maxsize=256)
def membership_eer_floor(noise: float, sampling_rate: float, rounds: int) -> float:
    """The lowest equal error rate any test of "was this user in training" can have against
    a model trained with user-level DP (docs/privacy.md, "Verifying by enrollment").

    Hypothesis testing under ``(ε, δ)``-DP (Kairouz, Oh and Viswanath, ICML 2015, Thm. 2.1):
    ``TPR ≤ e^ε·FPR + δ`` and ``1 − FPR ≤ e^ε·(1 − TPR) + δ``, for every point ``(ε, δ(ε))`` of
    the run's privacy profile. At the equal error rate ``e`` this reads
    ``1 − e ≤ e^ε·e + δ(ε)``, so ``e ≥ (1 − δ(ε)) / (1 + e^ε)``, the largest over ``ε``.

    The profile is dp-accounting's privacy loss distribution (PLD) of the run: one round's
    Poisson-subsampled Gaussian (``from_gaussian_mechanism(z, sampling_prob=q)``, add/remove:
    both directions, ``δ(ε)`` the larger) composed over ``rounds`` — tight up to its
    discretisation (:data:`PLD_LOSS_INTERVAL`, pessimistic), where the RDP profile is an
    upper bound on ``δ(ε)``, loosest at small ``ε``, and so gave a lower floor (0.061 instead of
    0.206 at the curve's ε 8; kept as the cross-check in tests/trainer/test_privacy.py).

    The profile ``(ε, δ(ε))`` over all ``ε`` determines the mechanism's trade-off function (Dong,
    Roth and Su, "Gaussian Differential Privacy", 2019, Prop. 2.12: ``β(α) ≥ sup_ε 1 − δ(ε) −
    e^ε·α``), and with both directions of add/remove it is symmetric (``β = β⁻¹``). A convex
    symmetric trade-off function's subgradients at its fixed point ``α = β(α) = e`` come in
    pairs ``s, 1/s``, so ``−1`` is one of them: the line ``α + β = 2e`` supports the curve there,
    and the largest ``(1 − δ(ε)) / (1 + e^ε)`` is at ``ε = 0``. The floor is therefore

        ``e = (1 − δ(0)) / 2``,

    with ``δ(0)`` the total variation distance between the model's laws with and without the
    user (``1 − δ(0)`` is the least ``FPR + FNR`` of any test). That is what this computes; a test checks it
    against the maximum over a grid of ``ε``. FedUV's codeword test (and the baselines'
    class-row test) is such a test: without user ``k`` the model is independent of ``k``'s
    secret codeword bits.
    """
    if rounds <= 0 or noise <= 0:
        return 0.0 if noise <= 0 else 0.5
    profile = _composed_pld(float(noise), float(sampling_rate), int(rounds))
    total_variation = min(1.0, float(profile.get_delta_for_epsilon(0.0)))
    return max(0.0, (1 - total_variation) / 2)


@lru_cache(maxsize=4)
def _composed_pld(noise: float, sampling_rate: float, rounds: int) -> Any:
    """The PLD of ``rounds`` rounds of :func:`round_event` (add/remove, pessimistic, losses in
    buckets of :data:`PLD_LOSS_INTERVAL`, or wider where the worst case would need more than
    :data:`PLD_MAX_BUCKETS`).

    One round's losses span at most ``(1 + 20σ)/σ²`` (the Gaussian's ``x − ½`` over ``σ²``,
    dp-accounting truncating ``x`` at about ``10σ`` either side; subsampling only narrows it),
    and ``rounds`` rounds at most ``rounds`` times that. A wider bucket is still pessimistic, so
    the floor stays a lower bound; where it widens, the floor is about 0 anyway (z = 0.045 at
    q = 0.1 over 800 rounds: 0.000). Cached (a few, each up to some MB): a plan reads its ``ε``
    and its floor from the same composition."""
    from dp_accounting.pld import privacy_loss_distribution

    span = rounds * (1 + 20 * noise) / noise**2
    one_round = privacy_loss_distribution.from_gaussian_mechanism(
        noise,
        sampling_prob=sampling_rate,
        value_discretization_interval=max(PLD_LOSS_INTERVAL, span / PLD_MAX_BUCKETS),
    )
    return one_round.self_compose(rounds)


def noise_multiplier(target: float, sampling_rate: float, rounds: int, delta: float) -> float:
    """The smallest noise multiplier ``z`` (to 0.1 %) whose run of ``rounds`` rounds spends at
    most ``target`` ε: bisection on the PLD's ``ε`` (RDP's below :data:`PLD_MIN_NOISE`), which
    falls as ``z`` grows. :func:`epsilon_release` states at most that, so at most ``target``."""
    if not target > 0:
        raise ConfigError(f"--dp-epsilon must be positive, not {target}")
    rate, count, delta = float(sampling_rate), int(rounds), float(delta)

    def spent(noise: float) -> float:
        if noise < PLD_MIN_NOISE:
            return epsilon_release_rdp(noise, rate, count, delta)
        return _pld_epsilon(noise, rate, count, delta)

    try:
        return _smallest_at_most(spent, target, 1e-3, limit=1e4)
    except ValueError:
        raise ConfigError(f"no noise reaches ε = {target} in {rounds} rounds") from None


def participation_units(rounds: int, period: int, noise: str) -> int:
    """``S``: the sensitivity's square, in ``C²``, of ``rounds`` rounds for a user under the
    participation rule — the periods it can join (``independent`` noise), or the sum of their
    trees' depths (``tree`` noise: one participation sits in :func:`tree_depth` nodes, each
    with its own noise)."""
    lengths = period_lengths(rounds, period)
    return sum(map(tree_depth, lengths)) if noise == "tree" else len(lengths)


def capped_noise_multiplier(target: float, units: int, delta: float) -> float:
    """Under the participation rule, the noise multiplier that spends ``target`` ε over ``S =
    units``: ``z = √S · z₁``, ``z₁`` the one Gaussian mechanism's multiplier at that ``ε``
    (bisection on the closed form, :func:`epsilon_server`, to a relative 10⁻⁹)."""
    if not target > 0:
        raise ConfigError(f"--dp-epsilon must be positive, not {target}")
    try:
        one = _smallest_at_most(lambda z: epsilon_server(z, 1, delta), target, 1e-9, limit=1e6)
    except ValueError:
        raise ConfigError(f"no noise reaches ε = {target}") from None
    return one * math.sqrt(max(1, units))


def update_noise_multiplier(noise: float, count_std: float) -> float:
    """``z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2)``: the update's noise multiplier that, with the clip
    count's noise ``σ_b``, makes the pair as private as one Gaussian mechanism of multiplier
    ``z`` (Andrew, Thakkar, McMahan and Ramaswamy, "Differentially Private Learning with
    Adaptive Clipping", NeurIPS 2021, Sec. 3.1 and Theorem 1). It holds for bits shifted to
    ``±½`` (:meth:`UserLevelDP.user_half`): under add/remove the count's sensitivity is ½ against the
    update's ``C``. A ``σ_b`` of at most ``z/2`` leaves nothing for the update: refused."""
    rest = noise**-2 - (2.0 * count_std) ** -2
    if not rest > 0:
        raise ConfigError(
            f"adaptive clipping: a count noise of {count_std:.3g} spends the whole budget of "
            f"z = {noise:.3g}; give --clip-count-std above {noise / 2:.3g}"
        )
    return rest**-0.5


def effective_noise_multiplier(update_noise: float, count_std: float) -> float:
    """``z = (z_Δ⁻² + (2σ_b)⁻²)^(−1/2)``: the single multiplier the pair (update at ``z_Δ``,
    count at ``σ_b``) is as private as; the inverse of :func:`update_noise_multiplier`."""
    return (update_noise**-2 + (2.0 * count_std) ** -2) ** -0.5


def release_epsilon(sigma: float, sensitivity: float, releases: int, delta: float) -> float:
    """``ε`` of ``releases`` releases of a value of L2 sensitivity ``sensitivity`` (between any
    two users' values), each with ``N(0, σ² I)`` added: the Gaussian mechanism of
    multiplier ``σ / Δ`` composed without sampling (the server knows who sent):
    :func:`epsilon_server` of that multiplier.

    FedGN's proxy ``normalize(w + σ n)`` of a unit prototype ``w`` is this mechanism with
    ``Δ = 2`` (any unit vector against any other) followed by a normalisation, which is
    post-processing and spends nothing more (FedHide paper, eq. 5 and the remark after it)."""
    return epsilon_server(sigma / sensitivity, releases, delta)


def tree_depth(steps: int) -> int:
    """``⌈log₂(steps + 1)⌉``: the most nodes of a binary tree over ``steps`` rounds that hold one
    round's sum (one per level: a leaf and its complete ancestors; :class:`TreeNoise`), the
    sensitivity's square in units of ``C²`` of one participation (Kairouz et al., ICML 2021,
    Appendix D; dp-accounting's ``SingleEpochTreeAggregationDpEvent``)."""
    return int(steps).bit_length()


def period_lengths(rounds: int, period: int) -> list[int]:
    """The lengths of the periods of ``period`` rounds that cover rounds ``1..rounds`` (the last
    may be shorter): the participation rule's windows and the tree's restarts."""
    full, rest = divmod(max(0, rounds), period)
    return [period] * full + ([rest] if rest else [])


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The ``ε`` at ``δ`` of one Gaussian mechanism whose sensitivity is ``mu`` noise standard
    deviations (``μ``-GDP; :func:`epsilon_server` of multiplier ``1/μ``, closed form)."""
    if mu <= 0:
        return 0.0
    if not math.isfinite(mu):
        return math.inf
    return epsilon_server(1.0 / mu, 1, delta)


def gaussian_eer_floor(mu: float) -> float:
    """The lowest EER of any test against a ``μ``-GDP mechanism, ``Φ(−μ/2)``: its trade-off
    curve ``β(α) = Φ(Φ⁻¹(1−α) − μ)`` (Dong, Roth and Su 2019, eq. 2.3) meets ``α = β`` there."""
    return 0.5 * math.erfc(mu / (2 * math.sqrt(2)))
