"""The exporter's error: :class:`ExportError`, a :class:`uvtrain.errors.UvtrainError` (one line,
exit 2 from the command line)."""

from __future__ import annotations

from uvtrain.errors import UvtrainError


class ExportError(UvtrainError):
    """The run cannot be exported (not a run folder, parity failed, ...). One line."""
