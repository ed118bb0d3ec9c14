"""FedUV's maths (uvtrain.algorithms.feduv) against values computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from uvtrain.algorithms.feduv import (  # noqa: E402
    client_codewords,
    client_user_ids,
    negative_loss,
    negative_loss_max,
    negative_loss_mean_relu,
    positive_loss,
)


def test_feduv_positive_loss_by_hand() -> None:
    v = torch.tensor([1.0, -1.0, 1.0, -1.0])
    outputs = torch.tensor([[2.0, -2.0, 2.0, -2.0], [2.0, 2.0, 2.0, 2.0], [-2.0, 2.0, 0.0, 0.0]])
    # scores v.o / 4 = 2, 0, -1  ->  hinge 0, 1, 2  ->  mean 1
    assert float(positive_loss(outputs, v)) == pytest.approx(1.0)


# three users' codewords (c = 4) and two outputs, of users 0 and 2
CODEWORDS = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, -1.0, 1.0, -1.0], [1.0, 1.0, -1.0, -1.0]])
OUTPUTS = torch.tensor([[2.0, 2.0, 0.0, 0.0], [0.0, 2.0, -2.0, 0.0]])
OWN = torch.tensor([0, 2])


def test_feduv_negative_loss_max_is_eq_4_by_hand() -> None:
    """ℓ_neg = max_{u ≠ y} v_uᵀ o / c (FedUV eq. 4), averaged over the batch."""
    # row 0 (user 0): v_1·o = 2 − 2 = 0 -> 0, v_2·o = 2 + 2 = 4 -> 1;   max = 1
    # row 1 (user 2): v_0·o = 2 − 2 = 0 -> 0, v_1·o = −2 − 2 = −4 -> −1; max = 0
    assert float(negative_loss_max(OUTPUTS, CODEWORDS, OWN)) == pytest.approx(0.5)
    # the own user never counts, even when it scores highest (row 1 as user 2 scores v_2·o/c = 1)
    assert float(negative_loss_max(OUTPUTS[1:], CODEWORDS, torch.tensor([2]))) == pytest.approx(0)
    # a maximum that is negative stays negative (no hinge): v_1·o = 0, v_2·o = −4
    only_negative = torch.tensor([[-2.0, 0.0, 2.0, 0.0]])
    assert float(negative_loss_max(only_negative, CODEWORDS, torch.tensor([0]))) == 0.0
    assert float(negative_loss_max(only_negative, CODEWORDS[[0, 2]], torch.tensor([0]))) == -1.0
    assert negative_loss(OUTPUTS, CODEWORDS, OWN) == negative_loss_max(OUTPUTS, CODEWORDS, OWN)


def test_feduv_negative_loss_mean_relu_by_hand() -> None:
    """Ours: mean over the other users of max(0, v_uᵀ o / c)."""
    # row 0: relu(0), relu(1) -> mean 0.5; row 1: relu(0), relu(−1) -> 0; batch mean 0.25
    assert float(negative_loss_mean_relu(OUTPUTS, CODEWORDS, OWN)) == pytest.approx(0.25)
    ours = negative_loss(OUTPUTS, CODEWORDS, OWN, "mean-relu")
    assert float(ours) == pytest.approx(0.25)
    from uvtrain.errors import ConfigError

    with pytest.raises(ConfigError, match="max, mean-relu"):
        negative_loss(OUTPUTS, CODEWORDS, OWN, "min")


def test_feduv_trains_with_the_papers_negative_loss() -> None:
    """A tiny run with λ = 1 and the paper's ℓ_neg: every step finite, the loss goes down, and
    the gradient differs from the positive-only one (the term is in the loss)."""
    from tests.trainer.algorithms.test_methods import Bands, _voices
    from uvtrain.algorithms import FedUV
    from uvtrain.engine import EngineConfig, Simulation

    data = [d[:6] for d in _voices(clients=6)]
    config = EngineConfig(rounds=20, fraction=1.0, batch_size=6, lr=0.5, lr_decay=0.0, seed=0)
    losses = {}
    for form in ("max", "mean-relu"):
        torch.manual_seed(0)
        method = FedUV(code_length=127, negative_weight=1.0, negative_loss=form)
        simulation = Simulation(method, Bands(), data, config)
        assert torch.equal(simulation.shared["all_codewords"], simulation.constants["codeword"])
        history = [float(simulation.step()["loss"]) for _ in range(config.rounds)]
        assert all(np.isfinite(history)) and history[-1] < history[0], history
        losses[form] = history
    assert losses["max"] != losses["mean-relu"]


def test_feduv_codewords_are_the_sdk_encoding_of_id_bits() -> None:
    from uvsdk.codeword import user_id_bits
    from uvtrain.codes import bch_code

    code = bch_code(127)
    words = client_codewords(5, 127, seed=0)
    ids = client_user_ids(5, seed=0)
    assert words.shape == (5, 127) and len(set(ids.tolist())) == 5
    # systematic code: the first k bits of the codeword are the message, which starts with the id
    for user_id, word in zip(ids.tolist(), words, strict=True):
        np.testing.assert_array_equal(word[:32], user_id_bits(int(user_id), 32))
    # random ids share no bits: no codeword position is the same for every one of 200 users
    many = client_codewords(200, 127, seed=1)
    assert not np.any(np.all(many == many[0], axis=0))
    distances = [int(np.sum(a != b)) for i, a in enumerate(words) for b in words[i + 1 :]]
    assert min(distances) >= code.d_min
