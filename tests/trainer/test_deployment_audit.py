"""benchmarks/deployment_audit.py: the deployment's noise multiplier it audits, and the ceiling
and chance levels it tables beside the measured recovery (the audit itself, ``--participations``,
is tested in test_audit.py)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "deployment_audit.py"


@pytest.fixture(scope="module")
def benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deployment_audit", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_audited_noise_is_the_deployments_at_epsilon_8(benchmark: ModuleType) -> None:
    # uvtrain run --dp-epsilon 8 --dp-noise-cohort 1000 --dp-population 1000000 --rounds 800
    plan = benchmark.deployment_plan(8.0)
    assert plan.noise_multiplier == pytest.approx(0.4192, abs=5e-4)  # the PLD's (RDP: 0.4468)
    assert plan.sampling_rate == pytest.approx(0.001) and plan.rounds == 800
    assert plan.epsilon_release <= 8.0 * (1 + 1e-6)


def test_the_ceiling_against_hand_computed_values(benchmark: ModuleType) -> None:
    # one participation at z = 0.4468, c = 127: Φ(1 / (0.4468 √127)) = Φ(0.19861)
    one = benchmark.ceiling(0.4468, 1)
    assert one["bits"] == pytest.approx(0.578713, abs=1e-6)
    assert one["whole_raw"] == pytest.approx(one["bits"] ** 127)
    assert one["whole_decoded"] < 1e-15
    assert benchmark.ceiling(0.0, 1) == {"bits": 1.0, "whole_raw": 1.0, "whole_decoded": 1.0}
    assert benchmark.ceiling(1e6, 1)["bits"] == pytest.approx(0.5, abs=1e-6)
    # many participations: all bits, and every codeword after decoding
    assert benchmark.ceiling(0.4468, 10_000)["whole_decoded"] == pytest.approx(1.0)
    # decoding forgives 10 errors: P(Binomial(127, p) ≤ 10) by hand at p = 0.05
    by_hand = sum(math.comb(127, k) * 0.05**k * 0.95 ** (127 - k) for k in range(11))
    assert benchmark.binomial_at_most(127, 10, 0.05) == pytest.approx(by_hand)


def test_chance_levels(benchmark: ModuleType) -> None:
    level = benchmark.chance(48)
    assert level["bits"] == 0.5
    assert level["bits_band"] == pytest.approx(1 / math.sqrt(48 * 127))
    assert level["whole_raw"] == 2.0**-127
    assert level["whole_decoded"] == pytest.approx(
        sum(math.comb(127, i) for i in range(11)) / 2.0**127
    )
