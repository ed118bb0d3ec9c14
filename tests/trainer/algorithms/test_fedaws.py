"""FedAwS's maths (uvtrain.algorithms.fedaws) against values computed by hand: the positive loss
and the server's spreadout step."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from uvtrain.algorithms import FedAwS  # noqa: E402
from uvtrain.algorithms.fedaws import (  # noqa: E402
    positive_hinge_loss,
    spreadout,
    spreadout_step,
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
