"""How loose the RDP accountant is against the PLD, for ε and for the membership EER floor
(issue 45, item 3).

For each setting it prints:

- ``ε`` of the run's Poisson-subsampled Gaussian (add/remove) from dp-accounting's RDP
  accountant (:func:`uvtrain.accounting.epsilon_release_rdp`, what the trainer stated until
  2026-11-29) and from its PLD accountant (``PLDAccountant``, its default loss bucket 10⁻⁴), and
  their ratio; then what the trainer states now (:func:`uvtrain.accounting.epsilon_release`: the
  PLD at the coarser bucket :data:`uvtrain.accounting.PLD_LOSS_INTERVAL`, pessimistic) and its
  ratio to the finer PLD;
- the membership EER floor (``max over ε of (1 − δ(ε)) / (1 + e^ε)``, docs/privacy.md) from the
  RDP profile (``rdp.compute_delta`` on a grid of ε, how the trainer computed it until issue 45)
  and from the PLD (``(1 − δ(0)) / 2``, where that maximum is:
  :func:`uvtrain.accounting.membership_eer_floor`), with losses in buckets of
  :data:`uvtrain.accounting.PLD_LOSS_INTERVAL` (the trainer's) and of 10⁻⁴ beside it, with the
  seconds each PLD floor took.

The settings: the four of ``tests/trainer/test_privacy.py``'s RDP-against-PLD check; the privacy
curve's FedUV runs under today's mechanism (q = 0.1, 800 rounds, δ = 10⁻⁴; docs/privacy.md "The ε
of these figures, re-stated"); and every distinct noise of the deployment-scale table
(``docs/figures/privacy-deployment.json``: q = M / N_dep, FedUV 800 rounds, FedHide 100).

Usage: ``python benchmarks/pld_slack.py`` (about a minute on one core).
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import numpy as np

from uvtrain.accounting import (
    PLD_LOSS_INTERVAL,
    _rdp_per_round,
    epsilon_release,
    epsilon_release_rdp,
)

RECORD = Path(__file__).resolve().parents[1] / "docs" / "figures" / "privacy-deployment.json"

#: (setting, z, q, rounds, δ)
SETTINGS = [
    ("test: Abadi et al.", 4.0, 0.01, 10_000, 1e-5),
    ("test", 1.0, 0.1, 100, 1e-6),
    ("test", 2.0, 0.5, 3, 1e-6),
    ("test", 0.8, 0.1, 800, 1e-6),
    ("curve feduv ε 16", 1.177, 0.1, 800, 1e-4),
    ("curve feduv ε 8", 1.817, 0.1, 800, 1e-4),
    ("curve feduv ε 4", 3.062, 0.1, 800, 1e-4),
    ("curve feduv ε 2", 5.457, 0.1, 800, 1e-4),
]


def deployment_settings() -> list[tuple[str, float, float, int, float]]:
    """The deployment-scale table's distinct noises (3 decimals, as tabled)."""
    seen = {}
    for entry in json.loads(RECORD.read_text()):
        privacy = entry["privacy"]
        if not privacy or privacy["sampling_rate"] >= 1:
            continue
        key = (
            round(privacy["noise_multiplier"], 3),
            privacy["sampling_rate"],
            entry["rounds"],
            float(f"{privacy['delta']:.2g}"),
        )
        label = f"deployment {entry['method']} ε {privacy['epsilon']:.0f}"
        seen.setdefault(key, label)
    return [(label, *key) for key, label in seen.items()]


def pld_epsilon(noise: float, rate: float, rounds: int, delta: float) -> float:
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant as pld

    accountant = pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    event = dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(noise))
    accountant.compose(event, rounds)
    return float(accountant.get_epsilon(delta))


def rdp_floor(noise: float, rate: float, rounds: int) -> float:
    """The floor from the RDP profile (the trainer's until issue 45)."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    orders, per_round = _rdp_per_round(noise, rate)
    grid = np.concatenate([[0.0], np.geomspace(1e-3, 40.0, 300)])
    bounds = [
        (1 - min(1.0, rdp.compute_delta(orders, per_round * rounds, e)[0])) / (1 + math.exp(e))
        for e in grid
    ]
    return max(0.0, max(bounds))


def pld_floor(noise: float, rate: float, rounds: int, interval: float) -> tuple[float, float]:
    """The PLD floor at the loss bucket ``interval``, and its seconds."""
    from dp_accounting.pld import privacy_loss_distribution

    started = time.perf_counter()
    profile = privacy_loss_distribution.from_gaussian_mechanism(
        noise, sampling_prob=rate, value_discretization_interval=interval
    ).self_compose(rounds)
    floor = max(0.0, (1 - min(1.0, float(profile.get_delta_for_epsilon(0.0)))) / 2)
    return floor, time.perf_counter() - started


def main() -> None:
    logging.getLogger("absl").setLevel(logging.ERROR)
    header = (
        "| setting | z | q | rounds | δ | ε RDP | ε PLD | RDP / PLD | ε stated | stated / PLD | "
        "floor RDP | "
        f"floor PLD ({PLD_LOSS_INTERVAL:g}) | s | floor PLD (0.0001) | s |"
    )
    print(header)
    print("|" + "---|" * header.count(" | ") + "---|")
    ratios: dict[str, list[float]] = {}
    for label, z, q, rounds, delta in SETTINGS + deployment_settings():
        released = epsilon_release_rdp(z, q, rounds, delta)
        tight = pld_epsilon(z, q, rounds, delta)
        stated = epsilon_release(z, q, rounds, delta)
        ratio = released / tight
        words = label.replace(":", "").split()
        group = " ".join([words[0], *words[-2:]]) if words[0] == "deployment" else words[0]
        ratios.setdefault(group, []).append(ratio)
        coarse, coarse_s = pld_floor(z, q, rounds, PLD_LOSS_INTERVAL)
        fine, fine_s = pld_floor(z, q, rounds, 1e-4)
        print(
            f"| {label} | {z:g} | {q:g} | {rounds} | {delta:.2g} | {released:.3f} | {tight:.3f} | "
            f"{ratio:.3f} | {stated:.3f} | {stated / tight:.4f} | {rdp_floor(z, q, rounds):.3f} | {coarse:.3f} | {coarse_s:.2f} | "
            f"{fine:.3f} | {fine_s:.2f} |",
            flush=True,
        )
    for group, values in ratios.items():
        print(f"RDP / PLD, {group}: {min(values):.3f} to {max(values):.3f}")


if __name__ == "__main__":
    main()
