"""DP-FTRL's tree-aggregated noise as a mechanism behind the same protocol (:class:`DPFTRL`):
the user-level Gaussian mechanism (:class:`~uvtrain.privacy.gaussian.UserLevelDP`) whose noise on
a round's sum is the residual of a binary tree over the rounds of a period (:class:`TreeNoise`)
instead of fresh draws; it can only be placed centrally (:func:`~uvtrain.privacy.plan.check_tree`).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..algorithms.base import Tensors
from .gaussian import UserLevelDP
from .noise import TREE_NOISE, NoiseSource, secret_noise, seeded_noise
from .plan import PrivacyPlan


def prefix_nodes(position: int) -> set[tuple[int, int]]:
    """The nodes ``(level, index)`` of a binary tree whose sums add up to the sum of leaves
    ``1..position``: one per set bit ``l`` of ``position``, the node ``(l, ⌊position/2^l⌋ − 1)``
    covering leaves ``index·2^l + 1 … (index + 1)·2^l`` (the binary counter of Dwork et al. 2010
    and Chan et al. 2011; Kairouz et al. 2021, Algorithm 2)."""
    return {
        (level, (position >> level) - 1)
        for level in range(position.bit_length())
        if position >> level & 1
    }


@dataclass
class TreeNoise:
    """DP-FTRL's noise (Kairouz, McMahan, Song, Thakkar, Thakurta and Xu, "Practical and
    Private (Deep) Learning without Sampling or Shuffling", ICML 2021, Sec. 3 and Appendix D),
    in the residual form that composes with any server optimiser (TFF's
    ``TreeResidualSumQuery``): every node of a binary tree over a period's rounds carries its own
    ``N(0, σ²)``, the noisy sum of rounds ``1..p`` of the period is the sum of its
    :func:`prefix_nodes` with theirs, and round ``p`` releases the difference of two such
    prefix sums — its own sum plus :meth:`residual` — so that the model after round ``p`` holds
    the prefix sum's noise, at most :func:`tree_depth` nodes' worth, where independent noise
    would hold ``p`` rounds'. The tree restarts at every period (Appendix D's restarts).

    A node's noise is drawn again, identically, when it leaves a prefix, from ``source`` at
    ``(tree + 1, TREE_NOISE, node)``: the simulator's seeded noise, or on a real server a key
    from its secret randomness (``key``), which its checkpoint keeps (the server that adds
    the noise can subtract it: central placement trusts it)."""

    period: int
    source: NoiseSource
    key: int | None = None

    @classmethod
    def for_source(cls, period: int, source: NoiseSource) -> TreeNoise:
        """The tree over ``source``; a real server's :func:`secret_noise` (fresh at every draw,
        so no node could be drawn twice) becomes a secret key of its own."""
        if source is secret_noise:
            key = secrets.randbits(63)
            return cls(period, seeded_noise(key), key)
        return cls(period, source)

    def residual(self, like: Tensors, std: float, round_number: int) -> Tensors:
        """The noise round ``round_number`` adds to its sum (shaped as ``like``): the nodes that
        enter the prefix minus those that leave it, each ``N(0, std²)`` (float32 draws)."""
        tree, position = divmod(round_number - 1, self.period)
        now, before = prefix_nodes(position + 1), prefix_nodes(position)
        noise = {
            name: torch.zeros(value.shape, dtype=torch.float32) for name, value in like.items()
        }
        for sign, nodes in ((1.0, now - before), (-1.0, before - now)):
            for level, index in sorted(nodes):
                generator = self.source(tree + 1, TREE_NOISE, index << 6 | level)
                for name, value in like.items():
                    draw = torch.randn(value.shape, generator=generator, dtype=torch.float32)
                    noise[name] += sign * std * draw
        return noise

    def state_dict(self) -> dict[str, int]:
        return {} if self.key is None else {"tree_key": self.key}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.key is not None and "tree_key" in state:
            self.key = int(state["tree_key"])
            self.source = seeded_noise(self.key)


@dataclass
class DPFTRL(UserLevelDP):
    """DP-FTRL (Kairouz et al., ICML 2021): :class:`UserLevelDP` with the noise of ``tree``
    (:meth:`TreeNoise.residual`) on every round's sum; the tree's secret key, if any, is in its
    state. Central placement only: a round's noise subtracts nodes that earlier cohorts drew."""

    tree: TreeNoise | None = None

    distributable: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.tree is None:
            raise ValueError("DPFTRL needs its tree (DPFTRL.from_plan makes it)")

    @classmethod
    def from_plan(cls, plan: PrivacyPlan, noise: NoiseSource = secret_noise) -> DPFTRL:
        """:meth:`UserLevelDP.from_plan` with the tree over the plan's period."""
        assert plan.period is not None
        plain = UserLevelDP.from_plan(plan, noise)
        tree = TreeNoise.for_source(plan.period, noise)
        return cls(
            plain.clip_norm,
            plain.update_noise,
            plain.denominator,
            plain.adaptive,
            noise,
            plan,
            tree,
        )

    def sum_noise(self, like: Tensors, round_number: int) -> Tensors | None:
        """The tree's residual for round ``round_number``, each node ``N(0, (z_Δ·C)²)``."""
        assert self.tree is not None
        return self.tree.residual(like, self.update_noise * self.clip_norm, round_number)

    def state_dict(self) -> dict[str, Any]:
        assert self.tree is not None
        return {**super().state_dict(), **self.tree.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        assert self.tree is not None
        self.tree.load_state_dict(state)
