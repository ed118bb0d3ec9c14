"""What holds for every method: the registry and its parameters, the prototypes a server sees, and
every method learning a tiny task. Each method's own maths by hand is in test_<method>.py here."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from uvtrain.algorithms import (  # noqa: E402
    METHODS,
    FedAvg,
    FedAwS,
    FedCS,
    FedGN,
    FedHide,
    FedUV,
    Softmax,
)
from uvtrain.engine import EngineConfig, Simulation  # noqa: E402
from uvtrain.evaluation import (  # noqa: E402
    codeword_protocol,
    equal_error_rate,
    prototype_leakage,
    prototype_protocol,
)

# -- the registry and the prototypes ----------------------------------------------------------


def test_leakage_is_one_when_the_server_holds_the_prototypes() -> None:
    generator = torch.Generator().manual_seed(1)
    classes = torch.randn(20, 16, generator=generator)
    params = {"classes": classes}
    learnt, seen = Softmax().prototypes(params, {}, {})
    assert prototype_leakage(learnt.numpy(), seen.numpy()) == 1.0
    bank = torch.nn.functional.normalize(classes, dim=1)
    learnt, seen = FedAwS().prototypes({}, {"prototype": -classes}, {"embeddings": bank})
    assert prototype_leakage(learnt.numpy(), seen.numpy()) == 1.0


def test_every_method_is_registered_with_its_parameters() -> None:
    from uvtrain.config import RunConfig

    def flat(**values: object) -> RunConfig:  # a config from the flat keys a user writes
        return RunConfig.from_flat(values)

    assert set(METHODS) == {"feduv", "fedhide", "fedgn", "fedcs", "fedaws", "softmax", "fedface"}
    built = flat(method="fedcs", dataset="x", cosine=0.2, weight=3.0).method
    assert built == FedCS(weight=3.0, cosine=0.2)
    assert flat(method="fedaws", dataset="x", spread_lr=7.0).method.spread_lr == 7.0
    assert flat(method="softmax", dataset="x", scale=8.0).method == Softmax(scale=8.0)
    assert set(FedGN().parameters()) == {"weight", "embedding_dim", "window", "sigma"}
    fedface = flat(method="fedface", dataset="x", margin_loss="cosface", pfm=False)
    assert fedface.method.margin_loss == "cosface" and not fedface.method.pfm


# -- every method learns -----------------------------------------------------------------------


class Bands(nn.Module):
    """Log energies of 8 sub-bands of the samples, then two linear layers."""

    embedding_dim = 16

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 32)
        self.second = nn.Linear(32, self.embedding_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = torch.log(x.reshape(x.shape[0], 8, -1).pow(2).mean(-1) + 1e-6)
        return self.second(torch.tanh(self.first(features)))


def _voices(clients: int = 12, samples: int = 12, seed: int = 0) -> list[np.ndarray]:
    """Each client's samples: noise shaped by its own random sub-band envelope."""
    rng = np.random.default_rng(seed)
    data = []
    for _ in range(clients):
        envelope = np.exp(rng.normal(size=8) * 0.8).repeat(40)
        data.append((rng.normal(size=(samples, 320)) * envelope).astype(np.float32))
    return data


def _eer(simulation: Simulation, data: list[np.ndarray]) -> float:
    """EER of the clients' held-out samples against what the method learns for each client: the
    codewords' scores for FedUV, else cosines with the learnt class vectors (the ``prototypes``
    hook: FedHide's private prototypes, FedAwS's class embeddings, softmax's class matrix)."""
    half = data[0].shape[0] // 2
    probes = np.concatenate([d[half:] for d in data])
    labels = np.repeat(np.arange(len(data)), len(data[0]) - half)
    outputs = simulation.outputs(probes)
    if simulation.algorithm.output_kind == "codeword":
        references = simulation.constants["codeword"].numpy()
        return equal_error_rate(*codeword_protocol(outputs, labels, references))
    state = (simulation.params, simulation.private, simulation.shared)
    learnt, _ = simulation.algorithm.prototypes(*state)
    return equal_error_rate(*prototype_protocol(outputs, labels, learnt.numpy()))


LEARNERS: list[tuple[FedAvg, float]] = [
    (FedUV(code_length=127), 0.5),
    (FedHide(neighbours=3), 0.1),
    (FedGN(sigma=0.3), 0.3),
    (FedCS(cosine=0.3), 0.3),
    (FedAwS(), 0.3),
    (Softmax(), 0.3),
    (Softmax(softmax_head="cosine"), 0.3),
]


@pytest.mark.parametrize(("method", "lr"), LEARNERS, ids=lambda v: getattr(v, "name", ""))
def test_every_method_learns_a_tiny_task(method: FedAvg, lr: float) -> None:
    data = _voices()
    half = data[0].shape[0] // 2
    config = EngineConfig(rounds=60, fraction=0.5, batch_size=6, lr=lr, lr_decay=0.0, seed=0)
    torch.manual_seed(0)
    simulation = Simulation(method, Bands(), [d[:half] for d in data], config)
    before = _eer(simulation, data)
    for _ in range(config.rounds):
        simulation.step()
    after = _eer(simulation, data)
    assert before > 0.3 and after < 0.1, (before, after)
