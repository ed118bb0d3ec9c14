"""Simulation engine throughput: vectorised (torch.func over the round's clients) vs a plain
per-client loop, on the same workload and maths, in one run — and, as the ceiling a federated
simulation can approach, centralised minibatch SGD on the same model and total batch. With
``--dp``, also a differentially private round (each client's update clipped, Gaussian noise:
``uvtrain.privacy``), which needs every client's own update and so runs the vmap path where the
plain run takes the one-pass batched step. With ``--local-epochs E``, clients hold between B and
4B clips each (so they take different numbers of steps) and train E epochs over them.

    python benchmarks/simulate.py [--method feduv] [--clients 32] [--rounds 3] [--device auto] [--dp]
                                  [--local-epochs E] [--default-allocator]

Every figure is measured under glibc settings that keep freed memory (``_allocator.py``): with
glibc's defaults the centralised ceiling paid page faults for every large tensor it freed and
reallocated, and was held at half its speed. ``--default-allocator`` measures under the defaults.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch
from _allocator import keep_freed_memory

from uvsdk.inputs import model_input
from uvtrain.algorithms import METHODS
from uvtrain.data.formant import voice_corpus
from uvtrain.engine import EngineConfig, Simulation, pick_device
from uvtrain.models import build_backbone

SAMPLE_RATE = 16000
SPEC = {"sample_rate": SAMPLE_RATE, "window_seconds": 1.0, "hop_seconds": 0.5, "min_seconds": 0.5}
DEFAULT_BACKBONE = model_input("audio", SPEC).default_backbone


def client_data(args: argparse.Namespace) -> list[np.ndarray]:
    """The workload's clients: synthetic voices, B clips each (B to 4B with ``--local-epochs``),
    of ``--seconds`` at 16 kHz. ``benchmarks/peers.py`` puts the same clients through the peers."""
    sizes = [args.batch_size] * args.clients
    if args.local_epochs is not None:  # uneven clients: B to 4B clips each
        sizes = np.random.default_rng(0).integers(args.batch_size, 4 * args.batch_size + 1,
                                                  args.clients).tolist()  # fmt: skip
    corpus = voice_corpus(args.clients, max(sizes), args.seconds, SAMPLE_RATE, seed=0)
    return [np.stack(clips[:size]) for clips, size in zip(corpus, sizes, strict=True)]


def make(
    method: str,
    data: list[np.ndarray],
    args: argparse.Namespace,
    vectorised: bool,
    privacy: Any = None,
) -> Simulation:
    torch.manual_seed(0)
    backbone = build_backbone(args.backbone or DEFAULT_BACKBONE, SPEC)
    config = EngineConfig(
        fraction=1.0,
        local_steps=args.local_steps,
        local_epochs=args.local_epochs,
        batch_size=args.batch_size,
        chunk_size=args.clients,
        vectorised=vectorised,
    )
    device = pick_device(args.device)
    return Simulation(METHODS[method](), backbone, data, config, device, privacy)


def time_rounds(simulation: Simulation, rounds: int) -> float:
    simulation.step()  # warm-up (allocations, kernels)
    if simulation.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(rounds):
        simulation.step()
    if simulation.device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / rounds


def centralised_samples_per_s(simulation: Simulation, args: argparse.Namespace) -> float:
    """Plain minibatch SGD of the same model on one batch of clients × B samples."""
    model = simulation.load_into_model().train()
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    total = args.clients * args.batch_size
    batch = torch.cat([d[: args.batch_size] for d in simulation.data])[:total]
    codes = simulation.constants.get("codeword")
    labels = torch.arange(args.clients, device=simulation.device).repeat_interleave(args.batch_size)

    def step() -> None:
        optimiser.zero_grad()
        outputs = model(batch)
        if codes is not None:
            loss = torch.relu(1 - (outputs * codes[labels]).sum(-1) / codes.shape[1]).mean()
        else:
            loss = (1 - outputs.sum(-1)).pow(2).mean()
        loss.backward()
        optimiser.step()

    step()
    if simulation.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.rounds * args.local_steps):
        step()
    if simulation.device.type == "cuda":
        torch.cuda.synchronize()
    return total * args.rounds * args.local_steps / (time.perf_counter() - start)


def main() -> None:
    allocator = keep_freed_memory()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", default="feduv", choices=sorted(METHODS))
    parser.add_argument("--clients", type=int, default=32, help="clients per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--local-steps", type=int, default=1)
    parser.add_argument("--local-epochs", type=int, default=None, help="epochs, uneven clients")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=1.0, help="sample length")
    parser.add_argument("--backbone", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dp", action="store_true", help="also time a DP round (clip + noise)")
    args = parser.parse_args()

    data = client_data(args)
    sizes = [len(samples) for samples in data]
    fast = make(args.method, data, args, vectorised=True)
    slow = make(args.method, data, args, vectorised=False)
    device = fast.device
    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu ({torch.get_num_threads()} threads)"
    )
    schedule = f"E={args.local_steps} steps"
    if args.local_epochs is not None:
        schedule = f"{args.local_epochs} epoch(s) over {min(sizes)}-{max(sizes)} clips"
    print(
        f"{args.method}, {args.clients} clients/round, {schedule}, B={args.batch_size}, "
        f"{args.seconds:g}-s clips, backbone {args.backbone or DEFAULT_BACKBONE}, on {name}"
    )
    print(allocator)
    vectorised = time_rounds(fast, args.rounds)
    loop = time_rounds(slow, args.rounds)
    central = centralised_samples_per_s(fast, args)
    fed_samples = args.clients * args.batch_size * args.local_steps
    if args.local_epochs is not None:
        fed_samples = sum(sizes) * args.local_epochs
    print("\n| engine | client updates/s | samples/s | round time |")
    print("|---|---|---|---|")
    print(
        f"| per-client loop | {args.clients / loop:.1f} | {fed_samples / loop:.0f} | {loop:.3f} s |"
    )
    print(
        f"| vectorised (torch.func) | {args.clients / vectorised:.1f} | {fed_samples / vectorised:.0f} | {vectorised:.3f} s |"
    )
    print(f"| centralised minibatch SGD, same model and total batch | | {central:.0f} | |")
    print(
        f"\nvectorised / loop: {loop / vectorised:.2f}x;  centralised / vectorised: {central / (fed_samples / vectorised):.2f}x"
    )
    if args.dp:
        from uvtrain.config import Privacy
        from uvtrain.privacy import plan_privacy

        plan = plan_privacy(
            Privacy("central", clip_norm=1.0, dp_noise_multiplier=1.0),
            rounds=args.rounds + 1,
            cohort=args.clients,
            users=10 * args.clients,
        )
        one_pass = fast.next_round().updates.aggregate is not None  # the path a round took
        path = "batched one-pass" if one_pass else "vmap"
        for label, forced in (("engine's choice", None), ("vmap", "vmap"), ("loop", "loop")):
            private = make(args.method, data, args, vectorised=True, privacy=plan)
            if forced is not None:
                private.step = lambda private=private, forced=forced: (
                    private.next_round(path=forced).metrics
                )
            dp = time_rounds(private, args.rounds)
            print(f"| DP (clip C=1 + central noise z=1), {label} | {args.clients / dp:.1f} | "
                  f"{fed_samples / dp:.0f} | {dp:.3f} s |  DP / non-DP ({path}): "
                  f"{dp / vectorised:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
