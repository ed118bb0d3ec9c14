"""The simulation engine (uvtrain.engine): the local-update paths against the per-client loop,
resuming, sampling and batches. Each method's maths by hand is in tests/trainer/algorithms/."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from uvtrain.algorithms import FedAvg, FedAwS, FedCS, FedGN, FedHide, FedUV, Softmax  # noqa: E402
from uvtrain.engine import EngineConfig, Simulation, TrainingError, vmap_runs  # noqa: E402
from uvtrain.errors import ConfigError  # noqa: E402
from uvtrain.rounds import RoundResult  # noqa: E402


class TinyBackbone(nn.Module):
    """Log energies of 8 sub-bands of the waveform's frames, then two linear layers."""

    embedding_dim = 12

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 24)
        self.second = nn.Linear(24, self.embedding_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frames = x[:, : x.shape[1] // 8 * 8].reshape(x.shape[0], 8, -1)
        features = torch.log(frames.pow(2).mean(-1) + 1e-6)
        return self.second(torch.tanh(self.first(features)))


def _clients(count: int = 10, samples: int = 6, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    data = []
    for client in range(count):
        scale = np.exp(np.linspace(-1, 1, 8) * (client % 5 - 2) / 2).repeat(100)
        data.append((rng.normal(size=(samples, 800)) * scale).astype(np.float32))
    return data


def one_pass(result: RoundResult) -> bool:
    """Whether the round took the exact one-pass (batched) step: the local training then
    aggregated as it trained, so the round's updates hold the aggregate, not each client's."""
    return result.updates.aggregate is not None


def _simulation(
    algorithm: FedAvg, vectorised: bool, steps: int = 1, batched: bool = True, **overrides
) -> Simulation:
    settings = dict(
        rounds=3, fraction=0.4, local_steps=steps, batch_size=4, lr=0.1, seed=3, crop=600
    )
    settings.update(overrides)
    config = EngineConfig(vectorised=vectorised, batched=batched, chunk_size=3, **settings)
    torch.manual_seed(0)  # the backbone's initial weights
    return Simulation(algorithm, TinyBackbone(), _clients(), config)


METHODS = [
    FedUV(code_length=127),
    FedHide(weight=10.0, alpha=0.1, neighbours=3),
    FedGN(sigma=0.3),
    FedCS(cosine=0.3),
    FedAwS(),
    Softmax(),
    Softmax(softmax_head="cosine"),
]


@pytest.mark.parametrize("algorithm", METHODS, ids=lambda a: a.name)
@pytest.mark.parametrize(
    ("steps", "batched"),
    [(1, True), (1, False), (3, False)],
    ids=["E1-batched", "E1-vmap", "E3-vmap"],
)
def test_vectorised_engine_equals_per_client_loop(
    algorithm: FedAvg, steps: int, batched: bool
) -> None:
    fast = _simulation(algorithm, True, steps, batched=batched)
    slow = _simulation(algorithm, False, steps)
    for _ in range(3):
        fast_result, slow_result = fast.next_round(), slow.next_round()
        assert one_pass(fast_result) == batched and not one_pass(slow_result)
        loss = fast_result.metrics["loss"]
        assert loss == pytest.approx(slow_result.metrics["loss"], rel=1e-5)
    for name in fast.params:
        torch.testing.assert_close(fast.params[name], slow.params[name], atol=1e-5, rtol=1e-5)
    for group in ("private", "shared"):
        for name, value in getattr(fast, group).items():
            torch.testing.assert_close(value, getattr(slow, group)[name], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("algorithm", METHODS, ids=lambda a: a.name)
def test_batched_step_in_groups_of_clients_is_the_same_sum(
    algorithm: FedAvg, monkeypatch: pytest.MonkeyPatch
) -> None:
    from uvtrain import engine

    monkeypatch.setattr(engine, "MICRO_BATCH", 8)  # groups of 2 clients of B = 4
    fast = _simulation(algorithm, True)
    slow = _simulation(algorithm, False)
    for _ in range(3):
        assert fast.step()["loss"] == pytest.approx(slow.step()["loss"], rel=1e-5)
    for name in fast.params:
        torch.testing.assert_close(fast.params[name], slow.params[name], atol=1e-5, rtol=1e-5)
    for name, value in fast.private.items():
        torch.testing.assert_close(value, slow.private[name], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("algorithm", METHODS, ids=lambda a: a.name)
def test_resumed_run_equals_uninterrupted(algorithm: FedAvg, tmp_path) -> None:
    straight = _simulation(algorithm, True, 2)
    for _ in range(4):
        straight.step()
    first = _simulation(algorithm, True, 2)
    for _ in range(2):
        first.step()
    torch.save(first.state_dict(), tmp_path / "checkpoint.pt")
    resumed = _simulation(algorithm, True, 2)
    resumed.load_state_dict(torch.load(tmp_path / "checkpoint.pt", weights_only=True))
    assert resumed.round == 2
    for _ in range(2):
        resumed.step()
    for name in straight.params:
        torch.testing.assert_close(resumed.params[name], straight.params[name], atol=0, rtol=0)
    other = _simulation(algorithm, True, 2, lr=0.5)
    with pytest.raises(TrainingError, match="another schedule"):
        other.load_state_dict(torch.load(tmp_path / "checkpoint.pt", weights_only=True))


def test_nan_loss_stops_naming_the_round() -> None:
    data = _clients()
    data[4][0, 0] = np.nan
    config = EngineConfig(fraction=1.0, batch_size=6, seed=0)
    simulation = Simulation(FedUV(), TinyBackbone(), data, config)
    with pytest.raises(TrainingError, match="in round 1"):
        simulation.step()


def test_round_sampling_and_lr_schedule() -> None:
    simulation = _simulation(FedUV(), True, fraction=0.5)
    assert len(simulation.clients_of_round(1)) == 5
    np.testing.assert_array_equal(simulation.clients_of_round(7), simulation.clients_of_round(7))
    robin = _simulation(FedUV(), True, fraction=0.4, sampling="round-robin")
    assert [robin.clients_of_round(r).tolist() for r in (1, 2, 3)] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [0, 1, 8, 9],
    ]
    assert EngineConfig(lr=0.1, lr_decay=0.01).learning_rate(11) == pytest.approx(0.1 / 1.1)
    # the cross-silo trainer's decay counts its K local steps of every earlier round
    assert EngineConfig(lr=0.1, lr_decay=0.01).learning_rate(3, 5) == pytest.approx(0.1 / 1.1)
    with pytest.raises(ConfigError):
        EngineConfig(fraction=0.0)


def test_step_schedule_multiplies_the_lr_after_each_milestone_round() -> None:
    """``lr_milestones="2,4"``: rounds 1-2 at lr, 3-4 at γ·lr, 5 on at γ²·lr; on top of the
    inverse-time decay; off by default."""
    step = EngineConfig(lr=0.1, lr_decay=0.0, lr_milestones="2,4", lr_gamma=0.5)
    assert [step.learning_rate(r) for r in range(1, 7)] == pytest.approx(
        [0.1, 0.1, 0.05, 0.05, 0.025, 0.025]
    )
    both = EngineConfig(lr=0.1, lr_decay=0.01, lr_milestones="10", lr_gamma=0.1)
    assert both.learning_rate(11) == pytest.approx(0.01 / 1.1)
    assert EngineConfig(lr=0.1, lr_decay=0.0).learning_rate(10_000) == 0.1
    for bad in ("4,2", "0,3", "2,2", "ten"):
        with pytest.raises(ConfigError, match="lr_milestones"):
            EngineConfig(lr_milestones=bad)
    with pytest.raises(ConfigError, match="lr_gamma"):
        EngineConfig(lr_gamma=0.0)


def test_batches_are_random_windows_of_the_clients_samples() -> None:
    simulation = _simulation(FedUV(), True, steps=2)
    clients = simulation.clients_of_round(2)
    batches = simulation.batches_of_round(2, clients)
    assert batches.shape == (len(clients), 2, 4, 600)
    torch.testing.assert_close(batches, simulation.batches_of_round(2, clients), atol=0, rtol=0)
    offsets = set()
    for position, client in enumerate(clients):
        data = simulation.data[client]
        for window in batches[position].reshape(-1, 600):
            found = [
                (row, start)
                for row in range(len(data))
                for start in range(201)
                if torch.equal(data[row, start : start + 600], window)
            ]
            assert found, "a training window is not a piece of the client's own samples"
            offsets.add(found[0][1])
    assert len(offsets) > 1  # the windows start at different places
    whole = _simulation(FedUV(), True, crop=0).batches_of_round(2, clients)
    assert whole.shape[-1] == 800
    with pytest.raises(ConfigError, match="crop"):
        EngineConfig(crop=-1)


# -- the papers' schedule options: local epochs, the plain mean, round-robin ---------------------


def _uneven_simulation(algorithm: FedAvg, vectorised: bool, **overrides) -> Simulation:
    """Ten clients holding 3 to 11 samples, so that with B = 4 they take different numbers of
    local steps and most epochs end in a smaller batch."""
    sizes = [3, 4, 5, 6, 7, 8, 9, 10, 11, 5]
    data = [samples[:size] for samples, size in zip(_clients(samples=11), sizes, strict=True)]
    settings = dict(rounds=4, fraction=0.4, batch_size=4, lr=0.1, seed=3, crop=600)
    settings.update(overrides)
    config = EngineConfig(vectorised=vectorised, chunk_size=3, **settings)
    torch.manual_seed(0)
    return Simulation(algorithm, TinyBackbone(), data, config)


def test_epoch_batches_cover_each_clients_samples_once_per_epoch() -> None:
    from uvtrain.batches import epoch_batches

    samples = torch.arange(10, dtype=torch.float32)[:, None].expand(10, 5).contiguous()
    rng = np.random.default_rng(0)
    batches = epoch_batches(samples, 2, 4, 0, rng)
    assert [len(batch) for batch in batches] == [4, 4, 2, 4, 4, 2]  # the last one smaller
    for epoch in (batches[:3], batches[3:]):
        seen = torch.cat(epoch)[:, 0].sort().values
        torch.testing.assert_close(seen, torch.arange(10, dtype=torch.float32))
    assert not torch.equal(torch.cat(batches[:3]), torch.cat(batches[3:]))  # reshuffled
    simulation = _uneven_simulation(FedUV(), True, local_epochs=2)
    clients = simulation.clients_of_round(1)
    drawn = simulation.epoch_batches_of_round(1, clients)
    for client, mine in zip(clients, drawn, strict=True):
        size = len(simulation.data[client])
        assert len(mine) == 2 * -(-size // 4)  # E · ⌈n_k / B⌉ steps
        assert sum(len(batch) for batch in mine) == 2 * size
    with pytest.raises(TrainingError, match="local_epochs"):
        _uneven_simulation(FedUV(), True).epoch_batches_of_round(1, clients)


@pytest.mark.parametrize("algorithm", METHODS, ids=lambda a: a.name)
def test_local_epochs_vectorised_equals_per_client_loop(algorithm: FedAvg) -> None:
    fast = _uneven_simulation(algorithm, True, local_epochs=2)
    slow = _uneven_simulation(algorithm, False, local_epochs=2)
    for _ in range(3):
        fast_result, slow_result = fast.next_round(), slow.next_round()
        assert not one_pass(fast_result)
        # one loss per client: its mean over its own E · ⌈n_k / B⌉ steps
        assert fast_result.updates.losses.shape == (4, 1)
        torch.testing.assert_close(
            fast_result.updates.losses, slow_result.updates.losses, atol=1e-6, rtol=1e-6
        )
    for group in ("params", "private", "shared"):
        for name, value in getattr(fast, group).items():
            torch.testing.assert_close(value, getattr(slow, group)[name], atol=1e-6, rtol=1e-6)


def test_one_local_epoch_is_sgd_over_the_clients_own_batches() -> None:
    simulation = _uneven_simulation(FedUV(), False, local_epochs=1, fraction=0.1)
    clients = simulation.clients_of_round(1)
    assert len(clients) == 1
    client = int(clients[0])
    batches = simulation.epoch_batches_of_round(1, clients)[0]
    expected = {k: v.clone() for k, v in simulation.params.items()}
    lr = simulation.config.learning_rate(1)
    for batch in batches:  # plain SGD, by hand, one step per batch
        leaves = {k: v.clone().requires_grad_(True) for k, v in expected.items()}
        outputs = torch.func.functional_call(simulation.model, (leaves, simulation.buffers), batch)
        private = {k: v[client] for k, v in simulation.private.items()}
        constants = {k: v[client] for k, v in simulation.constants.items()}
        loss = simulation.algorithm.loss(outputs, private, constants, simulation.shared)
        grads = torch.autograd.grad(loss, list(leaves.values()))
        expected = {
            k: (v - lr * g).detach() for (k, v), g in zip(leaves.items(), grads, strict=True)
        }
    simulation.step()
    for name, value in expected.items():
        torch.testing.assert_close(simulation.params[name], value, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("algorithm", METHODS, ids=lambda a: a.name)
def test_plain_mean_aggregation_batched_equals_loop_and_ignores_sample_counts(
    algorithm: FedAvg,
) -> None:
    fast = _uneven_simulation(algorithm, True, aggregation="mean")
    slow = _uneven_simulation(algorithm, False, aggregation="mean")
    fusable = type(algorithm).aggregate is FedAvg.aggregate
    for _ in range(3):
        fast_result, slow_result = fast.next_round(), slow.next_round()
        assert one_pass(fast_result) == fusable  # the one-pass step weighs clients by 1/M too
        assert fast_result.metrics["loss"] == pytest.approx(slow_result.metrics["loss"], rel=1e-6)
    for name in fast.params:
        torch.testing.assert_close(fast.params[name], slow.params[name], atol=1e-6, rtol=1e-6)
    weighted = _uneven_simulation(algorithm, False)
    weighted.step()
    once = _uneven_simulation(algorithm, False, aggregation="mean")
    plan = once.plan(1)
    once.receive(torch.as_tensor(plan.clients))  # what each client starts from (FedAwS: its row)
    batches = once.batches_of_round(1, plan.clients)
    alone = [
        once.client_update(int(client), batches[position], plan.lr)[0]
        for position, client in enumerate(plan.clients)
    ]
    once.step()
    name = next(iter(once.params))
    if fusable:  # the round's model is the plain 1/M mean of what the clients sent
        mean = torch.stack([params[name] for params in alone]).mean(0)
        torch.testing.assert_close(once.params[name], mean, atol=1e-6, rtol=1e-6)
        assert not torch.allclose(once.params[name], weighted.params[name], atol=1e-7)
    with pytest.raises(ConfigError, match="aggregation"):
        EngineConfig(aggregation="median")


@pytest.mark.parametrize("algorithm", [METHODS[0], METHODS[1]], ids=lambda a: a.name)
def test_resumed_run_with_the_papers_schedule_equals_uninterrupted(
    algorithm: FedAvg, tmp_path
) -> None:
    paper = dict(local_epochs=1, aggregation="mean", sampling="round-robin")
    straight = _uneven_simulation(algorithm, True, **paper)
    for _ in range(4):
        straight.step()
    first = _uneven_simulation(algorithm, True, **paper)
    for _ in range(2):
        first.step()
    torch.save(first.state_dict(), tmp_path / "checkpoint.pt")
    resumed = _uneven_simulation(algorithm, True, **paper)
    resumed.load_state_dict(torch.load(tmp_path / "checkpoint.pt", weights_only=True))
    for _ in range(2):
        resumed.step()
    for group in ("params", "private", "shared"):
        for name, value in getattr(straight, group).items():
            torch.testing.assert_close(getattr(resumed, group)[name], value, atol=0, rtol=0)
    for other in (
        dict(paper, local_epochs=2),
        dict(paper, aggregation="weighted"),
        dict(paper, sampling="random"),
        {k: v for k, v in paper.items() if k != "local_epochs"},
    ):
        changed = _uneven_simulation(algorithm, True, **other)
        with pytest.raises(TrainingError, match="another schedule"):
            changed.load_state_dict(torch.load(tmp_path / "checkpoint.pt", weights_only=True))


def test_a_checkpoint_from_before_the_options_resumes_as_their_defaults(tmp_path) -> None:
    simulation = _uneven_simulation(FedUV(), True)
    simulation.step()
    state = simulation.state_dict()
    for key in ("aggregation", "local_epochs"):
        del state["engine"][key]
    _uneven_simulation(FedUV(), True).load_state_dict(state)
    with pytest.raises(TrainingError, match="another schedule"):
        _uneven_simulation(FedUV(), True, local_epochs=1).load_state_dict(state)


def test_local_epochs_are_refused_beside_local_steps() -> None:
    with pytest.raises(ConfigError, match="not both"):
        EngineConfig(local_steps=2, local_epochs=1)
    with pytest.raises(ConfigError, match="local_epochs"):
        EngineConfig(local_epochs=0)


def test_recurrent_models_train_by_the_loop_on_cuda_only() -> None:
    """cuDNN's LSTM fails under vmap (H100, 2026-11-26): such a model is looped on CUDA, and
    nothing else changes (the CPU and every non-recurrent model keep vmap)."""
    lstm = nn.Sequential(nn.Linear(4, 4), nn.LSTM(4, 4, batch_first=True))
    convolution = nn.Sequential(nn.Conv1d(1, 2, 3), nn.Flatten())
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert not vmap_runs(lstm, cuda)
    assert vmap_runs(lstm, cpu)
    assert vmap_runs(convolution, cuda)
