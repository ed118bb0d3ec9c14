"""User-level differential privacy for the one round (:mod:`uvtrain.rounds`): clipping, Gaussian
noise (central or distributed) and the accountant.

The mechanism is DP-FedAvg (McMahan et al., ICLR 2018) with the noise placed as in Kairouz et al.
(ICML 2021) when the server must not see it:

1. each participating client's update ``δ_k = θ_k − θ`` is clipped to L2 norm ``C`` over all of
   its trainable parameters, ``δ̂_k = δ_k · min(1, C / ‖δ_k‖)`` (:class:`ClipUpdates`, a
   per-client postprocessing step);
2. the round's *sum* ``Σ_k δ̂_k`` carries Gaussian noise of standard deviation ``z·C``
   (``z`` the noise multiplier):

   - ``central``: the server adds ``N(0, z²C²)`` after summing (:class:`DPSum`); it protects
     the released model and trusts the server;
   - ``distributed``: each client adds its share ``N(0, z²C²/m)`` before secure aggregation
     (:class:`DistributedNoise`), so that the sum of the ``m`` shares has the full noise and the
     server only ever sees the noisy sum;

3. the new model is ``θ + (Σ_k δ̂_k + noise) / (qN)``: the sum divided by the *expected* cohort
   ``qN``, fixed before training, not by the realised count (McMahan et al.'s fixed-denominator
   estimator ``f̃_f``, Algorithm 1: the realised count would be one more thing to protect);
   every client weighs the same (a sample-count weight would let one user's influence exceed
   ``C``).

**Sampling.** Each round's cohort is Poisson-sampled: each of the ``N`` users takes part
independently with probability ``q`` (:func:`uvtrain.rounds.poisson_cohort`, from ``(seed,
round)``; the simulator's clients and the Flower server's devices alike), so the cohort's size
varies around ``qN`` and may be 0 — such a round releases the noise alone.

**Adaptive clipping** (Andrew, Thakkar, McMahan and Ramaswamy, "Differentially Private
Learning with Adaptive Clipping", NeurIPS 2021; :class:`AdaptiveClipping`): instead of a fixed
``C``, the clip norm follows the ``γ``-quantile of the clients' update norms. Each round every
client also reports the bit ``b_k = 1[‖δ_k‖ ≤ C_r] − ½``, shifted to ``±½`` as in their Sec. 3.1
(and TFF's ``QuantileAdaptiveClipSumQuery``, TF-Privacy's ``QuantileEstimatorQuery``); the
server sees ``b̃ = (Σ_k b_k + N(0, σ_b²)) / (qN) + ½`` (in ``distributed`` each client adds its
share of that noise too) and moves the norm geometrically, ``C_{r+1} = C_r · exp(−η_C (b̃ − γ))``.
Adding or removing a user moves the sum of shifted bits by ½ and the sum of updates by ``C``:
the pair is one Gaussian mechanism of multiplier ``z = (z_Δ⁻² + (2σ_b)⁻²)^(−½)``, and the
update's share of a budget ``z`` is ``z_Δ = (z⁻² − (2σ_b)⁻²)^(−½)`` (their Theorem 1,
:func:`update_noise_multiplier`).

**Accounting** (:func:`epsilon`, :func:`noise_multiplier`): Google's ``dp-accounting`` RDP
accountant with ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` (Mironov, Talwar and Zhang,
"Rényi Differential Privacy of the Sampled Gaussian Mechanism", 2019) composed over the run's
rounds, under add/remove-one adjacency (one user's data present or absent) — the guarantee
DP-FedAvg's literature states (McMahan et al. 2018, Andrew et al. 2021). Everything random is
drawn from ``(seed, round, client)``, so a resumed DP run is bit-exact.
"""

from __future__ import annotations

import logging
import math
import secrets
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .algorithms.base import FedAvg, Tensors
from .errors import ConfigError, TrainingError
from .rounds import Aggregator, ClientUpdates, RoundPlan

#: The placements of the noise (``off``: no differential privacy).
MECHANISMS = ("off", "central", "distributed")


#: What the accountant assumes, stated in every report (see the module's docstring).
SAMPLING = "poisson"
NEIGHBORING_RELATION = "add-or-remove-one"
ACCOUNTANT = "RDP, dp-accounting PoissonSampledDpEvent(q, GaussianDpEvent(z))"
#: The clip-count bits' convention (:class:`ClipUpdates`).
COUNT_BITS = "±½"


def default_delta(users: int) -> float:
    """``δ`` when none is given: ``min(N^−1.1, 10⁻⁶)`` for ``N`` users — below ``1/N^1.1`` at
    every population (a mechanism that publishes one random user's data whole is
    ``(0, 1/N)``-DP, so ``δ`` must be well below ``1/N``), and pfl-research's benchmark ``10⁻⁶``
    wherever that is smaller (up to ``N`` ≈ 285,000)."""
    return min(max(1, users) ** -1.1, 1e-6)


def round_event(noise: float, sampling_rate: float) -> Any:
    """One round as a ``dp_accounting`` event: the sum of the cohort's clipped updates with
    noise ``N(0, (noise·C)²)`` — a Gaussian mechanism of multiplier ``noise`` under add/remove
    adjacency (sensitivity ``C``) — on a Poisson-sampled cohort of rate ``sampling_rate``."""
    import dp_accounting

    return dp_accounting.PoissonSampledDpEvent(sampling_rate, dp_accounting.GaussianDpEvent(noise))


@lru_cache(maxsize=256)
def _rdp_per_round(noise: float, sampling_rate: float) -> tuple[tuple[float, ...], np.ndarray]:
    """The RDP orders and the Rényi divergence of one round (it composes by addition)."""
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    logging.getLogger("absl").setLevel(logging.ERROR)  # its convergence notes per order
    accountant = rdp.RdpAccountant(None, dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(round_event(noise, sampling_rate), 1)
    return tuple(accountant._orders), np.asarray(accountant._rdp, dtype=np.float64)


def epsilon(noise: float, sampling_rate: float, rounds: int, delta: float) -> float:
    """The add/remove ``ε`` of ``rounds`` rounds of the Gaussian sum with noise multiplier
    ``noise`` (relative to the clip norm ``C``) on Poisson-sampled cohorts of rate
    ``sampling_rate`` (:func:`round_event`), for ``δ`` (``inf`` without noise)."""
    if rounds <= 0:
        return 0.0
    if noise <= 0:
        return math.inf
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    orders, per_round = _rdp_per_round(float(noise), float(sampling_rate))
    value, _ = rdp.compute_epsilon(orders, per_round * rounds, delta)
    return float(value)


def noise_multiplier(target: float, sampling_rate: float, rounds: int, delta: float) -> float:
    """The smallest noise multiplier ``z`` (to 0.1 %) whose run of ``rounds`` rounds spends at
    most ``target`` ε (bisection on :func:`epsilon`, which falls as ``z`` grows)."""
    if not target > 0:
        raise ConfigError(f"--dp-epsilon must be positive, not {target}")

    def spent(noise: float) -> float:
        return epsilon(noise, sampling_rate, rounds, delta)

    low, high = 0.0, 1.0
    while spent(high) > target:
        low, high = high, high * 2
        if high > 1e4:
            raise ConfigError(f"no noise reaches ε = {target} in {rounds} rounds")
    while high - low > 1e-3 * high:
        middle = (low + high) / 2
        if spent(middle) > target:
            low = middle
        else:
            high = middle
    return high


@dataclass(frozen=True)
class AdaptiveClipping:
    """Adaptive clipping (Andrew et al., NeurIPS 2021): the clip norm moves towards the
    ``target_quantile`` (``γ``) of the clients' update norms by geometric steps of
    ``learning_rate`` (``η_C``), from a count of unclipped clients (bits shifted to ``±½``)
    carrying noise of standard deviation ``count_std`` (``σ_b``, on the sum). Their defaults:
    ``γ = 0.5``, ``η_C = 0.2``, ``σ_b = m / 20`` (``m = qN`` the expected cohort)."""

    target_quantile: float = 0.5
    learning_rate: float = 0.2
    count_std: float = 1.0

    def next_clip_norm(self, clip_norm: float, unclipped: float) -> float:
        """``C_{r+1} = C_r · exp(−η_C (b̃ − γ))`` from the noisy fraction ``b̃`` of unclipped
        clients."""
        return clip_norm * math.exp(-self.learning_rate * (unclipped - self.target_quantile))

    def report(self, noise: float) -> dict[str, Any]:
        return {
            "target_quantile": self.target_quantile,
            "learning_rate": self.learning_rate,
            "count_std": self.count_std,
            "count_bits": COUNT_BITS,
            "update_noise_multiplier": update_noise_multiplier(noise, self.count_std),
        }


def update_noise_multiplier(noise: float, count_std: float) -> float:
    """``z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2)``: the update's noise multiplier that, with the clip
    count's noise ``σ_b``, makes the pair as private as one Gaussian mechanism of multiplier
    ``z`` (Andrew, Thakkar, McMahan and Ramaswamy, "Differentially Private Learning with
    Adaptive Clipping", NeurIPS 2021, Sec. 3.1 and Theorem 1). It holds for bits shifted to
    ``±½`` (:class:`ClipUpdates`): under add/remove the count's sensitivity is ½ against the
    update's ``C``. A ``σ_b`` of at most ``z/2`` leaves nothing for the update: refused."""
    rest = noise**-2 - (2.0 * count_std) ** -2
    if not rest > 0:
        raise ConfigError(
            f"adaptive clipping: a count noise of {count_std:.3g} spends the whole budget of "
            f"z = {noise:.3g}; give --clip-count-std above {noise / 2:.3g}"
        )
    return rest**-0.5


def effective_noise_multiplier(update_noise: float, count_std: float) -> float:
    """``z = (z_Δ⁻² + (2σ_b)⁻²)^(−1/2)``: the single multiplier the pair (update at ``z_Δ``,
    count at ``σ_b``) is as private as; the inverse of :func:`update_noise_multiplier`."""
    return (update_noise**-2 + (2.0 * count_std) ** -2) ** -0.5


def release_epsilon(sigma: float, sensitivity: float, releases: int, delta: float) -> float:
    """``ε`` of ``releases`` releases of a value of L2 sensitivity ``sensitivity`` (between any
    two users' values), each with ``N(0, σ² I)`` added: the Gaussian mechanism of
    multiplier ``σ / Δ`` composed without sampling (the server knows who sent), by the same RDP
    accountant as :func:`epsilon`.

    FedGN's proxy ``normalize(w + σ n)`` of a unit prototype ``w`` is this mechanism with
    ``Δ = 2`` (any unit vector against any other) followed by a normalisation, which is
    post-processing and spends nothing more (FedHide paper, eq. 5 and the remark after it)."""
    if releases <= 0:
        return 0.0
    return epsilon(sigma / sensitivity, 1.0, releases, delta)


@dataclass(frozen=True)
class PrivacyPlan:
    """A run's mechanism, fixed before training: what ``report.json`` calls ``privacy``.
    ``noise_multiplier`` is ``z``, the multiplier the run is as private as (with adaptive
    clipping the update carries ``z_Δ`` and the count ``σ_b``, :func:`update_noise_multiplier`);
    each round Poisson-samples each of ``users`` with probability ``q = cohort / users``, so
    ``cohort`` is the expected cohort ``qN``, the aggregate's fixed denominator."""

    mechanism: str
    noise_multiplier: float
    clip_norm: float
    delta: float
    rounds: int
    cohort: int
    users: int
    target_epsilon: float | None = None
    adaptive: AdaptiveClipping | None = None

    @property
    def sampling_rate(self) -> float:
        """``q = m / N``, each user's chance to be in a round's cohort."""
        return min(1.0, self.cohort / self.users)

    @property
    def update_noise(self) -> float:
        """The update's noise multiplier: ``z``, or ``z_Δ`` with adaptive clipping."""
        if self.adaptive is None:
            return self.noise_multiplier
        return update_noise_multiplier(self.noise_multiplier, self.adaptive.count_std)

    @property
    def count_std(self) -> float | None:
        """``σ_b``, the clip count's noise (``None`` with a fixed clip norm)."""
        return None if self.adaptive is None else self.adaptive.count_std

    @property
    def epsilon(self) -> float:
        """The ``ε`` of the whole run."""
        return self.spent(self.rounds)

    def spent(self, rounds: int) -> float:
        """The ``ε`` spent after ``rounds`` rounds (:func:`epsilon` of ``z``: with adaptive
        clipping the pair ``z_Δ``, ``σ_b`` is as private as ``z``)."""
        return epsilon(self.noise_multiplier, self.sampling_rate, rounds, self.delta)

    def report(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "noise_multiplier": self.noise_multiplier,
            "update_noise_multiplier": self.update_noise,
            "clip_count_std": self.count_std,
            "clip_count_bits": None if self.adaptive is None else COUNT_BITS,
            "clip_norm": self.clip_norm,
            "rounds": self.rounds,
            "expected_cohort": self.cohort,
            "users": self.users,
            "sampling_rate": self.sampling_rate,
            "sampling": SAMPLING,
            "accountant": ACCOUNTANT,
            "neighboring_relation": NEIGHBORING_RELATION,
            "adaptive_clipping": None
            if self.adaptive is None
            else self.adaptive.report(self.noise_multiplier),
        }

    def describe(self) -> str:
        """One line for a terminal: the mechanism, ``ε`` and ``δ``, and what they rest on."""
        count = "" if self.adaptive is None else f", z_Δ = {self.update_noise:.4g}, σ_b = "
        count += "" if self.adaptive is None else f"{self.count_std:.3g} on {COUNT_BITS} bits"
        return (
            f"user-level DP, {self.mechanism}: ε = {self.epsilon:.3g}, δ = {self.delta:.2g} "
            f"({NEIGHBORING_RELATION}) over {self.rounds} rounds (z = {self.noise_multiplier:.4g}"
            f"{count}, C = {self.clip_norm:g}{', adaptive' if self.adaptive else ''}, "
            f"{SAMPLING} sampling q = {self.sampling_rate:.3g}: expected cohort {self.cohort} of "
            f"{self.users})"
        )


def plan_privacy(
    mechanism: str,
    *,
    clip_norm: float,
    rounds: int,
    cohort: int,
    users: int,
    target_epsilon: float | None = None,
    noise: float | None = None,
    delta: float | None = None,
    adaptive: bool = False,
    clip_quantile: float = 0.5,
    clip_learning_rate: float = 0.2,
    clip_count_std: float | None = None,
) -> PrivacyPlan | None:
    """The run's mechanism from its settings (``None`` when off): given a target ``ε`` the noise
    multiplier is computed for the run's ``rounds`` and Poisson-sampled cohorts of expected size
    ``cohort`` of ``users`` (``q = cohort / users``); given
    the noise multiplier, the ``ε`` follows. ``adaptive``: adaptive clipping from ``clip_norm``
    (:class:`AdaptiveClipping`; ``clip_count_std`` defaults to ``cohort / 20``)."""
    if mechanism == "off":
        return None
    if mechanism not in MECHANISMS:
        raise ConfigError(f"--dp must be one of {', '.join(MECHANISMS)}, not {mechanism!r}")
    if not clip_norm > 0:
        raise ConfigError(f"--clip-norm must be positive, not {clip_norm}")
    delta = default_delta(users) if delta is None else delta
    if not 0 < delta < 1:
        raise ConfigError(f"--dp-delta must be in (0, 1), not {delta}")
    cohort = min(cohort, users)
    if noise is None:
        if target_epsilon is None:
            raise ConfigError("--dp needs --dp-epsilon (or --dp-noise-multiplier)")
        noise = noise_multiplier(target_epsilon, cohort / users, rounds, delta)
    elif not noise > 0:
        raise ConfigError(f"--dp-noise-multiplier must be positive, not {noise}")
    clipping = None
    if adaptive:
        count_std = cohort / 20 if clip_count_std is None else clip_count_std
        clipping = AdaptiveClipping(clip_quantile, clip_learning_rate, float(count_std))
        update_noise_multiplier(float(noise), clipping.count_std)  # refused when impossible
    plan = PrivacyPlan(
        mechanism, float(noise), clip_norm, delta, rounds, cohort, users, target_epsilon, clipping
    )
    if target_epsilon is not None and plan.epsilon > target_epsilon * (1 + 1e-6):
        raise ConfigError(
            f"this run would spend ε = {plan.epsilon:.3g} > the budget {target_epsilon:g}: "
            "lower --rounds or raise --dp-epsilon"
        )
    return plan


def plan_from_settings(
    settings: Any,
    mechanism: str,
    *,
    rounds: int,
    cohort: int,
    users: int,
    default_epsilon: float | None = None,
) -> PrivacyPlan | None:
    """:func:`plan_privacy` from a run's privacy settings (:class:`uvtrain.config.Privacy`) with
    the placement ``mechanism`` (the simulator's ``settings.dp``, a deployment's resolved one);
    ``default_epsilon`` is the budget when neither ``ε`` nor ``z`` is given (a deployment's
    :data:`~uvtrain.config.SECURE_DEFAULT_EPSILON`)."""
    target = settings.dp_epsilon
    if target is None and settings.dp_noise_multiplier is None:
        target = default_epsilon
    return plan_privacy(
        mechanism,
        clip_norm=settings.clip_norm,
        rounds=rounds,
        cohort=cohort,
        users=users,
        target_epsilon=target,
        noise=settings.dp_noise_multiplier,
        delta=settings.dp_delta,
        adaptive=settings.adaptive_clipping,
        clip_quantile=settings.clip_quantile,
        clip_learning_rate=settings.clip_learning_rate,
        clip_count_std=settings.clip_count_std,
    )


# ----------------------------------------------------------------------------------------------
# The mechanism as steps of the round
# ----------------------------------------------------------------------------------------------


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
    simulator's clipping step (:class:`ClipUpdates`) and a device's (``uvdeploy``)."""
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


def noisy_mean_update(
    base: Tensors,
    total: Tensors,
    denominator: float,
    std: float = 0.0,
    generator: torch.Generator | None = None,
) -> Tensors:
    """``θ + (Σ_k δ̂_k + N(0, std²)) / denominator`` from the sum of the clipped updates
    ``total`` (``std = 0``: the noise is in the sum already, ``distributed``); the denominator is
    the expected cohort ``qN``, fixed before training (McMahan et al.'s ``f̃_f``)."""
    out = {}
    for name, value in base.items():
        summed = total[name]
        if std > 0:
            assert generator is not None, "noise needs its generator"
            summed = add_noise({name: summed}, std, generator)[name]
        out[name] = value + (summed / denominator).to(value.dtype)
    return out


@dataclass
class ClipUpdates:
    """Per-client postprocessing: each update ``θ_k − θ`` clipped to L2 norm ``clip_norm`` (over
    all its trainable parameters together).

    With ``adaptive`` (:class:`AdaptiveClipping`) the norm moves after each round from the noisy
    count of unclipped clients, each client's bit shifted to ``±½``: in ``distributed`` each of
    the ``m′`` clients of the round adds ``N(0, σ_b² / m′)`` to its bit (from ``(seed, round,
    client)``), otherwise — or when the cohort is empty — the server adds ``N(0, σ_b²)`` to the
    sum; the fraction is the sum over the expected cohort ``denominator`` (``qN``) plus ½.
    ``round_norm`` is the norm the last round clipped to (its noise is scaled by it);
    :meth:`state_dict` holds the next one, so that a resumed run goes on bit-exactly."""

    clip_norm: float
    adaptive: AdaptiveClipping | None = None
    seed: int = 0
    distributed: bool = False
    denominator: float = 1.0

    def __post_init__(self) -> None:
        self.round_norm = self.clip_norm

    def __call__(self, updates: ClientUpdates, base: Tensors, plan: RoundPlan) -> ClientUpdates:
        updates = updates.as_deltas(base)
        assert updates.deltas is not None
        self.round_norm = clip_norm = self.clip_norm
        updates.deltas, norms = clip_updates(updates.deltas, clip_norm)
        updates.metrics = {  # an empty cohort's are NaN (null in metrics.jsonl)
            **updates.metrics,
            "clipped": float((norms > clip_norm).double().mean()),
            "update_norm": float(norms.median()) if len(norms) else math.nan,
            "clip_norm": clip_norm,
        }
        if self.adaptive is not None:
            unclipped = self.noisy_unclipped(norms <= clip_norm, updates.clients, plan.number)
            self.clip_norm = self.adaptive.next_clip_norm(clip_norm, unclipped)
        return updates

    def noisy_unclipped(self, bits: Tensor, clients: Tensor, round_number: int) -> float:
        """``b̃ = (Σ_k (b_k − ½) + N(0, σ_b²)) / (qN) + ½``: the fraction of unclipped clients
        from the noisy sum of the bits shifted to ``±½`` (Andrew et al. 2021, Sec. 3.1)."""
        assert self.adaptive is not None
        count = len(bits)
        total = float((bits.double() - 0.5).sum())
        if self.distributed and count > 0:
            share = self.adaptive.count_std / math.sqrt(count)
            for client in clients.tolist():
                total += scalar_noise(share, _generator(self.seed, round_number, 3, int(client)))
        else:
            generator = _generator(self.seed, round_number, 4, 0)
            total += scalar_noise(self.adaptive.count_std, generator)
        return total / self.denominator + 0.5

    def state_dict(self) -> dict[str, float]:
        return {"clip_norm": self.clip_norm}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.clip_norm = self.round_norm = float(state["clip_norm"])


@dataclass
class DistributedNoise:
    """Per-client postprocessing (``distributed``): each of the round's ``m′`` clients adds
    ``N(0, σ² / m′)`` to its clipped update, ``σ = z_Δ·C``, from its own generator (on a device:
    its own secret seed; in the simulator ``(seed, round, client)``), so that the sum over the
    cohort carries ``N(0, σ²)``. An empty cohort has no one to add it: :class:`DPSum` does."""

    std: float  # σ = z·C, of the sum; with ``clip``: z, and σ = z · clip.round_norm
    seed: int
    clip: ClipUpdates | None = None

    def __call__(self, updates: ClientUpdates, base: Tensors, plan: RoundPlan) -> ClientUpdates:
        updates = updates.as_deltas(base)
        assert updates.deltas is not None
        count = len(updates.clients)
        if count == 0:
            return updates
        std = self.std if self.clip is None else self.std * self.clip.round_norm
        share = std / math.sqrt(count)
        noisy = {name: value.clone() for name, value in updates.deltas.items()}
        for row, client in enumerate(updates.clients.tolist()):
            generator = _generator(self.seed, plan.number, 1, int(client))
            own = add_noise({name: value[row] for name, value in noisy.items()}, share, generator)
            for name, value in own.items():
                noisy[name][row] = value
        updates.deltas = noisy
        return updates


@dataclass
class DPSum(Aggregator):
    """The DP aggregate: ``θ' = θ + (Σ_k δ̂_k + n) / (qN)``, every client weighing the same,
    ``qN`` (``denominator``) the expected cohort; ``n`` is the server's ``N(0, σ²)``
    (``central``) or nothing (``distributed``: the clients' shares are in the sum already —
    but for an empty cohort, whose release is ``n`` alone, drawn by the server here).
    ``std`` is ``σ``, or with ``clip`` ``z_Δ``, and ``σ = z_Δ · clip.round_norm``."""

    algorithm: FedAvg
    std: float = 0.0
    seed: int = 0
    clip: ClipUpdates | None = None
    denominator: float = 1.0
    distributed: bool = False

    def __call__(
        self, updates: ClientUpdates, base: Tensors, plan: RoundPlan | None = None
    ) -> Tensors:
        if updates.deltas is None or plan is None:
            raise TrainingError("the DP sum needs the round and each client's clipped update")
        noise = self.sum_noise(base, plan)
        total = {
            name: updates.deltas[name].sum(0) + noise[name].to(value.device, value.dtype)
            if name in noise
            else updates.deltas[name].sum(0)
            for name, value in base.items()
        }
        return noisy_mean_update(base, total, self.denominator)

    def sum_noise(self, base: Tensors, plan: RoundPlan) -> Tensors:
        """``n``: the server's noise of round ``plan`` on the sum of the updates, ``N(0, σ²)`` for
        every value of ``base``'s parameters (float32, CPU, from ``(seed, round)``); empty when
        the server adds none (``distributed`` with clients). SecAgg+ adds the same to the sum it
        unmasks (:class:`uvtrain.audit.SecAggPlus`)."""
        if self.distributed and len(plan.clients) > 0:
            return {}
        std = self.std if self.clip is None else self.std * self.clip.round_norm
        if not std > 0:
            return {}
        generator = _generator(self.seed, plan.number, 2, 0)
        zeros = {
            name: torch.zeros(value.shape, dtype=torch.float32) for name, value in base.items()
        }
        return add_noise(zeros, std, generator)


def install(simulation: Any, plan: PrivacyPlan | None, seed: int) -> None:
    """Put the mechanism into a trainer's round: the clipping (and distributed noise) steps, the
    DP aggregator (the noise's standard deviation is ``z_Δ`` times the round's clip norm) and
    the plan (``simulation.privacy``: its rounds' cohorts are Poisson-sampled)."""
    if plan is None:
        return
    distributed = plan.mechanism == "distributed"
    denominator = float(plan.cohort)  # qN
    clip = ClipUpdates(plan.clip_norm, plan.adaptive, seed, distributed, denominator)
    simulation.postprocess = [clip]
    simulation.privacy = plan  # its cohorts are Poisson-sampled at plan.sampling_rate
    if distributed:
        simulation.postprocess.append(DistributedNoise(plan.update_noise, seed, clip))
    simulation.aggregator = DPSum(
        simulation.algorithm, plan.update_noise, seed, clip, denominator, distributed
    )
