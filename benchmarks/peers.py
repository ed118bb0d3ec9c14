"""Our simulation engine beside the peers: the same FedUV workload through our batched engine, our
per-client loop, pfl-research (Apple's ``pfl``, one process) and Flower's simulation (Ray), in one
run, with the speed of each relative to our batched engine.

    python benchmarks/peers.py [--rounds 3] [--repeats 3] [--clients 32] [--batch-size 16]
                               [--peer-python ~/venv-pfl/bin/python] [--default-allocator]

The workload is ``simulate.py``'s (``client_data`` and ``make``): M synthetic voices of B 1-s clips
each, the default audio network (logmel-tdnn) under FedUV's 127-code head, the positive-only loss,
one local epoch (each client holds B clips: one SGD step of B), every client in every round,
FedAvg. The engine writes its clients, their codewords and its initial model to a folder; the
peers' workers (this file, ``--worker pfl|flower``, run by the peers' python) read it back:

- **pfl**: a ``pfl.model.pytorch.PyTorchModel`` (local SGD, central SGD of lr 1 on the averaged
  model difference), ``FederatedAveraging``, a ``FederatedDataset`` of the same per-client arrays,
  ``SimulatedBackend``: pfl's simulation in one process;
- **Flower**: ``flwr.simulation.run_simulation`` (Ray backend, one CPU per client actor, as many
  actors as cores) with a ``ClientApp`` doing the same local SGD and the ``ServerApp`` strategy
  ``FedAvg`` (weighted by examples: the clients hold the same count).

Each repeat times our two paths, then pfl, then Flower (one warm-up round each, not timed; every
other repeat in the reverse order, as the load of a shared machine drifts), and prints each one's
median with the load average; the table's figures are medians over all timed rounds of all
repeats. Before timing, one round of each peer from the same initial weights and the same
batches is compared with ours: the largest difference of any global weight is printed (the same
maths gives float32 rounding, ~1e-7).

pfl and Flower's simulation live in a virtual environment of their own (pfl 0.6 requires
``dp-accounting<0.6``, the project pins 0.6.0; Flower's simulation needs Ray), named by
``--peer-python`` or ``$UVSDK_PEER_PYTHON`` (docs/benchmarks.md says how to make it). Without
one that has them, the table has our two rows and a line says how to install the peers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
INSTALL = (
    "python -m venv ~/venv-pfl && ~/venv-pfl/bin/pip install -c benchmarks/peers-constraints.txt "
    "torch==2.13.0 pfl 'flwr[simulation]' -e '.[train]'; then --peer-python ~/venv-pfl/bin/python"
)
PEERS = {"pfl": "pfl (1 process)", "flower": "Flower simulation (Ray)"}


# -- the workload, as files the peers read ---------------------------------------------------------


def write_workload(simulation, folder: Path) -> Path:
    """The engine's clients, codewords, schedule and initial model (before any round) in
    ``folder``, for the peers' workers."""
    config = simulation.config
    sizes = [len(samples) for samples in simulation.data]
    if config.local_epochs is None and (
        config.local_steps != 1 or set(sizes) != {config.batch_size}
    ):
        raise ValueError("the peers run local epochs: give local_epochs, or B clips per client")
    clients = simulation.clients_of_round(1)
    if len(clients) != len(sizes):
        raise ValueError("the peers train every client in every round: give fraction 1")
    folder.mkdir(parents=True, exist_ok=True)
    # each client's samples in the order of its round-1 batches (the peers take them in order),
    # so that one round of the peers and of ours see the same batches
    if config.local_epochs is None:
        ordered = list(simulation.batches_of_round(1, clients)[:, 0])
    else:
        ordered = [
            torch.cat(batches[: -(-len(simulation.data[client]) // config.batch_size)])
            for client, batches in zip(
                clients, simulation.epoch_batches_of_round(1, clients), strict=True
            )
        ]
    for position, samples in enumerate(ordered):
        np.save(folder / f"client-{position}.npy", samples.cpu().numpy())
    codewords = simulation.constants["codeword"][torch.as_tensor(clients)]
    np.save(folder / "codewords.npy", codewords.cpu().numpy())
    torch.save(simulation.load_into_model(), folder / "model.pt")
    meta = {
        "clients": len(sizes),
        "lr": simulation.config.learning_rate(1),
        "batch_size": config.batch_size,
        "local_epochs": config.local_epochs or 1,
    }
    (folder / "workload.json").write_text(json.dumps(meta))
    return folder


class PeerNet(nn.Module):
    """The engine's model with FedUV's positive loss as the peers ask for it: ``loss(x, v)`` with
    each sample's codeword ``v`` beside it (pfl unpacks a batch into ``loss``)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, samples: torch.Tensor) -> torch.Tensor:
        return self.model(samples)

    def loss(self, samples: torch.Tensor, codewords: torch.Tensor) -> torch.Tensor:
        outputs = self.model(samples)
        return torch.relu(1.0 - (outputs * codewords).sum(-1) / codewords.shape[-1]).mean()

    @torch.no_grad()
    def metrics(self, samples: torch.Tensor, codewords: torch.Tensor) -> dict:
        from pfl.metrics import Weighted

        loss = float(self.loss(samples, codewords))
        return {"loss": Weighted(loss * len(samples), len(samples))}


def read_workload(folder: Path) -> tuple[dict, PeerNet, list[np.ndarray], np.ndarray]:
    meta = json.loads((folder / "workload.json").read_text())
    model = torch.load(folder / "model.pt", weights_only=False)
    data = [np.load(folder / f"client-{i}.npy") for i in range(meta["clients"])]
    return meta, PeerNet(model), data, np.load(folder / "codewords.npy")


def with_codewords(samples: np.ndarray, codeword: np.ndarray) -> np.ndarray:
    return np.repeat(codeword[None].astype(np.float32), len(samples), axis=0)


def local_sgd(net: PeerNet, samples: np.ndarray, codeword: np.ndarray, meta: dict) -> None:
    """One client's local training in plain PyTorch (Flower's ClientApp): E epochs of SGD in
    batches of B, in order (the batches' order does not matter for one step)."""
    optimiser = torch.optim.SGD(net.parameters(), lr=meta["lr"])
    x = torch.as_tensor(samples)
    v = torch.as_tensor(with_codewords(samples, codeword))
    for _ in range(meta["local_epochs"]):
        for start in range(0, len(x), meta["batch_size"]):
            optimiser.zero_grad()
            net.loss(
                x[start : start + meta["batch_size"]], v[start : start + meta["batch_size"]]
            ).backward()
            optimiser.step()


# -- the workers (run by the peers' python) -------------------------------------------------------


def run_pfl(folder: Path, rounds: int) -> dict:
    """``rounds`` rounds of pfl's FedAvg simulation: the times between rounds, the weights after
    the first."""
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Metrics
    from pfl.model.pytorch import PyTorchModel

    meta, net, data, codewords = read_workload(folder)
    per_sample = [with_codewords(x, v) for x, v in zip(data, codewords, strict=True)]
    users = list(range(meta["clients"]))

    def make_dataset(user: int) -> Dataset:
        return Dataset(raw_data=[data[user], per_sample[user]], user_id=str(user))

    federated = FederatedDataset(make_dataset, get_user_sampler("minimize_reuse", users))
    model = PyTorchModel(
        net,
        local_optimizer_create=torch.optim.SGD,
        central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0),
    )
    stamps: list[float] = []
    first: dict[str, np.ndarray] = {}

    class Clock(TrainingProcessCallback):
        def on_train_begin(self, *, model):
            stamps.append(time.perf_counter())
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            stamps.append(time.perf_counter())
            if central_iteration == 0:
                first.update(_weights(net.model))
            return False, Metrics()

    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(
            central_num_iterations=rounds,
            evaluation_frequency=rounds + 1,  # only before round 1 (pfl evaluates at 0)
            train_cohort_size=meta["clients"],
            val_cohort_size=0,
        ),
        backend=SimulatedBackend(training_data=federated, val_data=federated),
        model=model,
        model_train_params=NNTrainHyperParams(
            local_learning_rate=meta["lr"],
            local_num_epochs=meta["local_epochs"],
            local_batch_size=meta["batch_size"],
        ),
        model_eval_params=NNEvalHyperParams(local_batch_size=meta["batch_size"]),
        callbacks=[Clock()],
        send_metrics_to_platform=False,
    )
    return {"seconds": np.diff(stamps).tolist(), "first": first}


def run_flower(folder: Path, rounds: int) -> dict:
    """``rounds`` rounds of Flower's simulation (Ray backend): the times between rounds, the
    weights after the first."""
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    meta, net, _, _ = read_workload(folder)
    initial = ArrayRecord(net.model.state_dict())
    stamps: list[float] = []
    first: dict[str, np.ndarray] = {}
    client_app = ClientApp()

    @client_app.train()
    def train(message: Message, context: Context) -> Message:
        # what a Flower client does: build the network, load the round's weights, train
        work = Path(str(message.content["config"]["workload"]))
        meta = json.loads((work / "workload.json").read_text())
        net = PeerNet(torch.load(work / "model.pt", weights_only=False))
        net.model.load_state_dict(message.content["arrays"].to_torch_state_dict())
        client = int(context.node_config["partition-id"])
        samples = np.load(work / f"client-{client}.npy")
        local_sgd(net, samples, np.load(work / "codewords.npy")[client], meta)
        metrics = MetricRecord({"num-examples": len(samples)})
        content = RecordDict({"arrays": ArrayRecord(net.model.state_dict()), "metrics": metrics})
        return Message(content=content, reply_to=message)

    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        def clock(server_round: int, arrays: ArrayRecord) -> None:
            stamps.append(time.perf_counter())
            if server_round == 1:
                state = arrays.to_torch_state_dict()
                first.update({k: v.numpy() for k, v in state.items() if k in _weights(net.model)})

        strategy = FedAvg(
            fraction_train=1.0,
            fraction_evaluate=0.0,
            min_train_nodes=meta["clients"],
            min_available_nodes=meta["clients"],
        )
        strategy.start(
            grid=grid,
            initial_arrays=initial,
            num_rounds=rounds,
            train_config=ConfigRecord({"workload": str(folder)}),
            evaluate_fn=clock,
        )

    cores = os.cpu_count() or 1
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=meta["clients"],
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": cores, "include_dashboard": False},
        },
    )
    return {"seconds": np.diff(stamps).tolist(), "first": first}


def _weights(model: nn.Module) -> dict[str, np.ndarray]:
    return {
        k: v.detach().cpu().numpy().copy() for k, v in model.named_parameters() if v.requires_grad
    }


def worker(kind: str, folder: Path, rounds: int, out: Path) -> None:
    result = (run_pfl if kind == "pfl" else run_flower)(folder, rounds)
    np.savez(
        out,
        seconds=np.asarray(result["seconds"]),
        **{f"w/{k}": v for k, v in result["first"].items()},
    )


# -- the parent: ours, then the peers in their python ----------------------------------------------


def peer_available(python: str, kind: str) -> bool:
    modules = {"pfl": "pfl", "flower": "flwr.simulation, ray"}[kind]
    probe = subprocess.run([python, "-c", f"import {modules}"], capture_output=True)
    return probe.returncode == 0


def run_peer(python: str, kind: str, folder: Path, rounds: int) -> tuple[list[float], dict]:
    """The peer's worker in ``python``: seconds of each round after the first (warm-up), and the
    global weights after round 1."""
    with tempfile.TemporaryDirectory(prefix=f"peers-{kind}-") as tmp:
        out = Path(tmp) / "result.npz"
        command = [python, str(HERE / "peers.py"), "--worker", kind, "--workload", str(folder),
                   "--rounds", str(rounds + 1), "--out", str(out)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=_peer_env())
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"{kind} worker failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        with np.load(out) as result:
            seconds = result["seconds"].tolist()
            first = {k[2:]: result[k] for k in result.files if k.startswith("w/")}
    return seconds[1:], first


def _peer_env() -> dict[str, str]:
    """The environment of a peer's worker: this checkout first on its path (so it runs the same
    model code as ours), and no allocator setting of ours it would not have by default."""
    env = dict(os.environ)
    roots = [str(HERE.parent / part) for part in ("sdk", "trainer", "export", "deploy")]
    env["PYTHONPATH"] = os.pathsep.join([*roots, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def time_rounds(simulation, rounds: int) -> list[float]:
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        simulation.step()
        seconds.append(time.perf_counter() - started)
    return seconds


def max_difference(ours: dict[str, torch.Tensor], theirs: dict[str, np.ndarray]) -> float:
    if set(ours) != set(theirs):
        raise ValueError(f"parameter names differ: {sorted(set(ours) ^ set(theirs))}")
    return max(float(np.abs(ours[k].cpu().numpy() - theirs[k]).max()) for k in ours)


def table(rows: list[tuple[str, float | None]], cohort: int) -> list[str]:
    """Markdown rows: seconds per round, client updates per second and the speed relative to the
    first row (our batched engine = 1.00); a row without a time says why in its first cell."""
    base = rows[0][1]
    lines = ["| engine | s/round | client updates/s | speed vs our batched engine |",
             "|---|---|---|---|"]  # fmt: skip
    for name, seconds in rows:
        if seconds is None:
            lines.append(f"| {name} | — | — | — |")
        else:
            lines.append(
                f"| {name} | {seconds:.3f} | {cohort / seconds:.1f} | {base / seconds:.2f} |"
            )
    return lines


def compare(
    build: Callable[[bool], object],
    rounds: int,
    repeats: int,
    python: str,
    echo: Callable[[str], None] = print,
) -> dict:
    """Time ``build(vectorised)``'s simulation by both of our paths and the peers in ``python``,
    interleaved over ``repeats``; check one round of each peer against ours; print the table."""
    ours_batched, ours_loop = build(True), build(False)
    cohort = len(ours_batched.clients_of_round(1))
    available = {kind: peer_available(python, kind) for kind in PEERS}
    missing = [kind for kind, ok in available.items() if not ok]
    if missing:
        names = " and ".join("pfl" if k == "pfl" else "flwr[simulation]" for k in missing)
        echo(f"{names} not importable by {python}: to compare with the peers, {INSTALL}")
    with tempfile.TemporaryDirectory(prefix="peers-workload-") as tmp:
        folder = write_workload(build(True), Path(tmp))
        reference = build(True)
        reference.step()
        agreement = {}
        for kind in PEERS:
            if available[kind]:
                _, first = run_peer(python, kind, folder, 0)
                agreement[kind] = max_difference(reference.params, first)
                echo(f"one round, {PEERS[kind]} against ours: max |Δw| = {agreement[kind]:.2e}")
        seconds: dict[str, list[float]] = {"batched": [], "loop": [], **{k: [] for k in PEERS}}
        ours_batched.step()  # warm-up
        ours_loop.step()
        runs = {
            "batched": lambda: time_rounds(ours_batched, rounds),
            "loop": lambda: time_rounds(ours_loop, rounds),
            **{
                kind: (lambda kind=kind: run_peer(python, kind, folder, rounds)[0])
                for kind in PEERS
                if available[kind]
            },
        }
        for repeat in range(repeats):
            # the machine's load drifts: every other repeat runs the engines in reverse order
            order = list(runs) if repeat % 2 == 0 else list(runs)[::-1]
            said = []
            for kind in order:
                times = runs[kind]()
                seconds[kind] += times
                said.append(f"{kind} {statistics.median(times):.3f} s (load {_load()})")
            echo(f"repeat {repeat + 1}/{repeats}, s/round: " + "; ".join(said))
    medians = {k: statistics.median(v) if v else None for k, v in seconds.items()}
    rows = [("our batched engine", medians["batched"]), ("our per-client loop", medians["loop"])]
    rows += [
        (PEERS[k] if available[k] else f"{PEERS[k]}: not installed", medians[k]) for k in PEERS
    ]
    for line in table(rows, cohort):
        echo(line)
    return {"seconds": medians, "agreement": agreement, "cohort": cohort}


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    if "--worker" in sys.argv:
        parser = argparse.ArgumentParser()
        parser.add_argument("--worker", choices=sorted(PEERS), required=True)
        parser.add_argument("--workload", type=Path, required=True)
        parser.add_argument("--rounds", type=int, required=True)
        parser.add_argument("--out", type=Path, required=True)
        args = parser.parse_args()
        worker(args.worker, args.workload, args.rounds, args.out)
        return

    from _allocator import keep_freed_memory
    from simulate import client_data, make

    allocator = keep_freed_memory()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats")
    parser.add_argument("--clients", type=int, default=32, help="M: clients per round")
    parser.add_argument("--batch-size", type=int, default=16, help="B: clips per client")
    parser.add_argument("--seconds", type=float, default=1.0, help="clip length")
    parser.add_argument("--backbone", default=None)
    parser.add_argument(
        "--peer-python", default=os.environ.get("UVSDK_PEER_PYTHON", sys.executable)
    )
    args = parser.parse_args()
    args.method, args.local_steps, args.local_epochs, args.device = "feduv", 1, None, "cpu"
    data = client_data(args)
    print(f"FedUV, M={args.clients}, B={args.batch_size}, E=1 epoch of B clips, {args.seconds:g}-s "
          f"clips, backbone {args.backbone or 'default (logmel-tdnn)'}, torch {torch.__version__} "
          f"on {torch.get_num_threads()} threads; {args.rounds} rounds x {args.repeats} repeats "
          f"after a warm-up round; load average {_load()}; {allocator}")  # fmt: skip
    compare(lambda vectorised: make("feduv", data, args, vectorised), args.rounds, args.repeats,
            args.peer_python)  # fmt: skip
    print(f"load average at the end: {_load()}")


if __name__ == "__main__":
    main()
