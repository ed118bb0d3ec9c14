"""The papers' schedules at the papers' shape: each preset's first rounds, timed, and the full
schedule projected beside the paper's own wall-clock.

For every engine preset (``uvtrain presets``: FedUV and FedHide; FedFace's cross-silo trainer is
not the simulation engine and is not timed here), the simulation is built exactly as ``uvtrain
run --preset NAME`` builds it — the preset's method and parameters, cohort M = ε·K, batch B,
local steps, backbone (the model default of the modality where the preset names none) — on
stand-in data of the paper's shape (``users × samples × input``, :attr:`uvtrain.presets.Preset.
stand_in`): random inputs, every client holding a reference to the same array, so the data costs
the memory of one client (speed runs; nothing is learnt). It prints, per preset, seconds per
round, client updates/s and samples/s, the peak resident memory of the process, and the full
schedule's projected hours beside the paper's (FedHide Sec. 4: 21 h CIFAR-100, 24 h VoxCeleb1,
80 h VGGFace2 on one RTX A5000; FedUV states none).

    python benchmarks/paper_scale.py [--presets fedhide-cifar100,...] [--rounds 3] [--device auto]
                                     [--default-allocator] [--peers feduv-mnistuv]

``--peers PRESET`` then puts that FedUV preset's cohort (M users, one local epoch over the
stand-in's samples) through our per-client loop, pfl and Flower's simulation as well
(``peers.py``: the maths compared after one round, the speed of each against our engine); the
peers run in ``--peer-python``'s environment (docs/benchmarks.md).

It runs under glibc settings that keep freed memory (``_allocator.py``), as ``simulate.py`` does.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import sys
import time

import numpy as np
import torch
from _allocator import keep_freed_memory

from uvsdk.inputs import model_input
from uvtrain.config import RunConfig
from uvtrain.engine import Simulation, pick_device
from uvtrain.models.registry import BACKBONES
from uvtrain.presets import PRESETS
from uvtrain.run import build_run_backbone, engine_config

#: Hours the paper reports for the whole schedule on one GPU (FedHide Sec. 4, RTX A5000).
PAPER_HOURS = {"fedhide-cifar100": 21.0, "fedhide-voxceleb1": 24.0, "fedhide-vggface2": 80.0}

#: The input of each preset's stand-in: the paper's shape (FedUV Sec. 6.1, FedHide Table 1).
SPECS = {
    "feduv-voxceleb": ("audio", {"sample_rate": 8000, "seconds": 2.048}),
    "feduv-celeba": ("image", {"height": 64, "width": 64, "channels": 3}),
    "feduv-mnistuv": ("image", {"height": 28, "width": 28, "channels": 4}),
    "fedhide-cifar100": ("image", {"height": 32, "width": 32, "channels": 3}),
    "fedhide-voxceleb1": ("audio", {"sample_rate": 16000, "seconds": 2.0}),
    "fedhide-vggface2": ("image", {"height": 64, "width": 64, "channels": 3}),
}


def stand_in(name: str, samples: int) -> tuple[dict, np.ndarray]:
    """The dataset spec and one client's random samples of the paper's shape."""
    modality, shape = SPECS[name]
    rng = np.random.default_rng(0)
    if modality == "audio":
        rate = shape["sample_rate"]
        length = round(shape["seconds"] * rate)
        spec = {
            "sample_rate": rate,
            "window_seconds": length / rate,
            "hop_seconds": length / rate / 2,
            "min_seconds": 0.5,
        }
        return spec, (0.1 * rng.standard_normal((samples, length))).astype(np.float32)
    spec = {key: shape[key] for key in ("height", "width", "channels")}
    pixels = rng.integers(0, 256, (samples, spec["height"], spec["width"], spec["channels"]))
    return spec, pixels.astype(np.uint8)


def peak_memory_mb() -> float:
    """The process's peak resident memory (MiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def local_samples(schedule, samples: int) -> int:
    """Samples one client trains on in a round: E epochs over its data, else steps × B."""
    if schedule.local_epochs:
        return schedule.local_epochs * samples
    return schedule.local_steps * schedule.batch_size


def build_preset(
    name: str, device: torch.device, cohort_only: bool = False, vectorised: bool = True
) -> tuple[Simulation, RunConfig]:
    """The preset's simulation as ``uvtrain run --preset NAME`` builds it, on the stand-in; with
    ``cohort_only``, of one round's M users, every one of them in every round (the same work
    per round: what ``--peers`` puts through the peers)."""
    preset = PRESETS[name]
    config = RunConfig.from_flat(preset.settings)
    users = int(preset.stand_in["users"])
    spec, one_client = stand_in(name, int(preset.stand_in["samples"]))
    modality = SPECS[name][0]
    if config.model.backbone not in BACKBONES:  # named by the paper but not built here
        config = config.replace(backbone=model_input(modality, spec).default_backbone)
    torch.manual_seed(0)
    backbone = build_run_backbone(config, modality, spec)  # as uvtrain run builds it
    engine = dataclasses.replace(engine_config(config, crop=0), vectorised=vectorised)
    if cohort_only:
        users = max(1, round(config.schedule.fraction * users))
        engine = dataclasses.replace(engine, fraction=1.0)
    data = [one_client] * users  # one array, referenced by every client
    return Simulation(config.method, backbone, data, engine, device), config


def time_preset(name: str, rounds: int, device: torch.device) -> dict:
    preset = PRESETS[name]
    simulation, config = build_preset(name, device)
    schedule = config.schedule
    users = int(preset.stand_in["users"])
    samples = int(preset.stand_in["samples"])
    backbone_name = config.model.backbone
    cohort = max(1, round(schedule.fraction * users))
    simulation.step()  # warm-up: allocations, kernels
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(rounds):
        simulation.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    per_round = (time.perf_counter() - started) / rounds
    hours = per_round * schedule.rounds / 3600
    return {
        "preset": name,
        "backbone": backbone_name,
        "cohort": cohort,
        "batch": schedule.batch_size,
        "epochs": schedule.local_epochs,
        "seconds_per_round": per_round,
        "updates_per_s": cohort / per_round,
        "samples_per_s": cohort * local_samples(schedule, samples) / per_round,
        "rounds": schedule.rounds,
        "projected_hours": hours,
        "paper_hours": PAPER_HOURS.get(name),
        "peak_mb": peak_memory_mb(),
    }


def main() -> None:
    allocator = keep_freed_memory()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default=",".join(SPECS), help="comma-separated names")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (after one warm-up)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--peers", metavar="PRESET", default=None,
                        help="also put one FedUV preset's cohort through pfl and Flower's "
                        "simulation (benchmarks/peers.py) and print the speed ratios")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=2, help="--peers: interleaved repeats")
    parser.add_argument("--peer-python", default=os.environ.get("UVSDK_PEER_PYTHON", sys.executable),
                        help="--peers: the python that has pfl and flwr[simulation]")  # fmt: skip
    args = parser.parse_args()
    device = pick_device(args.device)
    if args.peers and PRESETS[args.peers].settings["method"] != "feduv":
        parser.error("--peers: the peers run FedUV's loss; name a feduv-* preset")
    where = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu ({torch.get_num_threads()} threads)"
    )
    print(f"on {where}; {args.rounds} timed rounds per preset after one warm-up; {allocator}")
    print(
        "\n| preset | backbone | M | B | s/round | updates/s | samples/s | rounds | "
        "projected | paper | paper / ours | peak MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.presets.split(","):
        r = time_preset(name.strip(), args.rounds, device)
        paper = f"{r['paper_hours']:g} h" if r["paper_hours"] else "not stated"
        ratio = f"{r['paper_hours'] / r['projected_hours']:.2f}x" if r["paper_hours"] else "—"
        print(
            f"| {r['preset']} | {r['backbone']} | {r['cohort']} | {r['batch']} | "
            f"{r['seconds_per_round']:.3f} | {r['updates_per_s']:.1f} | {r['samples_per_s']:.0f} "
            f"| {r['rounds']:,} | {r['projected_hours']:.1f} h | {paper} | {ratio} | "
            f"{r['peak_mb']:.0f} |",
            flush=True,
        )
    if args.peers:
        from peers import compare

        simulation, _ = build_preset(args.peers, device, cohort_only=True)
        print(f"\n{args.peers} beside the peers: its cohort (M = {simulation.num_clients}, all "
              f"in every round), {args.rounds} rounds x {args.repeats} repeats, on CPU")  # fmt: skip
        compare(
            lambda vectorised: build_preset(args.peers, device, True, vectorised)[0],
            args.rounds,
            args.repeats,
            args.peer_python,
        )


if __name__ == "__main__":
    main()
