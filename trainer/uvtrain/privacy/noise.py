"""The mechanism's arithmetic and randomness: clipping (:func:`clip_updates`), Gaussian draws
(:func:`add_noise`, :func:`scalar_noise`) and where each draw comes from (:data:`NoiseSource`:
:func:`seeded_noise` in the simulator, so that a resumed run is bit-exact; :func:`secret_noise` on
a real device or server)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from functools import partial

import numpy as np
import torch
from torch import Tensor

from ..algorithms.base import Tensors


def _generator(seed: int, round_number: int, stream: int, client: int) -> torch.Generator:
    """A torch generator for one client's (or the server's) noise of one round."""
    entropy = np.random.SeedSequence([seed, round_number, stream, client]).generate_state(2)
    return torch.Generator().manual_seed(int(entropy[0]) << 32 | int(entropy[1]))


def secret_generator() -> torch.Generator:
    """A torch generator seeded from the operating system's secret randomness (``secrets``),
    fresh at each call: the noise of a real device or server, whose seed must never be known
    (noise drawn from the run's public seed could be subtracted)."""
    return torch.Generator().manual_seed(secrets.randbits(63))


def update_norms(deltas: Tensors) -> Tensor:
    """``[m]`` each client's L2 norm over all its parameters' updates."""
    squares = [
        value.flatten(1).double().pow(2).sum(1) if value.dim() > 1 else value.double().pow(2)
        for value in deltas.values()
    ]
    return torch.stack(squares).sum(0).sqrt()


def clip_updates(deltas: Tensors, clip_norm: float) -> tuple[Tensors, Tensor]:
    """Each client's update (``[m, ...]``) clipped to L2 norm ``clip_norm`` over all its
    parameters, ``δ̂_k = δ_k · min(1, C / ‖δ_k‖)``, and the norms ``‖δ_k‖`` before clipping: the
    the mechanism's (:meth:`UserLevelDP.user_half`) and a server's re-clipping (``uvdeploy``)."""
    norms = update_norms(deltas)
    scale = torch.clamp(clip_norm / norms.clamp_min(1e-12), max=1.0)
    clipped = {
        name: value * scale.to(value.dtype).reshape(-1, *[1] * (value.dim() - 1))
        for name, value in deltas.items()
    }
    return clipped, norms


def add_noise(values: Tensors, std: float, generator: torch.Generator) -> Tensors:
    """``values`` plus ``N(0, std²)`` in every entry, drawn from ``generator`` in the order of
    ``values`` (float32 draws): a client's noise share, or the server's noise on a sum."""
    noisy = {}
    for name, value in values.items():
        noise = torch.randn(value.shape, generator=generator, dtype=torch.float32)
        noisy[name] = value + std * noise.to(value.device, value.dtype)
    return noisy


def scalar_noise(std: float, generator: torch.Generator) -> float:
    """One draw of ``N(0, std²)`` (float64): the noise, or a client's share of it, on the count
    of unclipped clients."""
    return std * float(torch.randn((), generator=generator, dtype=torch.float64))


#: The noise's streams: what ``(seed, round, stream, client)`` draws in the simulator
#: (:data:`TREE_NOISE`: ``(seed, tree + 1, stream, node)``).
CLIENT_UPDATE_NOISE, SERVER_UPDATE_NOISE, CLIENT_COUNT_NOISE, SERVER_COUNT_NOISE = 1, 2, 3, 4
TREE_NOISE = 5

NoiseSource = Callable[[int, int, int], torch.Generator]
"""Where a draw of the mechanism comes from: ``(round, stream, client)`` → a generator."""


def seeded_noise(seed: int) -> NoiseSource:
    """The simulator's noise: a generator from ``(seed, round, stream, client)``, so that a
    resumed run is bit-exact (and the audit can reproduce a round)."""
    return partial(_generator, seed)


def secret_noise(round_number: int, stream: int, client: int) -> torch.Generator:
    """A real device's or server's noise: a fresh secret generator at every draw
    (:func:`secret_generator`), whatever the round, stream and client."""
    return secret_generator()
