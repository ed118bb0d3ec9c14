"""What the server and the devices of a Flower run agree on: the run's settings (Flower's run
config), the model they build from them, and how tensors travel inside Flower's records.

The run config holds the simulator's :class:`~uvtrain.config.RunConfig` keys (``method``,
``rounds``, ``fraction``, ``lr``, ``code_length``, λ, α, K, ...) plus what only a deployment
needs: the input the devices' files are decoded to (``modality``, ``sample_rate``,
``window_seconds``, ``hop_seconds``, ``min_seconds``, ``image_size``), ``secagg``, ``dp`` (the
simulator's privacy keys ``dp_epsilon``, ``clip_norm``, ... are run keys), the cohort and the
server's run folder ``out``. Both sides read the same values, so both build the same network.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from torch import nn

from uvsdk.archive import read_zip_members
from uvsdk.errors import BundleError, printable
from uvsdk.inputs import input_spec
from uvtrain.algorithms.base import FedAvg, Tensors, overrides
from uvtrain.config import RunConfig, flower_keys
from uvtrain.errors import ConfigError

from .errors import DeploymentError
from .inputs import InputSettings

#: The deployment's ``dp`` values (``auto``: distributed under SecAgg+, off otherwise).
DP_CHOICES = ("auto", "off", "central", "distributed")


@dataclass(frozen=True, kw_only=True)
class DeploySettings(InputSettings):
    """A Flower run's settings: the trainer's :class:`RunConfig` and the deployment's own keys,
    the input keys (:class:`~uvdeploy.inputs.InputSettings`, all a device's registration and
    enrollment read) among them.

    ``secagg``: ``"auto"`` (SecAgg+ for a method whose plain update reveals a secret,
    :attr:`~uvtrain.algorithms.base.FedAvg.update_reveals_secret` — FedUV's codeword; plain
    FedAvg for the others), ``"on"`` or ``"off"``. ``min_devices``: the server waits for this many
    devices before it starts. ``min_cohort``: the fewest devices a secure round may aggregate (a
    sum over one device is that device's update). ``num_shares`` / ``reconstruction_threshold``:
    SecAgg+'s (fractions of the cohort when below 1). ``wait_seconds``: how long the server waits
    for devices to connect and to answer its queries; ``round_seconds``: how long it waits for a
    round's replies (each of SecAgg+'s four stages) before the devices that did not answer count
    as failed. ``export``: write ``model.uvb`` after the last round
    and send it to the devices, which enroll with it. ``sign_key``: an Ed25519 key (PEM) to sign
    that bundle. ``centre_bundle``: no training; the devices measure their recording chain's
    mean voice for this bundle under SecAgg+ (:mod:`uvdeploy.centre`), which the server writes
    into ``model.uvb``.

    ``dp``: user-level differential privacy (:mod:`uvdeploy.dp`): ``"auto"`` (``distributed``
    whenever the rounds run under SecAgg+, ``off`` otherwise), ``"off"``, ``"central"`` (devices
    clip, the server adds the noise) or ``"distributed"`` (devices clip and add their share of
    the noise; needs SecAgg+, which ``secagg = "auto"`` then turns on). Its budget and clipping
    are the run's privacy keys (``dp_epsilon``, default
    :data:`~uvtrain.config.SECURE_DEFAULT_EPSILON`, ``dp_delta``, ``dp_noise_multiplier``,
    ``clip_norm``, ``adaptive_clipping``, ...).
    """

    run: RunConfig
    secagg: str = "auto"
    dp: str = "auto"
    min_devices: int = 2
    min_cohort: int = 3
    num_shares: float = 1.0
    reconstruction_threshold: float = 0.5
    wait_seconds: float = 300.0
    round_seconds: float = 600.0
    out: str = "runs/flower"
    export: bool = True
    sign_key: str = ""
    centre_bundle: str = ""

    def __post_init__(self) -> None:
        problem = self.run.method.deployment_problem()
        if problem is not None:
            raise ConfigError(f"method {self.run.method.name!r} does not run on Flower: {problem}")
        super().__post_init__()  # the input keys
        if self.secagg not in ("auto", "on", "off"):
            raise ConfigError(f"secagg must be auto, on or off, not {self.secagg!r}")
        if self.centre_bundle:
            self._check_centre()
        if self.dp not in DP_CHOICES:
            raise ConfigError(f"dp must be one of {', '.join(DP_CHOICES)}, not {self.dp!r}")
        if self.min_devices < 1 or self.min_cohort < 2:
            raise ConfigError("min_devices must be >= 1 and min_cohort >= 2")
        if self.wait_seconds <= 0 or self.round_seconds <= 0:
            raise ConfigError("wait_seconds and round_seconds must be positive")
        if not 0 < self.reconstruction_threshold <= max(1.0, self.num_shares):
            raise ConfigError("reconstruction_threshold must be positive (and <= num_shares)")
        self._check_privacy()

    def _check_centre(self) -> None:
        """A centre run (``centre_bundle``): each device's mean voice leaves it only inside
        SecAgg+, and its DP is one release of a fixed clip norm."""
        privacy = self.run.privacy
        if self.secagg == "off":
            raise ConfigError(
                "centre_bundle: a device's mean voice leaves it only inside SecAgg+ (secagg "
                "auto or on)"
            )
        if self.dp == "central":
            raise ConfigError(
                "centre_bundle: dp central would show the server the devices' exact sum; dp "
                "distributed (the default) or off"
            )
        if privacy.adaptive_clipping or privacy.dp_noise == "tree":
            raise ConfigError(
                "centre_bundle: one release of the devices' mean; adaptive clipping and tree "
                "noise need rounds"
            )

    def _check_privacy(self) -> None:
        mechanism, privacy = self.mechanism, self.run.privacy
        if mechanism == "off":
            return
        if mechanism == "distributed" and not self.secure:
            raise ConfigError(
                "dp distributed needs secure aggregation (secagg auto or on): without it the "
                "server would see each device's noisy update alone, which carries only a share "
                "of the noise"
            )
        if overrides(self.run.method, "aggregate"):
            raise ConfigError(
                f"dp weighs every device the same: {self.run.method.name}'s own aggregation "
                "cannot run with it"
            )
        if privacy.dp_epsilon is not None and privacy.dp_noise_multiplier is not None:
            raise ConfigError("dp takes one of dp_epsilon and dp_noise_multiplier, not both")

    @classmethod
    def from_run_config(cls, values: Mapping[str, Any]) -> DeploySettings:
        """From Flower's run config (flat keys; ``""`` stands for "not set"). The app declares
        every device method's keys (:func:`~uvtrain.config.flower_keys`): those of the other
        methods are dropped."""
        values = {key.replace("-", "_"): value for key, value in values.items()}
        own = {f.name for f in fields(cls)} - {"run"}
        run_keys = {"method", *flower_keys()}
        unknown = sorted(set(values) - own - run_keys)
        if unknown:
            raise ConfigError(f"unknown run config key(s): {', '.join(unknown)}")
        run_values = {
            k: v for k, v in values.items() if k in run_keys and not (v == "" and k != "method")
        }
        run_values = {**run_values, "dataset": "flower", "device": "cpu"}
        run = RunConfig.from_flat(run_values, other_methods="ignore")
        try:
            return cls(run=run, **{k: v for k, v in values.items() if k in own})
        except TypeError as error:
            raise ConfigError(f"run config: {error}") from None

    def to_dict(self) -> dict[str, Any]:
        """Flat: the run's keys, every other device method's at its default (the app declares
        them all: `flwr run --run-config` only overrides declared keys), then the deployment's."""
        run = self.run.to_dict()
        data = {k: run.get(k, default) for k, default in flower_keys().items()}
        data.update({f.name: getattr(self, f.name) for f in fields(self) if f.name != "run"})
        data["method"] = self.run.method.name
        return data

    @property
    def secure(self) -> bool:
        """Whether the rounds run under SecAgg+ (``auto``: for a method whose plain update
        reveals a secret, and for distributed DP, whose noise shares must be summed unseen)."""
        if self.secagg == "auto":
            reveals = self.run.method.update_reveals_secret or bool(self.centre_bundle)
            return reveals or self.dp == "distributed"
        return self.secagg == "on"

    @property
    def mechanism(self) -> str:
        """The run's DP mechanism: ``off``, ``central`` or ``distributed`` (``auto`` resolved)."""
        if self.dp == "auto":
            return "distributed" if self.secure else "off"
        return self.dp

    def cohort_size(self, devices: int) -> int:
        """How many of ``devices`` a round draws: the share ``fraction`` (at least one; secure
        rounds at least ``min_cohort``), at most all of them."""
        count = max(1, round(self.run.schedule.fraction * devices))
        if self.secure:
            count = max(count, self.min_cohort)
        return min(count, devices)

    @property
    def spec(self) -> dict[str, Any]:
        """The input spec (as a dataset's): what the backbone and the exporter read."""
        return input_spec(self.input)

    @property
    def crop(self) -> int:
        """Training window in samples (audio; 0: whole windows, or images)."""
        return self.input.crop_samples(self.run.data.crop_seconds)


def build_model(
    settings: DeploySettings, num_devices: int, *, on_device: bool = False
) -> nn.Module:
    """The network of the run (backbone + the method's head), with the seed's initial weights —
    the server's starting point, and the shape every device rebuilds to load the weights into.
    ``on_device``: a device's copy, which loads no ``pretrained`` file of the server's (the
    server sends every trainable weight; only frozen pretrained weights are loaded there)."""
    from uvtrain.run import build_run_backbone

    backbone = build_run_backbone(
        settings.run, settings.modality, settings.spec, weights_travel=on_device
    )
    torch.manual_seed(settings.run.seed)
    return settings.run.method.build_model(backbone, num_devices).eval()


def pack(tensors: Tensors) -> bytes:
    """Tensors as one ``.npz`` (no pickle), for a ConfigRecord value."""
    buffer = io.BytesIO()
    np.savez(buffer, **{k: v.detach().cpu().numpy() for k, v in tensors.items()})
    return buffer.getvalue()


#: Room for one ``.npy`` header in a packed message (numpy pads it to 64 bytes; a message's
#: holds one dtype and a short shape, about 128 bytes).
NPY_HEADER_BYTES = 4096
#: Room for the zip's own records around each member (local header, central directory entry,
#: zip64 extras) and the end record.
ZIP_OVERHEAD_BYTES = 1024


@dataclass(frozen=True)
class ArraySpec:
    """What one array of a packed message must be: its shape and dtype, exactly."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def spec_of(tensors: Tensors) -> dict[str, ArraySpec]:
    """The :class:`ArraySpec` of each tensor (what :func:`pack` of tensors like these holds)."""
    return {
        name: ArraySpec(tuple(value.shape), np.dtype(value.detach().cpu().numpy().dtype))
        for name, value in tensors.items()
    }


def message_spec(algorithm: FedAvg, shared: Tensors, dim: int) -> dict[str, ArraySpec]:
    """What a device's message (:meth:`~uvtrain.algorithms.base.FedAvg.client_message`) can
    be: the arrays the method's own hook makes for the view of row 0 from fresh state (nothing
    of it is kept); empty for a method whose devices send none. The server bounds every reply
    with it (:func:`unpack`)."""
    if not overrides(algorithm, "client_message"):
        return {}
    generator = torch.Generator().manual_seed(0)
    view, index = algorithm.client_view(shared, 0)
    constants = {"index": torch.tensor(index)}
    if algorithm.message_noise:
        constants["noise"] = torch.randn(dim, generator=generator)
    private = {name: value[0] for name, value in algorithm.init_private(1, dim, generator).items()}
    private = algorithm.client_receive(private, constants, view)
    return spec_of(algorithm.client_message(private, constants, view))


def view_spec(algorithm: FedAvg, devices: int, dim: int) -> dict[str, ArraySpec]:
    """What the server's view of its shared state (:meth:`~uvtrain.algorithms.base.FedAvg.
    client_view`) can be for a run of ``devices``: the device bounds what it reads with it."""
    constants = {"index": torch.arange(devices)}
    shared = algorithm.init_shared(devices, dim, torch.Generator().manual_seed(0), constants)
    return spec_of(algorithm.client_view(shared, 0)[0])


def unpack(blob: bytes, expected: Mapping[str, ArraySpec], what: str) -> Tensors:
    """Inverse of :func:`pack`, for a message from another party: bounded before it is read.

    The zip is read only when its size fits ``expected`` (the arrays the method's message can
    hold, from the model and the config), its members are exactly the expected names, once
    each, and each member's declared size is its array's; each member is then inflated never
    past that size (:func:`uvsdk.archive.read_zip_members`), and each array's ``.npy`` header
    must state the expected shape and dtype before its data are read. Values must be finite.
    So a small zip that inflates to gigabytes (2^28 zeros in 2 MB), or declares a huge array,
    costs the reader no more than an honest message.

    Raises
    ------
    DeploymentError
        One line, starting with ``what``, naming what is wrong; nothing of the blob is kept.
    """
    limits = {f"{name}.npy": NPY_HEADER_BYTES + spec.nbytes for name, spec in expected.items()}
    budget = sum(limits.values()) + ZIP_OVERHEAD_BYTES * (len(limits) + 1)
    if not isinstance(blob, bytes | bytearray):
        raise DeploymentError(f"{what}: not bytes but {type(blob).__name__}")
    if len(blob) > budget:
        raise DeploymentError(f"{what}: {len(blob)} bytes, more than the {budget} it can hold")
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            entries = archive.infolist()
        names = [entry.filename for entry in entries]
        if sorted(names) != sorted(limits):
            raise DeploymentError(f"{what}: holds {_listing(names)}, not {_listing(list(limits))}")
        for entry in entries:
            if entry.file_size > limits[entry.filename]:
                raise DeploymentError(
                    f"{what}: {entry.filename} declares {entry.file_size} bytes, more than "
                    f"the {limits[entry.filename]} it can hold"
                )
        members = read_zip_members(io.BytesIO(blob), limits, what)
        return {
            name: _read_npy(members[f"{name}.npy"], spec, f"{what}: {name}")
            for name, spec in expected.items()
        }
    except (BundleError, zipfile.BadZipFile, zlib.error, EOFError, ValueError) as error:
        if isinstance(error, DeploymentError):
            raise
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DeploymentError(f"{what}: not a readable message ({detail})") from None


def _read_npy(content: bytes, spec: ArraySpec, what: str) -> torch.Tensor:
    """One ``.npy`` member, its header checked against ``spec`` before its data are read."""
    handle = io.BytesIO(content)
    version = np.lib.format.read_magic(handle)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
    else:
        raise DeploymentError(f"{what}: .npy format {version} (1.0 or 2.0 expected)")
    if tuple(shape) != spec.shape or dtype != spec.dtype or fortran:
        raise DeploymentError(
            f"{what}: {dtype} of shape {tuple(shape)}, not {spec.dtype} of shape {spec.shape}"
        )
    data = content[handle.tell() :]
    if len(data) != spec.nbytes:
        raise DeploymentError(f"{what}: {len(data)} bytes of data, not {spec.nbytes}")
    array = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    if array.dtype.kind in "fc" and not np.isfinite(array).all():
        raise DeploymentError(f"{what}: holds values that are not finite")
    return torch.from_numpy(array)


def _listing(names: list[str]) -> str:
    """At most five member names, printable (a device chooses them)."""
    shown = ", ".join(printable(name) for name in sorted(names)[:5])
    shown += ", ..." if len(names) > 5 else ""
    return f"{len(names)} member(s) ({shown})" if names else "no member"


def to_arrays(tensors: Tensors) -> list[np.ndarray]:
    """Parameters in name order as Flower's legacy ``Parameters`` carry them."""
    return [tensors[name].detach().cpu().numpy() for name in sorted(tensors)]


def from_arrays(names: list[str] | Any, arrays: list[np.ndarray]) -> Tensors:
    """Inverse of :func:`to_arrays` for the parameter ``names``."""
    ordered = sorted(names)
    if len(ordered) != len(arrays):
        raise ValueError(f"{len(arrays)} arrays for {len(ordered)} parameters")
    return {name: torch.from_numpy(np.array(a)) for name, a in zip(ordered, arrays, strict=True)}
