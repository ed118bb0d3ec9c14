"""The deployment's errors: each one line, each a :class:`DeployError` (the CLI exits 2)."""

from __future__ import annotations

from uvtrain.errors import UvtrainError


class DeployError(UvtrainError):
    """The deployment cannot go on. One line."""


class DeploymentError(DeployError):
    """The federation cannot go on (too few devices, a failed round, an unchanged model); the
    server writes it to ``status.json`` and the run fails."""


class DeviceError(DeployError):
    """A device cannot take part (no data, no passphrase, a codeword of another code)."""


class LaunchError(DeployError):
    """The local federation could not start or did not finish."""
