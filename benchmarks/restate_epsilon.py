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
  bits shifted to ``±½``: :func:`uvtrain.accounting.epsilon_release` of ``z = (z_Δ⁻² + (2σ_b)⁻²)^(−½)``,
  add/remove), at the docs' ``δ`` and at today's default ``δ``
  (:func:`uvtrain.accounting.default_delta`) — what a new run with this noise gets (the PLD's
  since 2026-11-29; RDP's before).

Usage: ``python benchmarks/restate_epsilon.py`` (about a minute).

``--server`` (issue 45) prints instead, for the noise of each run the docs state an ``ε`` for,
the ``ε`` against the server that ran training (:func:`uvtrain.accounting.epsilon_server`: no
amplification, the Gaussian mechanism of ``z`` over the rounds a user joins) for a user in every
round and in the expected ``⌈qR⌉``, beside the released model's (:func:`uvtrain.accounting.
epsilon_release`, the PLD's, and RDP's, which the runs were labelled with), at the docs' ``δ``
(a few seconds).
"""

from __future__ import annotations

import argparse
import logging
import math

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from uvtrain.accounting import (
    default_delta,
    effective_noise_multiplier,
    epsilon_release,
    epsilon_release_rdp,
    epsilon_server,
)

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


#: (run, z as run, q, rounds, δ): today's mechanism's runs whose ε the docs state (docs/privacy.md
#: §5 "Simulated deployment scale", "The audit at ε = 8 again", the deployment's default;
#: docs/results.md §5), for ``--server``
SERVER_RUNS = [
    ("curve feduv labelled ε 8 (100 of 1,000)", 1.817, 0.1, 800, 1e-6),
    ("curve fedhide labelled ε 8 (100 of 1,000)", 0.924, 0.1, 100, 1e-4),
    ("audit at ε 8 again (qN = 6 of 60)", 1.45, 0.1, 300, 1e-6),
    ("feduv, sim. deployment 1,000 of 10⁶, ε 8", 0.447, 0.001, 800, 2.5e-7),
    ("feduv, sim. deployment 5,000 of 10⁶, ε 8", 0.560, 0.005, 800, 2.5e-7),
    ("feduv, sim. deployment 1,000 of 10⁶, ε 4", 0.569, 0.001, 800, 2.5e-7),
    ("feduv, sim. deployment 1,000 of 10⁶, ε 2", 0.738, 0.001, 800, 2.5e-7),
    ("fedhide, sim. deployment 1,000 of 10⁶, ε 8", 0.414, 0.001, 100, 2.5e-7),
    ("fedhide, sim. deployment 5,000 of 10⁶, ε 8", 0.496, 0.005, 100, 2.5e-7),
    ("fedhide, real 1,000 of 1,000, ε 8", 6.895, 1.0, 100, 1e-6),
]


#: (run, users, expected cohort, rounds, budget): deployments planned here as ``uvtrain deploy``
#: plans them (ε = 8 distributed by default, δ from the population), for ``--server``
SERVER_PLANS = [
    ("README's `uvtrain deploy local` (4 devices, fraction 0.75, 5 rounds)", 4, 3, 5, 8.0),
]


def server_table() -> None:
    """``--server``: both ε of each run in :data:`SERVER_RUNS` and :data:`SERVER_PLANS`."""
    from uvtrain.config import Privacy
    from uvtrain.privacy import plan_privacy

    runs = list(SERVER_RUNS)
    for name, users, cohort, rounds, budget in SERVER_PLANS:
        plan = plan_privacy(
            Privacy("distributed", clip_norm=1.0, dp_epsilon=budget),
            rounds=rounds,
            cohort=cohort,
            users=users,
        )
        assert plan is not None
        runs.append((name, plan.noise_multiplier, plan.sampling_rate, rounds, plan.delta))
    print(
        "| run | z | q | rounds | δ | ε, released model (PLD) | the same by RDP | ε, server: a "
        "user in every round | expected rounds ⌈qR⌉ | ε, server: a user in those |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, noise, rate, rounds, delta in runs:
        release = epsilon_release(noise, rate, rounds, delta)
        rdp_release = epsilon_release_rdp(noise, rate, rounds, delta)
        expected = max(1, math.ceil(round(rate * rounds, 9)))
        print(
            f"| {name} | {noise:.4g} | {rate:g} | {rounds} | {delta:.2g} | {release:.3g} | "
            f"{rdp_release:.3g} | "
            f"{epsilon_server(noise, rounds, delta):.3g} | {expected} | "
            f"{epsilon_server(noise, expected, delta):.3g} |"
        )


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", action="store_true", help="both ε of today's runs (issue 45)")
    logging.getLogger("absl").setLevel(logging.ERROR)
    if parser.parse_args().server:
        server_table()
        return
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
