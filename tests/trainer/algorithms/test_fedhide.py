"""FedHide's maths (uvtrain.algorithms.fedhide) against values computed by hand: its loss and
proxy, and the proxy generators of FedGN (Gaussian) and FedCS (fixed cosine) beside it."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from uvtrain.algorithms.fedhide import (  # noqa: E402
    contrastive_loss,
    cosine_proxy,
    gaussian_proxy,
    proxy_prototype,
)


def test_fedhide_loss_and_proxy_by_hand() -> None:
    features = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    prototype = torch.tensor([1.0, 0.0])
    proxies = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    # positive: ((1-1)^2 + (1-0)^2)/2 = 0.5; negative over rows 1, 2: (1+0)^2 + (1-1)^2 = 1 -> /2
    loss = contrastive_loss(features, prototype, proxies, torch.tensor(0), weight=10.0)
    assert float(loss) == pytest.approx(0.5 + 10.0 * 0.5)
    # K = 1 nearest of rows 1, 2 to (1, 0): row 1 (cos 0) beats row 2 (cos -1)
    proxy = proxy_prototype(prototype, proxies, torch.tensor(0), alpha=0.5, k=1)
    torch.testing.assert_close(proxy, torch.tensor([1.0, 1.0]) / math.sqrt(2))


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


def test_the_fedhide_methods_ask_for_the_papers_backbone() -> None:
    """Sec. 4.1: 512-dimensional embeddings; speaker features from a Hamming window. The window
    goes only to a backbone with a log-mel frontend; other methods keep the backbone's own."""
    from uvtrain.algorithms import METHODS
    from uvtrain.config import ConfigError
    from uvtrain.models import BACKBONES

    for name in ("fedhide", "fedgn", "fedcs"):
        method = METHODS[name]()
        assert method.backbone_options(BACKBONES["logmel-tdnn"]) == {
            "embedding_dim": 512,
            "window": "hamming",
        }
        assert method.backbone_options(BACKBONES["resnet18-small"]) == {"embedding_dim": 512}
    hann = METHODS["fedhide"](window="hann", embedding_dim=128)
    assert hann.backbone_options(BACKBONES["fast-resnet34"]) == {
        "embedding_dim": 128,
        "window": "hann",
    }
    for name in ("feduv", "fedaws", "softmax"):
        assert METHODS[name]().backbone_options(BACKBONES["logmel-tdnn"]) == {}
    with pytest.raises(ConfigError, match="window"):
        METHODS["fedhide"](window="blackman")
    with pytest.raises(ConfigError, match="embedding_dim"):
        METHODS["fedhide"](embedding_dim=0)


def test_a_fedhide_run_builds_the_papers_backbone() -> None:
    """The run's backbone (simulator, export and Flower build it alike) gets the options; a run
    from pretrained weights keeps the weights' architecture."""
    from uvtrain.config import RunConfig
    from uvtrain.run import build_run_backbone

    spec = {"sample_rate": 16000, "window_seconds": 2.0, "hop_seconds": 1.0, "min_seconds": 0.5}
    fedhide = RunConfig.from_flat({"method": "fedhide", "dataset": "x"})
    backbone = build_run_backbone(fedhide, "audio", spec)
    assert backbone.embedding_dim == 512 and backbone.frontend.window == "hamming"
    feduv = RunConfig.from_flat({"method": "feduv", "dataset": "x"})
    backbone = build_run_backbone(feduv, "audio", spec)
    assert backbone.embedding_dim == 256 and backbone.frontend.window == "hann"
