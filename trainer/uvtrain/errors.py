"""The trainer's errors: one base, :class:`UvtrainError`, for everything a user can cause (a bad
option, a missing dataset, a broken checkpoint, a device that failed). The command lines turn it
into one line on stderr and exit code 2; any other exception is a bug and shows its traceback.

The exporter's and the deployment's errors derive from it too (``uvexport.ExportError``,
``uvdeploy.DeployError``).
"""

from __future__ import annotations


class UvtrainError(Exception):
    """Something the user can fix: its message is one line, shown as it is."""


class ConfigError(UvtrainError):
    """An invalid configuration (unknown key, wrong type, value out of range)."""


class TrainingError(UvtrainError):
    """Training cannot go on (a NaN loss, a checkpoint from another run, ...)."""


class DivergedError(TrainingError):
    """Training diverged: a loss or a parameter is no longer finite (``round``: where). The run
    command finishes the line with what to lower and marks the run folder (uvtrain.run)."""

    def __init__(self, message: str, round_number: int) -> None:
        super().__init__(message)
        self.round = round_number


class CheckpointError(TrainingError):
    """A checkpoint that cannot be read (cut short, corrupt, not ours, or a pickle)."""


class DatasetError(UvtrainError):
    """A dataset that cannot be built or read (missing files, a wrong layout)."""


class PretrainedError(UvtrainError):
    """Pretrained weights that cannot be fetched or loaded."""
