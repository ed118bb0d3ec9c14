"""Gradient inversion (Geiping et al., "Inverting Gradients — How easy is it to break privacy in
federated learning?", NeurIPS 2020) of a client's images from its update, scored with PSNR and
SSIM against the target's images, beside the random start and the mean public face.

The attacker needs the client's label: FedUV's codeword recovered from the same observed update
(``label="recovered"``, the default) or the true one (``"true"``, an upper bound); for every
other method the client's private state as the server holds it
(:meth:`~uvtrain.algorithms.base.FedAvg.server_view_of_private`: FedAwS's class row, softmax's
class index, FedHide's proxy in place of its prototype).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.func import functional_call

from ..algorithms.base import Tensors
from ..data.base import FederatedDataset
from ..engine import Simulation, loss_shared
from .bits import CODEWORD_WEIGHT, bit_agreement, codeword_estimates, mean_hidden
from .secagg import Layout, secure_update
from .settings import InversionSettings, SecAggModel, fitting
from .training import client_parameters


def psnr(reference: np.ndarray, image: np.ndarray, data_range: float = 1.0) -> float:
    """Peak signal-to-noise ratio ``10 log10(R² / MSE)`` in dB; ``inf`` for identical images."""
    error = np.mean((np.asarray(reference, np.float64) - np.asarray(image, np.float64)) ** 2)
    return math.inf if error == 0 else float(10.0 * math.log10(data_range**2 / error))


def _gaussian_window(size: int, sigma: float) -> Tensor:
    offsets = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    line = torch.exp(-(offsets**2) / (2 * sigma**2))
    line = line / line.sum()
    return torch.outer(line, line)[None, None]


def ssim(
    reference: np.ndarray,
    image: np.ndarray,
    data_range: float = 1.0,
    window: int = 11,
    sigma: float = 1.5,
    k1: float = 0.01,
    k2: float = 0.03,
) -> float:
    """Structural similarity (Wang et al., IEEE TIP 2004): the mean of the SSIM map over the
    positions where an ``window``×``window`` Gaussian window (σ ``sigma``) fits, with
    ``C1 = (k1 R)²``, ``C2 = (k2 R)²`` and the window's (biased) local moments; images ``[H, W]``
    or ``[H, W, C]`` (channels averaged). 1 for identical images."""
    a = torch.as_tensor(np.asarray(reference, np.float64))
    b = torch.as_tensor(np.asarray(image, np.float64))
    if a.shape != b.shape or a.dim() not in (2, 3):
        raise ValueError(f"ssim: two images of one shape [H, W(, C)], not {a.shape} and {b.shape}")
    if a.dim() == 2:
        a, b = a[..., None], b[..., None]
    if min(a.shape[:2]) < window:
        raise ValueError(f"ssim: images smaller than the {window}×{window} window")
    a, b = a.permute(2, 0, 1)[:, None], b.permute(2, 0, 1)[:, None]  # [C, 1, H, W]
    kernel = _gaussian_window(window, sigma)

    def local(x: Tensor) -> Tensor:
        return torch.nn.functional.conv2d(x, kernel)

    mean_a, mean_b = local(a), local(b)
    var_a = local(a * a) - mean_a**2
    var_b = local(b * b) - mean_b**2
    covariance = local(a * b) - mean_a * mean_b
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    numerator = (2 * mean_a * mean_b + c1) * (2 * covariance + c2)
    denominator = (mean_a**2 + mean_b**2 + c1) * (var_a + var_b + c2)
    return float((numerator / denominator).mean())


def total_variation(images: Tensor) -> Tensor:
    """Anisotropic total variation of ``[B, H, W, C]`` images: mean absolute neighbour
    differences along the height plus along the width (Geiping et al.'s prior)."""
    return (images[:, 1:] - images[:, :-1]).abs().mean() + (
        images[:, :, 1:] - images[:, :, :-1]
    ).abs().mean()


def invert_update(
    loss_of: Callable[[Tensors, Tensor], Tensor],
    params: Tensors,
    update: Tensors,
    shape: Sequence[int],
    settings: InversionSettings,
    seed: int = 0,
    progress: Any = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Inverting Gradients (Geiping et al. 2020): images ``x ∈ [0, 1]^shape`` minimising
    ``1 − cos(∇_θ L(255 x), −Δθ) + tv_weight · TV(x)``.

    Parameters
    ----------
    loss_of
        ``(params, pixels) → loss``: the client's loss as the attacker can form it.
    params
        The global parameters ``θ`` the client started from.
    update
        The observed update ``Δθ`` (a plain one or a secure aggregate's), by parameter name; one
        descent step is ``−η ∇L``, so the gradient points along ``−Δθ``.
    shape
        ``[B, H, W, C]`` of the dummy batch.
    settings
        Steps, learning rate, TV weight, signed gradients.
    seed
        The random start (uniform in [0, 1]).
    progress
        A :class:`uvtrain.progress.Progress` to tick once per step, or ``None``.

    Returns
    -------
    tuple
        The reconstruction and the random start (``[B, H, W, C]`` in [0, 1]), and the final cosine.
    """
    names = list(update)
    leaves = {name: params[name].detach().clone().requires_grad_(True) for name in names}
    frozen = {name: value.detach() for name, value in params.items() if name not in leaves}
    target = [-update[name].detach().to(leaves[name].dtype) for name in names]
    target_norm = torch.sqrt(sum((t * t).sum() for t in target))
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(*shape, generator=generator).requires_grad_(True)
    start = images.detach().clone()
    optimiser = torch.optim.Adam([images], lr=settings.lr)
    milestones = sorted({max(1, int(settings.steps * f)) for f in (3 / 8, 5 / 8, 7 / 8)})
    schedule = torch.optim.lr_scheduler.MultiStepLR(optimiser, milestones, gamma=0.1)
    cosine = torch.tensor(0.0)
    for _ in range(settings.steps):
        loss = loss_of({**frozen, **leaves}, images * 255.0)
        grads = torch.autograd.grad(loss, [leaves[n] for n in names], create_graph=True)
        dot = sum((g * t).sum() for g, t in zip(grads, target, strict=True))
        norm = torch.sqrt(sum((g * g).sum() for g in grads))
        cosine = dot / (norm * target_norm + 1e-30)
        objective = 1.0 - cosine + settings.tv_weight * total_variation(images)
        (gradient,) = torch.autograd.grad(objective, images)
        images.grad = gradient.sign() if settings.signed else gradient
        optimiser.step()
        schedule.step()
        with torch.no_grad():
            images.clamp_(0.0, 1.0)
        if progress is not None:
            progress.update(1)
    return images.detach().numpy(), start.numpy(), float(cosine.detach())


def attack_loss(
    simulation: Simulation, client: int, codeword: Tensor | None = None
) -> Callable[[Tensors, Tensor], Tensor]:
    """The client's loss as the server can form it: a codeword model's with the attacker's
    ``codeword``; otherwise with the server's view of the client's private state
    (:meth:`~uvtrain.algorithms.base.FedAvg.server_view_of_private`)."""
    algorithm = simulation.algorithm
    constants = {k: v[client] for k, v in simulation.constants.items()}
    private = {k: v[client] for k, v in simulation.private.items()}
    private = algorithm.server_view_of_private(private, simulation.shared, client)
    if algorithm.output_kind == "codeword":
        if codeword is None:
            raise ValueError(f"{algorithm.name}'s attack loss needs a codeword")
        constants["codeword"] = codeword.to(simulation.device, torch.float32)

    def loss_of(params: Tensors, pixels: Tensor) -> Tensor:
        outputs = functional_call(simulation.model, (params, simulation.buffers), (pixels,))
        shared = loss_shared(algorithm, params, simulation.shared)
        return algorithm.loss(outputs, private, constants, shared)

    return loss_of


def _matched(truth: np.ndarray, images: np.ndarray) -> tuple[float, float]:
    """Mean PSNR and SSIM of a batch against the truth's images under the best pairing."""
    count = len(truth)
    table = np.array([[psnr(t, r) for r in images] for t in truth])
    if count <= 6:
        order = max(
            itertools.permutations(range(count)),
            key=lambda p: sum(table[i, j] for i, j in enumerate(p)),
        )
    else:  # greedy for larger batches
        order = list(np.argmax(table, axis=1))
    values = [(table[i, j], ssim(truth[i], images[j])) for i, j in enumerate(order)]
    return float(np.mean([v[0] for v in values])), float(np.mean([v[1] for v in values]))


def _as_scores(pair: tuple[float, float]) -> dict[str, float]:
    return {"psnr": pair[0], "ssim": pair[1]}


def inversion_audit(
    simulation: Simulation,
    dataset: FederatedDataset,
    settings: InversionSettings,
    secagg: SecAggModel,
    public: Tensor | None,
    rng: np.random.Generator,
    seed: int,
    progress: bool = True,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Invert one target client's plain update and the secure aggregates of the cohorts it is in.

    Returns the scores (JSON) and the images for the figure (truth, mean public face, each
    reconstruction), all ``[B, H, W, C]`` in [0, 1].
    """
    from ..progress import Progress

    clients = len(dataset.clients)
    cohorts = fitting(settings.cohorts, clients, settings.skip_large_cohorts, "inversion-cohorts")
    largest = max(cohorts, default=1)
    order = rng.permutation(clients)[:largest]
    target = int(order[0])
    simulation.receive(torch.as_tensor(order, device=simulation.device))
    batch = settings.batch
    images = []
    for client in order:
        train = dataset.clients[client].train
        images.append(train[rng.choice(len(train), size=batch, replace=len(train) < batch)])
    images = np.stack(images)  # [m, B, H, W, C] uint8
    steps = simulation.config.local_steps
    batches = torch.as_tensor(images)[:, None].expand(-1, steps, *images.shape[1:])
    round_number = simulation.round + 1
    lr = simulation.config.learning_rate(round_number)
    layout = Layout.of(simulation.params)
    thetas, _ = client_parameters(simulation, order, batches.to(simulation.device), lr, layout)
    base = layout.flatten(simulation.params).astype(np.float64)
    sizes = simulation.sizes[order].numpy()
    updates = {"plain": thetas[0] - base}
    for size in cohorts:
        updates[f"cohort {size}"] = secure_update(thetas[:size], base, sizes[:size], secagg, rng)
    truth = images[0].astype(np.float64) / 255.0
    codeword_model = simulation.algorithm.output_kind == "codeword"
    hidden = None
    pictures: dict[str, np.ndarray] = {"original": truth}
    baselines = {}
    if public is not None:
        mean_face = public.numpy().astype(np.float64).mean(0, keepdims=True) / 255.0
        mean_face = np.repeat(mean_face, batch, axis=0)
        pictures["public mean face"] = mean_face
        baselines["public_mean_face"] = _as_scores(_matched(truth, mean_face))
        if codeword_model:
            hidden = mean_hidden(simulation, public)
    scores: dict[str, Any] = {}
    shape = (batch, *images.shape[2:])
    bar = Progress(
        f"inversion, round {simulation.round}",
        settings.steps * len(updates),
        unit="step",
        enabled=progress,
        transient=True,
    )
    with bar:
        for name, flat in updates.items():
            update = layout.unflatten(flat, simulation.params)
            entry: dict[str, Any] = {}
            codeword = None
            if codeword_model:
                truth_codeword = simulation.constants["codeword"][target].double().cpu()
                codeword = truth_codeword
                if settings.label == "recovered":
                    estimates = codeword_estimates(update[CODEWORD_WEIGHT].cpu(), hidden)
                    codeword = estimates["projection" if hidden is not None else "svd"]
                entry["codeword_bits_used"] = float(
                    bit_agreement(codeword.numpy(), truth_codeword.numpy()[None])[0]
                )
            loss_of = attack_loss(simulation, target, codeword)
            reconstruction, start, cosine = invert_update(
                loss_of, simulation.params, update, shape, settings, seed=seed, progress=bar
            )
            entry["psnr"], entry["ssim"] = _matched(truth, reconstruction)
            members = [images[i].astype(np.float64) / 255.0 for i in range(len(order))]
            size = 1 if name == "plain" else int(name.split()[1])
            best = max(_matched(member, reconstruction) for member in members[:size])
            entry["best_member_psnr"], entry["best_member_ssim"] = best
            entry["final_cosine"] = cosine
            scores[name] = entry
            pictures[name] = reconstruction
            baselines.setdefault("random_start", _as_scores(_matched(truth, start)))
    result = {
        "round": simulation.round,
        "dataset": dataset.name,
        "method": simulation.algorithm.name,
        "clients": clients,
        "batch": batch,
        "label": settings.label if codeword_model else None,
        "steps": settings.steps,
        "tv_weight": settings.tv_weight,
        "lr": settings.lr,
        "baselines": baselines,
        "updates": scores,
    }
    return result, pictures
