"""The one round (uvtrain.rounds): every step runs, in order, for every method and path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import Tensor, nn  # noqa: E402

from tests.trainer.test_engine import one_pass  # noqa: E402
from uvtrain.algorithms import FedHide, FedUV  # noqa: E402
from uvtrain.algorithms.base import FedAvg, Tensors, overrides  # noqa: E402
from uvtrain.engine import EngineConfig, Simulation  # noqa: E402
from uvtrain.rounds import (  # noqa: E402
    ClientUpdates,
    RoundPlan,
    UniformMean,
    WeightedMean,
    run_round,
)


class Tiny(nn.Module):
    embedding_dim = 6

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(40, self.embedding_dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x[:, :40])


def _clients(count: int = 6) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.normal(size=(5, 64)).astype(np.float32) * (1 + i) for i in range(count)]


def _simulation(algorithm: FedAvg, **settings) -> Simulation:
    config = EngineConfig(rounds=3, fraction=0.5, batch_size=3, lr=0.1, seed=1, **settings)
    torch.manual_seed(0)
    return Simulation(algorithm, Tiny(), _clients(), config)


@dataclass(frozen=True)
class ServerMomentum(FedUV):
    """A method with only a server step (FedAvgM-like): the server counts its rounds."""

    name: ClassVar[str] = "server-momentum"

    def init_shared(self, num_clients, dim, generator, constants) -> Tensors:
        return {"steps": torch.zeros(())}

    def server_update(self, shared, messages, clients, lr, *, before=None, after=None) -> Tensors:
        assert before is not None and after is not None and not messages
        return {"steps": shared["steps"] + 1}


def test_a_method_with_only_a_server_step_has_it_run_every_round() -> None:
    simulation = _simulation(ServerMomentum())
    assert not overrides(simulation.algorithm, "client_message")
    for _ in range(3):
        simulation.step()
    assert float(simulation.shared["steps"]) == 3


def test_postprocessing_turns_the_fused_step_off_and_sees_each_clients_update() -> None:
    plain, processed = _simulation(FedUV()), _simulation(FedUV())
    seen: list[int] = []

    def halve(updates: ClientUpdates, base: Tensors, plan: RoundPlan) -> ClientUpdates:
        deltas = updates.as_deltas(base)
        seen.append(len(plan.clients))
        return ClientUpdates(
            deltas.clients,
            deltas.weights,
            deltas.losses,
            deltas={k: v / 2 for k, v in deltas.deltas.items()},
        )

    processed.postprocess.append(halve)
    before = {k: v.clone() for k, v in plain.params.items()}
    assert one_pass(plain.next_round()) and not one_pass(processed.next_round())
    assert seen == [3]
    for name, value in before.items():
        full = plain.params[name] - value
        half = processed.params[name] - value
        torch.testing.assert_close(half, full / 2, rtol=1e-4, atol=1e-6)


def test_weighted_mean_of_deltas_equals_the_mean_of_parameters() -> None:
    algorithm = FedAvg()
    base = {"w": torch.tensor([1.0, 2.0])}
    params = {"w": torch.tensor([[2.0, 2.0], [1.0, 5.0]])}
    weights = torch.tensor([1.0, 3.0])
    clients = torch.tensor([0, 1])
    losses = torch.zeros(2, 1)
    plan = RoundPlan(1, np.arange(2), 0.1)
    by_params, metrics = WeightedMean(algorithm)(
        ClientUpdates(clients, weights, losses, params=params), base, plan
    )
    deltas = ClientUpdates(clients, weights, losses, params=params).as_deltas(base)
    by_deltas, _ = WeightedMean(algorithm)(deltas, base, plan)
    torch.testing.assert_close(by_params["w"], torch.tensor([1.25, 4.25]))
    torch.testing.assert_close(by_deltas["w"], by_params["w"])
    assert metrics == {}  # a plain mean has nothing to report
    updates = ClientUpdates(clients, weights, losses, params=params)
    uniform, _ = UniformMean(algorithm)(updates, base, plan)
    torch.testing.assert_close(uniform["w"], torch.tensor([1.5, 3.5]))


def test_the_aggregators_metrics_join_the_rounds() -> None:
    """An aggregator returns (parameters, metrics): its metrics are the round's, nothing is
    read from its attributes."""
    simulation = _simulation(FedUV())

    class Reporting(WeightedMean):
        def __call__(self, updates, base, plan):
            params, _ = super().__call__(updates, base, plan)
            return params, {"aggregated_round": plan.number}

    simulation.aggregator = Reporting(simulation.algorithm)
    assert simulation.step()["aggregated_round"] == 1


def test_the_round_runs_the_messages_and_the_server_step_of_fedhide() -> None:
    simulation = _simulation(FedHide(neighbours=2), local_steps=2)
    proxies = simulation.shared["proxies"].clone()
    plan = simulation.plan(1)
    result = run_round(
        simulation.algorithm,
        plan,
        simulation.params,
        simulation.shared,
        simulation,
        simulation.aggregator,
    )
    changed = (result.shared["proxies"] != proxies).any(dim=1).nonzero().flatten().tolist()
    assert changed == plan.clients.tolist()
    assert set(result.updates.messages) == {"proxy"}
    assert result.metrics["round"] == 1 and result.metrics["clients"] == 3


def test_a_non_finite_loss_stops_the_round() -> None:
    """The simulator's local training refuses a loss that is not finite as a divergence (the
    run command then marks the folder); run_round's own check stays for other local training."""
    from uvtrain.errors import DivergedError

    simulation = _simulation(FedUV())
    simulation.params = {k: v * float("nan") for k, v in simulation.params.items()}
    with pytest.raises(DivergedError, match="diverged in round 1: the training loss is not finite"):
        simulation.step()


def test_the_poisson_cohort_samples_each_client_independently_at_its_rate() -> None:
    """DP's sampler (:func:`poisson_cohort`): deterministic per (seed, round); each client in
    with probability q, independently. The seed is fixed, so every bound below is a fixed
    number checked once; each is 5 standard deviations of the statistic under the model (a
    wrong rate, a fixed size or correlated clients fail it by far more)."""
    from uvtrain.rounds import poisson_cohort

    users, rate, rounds = 2000, 0.1, 200
    assert np.array_equal(poisson_cohort(7, 3, users, rate), poisson_cohort(7, 3, users, rate))
    assert not np.array_equal(poisson_cohort(7, 3, users, rate), poisson_cohort(7, 4, users, rate))
    assert not np.array_equal(poisson_cohort(7, 3, users, rate), poisson_cohort(8, 3, users, rate))
    members = np.zeros((rounds, users), dtype=bool)
    for number in range(1, rounds + 1):
        cohort = poisson_cohort(7, number, users, rate)
        assert np.array_equal(cohort, np.unique(cohort))  # sorted, no repeats
        members[number - 1, cohort] = True
    sizes = members.sum(1)
    # the rate: Σ sizes ~ Binomial(N·R, q), mean 40,000, std 190
    assert abs(int(sizes.sum()) - users * rounds * rate) < 5 * 190
    # the sizes vary as Binomial(N, q) (variance Nq(1 − q) = 180; a fixed size has none): the
    # sample variance of 200 rounds has a relative std of √(2/199) ≈ 0.1
    assert 0.5 * 180 < float(sizes.var(ddof=1)) < 1.5 * 180
    # independence: pairs of clients (2i, 2i+1) are in together at rate q² — 200,000 pairs
    # over the rounds, mean 2,000, std 44.5
    together = int((members[:, 0::2] & members[:, 1::2]).sum())
    assert abs(together - rounds * users / 2 * rate**2) < 5 * 44.5
    assert poisson_cohort(1, 1, 10, 0.0).size == 0 and poisson_cohort(1, 1, 10, 1.0).size == 10
