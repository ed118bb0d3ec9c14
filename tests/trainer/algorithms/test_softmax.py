"""The softmax baseline's loss (uvtrain.algorithms.softmax) against values computed by hand."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from uvtrain.algorithms.softmax import softmax_loss  # noqa: E402


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
