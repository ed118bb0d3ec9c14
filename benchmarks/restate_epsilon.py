"""The privacy curve's and the DP audits' ε re-stated (issue 31).

Each run's noise is taken as it was run, from the tables of docs/privacy.md and docs/results.md
(§5): the update's noise multiplier (``z_Δ`` with adaptive clipping, ``z`` with a fixed clip
norm), the clip count's ``σ_b = m / 20`` on ``{0, 1}`` bits, the cohort ``m`` of ``N`` users,
the rounds and the ``δ`` the docs state. For each run it prints:

- the ``ε`` it was labelled with (the old accountant: Poisson sampling, add/remove, Andrew et
  al.'s split applied to unshifted bits);
- **what was run**: the runs drew fixed-size cohorts without replacement with ``{0, 1}`` bits;
  their honest ``ε`` is replace-one (dp-accounting's ``SampledWithoutReplacementDpEvent``,
  Wang, Balle and Kasiviswanathan 2019, Thm. 27; the update at ``z_Δ/2`` of the sensitivity
  ``2C`` and the count at ``σ_b`` composed);
- **the same noise under today's mechanism** (Poisson-sampled cohorts, fixed denominator,
  bits shifted to ``±½``: :func:`uvtrain.privacy.epsilon_release` of ``z = (z_Δ⁻² + (2σ_b)⁻²)^(−½)``,
  add/remove), at the docs' ``δ`` and at today's default ``δ``
  (:func:`uvtrain.privacy.default_delta`) — what a new run with this noise gets.

Usage: ``python benchmarks/restate_epsilon.py`` (about a minute).
"""

from __future__ import annotations

import logging

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from uvtrain.privacy import default_delta, effective_noise_multiplier, epsilon_release

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


#: The replace-one accountant's orders (the without-replacement bound costs O(α²) an order).
ORDERS = (1.25, 1.5, 1.75, 2, 2.25, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28,
          32, 40, 48, 56, 64)  # fmt: skip


def as_run(update: float, count: float | None, cohort: int, users: int, rounds: int, delta: float):
    """The replace-one ``ε`` of what ran: fixed-size cohorts without replacement, ``{0, 1}``
    bits (sensitivity 1), the update's sum of sensitivity ``2C``."""
    event = dp_accounting.GaussianDpEvent(update / 2)
    if count is not None:
        event = dp_accounting.ComposedDpEvent([event, dp_accounting.GaussianDpEvent(count)])
    event = dp_accounting.SampledWithoutReplacementDpEvent(users, cohort, event)
    accountant = rdp.RdpAccountant(ORDERS, dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(event, rounds)
    return accountant.get_epsilon(delta)


def main() -> None:
    logging.getLogger("absl").setLevel(logging.ERROR)
    print(
        "| run | labelled ε | z_Δ (z) | σ_b | q = m/N | rounds | δ (docs) | as run: replace-one ε "
        "| today's mechanism: z | ε, δ (docs) | ε, default δ |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, label, update, count, cohort, users, rounds, delta in RUNS:
        run = as_run(update, count, cohort, users, rounds, delta)
        total = update if count is None else effective_noise_multiplier(update, count)
        rate, default = cohort / users, default_delta(users)
        now = epsilon_release(total, rate, rounds, delta)
        at_default = epsilon_release(total, rate, rounds, default)
        print(
            f"| {name} | {label} | {update:g} | {'–' if count is None else f'{count:g}'} | "
            f"{cohort}/{users} | {rounds} | {delta:.3g} | {run:.3g} | {total:.4g} | {now:.3g} | "
            f"{at_default:.3g} (δ {default:.2g}) |"
        )


if __name__ == "__main__":
    main()
