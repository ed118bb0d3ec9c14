"""The baselines' maths against values computed by hand, and every method learning a tiny task.

softmax (shared class matrix), FedAwS (positive loss + the server's spreadout step), and the
proxy generators FedGN and FedCS beside FedHide's.
"""

from __future__ import annotations

import math

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
from uvtrain.algorithms.fedaws import (  # noqa: E402
    positive_hinge_loss,
    spreadout,
    spreadout_step,
)
from uvtrain.algorithms.fedhide import cosine_proxy, gaussian_proxy  # noqa: E402
from uvtrain.algorithms.softmax import softmax_loss  # noqa: E402
from uvtrain.engine import EngineConfig, Simulation  # noqa: E402
from uvtrain.evaluation import (  # noqa: E402
    codeword_protocol,
    equal_error_rate,
    prototype_leakage,
    prototype_protocol,
)

# -- the pure functions, by hand ---------------------------------------------------------------


def test_softmax_loss_by_hand() -> None:
    outputs = torch.tensor([[1.0, 0.0]])
    classes = torch.tensor([[2.0, 0.0], [0.0, 3.0]])  # rows normalised: e1, e2
    # logits s·(1, 0) with s = 2: CE of class 0 = log(1 + e^-2); of class 1 = log(1 + e^2)
    assert float(softmax_loss(outputs, classes, torch.tensor(0), 2.0)) == pytest.approx(
        math.log(1 + math.exp(-2))
    )
    assert float(softmax_loss(outputs, classes, torch.tensor(1), 2.0)) == pytest.approx(
        math.log(1 + math.exp(2))
    )


def test_fedaws_positive_loss_by_hand() -> None:
    outputs = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    # cosines with normalize((2, 0)) = 1 and 0: hinge (0.9 − ·)² = 0 and 0.81, mean 0.405
    assert float(positive_hinge_loss(outputs, torch.tensor([2.0, 0.0]), 0.9)) == pytest.approx(
        0.405
    )


def test_spreadout_and_the_servers_step_by_hand() -> None:
    rows = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    # distances: d01 = d12 = √2 < ν = 1.5, d02 = 2 > ν; each pair counted both ways
    assert float(spreadout(rows, 1.5)) == pytest.approx(4 * (1.5 - math.sqrt(2)) ** 2)
    assert float(spreadout(rows, 1.0)) == 0.0  # everything farther apart than ν
    # ∂/∂w_0 (on the unit sphere) = 2·2(ν − d01)/d01 · w_1 = 2√2 (ν − √2) · e2; step η = 0.5
    gradient = 2 * math.sqrt(2) * (1.5 - math.sqrt(2))
    stepped = spreadout_step(rows, 1.5, 0.5)
    expected = torch.tensor([1.0, -0.5 * gradient])
    torch.testing.assert_close(stepped[0], expected / expected.norm())
    assert torch.allclose(stepped.norm(dim=1), torch.ones(3))
    before = torch.pdist(rows).min()
    assert torch.pdist(stepped).min() > before  # the step spreads the classes out


def test_fedaws_server_writes_rows_then_spreads_and_clients_receive_theirs() -> None:
    method = FedAwS(spread_margin=1.5, spread_lr=2.0)
    shared = {"embeddings": torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])}
    message = {"embedding": torch.tensor([[0.6, 0.8]])}
    updated = method.server_update(shared, message, torch.tensor([2]), lr=0.25)
    written = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    torch.testing.assert_close(updated["embeddings"], spreadout_step(written, 1.5, 0.5))
    received = method.client_receive(
        {"prototype": torch.zeros(2)}, {"index": torch.tensor(1)}, updated
    )
    torch.testing.assert_close(received["prototype"], updated["embeddings"][1])


def test_gaussian_and_cosine_proxies_by_hand() -> None:
    prototype = torch.tensor([1.0, 0.0, 0.0])
    torch.testing.assert_close(
        gaussian_proxy(prototype, torch.tensor([0.0, 1.0, 0.0]), 1.0),
        torch.tensor([1.0, 1.0, 0.0]) / math.sqrt(2),
    )
    # n = (3, 4, 0): its part orthogonal to w is (0, 4, 0) -> u = e2; proxy = 0.6 w + 0.8 u
    torch.testing.assert_close(
        cosine_proxy(prototype, torch.tensor([3.0, 4.0, 0.0]), 0.6), torch.tensor([0.6, 0.8, 0.0])
    )
    generator = torch.Generator().manual_seed(0)
    unit = torch.nn.functional.normalize(torch.randn(64, generator=generator), dim=0)
    for cosine in (0.1, 0.5):
        proxy = cosine_proxy(unit, torch.randn(64, generator=generator), cosine)
        assert float(proxy.norm()) == pytest.approx(1.0, abs=1e-6)
        assert float(proxy @ unit) == pytest.approx(cosine, abs=1e-6)


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
    built = flat(method="fedcs", dataset="x", cosine=0.2, weight=3.0).algorithm()
    assert built == FedCS(weight=3.0, cosine=0.2)
    assert flat(method="fedaws", dataset="x", spread_lr=7.0).algorithm().spread_lr == 7.0
    assert flat(method="softmax", dataset="x", scale=8.0).algorithm() == Softmax(scale=8.0)
    assert set(FedGN().parameters()) == {"weight", "sigma"}
    fedface = flat(method="fedface", dataset="x", margin_loss="cosface", pfm=False)
    assert fedface.algorithm().margin_loss == "cosface" and not fedface.algorithm().pfm


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
