"""DP-FTRL with tree aggregation and the participation rule (``--dp-noise tree``,
``--dp-period``; :mod:`uvtrain.privacy`, docs/privacy.md): the accountant by other routes, the
tree's noise, the cohorts under the rule, a run end to end, and what is refused."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainer.test_privacy import _analytic_gaussian_epsilon, _run
from uvtrain.accounting import gaussian_eer_floor, period_lengths, tree_depth
from uvtrain.config import Privacy
from uvtrain.privacy import TreeNoise, plan_privacy, prefix_nodes, seeded_noise
from uvtrain.rounds import period_cohort


def _tree_plan(rounds: int, period: int, **extra):
    values = dict(clip_norm=0.5, dp_noise="tree", dp_period=period)
    values.update(extra)
    plan = plan_privacy(Privacy("central", **values), rounds=rounds, cohort=4, users=4 * period)
    assert plan is not None
    return plan


# -- the accountant ---------------------------------------------------------------------------


def test_a_tree_is_as_many_nodes_deep_as_a_leaf_has_complete_ancestors() -> None:
    """⌈log₂(n + 1)⌉, dp-accounting's depth; and by enumeration: the most prefix decompositions
    one leaf's sum enters over a tree of n rounds."""
    for steps in range(1, 70):
        assert tree_depth(steps) == math.ceil(math.log2(steps + 1))
        nodes = set().union(*(prefix_nodes(p) for p in range(1, steps + 1)))
        for leaf in range(1, steps + 1):
            holding = [
                (level, index)
                for level, index in nodes
                if index * 2**level < leaf <= (index + 1) * 2**level
            ]
            assert len(holding) <= tree_depth(steps)
        assert max(
            sum(index * 2**level < leaf <= (index + 1) * 2**level for level, index in nodes)
            for leaf in range(1, steps + 1)
        ) == tree_depth(steps)


@pytest.mark.parametrize("noise", ["tree", "independent"])
def test_the_epsilon_is_one_gaussian_mechanism_checked_by_rdp_and_by_hand(noise: str) -> None:
    """The run is one Gaussian mechanism of multiplier z/√S: dp-accounting's RDP accountant,
    composing the run's own events (SingleEpochTreeAggregationDpEvent per period, or
    GaussianDpEvent per period joined), gives exactly the RDP of GaussianDpEvent(z/√S) at
    every order; our ε (the PLD closed form) equals Balle and Wang's formula solved by hand and
    stays below RDP's (which upper-bounds it)."""
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    rounds, period, z = 23, 4, 3.0
    plan = plan_privacy(
        Privacy("central", clip_norm=1.0, dp_noise_multiplier=z, dp_noise=noise, dp_period=period),
        rounds=rounds,
        cohort=2,
        users=8,
    )
    assert plan is not None and plan.period == period
    lengths = period_lengths(rounds, period)
    assert lengths == [4, 4, 4, 4, 4, 3]
    units = sum(map(tree_depth, lengths)) if noise == "tree" else len(lengths)
    assert plan.units(rounds) == units == (17 if noise == "tree" else 6)
    if noise == "tree":
        relation = dp_accounting.NeighboringRelation.REPLACE_SPECIAL
        events = [dp_accounting.SingleEpochTreeAggregationDpEvent(z, n) for n in lengths]
    else:
        relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
        events = [dp_accounting.GaussianDpEvent(z) for _ in lengths]
    composed = rdp.RdpAccountant(None, relation)
    composed.compose(dp_accounting.ComposedDpEvent(events))
    single = rdp.RdpAccountant(None, dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    single.compose(dp_accounting.GaussianDpEvent(z / math.sqrt(units)))
    np.testing.assert_allclose(composed._rdp, single._rdp, rtol=1e-12)
    by_hand = _analytic_gaussian_epsilon(z / math.sqrt(units), plan.delta)
    assert plan.epsilon_release == pytest.approx(by_hand, rel=1e-7)
    assert plan.epsilon_server == plan.epsilon_release == plan.spent_server(rounds)
    assert plan.epsilon_release < composed.get_epsilon(plan.delta)
    assert plan.membership_eer_floor == pytest.approx(gaussian_eer_floor(math.sqrt(units) / z))
    spent = [plan.spent_release(r) for r in range(1, rounds + 1)]
    assert spent == sorted(spent) and spent[-1] == plan.epsilon_release


@pytest.mark.parametrize(("z", "published"), [(1.13, 19.74), (8.83, 2.04)])
def test_the_papers_stackoverflow_setting_spends_at_most_its_table(
    z: float, published: float
) -> None:
    """Kairouz et al. (ICML 2021), the StackOverflow setting (one tree of 1,600 steps, δ 10⁻⁶):
    their ε 19.74 at z 1.13 and 2.04 at z 8.83 (dp-accounting's own test cites them as upper
    bounds). Ours, exact for the same Gaussian mechanism, is below each."""
    plan = plan_privacy(
        Privacy(
            "central",
            clip_norm=1.0,
            dp_noise_multiplier=z,
            dp_noise="tree",
            dp_period=1600,
            dp_delta=1e-6,
        ),
        rounds=1600,
        cohort=1,
        users=1600,
    )
    assert plan is not None and plan.units(1600) == 11
    assert plan.epsilon_release < published
    assert plan.epsilon_release > 0.6 * published  # the same mechanism, not another


def test_a_budget_sets_the_noise_that_spends_it() -> None:
    plan = _tree_plan(40, 10, dp_epsilon=8.0)
    assert plan.epsilon_release == pytest.approx(8.0, rel=1e-6) and plan.epsilon_release <= 8.0
    # the tree's noise is √(Σ depth) times one Gaussian's, the independent rule's √(periods)
    independent = _tree_plan(40, 10, dp_epsilon=8.0, dp_noise="independent")
    assert independent.mechanism == "central" and independent.noise == "independent"
    ratio = plan.noise_multiplier / independent.noise_multiplier
    assert ratio == pytest.approx(math.sqrt(4 * tree_depth(10) / 4), rel=1e-6)


# -- the noise --------------------------------------------------------------------------------


def test_the_released_noise_telescopes_to_the_prefix_nodes_and_restarts_each_period() -> None:
    """The residuals of rounds 1..p add up to exactly the noise of prefix_nodes(p) (each node
    drawn once, from (seed, tree, node)): at most depth nodes' worth where independent noise
    would hold p rounds'; the next period starts a fresh tree."""
    period, std = 6, 0.5
    tree = TreeNoise(period, seeded_noise(3))
    like = {"w": torch.zeros(3, 2), "b": torch.zeros(5)}
    total = {name: torch.zeros_like(value) for name, value in like.items()}

    def node(tree_index: int, level: int, index: int) -> dict[str, torch.Tensor]:
        generator = seeded_noise(3)(tree_index + 1, 5, index << 6 | level)
        return {name: std * torch.randn(v.shape, generator=generator) for name, v in like.items()}

    for round_number in range(1, 2 * period + 1):
        for name, value in tree.residual(like, std, round_number).items():
            total[name] += value
        index, position = divmod(round_number - 1, period)
        expected = {name: torch.zeros_like(value) for name, value in like.items()}
        for earlier in range(index):  # every earlier tree's whole sum stays in the model
            for level, at in prefix_nodes(period):
                for name, value in node(earlier, level, at).items():
                    expected[name] += value
        for level, at in prefix_nodes(position + 1):
            for name, value in node(index, level, at).items():
                expected[name] += value
        for name in like:
            torch.testing.assert_close(total[name], expected[name], rtol=1e-5, atol=1e-5)
    assert [len(prefix_nodes(p)) for p in range(1, 9)] == [1, 1, 2, 1, 2, 2, 3, 1]


def test_the_server_half_releases_the_sum_plus_the_residual_over_the_cohort() -> None:
    from uvtrain.privacy import DPFTRL, Central, PrivateSum, mechanism_from_plan
    from uvtrain.rounds import ClientUpdates, RoundPlan

    plan = _tree_plan(8, 4, dp_noise_multiplier=2.0)
    dp = mechanism_from_plan(plan, seeded_noise(5))
    assert isinstance(dp, Central) and isinstance(dp.underlying, DPFTRL)  # behind the protocol
    tree = dp.underlying.tree
    assert tree is not None and tree.key is None  # the simulator's seeded noise
    base = {"w": torch.zeros(4, 3)}
    deltas = {"w": torch.ones(4, 4, 3) * 0.1}
    updates = ClientUpdates(torch.arange(4), torch.ones(4), torch.zeros(4, 1), deltas=deltas)
    released, metrics = PrivateSum(dp)(updates, base, RoundPlan(3, np.arange(4), 0.1))
    residual = TreeNoise(4, seeded_noise(5)).residual(base, 2.0 * 0.5, 3)
    torch.testing.assert_close(released["w"], (deltas["w"].sum(0) + residual["w"]) / 4)
    assert metrics["epsilon"] == plan.spent_release(3) == metrics["epsilon_server"]


def test_a_real_servers_tree_draws_from_a_secret_key_its_checkpoint_keeps() -> None:
    from uvtrain.privacy import DPFTRL, secret_noise

    plan = _tree_plan(8, 4, dp_noise_multiplier=2.0)
    first = DPFTRL.from_plan(plan, secret_noise)
    second = DPFTRL.from_plan(plan, secret_noise)
    assert first.tree is not None and second.tree is not None
    assert first.tree.key != second.tree.key  # fresh secret randomness each
    like = {"w": torch.zeros(50)}
    draw = first.tree.residual(like, 1.0, 5)["w"]
    torch.testing.assert_close(first.tree.residual(like, 1.0, 5)["w"], draw)  # drawn again alike
    second.load_state_dict(first.state_dict())  # a resumed server draws the same nodes
    torch.testing.assert_close(second.tree.residual(like, 1.0, 5)["w"], draw)


# -- the participation rule -------------------------------------------------------------------


def test_no_client_is_in_two_rounds_of_a_period() -> None:
    population, count, period = 23, 4, 5
    for index in range(3):
        seen: list[int] = []
        for position in range(period):
            cohort = period_cohort(7, index * period + position + 1, population, count, period)
            assert len(cohort) == count and list(cohort) == sorted(cohort)
            seen += cohort.tolist()
        assert len(seen) == len(set(seen)) == count * period
    # a function of (seed, round): a resumed run draws the same cohorts
    assert np.array_equal(period_cohort(7, 9, 23, 4, 5), period_cohort(7, 9, 23, 4, 5))


def test_a_dp_ftrl_run_states_one_epsilon_and_resumes_bit_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_feduv_run: Path
) -> None:
    monkeypatch.setenv("UVTRAIN_DATA", str(tiny_feduv_run.parent / "data"))
    dp = ["--dp", "central", "--dp-noise", "tree", "--dp-epsilon", "8", "--clip-norm", "0.5"]
    result = _run(tmp_path / "run", *dp, "--rounds", "5")
    assert result.exit_code == 0, result.output
    privacy = json.loads((tmp_path / "run" / "report.json").read_text())["privacy"]
    assert privacy["noise"] == "tree" and privacy["sampling"] == "period"
    participation = privacy["participation"]
    assert participation["period"] == 2 and participation["tree_depths"] == [2, 2, 1]
    assert privacy["server_participations"] == 3 == participation["max_participations"]
    assert privacy["epsilon"] == privacy["epsilon_server"] == pytest.approx(8.0, rel=1e-6)
    assert privacy["epsilon"] <= 8.0 and privacy["joined"] == 3
    z = privacy["noise_multiplier"]
    assert privacy["epsilon"] == pytest.approx(
        _analytic_gaussian_epsilon(z / math.sqrt(5), privacy["delta"]), rel=1e-7
    )
    assert "DP-FTRL (tree aggregation), central" in result.output  # the plan line
    assert "whether or not they know who took part" in result.output
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["clients"] for line in lines] == [4] * 5
    assert lines[-1]["epsilon"] == pytest.approx(privacy["epsilon"])
    from uvtrain.config import RunConfig
    from uvtrain.run import load_data, make_simulation

    config = RunConfig.from_flat({
        "method": "feduv", "dataset": "formant-voices", "clients": 8, "fraction": 0.5,
        "batch_size": 4, "rounds": 5, "dp": "central", "dp_noise": "tree",
        "dp_noise_multiplier": z, "clip_norm": 0.5,
    })  # fmt: skip
    dataset = load_data(config)
    straight = make_simulation(config, dataset)
    for _ in range(5):
        straight.step()
    assert straight.participations(5).max() == 3  # one round a period, 3 periods
    first = make_simulation(config, dataset)
    for _ in range(3):  # stopped inside the second tree
        first.step()
    resumed = make_simulation(config, dataset)
    resumed.load_state_dict(first.state_dict())
    resumed.step()
    resumed.step()
    for name, value in straight.params.items():
        assert torch.equal(value, resumed.params[name])


def test_what_tree_noise_cannot_be_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_feduv_run: Path
) -> None:
    monkeypatch.setenv("UVTRAIN_DATA", str(tiny_feduv_run.parent / "data"))
    tree = ["--dp-noise", "tree", "--dp-epsilon", "8"]
    cases = {
        "needs --dp central": ["--dp", "distributed", *tree],
        "needs a fixed --clip-norm": ["--dp", "central", "--adaptive-clipping", *tree],
        "need 12 users, there are 8": ["--dp", "central", *tree, "--dp-period", "3"],
        "need 2000 users, there are 1000": ["--dp", "central", *tree, "--dp-noise-cohort",
                                            "100", "--dp-population", "1000", "--dp-period",
                                            "20"],
        "dp_noise must be independent or tree": ["--dp", "central", "--dp-noise", "fresh",
                                                 "--dp-epsilon", "8"],
        "needs a participation period": ["--dp", "central", *tree, "--dp-period", "0"],
        "dp_period must be in [0, 10^6]": ["--dp", "central", "--dp-period", "-1",
                                           "--dp-epsilon", "8"],
    }  # fmt: skip
    for expected, extra in cases.items():
        result = _run(tmp_path / "refused", *extra, "--rounds", "2")
        assert result.exit_code == 2, (extra, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (extra, result.output)
    assert not (tmp_path / "refused" / "report.json").exists()


def test_at_simulated_deployment_scale_the_tree_is_the_deployments() -> None:
    """--dp-noise-cohort M --dp-population N with tree noise: the deployment's rule (one round
    in each period of N/M rounds: here one tree over the whole run) and its noise scaled by m/M;
    the simulation's own users join one round in each of their own periods of N_sim/m, and
    their far weaker ε is bounded and stated."""
    from uvtrain.privacy import DPFTRL

    plan = plan_privacy(
        Privacy(
            "central",
            clip_norm=0.1,
            dp_epsilon=8.0,
            dp_noise="tree",
            dp_noise_cohort=1000,
            dp_population=1_000_000,
        ),
        rounds=100,
        cohort=100,
        users=1000,
    )
    assert plan is not None and plan.period == 1000 and plan.sampling_period == 10
    assert plan.units(100) == tree_depth(100) == 7 and plan.delta == pytest.approx(1e6**-1.1)
    assert plan.epsilon_release == pytest.approx(8.0, rel=1e-6)
    dp = DPFTRL.from_plan(plan, seeded_noise(0))
    assert dp.update_noise == pytest.approx(plan.noise_multiplier * 0.1)
    assert dp.tree is not None and dp.tree.period == 1000
    simulated = plan.report()["simulated_deployment"]
    assert simulated["simulated_users_period"] == 10
    # ten rounds in the one tree, each a node path of 7: μ ≤ √(10² · 7) / (z/10)
    mu = math.sqrt(100 * 7) / (plan.noise_multiplier * 0.1)
    assert plan.simulated_users_mu() == pytest.approx(mu)
    assert simulated["simulated_users_epsilon_server"] > 50 * plan.epsilon_release
    assert "SIMULATED DEPLOYMENT SCALE" in plan.describe()


def test_a_device_refuses_a_second_round_in_a_period(tmp_path: Path) -> None:
    from uvdeploy.device import PARTICIPATION, Device
    from uvdeploy.errors import DeviceError

    device = Device.__new__(Device)
    device.store_dir = tmp_path / "store"
    device.take_part(3, 4)  # rounds 1-4 are one period
    with pytest.raises(DeviceError, match=r"took part in round 3.*rounds 1-4"):
        device.take_part(4, 4)
    with pytest.raises(DeviceError, match="took part in round 3"):
        device.take_part(3, 4)  # the same round again
    device.take_part(5, 4)  # the next period
    device.take_part(2, 4)  # numbered lower: a new run
    assert json.loads((device.store_dir / PARTICIPATION).read_text()) == {"round": 2, "period": 4}
    device.take_part(9, 0)  # no rule: nothing kept
    (device.store_dir / PARTICIPATION).write_text("{not json")
    with pytest.raises(DeviceError, match="not a participation record"):
        device.take_part(10, 4)
