"""What the comparison scripts share: the settings of each scale, and training a run once.

A run is keyed by the settings that change its training (``eval_every``, the device and the
checkpoint interval do not), so the scripts share runs: the FedUV run of the ROC comparison is the
no-negative-loss arm of the negative-loss ablation. Runs resume where they stopped, so an
interrupted comparison picks up again with the same command.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from uvtrain.config import NOT_TRAINING, RunConfig

#: Settings of each (scale, dataset): the dataset and its schedule per method family. ``cpu``
#: runs on a 2-core machine in minutes; ``tiny`` in seconds (the tests); ``paper`` is the papers' size for a GPU and a local copy
#: of the corpus (``--root``): the FedUV paper's schedule (Sec. 6.1-6.2, the ``feduv-*`` presets of
#: ``uvtrain presets``): 1,000 users, a cohort of 1 % (ε = 0.01), 20,000 rounds, 1 local epoch,
#: lr 0.1 with decay 0.01; B is ours (the paper states none). Every scale keeps plain FedAvg
#: (``server_optimizer`` sgd, ``server_lr`` 1: FedUV's default before its server lr 5), the
#: figures' setting; every family gives its lr decay.
SCALES: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {
        "synth-voices": {
            "dataset": "synth-voices",
            "build": {"speakers": 250},
            "common": {
                "server_optimizer": "sgd",
                "server_lr": 1.0,
                "fraction": 0.1,
                "batch_size": 16,
            },
            "feduv": {"rounds": 800, "lr": 0.5, "lr_decay": 0.005},
            "embedding": {"rounds": 400, "lr": 0.1, "lr_decay": 0.0},
            "sweep": {"rounds": 100, "lr": 0.1, "lr_decay": 0.0},
        },
        "orl-faces": {
            "dataset": "orl-faces",
            "common": {
                "server_optimizer": "sgd",
                "server_lr": 1.0,
                "fraction": 0.25,
                "batch_size": 6,
            },
            "feduv": {"rounds": 600, "lr": 0.5, "lr_decay": 0.005},
            "embedding": {"rounds": 600, "lr": 0.1, "lr_decay": 0.0},
            "sweep": {"rounds": 150, "lr": 0.1, "lr_decay": 0.0},
        },
    },
    "dp": {  # the privacy–accuracy curve (issue 19): a population where DP leaves room to learn
        "synth-voices": {
            "dataset": "synth-voices",
            "build": {"speakers": 1250},
            "common": {
                "server_optimizer": "sgd",
                "server_lr": 1.0,  # the curve's runs and deployment_dp.py's: plain FedAvg
                "clients": 1000,
                "fraction": 0.1,
                "batch_size": 16,
            },
            "feduv": {"rounds": 800, "lr": 0.5, "lr_decay": 0.005},
            "embedding": {"rounds": 100, "lr": 0.1, "lr_decay": 0.0},
        },
    },
    "tiny": {  # seconds: what the test suite runs, to keep the scripts working
        "formant-voices": {
            "dataset": "formant-voices",
            "common": {
                "server_optimizer": "sgd",
                "server_lr": 1.0,
                "clients": 8,
                "fraction": 0.5,
                "batch_size": 4,
            },
            "feduv": {"rounds": 4, "lr": 0.5, "lr_decay": 0.0},
            "embedding": {"rounds": 4, "lr": 0.1, "lr_decay": 0.0},
            "sweep": {"rounds": 2, "lr": 0.1, "lr_decay": 0.0},
        },
    },
    "paper": {
        "voxceleb1": {
            "dataset": "voxceleb1",
            "common": {
                "server_optimizer": "sgd",
                "server_lr": 1.0,  # plain FedAvg, as the paper trains
                "clients": 1000,
                "fraction": 0.01,
                "batch_size": 16,
                "local_epochs": 1,
                "device": "cuda",
            },
            "feduv": {"rounds": 20000, "lr": 0.1, "lr_decay": 0.01},
            "embedding": {"rounds": 20000, "lr": 0.1, "lr_decay": 0.01},
            "sweep": {"rounds": 20000, "lr": 0.1, "lr_decay": 0.01},
        },
        "celeba": {
            "dataset": "celeba",
            "common": {
                "server_optimizer": "sgd",
                "server_lr": 1.0,  # plain FedAvg, as the paper trains
                "clients": 1000,
                "fraction": 0.01,
                "batch_size": 16,
                "local_epochs": 1,
                "device": "cuda",
            },
            "feduv": {"rounds": 20000, "lr": 0.1, "lr_decay": 0.01},
            "embedding": {"rounds": 20000, "lr": 0.1, "lr_decay": 0.01},
            "sweep": {"rounds": 20000, "lr": 0.1, "lr_decay": 0.01},
        },
    },
}


#: What a method sends beside its update, outside the DP mechanism (docs/deploy.md, "Not
#: covered"): every DP row that quotes such a method says so (issue 34).
OUTSIDE_EPSILON = {"fedhide": "proxy", "fedgn": "proxy", "fedcs": "proxy",
                   "fedaws": "class embedding"}  # fmt: skip


def method_label(method: str, private: bool) -> str:
    """A table's method cell: the name, and under DP what travels outside the ε."""
    sent = OUTSIDE_EPSILON.get(method)
    return f"{method} ({sent} outside ε)" if private and sent else method


#: Keys that do not change what a run trains.
def dataset_file(scale: str, dataset: str, root: str | None) -> str:
    """The dataset's file (built once with seed 0, so every seed of a comparison trains on the
    same data and only the training's randomness varies); a corpus name for local copies."""
    from uvtrain.data.registry import DATASETS, build_dataset, dataset_path

    preset = _preset(scale, dataset)
    name, options = preset["dataset"], preset.get("build", {})
    if root is not None or DATASETS[name].kind == "corpus":
        return name
    path = dataset_path(name, seed=0, **options)
    if not path.is_file():
        path = build_dataset(name, seed=0, **options)
    return str(path)


def _preset(scale: str, dataset: str) -> dict[str, Any]:
    try:
        return SCALES[scale][dataset]
    except KeyError:
        known = ", ".join(f"{s}/{d}" for s in SCALES for d in SCALES[s])
        raise SystemExit(f"no preset {scale}/{dataset}: one of {known}") from None


def settings(scale: str, dataset: str, family: str, data: str, **method: Any) -> dict[str, Any]:
    """A run's settings: the dataset's common schedule, the family's (``feduv``, ``embedding``
    or ``sweep``), then the method's own parameters (``method=...`` included)."""
    preset = _preset(scale, dataset)
    return {"dataset": data, **preset["common"], **preset[family], **method}


def run_folder(cache: Path, config: RunConfig) -> Path:
    """``cache/METHOD-HASH``: the hash of the settings that change training.

    A run made before a setting existed has another hash (its ``config.json`` lacks the key).
    When ``METHOD-HASH`` does not exist, a folder of the cache whose configuration, read as
    ``uvtrain`` reads an older run folder (:func:`uvtrain.run.read_config`: a key it lacks takes
    the value that run trained with, e.g. FedHide's Hann window before ``window`` existed), has
    these same settings is used instead."""
    from uvtrain.errors import UvtrainError
    from uvtrain.run import read_config

    settings = {k: v for k, v in config.to_dict().items() if k not in NOT_TRAINING}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:10]
    folder = cache / f"{config.method.name}-{digest}"
    if folder.exists() or not cache.is_dir():
        return folder
    for candidate in sorted(cache.glob(f"{config.method.name}-*/config.json")):
        try:
            previous = read_config(candidate.parent).to_dict()
        except (UvtrainError, OSError, ValueError):
            continue
        if all(previous.get(k) == v for k, v in settings.items()):
            return candidate.parent
    return folder


def _is_done(folder: Path, config: RunConfig) -> bool:
    """Whether ``folder`` holds the finished run of ``config`` (its report, of all its rounds)."""
    from uvtrain.io import REPORT

    report = folder / REPORT
    return (
        report.is_file() and json.loads(report.read_text()).get("rounds") == config.schedule.rounds
    )


def finished_run(cache: Path, overrides: dict[str, Any], root: str | None) -> Path | None:
    """The folder of the run these settings name when it is done, else None."""
    config = RunConfig.from_flat({**overrides, "root": root})
    folder = run_folder(cache, config)
    return folder if _is_done(folder, config) else None


def train_once(cache: Path, label: str, overrides: dict[str, Any], root: str | None) -> Path:
    """Train the run these settings name (or reuse it when it is done); returns its folder."""
    from uvtrain.run import train

    config = RunConfig.from_flat({**overrides, "root": root})
    folder = run_folder(cache, config)
    if _is_done(folder, config):
        print(f"  {label}: done before ({folder.name})", flush=True)
        return folder
    print(f"  {label}: training {config.schedule.rounds} rounds into {folder}", flush=True)
    started = time.perf_counter()
    train(config, folder)
    print(f"  {label}: {time.perf_counter() - started:.0f} s", flush=True)
    return folder


def report(folder: Path) -> dict[str, Any]:
    from uvtrain.io import REPORT

    return json.loads((folder / REPORT).read_text())


def write_table(path: Path, title: str, header: list[str], rows: list[list[str]]) -> None:
    """A Markdown table (also printed)."""
    lines = [f"# {title}", "", "| " + " | ".join(header) + " |"]
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    text = "\n".join(lines) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(text)
