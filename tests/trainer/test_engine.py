"""The simulation engine (uvtrain.engine): the local-update paths against the per-client loop,
resuming, sampling and batches. Each method's maths by hand is in tests/trainer/algorithms/."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from uvtrain.algorithms import FedAvg, FedAwS, FedCS, FedGN, FedHide, FedUV, Softmax  # noqa: E402
from uvtrain.engine import EngineConfig, Simulation, TrainingError  # noqa: E402


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
    assert fast.uses_batched_step == batched and not slow.uses_batched_step
    for _ in range(3):
        fast_metrics, slow_metrics = fast.step(), slow.step()
        assert fast_metrics["loss"] == pytest.approx(slow_metrics["loss"], rel=1e-5)
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
    with pytest.raises(ValueError):
        EngineConfig(fraction=0.0)


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
    with pytest.raises(ValueError, match="crop"):
        EngineConfig(crop=-1)
