"""A federation that measures a recording chain's mean voice (docs/spec.md §6.8) on the devices:
no recording, and no device's own vector, ever reaches the server (``centre_bundle``).

What ``uvexport calibrate --centre PEOPLE`` does with the recordings of at least five people in
hand, the devices do here with their own: the server sends the bundle (its score rule centred:
calibrated with ``--centre``, or a bundle whose ``score_norm`` names a centre); each device
embeds every usable file of its folder with the SDK (:meth:`uvdeploy.device.Device.chain_vector`:
the mean of its clips' unit vectors, so its norm is at most 1) and sends it inside SecAgg+, after
the one DP mechanism's user half (:func:`uvdeploy.dp.private_update`: clipped to ``C`` = 1 and,
distributed, with its share of the noise); the server unmasks only the sum, releases
``(Σ_k u_k + N(0, z²C²)) / N`` through the mechanism's server half
(:meth:`~uvtrain.privacy.Mechanism.server_half`, the expected cohort ``N``: every device once), writes it
as ``centre.f32`` into ``OUT/model.uvb`` (:func:`uvexport.centre.write_centred`, re-signed) and
sends that bundle to every device, which enrolls with it.

**Privacy.** One release in which every device takes part once: nothing is sampled, so the ε
against the server (which knows who took part) and against whoever holds the bundle are the same
figure, the Gaussian mechanism's of multiplier ``z`` under add/remove-one adjacency (adding or
removing a device moves the sum by at most ``C``; the denominator ``N`` is fixed beforehand).
``dp = "distributed"`` (the default): the server sees only the noisy sum. ``dp = "off"``:
SecAgg+ alone, the server and the bundle see the exact mean of at least ``min_cohort`` devices
(what ``uvexport calibrate --centre`` ships too). The mean is no secret of the bundle (the spec
says so): DP is what bounds what it says of any one device.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.common import FitIns, ndarrays_to_parameters

from uvtrain.errors import ConfigError
from uvtrain.io import BUNDLE, REPORT, STATUS, write_json
from uvtrain.privacy import mechanism_from_plan, secret_noise

from .dp import LEDGER, FlowerPrivacy, min_survivors, released
from .dp import plan as plan_privacy
from .errors import DeploymentError
from .registry import DeviceRoster
from .rounds import FlowerSecAggPlus
from .settings import DeploySettings

#: The run-config ``task`` value of a centre round's instructions (the device's train handler).
CENTRE_TASK = "centre"
#: The one array a centre round's replies sum: the devices' chain vectors.
CENTRE = "centre"
#: The largest expected norm of the DP noise on the released mean (``z·C·√(N/m_min)/N·√dim``)
#: a run may release: noise in the mean is in every vector it is taken out of, so it moves every
#: score alike. Measured on CAM++'s six held-out sources (``benchmarks/far_centring.py
#: --centre-devices N --centre-epsilon E``, three noise draws, docs/deploy.md): at 0.128 and
#: below the stated FAR held on every fold-condition in every draw; at 0.166 one draw of three
#: missed one (2.08×); at 0.26 and above every draw missed (at 0.83, 71 % of strangers accepted).
MAX_NOISE_NORM = 0.13


def single_release(settings: DeploySettings) -> DeploySettings:
    """``settings`` as one release in which every device takes part (1 round, fraction 1):
    what the DP plan of a centre run is computed for."""
    schedule = dataclasses.replace(settings.run.schedule, rounds=1, fraction=1.0)
    return dataclasses.replace(settings, run=dataclasses.replace(settings.run, schedule=schedule))


def input_keys(bundle: Any) -> dict[str, Any]:
    """The run-config input keys (:class:`~uvdeploy.inputs.InputSettings`) of ``bundle``'s
    input, so that a device registers its files as the bundle decodes them."""
    from uvsdk.inputs import AudioInput

    spec = bundle.manifest.input
    if isinstance(spec, AudioInput):
        keys = ("sample_rate", "window_seconds", "hop_seconds", "min_seconds")
        return {"modality": "audio", **{key: getattr(spec, key) for key in keys}}
    return {"modality": "image", "image_size": f"{spec.height}x{spec.width}x{spec.channels}"}


def noise_norm(std: float, devices: int, survivors: int, dim: int) -> float:
    """The expected norm of the noise on a mean of ``dim`` entries that ``devices`` devices
    release when all of them are summed: their shares, each calibrated to ``survivors``
    (``m_min``) for a sum of standard deviation ``std``, add up to ``std·√(N/m_min)``, divided
    by ``N``."""
    return std * (devices / survivors) ** 0.5 / devices * dim**0.5


def devices_needed(settings: DeploySettings, std: float, dim: int, devices: int) -> int:
    """The fewest devices (more than ``devices``) whose release with noise ``std`` on the sum
    (this plan's ``z·C``; a larger population's default δ would ask a little more) has a noise
    norm within :data:`MAX_NOISE_NORM`; the norm falls as the devices grow."""

    def noise(count: int) -> float:
        return noise_norm(std, count, min_survivors(settings, count), dim)

    low, high = devices, max(2 * devices, 4)
    while noise(high) > MAX_NOISE_NORM:
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if noise(middle) > MAX_NOISE_NORM else (low, middle)
    return high


class CentreServer(DeviceRoster):
    """The server of a centre run (see the module's docstring): registration as a training
    run's (:meth:`DeviceRoster.register`, no code), one secure round, no training."""

    def __init__(self, settings: DeploySettings, grid: Any, context: Any, echo: Any = print):
        if not settings.centre_bundle:
            raise ConfigError("a centre run needs centre_bundle (the bundle to measure for)")
        self.settings = single_release(settings)
        self.grid, self.context, self.echo = grid, context, echo
        self.config = self.settings.run
        self.folder = Path(self.settings.out).expanduser()
        self.code = None
        self.secagg = FlowerSecAggPlus(
            grid,
            context,
            self.settings.num_shares,
            self.settings.reconstruction_threshold,
            timeout=self.settings.round_seconds,
        )
        self.dp: FlowerPrivacy | None = None

    def _bundle(self) -> tuple[Any, bytes]:
        """The bundle to measure for, refused before any device is asked when its score rule
        takes no chain's mean out."""
        from uvexport.centre import centred_spec
        from uvexport.errors import ExportError
        from uvsdk.bundle import Bundle
        from uvsdk.errors import UvsdkError

        path = Path(self.settings.centre_bundle).expanduser()
        try:
            bundle = Bundle(path)
            centred_spec(bundle, path.name)
        except (UvsdkError, ExportError) as error:
            raise ConfigError(f"centre_bundle: {error}") from None
        wanted = input_keys(bundle)
        given = {key: getattr(self.settings, key) for key in wanted}
        if given != wanted:
            shown = " ".join(f"{key}={value}" for key, value in wanted.items())
            raise ConfigError(f"centre_bundle: the run's input keys are not its bundle's ({shown})")
        return bundle, path.read_bytes()

    def _plan(self, devices: int, dim: int) -> FlowerPrivacy | None:
        """The release's mechanism for ``devices`` (``None`` with ``dp = "off"``): clipped to
        ``clip_norm`` (1: a chain vector's norm is at most 1), shares calibrated to ``m_min``;
        refused before any device is asked for its vector when the noise it would add to a
        mean of ``dim`` entries is expected above :data:`MAX_NOISE_NORM`."""
        plan = plan_privacy(self.settings, devices)
        if plan is None:
            return None
        survivors = min_survivors(self.settings, devices)
        std = plan.noise_multiplier * plan.clip_norm
        noise = noise_norm(std, devices, survivors, dim)
        if noise > MAX_NOISE_NORM:
            needed = devices_needed(self.settings, std, dim, devices)
            raise ConfigError(
                f"at ε = {plan.epsilon_server:.3g} the noise on the mean of {devices} devices "
                f"would have a norm of about {noise:.2f}, more than the {MAX_NOISE_NORM} under "
                "which the stated FAR was measured to hold (docs/deploy.md): it takes about "
                f"{needed} devices, or a larger dp_epsilon"
            )
        mechanism = mechanism_from_plan(plan, secret_noise, survivors)
        self.secagg.reconstruction_threshold = float(survivors)
        if released(self.folder) > 0:
            raise DeploymentError(
                f"{self.folder}: its devices' noisy mean was released already; measuring again "
                "would spend a second ε: start a new run folder"
            )
        return FlowerPrivacy(mechanism, survivors, self.folder / LEDGER)

    def run(self) -> dict[str, Any]:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self.folder / STATUS, {"state": "running"})
        bundle, blob = self._bundle()
        dim = int(bundle.manifest.dim)
        nodes = self.wait_for_devices()
        self.rows = self.register(nodes, None)
        if len(self.rows) < self.settings.min_cohort:
            raise DeploymentError(
                f"{len(self.rows)} device(s) registered: a chain's mean needs min_cohort = "
                f"{self.settings.min_cohort} (a mean of fewer reveals too much)"
            )
        devices = len(self.rows)
        self.dp = self._plan(devices, dim)
        if self.dp is not None:
            plan = self.dp.plan
            self.echo(
                f"{plan.mechanism} DP: one release of the mean of {devices} devices, each once: "
                f"ε = {plan.epsilon_server:.3g} against the server and anyone holding the "
                f"bundle, δ = {plan.delta:.2g} (add-or-remove-one; z = {plan.noise_multiplier:.3g}"
                f", C = {plan.clip_norm:g}), a sum of >= {self.dp.survivors} devices"
            )
        else:
            self.echo("no DP: SecAgg+ alone (the server sees the exact mean)")
        config: dict[str, Any] = {
            "task": CENTRE_TASK,
            "round": 1,
            "bundle": blob,
            "bundle_sha256": hashlib.sha256(blob).hexdigest(),
            **(self.dp.instructions() if self.dp is not None else {"dp": "off"}),
        }
        zeros = [np.zeros(dim, dtype=np.float32)]
        instructions = [(node, FitIns(ndarrays_to_parameters(zeros), config)) for node in self.rows]
        range_ = self.dp.quantization_range() if self.dp is not None else 8.0
        replies, mean = self.secagg.collect(instructions, 1, 1.0, range_)
        survivors = len(replies.node_ids)
        if mean is None or survivors < (self.dp.survivors if self.dp else devices):
            detail = replies.failures[0] if replies.failures else "secure aggregation halted"
            raise DeploymentError(
                f"the chain's mean: {survivors} of {devices} device(s) summed ({detail}); "
                "nothing released"
            )
        if len(mean) != 1 or np.shape(mean[0]) != (dim,):
            raise DeploymentError(f"the chain's mean: the sum is not one vector of {dim}")
        total = {CENTRE: torch.from_numpy(np.asarray(mean[0], np.float64) * survivors)}
        if self.dp is not None:
            self.dp.record(survivors, 1)
            base = {CENTRE: torch.zeros(dim, dtype=torch.float64)}
            released_, _ = self.dp.mechanism.server_half(base, total, None, survivors, 1)
            centre = released_[CENTRE].numpy()
        else:
            centre = total[CENTRE].numpy() / survivors
        norm = float(np.linalg.norm(centre))
        if not np.isfinite(centre).all() or not norm < 1:
            raise DeploymentError(
                f"the devices' noisy mean has norm {norm:.3g}, not below 1: the noise of this ε "
                f"swamps a mean of {devices} devices (more devices, or a larger dp_epsilon)"
            )
        from uvexport.centre import write_centred

        sign_key = None
        if self.settings.sign_key:
            from uvexport.bundle import load_signing_key

            sign_key = load_signing_key(self.settings.sign_key)
        stated = None
        if self.dp is not None:
            plan = self.dp.plan
            stated = {
                "mechanism": plan.mechanism,
                "epsilon": plan.epsilon_server,
                "delta": plan.delta,
                "noise_multiplier": plan.noise_multiplier,
                "clip_norm": plan.clip_norm,
                "min_survivors": self.dp.survivors,
            }
        release = {"source": "federation", "devices": devices, "summed": survivors}
        path = write_centred(
            bundle,
            centre.astype("<f4").tobytes(),
            devices,
            self.folder / BUNDLE,
            sign_key=sign_key,
            release={**release, "privacy": stated},
        )
        self.echo(f"wrote {path.name}: the mean voice of {survivors} of {devices} devices")
        enrolled: dict[str, Any] = {}
        if self.settings.export:
            target = self.config.target_tpr
            body = {"action": "enroll", "bundle": path.read_bytes(), "target_tpr": target}
            answers = self._query({node: body for node in self.rows})
            enrolled = {"devices_enrolled": sum(1 for r in answers.values() if r.get("enrolled"))}
            self.echo(f"{enrolled['devices_enrolled']} of {devices} device(s) enrolled")
        privacy = None
        if self.dp is not None:
            privacy = {**self.dp.plan.report(), "min_survivors": self.dp.survivors}
        report = {
            "task": CENTRE_TASK,
            "bundle": BUNDLE,
            "devices": devices,
            "survivors": survivors,
            "privacy": privacy,
            "enrolled": enrolled,
        }
        write_json(self.folder / REPORT, report)
        write_json(self.folder / STATUS, {"state": "finished", "task": CENTRE_TASK})
        self.echo(f"finished: {self.folder / REPORT}")
        return report
