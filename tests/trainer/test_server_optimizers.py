"""Server optimisers (uvtrain.server_optimizers): each kind's maths by hand, plain FedAvg bit for
bit, resuming bit-exactly, the method's defaults and the refusals. The Flower server's use of
the same object is tested in tests/deploy/test_deploy.py."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from tests.trainer.test_engine import _simulation  # noqa: E402
from uvtrain.algorithms import FedHide, FedUV  # noqa: E402
from uvtrain.config import ConfigError, RunConfig  # noqa: E402
from uvtrain.errors import TrainingError  # noqa: E402
from uvtrain.rounds import run_round  # noqa: E402
from uvtrain.server_optimizers import ServerOptimizer  # noqa: E402

THETA = [1.0, -2.0]
#: the two rounds' aggregated updates Δ = θ_agg − θ
DELTAS = ([0.4, -0.2], [0.2, 0.2])


def _two_rounds(optimizer: ServerOptimizer) -> list[float]:
    params = {"w": torch.tensor(THETA, dtype=torch.float64)}
    for delta in DELTAS:
        params = optimizer(params, {"w": params["w"] + torch.tensor(delta, dtype=torch.float64)})
    return params["w"].tolist()


def _adaptive_by_hand(kind: str, lr: float, beta1: float, beta2: float, tau: float) -> list:
    """Algorithm 2 of Reddi et al. on each coordinate, in plain floats."""
    result = []
    for index, theta in enumerate(THETA):
        m, v = 0.0, tau**2
        for delta in DELTAS:
            d = delta[index]
            m = beta1 * m + (1 - beta1) * d
            if kind == "adam":
                v = beta2 * v + (1 - beta2) * d * d
            else:
                v = v - (1 - beta2) * d * d * math.copysign(1.0, v - d * d)
            theta = theta + lr * m / (math.sqrt(v) + tau)
        result.append(theta)
    return result


def test_sgd_and_momentum_by_hand() -> None:
    # sgd, η 0.5: θ + 0.5 (Δ₁ + Δ₂) = [1 + 0.3, −2 + 0]
    assert _two_rounds(ServerOptimizer("sgd", lr=0.5)) == pytest.approx([1.3, -2.0])
    # momentum β 0.5, η 2: m₁ = Δ₁ = [0.4, −0.2], θ₁ = [1.8, −2.4];
    # m₂ = 0.5 m₁ + Δ₂ = [0.4, 0.1], θ₂ = θ₁ + 2 m₂ = [2.6, −2.2]
    momentum = ServerOptimizer("momentum", lr=2.0, momentum=0.5)
    assert _two_rounds(momentum) == pytest.approx([2.6, -2.2])
    assert momentum.state["m.w"].tolist() == pytest.approx([0.4, 0.1])


@pytest.mark.parametrize("kind", ["adam", "yogi"])
def test_adam_and_yogi_by_hand(kind: str) -> None:
    settings = dict(lr=0.1, beta1=0.5, beta2=0.75, tau=0.1)
    optimizer = ServerOptimizer(kind, **settings)
    assert _two_rounds(optimizer) == pytest.approx(_adaptive_by_hand(kind, **settings))
    # yogi's v grows additively where Δ² > v: after round 1, v = τ² + (1 − β₂) Δ₁² for both
    # (adam: β₂ τ² + (1 − β₂) Δ₁²); they differ from round 1 on
    first = ServerOptimizer(kind, **settings)
    first({"w": torch.tensor(THETA)}, {"w": torch.tensor(THETA) + torch.tensor(DELTAS[0])})
    expected = [(0.01 if kind == "yogi" else 0.0075) + 0.25 * d * d for d in DELTAS[0]]
    assert first.state["v.w"].tolist() == pytest.approx(expected)


def test_plain_fedavg_takes_the_aggregate_as_it_is() -> None:
    """sgd with η = 1 is today's FedAvg bit for bit: the aggregate itself, no arithmetic; a
    simulation trains with it unless told otherwise, and its rounds equal those of run_round
    without a server optimiser."""
    aggregate = {"w": torch.tensor([0.1, 0.2])}
    assert ServerOptimizer()({"w": torch.zeros(2)}, aggregate) is aggregate
    with_optimizer = _simulation(FedUV(code_length=127), True)
    assert with_optimizer.server_optimizer.is_fedavg
    without = _simulation(FedUV(code_length=127), True)
    for _ in range(2):
        with_optimizer.step()
        plan = without.plan(without.round + 1)
        result = run_round(
            without.algorithm, plan, without.params, without.shared, without, without.aggregator
        )
        without.params, without.shared, without.round = result.params, result.shared, plan.number
    for name, value in without.params.items():
        assert torch.equal(with_optimizer.params[name], value)


@pytest.mark.parametrize("kind", ["momentum", "adam", "yogi"])
def test_a_resumed_run_with_a_server_optimizer_equals_the_uninterrupted_one(kind, tmp_path):
    def simulation():
        made = _simulation(FedUV(code_length=127), True, 2)
        made.server_optimizer = ServerOptimizer(kind, lr=0.5)
        return made

    straight = simulation()
    for _ in range(4):
        straight.step()
    first = simulation()
    for _ in range(2):
        first.step()
    torch.save(first.state_dict(), tmp_path / "checkpoint.pt")
    resumed = simulation()
    resumed.load_state_dict(torch.load(tmp_path / "checkpoint.pt", weights_only=True))
    assert set(resumed.server_optimizer.state) == set(first.server_optimizer.state)
    for _ in range(2):
        resumed.step()
    for name in straight.params:
        assert torch.equal(resumed.params[name], straight.params[name])
    plain = _simulation(FedUV(code_length=127), True, 2)  # sgd: another optimiser's checkpoint
    with pytest.raises(TrainingError, match=f"server optimiser {kind}, not sgd"):
        plain.load_state_dict(torch.load(tmp_path / "checkpoint.pt", weights_only=True))


def test_feduv_defaults_to_a_server_lr_and_the_others_to_fedavg() -> None:
    feduv = RunConfig.from_flat({"method": "feduv", "dataset": "x"}).schedule
    assert (
        feduv.server_optimizer == "sgd"
        and feduv.server_lr == FedUV.schedule_defaults["server_lr"] > 1
    )
    assert feduv.lr_decay == FedUV.schedule_defaults["lr_decay"] and not FedHide.schedule_defaults
    fedhide = RunConfig.from_flat({"method": "fedhide", "dataset": "x"})
    assert fedhide.schedule.server_lr == 1.0 and fedhide.schedule.lr_decay == 0.01
    given = RunConfig.from_flat({"method": "feduv", "dataset": "x", "server_lr": 1.0})
    assert given.schedule.server_lr == 1.0
    # another method's defaults follow the method; a setting given stays
    config = RunConfig.from_flat({"method": "feduv", "dataset": "x", "lr_decay": 0.5})
    assert config.with_method("fedhide").schedule.server_lr == 1.0
    assert config.with_method("fedhide").schedule.lr_decay == 0.5
    assert fedhide.with_method("feduv").schedule == feduv


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("server_optimizer", "lamb", "server_optimizer must be one of sgd, momentum, adam, yogi"),
        ("server_lr", 0.0, "server_lr must be positive"),
        ("server_momentum", 1.0, r"server_momentum must be in \[0, 1\)"),
        ("server_beta1", -0.1, r"server_beta1 must be in \[0, 1\)"),
        ("server_beta2", 1.5, r"server_beta2 must be in \[0, 1\)"),
        ("server_tau", 0.0, "server_tau must be positive"),
    ],
)
def test_bad_server_settings_are_refused(key: str, value, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_flat({"method": "feduv", "dataset": "x", key: value})


def test_fedface_refuses_a_server_optimizer() -> None:
    """FedFace has its own server step (Partially Federated Momentum)."""
    assert RunConfig.from_flat({"method": "fedface", "dataset": "x"}).schedule.server_lr == 1.0
    for key, value in (("server_optimizer", "momentum"), ("server_lr", 2.0)):
        with pytest.raises(ConfigError, match="fedface is cross-silo"):
            RunConfig.from_flat({"method": "fedface", "dataset": "x", key: value})
