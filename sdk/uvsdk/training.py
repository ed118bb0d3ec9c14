"""How a bundle's model was trained: the manifest's optional ``training`` object (docs/spec.md
§3.10).

Under user-level differential privacy a FedUV model cannot verify its training users well by
their codewords: without user ``k`` the model is independent of ``k``'s codeword, so the test
``score(v_k, x) ≥ τ`` is a membership test, and an (ε, δ)-DP run floors its EER
(``membership_eer_floor``, computed by the trainer). Enrollment after training (prototype mode)
is not bounded that way. The manifest therefore says how the model was trained and which mode
the SDK enrolls in by default::

    "training": {"method": "feduv",
                 "privacy": {"mechanism": "distributed", "epsilon": 8.0, "delta": 1e-06,
                             "simulated_deployment": false, "membership_eer_floor": 0.39,
                             "epsilon_server": 22.4},
                 "enrollment": "prototype"}

``privacy`` is ``null`` for a run without DP. ``epsilon`` holds against anyone who sees the
released model (amplification by subsampling); ``epsilon_server`` against the server that ran
training, which picks the cohorts (no amplification; with ``central`` noise, against anyone who
knows the cohorts: the server adds the noise and sees the updates). ``epsilon_server`` is
optional — bundles exported before it existed (spec version 4 and earlier) lack it and keep
loading, signed as they are — but validated when present. Nothing here is secret.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .calibration import MODES as ENROLLMENT_MODES
from .errors import BundleError

MECHANISMS = ("central", "distributed")
_TRAINING_KEYS = {"method", "privacy", "enrollment"}
_PRIVACY_KEYS = {
    "mechanism",
    "epsilon",
    "delta",
    "simulated_deployment",
    "membership_eer_floor",
    "epsilon_server",
}
#: Who ``epsilon_server`` holds against, by placement of the noise.
_SERVER_ADVERSARY = {
    "distributed": "against the server that ran training",
    "central": "against anyone who knows who trained in each round (not the server, which "
    "added the noise)",
}


#: How far below :func:`membership_floor_bound` a stated floor may be (the trainer's PLD floor,
#: rounded, is 0 where the bound is 1e-66; issue 46 measured every other setting above it).
FLOOR_TOLERANCE = 1e-6


def membership_floor_bound(epsilon: float, delta: float) -> float:
    """``(1 − δ) / (1 + e^ε)``: the lowest EER of a membership test that one ``(ε, δ)`` point
    of a guarantee allows (Kairouz, Oh and Viswanath, ICML 2015, Thm. 2.1, at FPR = FNR).

    A run's ``membership_eer_floor`` is the largest such bound over its whole privacy profile
    (docs/privacy.md), so it is never below this one for the ``(ε, δ)`` it states: a manifest
    claiming ε = 1e-300 with a floor of 0 claims what no guarantee gives. Computed as
    ``(1 − δ) e^−ε / (1 + e^−ε)``, which does not overflow."""
    tail = math.exp(-epsilon)
    return (1.0 - delta) * tail / (1.0 + tail)


@dataclass(frozen=True)
class Privacy:
    """The user-level DP guarantee of the run (``training.privacy``)."""

    mechanism: str
    epsilon: float
    delta: float
    simulated_deployment: bool
    membership_eer_floor: float
    #: ``ε`` against the server that picked the cohorts; ``None``: not stated (older bundles)
    epsilon_server: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "simulated_deployment": self.simulated_deployment,
            "membership_eer_floor": self.membership_eer_floor,
        }
        if self.epsilon_server is not None:
            data["epsilon_server"] = self.epsilon_server
        return data

    def describe(self) -> str:
        """``user-level DP: ε = 8 against anyone who sees the released model, ε = 22.4 against
        the server that ran training (δ = 1e-06, distributed)``, plus the simulated scale."""
        server = (
            "ε against the server that ran training not stated"
            if self.epsilon_server is None
            else f"ε = {self.epsilon_server:.3g} {_SERVER_ADVERSARY[self.mechanism]}"
        )
        text = (
            f"user-level DP: ε = {self.epsilon:.3g} against anyone who sees the released model, "
            f"{server} (δ = {self.delta:g}, {self.mechanism})"
        )
        if self.simulated_deployment:
            text += ", at a simulated deployment scale"
        return text

    @classmethod
    def from_dict(cls, data: Any) -> Privacy:
        if not isinstance(data, dict):
            raise BundleError("manifest: training.privacy must be an object or null")
        _refuse_unknown(data, _PRIVACY_KEYS, "training.privacy")
        mechanism = data.get("mechanism")
        if mechanism not in MECHANISMS:
            raise BundleError(
                "manifest: training.privacy.mechanism must be 'central' or 'distributed'"
            )
        epsilon = _number(data, "epsilon")
        if not epsilon > 0:
            raise BundleError("manifest: training.privacy.epsilon must be > 0")
        delta = _number(data, "delta")
        if not 0 < delta < 1:
            raise BundleError("manifest: training.privacy.delta must be in (0, 1)")
        simulated = data.get("simulated_deployment")
        if not isinstance(simulated, bool):
            raise BundleError(
                "manifest: training.privacy.simulated_deployment must be true or false"
            )
        floor = _number(data, "membership_eer_floor")
        if not 0 <= floor <= 0.5:
            raise BundleError("manifest: training.privacy.membership_eer_floor must be in [0, 0.5]")
        server = None
        if "epsilon_server" in data:  # optional: bundles before spec version 5 lack it
            server = _number(data, "epsilon_server")
            if not server > 0:
                raise BundleError("manifest: training.privacy.epsilon_server must be > 0")
        if floor < membership_floor_bound(epsilon, delta) - FLOOR_TOLERANCE:
            raise BundleError(
                "manifest: training.privacy.membership_eer_floor is below (1 - delta) / "
                "(1 + e^epsilon), the least that epsilon and delta themselves guarantee: "
                "the privacy claims contradict each other"
            )
        return cls(mechanism, epsilon, delta, simulated, floor, server)


@dataclass(frozen=True)
class Training:
    """The manifest's ``training``: the method, the DP guarantee (``None``: trained without DP)
    and the enrollment mode the SDK uses by default."""

    method: str
    privacy: Privacy | None
    enrollment: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "privacy": None if self.privacy is None else self.privacy.to_dict(),
            "enrollment": self.enrollment,
        }

    @classmethod
    def from_dict(cls, data: Any, output_kind: str) -> Training:
        """Validate ``training``; ``enrollment`` ``codeword`` needs a codeword bundle."""
        if not isinstance(data, dict):
            raise BundleError("manifest: training must be an object")
        _refuse_unknown(data, _TRAINING_KEYS, "training")
        method = data.get("method")
        if not isinstance(method, str) or not method:
            raise BundleError("manifest: training.method must be a non-empty string")
        if "privacy" not in data:
            raise BundleError("manifest: training.privacy is missing (null: trained without DP)")
        privacy = None if data["privacy"] is None else Privacy.from_dict(data["privacy"])
        enrollment = data.get("enrollment")
        if enrollment not in ENROLLMENT_MODES:
            raise BundleError("manifest: training.enrollment must be 'prototype' or 'codeword'")
        if enrollment == "codeword" and output_kind != "codeword":
            raise BundleError(
                "manifest: training.enrollment 'codeword' needs output.kind 'codeword'"
            )
        if enrollment == "codeword" and privacy is not None:
            raise BundleError(
                "manifest: training.enrollment 'codeword' contradicts training.privacy: under "
                "DP, verifying a user by their trained codeword is a membership test the privacy "
                "bounds (enrollment must be 'prototype')"
            )
        return cls(method, privacy, enrollment)


def _refuse_unknown(data: dict, known: set[str], name: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise BundleError(f"manifest: {name} has an unknown key {unknown[0]!r}")


def _number(data: dict, key: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BundleError(f"manifest: training.privacy.{key} must be a number")
    if not math.isfinite(value):
        raise BundleError(f"manifest: training.privacy.{key} must be finite")
    return float(value)
