"""The softmax baseline's heads and loss (uvtrain.algorithms.softmax) against values computed by
hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from uvtrain.algorithms import Softmax  # noqa: E402
from uvtrain.algorithms.softmax import SoftmaxModel, softmax_logits, softmax_loss  # noqa: E402
from uvtrain.config import RunConfig  # noqa: E402
from uvtrain.errors import ConfigError  # noqa: E402


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


def test_plain_head_is_exactly_w_z_plus_b_and_cosine_is_normalised_and_scaled() -> None:
    outputs = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    classes = torch.tensor([[2.0, 0.0], [0.0, 3.0], [1.0, 1.0]])
    bias = torch.tensor([0.5, -1.0, 0.0])
    plain = softmax_logits(outputs, classes, bias, head="plain", scale=16.0)
    # by hand: z1 = (1, 0) → (2, 0, 1) + b; z2 = (0.6, 0.8) → (1.2, 2.4, 1.4) + b
    expected = torch.tensor([[2.5, -1.0, 1.0], [1.7, 1.4, 1.4]])
    torch.testing.assert_close(plain, expected)
    assert torch.equal(plain, outputs @ classes.T + bias)  # no normalisation, no scale
    cosine = softmax_logits(outputs, classes, head="cosine", scale=2.0)
    # rows normalised: e1, e2, (1, 1)/√2; times s = 2
    root = 1 / math.sqrt(2)
    torch.testing.assert_close(
        cosine, 2.0 * torch.tensor([[1.0, 0.0, root], [0.6, 0.8, 1.4 * root]])
    )
    # the plain loss is the cross-entropy of W z + b: class 0 of z1 = −log softmax(2.5, −1, 1)_0
    by_hand = -math.log(math.exp(2.5) / (math.exp(2.5) + math.exp(-1.0) + math.exp(1.0)))
    loss = softmax_loss(outputs[:1], classes, torch.tensor(0), 16.0, bias=bias, head="plain")
    assert float(loss) == pytest.approx(by_hand)
    with pytest.raises(ConfigError, match="plain, cosine"):
        softmax_logits(outputs, classes, head="arcface")


def test_the_plain_head_is_the_default_and_has_a_bias_the_cosine_head_does_not() -> None:
    assert Softmax().softmax_head == "plain"
    backbone = torch.nn.Linear(3, 2)
    backbone.embedding_dim = 2
    plain = Softmax().build_model(backbone, 4)
    assert isinstance(plain, SoftmaxModel) and plain.bias.shape == (4,)
    assert Softmax().loss_reads_model == ("classes", "bias")
    cosine = Softmax(softmax_head="cosine").build_model(backbone, 4)
    assert "bias" not in dict(cosine.named_parameters())  # an old checkpoint still fits
    assert Softmax(softmax_head="cosine").loss_reads_model == ("classes",)
    # the method's loss uses the head it is given
    outputs = torch.tensor([[1.0, 0.0]])
    shared = {"classes": torch.tensor([[2.0, 0.0], [0.0, 3.0]]), "bias": torch.tensor([1.0, 0.0])}
    constants = {"index": torch.tensor(1)}
    plain_loss = Softmax().loss(outputs, {}, constants, shared)
    assert float(plain_loss) == pytest.approx(math.log(1 + math.exp(3.0)))  # logits (3, 0)
    cosine_loss = Softmax(softmax_head="cosine", scale=2.0).loss(outputs, {}, constants, shared)
    assert float(cosine_loss) == pytest.approx(math.log(1 + math.exp(2.0)))
    with pytest.raises(ConfigError, match="softmax_head must be one of plain, cosine"):
        Softmax(softmax_head="arcface")


def test_a_softmax_run_folder_from_before_the_plain_head_reads_cosine(tmp_path: Path) -> None:
    from uvtrain.run import read_config

    old = RunConfig.from_flat({"method": "softmax", "dataset": "x"}).to_dict()
    del old["softmax_head"]
    (tmp_path / "config.json").write_text(json.dumps(old))
    assert read_config(tmp_path).method == Softmax(softmax_head="cosine")
    # a new folder keeps what it says
    (tmp_path / "config.json").write_text(json.dumps({**old, "softmax_head": "plain"}))
    assert read_config(tmp_path).method == Softmax(softmax_head="plain")
