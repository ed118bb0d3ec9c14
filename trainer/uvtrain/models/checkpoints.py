"""Pretrained weights into a backbone before federated fine-tuning
(:func:`load_backbone_checkpoint`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor, nn

from .base import WeightsError

#: Keys under which a checkpoint file may nest its weights (tried in this order).
_NESTED_STATE_KEYS = (
    "state_dict",
    "model",
    "model_state_dict",
    "model_state",
    "backbone",
    "params",  # a uvtrain run's checkpoint.pt: the model's trained parameters, "backbone.*"
)
#: The prefix of the backbone's entries in a uvtrain run's model (every method's model holds its
#: backbone as ``backbone``), tried when the checkpoint has no entry without it.
RUN_PREFIX = "backbone."


def load_backbone_checkpoint(
    backbone: nn.Module, path: str | Path, *, prefix: str = "", strict: bool = False
) -> list[str]:
    """Load pretrained weights into ``backbone`` before federated fine-tuning.

    The file is read with ``torch.load(weights_only=True)`` (no code runs). It may be a state dict
    or a dict holding one under ``"state_dict"``, ``"model"``, ``"model_state_dict"`` or
    ``"backbone"``. A checkpoint entry ``prefix + name`` is loaded into the backbone's parameter
    ``name`` when the shapes agree (e.g. ``prefix="backbone."`` for a saved
    :class:`CodewordModel`, ``"module."`` for a DataParallel one).

    Parameters
    ----------
    backbone : torch.nn.Module
        Loaded in place.
    path : str or Path
        The checkpoint file.
    prefix : str, optional
        Prefix of the backbone's entries in the checkpoint; entries without it are ignored.
    strict : bool, optional
        Require every parameter of the backbone to be loaded with the right shape.

    Returns
    -------
    list of str
        Names of the parameters loaded, in the backbone's order.

    Raises
    ------
    WeightsError
        Nothing matches, a shape differs (``strict``) or a parameter is missing (``strict``).
    """
    from ..checkpoints import read_checkpoint

    checkpoint = read_checkpoint(path)
    state = checkpoint
    if isinstance(checkpoint, Mapping):
        for key in _NESTED_STATE_KEYS:
            if isinstance(checkpoint.get(key), Mapping):
                state = checkpoint[key]
                break
    if not isinstance(state, Mapping):
        raise WeightsError(f"{path}: not a state dict (got {type(state).__name__})")
    names = {name for name, _ in backbone.named_parameters()}
    if (
        not prefix
        and not names & set(state)
        and any(isinstance(key, str) and key.startswith(RUN_PREFIX) for key in state)
    ):
        prefix = RUN_PREFIX
    tensors = {
        key[len(prefix) :]: value
        for key, value in state.items()
        if isinstance(key, str) and key.startswith(prefix) and isinstance(value, Tensor)
    }
    loaded: list[str] = []
    mismatched: list[str] = []
    with torch.no_grad():
        for name, parameter in backbone.named_parameters():
            if name not in tensors:
                continue
            if tensors[name].shape != parameter.shape:
                mismatched.append(
                    f"{name} {tuple(tensors[name].shape)} != {tuple(parameter.shape)}"
                )
                continue
            parameter.copy_(tensors[name].to(parameter.dtype))
            loaded.append(name)
    if not loaded:
        sample = ", ".join(list(map(str, state))[:5])
        raise WeightsError(
            f"{path}: no parameter of the backbone matches the checkpoint with prefix {prefix!r} "
            f"(its first entries: {sample})"
        )
    if strict:
        missing = [name for name, _ in backbone.named_parameters() if name not in loaded]
        if mismatched or missing:
            raise WeightsError(
                f"{path}: strict load failed; shape mismatches: {mismatched or 'none'}; "
                f"missing: {missing or 'none'}"
            )
    return loaded
