"""The samples a local step sees: where a client's samples wait between rounds, the batches it
draws (with replacement, or epochs without), random crops of audio kept longer than a window, and
random flips and rotations of images (the papers' data preparation, FedHide Sec. 4.1).

Every draw takes its ``numpy`` generator from the caller, which derives it from ``(seed, round)``
(:mod:`uvtrain.engine`), so a resumed run draws the same batches. The simulator, the cross-silo
trainer and a Flower device (:mod:`uvdeploy.device`) all draw their batches here.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn


class HostSamples:
    """A client's samples left on the host, memory-mapped from a stream folder
    (:mod:`uvtrain.data.stream`): only the rows a round draws are read from disk and moved to
    ``device`` (:func:`take_rows`)."""

    def __init__(self, rows: np.ndarray, device: torch.device) -> None:
        self.rows, self.device = rows, device

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, picks: np.ndarray) -> Tensor:
        """Rows ``picks`` (an index array of any shape) on the device."""
        return torch.from_numpy(np.asarray(self.rows[picks])).to(self.device)


def client_samples(samples: np.ndarray, device: torch.device) -> Tensor | HostSamples:
    """Where a client's samples wait between rounds: memory-mapped ones (a stream folder) on the
    host, read a round's batches at a time; the others on ``device``, whole."""
    if isinstance(samples, np.memmap):
        return HostSamples(samples, device)
    return torch.as_tensor(samples).to(device)


def take_rows(samples: Tensor | HostSamples, picks: np.ndarray) -> Tensor:
    """Rows ``picks`` (an index array of any shape) of a client's samples, on their device."""
    if isinstance(samples, HostSamples):
        return samples.take(picks)
    return samples[torch.as_tensor(picks, device=samples.device)]


def draw_batches(
    samples: Tensor | HostSamples,
    steps: int,
    size: int,
    crop: int,
    rng: np.random.Generator,
    lengths: np.ndarray | None = None,
) -> Tensor:
    """``[E, B, ...]``: one client's E batches of B samples drawn with ``rng`` (with replacement
    only when it holds fewer than B); with ``crop`` > 0, each 1-D sample (audio) is cut to a random
    window of ``crop`` steps, within its own ``lengths[i]`` first steps when given (utterances kept
    whole: :class:`uvtrain.data.base.ClientData`). The simulator and a Flower device draw their
    batches with this."""
    available = len(samples)
    picks = np.stack(
        [rng.choice(available, size=size, replace=available < size) for _ in range(steps)]
    )
    batches = take_rows(samples, picks)
    return random_windows(batches, crop, rng, None if lengths is None else lengths[picks])


def epoch_batches(
    samples: Tensor | HostSamples,
    epochs: int,
    size: int,
    crop: int,
    rng: np.random.Generator,
    lengths: np.ndarray | None = None,
) -> list[Tensor]:
    """One client's ``epochs`` passes over its own samples: each a fresh permutation (from
    ``rng``) cut into mini-batches of ``size``, the last one smaller when ``size`` does not divide
    the client's sample count (kept, not dropped: every sample is seen once per epoch, as in
    FedAvg's ``UserUpdate``, Algorithm 1 of the FedUV paper). ``E · ⌈n / B⌉`` batches; with
    ``crop`` > 0 each 1-D sample (audio) is cut to a random window of ``crop`` steps (within its
    ``lengths``, as for :func:`draw_batches`)."""
    available = len(samples)
    batches = []
    for _ in range(epochs):
        permutation = rng.permutation(available)
        for start in range(0, available, size):
            picked = take_rows(samples, permutation[start : start + size])
            own = None if lengths is None else lengths[permutation[start : start + size]][None]
            batches.append(random_windows(picked[None], crop, rng, own)[0])
    return batches


def random_windows(
    batches: Tensor, crop: int, rng: np.random.Generator, lengths: np.ndarray | None = None
) -> Tensor:
    """``[E, B, length]`` audio batches cut to a random window of ``crop`` steps per sample, the
    usual augmentation of speaker training; other batches (images, ``crop`` 0) as they are.

    ``lengths`` (``[E, B]``, optional): how many first steps of each sample are its signal (the
    rest is padding); a window then starts uniformly in ``[0, lengths − crop]`` (at 0 when the
    signal is no longer than ``crop``), so that it never reaches the padding."""
    length = batches.shape[-1]
    if not (crop and batches.dim() == 3 and length > crop):
        return batches
    steps, size = batches.shape[:2]
    if lengths is None:
        offsets = rng.integers(0, length - crop + 1, size=(steps, size))
    else:
        offsets = rng.integers(0, np.maximum(lengths - crop, 0) + 1)
    window = torch.as_tensor(offsets, device=batches.device)[..., None] + torch.arange(
        crop, device=batches.device
    )
    return torch.gather(batches, -1, window)


#: Largest rotation of the image augmentation, degrees: FedHide Sec. 4.1 applies "random
#: horizontal flips and rotations" without stating their range; ±15° is our choice.
ROTATION_DEGREES = 15.0


def flip_and_rotate(images: Tensor, rng: np.random.Generator) -> Tensor:
    """Images ``[..., H, W, C]`` (any dtype), each flipped horizontally with probability 1/2 and
    rotated about its centre by an angle uniform in ±:data:`ROTATION_DEGREES`, from ``rng``
    (:func:`rotate_images`): the training-time augmentation of FedHide's CIFAR-100 (Sec. 4.1)."""
    count = math.prod(images.shape[:-3])
    flips = rng.random(count) < 0.5
    angles = rng.uniform(-ROTATION_DEGREES, ROTATION_DEGREES, count)
    return rotate_images(images, angles, flips)


def rotate_images(images: Tensor, angles: np.ndarray, flips: np.ndarray) -> Tensor:
    """Images ``[..., H, W, C]``, image ``i`` (in row-major order of the leading dimensions)
    mirrored left-right where ``flips[i]``, then turned by ``angles[i]`` degrees anticlockwise
    about its centre: nearest-neighbour sampling, zeros where the turn uncovers the corners (as
    torchvision's ``RandomRotation``, which does not load beside our torch). The dtype is kept."""
    shape = images.shape
    device = images.device
    pixels = images.reshape(-1, *shape[-3:]).permute(0, 3, 1, 2).to(torch.float32)
    mirrored = torch.as_tensor(flips, device=device)[:, None, None, None]
    pixels = torch.where(mirrored, pixels.flip(-1), pixels)
    radians = torch.as_tensor(np.deg2rad(angles), dtype=torch.float32, device=device)
    cos, sin = radians.cos(), radians.sin()
    aspect = shape[-3] / shape[-2]  # height / width: the grid's coordinates are normalised
    zero = torch.zeros_like(cos)
    theta = torch.stack(
        [torch.stack([cos, -sin * aspect, zero], -1), torch.stack([sin / aspect, cos, zero], -1)],
        1,
    )
    grid = nn.functional.affine_grid(theta, list(pixels.shape), align_corners=False)
    turned = nn.functional.grid_sample(pixels, grid, mode="nearest", align_corners=False)
    return turned.permute(0, 2, 3, 1).to(images.dtype).reshape(shape)
