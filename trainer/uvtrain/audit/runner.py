"""Running an audit (:func:`run_audit`): a run folder's initial and trained model, or a fresh
setup built, measured, trained and measured again; each attack where the method declares it
(:attr:`~uvtrain.algorithms.base.FedAvg.audits`)."""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor

from uvsdk.inputs import INVERSION

from ..config import RunConfig
from ..data.base import FederatedDataset
from ..engine import Simulation
from ..errors import ConfigError
from ..fit import Callback, Federation
from ..rounds import RoundPlan, RoundResult
from .bits import (
    CODEWORD_WEIGHT,
    bch_decoder,
    bit_recovery,
    code_length,
    disaggregation_scores,
    mean_hidden,
    public_samples,
)
from .inversion import inversion_audit
from .leakage import leakage_audit, leakage_entry
from .report import dp_label, write_results
from .settings import PUBLIC_SAMPLES, AuditSettings
from .training import one_client_each_round, secure_aggregator, train_rounds


def _rng(seed: int, part: int) -> np.random.Generator:
    return np.random.default_rng([seed, 0xA0D17, part])


class Observation(Callback):
    """What the server records of each secure round (:func:`train_rounds` with SecAgg+): who
    took part and ``ΔW ḡ`` (``ΔW`` the unmasked mean update of the codeword matrix the server
    released, ``ḡ`` over the ``public`` samples under the global model before the round)."""

    def __init__(self, simulation: Simulation, public: Tensor | None) -> None:
        self.simulation, self.public = simulation, public
        self.record: dict[str, list[np.ndarray]] = {"membership": [], "observations": []}
        self.hidden: Tensor | None = None
        self.before: Tensor | None = None

    def before_round(self, federation: Federation, plan: RoundPlan) -> None:
        public = self.public
        self.hidden = mean_hidden(self.simulation, public) if public is not None else None
        self.before = federation.params.get(CODEWORD_WEIGHT)

    def after_round(
        self, federation: Federation, result: RoundResult
    ) -> tuple[bool, dict[str, Any]]:
        if self.hidden is not None and self.before is not None:
            row = np.zeros(self.simulation.num_clients)
            row[result.updates.clients.cpu().numpy()] = 1.0
            self.record["membership"].append(row)
            released = result.params[CODEWORD_WEIGHT].double() - self.before.double()
            observation = released.cpu() @ self.hidden.double()
            self.record["observations"].append(observation.numpy())
        return False, {}


def _dp_report(simulation: Simulation) -> dict[str, Any] | None:
    """The simulation's differential privacy as its run report writes it (``None``: off)."""
    plan = getattr(simulation, "privacy", None)
    return None if plan is None else plan.report()


def codeword_states(
    initial: Simulation,
    trained: Simulation,
    public: Tensor | None,
    settings: AuditSettings,
    progress: bool,
) -> dict[str, Any]:
    """A run folder's bit recovery at its initial model and its ``trained`` one (its ``dp``:
    the differential privacy it was trained with), with the attacker's ``public`` samples."""
    pool = np.arange(initial.num_clients)
    out: dict[str, Any] = {}
    out["initial"] = bit_recovery(initial, pool, public, settings, _rng(settings.seed, 1), progress)
    if trained.round > 0:
        recovery = bit_recovery(trained, pool, public, settings, _rng(settings.seed, 3), progress)
        out["trained"] = {**recovery, "dp": _dp_report(trained)}
    return out


def codeword_runs(
    config: RunConfig, dataset: FederatedDataset, settings: AuditSettings, progress: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A fresh setup at one code length (``config``): bit recovery at the initial model; for
    each of ``settings.privacy``, ``config.schedule.rounds`` secure rounds trained with that differential
    privacy, whose aggregates the server records and disaggregates; bit recovery at the model
    trained with the first setting. Returns the states (``bit_recovery[c]``) and the
    disaggregation entries."""
    from ..run import make_simulation

    public = public_samples(dataset, config)
    states: dict[str, Any] = {}
    entries: list[dict[str, Any]] = []
    for index, privacy in enumerate(settings.privacy):
        simulation = make_simulation(dataclasses.replace(config, privacy=privacy), dataset)
        pool = np.arange(simulation.num_clients)
        if index == 0:
            states["initial"] = bit_recovery(
                simulation, pool, public, settings, _rng(settings.seed, 1), progress
            )
        aggregator = secure_aggregator(simulation, settings.secagg, _rng(settings.seed, 2))
        cohort_of = None
        if settings.participations is not None:
            cohort_of = functools.partial(one_client_each_round, clients=simulation.num_clients)
        observation = Observation(simulation, public)
        length = code_length(simulation)
        label = dp_label(_dp_report(simulation))
        description = f"{simulation.algorithm.name} c={length} (SecAgg+, {label})"
        rounds = config.schedule.rounds
        train_rounds(
            simulation, rounds, progress, description, aggregator, cohort_of, [observation]
        )
        entries += disaggregation_entries(simulation, observation.record, settings)
        if index == 0 and simulation.round > 0:
            recovery = bit_recovery(
                simulation, pool, public, settings, _rng(settings.seed, 3), progress
            )
            states["trained"] = {**recovery, "dp": _dp_report(simulation)}
    return states, entries


def disaggregation_entries(
    simulation: Simulation, record: dict[str, list[np.ndarray]], settings: AuditSettings
) -> list[dict[str, Any]]:
    """The ``disaggregation`` entries of one secure run (:func:`disaggregation_scores` of the
    server's records after each checkpoint of observed rounds), with the run's code length, its
    differential privacy (``dp``, ``None`` when off) and the ``ε`` spent by then."""
    if not record["observations"]:
        return []
    length = code_length(simulation)
    codewords = simulation.constants["codeword"].cpu().numpy()
    decode = bch_decoder(length) if settings.decode else None
    scores = disaggregation_scores(record["observations"], record["membership"], codewords, decode)
    plan = simulation.privacy
    return [
        {
            "code_length": length,
            "dp": _dp_report(simulation),
            "rounds": score["rounds"],
            "bits": score["bits"],
            "whole_raw": score["whole_raw"],
            "whole_decoded": score["whole_decoded"],
            "clients_seen": score["clients_seen"],
            "cohort": int(record["membership"][0].sum()),
            "epsilon_spent": None if plan is None else plan.spent_release(score["rounds"]),
        }
        for score in scores
    ]


def inversion_states(
    initial: Simulation,
    trained: Simulation | None,
    rounds: int,
    dataset: FederatedDataset,
    config: RunConfig,
    settings: AuditSettings,
    progress: bool,
) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """The inversion at the initial model and a trained one; a fresh setup (``trained`` None)
    is trained here — through SecAgg+ when a plain update would reveal the method's secret
    (:attr:`~uvtrain.algorithms.base.FedAvg.update_reveals_secret`), as it is deployed."""
    inversion = settings.inversion
    assert inversion is not None
    public = public_samples(dataset, config)
    results, pictures = {}, {}
    for state in ("initial", "trained"):
        if state == "trained":
            if trained is None:
                description = f"{initial.algorithm.name} ({dataset.name})"
                aggregator = None
                if initial.algorithm.update_reveals_secret:
                    aggregator = secure_aggregator(initial, settings.secagg, _rng(settings.seed, 5))
                train_rounds(initial, rounds, progress, description, aggregator)
                trained = initial
            if trained.round == 0:
                break
        simulation = initial if state == "initial" else trained
        results[state], pictures[state] = inversion_audit(
            simulation,
            dataset,
            inversion,
            settings.secagg,
            public,
            _rng(settings.seed, 4),
            settings.seed,
            progress,
        )
    return results, pictures


def _settings_entry(settings: AuditSettings) -> dict[str, Any]:
    return {
        "cohorts": list(settings.cohorts),
        "cohort_draws": settings.cohort_draws,
        "decode": settings.decode,
        "seed": settings.seed,
        "public_samples": PUBLIC_SAMPLES,
    }


def run_audit(
    out: str | Path,
    run_dir: str | Path | None = None,
    config: RunConfig | None = None,
    settings: AuditSettings | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Audit a run folder (its initial and its trained model) or a fresh setup (``config``:
    built, measured, trained ``config.schedule.rounds`` rounds, measured again); write ``audit.json``,
    ``audit.md`` and the figures into ``out``; return the results."""
    settings = settings or AuditSettings()
    started = time.perf_counter()
    results: dict[str, Any] = {
        "audit": "uvtrain audit",
        "threat_model": "honest-but-curious server: follows the protocol, keeps what it sees",
        "secagg": dataclasses.asdict(settings.secagg),
        "settings": _settings_entry(settings),
    }
    if run_dir is not None:
        seconds, pictures = _audit_run(results, Path(run_dir), settings, progress)
    elif config is None:
        raise ConfigError("give a run folder or a fresh setup's config")
    else:
        seconds, pictures = _audit_fresh(results, config, settings, progress)
    seconds["total"] = time.perf_counter() - started
    results["seconds"] = seconds
    write_results(results, pictures, Path(out))
    return results


def _audit_run(
    results: dict[str, Any], run_dir: Path, settings: AuditSettings, progress: bool
) -> tuple[dict[str, float], dict[str, dict[str, np.ndarray]]]:
    """A run folder's initial model (rebuilt from its seed) and its trained one."""
    from ..run import load_run, make_simulation

    run_config, dataset, trained = load_run(run_dir)
    initial = make_simulation(run_config, dataset)
    audits = initial.algorithm.audits
    results.update(mode="run", run_dir=str(run_dir), setup=run_config.to_dict())
    seconds: dict[str, float] = {}
    pictures: dict[str, dict[str, np.ndarray]] = {}
    if "codeword-bits" in audits:
        clock = time.perf_counter()
        public = public_samples(dataset, run_config)
        states = codeword_states(initial, trained, public, settings, progress)
        results["bit_recovery"] = {str(code_length(initial)): states}
        seconds["bit_recovery"] = time.perf_counter() - clock
    if "prototype-leakage" in audits:
        entry = leakage_entry(trained)
        if entry["p_leak"] is not None:
            results["leakage"] = {trained.algorithm.name: entry}
    if settings.inversion is not None:
        if "inversion" not in audits:
            results["inversion"] = {"skipped": f"{initial.algorithm.name} declares no inversion"}
        elif INVERSION not in dataset.input.features:
            results["inversion"] = {"skipped": "the inversion attacks image models only"}
        else:
            clock = time.perf_counter()
            fresh = make_simulation(run_config, dataset)
            results["inversion"], pictures = inversion_states(
                fresh, trained, 0, dataset, run_config, settings, progress
            )
            seconds["inversion"] = time.perf_counter() - clock
    return seconds, pictures


def _audit_fresh(
    results: dict[str, Any], config: RunConfig, settings: AuditSettings, progress: bool
) -> tuple[dict[str, float], dict[str, dict[str, np.ndarray]]]:
    """A fresh setup: built, measured at round 0, trained ``config.schedule.rounds`` rounds, measured."""
    from ..run import load_data, make_simulation, privacy_plan

    dataset = load_data(config)
    if settings.participations is not None:  # one client a round, each in exactly n rounds
        clients = len(dataset.clients)
        config = config.replace(rounds=settings.participations * clients, fraction=1 / clients)
        results["settings"]["participations"] = settings.participations
    results.update(mode="fresh", setup=config.to_dict())
    algorithm = config.method
    audits = algorithm.audits
    seconds: dict[str, float] = {}
    pictures: dict[str, dict[str, np.ndarray]] = {}
    if "codeword-bits" in audits and settings.code_lengths:
        clock = time.perf_counter()
        for privacy in settings.privacy:  # a setting it cannot have is refused before training
            privacy_plan(dataclasses.replace(config, privacy=privacy), len(dataset.clients))
        results["settings"]["dp"] = [dataclasses.asdict(privacy) for privacy in settings.privacy]
        results["bit_recovery"], results["disaggregation"] = {}, []
        for length in settings.code_lengths:
            states, entries = codeword_runs(
                config.replace(code_length=length), dataset, settings, progress
            )
            results["bit_recovery"][str(length)] = states
            results["disaggregation"] += entries
        seconds["bit_recovery"] = time.perf_counter() - clock
    if settings.methods:
        clock = time.perf_counter()
        results["leakage"] = leakage_audit(settings.methods, config, dataset, progress)
        seconds["leakage"] = time.perf_counter() - clock
    if settings.inversion is not None and "inversion" not in audits:
        results["inversion"] = {"skipped": f"{algorithm.name} declares no inversion"}
    elif settings.inversion is not None:
        clock = time.perf_counter()
        # a codeword method is inverted at the first code length the bits were audited at
        codes = settings.code_lengths if "codeword-bits" in audits else ()
        lengths = {"code_length": codes[0]} if codes else {}
        setup = config.replace(
            dataset=settings.inversion.dataset, clients=None, root=None, **lengths
        )
        faces = load_data(setup)
        if INVERSION not in faces.input.features:
            raise ConfigError(f"--inversion-dataset {faces.name}: an image dataset")
        results["inversion"], pictures = inversion_states(
            make_simulation(setup, faces),
            None,
            config.schedule.rounds,
            faces,
            setup,
            settings,
            progress,
        )
        results["inversion_setup"] = setup.to_dict()
        seconds["inversion"] = time.perf_counter() - clock
    return seconds, pictures
