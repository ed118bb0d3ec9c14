"""The scoring maths against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uvsdk.backoff import BackoffPolicy, BackoffState, check, record
from uvsdk.errors import LockedOutError
from uvsdk.scoring import (
    acceptance_rate,
    codeword_scores,
    cosine_scores,
    leave_one_out_scores,
    prototype,
    warmup_threshold,
)


def test_warmup_threshold_is_the_floor_n_1_minus_q_th_smallest() -> None:
    scores = np.array([0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 1.0])
    assert warmup_threshold(scores, 0.8) == 0.2  # floor(10 * 0.2) = 2 -> 2nd smallest
    assert warmup_threshold(scores, 0.7) == 0.3  # floor(3.0000000000000004) = 3
    assert warmup_threshold(scores, 0.95) == 0.1  # floor(0.5) = 0 -> the smallest
    assert warmup_threshold(np.arange(100) / 100, 0.9) == 0.09  # 100 * (1 - 0.9) = 9.999...98
    assert acceptance_rate(scores, warmup_threshold(scores, 0.8)) == 0.9


def test_warmup_threshold_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        warmup_threshold(np.array([]), 0.9)
    with pytest.raises(ValueError):
        warmup_threshold(np.array([0.5]), 0.0)


def test_codeword_score_rescales_to_root_n() -> None:
    v = np.array([1.0, -1.0, 1.0, -1.0])
    assert codeword_scores(v, np.array([[3.0, -3.0, 3.0, -3.0]]))[0] == pytest.approx(1.0)
    assert codeword_scores(v, np.array([[1.0, 1.0, 1.0, 1.0]]))[0] == pytest.approx(0.0)
    # z = (1, 0, 0, 0): rescaled to norm 2 is (2, 0, 0, 0); v . that / 4 = 0.5
    assert codeword_scores(v, np.array([[1.0, 0.0, 0.0, 0.0]]))[0] == pytest.approx(0.5)
    # a stack of codewords scores every output against every codeword: [N, U]
    stack = np.stack([v, -v])
    np.testing.assert_allclose(
        codeword_scores(stack, np.array([[3.0, -3.0, 3.0, -3.0], [1.0, 0.0, 0.0, 0.0]])),
        [[1.0, -1.0], [0.5, -0.5]],
    )
    np.testing.assert_allclose(
        cosine_scores(np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([[3.0, 0.0]])), [[1.0, 0.0]]
    )


def test_prototype_and_leave_one_out_by_hand() -> None:
    vectors = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    # unit vectors: (1,0), (0,1), (s,s) with s = 1/sqrt(2); mean = ((1+s)/3, (1+s)/3)
    np.testing.assert_allclose(prototype(vectors), [1 / math.sqrt(2)] * 2)
    s = 1 / math.sqrt(2)
    # first: others (0,1)+(s,s) = (s, 1+s); cosine with (1,0) = s / |(s, 1+s)|
    expected_first = s / math.hypot(s, 1 + s)
    # third: others (1,0)+(0,1) = (1,1); cosine with (s,s) = 1
    loo = leave_one_out_scores(vectors)
    assert loo[0] == pytest.approx(expected_first)
    assert loo[1] == pytest.approx(expected_first)
    assert loo[2] == pytest.approx(1.0)
    assert cosine_scores(np.array([0.0, 3.0]), vectors)[1] == pytest.approx(1.0)


def test_backoff_locks_after_five_and_doubles() -> None:
    policy = BackoffPolicy()
    state, now = BackoffState(), 1000.0
    for _ in range(4):
        state = record(state, policy, accepted=False, now=now)
        check(state, "u", now)  # not locked yet
    state = record(state, policy, accepted=False, now=now)
    assert state == BackoffState(5, now + 30)
    with pytest.raises(LockedOutError, match="try again after") as raised:
        check(state, "u", now + 29)
    assert raised.value.until == now + 30
    check(state, "u", now + 30)
    state = record(state, policy, accepted=False, now=now + 30)
    assert state.locked_until == now + 30 + 60
    state = record(state, policy, accepted=False, now=now + 90)
    assert state.locked_until == now + 90 + 120
    assert record(state, policy, accepted=True, now=now + 300) == BackoffState()
    assert BackoffPolicy(max_seconds=100).lockout_seconds(50) == 100
    with pytest.raises(ValueError):
        BackoffPolicy(attempts=0)
