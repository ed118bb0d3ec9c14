"""The papers' presets against the papers' own numbers, transcribed here from the paper texts
(../shared/papers), independently of ``uvtrain/presets.py``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from uvtrain.cli import app
from uvtrain.config import RunConfig
from uvtrain.presets import PRESETS

runner = CliRunner()

# FedUV (Hosseini et al.). Sec. 6.2: "FedAvg method with 1 local epoch and 20,000 rounds with
# 0.01 of users selected at each round ... SGD optimizer with learning rate of 0.1 and learning
# rate decay of 0.01". Sec. 6.1: 1,000 users for each dataset. Table 1: c = 127, 255, 511.
FEDUV = {
    "clients": 1000,
    "rounds": 20000,
    "fraction": 0.01,
    "lr": 0.1,
    "lr_decay": 0.01,
    "local_epochs": 1,
}
FEDUV_CODES = (127, 255, 511)
FEDUV_DATA = {"feduv-voxceleb": "voxceleb1", "feduv-celeba": "celeba", "feduv-mnistuv": "mnist-uv"}
# Table 2: one network per dataset.
FEDUV_NETWORKS = {
    "feduv-voxceleb": "feduv-voxceleb-conv1d",
    "feduv-celeba": "feduv-celeba-conv2d",
    "feduv-mnistuv": "feduv-mnistuv-conv2d",
}

# FedHide (Park & Yun). Table 1: clients / fraction / rounds per dataset. Sec. 4.1: "a minibatch
# size of 16, a negative loss weight of λ = 10, and a learning rate of 0.1", "Clients are
# selected in a round-robin manner, and at each client, the local model is updated with a single
# iteration". Table 4's FedHide(0.1, 10/10/20) row: α = 0.1, K = 10 (CIFAR-100, VoxCeleb1), 20
# (VGGFace2).
FEDHIDE_TABLE1 = {
    "fedhide-cifar100": {"clients": 100, "fraction": 0.1, "rounds": 100_000, "neighbours": 10},
    "fedhide-voxceleb1": {"clients": 1211, "fraction": 0.01, "rounds": 50_000, "neighbours": 10},
    "fedhide-vggface2": {"clients": 8631, "fraction": 0.001, "rounds": 400_000, "neighbours": 20},
}
# Algorithm 1 aggregates with a plain 1/M mean; "All models generate L2-normalized
# 512-dimensional embedding vectors".
FEDHIDE = {
    "batch_size": 16,
    "weight": 10.0,
    "lr": 0.1,
    "sampling": "round-robin",
    "alpha": 0.1,
    "aggregation": "mean",
    "embedding_dim": 512,
}

# FedFace (Bai et al.). Sec. 4.2: ArcFace s = 64, m = 0.5; "batch size of each GPU is set to 64";
# "26 epochs ... 12,800 steps per epoch"; "learning rate is set to 0.1"; "momentum parameter β is
# set to 0.9"; 3 parties, and 12 (each of the 3 datasets split into 4). Table 1: K = 100.
FEDFACE = {"lr": 0.1, "momentum": 0.9, "margin_scale": 64.0, "margin": 0.5, "batch_size": 64}
FEDFACE_PARTIES = {"fedface-3party": 3, "fedface-12party": 12}
# Sec. 4.2: "The learning rate is set to 0.1 at initialization, and decays by 0.1 at the end of
# epoch 10, 18 and 24" (no other decay); "the number of steps per epoch is set to 12,800".
FEDFACE_STEPS_PER_EPOCH = 12_800
FEDFACE_LR_EPOCHS = (10, 18, 24)
FEDFACE_LR_GAMMA = 0.1
# Sec. 4.1: "MS1M, GA and VGG ... are stored at different trainers"; 12 parties (Sec. 4.2):
# "each of the 3 training datasets is evenly split into 4 parts".
FEDFACE_DATASETS = 3


def resolved(name: str) -> dict:
    result = runner.invoke(app, ["run", "--preset", name, "--dry-run"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_every_paper_setup_the_issue_names_is_a_preset() -> None:
    assert set(PRESETS) == {*FEDUV_DATA, *FEDHIDE_TABLE1, *FEDFACE_PARTIES}


@pytest.mark.parametrize("name", sorted(FEDUV_DATA))
def test_feduv_presets_are_sec_6(name: str) -> None:
    config = resolved(name)["config"]
    assert config["method"] == "feduv" and config["dataset"] == FEDUV_DATA[name]
    assert {key: config[key] for key in FEDUV} == FEDUV
    assert config["code_length"] in FEDUV_CODES and config["negative_weight"] == 0.0
    assert config["backbone"] == FEDUV_NETWORKS[name]


@pytest.mark.parametrize("name", sorted(FEDHIDE_TABLE1))
def test_fedhide_presets_are_table_1_and_sec_4(name: str) -> None:
    config = resolved(name)["config"]
    assert config["method"] == "fedhide"
    expected = {**FEDHIDE, **FEDHIDE_TABLE1[name]}
    assert {key: config[key] for key in expected} == expected
    assert config["local_steps"] == 1
    if name == "fedhide-voxceleb1":  # "a Hamming window of 25ms length and 10ms hop size"
        assert config["window"] == "hamming" and config["crop_seconds"] == 2.0


@pytest.mark.parametrize("name", sorted(FEDFACE_PARTIES))
def test_fedface_presets_are_sec_4(name: str) -> None:
    config = resolved(name)["config"]
    assert config["method"] == "fedface" and config["parties"] == FEDFACE_PARTIES[name]
    assert {key: config[key] for key in FEDFACE} == FEDFACE
    assert config["margin_loss"] == "arcface" and config["local_steps"] == 100
    assert config["rounds"] * config["local_steps"] == 26 * 12_800  # 26 epochs of 12,800 steps


@pytest.mark.parametrize("name", sorted(FEDFACE_PARTIES))
def test_fedface_presets_carry_the_papers_schedule_and_datasets(name: str) -> None:
    config = resolved(name)["config"]
    assert config["lr_decay"] == 0.0 and config["lr_gamma"] == FEDFACE_LR_GAMMA
    # the milestones are rounds of K local steps: round m ends at local step m·K
    ends = [int(m) * config["local_steps"] for m in config["lr_milestones"].split(",")]
    assert ends == [epoch * FEDFACE_STEPS_PER_EPOCH for epoch in FEDFACE_LR_EPOCHS]
    datasets = config["dataset"].split(",")
    assert len(datasets) == FEDFACE_DATASETS and config["partition"] == "dataset"
    assert config["parties"] % len(datasets) == 0


def test_flags_override_a_preset_and_every_preset_is_a_valid_config() -> None:
    result = runner.invoke(
        app, ["run", "--preset", "feduv-celeba", "--dry-run", "--code-length", "511"]
    )
    assert result.exit_code == 0, result.output
    described = json.loads(result.stdout)
    assert described["config"]["code_length"] == 511
    assert described["preset"]["name"] == "feduv-celeba" and described["preset"]["notes"]
    for preset in PRESETS.values():
        assert RunConfig.from_flat(preset.settings).method.name == preset.settings["method"]


def test_presets_lists_them_and_an_unknown_one_is_one_line() -> None:
    listed = runner.invoke(app, ["presets"])
    assert listed.exit_code == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == list(PRESETS)
    unknown = runner.invoke(app, ["run", "--preset", "fedfoo", "--dry-run"])
    assert unknown.exit_code == 2
    assert "unknown preset 'fedfoo'" in unknown.output
