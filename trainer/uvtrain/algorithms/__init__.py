"""Federated algorithms: one FedAvg core, each method a small delta over it."""

from __future__ import annotations

from .base import FedAvg
from .fedhide import FedHide
from .feduv import FedUV

METHODS: dict[str, type[FedAvg]] = {"feduv": FedUV, "fedhide": FedHide}

__all__ = ["METHODS", "FedAvg", "FedHide", "FedUV"]
