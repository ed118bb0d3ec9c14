"""FedUV's maths (uvtrain.algorithms.feduv) against values computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from uvtrain.algorithms.feduv import (  # noqa: E402
    client_codewords,
    client_user_ids,
    positive_loss,
)


def test_feduv_positive_loss_by_hand() -> None:
    v = torch.tensor([1.0, -1.0, 1.0, -1.0])
    outputs = torch.tensor([[2.0, -2.0, 2.0, -2.0], [2.0, 2.0, 2.0, 2.0], [-2.0, 2.0, 0.0, 0.0]])
    # scores v.o / 4 = 2, 0, -1  ->  hinge 0, 1, 2  ->  mean 1
    assert float(positive_loss(outputs, v)) == pytest.approx(1.0)


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
