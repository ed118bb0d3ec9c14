"""What a device decodes its files to: the deployment's input keys, without torch.

A SuperNode starts a fresh app process for every message. Registration (``status``,
``assign``) and the final enrollment need only the device's folder, its SDK template store and
the input its files are decoded to; building the whole :class:`~uvdeploy.settings.DeploySettings`
would load the trainer's methods, and with them torch (about 2 s of CPU per process). So these
keys are a settings object of their own, which :class:`~uvdeploy.settings.DeploySettings`
extends: one definition of each key, its default and its check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from uvsdk.errors import BundleError
from uvsdk.inputs import ModelInput, input_class, model_input
from uvtrain.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class InputSettings:
    """The input keys of a Flower run's config: ``modality`` (``audio`` or ``image``), the audio
    keys (``sample_rate``, ``window_seconds``, ``hop_seconds``, ``min_seconds``) and
    ``image_size`` (``HxWxC``)."""

    modality: str = "audio"
    sample_rate: int = 16000
    window_seconds: float = 2.0
    hop_seconds: float = 1.0
    min_seconds: float = 0.5
    image_size: str = "64x64x1"

    def __post_init__(self) -> None:
        try:
            input_class(self.modality)
        except ValueError:
            raise ConfigError(
                f"modality must be 'audio' or 'image', not {self.modality!r}"
            ) from None
        _ = self.input  # validates the audio keys and image_size

    @classmethod
    def from_run_config(cls, values: Mapping[str, Any]) -> InputSettings:
        """Its keys of Flower's run config (flat; ``-`` read as ``_``), the others ignored: the
        server checks the whole config (:meth:`DeploySettings.from_run_config
        <uvdeploy.settings.DeploySettings.from_run_config>`) before any device is asked."""
        own = {f.name for f in fields(InputSettings)}
        values = {key.replace("-", "_"): value for key, value in values.items()}
        try:
            return cls(**{k: v for k, v in values.items() if k in own})
        except TypeError as error:
            raise ConfigError(f"run config: {error}") from None

    @property
    def input(self) -> ModelInput:
        """The model's input (:mod:`uvsdk.inputs`) the devices' files are decoded to: the
        audio keys, or ``image_size`` read as ``HxWxC``."""
        keys: dict[str, Any] = {
            "sample_rate": self.sample_rate,
            "window_seconds": self.window_seconds,
            "hop_seconds": self.hop_seconds,
            "min_seconds": self.min_seconds,
        }
        try:
            size = [int(part) for part in self.image_size.split("x")]
            keys.update(zip(("height", "width", "channels"), size, strict=True))
        except ValueError:
            pass  # refused below when the input is an image
        try:
            return model_input(self.modality, keys)
        except KeyError:
            raise ConfigError(
                f"image_size must be HxWxC (e.g. 64x64x1), not {self.image_size!r}"
            ) from None
        except BundleError as error:  # implausible values, refused as a bundle would be
            raise ConfigError(str(error)) from None
