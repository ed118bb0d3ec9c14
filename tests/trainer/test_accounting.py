"""The privacy accountant (uvtrain.accounting) and the plan it states: ε against the released
model and against the server, each checked by a second route (closed forms written here,
dp-accounting's other accountants, published values), and the membership floor."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("dp_accounting")

from uvtrain.accounting import (  # noqa: E402
    epsilon_release,
    epsilon_release_rdp,
    epsilon_server,
    noise_multiplier,
)
from uvtrain.config import Privacy  # noqa: E402
from uvtrain.errors import ConfigError  # noqa: E402
from uvtrain.privacy import (  # noqa: E402
    plan_privacy,
)


def _pld_epsilon(noise: float, rate: float, rounds: int, delta: float) -> float:
    """``ε`` from dp-accounting's PLD accountant (an independent computation, tighter than RDP)
    of the Poisson-subsampled Gaussian, the event built here by hand."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant as pld

    accountant = pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    event = dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(noise))
    accountant.compose(event, rounds)
    return accountant.get_epsilon(delta)


def test_the_accountant_matches_published_values_and_the_librarys_other_accountants() -> None:
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    # Abadi et al. 2016, "Deep Learning with Differential Privacy", Sec. 3.1: with q = 0.01,
    # σ = 4, δ = 1e-5 and T = 10,000 steps "we have ε ≈ 1.26 using the moments accountant";
    # the RDP analysis of the same sampled Gaussian (Mironov et al. 2019) is at most that, and
    # the PLD, which the stated ε is, at most RDP's
    ours = epsilon_release(4.0, 0.01, 10_000, 1e-5)
    assert 0.7 * 1.26 < ours <= epsilon_release_rdp(4.0, 0.01, 10_000, 1e-5) <= 1.26
    # one Gaussian mechanism of multiplier 4.530877117 without sampling: RDP states ε 1.0 at
    # δ 1e-6 (dp-accounting's rdp test_compute_epsilon_delta_gaussian), the exact analytic
    # Gaussian (Balle & Wang) 0.927, and the stated ε, a pessimistic PLD, within 0.5 % above it
    exact = _analytic_gaussian_epsilon(4.530877117, 1e-6)
    assert exact == pytest.approx(0.927, abs=1e-3)
    assert epsilon_release_rdp(4.530877117, 1.0, 1, 1e-6) == pytest.approx(1.0, rel=0.02)
    assert exact <= epsilon_release(4.530877117, 1.0, 1, 1e-6) <= 1.005 * exact
    # and the noise a budget of ε 1 needs is less than RDP's: the analytic Gaussian's, to 0.5 %
    needed = noise_multiplier(1.0, 1.0, 1, 1e-6)
    assert (
        epsilon_release(needed, 1.0, 1, 1e-6)
        <= 1.0
        < _analytic_gaussian_epsilon(0.995 * needed, 1e-6)
    )
    # the stated ε is the PLD's: dp-accounting's PLD accountant built here by hand at its own
    # finer default bucket (10⁻⁴) agrees within 1.5 % and is never above it (ours rounds losses
    # up), and RDP is an upper bound on both
    for z, q, rounds, delta in ((4.0, 0.01, 10_000, 1e-5), (1.0, 0.1, 100, 1e-6),
                                (2.0, 0.5, 3, 1e-6), (0.8, 0.1, 800, 1e-6)):  # fmt: skip
        tight = _pld_epsilon(z, q, rounds, delta)
        stated = epsilon_release(z, q, rounds, delta)
        assert tight <= stated <= 1.015 * tight
        assert stated <= epsilon_release_rdp(z, q, rounds, delta) <= 1.15 * tight
    # at deployment sampling rates RDP is loose: q = 0.001 at the z of ε 8 over 800 rounds, RDP
    # is 1.213× the PLD (1.18-2.92× over the deployment table's runs: python
    # benchmarks/pld_slack.py), which is why the stated ε is the PLD's
    tight = _pld_epsilon(0.447, 0.001, 800, 2.5e-7)
    assert epsilon_release_rdp(0.447, 0.001, 800, 2.5e-7) / tight == pytest.approx(1.213, abs=2e-3)
    assert epsilon_release(0.447, 0.001, 800, 2.5e-7) == pytest.approx(tight, rel=0.015)
    # RDP built by hand from dp-accounting's functions, composed by addition over the rounds
    z, q, rounds, delta = 1.3, 0.05, 500, 1e-6
    orders = rdp.DEFAULT_RDP_ORDERS
    per_round = rdp._compute_rdp_poisson_subsampled_gaussian(q, z, orders)
    by_hand, _ = rdp.compute_epsilon(orders, np.asarray(per_round) * rounds, delta)
    assert epsilon_release_rdp(z, q, rounds, delta) == pytest.approx(by_hand, rel=1e-9)
    # and at order 2 the sampled Gaussian's RDP in closed form (Mironov, Talwar and Zhang 2019,
    # Sec. 3.3, integer α): log(1 + q² (e^{1/z²} − 1))
    from uvtrain.accounting import _rdp_per_round

    table, divergence = _rdp_per_round(z, q)
    assert divergence[table.index(2.0)] == pytest.approx(math.log1p(q**2 * math.expm1(z**-2)))
    # and ε grows with the rounds and the rate, and falls with the noise
    assert epsilon_release(1.0, 0.1, 100, 1e-5) < epsilon_release(1.0, 0.1, 200, 1e-5)
    assert epsilon_release(1.0, 0.1, 100, 1e-5) < epsilon_release(1.0, 0.2, 100, 1e-5)
    assert epsilon_release(2.0, 0.1, 100, 1e-5) < epsilon_release(1.0, 0.1, 100, 1e-5)


def test_the_stated_epsilon_without_sampling_is_the_analytic_gaussians() -> None:
    """A hand route for the PLD: with every user in every round (q = 1) the run is k Gaussian
    mechanisms, exactly one of multiplier z/√k, whose ε Balle and Wang's closed form gives
    (written and solved here with scipy); the stated ε, a pessimistic PLD, is within 0.5 % and
    never below it. Below :data:`PLD_MIN_NOISE` the stated ε is RDP's, an upper bound too."""
    from uvtrain.accounting import PLD_MIN_NOISE

    for z, rounds, delta in ((1.0, 4, 1e-5), (3.0, 50, 1e-6), (0.7, 1, 1e-3)):
        exact = _analytic_gaussian_epsilon(z / math.sqrt(rounds), delta)
        assert exact <= epsilon_release(z, 1.0, rounds, delta) <= 1.005 * exact
    low = 0.9 * PLD_MIN_NOISE
    assert epsilon_release(low, 1.0, 2, 1e-5) == epsilon_release_rdp(low, 1.0, 2, 1e-5)
    assert epsilon_release(low, 1.0, 2, 1e-5) >= _analytic_gaussian_epsilon(
        low / math.sqrt(2), 1e-5
    )


def test_the_epsilon_spent_grows_to_the_runs_and_never_falls() -> None:
    """The progress lines' ε (:func:`epsilon_release_after`): at most RDP's at each round,
    never falling, and exactly the stated ε at the last round."""
    from uvtrain.accounting import epsilon_release_after

    z, q, rounds, delta = 1.2, 0.1, 48, 1e-5
    spent = [epsilon_release_after(z, q, r, rounds, delta) for r in range(1, rounds + 1)]
    assert all(a <= b for a, b in zip(spent, spent[1:], strict=False))
    assert spent[-1] == epsilon_release(z, q, rounds, delta)
    for r in (1, 7, 30, 47):
        assert spent[r - 1] <= epsilon_release_rdp(z, q, r, delta)
        assert spent[r - 1] >= _pld_epsilon(z, q, r, delta) * (1 - 1e-9)


def _analytic_gaussian_epsilon(sigma: float, delta: float) -> float:
    """``ε`` of one Gaussian mechanism of multiplier ``sigma`` (sensitivity 1) at ``δ``, written
    here from Balle and Wang (ICML 2018), Theorem 8: ``δ(ε) = Φ(1/(2σ) − εσ) −
    e^ε Φ(−1/(2σ) − εσ)``, solved for ``ε`` by scipy's root finder (the log-CDF keeps
    ``e^ε Φ(·)`` finite: ε − (1/(2σ) + εσ)²/2 ≤ 0)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def excess(value: float) -> float:
        tail = math.exp(value + norm.logcdf(-1 / (2 * sigma) - value * sigma))
        return norm.cdf(1 / (2 * sigma) - value * sigma) - tail - delta

    return brentq(excess, 0.0, 1e6, xtol=1e-12, rtol=1e-12)  # the exponent stays ≤ 0


def test_the_server_epsilon_is_the_gaussian_mechanism_over_the_rounds_joined() -> None:
    """No amplification: k rounds of multiplier z against the server are one Gaussian mechanism
    of multiplier z/√k. Three routes besides ours: the closed form by hand, dp-accounting's PLD
    accountant composing GaussianDpEvent(z) k times, and its RDP accountant (an upper bound)."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant as pld
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    adjacency = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    for z, k, delta in ((1.0, 1, 1e-6), (2.0, 50, 1e-6), (0.447, 1, 2.5e-7), (1.5, 30, 1e-5)):
        ours = epsilon_server(z, k, delta)
        assert ours == pytest.approx(_analytic_gaussian_epsilon(z / math.sqrt(k), delta), rel=1e-7)
        composed = pld.PLDAccountant(adjacency)
        composed.compose(dp_accounting.GaussianDpEvent(z), k)
        assert ours == pytest.approx(composed.get_epsilon(delta), rel=1e-5)
        renyi = rdp.RdpAccountant(neighboring_relation=adjacency)
        renyi.compose(dp_accounting.GaussianDpEvent(z), k)
        assert ours < renyi.get_epsilon(delta) < 1.1 * ours  # RDP: an upper bound, ~6 % loose
    # the figure: one round of a simulated deployment's noise (z 0.447, δ 2.5e-7)
    assert epsilon_server(0.447, 1, 2.5e-7) == pytest.approx(13.2, abs=0.05)
    # more rounds, more ε; more noise, less; none joined, nothing spent; no noise, no bound
    assert epsilon_server(1.0, 10, 1e-6) < epsilon_server(1.0, 11, 1e-6)
    assert epsilon_server(2.0, 10, 1e-6) < epsilon_server(1.0, 10, 1e-6)
    assert epsilon_server(1.0, 0, 1e-6) == 0.0 and epsilon_server(0.0, 3, 1e-6) == math.inf
    # amplification only helps: the release's ε is below the server's for the same run
    assert epsilon_release(1.0, 0.1, 100, 1e-6) < epsilon_server(1.0, 100, 1e-6)
    # and at q = 1 (everyone in every round) the two differ only by RDP's slack
    assert 1.0 < epsilon_release(1.0, 1.0, 10, 1e-6) / epsilon_server(1.0, 10, 1e-6) < 1.1


def test_the_plan_states_both_epsilons_and_whom_each_holds_against() -> None:
    plan = plan_privacy(
        Privacy("distributed", clip_norm=1.0, dp_epsilon=4.0), rounds=200, cohort=10, users=100
    )
    assert plan is not None
    z, delta = plan.noise_multiplier, plan.delta
    report = plan.report()
    assert report["epsilon"] == report["epsilon_release"] == epsilon_release(z, 0.1, 200, delta)
    # before training, the most rounds a user can join: all 200 (Poisson sampling has no cap)
    assert (
        report["server_participations"] == 200
        and "can join" in report["server_participations_basis"]
    )
    hand = _analytic_gaussian_epsilon(z / math.sqrt(200), delta)
    assert report["epsilon_server"] == pytest.approx(hand, rel=1e-7)
    assert report["expected_participations"] == pytest.approx(20.0)  # q·R
    expected = _analytic_gaussian_epsilon(z / math.sqrt(20), delta)
    assert report["epsilon_server_expected"] == pytest.approx(expected, rel=1e-7)
    assert report["epsilon_release"] < report["epsilon_server_expected"] < report["epsilon_server"]
    assert "the server that ran training" in report["adversaries"]
    assert "PLD" in report["server_accountant"]
    line = plan.describe()
    assert f"ε = {plan.epsilon_release:.3g} against anyone who sees the released model" in line
    assert f"ε = {hand:.3g} against the server that ran training, for a user in all 200" in line
    # after training: the most rounds any user joined
    joined = plan.report(joined=31)
    assert (
        joined["server_participations"] == 31 and "joined" in joined["server_participations_basis"]
    )
    assert joined["epsilon_server"] == pytest.approx(
        _analytic_gaussian_epsilon(z / math.sqrt(31), delta), rel=1e-7
    )
    # central noise: the server adds it and sees the updates; the line says nothing bounds it
    central = replace(plan, mechanism="central")
    assert "nothing bounds the server" in central.report()["adversaries"]
    assert "not the server" in central.describe()


def test_at_simulated_deployment_scale_the_server_epsilon_is_a_deployments_users() -> None:
    """A deployment's user's rounds carry z; the simulation's own users' carry z·m/M, and they
    join far more often: their ε is stated beside, far larger."""
    plan = plan_privacy(
        Privacy(
            "central", clip_norm=0.1, dp_epsilon=8.0, dp_noise_cohort=1000, dp_population=1_000_000
        ),
        rounds=800,
        cohort=100,
        users=1000,
    )
    assert plan is not None
    z, delta = plan.noise_multiplier, plan.delta
    report = plan.report(joined=95)
    assert report["server_participations"] == 800  # a deployment's user, every round
    assert report["epsilon_server"] == pytest.approx(
        _analytic_gaussian_epsilon(z / math.sqrt(800), delta), rel=1e-7
    )
    assert report["expected_participations"] == pytest.approx(0.8)  # M/N_dep · R
    one = _analytic_gaussian_epsilon(z, delta)  # ⌈0.8⌉ = 1 round
    assert report["epsilon_server_expected"] == pytest.approx(one, rel=1e-7)
    simulated = report["simulated_deployment"]
    assert simulated["simulated_users_participations"] == 95
    assert simulated["simulated_users_epsilon_server"] == pytest.approx(
        _analytic_gaussian_epsilon(z * 0.1 / math.sqrt(95), delta), rel=1e-7
    )
    assert simulated["simulated_users_epsilon_server"] > 100 * report["epsilon_server_expected"]
    assert "simulation's own users far less private" in plan.describe()


def test_delta_defaults_below_one_over_n_to_the_1_1() -> None:
    from uvtrain.accounting import default_delta

    for users in (4, 60, 1000, 10**5, 10**6, 10**8):
        assert default_delta(users) <= users**-1.1 and default_delta(users) <= 1e-6
    assert default_delta(1000) == 1e-6 and default_delta(10**6) == pytest.approx(10**-6.6)


def test_a_target_epsilon_sets_a_noise_that_spends_at_most_it() -> None:
    plan = plan_privacy(
        Privacy("central", clip_norm=1.0, dp_epsilon=4.0), rounds=50, cohort=10, users=100
    )
    assert plan is not None and plan.delta == 1e-6 and plan.sampling_rate == 0.1
    assert 3.9 < plan.epsilon_release <= 4.0
    assert plan.spent_release(10) < plan.spent_release(50) == pytest.approx(plan.epsilon_release)
    report = plan.report()
    assert report["sampling"] == "poisson" and report["expected_cohort"] == 10
    assert report["neighboring_relation"] == "add-or-remove-one"
    assert "PoissonSampledDpEvent" in report["accountant"]
    assert report["noise_multiplier"] == report["update_noise_multiplier"] == plan.noise_multiplier
    assert report["clip_count_std"] is None and report["epsilon"] == plan.epsilon_release
    for bad in (0.0, -1.0):
        with pytest.raises(ConfigError, match="positive"):
            plan_privacy(
                Privacy("central", clip_norm=1.0, dp_epsilon=bad), rounds=5, cohort=2, users=10
            )


def _rdp_floor(noise: float, rate: float, rounds: int) -> float:
    """The floor ``max over ε of (1 − δ(ε)) / (1 + e^ε)`` from the RDP profile instead (the
    trainer's route until issue 45), built here from ``dp_accounting.rdp``'s functions."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    orders = rdp.DEFAULT_RDP_ORDERS
    composed = np.asarray(rdp._compute_rdp_poisson_subsampled_gaussian(rate, noise, orders))
    grid = np.concatenate([[0.0], np.geomspace(1e-3, 40.0, 300)])
    deltas = [min(1.0, rdp.compute_delta(orders, composed * rounds, e)[0]) for e in grid]
    return max(0.0, max((1 - d) / (1 + math.exp(e)) for d, e in zip(deltas, grid, strict=True)))


def test_the_membership_eer_floor_is_the_gaussian_mechanisms_exact_one() -> None:
    """The floor from the PLD against an independent figure: one Gaussian mechanism of
    multiplier z (no sampling, one round) is exactly μ-GDP with μ = 1/z (Dong, Roth and Su
    2019), whose most powerful test has EER Φ(−μ/2). The PLD is tight: the floor is that EER,
    less only its pessimistic discretisation."""
    from statistics import NormalDist

    from uvtrain.accounting import membership_eer_floor

    floors = []
    for noise in (0.5, 1.0, 2.0, 4.0):
        exact = NormalDist().cdf(-1 / (2 * noise))
        floor = membership_eer_floor(noise, 1.0, 1)
        assert exact - 1e-4 <= floor <= exact + 1e-12
        floors.append(floor)
    assert floors == sorted(floors)  # more noise, a higher floor
    assert membership_eer_floor(1.0, 0.1, 0) == 0.5 and membership_eer_floor(0.0, 0.1, 5) == 0.0


def test_the_membership_eer_floor_is_at_epsilon_zero_and_above_rdps() -> None:
    """With both directions of add/remove the trade-off is symmetric, so the largest
    ``(1 − δ(ε)) / (1 + e^ε)`` over a grid of ε is at ε = 0, which the floor computes:
    ``(1 − TV) / 2``. The RDP profile, an upper bound on
    ``δ(ε)``, gives a valid but lower floor: the cross-check. The curve's FedUV runs (q = 0.1,
    800 rounds, z of ε 8 and 2 at δ 10⁻⁴) and a deployment-scale one (q = 0.001, z of ε 8 at
    δ 2.5·10⁻⁷): 0.206 / 0.397 / 0.457 from the PLD, 0.061 / 0.349 / 0.390 from RDP, as
    ``python benchmarks/pld_slack.py`` prints them."""
    from uvtrain.accounting import _composed_pld, membership_eer_floor

    grid = np.concatenate([[0.0], np.geomspace(1e-3, 40.0, 300)])
    for noise, rate, rounds, pld, rdp in ((1.817, 0.1, 800, 0.206, 0.061),
                                          (5.457, 0.1, 800, 0.397, 0.349),
                                          (0.447, 0.001, 800, 0.457, 0.390)):  # fmt: skip
        floor = membership_eer_floor(noise, rate, rounds)
        deltas = _composed_pld(noise, rate, rounds).get_delta_for_epsilon(grid)
        bounds = (1 - np.asarray(deltas)) / (1 + np.exp(grid))
        assert int(np.argmax(bounds)) == 0 and floor == pytest.approx(bounds[0], abs=1e-12)
        assert floor == pytest.approx(pld, abs=1e-3)
        cross_check = _rdp_floor(noise, rate, rounds)
        assert cross_check == pytest.approx(rdp, abs=1e-3)
        assert cross_check < floor
