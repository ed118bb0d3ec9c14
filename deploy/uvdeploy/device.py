"""A device of a Flower run: its folder of samples, its SDK template store, its local update.

The ClientApp (:mod:`.client`) hands each request here; this module does the work with the
simulator's own code (:func:`uvtrain.batches.draw_batches`, :func:`uvtrain.engine.local_update`)
and the SDK's (decoding, codewords, the encrypted store, enrollment)."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from uvsdk.bundle import Code
from uvsdk.codeword import unpack_generator
from uvtrain.algorithms.base import overrides
from uvtrain.batches import draw_batches, epoch_batches
from uvtrain.engine import local_update, split_parameters
from uvtrain.errors import TrainingError
from uvtrain.io import atomic_write, read_json, write_json

from .dp import private_update
from .errors import DeviceError
from .settings import DeploySettings, build_model, from_arrays, pack, unpack, view_spec

#: The device's record of the last round it sent an update in (the participation rule's half
#: that the device keeps, :meth:`Device.take_part`), in its store folder.
PARTICIPATION = "participation.json"


class Device:
    """One device's view of a run: its folder, its template store, its settings."""

    def __init__(self, node_config: dict[str, Any], settings: DeploySettings) -> None:
        self.settings = settings
        if "data" not in node_config or "store" not in node_config:
            raise DeviceError("the node config needs data='FOLDER' and store='FOLDER'")
        self.data = Path(str(node_config["data"])).expanduser()
        self.store_dir = Path(str(node_config["store"])).expanduser()
        self.user = str(node_config.get("user", "default"))
        self.bundle_path = Path(str(node_config.get("bundle", self.store_dir / "model.uvb")))
        self.allow_plain = str(node_config.get("allow_plain_feduv", "false")).lower() == "true"
        self._store: Any = None
        self._samples: np.ndarray | None = None

    # -- the SDK's store ---------------------------------------------------------------------

    @property
    def store(self) -> Any:
        from uvsdk.template import TemplateStore

        if self._store is None:
            self._store = TemplateStore(self.store_dir)
        return self._store

    def template(self) -> Any:
        """The user's template, or ``None``."""
        return self.store.load(self.user) if self.store.exists(self.user) else None

    def status(self, code_sha256: str | None) -> dict[str, Any]:
        """What the server may know at registration: the user id it assigned before (if any),
        whether a codeword of this run's code is held (not the codeword), the sample count."""
        template = self.template()
        user_id = -1 if template is None or template.user_id is None else int(template.user_id)
        has_codeword = bool(
            template is not None
            and template.codeword is not None
            and template.code_sha256 == code_sha256
        )
        return {"user_id": user_id, "codeword": has_codeword, "samples": len(self.samples())}

    def assign(self, user_id: int, code: Any | None) -> None:
        """Take the server's user id; with the run's ``code`` (sent when the method's devices hold a
        codeword), make the codeword with the SDK (kept encrypted)."""
        from uvsdk import Verifier
        from uvsdk.template import Template

        template = self.template()
        if code is not None:
            if template is not None and template.codeword is not None:
                if template.code_sha256 == code.fingerprint and template.user_id == user_id:
                    return
                raise DeviceError(
                    f"user {self.user!r} already holds a codeword of another code or id: "
                    "delete the template (uvsdk delete) to join this federation"
                )
            Verifier(store=self.store).new_codeword(self.user, user_id, code=code)
            return
        if template is None:
            self.store.save(Template(user=self.user, created=time.time(), user_id=user_id))
        elif template.user_id != user_id:
            self.store.save(template.replace(user_id=user_id))

    # -- data ----------------------------------------------------------------------------------

    def samples(self) -> np.ndarray:
        """The training samples: every usable file of ``data``, decoded as the SDK decodes it
        (audio cut into the model's windows, images resized), stacked."""
        if self._samples is not None:
            return self._samples
        from uvsdk.errors import MediaError

        if not self.data.is_dir():
            raise DeviceError(f"the data folder {self.data} does not exist")
        source, pieces, skipped = self.settings.input, [], 0
        for path in sorted(p for p in self.data.iterdir() if p.is_file()):
            if path.name.startswith("."):
                continue
            try:
                sample = source.load(path)
                source.check(sample, name=path.name)
                pieces.extend(source.windows(sample))
            except MediaError:
                skipped += 1
        if not pieces:
            raise DeviceError(f"no usable samples in {self.data} ({skipped} file(s) skipped)")
        self._samples = np.concatenate(pieces)
        return self._samples

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

    def take_part(self, round_number: int, period: int) -> None:
        """The device's half of the participation rule (``dp_period``, :mod:`uvtrain.privacy`):
        refuse a second round in one period of ``period`` rounds, whatever the server's
        selection did, and record this one before the update leaves. The record is the last
        round taken part in: a round numbered lower starts a new run. It holds the server to
        its own numbering of rounds; a server that renumbers them is not bounded by it
        (docs/privacy.md)."""
        if period <= 0:
            return
        path = self.store_dir / PARTICIPATION
        if path.exists():
            try:
                last = read_json(path)
                before, window = int(last["round"]), int(last["period"])
            except (TrainingError, KeyError, TypeError, ValueError):
                raise DeviceError(f"{path}: not a participation record; remove it") from None
            same = window == period and (before - 1) // period == (round_number - 1) // period
            if same and round_number >= before:
                first = (round_number - 1) // period * period + 1
                raise DeviceError(
                    f"refusing round {round_number}: this device took part in round {before}, "
                    f"and the run allows one round in each period of {period} (rounds {first}-"
                    f"{first + period - 1})"
                )
        self.store_dir.mkdir(parents=True, exist_ok=True)
        write_json(path, {"round": round_number, "period": period})

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

    # -- the end of the run ---------------------------------------------------------------------

    def enroll(self, bundle: bytes, target_tpr: float) -> dict[str, Any]:
        """Write the final bundle and enroll with it (the warm-up threshold at ``target_tpr``)."""
        from uvsdk import Verifier

        self.bundle_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.bundle_path, bundle)
        verifier = Verifier(self.bundle_path, store=self.store)
        report = verifier.enroll(self.data, user=self.user, target_tpr=target_tpr)
        return {"enrolled": True, "mode": report.mode, "samples": report.used}


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(secrets.randbits(63))


def code_from_request(request: dict[str, Any]) -> Code | None:
    """The BCH code the server sent at registration (a method whose devices hold a codeword), or
    ``None``."""
    if not request.get("generator"):
        return None
    n, k = int(request["n"]), int(request["k"])
    generator = unpack_generator(str(request["generator"]), k, n)
    return Code("bch", n, k, int(request["d_min"]), int(request["id_bits"]), generator)
