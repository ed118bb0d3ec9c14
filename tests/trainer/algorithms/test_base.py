"""The base algorithm (uvtrain.algorithms.base): FedAvg's aggregation."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from uvtrain.algorithms import FedAvg  # noqa: E402


def test_fedavg_is_the_sample_weighted_mean() -> None:
    stacked = {"w": torch.tensor([[1.0, 2.0], [3.0, 6.0]])}
    mean = FedAvg().aggregate(stacked, torch.tensor([1.0, 3.0]))
    torch.testing.assert_close(mean["w"], torch.tensor([2.5, 5.0]))
