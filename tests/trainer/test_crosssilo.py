"""FedFace (cross-silo): margin losses, Partially Federated Momentum, Federated Validation, the
parties and validators, and a small run end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from uvtrain.algorithms.fedface import (
    ArcFace,
    CosFace,
    FedFace,
    MovingNorm,
    best_threshold_accuracy,
    candidate_weightings,
    fv_update,
    head_loss,
    local_norm,
    make_margin_loss,
    pfm_backbone_step,
    server_momentum,
)
from uvtrain.config import ConfigError, RunConfig
from uvtrain.crosssilo import CrossSilo, Party, partition, split_unknown
from uvtrain.data.base import ClientData, FederatedDataset
from uvtrain.engine import EngineConfig

# -- margin losses ---------------------------------------------------------------------------------


def test_arcface_logits_follow_the_formula() -> None:
    cosine = torch.tensor([[0.9, 0.1, -0.3], [0.2, -0.95, 0.5], [0.0, 0.3, 0.7]])
    labels = torch.tensor([0, 1, 2])
    logits = ArcFace(64.0, 0.5).logits(cosine, labels)
    for row, label in enumerate(labels.tolist()):
        for column in range(3):
            c = float(cosine[row, column])
            if column != label:
                expected = 64.0 * c
            elif math.acos(c) + 0.5 <= math.pi:
                expected = 64.0 * math.cos(math.acos(c) + 0.5)  # s cos(θ + m)
            else:  # θ + m beyond π: insightface's continuation s (cos θ − m sin m)
                expected = 64.0 * (c - math.sin(math.pi - 0.5) * 0.5)
            assert float(logits[row, column]) == pytest.approx(expected, abs=1e-4)
    # row 1's label has cos = −0.95: θ = 2.82 rad, θ + m > π, so the fallback was exercised
    assert math.acos(-0.95) + 0.5 > math.pi


def test_cosface_logits_follow_the_formula() -> None:
    cosine = torch.tensor([[0.9, 0.1], [0.2, -0.4]])
    logits = CosFace(64.0, 0.35).logits(cosine, torch.tensor([1, 0]))
    expected = 64.0 * torch.tensor([[0.9, 0.1 - 0.35], [0.2 - 0.35, -0.4]])
    torch.testing.assert_close(logits, expected)


def test_margin_losses_default_to_the_papers_margins() -> None:
    assert make_margin_loss("arcface") == ArcFace(64.0, 0.5)
    assert make_margin_loss("cosface") == CosFace(64.0, 0.35)
    assert make_margin_loss("cosface", 30.0, 0.2) == CosFace(30.0, 0.2)
    with pytest.raises(ValueError, match="arcface or cosface"):
        make_margin_loss("sphereface")


def test_head_loss_is_the_cross_entropy_of_the_margin_logits() -> None:
    torch.manual_seed(0)
    centres, embeddings = torch.randn(4, 6), torch.randn(3, 6)
    labels = torch.tensor([2, 0, 3])
    loss = head_loss(CosFace(64.0, 0.35), centres, embeddings, labels)
    unit = nn.functional.normalize
    cosine = unit(embeddings, dim=1) @ unit(centres, dim=1).T
    logits = 64.0 * (cosine - 0.35 * nn.functional.one_hot(labels, 4))
    expected = -torch.log_softmax(logits, dim=1)[torch.arange(3), labels].mean()
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)


# -- Partially Federated Momentum ------------------------------------------------------------------


def test_pfm_two_parties_two_steps_by_hand() -> None:
    """Party p minimises ½ a_p (θ − b_p)², a = (1, 2), b = (0, 3); θ = 1, M = 0.5, μ = 0.9,
    η = 0.1, K = 2, w = (½, ½). Worked by hand (eq. 4: θ ← θ − η (g + μ M / K), μ M / K = 0.225):

    party 1: g = 1        → θ = 1 − 0.1·1.225       = 0.8775
             g = 0.8775   → θ = 0.8775 − 0.1·1.1025 = 0.76725
    party 2: g = −4       → θ = 1 + 0.1·3.775       = 1.3775
             g = −3.245   → θ = 1.3775 + 0.1·3.02   = 1.6795
    Θ = ½ (0.76725 + 1.6795) = 1.223375;  M = (1 − 1.223375) / 0.1 = −2.23375   (eqs. 5, 6)
    """
    theta, momentum = torch.tensor(1.0), torch.tensor(0.5)
    finals = []
    for a, b, path in ((1.0, 0.0, (0.8775, 0.76725)), (2.0, 3.0, (1.3775, 1.6795))):
        local = theta.clone()
        for expected in path:
            local = pfm_backbone_step(local, a * (local - b), momentum, 2, 0.1, 0.9)
            assert float(local) == pytest.approx(expected, abs=1e-6)
        finals.append(local)
    aggregate = FedFace().aggregate({"theta": torch.stack(finals)}, torch.tensor([0.5, 0.5]))
    assert float(aggregate["theta"]) == pytest.approx(1.223375, abs=1e-6)
    assert float(server_momentum(theta, aggregate["theta"], 0.1)) == pytest.approx(
        -2.23375, abs=1e-5
    )


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


# -- Federated Validation --------------------------------------------------------------------------


def test_local_norm_by_hand() -> None:
    """Scores (0.8, 0.9, 0.7): mean 0.8, population std √(0.02 / 3) = 0.0816497; ε = 0.001."""
    normalised = local_norm(np.array([[0.8, 0.9, 0.7], [0.5, 0.5, 0.5]]), 0.001)
    assert normalised[0] == pytest.approx([0.0, 0.1 / 0.0826497, -0.1 / 0.0826497], rel=1e-5)
    assert normalised[1] == pytest.approx([0.0, 0.0, 0.0])  # equal scores: no preference


def test_moving_norm_by_hand() -> None:
    """Step 1 starts at the step's own statistics (mean 0.8, var 0.02/3). Step 2, scores
    (0.9, 1.0, 0.8), γ = 0.01: mean = 0.99·0.8 + 0.01·0.9 = 0.801; spread = mean of
    (0.099², 0.199², 0.001²) = 0.049403 / 3 = 0.01646767; var = 0.99·0.00666667 + 0.01·0.01646767
    = 0.00676467; the first score normalises to 0.099 / (√0.00676467 + 0.001) = 1.18923."""
    norm = MovingNorm(gamma=0.01, epsilon=0.001)
    first = norm(np.array([[0.8, 0.9, 0.7]]))
    assert first[0] == pytest.approx([0.0, 0.1 / 0.0826497, -0.1 / 0.0826497], rel=1e-5)
    second = norm(np.array([[0.9, 1.0, 0.8]]))
    assert norm.mean == pytest.approx([0.801])
    assert norm.var == pytest.approx([0.00676467], rel=1e-5)
    assert second[0, 0] == pytest.approx(1.18923, rel=1e-4)


def test_fv_update_by_hand() -> None:
    """Candidate 2 wins (normalised sums 0, 2, −2): w = 0.99·(½, ½) + 0.01·(0.8, 0.2)."""
    candidates = np.array([[0.5, 0.5], [0.8, 0.2], [0.1, 0.9]])
    normalised = np.array([[0.0, 1.0, -1.0], [0.0, 1.0, -1.0]])
    updated, best = fv_update(np.array([0.5, 0.5]), candidates, normalised, 0.01)
    assert best == 1
    assert updated == pytest.approx([0.503, 0.497])
    # a tie keeps the current weighting (the first candidate)
    same, best = fv_update(np.array([0.5, 0.5]), candidates, np.zeros((2, 3)), 0.01)
    assert best == 0 and same == pytest.approx([0.5, 0.5])


def test_candidates_start_with_the_current_weighting() -> None:
    current = np.array([0.2, 0.3, 0.5])
    candidates = candidate_weightings(current, 3, np.random.default_rng(0))
    assert candidates.shape == (3, 3)
    assert candidates[0] == pytest.approx(current)
    assert candidates.sum(axis=1) == pytest.approx([1, 1, 1])
    assert (candidates >= 0).all()


def test_best_threshold_accuracy_by_hand() -> None:
    same = np.array([False, False, True, True])
    assert best_threshold_accuracy(np.array([0.1, 0.2, 0.8, 0.9]), same, folds=2) == 1.0
    # folds {0.1 F, 0.4 T} and {0.6 F, 0.9 T}: the threshold of one (0.75, 0.25) misclassifies
    # one pair of the other: accuracy ½ on each
    assert best_threshold_accuracy(np.array([0.1, 0.6, 0.4, 0.9]), same, folds=2) == 0.5


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


def _flat(**values) -> RunConfig:
    """A config from the flat keys a user writes."""
    return RunConfig.from_flat(values)


def test_fedface_config_is_checked() -> None:
    _flat(method="fedface", dataset="x", pfm=False, fv=True)
    for bad in (
        {"margin_loss": "softmax"},
        {"fv_norm": "global"},
        {"fv_candidates": 1},
        {"parties": 0},
        {"pfm": 1},  # not a bool
        {"momentum": 1.0},
    ):
        with pytest.raises(ConfigError):
            _flat(method="fedface", dataset="x", **bad)


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


def test_the_paper_scale_config_is_valid() -> None:
    from pathlib import Path

    from uvtrain.config import resolve

    config = resolve({}, Path(__file__).parents[2] / "benchmarks" / "fedface-paper.toml")
    assert (
        config.method.name == "fedface" and config.backbone == "ir-18" and config.pfm and config.fv
    )
    assert config.algorithm().make_loss() == ArcFace(64.0, 0.5)
