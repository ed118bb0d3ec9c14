"""A device's round: its local update with the simulator's own code
(:func:`uvtrain.batches.draw_batches`, :func:`uvtrain.engine.local_update`), the secrets its
method holds, and the checks it makes before an update leaves it."""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np
import torch

from uvtrain.algorithms.base import overrides
from uvtrain.batches import draw_batches, epoch_batches
from uvtrain.engine import local_update, split_parameters

from .device import Device
from .dp import private_update
from .errors import DeviceError
from .settings import DeploySettings, build_model, from_arrays, pack, unpack, view_spec


class TrainingDevice(Device):
    """A device in a round: :class:`~uvdeploy.device.Device` with the run's whole settings."""

    def __init__(self, node_config: dict[str, Any], settings: DeploySettings) -> None:
        super().__init__(node_config, settings.input)
        self.settings = settings

    # -- a round -------------------------------------------------------------------------------

    def constants(self, index: int, code_sha256: str = "") -> dict[str, torch.Tensor]:
        """``index`` (its row in the server's view) and the secrets the method's device holds
        (:attr:`~uvtrain.algorithms.base.FedAvg.device_secrets`; FedUV: the codeword, from the
        store, checked to be of the run's code, named by ``code_sha256``)."""
        constants = {"index": torch.tensor(index)}
        if "codeword" in self.settings.run.method.device_secrets:
            from uvsdk.codeword import bipolar

            template = self.template()
            if template is None or template.codeword is None:
                raise DeviceError(f"user {self.user!r} holds no codeword: not registered")
            if template.code_sha256 != code_sha256:
                raise DeviceError(f"user {self.user!r}'s codeword is of another code")
            constants["codeword"] = torch.from_numpy(bipolar(template.codeword))
        return constants

    def check_round(self, secure: bool, dp: str = "off") -> None:
        """Refuse a plain round of a method whose plain update reveals a device's secret
        (:attr:`~uvtrain.algorithms.base.FedAvg.update_reveals_secret`; FedUV's codeword,
        docs/privacy.md), unless the node config says ``allow_plain_feduv=true``; refuse a
        distributed-DP round outside SecAgg+ (the update would carry only a share of the noise)
        and a round whose DP is not the run's."""
        algorithm = self.settings.run.method
        if algorithm.update_reveals_secret and not secure and not self.allow_plain:
            secret = " and ".join(algorithm.device_secrets) or "a secret"
            raise DeviceError(
                f"refusing to send a plain {type(algorithm).__name__} update (it reveals the "
                f"{secret}): the server must run SecAgg+ (secagg=auto or on)"
            )
        if dp == "distributed" and not secure:
            raise DeviceError(
                "refusing to send a distributed-DP update outside SecAgg+: it carries only a "
                "share of the noise"
            )
        if dp != self.settings.mechanism:
            raise DeviceError(
                f"the round asks for dp {dp!r}, the run's settings say {self.settings.mechanism!r}"
            )

    def train(
        self,
        arrays: list[np.ndarray],
        config: dict[str, Any],
        state: dict[str, torch.Tensor],
        rng: np.random.Generator | None = None,
        noise: torch.Generator | None = None,
    ) -> tuple[list[np.ndarray], int, dict[str, Any], dict[str, torch.Tensor]]:
        """One round: the run's local update from the global weights, with the simulator's code.

        Returns the parameter *update* (θ_k − θ: what SecAgg+ sums; small values quantise
        finely), the sample count, the metrics (loss and the method's message) and the private
        state to keep. With DP (``config["dp"]``, :func:`uvdeploy.dp.private_update`) the update
        is clipped (and noised: distributed) with the bit of adaptive clipping appended, and the
        count is 1 (every device weighs the same). ``rng``, ``noise``: tests pass their own; a
        device draws its batches and its noise from fresh secret seeds, which it never keeps.
        """
        settings, algorithm = self.settings, self.settings.run.method
        model = build_model(settings, int(config["devices"]), on_device=True)
        params, buffers = split_parameters(model)
        glob = from_arrays(params.keys(), arrays)
        dim = int(model.backbone.embedding_dim)
        shared: dict[str, torch.Tensor] = {}
        if config.get("shared"):
            expected = view_spec(algorithm, int(config["devices"]), dim)
            shared = unpack(config["shared"], expected, "the server's shared state")
        constants = self.constants(int(config["index"]), str(config.get("code_sha256", "")))
        private = state or {
            name: value[0] for name, value in algorithm.init_private(1, dim, _generator()).items()
        }
        private = algorithm.client_receive(private, constants, shared)
        samples = torch.as_tensor(self.samples())
        rng = rng or np.random.default_rng(secrets.randbits(64))  # tests pass their own
        run = settings.run
        schedule = run.schedule
        if schedule.local_epochs is not None:  # E passes over the device's own samples
            batches = epoch_batches(
                samples, schedule.local_epochs, schedule.batch_size, settings.crop, rng
            )
        else:
            batches = draw_batches(
                samples, schedule.local_steps, schedule.batch_size, settings.crop, rng
            )
        trained, private, losses = local_update(
            model, buffers, algorithm, glob, private, constants, shared, batches, config["lr"]
        )
        loss = float(losses.mean())
        if not np.isfinite(loss):
            raise DeviceError(f"the local loss became {loss}")
        metrics: dict[str, Any] = {"loss": loss}
        if overrides(algorithm, "client_message"):
            message_constants = dict(constants)
            if algorithm.message_noise:
                message_constants["noise"] = torch.randn(dim, generator=_generator())
            message = algorithm.client_message(private, message_constants, shared)
            metrics["message"] = pack(message)
        delta = {name: trained[name] - glob[name] for name in sorted(glob)}
        if str(config.get("dp", "off")) != "off":
            if int(config["dp_survivors"]) < (settings.min_cohort if settings.secure else 1):
                raise DeviceError(
                    f"the round calibrates the noise to {config['dp_survivors']} survivors, "
                    f"fewer than the run's min_cohort {settings.min_cohort}"
                )
            update = private_update(delta, config, noise)
            self.take_part(int(config.get("round", 0)), int(config.get("dp_period", 0)))
            return update, 1, metrics, private
        update = [value.numpy() for value in delta.values()]
        return update, len(samples), metrics, private


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(secrets.randbits(63))
