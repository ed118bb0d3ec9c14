"""Accounting: parameter counts and the FLOPs of one forward pass."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameter elements of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def model_flops(model: nn.Module, example: Tensor) -> int:
    """Floating-point operations of one forward pass on ``example`` (torch's FLOP counter:
    convolutions and matrix products, 2 per multiply-add; elementwise operations are not counted).
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(example)
    return int(counter.get_total_flops())
