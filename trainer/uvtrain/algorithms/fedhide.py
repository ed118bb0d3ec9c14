"""FedHide (Park & Yun, "FedHide: Federated Learning by Hiding in the Neighbors", 2024) as a
delta over FedAvg. Equation, algorithm, section and table numbers are the paper's.

Each client learns its own prototype ``w_c`` (unit norm) with the contrastive loss (eqs. 1–3)

    L = (1 − w_cᵀ f(x))² + λ/(C−1) Σ_{c'≠c} (1 + w_cᵀ w̄_c')²

against the *proxy* prototypes ``w̄_c'`` of the other clients, read from a bank the server holds.
A client never shares ``w_c``: it shares its proxy, ``w_c`` hidden among its K nearest neighbours
(eq. 4)

    w̄_c = normalize(α w_c + (1 − α) normalize(Σ_{top-K nearest proxies} w̄_c'))

The paper's baselines keep the loss and the bank and change only the proxy: FedGN sends
``normalize(w_c + n)``, ``n ~ N(0, σ² I)`` (eq. 5), FedCS a random unit vector at cosine ``cos θ``
to ``w_c`` (eq. 6). Algorithm 1 is the round; the privacy figure is the prototype leakage
``P_leak`` (eq. 17).

All the paper's models "generate L2-normalized 512-dimensional embedding vectors", and its speaker
features are 40 log-mel bands from "a Hamming window of 25ms length and 10ms hop size"
(Sec. 4.1): FedHide, FedGN and FedCS ask their backbone for both (``embedding_dim`` 512,
``window`` hamming, :meth:`ProxyBank.backbone_options`); ``window="hann"`` is our frontend's
default, kept as an option.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor
from torch.nn import functional

from ..methods import (
    FedCSParameters,
    FedGNParameters,
    FedHideParameters,
    ProxyBankParameters,
)
from .base import FedAvg, Tensors, random_unit_rows


def contrastive_loss(
    features: Tensor, prototype: Tensor, proxies: Tensor, own: Tensor, weight: float
) -> Tensor:
    """FedHide's loss for one client (eqs. 1–3; the positive term averaged over the batch):
    features [B, d] (unit norm), its prototype [d] (unit norm), the proxy bank [C, d] and the
    client's own row index, which is left out of the sum."""
    positive = (1.0 - features @ prototype).pow(2).mean()
    others = 1.0 - (torch.arange(proxies.shape[0], device=own.device) == own).to(proxies.dtype)
    negative = ((1.0 + proxies @ prototype).pow(2) * others).sum() / max(1, proxies.shape[0] - 1)
    return positive + weight * negative


def proxy_prototype(
    prototype: Tensor, proxies: Tensor, own: Tensor, alpha: float, k: int
) -> Tensor:
    """Eq. (4): ``normalize(α w + (1 − α) normalize(Σ of the K proxies nearest to w))``, own row
    excluded."""
    similarity = proxies @ prototype
    is_own = torch.arange(proxies.shape[0], device=own.device) == own
    similarity = similarity - 4.0 * is_own.to(similarity.dtype)  # never its own row
    nearest = torch.topk(similarity, k=min(k, proxies.shape[0] - 1)).indices
    neighbours = functional.normalize(proxies[nearest].sum(0), dim=0)
    return functional.normalize(alpha * prototype + (1.0 - alpha) * neighbours, dim=0)


@dataclass(frozen=True)
class ProxyBank(ProxyBankParameters, FedAvg):
    """What FedHide, FedGN and FedCS share: private unit prototypes trained with
    :func:`contrastive_loss` against a server-held bank of the clients' proxies. They differ only in
    how a client makes its proxy from its unit prototype (:meth:`proxy`)."""

    def init_private(self, num_clients: int, dim: int, generator: torch.Generator) -> Tensors:
        # Unit norm from the start: the loss sees normalize(p), whose gradient is scaled by
        # 1/‖p‖, so a randn(256) start (‖p‖ ≈ 16) learnt 16× slower and the prototypes barely
        # left their random directions (train EER 0.50 while the embedding reached 0.11 on
        # unseen speakers).
        return {"prototype": random_unit_rows(num_clients, dim, generator)}

    def init_shared(
        self, num_clients: int, dim: int, generator: torch.Generator, constants: Tensors
    ) -> Tensors:
        return {"proxies": random_unit_rows(num_clients, dim, generator)}

    def loss(
        self, outputs: Tensor, private: Tensors, constants: Tensors, shared: Tensors
    ) -> Tensor:
        prototype = functional.normalize(private["prototype"], dim=0)
        return contrastive_loss(
            outputs, prototype, shared["proxies"], constants["index"], self.weight
        )

    def server_view_of_private(self, private: Tensors, shared: Tensors, index: int) -> Tensors:
        # the server never sees the prototype: its best stand-in is the client's proxy
        return {"prototype": shared["proxies"][index]}

    def proxy(self, prototype: Tensor, constants: Tensors, shared: Tensors) -> Tensor:
        """The vector a client shares in place of its unit prototype."""
        raise NotImplementedError(f"{type(self).__name__} defines no proxy")

    def client_message(self, private: Tensors, constants: Tensors, shared: Tensors) -> Tensors:
        prototype = functional.normalize(private["prototype"], dim=0)
        return {"proxy": self.proxy(prototype, constants, shared)}

    def server_update(
        self,
        shared: Tensors,
        messages: Tensors,
        clients: Tensor,
        lr: float,
        *,
        before: Tensors | None = None,
        after: Tensors | None = None,
    ) -> Tensors:
        proxies = shared["proxies"].clone()
        proxies[clients] = messages["proxy"]
        return {**shared, "proxies": proxies}

    def prototypes(
        self, params: Tensors, private: Tensors, shared: Tensors
    ) -> tuple[Tensor, Tensor]:
        return functional.normalize(private["prototype"], dim=1), shared["proxies"]


@dataclass(frozen=True)
class FedHide(FedHideParameters, ProxyBank):
    """FedHide: private prototypes, proxy prototypes hidden among K neighbours (eq. 4,
    Algorithm 1)."""

    def proxy(self, prototype: Tensor, constants: Tensors, shared: Tensors) -> Tensor:
        return proxy_prototype(
            prototype, shared["proxies"], constants["index"], self.alpha, self.neighbours
        )


def gaussian_proxy(prototype: Tensor, noise: Tensor, sigma: float) -> Tensor:
    """FedGN's proxy (eq. 5): ``normalize(w + σ n)`` with ``n ~ N(0, I)``."""
    return functional.normalize(prototype + sigma * noise, dim=-1)


def cosine_proxy(prototype: Tensor, noise: Tensor, cosine: float) -> Tensor:
    """FedCS's proxy (eq. 6): a random unit vector at cosine ``cos θ`` to the unit prototype ``w``,
    ``cos θ · w + sin θ · u`` with ``u`` the unit part of ``n ~ N(0, I)`` orthogonal to ``w``
    (so uniform over the directions orthogonal to ``w``)."""
    orthogonal = noise - (noise @ prototype) * prototype
    direction = functional.normalize(orthogonal, dim=-1)
    return cosine * prototype + math.sqrt(max(0.0, 1.0 - cosine**2)) * direction


@dataclass(frozen=True)
class FedGN(FedGNParameters, ProxyBank):
    """FedHide's loss and bank, with Gaussian-noise proxies ``normalize(w + σ n)`` (the FedHide
    paper's FedGN baseline)."""

    message_noise: ClassVar[bool] = True

    def proxy(self, prototype: Tensor, constants: Tensors, shared: Tensors) -> Tensor:
        return gaussian_proxy(prototype, constants["noise"], self.sigma)

    def release_noise(self) -> tuple[float, float]:
        """The proxy as a Gaussian mechanism: ``(σ, Δ)``, noise std and the L2 sensitivity of a
        unit prototype (2), for :func:`uvtrain.accounting.release_epsilon`."""
        return self.sigma, 2.0


@dataclass(frozen=True)
class FedCS(FedCSParameters, ProxyBank):
    """FedHide's loss and bank, with proxies drawn at a fixed cosine to the prototype (the FedHide
    paper's FedCS baseline)."""

    message_noise: ClassVar[bool] = True

    def proxy(self, prototype: Tensor, constants: Tensors, shared: Tensors) -> Tensor:
        return cosine_proxy(prototype, constants["noise"], self.cosine)
