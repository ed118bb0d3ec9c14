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
from uvtrain.crosssilo import CrossSilo, split_unknown
from uvtrain.data.base import ClientData, FederatedDataset
from uvtrain.data.partition import Party, partition
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
    assert silo.aggregator.weights.tolist() == [0.5, 0.5]
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


def test_the_step_schedule_sets_each_rounds_lr_and_the_steps_use_it() -> None:
    """The paper's schedule at K = 100 (the fedface presets): lr 0.1, ×0.1 at the end of epochs
    10, 18 and 24 of 12,800 steps — after rounds 1,280, 2,304 and 3,072; the local steps and the
    server's momentum (eq. 6) of a round use that round's lr."""
    paper = EngineConfig(
        rounds=3328,
        local_steps=100,
        batch_size=4,
        lr=0.1,
        lr_decay=0.0,
        lr_milestones="1280,2304,3072",
        lr_gamma=0.1,
    )
    silo = CrossSilo(FedFace(pfm=True, fv=False), _Tiny(), _parties(2), [], paper)
    rounds = [1, 1280, 1281, 2304, 2305, 3072, 3073, 3328]
    expected = [0.1, 0.1, 0.01, 0.01, 0.001, 0.001, 0.0001, 0.0001]
    assert [silo.plan(r).lr for r in rounds] == pytest.approx(expected)
    # epochs (0-based) of 128 rounds: 0-9 at 0.1, 10-17 at 0.01, 18-23 at 0.001, 24-25 at 1e-4
    by_epoch = [silo.plan(128 * epoch + 1).lr for epoch in range(26)]
    assert by_epoch == pytest.approx([0.1] * 10 + [0.01] * 8 + [0.001] * 6 + [0.0001] * 2)
    # a small run: round 2 comes after the milestone, and its steps are taken at 0.05
    small = EngineConfig(
        rounds=2, local_steps=2, batch_size=4, lr=0.1, lr_decay=0.0, lr_milestones="1", lr_gamma=0.5
    )
    silo = CrossSilo(FedFace(pfm=True, fv=False), _Tiny(), _parties(2), [], small)
    used = []
    original = silo.local_training

    def recording(party: int, round_number: int, lr: float):
        used.append((round_number, lr))
        return original(party, round_number, lr)

    silo.local_training = recording
    silo.step()
    before = {k: v.clone() for k, v in silo.params.items()}
    silo.step()
    assert used == [(1, 0.1), (1, 0.1), (2, 0.05), (2, 0.05)]
    name = next(iter(before))  # eq. 6 divides the round's move by its own lr
    momentum = (before[name] - silo.params[name]) / 0.05
    torch.testing.assert_close(silo.shared[f"momentum.{name}"], momentum)


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


def _two_datasets() -> tuple[FederatedDataset, FederatedDataset]:
    from dataclasses import replace

    from uvtrain.data.registry import formant_voices

    first = formant_voices(speakers=24, utterances=4, clip_seconds=0.25, seed=1)
    second = formant_voices(speakers=30, utterances=4, clip_seconds=0.25, seed=2)
    return replace(first, name="corpus-a"), replace(second, name="corpus-b")


def test_parties_from_several_datasets_hold_one_dataset_each() -> None:
    from uvtrain.data.base import combine

    first, second = _two_datasets()
    # the same person names in both corpora: distinct identities once combined
    assert first.clients[0].identity == second.clients[0].identity
    dataset = combine([first, second])
    parties = partition(dataset, 2)  # auto: by dataset
    assert [p.groups for p in parties] == [("corpus-a",), ("corpus-b",)]
    for party, source in zip(parties, (first, second), strict=True):
        assert party.identities == tuple(f"{source.name}/{c.identity}" for c in source.clients)
        np.testing.assert_array_equal(
            party.samples, np.concatenate([c.train for c in source.clients])
        )
        assert party.labels.max() + 1 == len(source.clients)
    assert set(parties[0].identities).isdisjoint(parties[1].identities)
    # 4 parties: each dataset split evenly in two (the paper's 12 = 3 datasets × 4)
    quarters = partition(dataset, 4, "dataset", seed=3)
    assert [p.groups for p in quarters] == [
        ("corpus-a-A",),
        ("corpus-a-B",),
        ("corpus-b-A",),
        ("corpus-b-B",),
    ]
    sizes = [len(first.clients), len(second.clients)]  # evenly: the larger half first
    assert [len(p.identities) for p in quarters] == [
        size - size // 2 if half == 0 else size // 2 for size in sizes for half in (0, 1)
    ]
    assert all(i.startswith("corpus-a/") for p in quarters[:2] for i in p.identities)
    assert all(i.startswith("corpus-b/") for p in quarters[2:] for i in p.identities)
    assert len({i for p in quarters for i in p.identities}) == len(dataset.clients)
    with pytest.raises(ConfigError, match="multiple"):
        partition(dataset, 3, "dataset")
    (pooled,) = partition(dataset, 1)  # the centralised baseline: every dataset's people
    assert len(pooled.identities) == len(dataset.clients)
    with pytest.raises(ConfigError, match="one dataset"):
        partition(first, 2, "dataset")
    # validators: one per dataset, each holding half that dataset's unknown people; the test
    # set holds the other halves
    validators, test = split_unknown(dataset, 2)
    for validator, source in zip(validators, (first, second), strict=True):
        assert {i.split("/")[0] for i in validator.identities} == {source.name}
        assert len(validator.identities) == len(source.unknown) // 2
    assert {c.identity.split("/")[0] for c in test} == {"corpus-a", "corpus-b"}
    held = {i for v in validators for i in v.identities}
    assert held.isdisjoint(c.identity for c in test)
    assert len(held) + len(test) == len(dataset.unknown)


def test_several_datasets_load_as_one_and_must_fit_one_backbone(tmp_path) -> None:
    from dataclasses import replace

    from uvtrain.data.base import DatasetError
    from uvtrain.data.registry import load_dataset

    first, second = _two_datasets()
    paths = [first.save(tmp_path / "a.npz"), second.save(tmp_path / "b.npz")]
    loaded = load_dataset(f"{paths[0]},{paths[1]}")
    assert loaded.name == "corpus-a+corpus-b" and loaded.extra["datasets"] == [
        "corpus-a",
        "corpus-b",
    ]
    assert len(loaded.clients) == len(first.clients) + len(second.clients)
    with pytest.raises(DatasetError, match="twice"):
        load_dataset(f"{paths[0]},{paths[0]}")
    longer = replace(
        second,
        name="corpus-c",
        clients=[replace(c, train=np.tile(c.train, 2)) for c in second.clients],
    )
    with pytest.raises(DatasetError, match="one backbone"):
        load_dataset(f"{paths[0]},{longer.save(tmp_path / 'c.npz')}")


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

    start, run = tmp_path / "start", tmp_path / "run"
    before = train(_config(voices, rounds=0), start, progress=False)
    report = train(_config(voices), run, progress=False)
    assert report == json.loads((run / "report.json").read_text())  # the report it wrote
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
    assert config.method.name == "fedface" and config.model.backbone == "ir-18"
    assert config.method.pfm and config.method.fv
    assert config.method.make_loss() == ArcFace(64.0, 0.5)


def test_solo_is_a_one_party_run_on_that_partys_own_data(tmp_path) -> None:
    """``solo_party=2`` of two parties, one dataset each, trains exactly what a centralised
    (1-party) run on the second dataset alone trains: the paper's Table 1 "Solo"."""
    from uvtrain.run import train

    first, second = _two_datasets()
    a, b = first.save(tmp_path / "a.npz"), second.save(tmp_path / "b.npz")
    settings = {"rounds": 2, "local_steps": 2, "batch_size": 4, "crop_seconds": 0.0}
    solo = _config(f"{a},{b}", parties=2, partition="dataset", solo_party=2, **settings)
    alone = _config(b, parties=1, validators=0, **settings)
    federated = _config(f"{a},{b}", parties=2, partition="dataset", **settings)
    for name, config in (("solo", solo), ("alone", alone), ("federated", federated)):
        train(config, tmp_path / name, progress=False)
    runs = {
        name: torch.load(tmp_path / name / "checkpoint.pt", weights_only=True)
        for name in ("solo", "alone", "federated")
    }
    assert len(runs["solo"]["heads"]) == 1
    for name, value in runs["alone"]["params"].items():
        torch.testing.assert_close(runs["solo"]["params"][name], value)
    torch.testing.assert_close(runs["solo"]["heads"][0], runs["alone"]["heads"][0])
    assert any(
        not torch.equal(runs["solo"]["params"][k], v)
        for k, v in runs["federated"]["params"].items()
    )
    report = json.loads((tmp_path / "solo" / "report.json").read_text())["fedface"]
    assert report["solo_party"] == 2 and report["parties"][0]["groups"] == ["corpus-b"]
    assert not report["fv"] and report["validators"] == []
    with pytest.raises(ConfigError, match="solo_party"):
        _config(b, parties=2, solo_party=3)
