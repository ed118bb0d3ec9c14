"""Codeword-bit recovery (FedUV): the attacker's estimates of a secret codeword from one update,
from SecAgg+ aggregates of cohorts, and by least squares over the training rounds.

The positive loss ``ℓ = max(0, 1 − vᵀσ(W g(x))/c)`` has

    ∂ℓ/∂W = −(1/(√c ‖z‖)) (v − (ẑᵀv) ẑ) g(x)ᵀ,    z = W g(x),  ẑ = z / ‖z‖,

so a client's update of the last layer, ``ΔW = −η ∂ℓ/∂W``, is close to the rank-one ``v ḡᵀ``: its
rows carry the signs of the secret codeword ``v`` (:func:`codeword_estimates`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..config import RunConfig
from ..data.base import FederatedDataset
from ..engine import Simulation
from .secagg import Layout, secure_update
from .settings import PUBLIC_SAMPLES, AuditSettings, fitting
from .training import client_parameters

#: FedUV's class matrix W in :class:`uvtrain.models.CodewordModel`.
CODEWORD_WEIGHT = "class_embedding.weight"
ATTACKS = ("projection", "svd")


def public_samples(
    dataset: FederatedDataset, config: RunConfig, limit: int = PUBLIC_SAMPLES
) -> Tensor | None:
    """Samples of the identities held out of training (what an attacker could collect), audio
    cut to the training window; ``None`` when the dataset holds none out."""
    if not dataset.unknown:
        return None
    each = max(1, math.ceil(limit / len(dataset.unknown)))
    pools = [np.concatenate([c.train, c.val, c.test])[:each] for c in dataset.unknown]
    samples = np.concatenate(pools)[:limit]
    window = dataset.input.crop_samples(config.data.crop_seconds)
    if window:
        samples = samples[:, :window]
    return torch.as_tensor(samples)


@torch.no_grad()
def mean_hidden(simulation: Simulation, samples: Tensor) -> Tensor:
    """``ḡ``: the mean of the backbone's output ``g(x)`` over ``samples`` under the global model."""
    model = simulation.load_into_model()
    return model.backbone(samples.to(simulation.device)).mean(0).double().cpu()


def signs(values: Tensor) -> Tensor:
    """±1 (float64) by sign, zero counted positive."""
    return torch.where(values >= 0, 1.0, -1.0).to(torch.float64)


def codeword_estimates(delta_w: Tensor | np.ndarray, hidden: Tensor | None) -> dict[str, Tensor]:
    """The attacker's ±1 estimates of the codeword from an update ``ΔW`` (``[c, d]``).

    ``projection``: ``sign(ΔW ḡ)`` (needs ``hidden`` = ``ḡ``); ``svd``: the top left singular
    vector, signed so that the top right singular vector sums to a positive number.
    """
    delta_w = torch.as_tensor(delta_w, dtype=torch.float64)
    estimates = {}
    if hidden is not None:
        estimates["projection"] = signs(delta_w @ hidden.double())
    left, _, right = torch.linalg.svd(delta_w, full_matrices=False)
    orientation = 1.0 if float(right[0].sum()) >= 0 else -1.0
    estimates["svd"] = signs(left[:, 0] * orientation)
    return estimates


def bit_agreement(estimate: np.ndarray, codewords: np.ndarray) -> np.ndarray:
    """``[m]`` the fraction of each codeword's ±1 bits (rows of ``codewords``) that ``estimate``
    (``[c]``, or ``[m, c]`` one per row) gets right."""
    return np.mean(np.asarray(codewords) == np.asarray(estimate), axis=-1)


@functools.lru_cache(maxsize=4)
def bch_decoder(length: int) -> Callable[[np.ndarray], np.ndarray]:
    """Hard-decision BCH decoding of ±1 words (``[m, c]``) to the nearest codeword's ±1 bits (the
    FedUV code of :func:`uvtrain.codes.bch_code`; galois, about 10 s to compile once)."""
    import galois

    from ..codes import bch_code

    code = bch_code(length)
    bch = galois.BCH(code.n, code.k)
    if not np.array_equal(np.asarray(bch.G, dtype=np.uint8), code.generator):
        raise ValueError(f"galois's BCH({code.n}, {code.k}) is not the cached code")

    def decode(words: np.ndarray) -> np.ndarray:
        bits = (np.asarray(words) < 0).astype(np.uint8)  # v = 1 − 2b
        decoded = np.asarray(bch.decode(galois.GF2(np.atleast_2d(bits)), output="codeword"))
        return 1.0 - 2.0 * decoded.astype(np.float64)

    return decode


def _exact(estimates: np.ndarray, codewords: np.ndarray) -> np.ndarray:
    return np.all(np.asarray(estimates) == np.asarray(codewords), axis=-1)


def bit_recovery(
    simulation: Simulation,
    pool: np.ndarray,
    public: Tensor | None,
    settings: AuditSettings,
    rng: np.random.Generator,
    progress: bool = True,
) -> dict[str, Any]:
    """Codeword-bit recovery at the simulation's current model, for the clients of ``pool``.

    Every pool client trains one round's local steps from the same global ``θ`` (the engine's
    per-client path, the batches of the next round); the attacks run on each plain update, and
    on the SecAgg+ aggregate of ``settings.cohort_draws`` random cohorts of each size.
    """
    from ..progress import Progress

    cohorts = fitting(settings.cohorts, len(pool), settings.skip_large_cohorts, "cohorts")
    round_number = simulation.round + 1
    lr = simulation.config.learning_rate(round_number)
    layout = Layout.of(simulation.params, (CODEWORD_WEIGHT,))
    shape = layout.shapes[0]
    with Progress(
        f"client updates, round {round_number}",
        len(pool),
        unit="client",
        enabled=progress,
        transient=True,
    ) as bar:
        batches = simulation.batches_of_round(round_number, pool)
        thetas, losses = client_parameters(simulation, pool, batches, lr, layout, bar)
    base = layout.flatten(simulation.params).astype(np.float64)
    hidden = mean_hidden(simulation, public) if public is not None else None
    codewords = simulation.constants["codeword"][torch.as_tensor(pool)].cpu().numpy()
    sizes = simulation.sizes[pool].numpy()
    decode = bch_decoder(shape[0]) if settings.decode else None

    plain: dict[str, np.ndarray] = {}
    for row in thetas:
        for attack, guess in codeword_estimates((row - base).reshape(shape), hidden).items():
            plain.setdefault(attack, []).append(guess.numpy())
    plain = {attack: np.stack(guesses) for attack, guesses in plain.items()}
    result: dict[str, Any] = {
        "round": simulation.round,
        "clients": len(pool),
        "lr": lr,
        "mean_loss": float(losses.mean()),
        "plain": {a: _plain_scores(g, codewords, decode) for a, g in plain.items()},
    }
    result["attack"] = max(result["plain"], key=lambda a: result["plain"][a]["mean"])
    result["cohorts"] = {}
    for size in cohorts:
        draws = []
        for _ in range(settings.cohort_draws):
            members = np.sort(rng.choice(len(pool), size=size, replace=False))
            update = secure_update(thetas[members], base, sizes[members], settings.secagg, rng)
            estimates = codeword_estimates(update.reshape(shape), hidden)
            estimates["random guess"] = torch.as_tensor(rng.choice([-1.0, 1.0], size=shape[0]))
            draws.append(_cohort_scores(estimates, codewords[members], decode))
        result["cohorts"][str(size)] = _mean_of(draws)
    return result


def _plain_scores(
    guesses: np.ndarray, codewords: np.ndarray, decode: Callable[[np.ndarray], np.ndarray] | None
) -> dict[str, float | None]:
    scores = bit_agreement(guesses, codewords)
    return {
        "mean": float(scores.mean()),
        "min": float(scores.min()),
        "exact": float(_exact(guesses, codewords).mean()),
        "exact_decoded": None
        if decode is None
        else float(_exact(decode(guesses), codewords).mean()),
    }


def _cohort_scores(
    estimates: dict[str, Tensor],
    members: np.ndarray,
    decode: Callable[[np.ndarray], np.ndarray] | None,
) -> dict[str, dict[str, float | None]]:
    """Each estimate against every member: mean and max agreement, the fraction of members whose
    codeword is recovered exactly (raw, decoded), and agreement with the members' majority."""
    majority = signs(torch.as_tensor(members.sum(0))).numpy()
    scores = {}
    for attack, guess in estimates.items():
        guess = guess.numpy()
        agreement = bit_agreement(guess, members)
        decoded = None
        if decode is not None:
            decoded = float(_exact(decode(guess[None])[0], members).mean())
        scores[attack] = {
            "mean": float(agreement.mean()),
            "max": float(agreement.max()),
            "exact": float(_exact(guess, members).mean()),
            "exact_decoded": decoded,
            "majority": float(bit_agreement(guess, majority[None])[0]),
        }
    return scores


def _mean_of(draws: list[dict[str, dict[str, float | None]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attack in draws[0]:
        out[attack] = {}
        for key in draws[0][attack]:
            values = [draw[attack][key] for draw in draws]
            out[attack][key] = None if values[0] is None else float(np.mean(values))
    out["draws"] = len(draws)
    return out


def disaggregate(observations: np.ndarray, membership: np.ndarray) -> np.ndarray:
    """Per-client ±1 estimates from per-round aggregates: least squares of ``Y ≈ A X`` with
    ``A`` ``[R, K]`` the rounds' membership (known to the server: it picks the cohort) and ``Y``
    ``[R, c]`` each round's ``ΔW ḡ`` scaled to unit norm; ``sign(X)`` is ``[K, c]``."""
    rows = np.asarray(observations, np.float64)
    rows = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-30)
    solution, *_ = np.linalg.lstsq(np.asarray(membership, np.float64), rows, rcond=None)
    return np.where(solution >= 0, 1.0, -1.0)


def _checkpoints(rounds: int) -> list[int]:
    return sorted({r for r in (rounds // 8, rounds // 4, rounds // 2, rounds) if r >= 1})


def disaggregation_scores(
    observations: list[np.ndarray],
    membership: list[np.ndarray],
    codewords: np.ndarray,
    decode: Callable[[np.ndarray], np.ndarray] | None,
) -> list[dict[str, Any]]:
    """Recovery by :func:`disaggregate` after each checkpoint's number of observed ``rounds``,
    over the clients that took part at least once: the fraction of them seen (``clients_seen``),
    of their bits (``bits``), of their whole codewords from the raw signs (``whole_raw``) and
    after BCH decoding (``whole_decoded``; ``None`` without ``decode``)."""
    out = []
    for rounds in _checkpoints(len(observations)):
        matrix = np.stack(membership[:rounds])
        seen = matrix.sum(0) > 0
        guesses = disaggregate(np.stack(observations[:rounds]), matrix)[seen]
        truth = codewords[seen]
        out.append(
            {
                "rounds": rounds,
                "clients_seen": float(seen.mean()),
                "bits": float(bit_agreement(guesses, truth).mean()),
                "whole_raw": float(_exact(guesses, truth).mean()),
                "whole_decoded": None
                if decode is None
                else float(_exact(decode(guesses), truth).mean()),
            }
        )
    return out


def code_length(simulation: Simulation) -> int:
    """The codeword length ``c`` of a codeword model: the rows of its class matrix ``W``."""
    return int(simulation.params[CODEWORD_WEIGHT].shape[0])
