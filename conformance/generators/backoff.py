"""``vectors/backoff.json``: failed-attempt back-off (spec §8)."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from uvsdk import backoff as backoff_rules

from .shared import document


def generate() -> dict[str, Any]:
    default = backoff_rules.BackoffPolicy()
    policies = {
        "default": default,
        "strict": backoff_rules.BackoffPolicy(
            attempts=1, base_seconds=1.0, factor=10.0, max_seconds=3600.0
        ),
        "flat": backoff_rules.BackoffPolicy(
            attempts=3, base_seconds=60.0, factor=1.0, max_seconds=600.0
        ),
        "none": backoff_rules.BackoffPolicy(attempts=2, base_seconds=0.0),
    }
    lockouts = []
    for name, policy in policies.items():
        for failures in (0, 1, 2, 3, 4, 5, 6, 7, 10, 17, 100, 2**31, 10**30):
            lockouts.append(
                {"policy": name, "failures": failures, "seconds": policy.lockout_seconds(failures)}
            )
    sequences = []
    for name, events in [
        ("default", "RRRRRRAR"),
        ("default", "RRRRR" + "R"),
        ("strict", "RRRR"),
        ("flat", "RRRRRA"),
        ("none", "RRRRR"),
    ]:
        policy, state, now, steps = policies[name], backoff_rules.BackoffState(), 1000.0, []
        for event in events:
            locked = now < state.locked_until
            steps.append(
                {"t": now, "result": "accept" if event == "A" else "reject", "locked": locked}
            )
            if not locked:
                state = backoff_rules.record(state, policy, event == "A", now)
            steps[-1].update(failures=state.failures, locked_until=state.locked_until)
            now += 7.0 if not locked else 0.0
            if locked:  # wait it out, then try again
                now = state.locked_until
                locked = False
                steps.append(
                    {"t": now, "result": "accept" if event == "A" else "reject", "locked": False}
                )
                state = backoff_rules.record(state, policy, event == "A", now)
                steps[-1].update(failures=state.failures, locked_until=state.locked_until)
                now += 7.0
        sequences.append({"policy": name, "steps": steps})
    invalid = [
        {"attempts": 0},
        {"attempts": 1001},
        {"base_seconds": -1.0},
        {"factor": 0.5},
        {"factor": 1001.0},
        {"max_seconds": 10 * 365 * 86400 + 1.0},
        {"max_seconds": -1.0},
    ]
    for fields in invalid:
        with contextlib.suppress(ValueError):
            backoff_rules.BackoffPolicy(**fields)
            raise AssertionError(f"{fields} was accepted")
    return document(
        "backoff",
        "Lock-out seconds after n consecutive rejections (base x factor^(n - attempts), capped, "
        "0 below attempts), and attempt sequences: at time t an attempt is refused while "
        "t < locked_until (locked: true, nothing recorded), else recorded; the state after each "
        "step (spec §8).",
        policies={k: dataclasses.asdict(v) for k, v in policies.items()},
        lockouts=lockouts,
        sequences=sequences,
        invalid_policies=invalid,
    )
