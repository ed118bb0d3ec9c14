"""``benchmarks/peers.py`` without the peers: the table, the workload the peers' workers read
back (one FedAvg round of plain PyTorch SGD on it, as Flower's client does, gives our engine's
round), and a run without pfl or Flower's simulation (one line on how to install them, then our
rows). pfl and Ray are never needed here."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
_spec = importlib.util.spec_from_file_location("peers", BENCHMARKS / "peers.py")
peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peers)
import simulate  # noqa: E402  (benchmarks/ is on the path now)


@pytest.fixture(scope="module")
def build():
    args = argparse.Namespace(clients=3, batch_size=4, seconds=0.5, local_steps=1,
                              local_epochs=None, backbone=None, device="cpu")  # fmt: skip
    data = simulate.client_data(args)
    return lambda vectorised: simulate.make("feduv", data, args, vectorised)


def test_table_ratios_are_speed_relative_to_the_first_row():
    lines = peers.table([("ours", 0.5), ("loop", 1.0), ("peer: not installed", None)], 32)
    assert lines[2] == "| ours | 0.500 | 64.0 | 1.00 |"
    assert lines[3] == "| loop | 1.000 | 32.0 | 0.50 |"
    assert lines[4] == "| peer: not installed | — | — | — |"


def test_the_workload_read_back_gives_our_round(build, tmp_path):
    folder = peers.write_workload(build(True), tmp_path)
    meta, net, data, codewords = peers.read_workload(folder)
    assert meta == {"clients": 3, "lr": 0.1, "batch_size": 4, "local_epochs": 1}
    initial = {k: v.detach().clone() for k, v in net.model.state_dict().items()}
    updates = []
    for samples, codeword in zip(data, codewords, strict=True):  # FedAvg by hand, plain SGD
        net.model.load_state_dict(initial)
        peers.local_sgd(net, samples, codeword, meta)
        updates.append(peers._weights(net.model))
    averaged = {k: np.mean([u[k] for u in updates], axis=0) for k in updates[0]}
    ours = build(True)
    ours.step()
    assert peers.max_difference(ours.params, averaged) < 1e-6
    before = {k: initial[k].numpy() for k in averaged}
    assert peers.max_difference(ours.params, before) > 1e-4  # the round did move the weights


def test_without_the_peers_it_says_how_to_install_them_and_times_ours(build, monkeypatch):
    monkeypatch.setattr(peers, "peer_available", lambda python, kind: False)
    said: list[str] = []
    result = peers.compare(build, rounds=1, repeats=1, python="no-such-python", echo=said.append)
    assert "pip install" in said[0] and "pfl" in said[0] and "flwr[simulation]" in said[0]
    assert result["agreement"] == {} and result["cohort"] == 3
    assert result["seconds"]["batched"] > 0 and result["seconds"]["pfl"] is None
    rows = [line for line in said if line.startswith("| ")]
    assert rows[1].startswith("| our batched engine |") and rows[1].endswith("| 1.00 |")
    assert rows[3] == "| pfl (1 process): not installed | — | — | — |"
