"""Rounds per second of a Flower deployment on loopback against the simulator, same model.

    python benchmarks/flower_overhead.py [--devices 4] [--rounds 3] [--methods feduv,fedhide]

Builds one device folder per client of ``--dataset`` (WAV files), runs a real federation on this
machine (a SuperLink, one SuperNode per device, ``flwr run``: ``uvdeploy.local``) for each
method, then runs the simulator on the same decoded samples with the same settings, and prints
seconds per round for both and their ratio. FedUV runs under SecAgg+ (its default), the others
plain. Both sides do the same maths (tests/deploy/test_deploy.py checks a device's update
against the simulator's); the ratio is what the deployment runtime costs: a process per message,
Flower's polling, SecAgg+'s four stages.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from uvdeploy.device import Device
from uvdeploy.local import run_local, write_devices
from uvdeploy.settings import DeploySettings, build_model
from uvtrain.engine import Simulation
from uvtrain.run import engine_config


def simulator_seconds(settings: DeploySettings, samples: list[np.ndarray], rounds: int) -> float:
    """Mean seconds per round of the simulator with the deployment's settings and data."""
    model = build_model(settings, len(samples))
    engine = engine_config(settings.run, settings.crop)
    simulation = Simulation(settings.run.method, model.backbone, samples, engine)
    simulation.step()  # warm-up (first-call costs)
    started = time.perf_counter()
    for _ in range(rounds):
        simulation.step()
    return (time.perf_counter() - started) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synth-voices")
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--methods", default="feduv,fedhide")
    parser.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    args = parser.parse_args()
    os.environ.setdefault("UVSDK_PASSPHRASE", "benchmark passphrase")
    work = Path(args.out or tempfile.mkdtemp(prefix="flower-bench-"))
    devices = work / "devices"
    if not devices.exists():
        write_devices(args.dataset, devices, clients=args.devices)
    print(
        f"{args.devices} devices from {args.dataset}, {args.rounds} rounds, every device each "
        f"round, 1 local step of 16 (torch {torch.__version__}, {os.cpu_count()} CPUs)"
    )
    rows = []
    for method in args.methods.split(","):
        values = {"method": method, "rounds": args.rounds, "fraction": 1.0, "export": False}
        out = work / f"run-{method}"
        started = time.perf_counter()
        run_local(devices, out, values, echo=lambda line: None)
        total = time.perf_counter() - started
        metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        flower = float(np.mean([m["seconds"] for m in metrics]))
        settings = DeploySettings.from_run_config({**values, "out": str(out)})
        samples = [
            Device(
                {"data": str(d / "samples"), "store": str(d / "store")}, settings.input
            ).samples()
            for d in sorted(devices.iterdir())
        ]
        simulated = simulator_seconds(settings, samples, args.rounds)
        mode = "SecAgg+" if settings.secure else "plain"
        rows.append((method, mode, flower, simulated, flower / simulated, total))
    print(
        f"{'method':<8} {'aggregation':<11} {'flower s/round':>14} {'simulator s/round':>17} "
        f"{'ratio':>8} {'flower run, all in':>19}"
    )
    for method, mode, flower, simulated, ratio, total in rows:
        print(
            f"{method:<8} {mode:<11} {flower:>14.2f} {simulated:>17.4f} {ratio:>7.0f}x "
            f"{total:>17.1f} s"
        )


if __name__ == "__main__":
    main()
