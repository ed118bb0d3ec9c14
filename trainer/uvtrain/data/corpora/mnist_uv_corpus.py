"""FEMNIST → MNIST-UV (:mod:`uvtrain.data.corpora`). Layout read: LEAF's ``root/train/*.json``
and ``root/test/*.json`` (Caldas et al., 2018): per writer, 4-channel examples stacking one image
each of digits 2, 3, 4 and 5, as in the FedUV paper (Hosseini et al., 2021). The original EMNIST
files carry no writer ids, hence LEAF's.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from ...progress import Progress
from ..base import UNKNOWN_FRACTION, ClientData, DatasetError, FederatedDataset
from ..protocol import DataProtocol
from .common import (
    FEMNIST_SIDE,
    MNIST_UV_DIGITS,
    Described,
    Selection,
    Sources,
    _finish,
    _folder,
    _planned_dataset,
    _protocol_extra,
    select,
)

FEMNIST_LICENCE = "EMNIST / NIST Special Database 19 (public domain); LEAF FEMNIST (BSD-2-Clause)"
FEMNIST_LAYOUT = "ROOT/train/*.json and ROOT/test/*.json of LEAF FEMNIST"


def _femnist_files(root: Path) -> list[Path]:
    """The LEAF json files: ``train/`` and ``test/``, else LEAF's unsplit ``all_data/``."""
    files = sorted((root / "train").glob("*.json")) + sorted((root / "test").glob("*.json"))
    if not files:
        files = sorted((root / "all_data").glob("*.json"))
    if not files:
        raise DatasetError(
            f"mnist-uv: no .json file under {root} (expected layout: {FEMNIST_LAYOUT})"
        )
    return files


def _femnist_digits(
    files: list[Path], digits: tuple[int, ...], invert: bool, progress: bool
) -> dict[str, dict[int, list[np.ndarray]]]:
    """Writer → digit → its 28×28 uint8 images, merged over all files (LEAF splits each writer's
    samples between ``train`` and ``test``)."""
    writers: dict[str, dict[int, list[np.ndarray]]] = {}
    bar = Progress("mnist-uv", len(files), unit="file", enabled=progress)
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            user_data = data["user_data"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise DatasetError(f"mnist-uv: {path.name} is not a LEAF json file ({error})") from None
        for writer, record in user_data.items():
            pixels = np.asarray(record["x"], dtype=np.float64)
            labels = np.asarray(record["y"], dtype=np.int64)
            if pixels.ndim != 2 or pixels.shape[1] != FEMNIST_SIDE**2 or len(pixels) != len(labels):
                raise DatasetError(
                    f"mnist-uv: {path.name}, writer {writer}: x must be [n, 784] with one y each"
                )
            if invert:  # LEAF keeps NIST's white background as 1.0; MNIST has ink high
                pixels = 1.0 - pixels
            images = np.clip(np.round(pixels * 255.0), 0, 255).astype(np.uint8)
            images = images.reshape(-1, FEMNIST_SIDE, FEMNIST_SIDE)
            per_digit = writers.setdefault(writer, {digit: [] for digit in digits})
            for digit in digits:
                per_digit[digit].extend(images[labels == digit])
        bar.update()
    return writers


def stack_digits(
    per_digit: dict[int, list[np.ndarray]], digits: tuple[int, ...], rng: np.random.Generator
) -> np.ndarray:
    """One writer's MNIST-UV examples: ``min`` over ``digits`` of their counts, each example the
    next (shuffled) image of every digit stacked as channels, uint8 ``[n, 28, 28, len(digits)]``."""
    count = min(len(per_digit[digit]) for digit in digits)
    channels = []
    for digit in digits:
        images = np.stack(per_digit[digit]) if per_digit[digit] else np.zeros((0, 28, 28), np.uint8)
        channels.append(images[rng.permutation(len(images))[:count]])
    return np.stack(channels, axis=-1)


def mnist_uv(
    root: str | Path,
    *,
    digits: tuple[int, ...] = MNIST_UV_DIGITS,
    invert: bool = True,
    max_identities: int | None = 1000,
    max_per_identity: int | None = None,
    min_per_identity: int = 3,
    unknown_fraction: float = UNKNOWN_FRACTION,
    seed: int = 0,
    progress: bool = True,
    protocol: DataProtocol | None = None,
) -> FederatedDataset:
    """Build MNIST-UV from a local LEAF FEMNIST copy: one client per writer.

    The FedUV paper (Hosseini et al., 2021, Sec. 6.1) makes a handwriting-verification task from
    EMNIST by stacking, per writer, one image each of the digits 2, 3, 4 and 5 into a 28×28×4
    example. Here each writer gives as many examples as its rarest of those digits allows, each
    image used once; with a ``protocol``'s ``samples_per_split`` (the paper's 50/15/15), as the
    paper makes them: each digit's images are divided between train, validation and test
    (:func:`digit_shares`), and each split's examples are distinct combinations of its own
    images, so that "the same sub-image might appear in several examples" of a split but never in
    two splits (:func:`stack_split`). LEAF's ``x`` holds 784 floats in [0, 1] with the paper's white background at
    1.0; ``invert`` stores ink as 255 (MNIST's convention).

    Parameters
    ----------
    root : str or Path
        LEAF's ``data/femnist/data`` folder, holding ``train/`` and ``test/`` (or ``all_data/``).
    digits : tuple of int, optional
        Digits stacked as channels.
    invert : bool, optional
        Store ``255 × (1 − x)`` rather than ``255 × x``.
    max_identities, max_per_identity, min_per_identity, unknown_fraction, seed, progress
        As for :func:`voxceleb1`.
    protocol : DataProtocol, optional
        As for :func:`voxceleb1` (LEAF's train/test divides each writer's samples: no official
        split of writers).

    Returns
    -------
    FederatedDataset
        Images, uint8 ``[n, 28, 28, len(digits)]``; identities are LEAF's writer ids.
    """
    root = Path(root).expanduser()
    _folder(root, "mnist-uv", FEMNIST_LAYOUT)
    writers = _femnist_digits(_femnist_files(root), tuple(digits), invert, progress)
    spec = {"height": FEMNIST_SIDE, "width": FEMNIST_SIDE, "channels": len(digits)}
    if protocol is not None:
        clients = _mnist_uv_planned(writers, tuple(digits), protocol, seed)
        return _planned_dataset(
            Described("mnist-uv", "image", spec, root, FEMNIST_LICENCE),
            clients,
            _protocol_extra(root, protocol),
        )
    examples = {writer: list(range(min(map(len, d.values())))) for writer, d in writers.items()}
    selection = Selection.of(locals())
    selected = select(examples, replace(selection, max_per_identity=None))  # cut once stacked
    samples = {}
    for position, writer in enumerate(selected):
        rng = np.random.default_rng([seed, 0xD1, position])
        samples[writer] = stack_digits(writers[writer], tuple(digits), rng)[:max_per_identity]
    return _finish(
        "mnist-uv",
        "image",
        spec,
        samples,
        root=root,
        skipped=0,
        licence=FEMNIST_LICENCE,
        selection=selection,
    )


def digit_shares(count: int, split: tuple[int, int, int]) -> tuple[int, int, int]:
    """How many of a writer's ``count`` images of one digit go to train, validation and test:
    validation and test in proportion to ``split`` (at least one each when asked), train the
    rest."""
    total = sum(split)
    val, test = (max(1, round(count * part / total)) if part else 0 for part in split[1:])
    return count - val - test, val, test


def can_split(counts: list[int], split: tuple[int, int, int]) -> bool:
    """Whether images of each digit in these ``counts`` make ``split`` distinct examples."""
    shares = [digit_shares(count, split) for count in counts]
    for position, wanted in enumerate(split):
        sizes = [share[position] for share in shares]
        if wanted and (min(sizes) < 1 or math.prod(sizes) < wanted):
            return False
    return True


def combinations(images: list[np.ndarray], count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` distinct examples, each one image of every digit (``images[d]``: digit d's),
    stacked as channels: a random choice of the combinations without repetition."""
    sizes = [len(part) for part in images]
    picks = rng.choice(math.prod(sizes), size=count, replace=False)
    chosen = np.unravel_index(picks, sizes)
    return np.stack([part[rows] for part, rows in zip(images, chosen, strict=True)], axis=-1)


def stack_split(
    per_digit: dict[int, list[np.ndarray]],
    digits: tuple[int, ...],
    split: tuple[int, int, int],
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One writer's train, validation and test examples, FedUV Sec. 6.1: every digit's images
    divided between the splits (:func:`digit_shares`), each split's examples distinct
    combinations of its own images (a sub-image may recur within a split, never across)."""
    parts: list[list[np.ndarray]] = [[], [], []]
    for digit in digits:
        images = np.stack(per_digit[digit])[rng.permutation(len(per_digit[digit]))]
        train, val, _ = digit_shares(len(images), split)
        for position, piece in enumerate(np.split(images, [train, train + val])):
            parts[position].append(piece)
    return tuple(  # type: ignore[return-value]
        combinations(parts[position], wanted, rng)
        if wanted
        else np.zeros((0, FEMNIST_SIDE, FEMNIST_SIDE, len(digits)), np.uint8)
        for position, wanted in enumerate(split)
    )


def mnist_uv_sources(
    writers: dict[str, dict[int, list[np.ndarray]]],
    digits: tuple[int, ...],
    split: tuple[int, int, int] | None,
) -> Sources:
    """The writers and the examples each can make: as many as ``split`` asks when
    :func:`can_split`, else its examples with each image once (fewer than ``split`` asks)."""
    index = {}
    for writer, per_digit in writers.items():
        counts = [len(per_digit[digit]) for digit in digits]
        examples = min(counts)
        if split is not None:
            examples = sum(split) if can_split(counts, split) else min(examples, sum(split) - 1)
        index[writer] = list(range(examples))
    return Sources(index)


def _mnist_uv_planned(
    writers: dict[str, dict[int, list[np.ndarray]]],
    digits: tuple[int, ...],
    protocol: DataProtocol,
    seed: int,
) -> tuple[list[ClientData], list[ClientData]]:
    """The protocol's writers and examples: a writer's items are the examples it can make (as
    many as its split asks when :func:`can_split`, else its examples with each image once)."""
    split = protocol.samples_per_split
    plan = mnist_uv_sources(writers, digits, split).plan("mnist-uv", protocol, seed)
    known = []
    for position, (writer, slots) in enumerate(plan.known.items()):
        rng = np.random.default_rng([seed, 0xD1, position])
        if split is not None:
            known.append(ClientData(writer, *stack_split(writers[writer], digits, split, rng)))
        else:
            examples = stack_digits(writers[writer], digits, rng)
            known.append(ClientData(writer, *(examples[list(part)] for part in slots)))
    unknown = []
    for position, (writer, slots) in enumerate(plan.unknown.items()):
        rng = np.random.default_rng([seed, 0xD2, position])
        images = [np.stack(writers[writer][digit]) for digit in digits]
        examples = combinations(images, len(slots), rng)
        unknown.append(ClientData(writer, examples, examples[:0], examples[:0]))
    return known, unknown
