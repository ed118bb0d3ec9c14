"""A training run in a folder: ``config.json``, ``checkpoint.pt`` (resumable), ``metrics.jsonl``,
``report.json`` and ``roc.png``.

A run that diverges (a loss or a parameter not finite: :class:`~uvtrain.errors.DivergedError`)
stops in one line that says where and what to lower, and keeps its folder with ``report.json``
saying ``"status": "diverged"`` (no non-finite model is ever checkpointed); ``eval``, ``export``
and another ``run`` refuse that folder."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from uvsdk.inputs import AUGMENT, TRIAL_LIST, model_input

from .chance import learning
from .checkpoints import load_state
from .config import ConfigError, RunConfig, changed_settings
from .data.base import FederatedDataset
from .engine import EngineConfig, Simulation, TrainingError, pick_device
from .errors import DivergedError
from .evaluation.scoring import quick_metrics
from .io import (
    CHECKPOINT,
    CONFIG,
    METRICS,
    REPORT,
    ROC,
    SCORES,
    atomic_write,
    jsonable,
    read_json,
    write_json,
)
from .progress import Progress

if TYPE_CHECKING:
    from .data.protocol import Plan


def load_data(config: RunConfig) -> FederatedDataset:
    """The run's dataset (under its data protocol, :meth:`uvtrain.config.Data.protocol`), limited
    to its first ``clients`` known identities."""
    from .data.corpora import RANDOM_CROP_SECONDS
    from .data.registry import load_dataset

    protocol = config.data.protocol()
    options: dict[str, Any] = {} if protocol is None else {"protocol": protocol}
    if config.data.random_crop:
        options["whole_seconds"] = RANDOM_CROP_SECONDS
    if config.data.detect_faces:
        options["detect_faces"] = True
    dataset = load_dataset(config.data.dataset, root=config.data.root, seed=config.seed, **options)
    if config.data.clients is not None:
        if config.data.clients > len(dataset.clients):
            raise ConfigError(
                f"--clients {config.data.clients}: the dataset has only {len(dataset.clients)}"
            )
        dataset = FederatedDataset(
            dataset.name,
            dataset.modality,
            dataset.spec,
            dataset.clients[: config.data.clients],
            dataset.unknown,
            dataset.licence,
            dataset.extra,
        )
    return dataset


def plan_data(config: RunConfig) -> Plan:
    """What :func:`load_data` reads of the run's corpus under its data protocol, nothing
    decoded (:func:`uvtrain.data.registry.plan_dataset`): the same copy, protocol and seed."""
    from .data.registry import plan_dataset

    protocol = config.data.protocol()
    if protocol is None:
        raise ConfigError("no data protocol: set identities, samples_per_split, ... first")
    return plan_dataset(
        config.data.dataset, root=config.data.root, seed=config.seed, protocol=protocol
    )


def _crop_samples(config: RunConfig, dataset: FederatedDataset) -> int:
    """Training window in samples for audio (0 for images, or when crops are off)."""
    return dataset.input.crop_samples(config.data.crop_seconds)


def build_run_backbone(
    config: RunConfig, modality: str, spec: dict[str, Any], *, weights_travel: bool = False
) -> Any:
    """The run's backbone: ``--backbone``, the pretrained weights' own, or the modality's
    default, with the options its method asks for (FedHide: 512-d, Hamming window), initialised
    from the seed (then loaded from ``--pretrained`` when given: the weights' architecture, so
    without the method's options). The simulator and the Flower deployment build it the same
    way, except that a Flower device (``weights_travel``) loads no weights file: every trainable
    weight comes from the server each round, so only frozen pretrained weights (``ge2e``'s
    LSTM, ``campplus``'s network, which never travel) are loaded there."""
    from .models import BACKBONES, build_backbone, load_backbone_checkpoint
    from .pretrained import WEIGHTS, fetch

    known = WEIGHTS.get(config.model.pretrained or "")
    if known and known.backbone not in BACKBONES:
        raise ConfigError(f"--pretrained {known.name}: {known.description}")
    name = config.model.backbone or (
        known.backbone if known else model_input(modality, spec).default_backbone
    )
    options = {}
    if not config.model.pretrained and name in BACKBONES:
        options = config.method.backbone_options(BACKBONES[name])
    if config.model.train_pretrained:
        if not known:
            raise ConfigError(
                "--train-pretrained trains a frozen encoder: give --pretrained ge2e or campplus"
            )
        options["freeze_encoder"] = False
    if config.model.band != "wide" and name in BACKBONES:
        check_band(name, config.model.band)
        options["band"] = config.model.band
    torch.manual_seed(config.seed)  # the backbone's initial weights follow from the seed
    backbone = build_backbone(name, spec, **options)
    if config.model.pretrained and not (weights_travel and not _has_frozen(backbone)):
        # A known name ("ge2e") is fetched once from its pinned wheel; a run folder gives its
        # checkpoint.pt (its trained model's backbone); anything else is a file.
        path = Path(
            fetch(config.model.pretrained, quiet=True) if known else config.model.pretrained
        )
        if path.is_dir():
            path = path / CHECKPOINT
        load_backbone_checkpoint(backbone, path)
    return backbone


def check_band(backbone: str, band: str) -> None:
    """Refuse a band (``--band``) other than ``wide`` for a backbone whose front end has no
    band option (every one but ``campplus``'s Kaldi fbank), in one line.

    Raises
    ------
    ConfigError
        The backbone cannot hear the band.
    """
    from .models import BACKBONES

    if band != "wide" and "band" not in inspect.signature(BACKBONES[backbone]).parameters:
        raise ConfigError(
            f"--band {band}: the {backbone} backbone has no band option (its front end is not "
            "the Kaldi fbank); give --pretrained campplus or --backbone campplus"
        )


def _has_frozen(backbone: torch.nn.Module) -> bool:
    """Whether a backbone keeps weights out of training (and so out of every message)."""
    return any(not parameter.requires_grad for parameter in backbone.parameters())


def engine_config(config: RunConfig, crop: int, augment: bool = False) -> EngineConfig:
    """The engine's schedule for a run config (``crop``: audio training window in samples;
    ``augment``: random flips and rotations of training images)."""
    return EngineConfig(
        **dataclasses.asdict(config.schedule),
        seed=config.seed,
        chunk_size=config.chunk_size,
        crop=crop,
        augment=augment,
    )


class Trainer(Protocol):
    """What a run asks of its trainer (:class:`~uvtrain.engine.Simulation`,
    :class:`~uvtrain.crosssilo.CrossSilo`): to be the :class:`~uvtrain.fit.Federation` and the
    local training :func:`uvtrain.fit.fit` runs, with its rounds' plans; checkpoints, outputs
    for scoring, and its own report sections. Generic code uses only these, never the
    trainer's type."""

    algorithm: Any
    round: int
    device: torch.device
    params: dict[str, torch.Tensor]
    private: dict[str, torch.Tensor]
    shared: dict[str, torch.Tensor]
    constants: dict[str, torch.Tensor]

    def plan(self, round_number: int) -> Any: ...

    def advance(self, plan: Any, local: Any, aggregator: Any = None) -> Any: ...

    def train(self, plan: Any, fused: Any) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def outputs(self, samples: Any, batch_size: int = 256, params: Any = None) -> np.ndarray: ...

    def load_into_model(self) -> torch.nn.Module: ...

    def evaluation_dataset(self, dataset: FederatedDataset) -> FederatedDataset: ...

    def report_extra(self, dataset: FederatedDataset, folder: Path, seed: int) -> dict: ...

    privacy: Any  # the run's PrivacyPlan, None: off
    streams: bool  # whether training samples stay on disk between rounds


@dataclass(frozen=True)
class TrainerKind:
    """A trainer of one setting: ``make(config, dataset, backbone, engine, device)`` builds it,
    ``summary(report)`` gives the lines the command line prints after its run's scores."""

    make: Callable[..., Trainer]
    summary: Callable[[dict[str, Any]], list[str]]


def _cross_device(
    config: RunConfig, dataset: FederatedDataset, backbone: Any, engine: EngineConfig, device: Any
) -> Simulation:
    clients = [client.train for client in dataset.clients]
    privacy = privacy_plan(config, len(clients))  # its mechanism is built with the simulation
    lengths = [client.lengths for client in dataset.clients]
    return Simulation(config.method, backbone, clients, engine, device, privacy, lengths)


def _cross_silo(
    config: RunConfig, dataset: FederatedDataset, backbone: Any, engine: EngineConfig, device: Any
) -> Any:
    from .crosssilo import make_cross_silo

    return make_cross_silo(config, dataset, backbone, engine, device)


def _cross_silo_summary(report: dict[str, Any]) -> list[str]:
    from .crosssilo import CrossSilo

    return CrossSilo.summary(report)


#: The trainer of each setting an algorithm declares (``algorithm.setting``): a
#: :class:`~uvtrain.engine.Simulation` when a client is a person, a
#: :class:`~uvtrain.crosssilo.CrossSilo` when it is an organisation. Both run their rounds with
#: :func:`uvtrain.fit.fit` and offer the same methods to the run (``plan``, ``advance``,
#: ``state_dict``, ``outputs``, ``evaluation_dataset``, ``report_extra``, ``summary``).
TRAINERS = {
    "cross-device": TrainerKind(_cross_device, Simulation.summary),
    "cross-silo": TrainerKind(_cross_silo, _cross_silo_summary),
}


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The trainer's own lines about a run's report (FedFace: held-out accuracy, weighting)."""
    from .algorithms import METHODS

    method = METHODS.get(str(report.get("method")))
    return [] if method is None else TRAINERS[method.setting].summary(report)


def make_simulation(config: RunConfig, dataset: FederatedDataset) -> Trainer:
    """Backbone, algorithm and trainer for a config, the trainer picked from :data:`TRAINERS`
    by the setting the method declares (the options a setting cannot take were refused with
    the config: :func:`uvtrain.methods.setting_refusal`)."""
    backbone = build_run_backbone(config, dataset.modality, dataset.spec)
    if config.data.augment and AUGMENT not in dataset.input.features:
        raise ConfigError(f"augment flips and rotates images; {dataset.name} is {dataset.modality}")
    engine = engine_config(config, _crop_samples(config, dataset), config.data.augment)
    kind = TRAINERS[config.method.setting]
    return kind.make(config, dataset, backbone, engine, pick_device(config.device))


def privacy_plan(config: RunConfig, users: int) -> Any:
    """The run's DP mechanism for ``users`` clients (:func:`uvtrain.privacy.plan_privacy`: the
    noise for its budget over its rounds, at the sampling rate of its cohort), ``None`` when
    off; a :class:`ConfigError` for a mechanism it cannot have (a setting without user-level
    DP is refused with the config: :data:`uvtrain.methods.SETTINGS`)."""
    from .privacy import plan_privacy

    settings = config.privacy
    if settings.dp == "off":
        return None
    if config.schedule.sampling != "random":
        raise ConfigError(
            "--dp accounts for randomly sampled cohorts (amplification by sampling); "
            f"--sampling {config.schedule.sampling} chooses clients deterministically: use "
            "--sampling random"
        )
    cohort = max(1, round(config.schedule.fraction * users))
    return plan_privacy(settings, rounds=config.schedule.rounds, cohort=cohort, users=users)


def read_config(folder: Path) -> RunConfig:
    """The :class:`RunConfig` of a run folder's ``config.json`` (keys added since: defaults)."""
    data = read_json(folder / CONFIG)
    if not isinstance(data, dict):
        raise TrainingError(f"{folder / CONFIG}: not a run configuration")
    data.setdefault("server_optimizer", "sgd")  # plain FedAvg before server optimisers
    data.setdefault("server_lr", 1.0)
    if data.get("method") == "feduv":
        data.setdefault("negative_loss", "mean-relu")  # the only form before the paper's eq. 4
    if data.get("method") == "softmax":
        data.setdefault("softmax_head", "cosine")  # the only head before the paper's plain one
    if data.get("method") in ("fedhide", "fedgn", "fedcs"):
        # written before these options: the backbone's own dimension and the Hann window
        data.setdefault("embedding_dim", None)
        data.setdefault("window", "hann")
    try:  # a folder written when the config held every method's keys: the others' are dropped
        return RunConfig.from_flat(data, other_methods="ignore")
    except ConfigError as error:
        raise TrainingError(f"{folder / CONFIG}: {error}") from None


def _check_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--out {folder}: a file, not a folder")


def train(config: RunConfig, out: str | Path, *, progress: bool = True) -> dict[str, Any]:
    """Train (or resume) a run in ``out`` and evaluate it; returns its report (as written to
    ``report.json``).

    Everything that can be refused (the dataset, the device, a checkpoint of other settings or
    that cannot be read) is checked before the folder is made; a folder this call made is removed
    again when training fails before its first checkpoint (one that existed is never removed)."""
    folder = Path(out)
    _check_folder(folder)
    check_not_diverged(folder)
    dataset = load_data(config)
    simulation = make_simulation(config, dataset)
    dataset = simulation.evaluation_dataset(dataset)
    if (folder / CHECKPOINT).exists():
        # read as an older folder is read: a key it lacks is what that run trained with
        previous = read_config(folder).to_dict() if (folder / CONFIG).is_file() else {}
        defaults = RunConfig.from_flat({"method": config.method.name, "dataset": ""}).to_dict()
        # A DP run's rounds are part of its mechanism (the noise is set for them, and its
        # budget is spent at the last one): they may not grow.
        differing = changed_settings(
            config.to_dict(), previous, defaults, rounds_may_change=config.privacy.dp == "off"
        )
        if differing == ["rounds"]:
            raise ConfigError(
                f"{folder} holds a differentially private run of {previous.get('rounds')} "
                "rounds: its privacy budget is spent at its last round; train more in another "
                "folder"
            )
        if differing:
            raise ConfigError(
                f"{folder} holds a run with other settings ({', '.join(differing)}): "
                "use another folder"
            )
        load_state(folder / CHECKPOINT, simulation.load_state_dict)
    made = folder  # the topmost folder this call creates, if any
    while not made.parent.exists():
        made = made.parent
    made = None if made.exists() else made
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / CONFIG, config.to_dict())
        # the metrics log drops rounds after the checkpoint's (a fresh run: every line)
        return _train_rounds(simulation, dataset, config, folder, progress)
    except DivergedError as error:  # the folder stays, marked: what diverged is worth reading
        line = f"{error}: lower {_divergence_hint(config)}; {folder / REPORT} says diverged"
        report = {
            "status": "diverged",
            "method": config.method.name,
            "dataset": config.data.dataset,
            "rounds": config.schedule.rounds,
            "diverged_in_round": error.round,
            "last_checkpoint_round": checkpoint_round(folder),
            "error": line,
        }
        write_json(folder / REPORT, report)
        raise DivergedError(line, error.round) from None
    except Exception:
        if made is not None and not (folder / CHECKPOINT).exists():
            import shutil

            shutil.rmtree(made, ignore_errors=True)
        raise


def _train_rounds(
    simulation: Trainer,
    dataset: FederatedDataset,
    config: RunConfig,
    folder: Path,
    progress: bool,
) -> dict[str, Any]:
    """The rounds from the simulation's round to ``config.schedule.rounds``
    (:func:`uvtrain.fit.fit`: the metrics log, the periodic EERs, the divergence check, the
    checkpoints, the progress and the ε spent), then the evaluation; returns the report."""
    from . import fit

    def eers() -> dict[str, Any]:
        scored = quick_metrics(simulation, dataset)
        return {"eer": {name: split["eer"] for name, split in scored.items()}}

    ledger = None if simulation.privacy is None else fit.PrivacyLedger(simulation.privacy)
    note = storage_note(simulation, dataset)
    bar = fit.Progress(
        config.method.name,
        config.schedule.rounds,
        figures=None if ledger is None else ledger.figures,
        notes=[note] if note else [],
        enabled=progress,
    )
    callbacks = [
        fit.PeriodicEval(config.eval_every, eers),
        fit.MetricsLog(folder / METRICS),
        fit.Divergence(),  # never checkpoint a model that is not finite: the run stops, marked
        fit.Checkpoint(folder / CHECKPOINT, simulation.state_dict, config.checkpoint_every),
        bar,
    ]
    if ledger is not None:  # the whole plan, δ with ε, before the first round
        ledger.say = bar.note
        callbacks.append(ledger)
    rounds = fit.Rounds(config.schedule.rounds, simulation.plan)
    report = fit.fit(simulation, simulation, rounds, callbacks)
    throughput = report.throughput(simulation.device.type)
    return evaluate(simulation, dataset, config, folder, throughput)


def _divergence_hint(config: RunConfig) -> str:
    """What to lower (or raise) when a run of ``config`` diverged: the step sizes it set."""
    schedule = config.schedule
    options = [f"--lr (now {schedule.lr:g})"]
    if config.method.setting == "cross-device":
        options.append(f"--server-lr (now {schedule.server_lr:g})")
    if config.privacy.dp != "off":
        options.append(f"--clip-norm (now {config.privacy.clip_norm:g})")
    hint = ", ".join(options[:-1]) + f" or {options[-1]}" if len(options) > 1 else options[0]
    if schedule.server_optimizer in ("adam", "yogi"):
        hint += f", or raise --server-tau (now {schedule.server_tau:g})"
    return hint + " and train in a new folder"


def checkpoint_round(folder: Path) -> int | None:
    """The round of the folder's checkpoint (the last finite model), ``None`` without one."""
    if not (folder / CHECKPOINT).is_file():
        return None
    from .checkpoints import read_checkpoint

    try:
        return int(read_checkpoint(folder / CHECKPOINT)["round"])
    except (TrainingError, KeyError, TypeError, ValueError):
        return None


def check_not_diverged(folder: Path) -> None:
    """:class:`TrainingError` when ``folder`` holds a run that diverged (its ``report.json``
    says so): its model is not one to evaluate, export or train on."""
    report = folder / REPORT
    if not report.is_file():
        return
    try:
        status = read_json(report)
    except TrainingError:
        return  # not ours to judge here: the reader of the report refuses it
    if isinstance(status, dict) and status.get("status") == "diverged":
        raise TrainingError(
            f"{folder} holds a run that diverged in round {status.get('diverged_in_round')} "
            f"({report}): train again in a new folder"
        )


def storage_note(simulation: Trainer, dataset: FederatedDataset) -> str | None:
    """The line a run from a stream folder prints about where its training samples are kept
    (``None`` for a dataset in memory: the usual case says nothing)."""
    if simulation.streams:
        return (
            f"data: {dataset.name} streamed from disk (a memory-mapped stream folder: each "
            "round's batches are read and moved to the device)"
        )
    if dataset.streamed:  # a cross-silo party's samples are joined: read into memory
        return f"data: {dataset.name} read into memory from its stream folder"
    return None


def evaluate(
    simulation: Trainer,
    dataset: FederatedDataset,
    config: RunConfig,
    folder: Path,
    throughput: dict[str, Any] | None = None,
    trials: tuple[Any, Path] | None = None,
    on_step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Score train / test_known / unknown, the warm-up thresholds, leakage
    (:func:`uvtrain.evaluation.scoring.score_run`); write ``scores.npz``, the report (with the
    trainer's own sections) and ``roc.png``. ``on_step`` is called with the name of each step
    (:func:`evaluation_steps`) when it is done.

    ``trials``: a :class:`uvtrain.data.trials.TrialList` and its wav root, scored with FedHide's
    ten-crop protocol into the report's own ``trial_list`` key
    (:func:`uvtrain.evaluation.scoring.score_trial_list`)."""
    from . import evaluation as ev
    from .evaluation.scoring import TRIAL_LIST_KEY, score_run, score_trial_list

    done = on_step or (lambda name: None)
    trial_list = None
    if trials is not None:
        if TRIAL_LIST not in dataset.input.features:
            raise ConfigError(f"--trials needs an audio run; {dataset.name} is {dataset.modality}")
        trial_list = score_trial_list(
            simulation, trials[0], trials[1], int(dataset.spec["sample_rate"]), progress=True
        )
        # The paper's test speakers take no part in training (Sec. 4.1: 1,211 train, 40 test);
        # say how many of the list's speakers (the idXXXXX folder) this run trained on.
        speakers = {name.split("/")[0] for name in (*trials[0].left, *trials[0].right)}
        trained = {client.identity for client in dataset.clients}
        trial_list["speakers"] = len(speakers)
        trial_list["speakers_seen_in_training"] = len(speakers & trained)
        done("trial list scored")
    scored = score_run(simulation, dataset, config.target_tpr)
    done("scored")
    atomic_write(folder / SCORES, lambda file: np.savez_compressed(file, **scored["arrays"]))
    extra = {**scored["extra"], **simulation.report_extra(dataset, folder, config.seed)}
    extra.setdefault("privacy", None)  # a trainer with DP states it (Simulation.report_extra)
    report = ev.make_report(
        config.method.name,
        dataset.name,
        simulation.round,
        scored["splits"],
        scored["warmup"],
        scored["leakage"],
        throughput or {"client_updates_per_s": None, "device": simulation.device.type},
        class_row=scored["class_row"],
        enrollment=scored["enrollment"],
        clients=len(dataset.clients),
        unknown_identities=len(dataset.unknown),
        config=config.to_dict(),
        **extra,
    )
    if trial_list is not None:
        report[TRIAL_LIST_KEY] = trial_list
    ev.write_report(folder / REPORT, report)
    title = f"{config.method.name} on {dataset.name}, round {simulation.round}"
    if learning(report).at_chance:  # the figure says it too, not only the terminal
        title += ": at chance, has not learned"
    ev.plot_roc(scored["curves"], folder / ROC, title)
    done("report and ROC written")
    return jsonable(report)  # as report.json holds it (a figure not finite: None)


def evaluation_steps(trials: bool) -> list[str]:
    """The steps :func:`evaluate` reports, in order."""
    return [*(["trial list scored"] if trials else []), "scored", "report and ROC written"]


def load_run(out: str | Path) -> tuple[RunConfig, FederatedDataset, Trainer]:
    """A run folder's config, dataset and simulation at its last checkpoint."""
    folder = Path(out)
    check_not_diverged(folder)
    if not (folder / CHECKPOINT).is_file() or not (folder / CONFIG).is_file():
        raise TrainingError(f"{folder} is not a run folder (no {CONFIG} and {CHECKPOINT})")
    config = read_config(folder)
    dataset = load_data(config)
    simulation = make_simulation(config, dataset)
    dataset = simulation.evaluation_dataset(dataset)
    load_state(folder / CHECKPOINT, simulation.load_state_dict)
    return config, dataset, simulation


def evaluate_run(
    out: str | Path,
    trials: str | Path | None = None,
    wav_root: str | Path | None = None,
) -> dict[str, Any]:
    """Re-evaluate a run folder from its config and checkpoint.

    ``trials``: also score this trial list (the official VoxCeleb1 format) with FedHide's
    ten-crop protocol; its paths are relative to ``wav_root`` (default: the run's ``--root``,
    its ``wav/`` folder when it has one). The list and every file it names are checked before
    anything else is done.
    """
    from .data.trials import read_trial_list, resolve_wav_root

    folder = Path(out)
    trial_spec = None
    if trials is not None:
        trial_list = read_trial_list(trials)
        if wav_root is None:
            wav_root = read_config(folder).data.root if (folder / CONFIG).is_file() else None
        if wav_root is None:
            raise ConfigError("--trials needs --wav-root DIR (the run has no --root)")
        root = resolve_wav_root(wav_root)
        trial_list.check_paths(root)
        trial_spec = (trial_list, root)
    elif wav_root is not None:
        raise ConfigError("--wav-root applies only with --trials")
    total = 1 + len(evaluation_steps(trial_spec is not None))
    # issue 47: 35 s without a word
    with Progress("uvtrain eval", total, unit="step", every_seconds=0.0, transient=True) as steps:
        config, dataset, simulation = load_run(folder)
        steps.update(1, {"done": "loaded the run"})
        throughput = None
        if (folder / REPORT).is_file():  # keep the training throughput measured by the run
            throughput = read_json(folder / REPORT).get("throughput")
        return evaluate(
            simulation,
            dataset,
            config,
            folder,
            throughput,
            trial_spec,
            on_step=lambda name: steps.update(1, {"done": name}),
        )
