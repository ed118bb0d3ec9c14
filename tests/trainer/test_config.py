"""The run config by parts: each part and each method's parameters check themselves; flat keys
(command line, TOML, config.json) reach the part or method that declares them."""

from __future__ import annotations

import ast
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from uvtrain.algorithms import (  # noqa: E402
    METHODS,
    FedAvg,
    FedAwS,
    FedCS,
    FedFace,
    FedGN,
    FedHide,
    FedUV,
    Softmax,
)
from uvtrain.config import (  # noqa: E402
    SERVER_KEYS,
    ConfigError,
    Data,
    Model,
    Privacy,
    RunConfig,
    Schedule,
    changed_settings,
    cli_options,
    read_toml,
    resolve,
)
from uvtrain.methods import PARAMETERS, MethodParameters  # noqa: E402


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: FedHide(alpha=2), "alpha must be in [0, 1]"),
        (lambda: FedHide(neighbours=0), "neighbours >= 1"),
        (lambda: FedHide(weight=-1.0), "weight (λ) must be >= 0"),
        (lambda: FedGN(sigma=-0.1), "sigma must be >= 0"),
        (lambda: FedCS(cosine=1.5), "cosine must be in [-1, 1]"),
        (lambda: Softmax(scale=0.0), "scale must be positive"),
        (lambda: FedAwS(spread_lr=-1.0), "spread_lr and spread_margin must be >= 0"),
        (lambda: FedUV(code_length=100), "code_length must be 127, 255 or 511"),
        (lambda: FedUV(negative_weight=-1.0), "negative_weight must be >= 0"),
        (lambda: FedUV(negative_loss="min"), "negative_loss must be one of max, mean-relu"),
        (lambda: Softmax(softmax_head="arcface"), "softmax_head must be one of plain, cosine"),
        (lambda: FedFace(parties=0), "parties must be >= 1"),
        (lambda: FedFace(partition="alphabetical"), "partition must be"),
        (lambda: FedFace(pfm=1), "pfm must be bool"),
        (lambda: FedHide(alpha=float("nan")), "alpha must be a finite number"),
        (lambda: Schedule(fraction=0.0), "fraction must be in (0, 1]"),
        (lambda: Schedule(rounds=-1), "rounds and seed must be >= 0"),
        (lambda: Schedule(aggregation="median"), "aggregation must be 'weighted' or 'mean'"),
        (lambda: Schedule(local_epochs=0), "local_epochs must be >= 1"),
        (lambda: Schedule(local_epochs=1.5), "local_epochs must be int"),
        (lambda: Schedule(local_steps=3, local_epochs=1), "not both"),
        (lambda: Data("x", clients=1), "clients must be at least 2"),
        (lambda: Data("x", crop_seconds=-1.0), "crop_seconds must be in [0, 3600]"),
        (lambda: Model(backbone=3), "backbone must be str"),
        (lambda: Model(band="telephone"), "band must be one of wide, narrow, not 'telephone'"),
    ],
)
def test_every_part_and_method_checks_itself(make, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        make()
    assert message in str(error.value)


def test_flat_keys_go_to_their_part_and_the_method_keeps_only_its_own() -> None:
    config = RunConfig.from_flat(
        {"method": "fedhide", "dataset": "x", "alpha": 0.2, "rounds": 3, "backbone": "b", "seed": 4}
    )
    assert config.method == FedHide(alpha=0.2) and config.method.name == "fedhide"
    assert config.schedule == Schedule(rounds=3) and config.data == Data("x")
    assert config.model == Model(backbone="b") and config.seed == 4
    flat = config.to_dict()
    assert flat["method"] == "fedhide" and flat["alpha"] == 0.2 and flat["weight"] == 10.0
    assert not {"code_length", "sigma", "cosine", "scale", "parties", "pfm"} & set(flat)
    assert RunConfig.from_flat(flat) == config
    assert config.replace(alpha=0.3).method == FedHide(alpha=0.3)
    assert config.with_method("fedgn").method == FedGN()
    assert config.with_method("fedhide") is config
    with pytest.raises(AttributeError):  # a key is read from its part: config.schedule.rounds
        config.rounds  # noqa: B018


def test_the_algorithms_never_import_the_config() -> None:
    """The config reads the algorithms' registry; the algorithms validate themselves with
    :mod:`uvtrain.validation`, never by importing the config (no import cycle)."""
    folder = Path(__file__).parents[2] / "trainer" / "uvtrain" / "algorithms"
    sources = sorted(folder.glob("*.py"))
    assert sources
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                names = {alias.name for alias in node.names}
                assert module not in ("..config", "uvtrain.config"), path.name
                assert not (module == ".." and "config" in names), path.name


def test_one_resume_check_frees_how_a_run_is_carried_out_not_what_it_trains() -> None:
    before = {"rounds": 5, "lr": 0.1, "device": "cpu", "chunk_size": 8, "eval_every": 0}
    how = {**before, "rounds": 9, "device": "cuda", "chunk_size": 64, "eval_every": 2}
    assert changed_settings(how, before) == []
    assert changed_settings(how, before, rounds_may_change=False) == ["rounds"]
    assert changed_settings({**before, "lr": 0.2, "seed": 1}, before) == ["lr", "seed"]
    # a key added since the run was made counts as its default there (none given: missing)
    assert changed_settings({**before, "seed": 0}, before, {"seed": 0}) == []
    assert changed_settings({**before, "wait": 3}, before, also_free=("wait",)) == []


#: The data protocol's keys of the Data part (issue 35), newer than the config.json files below.
DATA_PROTOCOL_KEYS = (
    "identities",
    "unknown_identities",
    "samples_per_split",
    "unknown_samples",
    "official_split",
)


def test_another_methods_key_is_refused_unless_reading_an_old_config() -> None:
    with pytest.raises(ConfigError, match="weight is a parameter of fedhide, fedgn, fedcs"):
        RunConfig.from_flat({"method": "feduv", "dataset": "x", "weight": 3.0})
    with pytest.raises(ConfigError, match="unknown config key"):
        RunConfig.from_flat({"method": "feduv", "dataset": "x", "learning_rate": 3.0})
    # config.json of a run made when RunConfig held every method's keys (47 of them)
    flat = {"method": "feduv", "dataset": "x", "rounds": 5, "code_length": 255}
    old = RunConfig.from_flat(flat).to_dict()
    for key in [item.name for item in dataclasses.fields(Privacy)]:
        del old[key]  # the privacy part came later
    for key in ("aggregation", "local_epochs", "lr_milestones", "lr_gamma", *SERVER_KEYS):
        del old[key]  # so did these schedule options
    for key in DATA_PROTOCOL_KEYS:
        del old[key]  # and the data protocol's keys
    newer = {"embedding_dim", "window", "solo_party"}  # FedHide's, FedFace's keys added later
    for kind in METHODS.values():
        old.update(
            {k: v for k, v in kind().parameters().items() if k not in old and k not in newer}
        )
    del old["negative_loss"]  # FedUV's form of the negative loss came later too
    del old["softmax_head"]  # and so did softmax's head
    del old["train_pretrained"]  # and the pretrained start's
    del old["random_crop"]  # and FedHide's random crops of whole utterances
    del old["augment"]  # and its image augmentation
    del old["detect_faces"]  # and its face detection (VGGFace2)
    del old["band"]  # and the front end's band (issue 44)
    assert len(old) == 47
    config = RunConfig.from_flat(old, other_methods="ignore")
    assert config.method == FedUV(code_length=255) and config.schedule.rounds == 5


def test_toml_sections_by_part_and_method(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text(
        'method = "fedhide"\n[data]\ndataset = "x"\nclients = 6\n[schedule]\nrounds = 2\n'
        "[fedhide]\nalpha = 0.2\n[feduv]\ncode_length = 255\n"
    )
    config = resolve({}, path)
    assert config.method == FedHide(alpha=0.2) and config.data.clients == 6
    assert config.schedule.rounds == 2
    assert resolve({"method": "feduv"}, path).method == FedUV(code_length=255)
    assert resolve({"alpha": 0.3}, path).method.alpha == 0.3  # the command line beats the file
    path.write_text('method = "fedhide"\ndataset = "x"\n[fedhide]\nsigma = 0.2\n')
    with pytest.raises(ConfigError, match=r"\[fedhide\] has no parameter 'sigma'"):
        resolve({}, path)
    path.write_text("[schedule]\nalpha = 0.2\n")
    with pytest.raises(ConfigError, match=r"\[schedule\] has no key 'alpha'"):
        read_toml(path)
    path.write_text("[training]\nrounds = 2\n")
    with pytest.raises(ConfigError, match=r"unknown section \[training\]"):
        read_toml(path)


def test_the_command_line_options_are_the_dataclasses_fields() -> None:
    flags = {option.name: option.flag for option in cli_options()}
    assert flags["weight"] == "--lambda" and flags["pfm"] == "--pfm/--no-pfm"
    assert flags["negative_loss"] == "--negative-loss"
    assert flags["softmax_head"] == "--softmax-head"
    for kind in METHODS.values():
        for item in kind.__dataclass_fields__.values():
            if item.metadata.get("cli", True) and item.name in kind().parameters():
                assert item.name in flags, item.name
    assert "fv_folds" not in flags and "checkpoint_every" not in flags  # config keys only


@dataclass(frozen=True)
class FedTestParameters(MethodParameters):
    """A new method's parameters (in the project: in uvtrain/methods.py, one PARAMETERS line)."""

    name: ClassVar[str] = "fedtest"
    gamma: float = field(default=1.0, metadata={"help": "FedTest γ."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gamma <= 0:
            raise ConfigError("gamma must be positive")


@dataclass(frozen=True)
class FedTest(FedTestParameters, FedAvg):
    """Its algorithm: the parameters and the hooks (in the project: one file in algorithms/, one
    METHODS line)."""


def test_a_new_method_is_its_parameters_its_hooks_and_two_registry_lines(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from uvtrain.cli import app

    monkeypatch.setitem(PARAMETERS, "fedtest", FedTestParameters)
    monkeypatch.setitem(METHODS, "fedtest", FedTest)
    config = RunConfig.from_flat({"method": "fedtest", "dataset": "x", "gamma": 2.0})
    assert config.method == FedTest(gamma=2.0) and config.to_dict()["gamma"] == 2.0
    path = tmp_path / "run.toml"
    path.write_text('method = "fedtest"\ndataset = "x"\n[fedtest]\ngamma = 3.0\n')
    assert resolve({}, path).method.gamma == 3.0
    light = resolve({}, path, parameters_only=True).method
    assert type(light) is FedTestParameters and light.gamma == 3.0
    with pytest.raises(ConfigError, match="gamma must be positive"):
        RunConfig.from_flat({"method": "fedtest", "dataset": "x", "gamma": -1.0})
    with pytest.raises(ConfigError, match="gamma must be positive"):
        RunConfig.from_flat(
            {"method": "fedtest", "dataset": "x", "gamma": -1.0}, parameters_only=True
        )
    shown = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert "--gamma" in shown.output and "FedTest γ." in shown.output
    assert "fedface or fedtest." in shown.output


def test_every_algorithm_is_its_methods_parameters_and_hooks() -> None:
    """:data:`uvtrain.methods.PARAMETERS` (no torch) and :data:`uvtrain.algorithms.METHODS` name
    the same methods in the same order; each algorithm extends its parameters class without a
    field of its own, so a config checked and printed from the parameters alone (``uvtrain run
    --dry-run``) is the one that trains."""
    assert list(PARAMETERS) == list(METHODS)
    for name, algorithm in METHODS.items():
        parameters = PARAMETERS[name]
        assert issubclass(algorithm, parameters) and algorithm.name == parameters.name == name
        assert dataclasses.fields(algorithm) == dataclasses.fields(parameters), name
        light = RunConfig.from_flat({"method": name, "dataset": "x"}, parameters_only=True)
        full = RunConfig.from_flat({"method": name, "dataset": "x"})
        assert type(light.method) is parameters and type(full.method) is algorithm
        assert light.to_dict() == full.to_dict()
    config = RunConfig.from_flat({"method": "feduv", "dataset": "x"})
    for not_a_method in (FedAvg(), MethodParameters()):  # the core, no method of its own
        with pytest.raises(ConfigError, match="method must be one of"):
            dataclasses.replace(config, method=not_a_method)


def test_a_fedhide_run_folder_from_before_512_d_keeps_its_model(tmp_path: Path) -> None:
    """config.json written before embedding_dim/window existed: the backbone's own dimension and
    the Hann window, so the checkpoint still fits the model rebuilt from it."""
    from uvtrain.run import read_config

    old = RunConfig.from_flat({"method": "fedhide", "dataset": "x"}).to_dict()
    del old["embedding_dim"], old["window"]
    (tmp_path / "config.json").write_text(json.dumps(old))
    config = read_config(tmp_path)
    assert config.method.embedding_dim is None and config.method.window == "hann"
    assert config.method.backbone_options(object) == {}


def test_the_aggregators_are_one_registry_the_config_and_the_simulator_read() -> None:
    """--aggregation's choices, its help and the aggregator a run builds come from one
    registry (uvtrain.aggregators.AGGREGATORS): a new aggregator is its class and one line."""
    from uvtrain.aggregators import AGGREGATORS, make_aggregator
    from uvtrain.rounds import Aggregator, UniformMean, WeightedMean

    assert list(AGGREGATORS) == ["weighted", "mean"]
    (option,) = [item for item in cli_options() if item.name == "aggregation"]
    for name, entry in AGGREGATORS.items():
        assert Schedule(aggregation=name).aggregation == name
        assert f"{name} ({entry.help})" in option.help
        assert isinstance(make_aggregator(name, FedAvg()), Aggregator)
    assert type(make_aggregator("weighted", FedAvg())) is WeightedMean
    assert type(make_aggregator("mean", FedAvg())) is UniformMean
    with pytest.raises(ConfigError, match="aggregation must be 'weighted' or 'mean', not 'x'"):
        Schedule(aggregation="x")
