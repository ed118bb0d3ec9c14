"""User-level differential privacy (uvtrain.privacy): clipping, noise, accounting, runs."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("dp_accounting")

from tests.trainer.test_accounting import _analytic_gaussian_epsilon, _pld_epsilon  # noqa: E402
from uvtrain.accounting import (  # noqa: E402
    epsilon_release,
    update_noise_multiplier,
)
from uvtrain.config import Privacy  # noqa: E402
from uvtrain.errors import ConfigError  # noqa: E402
from uvtrain.privacy import (  # noqa: E402
    AdaptiveClipping,
    Placement,
    PrivateSum,
    PrivateUsers,
    UserLevelDP,
    mechanism_from_plan,
    place,
    plan_privacy,
    seeded_noise,
    update_norms,
)
from uvtrain.rounds import ClientUpdates, RoundPlan  # noqa: E402


def _mechanism(
    mechanism: str,
    clip_norm: float,
    noise: float,
    denominator: float,
    adaptive: AdaptiveClipping | None = None,
    seed: int = 0,
) -> Placement:
    """The simulator's mechanism (noise from (seed, round, stream, client)) without a plan, in
    the placement ``mechanism``."""
    return place(
        mechanism, UserLevelDP(clip_norm, noise, denominator, adaptive, seeded_noise(seed))
    )


def _updates(count: int, scale: float, seed: int = 0) -> tuple[ClientUpdates, dict]:
    generator = torch.Generator().manual_seed(seed)
    base = {"w": torch.zeros(30, 4), "b": torch.zeros(7)}
    deltas = {k: scale * torch.randn(count, *v.shape, generator=generator) for k, v in base.items()}
    clients = torch.arange(count)
    updates = ClientUpdates(clients, torch.ones(count), torch.zeros(count, 1), deltas=deltas)
    return updates, base


def test_each_clients_update_is_clipped_to_the_norm_and_small_ones_are_kept() -> None:
    updates, base = _updates(12, 1.0)
    updates.deltas = {k: v * torch.linspace(0.01, 3, 12).reshape(-1, *[1] * (v.dim() - 1))
                      for k, v in updates.deltas.items()}  # fmt: skip
    before = update_norms(updates.deltas)
    mechanism = _mechanism("central", 2.5, 0.0, 12.0)
    clipped = PrivateUsers(mechanism)(updates, base, RoundPlan(1, np.arange(12), 0.1))
    after = update_norms(clipped.deltas)
    assert float(after.max()) <= 2.5 * (1 + 1e-6)
    small = before <= 2.5
    torch.testing.assert_close(after[small], before[small])
    torch.testing.assert_close(after[~small], torch.full_like(after[~small], 2.5))
    assert 0 < clipped.metrics["clipped"] < 1


@pytest.mark.parametrize("mechanism", ["central", "distributed"])
def test_the_aggregate_carries_noise_of_the_computed_scale(mechanism: str) -> None:
    count, std = 20, 0.8  # σ = z·C of the sum
    updates, base = _updates(count, 0.0)
    plan = RoundPlan(3, np.arange(count), 0.1)
    dp = _mechanism(mechanism, 1.0, std, float(count), seed=5)  # C = 1: σ = z
    updates = PrivateUsers(dp)(updates, base, plan)
    aggregate, _ = PrivateSum(dp)(updates, base, plan)
    total = torch.cat([(aggregate[k] - base[k]).reshape(-1) for k in base]) * count
    # 127 values of N(0, σ²): the sample std within 20 % (a 4-sigma band of its spread), mean ~0
    assert float(total.std()) == pytest.approx(std, rel=0.2)
    assert abs(float(total.mean())) < 4 * std / math.sqrt(total.numel())


def test_adaptive_clipping_follows_the_quantile_of_the_update_norms() -> None:
    # norms spread over [0.5, 5]; the clip norm starts at 0.1 and must settle near the median
    adaptive = AdaptiveClipping(0.5, 0.2, count_std=1.0)
    mechanism = _mechanism("distributed", 0.1, 1.0, 50.0, adaptive, seed=3)
    users, server = PrivateUsers(mechanism), PrivateSum(mechanism)
    norms_seen = []
    for round_number in range(1, 121):
        updates, base = _updates(50, 1.0, seed=round_number)
        factor = torch.linspace(0.5, 5.0, 50) / update_norms(updates.deltas)
        updates.deltas = {k: v * factor.reshape(-1, *[1] * (v.dim() - 1)).to(v.dtype)
                          for k, v in updates.deltas.items()}  # fmt: skip
        norms_seen.append(float(update_norms(updates.deltas).median()))
        plan = RoundPlan(round_number, np.arange(50), 0.1)
        clipped = users(updates, base, plan)
        clip_norm = clipped.metrics["clip_norm"]
        assert clipped.clip_bits is not None and len(clipped.clip_bits) == 50
        _, metrics = server(clipped, base, plan)
        assert metrics["clip_norm"] == clip_norm != mechanism.underlying.clip_norm  # moved
    assert mechanism.underlying.clip_norm == pytest.approx(np.median(norms_seen), rel=0.25)
    # its state resumes the next round's norm
    again = _mechanism("distributed", 0.1, 1.0, 50.0, AdaptiveClipping(0.5, 0.2, 1.0), seed=3)
    again.load_state_dict(mechanism.state_dict())
    assert again.underlying.clip_norm == mechanism.underlying.clip_norm


def test_adaptive_clipping_takes_its_share_of_the_noise() -> None:
    from uvtrain.accounting import effective_noise_multiplier

    # bits shifted to ±½: adding or removing a user moves the count by ½ and the update by C,
    # so the pair (z_Δ·C on the update, σ_b on the count) is one Gaussian mechanism whose
    # multiplier z has z⁻² = z_Δ⁻² + (½/σ_b)² (Andrew et al. 2021, Theorem 1)
    z, count_std = 1.0, 5.0
    z_update = update_noise_multiplier(z, count_std)
    by_hand = (z_update**-2 + (0.5 / count_std) ** 2) ** -0.5
    assert by_hand == pytest.approx(z) and effective_noise_multiplier(z_update, count_std) == (
        pytest.approx(z)
    )
    assert z < z_update < 1.01 * z
    with pytest.raises(ConfigError, match="clip-count-std"):
        update_noise_multiplier(2.0, 0.9)  # σ_b ≤ z/2: nothing left for the update
    plan = plan_privacy(
        Privacy("distributed", clip_norm=0.1, dp_epsilon=4.0, adaptive_clipping=True),
        rounds=50,
        cohort=100,
        users=1000,
    )
    assert plan is not None and plan.adaptive.count_std == 5.0  # m / 20
    report = plan.report()
    assert report["update_noise_multiplier"] == plan.update_noise > plan.noise_multiplier
    assert report["clip_count_std"] == 5.0 and report["clip_count_bits"] == "±½"
    # the plan spends what the sampled Gaussian of the z made by hand from z_Δ and σ_b spends
    pair = (plan.update_noise**-2 + (0.5 / 5.0) ** 2) ** -0.5
    assert plan.epsilon_release == pytest.approx(
        epsilon_release(pair, 0.1, 50, plan.delta), rel=1e-6
    )
    assert plan.epsilon_release == pytest.approx(_pld_epsilon(pair, 0.1, 50, plan.delta), rel=0.15)
    # a count noise too small for the budget is refused, not turned into a wrong z
    with pytest.raises(ConfigError, match="clip-count-std"):
        plan_privacy(
            Privacy("distributed", clip_norm=0.1, dp_epsilon=4.0, adaptive_clipping=True),
            rounds=50,
            cohort=6,
            users=60,
        )


@pytest.mark.parametrize("distributed", [False, True])
def test_the_noisy_unclipped_fraction_sums_bits_shifted_to_a_half(distributed: bool) -> None:
    from uvtrain.privacy.noise import _generator, scalar_noise

    mechanism = "distributed" if distributed else "central"
    dp = _mechanism(mechanism, 1.0, 0.5, 8.0, AdaptiveClipping(count_std=2.0), seed=7)
    base = {"w": torch.zeros(3)}
    norms = torch.tensor([0.5, 0.9, 0.1, 3.0, 0.2])  # Σ (b − ½) = 4 − 2.5 = 1.5
    deltas = {"w": torch.stack([torch.tensor([n, 0.0, 0.0]) for n in norms.tolist()])}
    clients = [3, 9, 11, 20, 21]
    _, bits, _ = dp.user_half(deltas, clients, 4)
    if distributed:  # each of the 5 adds its share N(0, σ_b² / 5)
        noise = sum(scalar_noise(2.0 / math.sqrt(5), _generator(7, 4, 3, c)) for c in clients)
    else:
        noise = scalar_noise(2.0, _generator(7, 4, 4, 0))
    expected = (1.5 + noise) / 8.0 + 0.5
    total = {"w": torch.zeros(3)}
    _, metrics = dp.server_half(base, total, float(bits.sum()), 5, 4)
    assert metrics["unclipped"] == pytest.approx(expected, rel=1e-12)
    assert dp.underlying.clip_norm == pytest.approx(math.exp(-0.2 * (expected - 0.5)))
    # an empty cohort: the noise alone, drawn by the server
    empty = scalar_noise(2.0, _generator(7, 5, 4, 0)) / 8.0 + 0.5
    _, metrics = dp.server_half(base, total, 0.0, 0, 5)
    assert metrics["unclipped"] == empty


@pytest.mark.parametrize("mechanism", ["central", "distributed"])
def test_the_aggregate_divides_by_the_expected_cohort(mechanism: str) -> None:
    """θ' = θ + (Σ_k δ̂_k + n) / (qN): the realised count (5) is not the denominator (8); an
    empty cohort releases θ + n / (qN)."""
    from uvtrain.privacy.noise import _generator, add_noise, clip_updates

    distributed = mechanism == "distributed"
    updates, base = _updates(5, 0.3, seed=2)
    plan = RoundPlan(6, np.arange(5), 0.1)
    dp = _mechanism(mechanism, 1.0, 0.7, 8.0, seed=4)
    clipped, _ = clip_updates(updates.deltas, 1.0)
    updates = PrivateUsers(dp)(updates, base, plan)
    result, _ = PrivateSum(dp)(updates, base, plan)
    zeros = {name: torch.zeros_like(value) for name, value in base.items()}
    if distributed:  # client k's share N(0, 0.7² / 5) from (seed, round, k), over all its values
        shares = [add_noise(zeros, 0.7 / math.sqrt(5), _generator(4, 6, 1, k)) for k in range(5)]
        noise = {name: sum(share[name] for share in shares) for name in base}
    else:  # the server's N(0, 0.7²) from (seed, round)
        noise = add_noise(zeros, 0.7, _generator(4, 6, 2, 0))
    for name, value in base.items():
        total = clipped[name].sum(0) + noise[name]
        torch.testing.assert_close(result[name], value + total / 8.0)
    # an empty cohort releases the server's noise alone, in both placements
    nobody = ClientUpdates(torch.zeros(0, dtype=torch.long), torch.zeros(0), torch.zeros(0, 1),
                           deltas={k: torch.zeros(0, *v.shape) for k, v in base.items()})  # fmt: skip
    empty_plan = RoundPlan(7, np.zeros(0, dtype=int), 0.1)
    nobody = PrivateUsers(dp)(nobody, base, empty_plan)
    released, _ = PrivateSum(dp)(nobody, base, empty_plan)
    noise = add_noise(zeros, 0.7, _generator(4, 7, 2, 0))
    for name, value in base.items():
        torch.testing.assert_close(released[name], value + noise[name] / 8.0)


@pytest.mark.parametrize(("deployed_period", "simulated_period"), [(None, 2), (0, None)])
def test_the_flower_plan_spends_exactly_what_the_simulator_plans(
    deployed_period: int | None, simulated_period: int | None
) -> None:
    """The deployment's default is the participation rule with a period of devices // cohort
    (12 // 6 = 2), the simulator's is Poisson sampling; each planned alike as the other's."""
    pytest.importorskip("uvdeploy")
    from uvdeploy.dp import plan as flower_plan
    from uvdeploy.settings import DeploySettings
    from uvtrain.config import RunConfig
    from uvtrain.run import privacy_plan

    settings = {"method": "feduv", "rounds": 40, "fraction": 0.5, "dp": "distributed",
                "dp_epsilon": 6.0, "adaptive_clipping": True, "clip_count_std": 8.0}  # fmt: skip
    run = {**settings, "dataset": "formant-voices", "dp_period": simulated_period}
    simulated = privacy_plan(RunConfig.from_flat(run), 12)
    deployed = flower_plan(
        DeploySettings.from_run_config({**settings, "dp_period": deployed_period}), 12
    )
    assert simulated is not None and deployed is not None
    assert deployed.report() == simulated.report()
    for rounds in (1, 17, 40):
        assert deployed.spent_release(rounds) == simulated.spent_release(rounds)


def test_a_simulated_deployment_cohort_gets_the_deployments_noise_and_epsilon() -> None:
    """pfl-research's noise_cohort_size: m = 10 simulated of N = 100, the noise of M = 1,000 of
    N_dep = 10⁶. The accountant sees q = M/N_dep (its ε equals a plain plan's at that rate), δ
    and σ_b default from the deployment, and the released mean carries exactly the deployment's
    N(0, (z_Δ·C/M)²) — measured on the released model, not read from the mechanism's fields."""
    simulated = plan_privacy(
        Privacy(
            "central",
            clip_norm=0.5,
            dp_epsilon=4.0,
            adaptive_clipping=True,
            dp_noise_cohort=1000,
            dp_population=1_000_000,
        ),
        rounds=50,
        cohort=10,
        users=100,
    )
    deployed = plan_privacy(
        Privacy("central", clip_norm=0.5, dp_epsilon=4.0, adaptive_clipping=True),
        rounds=50,
        cohort=1000,
        users=1_000_000,
    )
    assert simulated is not None and deployed is not None
    assert simulated.sampling_rate == pytest.approx(1e-3) and simulated.cohort_rate == 0.1
    assert simulated.noise_multiplier == deployed.noise_multiplier
    assert simulated.delta == deployed.delta == pytest.approx(1e6**-1.1)
    assert simulated.count_std == deployed.count_std == 50.0  # M / 20
    assert simulated.epsilon_release == pytest.approx(deployed.epsilon_release)
    assert simulated.noise_scale == pytest.approx(0.01)
    assert "SIMULATED DEPLOYMENT SCALE" in simulated.describe()
    assert simulated.report()["simulated_deployment"]["noise_cohort"] == 1000
    assert deployed.report()["simulated_deployment"] is None
    # the released mean of 10 zero updates: N(0, (z_Δ C / M)²) in every value, the deployment's
    count = 10
    updates, base = _updates(count, 0.0)
    base = {"w": torch.zeros(200, 50)}
    updates.deltas = {"w": torch.zeros(count, 200, 50)}
    mechanism = mechanism_from_plan(simulated, seeded_noise(3))
    plan = RoundPlan(1, np.arange(count), 0.1)
    released, _ = PrivateSum(mechanism)(PrivateUsers(mechanism)(updates, base, plan), base, plan)
    expected = deployed.update_noise * 0.5 / 1000
    assert float(released["w"].std()) == pytest.approx(expected, rel=0.05)  # 10,000 draws
    # the clip count's noise, as a fraction, is the deployment's σ_b / M too
    assert mechanism.underlying.adaptive.count_std / count == pytest.approx(
        deployed.count_std / 1000
    )
    # the population defaults to the simulation's own rate kept
    kept = plan_privacy(
        Privacy("central", clip_norm=1.0, dp_noise_multiplier=1.0, dp_noise_cohort=500),
        rounds=5,
        cohort=10,
        users=100,
    )
    assert kept.population == 5000 and kept.sampling_rate == pytest.approx(0.1)


def test_a_deployment_refuses_a_simulated_noise_cohort() -> None:
    pytest.importorskip("uvdeploy")
    from uvdeploy.dp import plan as flower_plan
    from uvdeploy.settings import DeploySettings

    settings = {"method": "feduv", "rounds": 4, "fraction": 0.5, "dp": "central",
                "dp_epsilon": 6.0}  # fmt: skip
    deploy = DeploySettings.from_run_config(settings)
    run = deploy.run.replace(dp="central", dp_noise_cohort=100)
    with pytest.raises(ConfigError, match="deployment's noise is that of its own cohort"):
        flower_plan(replace(deploy, run=run), 12)


TINY = ["--dataset", "formant-voices", "--clients", "8", "--fraction", "0.5", "--batch-size", "4"]


def _run(out: Path, *extra: str):
    from typer.testing import CliRunner

    from uvtrain.cli import app

    return CliRunner().invoke(app, ["run", "--method", "feduv", *TINY, *extra, "--out", str(out)])


@pytest.mark.parametrize("adaptive", [False, True])
def test_a_dp_run_reports_its_privacy_and_resumes_bit_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_feduv_run: Path, adaptive: bool
) -> None:
    monkeypatch.setenv("UVTRAIN_DATA", str(tiny_feduv_run.parent / "data"))
    dp = ["--dp", "distributed", "--dp-noise-multiplier", "1.0", "--clip-norm", "0.5"]
    if adaptive:
        dp += ["--adaptive-clipping", "--clip-count-std", "1.0"]
    straight = _run(tmp_path / "straight", *dp, "--rounds", "3")
    assert straight.exit_code == 0, straight.output
    report = json.loads((tmp_path / "straight" / "report.json").read_text())
    privacy = report["privacy"]
    assert privacy["mechanism"] == "distributed" and privacy["noise_multiplier"] == 1.0
    assert privacy["clip_norm"] == 0.5 and privacy["rounds"] == 3
    assert privacy["sampling_rate"] == 0.5 and 0 < privacy["epsilon"] < math.inf
    assert privacy["delta"] == 1e-6 and privacy["expected_cohort"] == 4 and privacy["users"] == 8
    assert privacy["sampling"] == "poisson"
    assert privacy["neighboring_relation"] == "add-or-remove-one" and privacy["accountant"]
    assert privacy["clip_count_std"] == (1.0 if adaptive else None)
    lines = [
        json.loads(x) for x in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
    ]
    spent = [x["epsilon"] for x in lines]
    assert spent == sorted(spent) and spent[-1] == pytest.approx(privacy["epsilon"])
    # against the server: each line a user in every round so far; the report the most rounds
    # any client joined, replayed here from the selection's own draws
    from uvtrain.rounds import poisson_cohort

    assert privacy["epsilon_release"] == privacy["epsilon"]
    z, delta = privacy["noise_multiplier"], privacy["delta"]
    for line in lines:
        by_hand = _analytic_gaussian_epsilon(z / math.sqrt(line["round"]), delta)
        assert line["epsilon_server"] == pytest.approx(by_hand, rel=1e-7)
    joined = np.zeros(8, dtype=int)
    for round_number in (1, 2, 3):
        joined[poisson_cohort(0, round_number, 8, 0.5)] += 1
    assert privacy["server_participations"] == joined.max() >= 1
    by_hand = _analytic_gaussian_epsilon(z / math.sqrt(joined.max()), delta)
    assert privacy["epsilon_server"] == pytest.approx(by_hand, rel=1e-7)
    assert privacy["epsilon_server"] > privacy["epsilon_release"]
    assert "against the server that ran training" in straight.output  # the plan line
    norms = [x["clip_norm"] for x in lines]
    assert (len(set(norms)) == 3) if adaptive else norms == [0.5] * 3
    assert (privacy["adaptive_clipping"] is not None) == adaptive
    # resumed from the checkpoint of round 1, the run continues bit-exactly
    from uvtrain.config import RunConfig
    from uvtrain.run import load_data, make_simulation

    config = RunConfig.from_flat({
        "method": "feduv", "dataset": "formant-voices", "clients": 8, "fraction": 0.5,
        "batch_size": 4, "rounds": 3, "dp": "distributed", "dp_noise_multiplier": 1.0,
        "clip_norm": 0.5, "adaptive_clipping": adaptive, "clip_count_std": 1.0,
    })  # fmt: skip
    dataset = load_data(config)
    straight_run = make_simulation(config, dataset)
    for _ in range(3):
        straight_run.step()
    first = make_simulation(config, dataset)
    first.step()
    resumed = make_simulation(config, dataset)
    resumed.load_state_dict(first.state_dict())
    resumed.step()
    resumed.step()
    for name, value in straight_run.params.items():
        assert torch.equal(value, resumed.params[name])
    assert resumed.mechanism.underlying.clip_norm == straight_run.mechanism.underlying.clip_norm


@pytest.mark.parametrize("path", [None, "vmap"])
def test_a_dp_round_copes_with_a_cohort_of_none_or_one(
    monkeypatch: pytest.MonkeyPatch, tiny_feduv_run: Path, path: str | None
) -> None:
    """Poisson sampling may draw 0 or 1 clients: an empty round releases θ + n / (qN) and moves
    the clip norm on the noise alone; a round of one trains it by the loop and vmap paths."""
    from uvtrain.config import RunConfig
    from uvtrain.run import load_data, make_simulation

    monkeypatch.setenv("UVTRAIN_DATA", str(tiny_feduv_run.parent / "data"))
    config = RunConfig.from_flat({
        "method": "feduv", "dataset": "formant-voices", "clients": 8, "fraction": 0.5,
        "batch_size": 4, "rounds": 3, "dp": "central", "dp_noise_multiplier": 1.0,
        "clip_norm": 0.5, "adaptive_clipping": True, "clip_count_std": 1.0,
    })  # fmt: skip
    simulation = make_simulation(config, load_data(config))
    assert (
        simulation.privacy.sampling_rate == 0.5
        and simulation.mechanism.underlying.denominator == 4.0
    )
    drawn = simulation.clients_of_round(1)  # Poisson: the realised count varies by round
    assert len({len(simulation.clients_of_round(r)) for r in range(1, 30)}) > 1
    assert np.array_equal(drawn, simulation.clients_of_round(1))
    cohorts = iter([np.zeros(0, dtype=int), np.array([5])])
    monkeypatch.setattr(simulation, "clients_of_round", lambda number: next(cohorts))
    before, norm = dict(simulation.params), simulation.mechanism.underlying.clip_norm
    shared = dict(simulation.shared)
    result = simulation.next_round(path=path)
    assert result.metrics["clients"] == 0 and simulation.round == 1
    from uvtrain.privacy.noise import _generator

    server = _generator(config.seed, 1, 2, 0)  # the server's noise of round 1, z·C = 0.5·z_Δ
    std = simulation.mechanism.underlying.update_noise * norm
    for name, value in before.items():
        noise = std * torch.randn(value.shape, generator=server)
        torch.testing.assert_close(simulation.params[name], value + noise / 4.0)
    assert simulation.mechanism.underlying.clip_norm != norm  # moved by the count's noise alone
    assert result.metrics["epsilon"] == simulation.privacy.spent_release(1)
    assert all(torch.equal(v, simulation.shared[k]) for k, v in shared.items())
    one = simulation.next_round(path=path)
    assert one.metrics["clients"] == 1 and simulation.round == 2
    assert all(bool(torch.isfinite(v).all()) for v in simulation.params.values())


def test_dp_input_errors_are_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_feduv_run: Path
) -> None:
    monkeypatch.setenv("UVTRAIN_DATA", str(tiny_feduv_run.parent / "data"))
    for bad in (["--dp", "central", "--dp-epsilon", "0"],
                ["--dp", "central", "--dp-epsilon", "-2"],
                ["--dp", "central"],
                ["--dp", "sometimes", "--dp-epsilon", "4"],
                ["--dp", "central", "--dp-noise-multiplier", "3", "--adaptive-clipping",
                 "--clip-count-std", "1.5"],
                ["--dp-noise-cohort", "100"],  # scales a noise there is none of
                ["--dp", "central", "--dp-epsilon", "4", "--dp-population", "1000"],
                ["--dp", "central", "--dp-epsilon", "4", "--dp-noise-cohort", "2"],  # < m = 4
                ["--dp", "central", "--dp-epsilon", "4", "--dp-noise-cohort", "100",
                 "--dp-population", "50"],
                ["--dp", "central", "--dp-epsilon", "4", "--dp-noise-cohort", "0"],
                ["--dp", "central", "--dp-epsilon", "1e308"],  # was a ZeroDivisionError
                ["--dp", "central", "--dp-noise-multiplier", "1e300"],
                ["--crop-seconds", "1e308"]):  # was an OverflowError  # fmt: skip
        result = _run(tmp_path / "bad", *bad, "--rounds", "1")
        assert result.exit_code == 2, (bad, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output
    # a budget already spent: a finished DP run cannot be trained further
    done = _run(tmp_path / "done", "--dp", "central", "--dp-epsilon", "30", "--rounds", "1")
    assert done.exit_code == 0, done.output
    more = _run(tmp_path / "done", "--dp", "central", "--dp-epsilon", "30", "--rounds", "2")
    assert more.exit_code == 2 and "budget is spent" in more.output
    assert len(more.output.strip().splitlines()) == 1, more.output


def test_fedgns_proxy_is_accounted_as_a_gaussian_mechanism() -> None:
    from uvtrain.accounting import release_epsilon
    from uvtrain.algorithms import FedGN

    # Δ = 2 (unit prototypes): the Gaussian mechanism of multiplier σ/Δ, as the closed form
    # written by hand gives it (σ = 2: multiplier 1), and composed over the releases
    by_hand = _analytic_gaussian_epsilon(1.0, 1e-6)
    assert release_epsilon(2.0, 2.0, 1, 1e-6) == pytest.approx(by_hand, rel=1e-7)
    assert release_epsilon(2.0, 2.0, 9, 1e-6) == pytest.approx(
        _analytic_gaussian_epsilon(1.0 / 3.0, 1e-6), rel=1e-7
    )
    sigma, sensitivity = FedGN(sigma=0.3).release_noise()
    one = release_epsilon(sigma, sensitivity, 1, 1e-3)
    assert 10 < one < release_epsilon(sigma, sensitivity, 10, 1e-3)  # σ 0.3 protects little
    assert release_epsilon(1.0, 2.0, 1, 1e-3) < one  # more noise, less ε


def test_the_audits_leakage_entry_of_fedgn_holds_its_epsilon(
    monkeypatch: pytest.MonkeyPatch, tiny_feduv_run: Path
) -> None:
    from uvtrain.audit.leakage import leakage_entry
    from uvtrain.config import RunConfig
    from uvtrain.run import load_data, make_simulation

    monkeypatch.setenv("UVTRAIN_DATA", str(tiny_feduv_run.parent / "data"))
    config = RunConfig.from_flat({"method": "fedgn", "dataset": "formant-voices", "clients": 8,
                                  "fraction": 0.5, "rounds": 3, "batch_size": 4})  # fmt: skip
    simulation = make_simulation(config, load_data(config))
    for _ in range(3):
        simulation.step()
    release = leakage_entry(simulation)["release_dp"]
    assert release["sigma"] == 0.3 and release["sensitivity"] == 2.0
    assert release["releases_max"] >= release["releases_median"] >= 1  # 4 of 8 each round
    assert release["epsilon_max"] >= release["epsilon_median"] >= release["epsilon_one_release"]
    with_proxies = make_simulation(config.with_method("fedhide"), load_data(config))
    assert "release_dp" not in leakage_entry(with_proxies)  # FedHide's proxy is no such mechanism


def test_dp_with_a_cross_silo_method_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_feduv_run: Path
) -> None:
    from typer.testing import CliRunner

    from uvtrain.cli import app

    monkeypatch.setenv("UVTRAIN_DATA", str(tiny_feduv_run.parent / "data"))
    result = CliRunner().invoke(app, [
        "run", "--method", "fedface", "--dataset", "formant-voices", "--rounds", "1",
        "--validators", "0", "--no-fv", "--dp", "central", "--dp-epsilon", "4",
        "--out", str(tmp_path / "ff"),
    ])  # fmt: skip
    assert result.exit_code == 2 and "cross-silo" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_a_second_mechanism_is_one_class_behind_the_protocol_in_either_placement() -> None:
    """A mechanism overrides what differs from UserLevelDP (here: no noise on the sum) and runs
    in both placements through the round's steps, which are typed to the protocol; the config's
    --dp and --dp-noise choices are the registries' names."""
    from uvtrain.config import DP_NOISES, DP_PLACEMENTS
    from uvtrain.privacy import DPFTRL, MECHANISMS, PLACEMENTS, Central, Distributed, Mechanism

    assert set(DP_NOISES) == set(MECHANISMS) and set(DP_PLACEMENTS) == {"off", *PLACEMENTS}

    class Silent(UserLevelDP):
        def sum_noise(self, like: dict, round_number: int) -> None:
            return None

    updates, base = _updates(4, 1.0)
    plan = RoundPlan(1, np.arange(4), 0.1)
    clipped = update_norms(updates.deltas).clamp(max=0.5)
    silent = Central(Silent(0.5, 3.0, 4.0, noise=seeded_noise(0)))
    mechanism: Mechanism = silent
    released, metrics = PrivateSum(mechanism)(
        PrivateUsers(mechanism)(updates, base, plan), base, plan
    )
    assert metrics["clip_norm"] == 0.5 and mechanism.plan is None
    assert float(update_norms({k: v[None] * 4 for k, v in released.items()})[0]) <= float(
        clipped.sum()
    ) * (1 + 1e-6)  # the mean of clipped updates, no noise
    # distributed: each user's share, and a mechanism whose noise cannot be shared is refused
    shared = Distributed(Silent(0.5, 3.0, 4.0, noise=seeded_noise(0)))
    sent = PrivateUsers(shared)(updates, base, plan)
    assert float(update_norms(sent.deltas).max()) > 0.5  # the shares are on the users' updates
    with pytest.raises(ConfigError, match="cannot be split into users' shares"):
        Distributed(DPFTRL(0.5, 3.0, 4.0, tree=object()))  # type: ignore[arg-type]
