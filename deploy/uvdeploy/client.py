"""The Flower ClientApp: a device that trains on its own folder and keeps its secrets.

A SuperNode runs it with its node config::

    flower-supernode --superlink HOST:PORT \\
        --node-config "data='/path/to/my/clips' store='/path/to/templates' user='alice'"

``data`` is the folder of the user's own recordings (or images), decoded by the SDK exactly as
enrollment decodes them; ``store`` is the SDK's encrypted template store, opened with
``$UVSDK_PASSPHRASE`` (or the OS keyring); ``bundle`` (default ``STORE/model.uvb``) is where the
final model is written; ``user`` names the template (default ``default``).

What leaves the device: its parameter update (masked by SecAgg+ for FedUV, so the server sees
only the cohort's sum; with DP clipped and, distributed, with the device's share of the noise,
whose seed never leaves it), its sample count, its loss, its user id (assigned by the server), and its
method's message — FedHide's proxy prototype, FedAwS's class embedding (as the FedAwS paper has
it). What never leaves it: its samples, its FedUV codeword (made by the SDK from the server's
code and kept encrypted in the store), its private prototype, its threshold.

The device refuses to send a plain FedUV update (one not inside SecAgg+), which would hand its
codeword to the server, unless its node config says ``allow_plain_feduv=true``.
"""

from __future__ import annotations

from typing import Any

# Only Flower at import: the SuperNode starts a fresh app process for every message. SecAgg+'s
# key-exchange stages never reach the training code, and registration and enrollment are the
# SDK's work (uvdeploy.device, uvdeploy.inputs): torch is imported by a round's training only.
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.compat.common import recorddict_compat as compat

_PRIVATE = "uvtrain.private"  # the device's private state between rounds (never sent)


def _secure_when_asked(msg: Message, context: Context, call_next: Any) -> Message:
    """SecAgg+ for the rounds the server runs it in; plain rounds pass straight through."""
    if RECORD_KEY_CONFIGS in msg.content.config_records:
        return secaggplus_mod(msg, context, call_next)
    return call_next(msg, context)


app = ClientApp(mods=[_secure_when_asked])


def _device(context: Context) -> Any:
    """The device for registration and enrollment: only the run's input keys, no torch."""
    from .device import Device
    from .inputs import InputSettings

    source = InputSettings.from_run_config(context.run_config).input
    return Device(dict(context.node_config), source)


def _training_device(context: Context) -> Any:
    """The device for a round: the run's whole settings (the method, its model: torch)."""
    from .settings import DeploySettings
    from .training import TrainingDevice

    settings = DeploySettings.from_run_config(context.run_config)
    return TrainingDevice(dict(context.node_config), settings)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """A round: the local update (θ_k − θ) as a legacy FitRes, which SecAgg+'s mod can mask."""
    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    secure = RECORD_KEY_CONFIGS in msg.content.config_records
    if fitins.config.get("task") == "centre":  # no training: the chain's mean (uvdeploy.centre)
        return _centre_reply(msg, context, fitins, secure)
    me = _training_device(context)
    me.check_round(secure, str(fitins.config.get("dp", "off")))
    kept = context.state.array_records.get(_PRIVATE)
    state = dict(kept.to_torch_state_dict()) if kept else {}
    update, count, metrics, private = me.train(
        parameters_to_ndarrays(fitins.parameters), dict(fitins.config), state
    )
    if private:
        context.state.array_records[_PRIVATE] = ArrayRecord(
            {k: v.detach().contiguous() for k, v in private.items()}
        )
    fitres = FitRes(Status(Code.OK, "ok"), ndarrays_to_parameters(update), count, metrics)
    return Message(compat.fitres_to_recorddict(fitres, keep_input=False), reply_to=msg)


def _centre_reply(msg: Message, context: Context, fitins: FitIns, secure: bool) -> Message:
    """A centre round: the device's chain vector (:meth:`~uvdeploy.device.Device.chain_vector`),
    through the DP mechanism's user half when the run has DP, sent only inside SecAgg+."""
    from .device import DeviceError

    if not secure:
        raise DeviceError("refusing to send this device's mean voice outside SecAgg+")
    config = dict(fitins.config)
    vector = _device(context).chain_vector(bytes(config["bundle"]), str(config["bundle_sha256"]))
    if config.get("dp", "off") == "off":
        arrays = [vector]
    else:
        import torch

        from .dp import private_update

        arrays = private_update({"centre": torch.from_numpy(vector)}, config)
    fitres = FitRes(Status(Code.OK, "ok"), ndarrays_to_parameters(arrays), 1, {"loss": 0.0})
    return Message(compat.fitres_to_recorddict(fitres, keep_input=False), reply_to=msg)


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Registration (``status``, ``assign``) and the final ``enroll``."""
    from .device import DeviceError, code_from_request

    me = _device(context)
    request = msg.content.config_records["uvtrain"]
    action = request["action"]
    if action == "status":
        reply = me.status(str(request["code_sha256"]) or None)
    elif action == "assign":
        me.assign(int(request["user_id"]), code_from_request(dict(request)))
        reply = {"assigned": True}
    elif action == "enroll":
        reply = me.enroll(bytes(request["bundle"]), float(request["target_tpr"]))
    else:
        raise DeviceError(f"unknown request {action!r}")
    return Message(RecordDict({"uvtrain": ConfigRecord(reply)}), reply_to=msg)
