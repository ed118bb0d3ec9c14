"""Federated algorithms: one FedAvg core, each method a small delta over it."""

from __future__ import annotations

from .base import FedAvg
from .fedaws import FedAwS
from .fedface import FedFace
from .fedhide import FedCS, FedGN, FedHide
from .feduv import FedUV
from .softmax import Softmax

METHODS: dict[str, type[FedAvg]] = {
    "feduv": FedUV,
    "fedhide": FedHide,
    "fedgn": FedGN,
    "fedcs": FedCS,
    "fedaws": FedAwS,
    "softmax": Softmax,
    "fedface": FedFace,
}

__all__ = [
    "METHODS",
    "FedAvg",
    "FedAwS",
    "FedCS",
    "FedFace",
    "FedGN",
    "FedHide",
    "FedUV",
    "Softmax",
]
