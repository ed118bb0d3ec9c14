"""FedFace's cross-silo trainer (uvtrain.crosssilo): Partially Federated Momentum over rounds, the
parties and validators, and a small run end to end. FedFace's maths by hand (margin losses, the
PFM step, Federated Validation, its parameters) is tests/trainer/algorithms/test_fedface.py's."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from uvtrain.algorithms.fedface import ArcFace, FedFace, head_loss
from uvtrain.config import ConfigError, RunConfig
from uvtrain.crosssilo import CrossSilo, Party, partition, split_unknown
from uvtrain.data.base import ClientData, FederatedDataset
from uvtrain.engine import EngineConfig

# -- Partially Federated Momentum ------------------------------------------------------------------


class _Tiny(nn.Module):
    """A small float backbone for exact comparisons."""

    embedding_dim = 5

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(6, 8)
        self.out = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.layer(x)))


def _parties(count: int, identities: int = 3, per: int = 6, seed: int = 0) -> list[Party]:
    rng = np.random.default_rng(seed)
    result = []
    for p in range(count):
        centres = rng.standard_normal((identities, 6))
        labels = np.repeat(np.arange(identities), per)
        samples = (centres[labels] + 0.3 * rng.standard_normal((len(labels), 6))).astype(np.float32)
        names = tuple(f"p{p}i{i}" for i in range(identities))
        result.append(Party(f"party{p + 1}", names, (), samples, labels))
    return result


def test_pfm_with_k1_and_equal_weights_is_centralised_momentum_sgd() -> None:
    """K = 1, two parties of equal size: the backbone follows torch's momentum SGD on the mean of
    the parties' losses, each head momentum SGD on its own party's loss (lr 2η on the mean loss,
    whose head gradient is halved — the same buffer up to that factor)."""
    torch.manual_seed(0)
    algorithm = FedFace(margin_loss="cosface", pfm=True, fv=False, weight_decay=0.0)
    config = EngineConfig(rounds=4, local_steps=1, batch_size=4, lr=0.05, lr_decay=0.0)
    silo = CrossSilo(algorithm, _Tiny(), _parties(2), [], config)
    assert silo.weights.tolist() == [0.5, 0.5]
    backbone = {k: nn.Parameter(v.clone()) for k, v in silo.params.items()}
    heads = [nn.Parameter(h.clone()) for h in silo.heads]
    optimiser = torch.optim.SGD(
        [{"params": list(backbone.values()), "lr": 0.05}, {"params": heads, "lr": 0.1}],
        momentum=0.9,
    )
    for round_number in range(1, 5):
        optimiser.zero_grad()
        losses = []
        for party in range(2):
            batches, labels = silo.party_batches(round_number, party)
            embeddings = torch.func.functional_call(
                silo.model, (backbone, silo.buffers), batches[0]
            )
            losses.append(head_loss(silo.criterion, heads[party], embeddings, labels[0]))
        (0.5 * (losses[0] + losses[1])).backward()
        optimiser.step()
        silo.step()
    for name, value in backbone.items():
        torch.testing.assert_close(silo.params[name], value.detach(), rtol=1e-5, atol=1e-6)
    for mine, reference in zip(silo.heads, heads, strict=True):
        torch.testing.assert_close(mine, reference.detach(), rtol=1e-5, atol=1e-6)


def test_fedavg_keeps_local_momentum_and_pfm_differs_from_it() -> None:
    config = EngineConfig(rounds=3, local_steps=4, batch_size=4, lr=0.05, lr_decay=0.0)
    runs = {}
    for pfm in (True, False):
        torch.manual_seed(0)
        algorithm = FedFace(margin_loss="cosface", pfm=pfm, fv=False)
        silo = CrossSilo(algorithm, _Tiny(), _parties(2), [], config)
        for _ in range(3):
            silo.step()
        runs[pfm] = silo
    assert len(runs[False].local_momentum) == 2 and not runs[True].local_momentum
    difference = sum(
        float((runs[True].params[k] - runs[False].params[k]).abs().sum()) for k in runs[True].params
    )
    assert difference > 1e-4


def test_the_training_loss_is_logged_smoothed_as_in_table_1() -> None:
    """The round's metrics carry each party's per-step losses smoothed with factor 0.99 (the
    paper's Table 1), continued across rounds and kept in the checkpoint."""
    torch.manual_seed(0)
    config = EngineConfig(rounds=2, local_steps=3, batch_size=4, lr=0.05, lr_decay=0.0)
    silo = CrossSilo(FedFace(pfm=True, fv=False), _Tiny(), _parties(2), [], config)
    steps = []
    original = silo.local_training

    def recording(party: int, round_number: int, lr: float):
        params, losses = original(party, round_number, lr)
        steps.append(losses.numpy().astype(np.float64))
        return params, losses

    silo.local_training = recording
    first, second = silo.step(), silo.step()
    expected = []
    for party in range(2):
        losses = np.concatenate([steps[party], steps[2 + party]])
        value = losses[0]
        for loss in losses:
            value = 0.99 * value + 0.01 * loss
        expected.append(value)
    assert second["party_losses_smoothed"] == pytest.approx(expected, rel=1e-6)
    assert second["loss_smoothed"] == pytest.approx(np.mean(expected), rel=1e-6)
    assert first["party_losses"] == pytest.approx([s.mean() for s in steps[:2]], rel=1e-6)
    state = silo.state_dict()
    assert state["smoothed_losses"].tolist() == pytest.approx(expected, rel=1e-6)


# -- parties and validators ------------------------------------------------------------------------


def _voices(people: int = 24, unknown: int = 12) -> FederatedDataset:
    rng = np.random.default_rng(1)
    languages = ["gmw/en", "gmw/de", "roa/fr", "roa/es", "zlw/pl", "zlw/cs", "urj/fi", "urj/hu"]

    def client(name: str) -> ClientData:
        return ClientData(
            name, *(rng.standard_normal((n, 6)).astype(np.float32) for n in (4, 2, 2))
        )

    names = [f"spk{i:05d}" for i in range(people + unknown)]
    return FederatedDataset(
        "synth-voices",
        "audio",
        {"sample_rate": 16000},
        [client(n) for n in names[:people]],
        [client(n) for n in names[people:]],
        extra={"speakers": {n: {"language": languages[i % 8]} for i, n in enumerate(names)}},
    )


def test_language_partition_keeps_families_together() -> None:
    dataset = _voices()
    parties = partition(dataset, 2)  # 4 families ≥ 2·2: whole families
    families = [{g.split("/")[0] for g in party.groups} for party in parties]
    assert families[0].isdisjoint(families[1]) and len(families[0] | families[1]) == 4
    assert sorted(i for p in parties for i in p.identities) == [c.identity for c in dataset.clients]
    parties = partition(dataset, 3)  # 4 families < 6: whole languages
    assert all("/" in g for p in parties for g in p.groups)
    assert sum(len(p.identities) for p in parties) == 24
    assert sum(len(p.samples) for p in parties) == 24 * 4


def test_random_partition_and_validators() -> None:
    dataset = _voices()
    parties = partition(dataset, 4, "random")
    assert [len(p.identities) for p in parties] == [6, 6, 6, 6]
    validators, test = split_unknown(dataset, 2)
    assert [len(v.identities) for v in validators] == [3, 3] and len(test) == 6
    held = {i for v in validators for i in v.identities}
    assert held.isdisjoint(c.identity for c in test)
    first = validators[0]
    assert first.same.sum() == len(first.same) // 2  # as many impostor pairs as genuine
    with pytest.raises(ConfigError, match="validators"):
        split_unknown(dataset, 4)
    with pytest.raises(ConfigError, match="parties"):
        partition(dataset, 25)


# -- a small run -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def voices(tmp_path_factory: pytest.TempPathFactory):
    """40 instant source-filter voices (32 known, 8 unknown), eight 1-second clips each."""
    from uvtrain.data.registry import formant_voices

    dataset = formant_voices(speakers=40, utterances=8, clip_seconds=1.0)
    return dataset.save(tmp_path_factory.mktemp("voices") / "voices.npz")


def _config(dataset, **changes) -> RunConfig:
    settings = {
        "method": "fedface",
        "dataset": str(dataset),
        "rounds": 24,
        "local_steps": 5,
        "batch_size": 16,
        "crop_seconds": 0.5,
        "lr": 0.003,
        "parties": 3,
        "validators": 1,
        "device": "cpu",
        "checkpoint_every": 1,
    }
    return RunConfig.from_flat({**settings, **changes})


@pytest.mark.slow
def test_a_small_cross_silo_run_learns_and_exports(voices, tmp_path) -> None:
    from uvexport.export import export_run
    from uvsdk import Verifier
    from uvtrain.run import train

    start = train(_config(voices, rounds=0), tmp_path / "start", progress=False)
    run = train(_config(voices), tmp_path / "run", progress=False)
    before = json.loads((start / "report.json").read_text())
    report = json.loads((run / "report.json").read_text())
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["loss"] < 0.7 * lines[0]["loss"]
    section = report["fedface"]
    assert [p["identities"] for p in section["parties"]] == [11, 11, 10]
    assert section["fv"] and len(lines[0]["fv"]["scores"][0]) == 3
    assert sum(section["weights"]) == pytest.approx(1.0)
    assert section["test_accuracy"] > before["fedface"]["test_accuracy"] + 0.05
    assert report["splits"]["unknown"]["eer"] < before["splits"]["unknown"]["eer"]
    assert (run / "weights.png").stat().st_size > 0 and (run / "roc.png").is_file()
    bundle = tmp_path / "face.uvb"
    export_run(run, bundle)
    verifier = Verifier(bundle)
    assert verifier.bundle.manifest.method == "fedface"


@pytest.mark.slow
def test_a_resumed_run_continues_exactly(voices, tmp_path) -> None:
    from uvtrain.run import train

    config = _config(voices, rounds=4, local_steps=2, fv_norm="moving")
    train(config, tmp_path / "straight", progress=False)
    train(
        _config(voices, rounds=2, local_steps=2, fv_norm="moving"),
        tmp_path / "resumed",
        progress=False,
    )
    train(config, tmp_path / "resumed", progress=False)
    straight = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=True)
    resumed = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)
    for name, value in straight["params"].items():
        torch.testing.assert_close(resumed["params"][name], value)
    torch.testing.assert_close(resumed["weights"], straight["weights"])
    torch.testing.assert_close(resumed["moving_norm"], straight["moving_norm"])
    torch.testing.assert_close(resumed["smoothed_losses"], straight["smoothed_losses"])


def test_the_paper_scale_config_is_valid() -> None:
    from pathlib import Path

    from uvtrain.config import resolve

    config = resolve({}, Path(__file__).parents[2] / "benchmarks" / "fedface-paper.toml")
    assert (
        config.method.name == "fedface" and config.backbone == "ir-18" and config.pfm and config.fv
    )
    assert config.algorithm().make_loss() == ArcFace(64.0, 0.5)
