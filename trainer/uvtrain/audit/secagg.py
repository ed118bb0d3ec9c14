"""Secure aggregation as Flower's SecAgg+ computes it (``SecAggPlusWorkflow`` and
``secaggplus_mod`` of flwr 1.x; flwr is not needed here), and :class:`SecAggPlus`, the
:class:`~uvtrain.rounds.Aggregator` that puts it into a round.

Client k multiplies what it sends — its update ``θ_k − θ``, as ``uvtrain deploy`` does, or its
parameters — by its weight ``r_k = round(n_k / max_weight · Q) / Q``, clips it to
``±clipping_range``, maps it to ``[0, Q]`` and rounds it stochastically to integers
(``Q = 2**22``); the server unmasks only the sum, dequantises it and divides by ``Σ r_k``
(:func:`secure_aggregate`, :func:`secure_update`). Under differential privacy SecAgg+ is the
transport under the one mechanism (:class:`uvtrain.privacy.UserLevelDP`): the members send
their clipped (and, distributed, noised) updates with equal weights, and the mechanism's server
half finishes the sum the server unmasks (:meth:`SecAggPlus.sum`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..algorithms.base import Tensors
from ..errors import ConfigError, TrainingError
from ..rounds import Aggregator, ClientUpdates, RoundPlan
from .settings import SecAggModel


class SecAggError(ConfigError, ValueError):
    """SecAgg+ cannot aggregate these inputs (a cohort that overflows the modulus, a weight that
    rounds to zero): the user's cohort sizes or ``--max-weight`` (a :class:`ConfigError`), and
    an invalid argument of the arithmetic (a :class:`ValueError`)."""


def stochastic_round(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Unbiased rounding as flwr's ``_stochastic_round``: ``⌈x⌉``, minus one with probability
    ``⌈x⌉ − x`` (integers stay as they are)."""
    values = np.asarray(values, dtype=np.float64)
    ceiling = np.ceil(values)
    down = rng.random(values.shape) < (ceiling - values)
    return (ceiling - down).astype(np.int64)


def quantize(
    values: np.ndarray, clipping_range: float, quantization_range: int, rng: np.random.Generator
) -> np.ndarray:
    """flwr's ``quantize``: clip to ``±c``, map ``[−c, c]`` onto ``[0, Q]``, round stochastically."""
    scale = quantization_range / (2.0 * clipping_range)
    clipped = np.clip(np.asarray(values, dtype=np.float64), -clipping_range, clipping_range)
    return stochastic_round((clipped + clipping_range) * scale, rng)


def dequantize(
    total: np.ndarray, clipping_range: float, quantization_range: int, count: int = 1
) -> np.ndarray:
    """Back from the sum of ``count`` quantised vectors: ``q · 2c / Q − count · c`` (flwr's
    ``dequantize`` and the workflow's offset ``−(count − 1) c``)."""
    step = 2.0 * clipping_range / quantization_range
    return np.asarray(total, dtype=np.float64) * step - count * clipping_range


def secure_aggregate(
    parameters: np.ndarray,
    sizes: Sequence[float] | np.ndarray,
    model: SecAggModel,
    rng: np.random.Generator,
) -> np.ndarray:
    """What the server unmasks with SecAgg+: the cohort's weighted mean, as Flower computes it.

    Parameters
    ----------
    parameters
        ``[m, P]`` each member's parameters, flattened.
    sizes
        ``[m]`` each member's number of training samples (its FedAvg weight).
    model
        The SecAgg+ constants.
    rng
        The members' stochastic rounding.

    Returns
    -------
    numpy.ndarray
        ``[P]`` float64 ``Σ_k deq(quant(r_k θ_k)) / Σ_k r_k``, ``r_k = round(n_k / max_weight · Q) / Q``.

    Raises
    ------
    SecAggError
        A cohort that would overflow the modulus, or a weight that rounds to zero.
    """  # noqa: E501
    parameters = np.atleast_2d(np.asarray(parameters))
    count = parameters.shape[0]
    if count * model.quantization_range >= model.modulus_range:
        raise SecAggError(f"a cohort of {count} would overflow SecAgg+'s modulus")
    sizes = np.asarray(sizes, np.float64)
    max_weight = model.max_weight or float(sizes.max()) * 1.01
    scaled = np.round(sizes / max_weight * model.quantization_range)
    if scaled.shape != (count,) or np.any(scaled < 1):
        raise SecAggError("one weight per member, none rounding to 0 (n_k / max_weight · Q >= 1)")
    ratios = scaled / model.quantization_range
    total = np.zeros(parameters.shape[1], dtype=np.int64)
    for ratio, values in zip(ratios, parameters, strict=True):
        total += quantize(ratio * values.astype(np.float64), *_ranges(model), rng)
    # the pairwise masks cancel modulo modulus_range, which the sum stays below (checked above)
    return dequantize(total, *_ranges(model), count=count) / ratios.sum()


def secure_update(
    parameters: np.ndarray,
    base: np.ndarray,
    sizes: Sequence[float] | np.ndarray,
    model: SecAggModel,
    rng: np.random.Generator,
) -> np.ndarray:
    """The cohort's mean update ``Σ r_k θ_k / Σ r_k − θ`` as the server obtains it with SecAgg+,
    from the members' parameters ``[m, P]`` and the global ``θ`` (``base``): the members send
    their updates (``model.inputs == "updates"``) or their parameters."""
    base = np.asarray(base, np.float64)
    if model.inputs == "updates":
        return secure_aggregate(np.asarray(parameters, np.float64) - base, sizes, model, rng)
    return secure_aggregate(parameters, sizes, model, rng) - base


def _ranges(model: SecAggModel) -> tuple[float, int]:
    return model.clipping_range, model.quantization_range


@dataclass(frozen=True)
class Layout:
    """Where each named parameter lies in a flat vector."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, params: Tensors, names: Iterable[str] | None = None) -> Layout:
        chosen = tuple(params if names is None else names)
        return cls(chosen, tuple(tuple(params[name].shape) for name in chosen))

    @property
    def sizes(self) -> list[int]:
        return [math.prod(shape) for shape in self.shapes]

    def flatten(self, params: Tensors, stacked: bool = False) -> np.ndarray:
        """``[P]`` (or ``[m, P]`` for stacked parameters) float32."""
        pieces = [
            params[name].detach().cpu().reshape(params[name].shape[0], -1)
            if stacked
            else params[name].detach().cpu().reshape(-1)
            for name in self.names
        ]
        return torch.cat(pieces, dim=-1).numpy().astype(np.float32, copy=False)

    def unflatten(self, flat: np.ndarray, like: Tensors) -> Tensors:
        """Tensors of ``like``'s dtypes and device from a ``[P]`` vector."""
        out, start = {}, 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes, strict=True):
            piece = torch.as_tensor(np.asarray(flat[start : start + size]).reshape(shape))
            out[name] = piece.to(dtype=like[name].dtype, device=like[name].device)
            start += size
        return out


def float64(params: Tensors) -> Tensors:
    """The parameters as float64 CPU tensors (how the audit reads an unmasked update)."""
    return {k: v.detach().to("cpu", torch.float64) for k, v in params.items()}


@dataclass
class SecAggPlus(Aggregator):
    """The server's side of a round under SecAgg+: the new global parameters are ``θ`` plus the
    quantised sample-weighted mean update the server unmasks (:func:`secure_update`, the
    members' stochastic rounding drawn from ``rng``).

    Under differential privacy it is the transport under the mechanism, not a mechanism:
    :meth:`sum` gives the quantised sum of the members' clipped (and, distributed, noised)
    updates with equal weights (a sample-count weight would let one user's influence exceed the
    clip norm), and :class:`uvtrain.privacy.PrivateSum` finishes it with the mechanism's server
    half (the central noise, the division by ``qN``, the clip norm's update).

    It never fuses with local training: it needs every member's own update to quantise."""

    model: SecAggModel
    rng: np.random.Generator

    def __call__(
        self, updates: ClientUpdates, base: Tensors, plan: RoundPlan
    ) -> tuple[Tensors, dict[str, Any]]:
        layout = Layout.of(base)
        before = layout.flatten(base).astype(np.float64)
        sizes = updates.weights.cpu().numpy()
        if updates.params is not None:
            stacked = layout.flatten(updates.params, stacked=True)
            mean = secure_update(stacked, before, sizes, self.model, self.rng)
        elif updates.deltas is not None:
            deltas = layout.flatten(updates.deltas, stacked=True).astype(np.float64)
            mean = secure_update(deltas + before, before, sizes, self.model, self.rng)
        else:
            raise TrainingError("SecAgg+ needs each client's own update, not an aggregate")
        return layout.unflatten(before + mean, base), {}

    def sum(
        self, updates: ClientUpdates, base: Tensors, plan: RoundPlan
    ) -> tuple[Tensors, dict[str, Any]]:
        """``Σ_k δ̂_k`` (float64, by parameter name) as the server unmasks it: the members'
        equal-weighted quantised mean times their count."""
        if updates.deltas is None:
            raise TrainingError("the secure sum needs each client's postprocessed update")
        layout = Layout.of(base)
        count = len(updates.clients)
        if count == 0:
            return {name: torch.zeros_like(value, dtype=torch.float64) for name, value in
                    base.items()}, {}  # fmt: skip
        before = layout.flatten(base).astype(np.float64)
        deltas = layout.flatten(updates.deltas, stacked=True).astype(np.float64)
        mean = secure_update(deltas + before, before, np.ones(count), self.model, self.rng)
        return layout.unflatten(mean * count, float64(base)), {}
