"""The privacy curve's and the DP audits' ε re-stated with the fixed accountant (issue 31).

Each run's noise is taken as it was run, from the tables of docs/privacy.md and docs/results.md
(§5): the update's noise multiplier (``z_Δ`` with adaptive clipping, ``z`` with a fixed clip
norm), the clip count's ``σ_b = m / 20`` on ``{0, 1}`` bits, the cohort ``m`` of ``N`` users,
the rounds and the ``δ`` the docs state. For each run it prints:

- the ``ε`` it was labelled with (the old accountant: Poisson sampling, add/remove, Andrew et
  al.'s split applied to unshifted bits);
- the ``ε`` of :func:`uvtrain.privacy.epsilon`, the accountant now: cohorts of ``m`` drawn
  without replacement, replace-one adjacency, the update and the count composed — at the docs'
  ``δ`` and at today's default ``δ`` (:func:`uvtrain.privacy.default_delta`);
- for comparison, the add/remove ``ε`` the same noise would spend with Poisson-sampled cohorts
  (which the simulator does not draw), the count of ``{0, 1}`` bits having sensitivity 1 there:
  ``z = (z_Δ⁻² + σ_b⁻²)^(−1/2)``.

Usage: ``python benchmarks/restate_epsilon.py`` (about a minute).
"""

from __future__ import annotations

import logging

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from uvtrain.privacy import default_delta, epsilon

#: (run, labelled ε, update noise multiplier as run, σ_b or None, cohort, users, rounds, δ)
RUNS = [
    ("curve feduv", 16, 1.185, 5.0, 100, 1000, 800, 1e-4),
    ("curve feduv", 8, 1.848, 5.0, 100, 1000, 800, 1e-4),
    ("curve feduv", 4, 3.217, 5.0, 100, 1000, 800, 1e-4),
    ("curve feduv", 2, 6.512, 5.0, 100, 1000, 800, 1e-4),
    ("curve fedhide", 16, 0.668, 5.0, 100, 1000, 100, 1e-4),
    ("curve fedhide", 8, 0.928, 5.0, 100, 1000, 100, 1e-4),
    ("curve fedhide", 4, 1.362, 5.0, 100, 1000, 100, 1e-4),
    ("curve fedhide", 2, 2.208, 5.0, 100, 1000, 100, 1e-4),
    ("audit dp-100 (C = 1)", 8, 0.825, None, 6, 60, 100, 0.1 / 60),
    ("audit dp-300 (C = 1)", 8, 1.126, None, 6, 60, 300, 0.1 / 60),
    ("audit dp-100-b (C = 1)", 16, 0.611, None, 6, 60, 100, 0.1 / 60),
    ("audit dp-100-b (C = 1)", 4, 1.169, None, 6, 60, 100, 0.1 / 60),
    ("audit dp-100-b (C = 1)", 2, 1.787, None, 6, 60, 100, 0.1 / 60),
]


def poisson_add_remove(update: float, count: float | None, q: float, rounds: int, delta: float):
    """The add/remove ``ε`` of the same noise on Poisson-sampled cohorts ({0, 1} bits)."""
    noise = update if count is None else (update**-2 + count**-2) ** -0.5
    accountant = rdp.RdpAccountant()
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(noise))
    accountant.compose(event, rounds)
    return accountant.get_epsilon(delta)


def main() -> None:
    logging.getLogger("absl").setLevel(logging.ERROR)
    print(
        "| run | labelled ε | z_Δ (z) | σ_b | q = m/N | rounds | δ (docs) | ε now, δ (docs) "
        "| ε now, default δ | add/remove ε if Poisson-sampled, δ (docs) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, label, update, count, cohort, users, rounds, delta in RUNS:
        now = epsilon(update, cohort, users, rounds, delta, count)
        default = default_delta(users)
        at_default = epsilon(update, cohort, users, rounds, default, count)
        poisson = poisson_add_remove(update, count, cohort / users, rounds, delta)
        print(
            f"| {name} | {label} | {update:g} | {'–' if count is None else f'{count:g}'} | "
            f"{cohort}/{users} | {rounds} | {delta:.3g} | {now:.3g} | {at_default:.3g} "
            f"(δ {default:.2g}) | {poisson:.3g} |"
        )


if __name__ == "__main__":
    main()
