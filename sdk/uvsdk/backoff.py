"""Failed-attempt back-off, as FIDO and Android ask of biometric verifiers.

Every scored attempt counts. After ``attempts`` consecutive rejections the user is locked out for
``base_seconds``, and each further rejection doubles the lock-out (``factor``), up to
``max_seconds``; an acceptance resets the count. The state lives inside the encrypted template,
so editing a file cannot reset it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from .errors import LockedOutError


@dataclass(frozen=True)
class BackoffPolicy:
    """How many rejections are allowed before a lock-out, and how long it lasts (seconds)."""

    attempts: int = 5
    base_seconds: float = 30.0
    factor: float = 2.0
    max_seconds: float = 24 * 3600.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.base_seconds < 0 or self.factor < 1 or self.max_seconds < 0:
            raise ValueError("back-off needs attempts >= 1, base_seconds >= 0, factor >= 1")

    def lockout_seconds(self, failures: int) -> float:
        """Lock-out after the given number of consecutive failures (0 below ``attempts``)."""
        if failures < self.attempts:
            return 0.0
        return min(self.max_seconds, self.base_seconds * self.factor ** (failures - self.attempts))


@dataclass(frozen=True)
class BackoffState:
    """Consecutive rejections and the Unix time until which verification is refused."""

    failures: int = 0
    locked_until: float = 0.0


def check(state: BackoffState, user: str, now: float) -> None:
    """Raise :class:`LockedOutError` while ``now`` is inside a lock-out."""
    if now < state.locked_until:
        until = datetime.datetime.fromtimestamp(state.locked_until).astimezone()
        raise LockedOutError(
            f"user {user!r} is locked out after {state.failures} failed attempts: "
            f"try again after {until.isoformat(timespec='seconds')} "
            f"(in {state.locked_until - now:.0f} s)",
            until=state.locked_until,
        )


def record(state: BackoffState, policy: BackoffPolicy, accepted: bool, now: float) -> BackoffState:
    """The state after one scored attempt."""
    if accepted:
        return BackoffState()
    failures = state.failures + 1
    lockout = policy.lockout_seconds(failures)
    return BackoffState(failures, now + lockout if lockout > 0 else 0.0)
