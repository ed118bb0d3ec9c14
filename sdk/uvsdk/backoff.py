"""Failed-attempt back-off, as FIDO and Android ask of biometric verifiers.

Every scored attempt counts. After ``attempts`` consecutive rejections the user is locked out for
``base_seconds``, and each further rejection doubles the lock-out (``factor``), up to
``max_seconds``; an acceptance resets the count. The state lives inside the encrypted template,
protected by AES-GCM, and its generation is checked against a record kept outside the file
(:mod:`uvsdk.template`), so editing a file cannot reset it and putting an older copy back is
detected (refused for good in keyring mode; see docs/sdk.md's threat model for file-only stores).

The arithmetic is capped: any number of failures gives a finite lock-out of at most
``max_seconds``, so a huge failure count can neither overflow nor stop the counting.
"""

from __future__ import annotations

import datetime
import math
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
        numbers = (self.base_seconds, self.factor, self.max_seconds)
        if (
            isinstance(self.attempts, bool)
            or not isinstance(self.attempts, int)
            or not all(isinstance(x, int | float) and math.isfinite(x) for x in numbers)
            or not 1 <= self.attempts <= 1000
            or self.base_seconds < 0
            or not 1 <= self.factor <= 1000
            or not 0 <= self.max_seconds <= 10 * 365 * 86400
        ):
            raise ValueError(
                "back-off needs 1 <= attempts <= 1000, base_seconds >= 0, 1 <= factor <= 1000 "
                "and 0 <= max_seconds <= 10 years, all finite"
            )

    def lockout_seconds(self, failures: int) -> float:
        """Lock-out after the given number of consecutive failures (0 below ``attempts``).

        ``base · factor^(failures − attempts)``, capped at ``max_seconds``; computed so that it
        never overflows, whatever ``failures`` is.
        """
        if failures < self.attempts:
            return 0.0
        if self.base_seconds == 0 or self.max_seconds == 0:
            return 0.0
        exponent = failures - self.attempts
        if self.factor > 1 and exponent * math.log(self.factor) >= math.log(
            self.max_seconds / self.base_seconds
        ):
            return float(self.max_seconds)
        return float(min(self.max_seconds, self.base_seconds * self.factor**exponent))


@dataclass(frozen=True)
class BackoffState:
    """Consecutive rejections and the Unix time until which verification is refused."""

    failures: int = 0
    locked_until: float = 0.0

    def __post_init__(self) -> None:
        if (
            isinstance(self.failures, bool)
            or not isinstance(self.failures, int)
            or self.failures < 0
            or not isinstance(self.locked_until, int | float)
            or not math.isfinite(self.locked_until)
        ):
            raise ValueError("back-off state needs failures >= 0 and a finite locked_until")


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
    failures = min(state.failures + 1, 2**31)  # bounded: the lock-out is capped long before
    lockout = policy.lockout_seconds(failures)
    return BackoffState(failures, now + lockout if lockout > 0 else 0.0)
