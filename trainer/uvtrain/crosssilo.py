"""Cross-silo training (FedFace): a few parties, each with many identities and a private classifier.

The other methods of the trainer are cross-device — a client is one person. Here a client is an
organisation (a *party*) holding many people's samples; it trains the shared backbone and its own
classifier head over its own identities with a margin loss (ArcFace, CosFace), and only the
backbone is aggregated, with the weighting ``w`` (the parties' sample shares, moved by Federated
Validation). The maths is in :mod:`uvtrain.algorithms.fedface`; this module runs it.

* **Parties** (:func:`uvtrain.data.partition.partition`) are built from a dataset's known
  identities: by language for ``synth-voices``, by dataset for several, else a seeded random
  split.
* **Validators** (:func:`split_unknown`) hold private verification sets made of the dataset's
  unknown identities: half of those people go to the V validators, the other half is the held-out
  test set the run is scored on (a model is never scored on the people its weighting was chosen
  with).
* **Several datasets** (``--dataset a,b,c``, :func:`uvtrain.data.base.combine`): each party holds
  one dataset (``partition="dataset"``, the paper's MS1M / GA / VGG parties), or 1/m of one
  (``parties`` = m × datasets: the paper's 12 parties); validators and test set take half of each
  dataset's unknown people.
* **Centralised baseline**: ``parties=1`` is plain momentum SGD on the pooled data.
* **Solo** (``solo_party=N``, the paper's Table 1): party N of the partition alone, no
  federation — the same trainer with that one party (:func:`solo`).

Every party trains every round (cross-silo: no sampling). Everything random derives from
``(seed, round, party)``, so a run resumed from its checkpoint continues exactly. The rounds run
in :func:`uvtrain.fit.fit`, the one loop of every setting: :class:`CrossSilo` is the
:class:`~uvtrain.fit.Federation` and the parties' local training, :class:`FederatedValidation`
its aggregator, which owns the weighting ``w`` and returns it in its metrics.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call

from .algorithms.fedface import (
    FedFace,
    best_threshold_accuracy,
    candidate_weightings,
    fv_update,
    smoothed_losses,
)
from .batches import draw_batches, random_windows
from .config import ConfigError
from .data.base import ClientData, FederatedDataset
from .data.partition import Party, partition
from .engine import (
    EngineConfig,
    GlobalModel,
    Tensors,
    TrainingError,
    check_schedule,
    model_outputs,
    split_parameters,
)
from .evaluation.plots import plot_weights
from .fit import Federation
from .io import METRICS, WEIGHTS
from .rounds import (
    Aggregator,
    ClientUpdates,
    LocalTraining,
    RoundPlan,
    RoundResult,
    UpdateStep,
    check_finite,
)

#: Genuine pairs per identity in a verification set, at most (impostor pairs: as many in total).
MAX_PAIRS_PER_IDENTITY = 45
#: Samples per identity a validator scores candidates on (15 genuine pairs each): the FV step
#: embeds every validator's samples once per candidate, every round.
VALIDATOR_SAMPLES = 6


@dataclass(frozen=True)
class VerificationSet:
    """Samples and the pairs a verifier is scored on (``first[i]``, ``second[i]``, ``same[i]``)."""

    name: str
    identities: tuple[str, ...]
    samples: np.ndarray
    first: np.ndarray
    second: np.ndarray
    same: np.ndarray

    def scores(self, embeddings: np.ndarray) -> np.ndarray:
        """The pairs' cosines, from the unit embeddings of :attr:`samples`."""
        return np.einsum("ij,ij->i", embeddings[self.first], embeddings[self.second])

    def accuracy(self, embeddings: np.ndarray, folds: int) -> float:
        """Accuracy at the best threshold over ``folds`` (the FV score; the test metric)."""
        return best_threshold_accuracy(self.scores(embeddings), self.same, folds)


def verification_set(
    name: str, people: list[ClientData], seed: int, per_identity: int | None = None
) -> VerificationSet:
    """``people``'s samples (the first ``per_identity`` of each, or all), every genuine pair (at
    most :data:`MAX_PAIRS_PER_IDENTITY` per person) and as many impostor pairs, shuffled."""
    rng = np.random.default_rng([seed, 6, len(people)])
    pools = [np.concatenate([p.train, p.val, p.test])[:per_identity] for p in people]
    owner = np.concatenate([np.full(len(pool), i) for i, pool in enumerate(pools)])
    offsets = np.concatenate([[0], np.cumsum([len(pool) for pool in pools])])
    genuine = []
    for person in range(len(pools)):
        first, second = np.triu_indices(len(pools[person]), k=1)
        keep = rng.permutation(len(first))[:MAX_PAIRS_PER_IDENTITY]
        genuine.append(np.stack([first[keep], second[keep]], axis=1) + offsets[person])
    genuine_pairs = np.concatenate(genuine)
    impostor_pairs = []
    while len(impostor_pairs) < len(genuine_pairs):
        a, b = rng.integers(0, len(owner), size=2)
        if owner[a] != owner[b]:
            impostor_pairs.append((a, b))
    pairs = np.concatenate([genuine_pairs, np.asarray(impostor_pairs)])
    same = np.concatenate([np.ones(len(genuine_pairs), bool), np.zeros(len(impostor_pairs), bool)])
    order = rng.permutation(len(pairs))
    return VerificationSet(
        name,
        tuple(p.identity for p in people),
        np.concatenate(pools),
        pairs[order, 0],
        pairs[order, 1],
        same[order],
    )


def split_unknown(
    dataset: FederatedDataset, validators: int, seed: int = 0
) -> tuple[list[VerificationSet], list[ClientData]]:
    """The validators' private verification sets and the held-out test identities: a seeded half
    of the unknown people is split among the validators, the rest is the test set.

    Several datasets (:func:`uvtrain.data.base.combine`): each dataset's unknown people are
    halved, as the paper halves each validation benchmark (its first 5 folds validate, the other 5
    evaluate: Sec. 4.2), so validators and test set hold every dataset; with one validator per
    dataset (or a multiple), each validator holds one dataset's half (or a part of it), as each of
    the paper's validators holds one benchmark."""
    unknown = list(dataset.unknown)
    if validators == 0:
        return [], unknown
    rng = np.random.default_rng([seed, 4])
    sources, names = dataset.extra.get("sources"), dataset.extra.get("datasets")
    if sources and names:
        halves = []
        for name in names:
            own = [i for i, c in enumerate(unknown) if sources[c.identity] == name]
            halves.append(rng.permutation(own))
        validating = [half[: len(half) // 2] for half in halves]
        order = np.concatenate([*validating, *(half[len(half) // 2 :] for half in halves)])
        held = sum(len(v) for v in validating)
    else:
        order, held = rng.permutation(len(unknown)), len(unknown) // 2
    if held < 2 * validators or len(unknown) - held < 2:
        raise ConfigError(
            f"validators: {validators} need at least {4 * validators} unknown identities "
            f"({dataset.name} has {len(unknown)})"
        )
    if sources and names and validators % len(names) == 0:
        per = validators // len(names)
        shares = [s for v in validating for s in np.array_split(v, per)]
    else:
        shares = np.array_split(order[:held], validators)
    if min(len(share) for share in shares) < 2:  # one person has no impostor pairs
        raise ConfigError(f"validators: {validators} leave one with fewer than 2 identities")
    sets = [
        verification_set(
            f"validator{v + 1}", [unknown[i] for i in share], seed + v, VALIDATOR_SAMPLES
        )
        for v, share in enumerate(shares)
    ]
    return sets, [unknown[i] for i in sorted(order[held:])]


class CrossSilo(GlobalModel, Federation):
    """Cross-silo FedFace training (PFM and FV switchable; ``parties=1``: centralised): the
    parties are the clients of :func:`uvtrain.rounds.run_round`, every one every round.

    The round's pieces: :meth:`train` is the local training (each party's K steps with the
    method's optimiser-state hooks, :meth:`FedFace.local_step`), :class:`FederatedValidation` the
    aggregator (the weighted mean under ``w``, moved by FV), and :meth:`FedFace.server_update`
    the server's global momentum (eq. 6).

    Parameters
    ----------
    algorithm:
        The :class:`~uvtrain.algorithms.fedface.FedFace` settings.
    backbone:
        The shared network (an embedding model is built around it).
    parties:
        The parties' data (:func:`uvtrain.data.partition.partition`).
    validators:
        The validators' verification sets (FV; may be empty).
    config:
        ``rounds``, ``local_steps`` (the synchronisation interval K), ``batch_size`` (per party),
        ``lr`` and ``lr_decay`` (``η_r = lr / (1 + lr_decay · s)``, ``s`` the local steps taken
        before round r: the same schedule for every K), ``lr_milestones`` and ``lr_gamma`` (a
        step schedule in rounds, :meth:`plan`), ``seed``, ``crop``.
    folds:
        Folds of the validators' best-threshold accuracy.
    """

    def __init__(
        self,
        algorithm: FedFace,
        backbone: nn.Module,
        parties: list[Party],
        validators: list[VerificationSet],
        config: EngineConfig,
        device: torch.device | str = "cpu",
        folds: int = 10,
    ) -> None:
        self.algorithm, self.config, self.folds = algorithm, config, folds
        self.device = torch.device(device)
        self.parties, self.validators = parties, validators
        torch.manual_seed(config.seed)
        self.model = algorithm.build_model(backbone, len(parties)).to(self.device).eval()
        self.params, self.buffers = split_parameters(self.model)
        dim = self.embedding_dim = int(backbone.embedding_dim)
        generator = torch.Generator().manual_seed(config.seed)
        #: each party's private classifier (its identities' centres) and optimiser state
        self.heads = [
            (torch.randn(len(p.identities), dim, generator=generator) / dim**0.5).to(self.device)
            for p in parties
        ]
        self.optimisers = [algorithm.init_optimiser(head, self.params) for head in self.heads]
        #: the server's state: the global momentum M^Θ of the previous round (PFM, eq. 6)
        self.shared: Tensors = {
            f"momentum.{k}": torch.zeros_like(v) for k, v in self.params.items()
        }
        sizes = np.array([len(p.samples) for p in parties], dtype=np.float64)
        self.criterion = algorithm.make_loss()
        self.data = [torch.as_tensor(p.samples).to(self.device) for p in parties]
        self.labels = [torch.as_tensor(p.labels).to(self.device) for p in parties]
        self.round = 0
        #: each party's training loss smoothed as in the paper's Table 1 (None before round 1)
        self.smoothed_losses: np.ndarray | None = None
        # no per-identity state of the run's users here (the evaluation reads these)
        self.private: Tensors = {}
        self.constants: Tensors = {}
        self.uses_fv = algorithm.fv and bool(validators) and len(parties) > 1
        self.aggregator: FederatedValidation = FederatedValidation(
            algorithm,
            sizes / sizes.sum(),
            validators if self.uses_fv else [],
            functools.partial(model_outputs, self.model, self.buffers, self.device),
            config.seed,
            folds,
        )
        self.postprocess: list[UpdateStep] = []
        self.server_optimizer = None  # the global momentum is the method's server step (eq. 6)
        #: the people the run is scored on (set by :func:`make_cross_silo`; ``None``: all)
        self.test_identities: list[ClientData] | None = None

    @property
    def local_momentum(self) -> list[Tensors]:
        """Each party's momentum of the backbone (FedAvg with local momentum, PFM off); none
        with PFM, whose backbone steps read the global momentum."""
        return [
            {k.split(".", 1)[1]: v for k, v in state.items() if k != "head"}
            for state in self.optimisers
            if not self.algorithm.pfm
        ]

    # -- one party ------------------------------------------------------------------------------

    def party_batches(self, round_number: int, party: int) -> tuple[Tensor, Tensor]:
        """``([K, B, ...] samples, [K, B] labels)`` of a party's round, from ``(seed, round,
        party)``."""
        rng = np.random.default_rng([self.config.seed, round_number, 1, party])
        positions = torch.arange(len(self.data[party]), device=self.device)
        index = draw_batches(positions, self.config.local_steps, self.config.batch_size, 0, rng)
        batches = random_windows(self.data[party][index], self.config.crop, rng)
        return batches, self.labels[party][index]

    def local_training(self, party: int, round_number: int, lr: float) -> tuple[Tensors, Tensor]:
        """Party ``party``'s K local steps (:meth:`FedFace.local_step`); updates its head and
        optimiser state in place; returns its backbone and its K losses."""
        algorithm, steps = self.algorithm, self.config.local_steps
        batches, labels = self.party_batches(round_number, party)
        params = {k: v.detach().clone() for k, v in self.params.items()}
        head, state = self.heads[party], self.optimisers[party]
        losses = []
        for batch, label in zip(batches, labels, strict=True):
            leaves = [*params.values(), head]
            for leaf in leaves:
                leaf.requires_grad_(True)
            embeddings = functional_call(self.model, (params, self.buffers), (batch,))
            loss = algorithm.loss(embeddings, {"head": head}, {"labels": label}, self.shared)
            grads = list(torch.autograd.grad(loss, leaves))
            params, head = algorithm.local_step(params, head, grads, state, self.shared, lr, steps)
            losses.append(loss.detach())
        self.heads[party] = head.detach()
        return params, torch.stack(losses)

    def train(self, plan: RoundPlan, fused: Aggregator | None) -> ClientUpdates:
        """The round's local training (:class:`uvtrain.rounds.LocalTraining`): every party."""
        finals, losses = [], []
        for party in plan.clients.tolist():
            params, party_losses = self.local_training(party, plan.number, plan.lr)
            finals.append(params)
            losses.append(party_losses)
        stacked = {name: torch.stack([f[name] for f in finals]) for name in self.params}
        step_losses = torch.stack(losses)  # [P, K]
        check_finite(plan.number, "the training loss", {"loss": step_losses})
        clients = torch.as_tensor(plan.clients, device=self.device)
        sizes = torch.tensor([len(self.parties[p].samples) for p in plan.clients.tolist()])
        return ClientUpdates(
            clients,
            sizes.to(torch.float32),
            step_losses,
            params=stacked,
            metrics={"party_losses": step_losses.mean(dim=1).tolist()},
        )

    # -- the server -----------------------------------------------------------------------------

    def plan(self, round_number: int) -> RoundPlan:
        """Every party, every round (cross-silo: no sampling), at ``η_r``, constant within a round
        (eq. 6 divides by it): the schedule's decay per local step (K per round), times
        ``lr_gamma`` for every round of ``lr_milestones`` before this one (the paper's step
        schedule: its epoch e ends after ``e · 12,800 / K`` rounds)."""
        lr = self.config.learning_rate(round_number, steps_per_round=self.config.local_steps)
        return RoundPlan(round_number, np.arange(len(self.parties)), lr)

    def step(self) -> dict[str, Any]:
        """Run the next round (:meth:`advance`); return its metrics."""
        return self.advance(self.plan(self.round + 1), self).metrics

    def advance(
        self, plan: RoundPlan, local: LocalTraining, aggregator: Aggregator | None = None
    ) -> RoundResult:
        """The round of :meth:`Federation.advance`, its metrics with each party's training
        loss smoothed over the steps with factor 0.99 (the paper's Table 1)."""
        result = super().advance(plan, local, aggregator)
        self.smoothed_losses = smoothed_losses(
            self.smoothed_losses, result.updates.losses.detach().cpu().numpy()
        )
        result.metrics["party_losses_smoothed"] = self.smoothed_losses.tolist()
        result.metrics["loss_smoothed"] = float(self.smoothed_losses.mean())
        return result

    # -- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: the global backbone and momentum, the parties' heads and
        momentum buffers, the weighting, the Moving Norm's statistics and the smoothed losses."""
        weighting = self.aggregator
        norm = getattr(weighting.normalise, "mean", None)
        prefix = len("momentum.")
        return {
            "round": self.round,
            "params": {k: v.cpu() for k, v in self.params.items()},
            "global_momentum": {k[prefix:]: v.cpu() for k, v in self.shared.items()},
            "heads": [head.cpu() for head in self.heads],
            "head_momentum": [state["head"].cpu() for state in self.optimisers],
            "local_momentum": [
                {k: v.cpu() for k, v in momentum.items()} for momentum in self.local_momentum
            ],
            "weights": torch.as_tensor(weighting.weights),
            "moving_norm": None
            if norm is None
            else torch.as_tensor(np.stack([weighting.normalise.mean, weighting.normalise.var])),
            "smoothed_losses": None
            if self.smoothed_losses is None
            else torch.as_tensor(self.smoothed_losses),
            "engine": asdict(self.config),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`."""
        check_schedule(self.config, state["engine"])
        if len(state["heads"]) != len(self.parties):
            raise TrainingError("the checkpoint has another number of parties: use a new folder")
        device = self.device
        self.round = int(state["round"])
        self.params = {k: v.to(device) for k, v in state["params"].items()}
        self.shared = {f"momentum.{k}": v.to(device) for k, v in state["global_momentum"].items()}
        self.heads = [head.to(device) for head in state["heads"]]
        local = state["local_momentum"] or [{} for _ in self.heads]
        self.optimisers = [
            {"head": buffer.to(device), **{f"backbone.{k}": v.to(device) for k, v in m.items()}}
            for buffer, m in zip(state["head_momentum"], local, strict=True)
        ]
        weighting = self.aggregator
        weighting.weights = state["weights"].numpy().astype(np.float64)
        if state["moving_norm"] is not None and hasattr(weighting.normalise, "mean"):
            weighting.normalise.mean, weighting.normalise.var = state["moving_norm"].numpy()
        smoothed = state.get("smoothed_losses")  # absent in checkpoints of older versions
        self.smoothed_losses = None if smoothed is None else smoothed.numpy().astype(np.float64)

    # -- evaluation and report ------------------------------------------------------------------

    def evaluation_dataset(self, dataset: FederatedDataset) -> FederatedDataset:
        """The view of ``dataset`` the run is scored on: its unknown people are the held-out
        test identities, not the validators'."""
        if self.test_identities is None:
            return dataset
        return replace(dataset, unknown=list(self.test_identities))

    def report_extra(self, dataset: FederatedDataset, folder: Path, seed: int) -> dict[str, Any]:
        """The ``fedface`` section of the report (parties, weighting, the held-out people's
        test accuracy) and ``weights.png`` (the weighting over the rounds)."""
        test = held_out_pairs(dataset, seed)
        section: dict[str, Any] = {
            "parties": [
                {
                    "name": p.name,
                    "identities": len(p.identities),
                    "samples": int(len(p.samples)),
                    "groups": list(p.groups),
                }
                for p in self.parties
            ],
            "validators": [
                {"name": v.name, "identities": len(v.identities), "pairs": int(len(v.same))}
                for v in self.validators
            ],
            "weights": self.aggregator.weights.tolist(),
            # the paper's Table 1: final training losses, smoothed with factor 0.99
            "final_losses_smoothed": None
            if self.smoothed_losses is None
            else self.smoothed_losses.tolist(),
            "pfm": self.algorithm.pfm,
            "fv": self.uses_fv,
            "solo_party": self.algorithm.solo_party or None,
            "sync_interval": self.config.local_steps,
        }
        if test is not None:
            accuracy = test.accuracy(self.outputs(test.samples), self.folds)
            section["test_accuracy"] = accuracy
            section["test_pairs"] = int(len(test.same))
        names = [party.name for party in self.parties]
        plot_weights(folder / METRICS, folder / WEIGHTS, names, self.uses_fv)
        return {"fedface": section}

    @staticmethod
    def summary(report: dict[str, Any]) -> list[str]:
        """Lines the command line prints after a cross-silo run's scores: the held-out accuracy
        and the parties' weighting."""
        section = report.get("fedface")
        if not section:
            return []
        lines = []
        weights = ", ".join(f"{w:.3f}" for w in section["weights"])
        accuracy = section.get("test_accuracy")
        if accuracy is not None:
            lines.append(
                f"  held-out pairs: accuracy {accuracy:.4f} at the best threshold (10-fold)"
            )
        lines.append(f"  {len(section['parties'])} parties, weighting w = ({weights})")
        smoothed = section.get("final_losses_smoothed")
        if smoothed:
            losses = ", ".join(f"{loss:.3f}" for loss in smoothed)
            lines.append(f"  training loss by party, smoothed 0.99 (paper's Table 1): ({losses})")
        return lines


@dataclass
class FederatedValidation(Aggregator):
    """FedFace's aggregator: the parties' weighted mean under its weighting ``w`` (eq. 4), after
    one FV step (Alg. 2, eqs. 7–13) has moved ``w`` toward the best-scoring candidate weighting
    (when it has ``validators``: FV on). It owns ``w`` (and the Norm of the scores,
    ``normalise``) and returns it in its metrics (``weights``, and the FV step's as ``fv``).

    ``embed(samples, params)``: the embeddings of ``samples`` under the backbone ``params`` (a
    candidate aggregate), which the validators score; ``seed`` draws the candidates from
    ``(seed, round)``; ``folds``: of the validators' best-threshold accuracy."""

    algorithm: FedFace
    weights: np.ndarray
    validators: list[VerificationSet]
    embed: Callable[[Any, Tensors], np.ndarray]
    seed: int
    folds: int = 10
    normalise: Any = field(default=None)

    def __post_init__(self) -> None:
        if self.normalise is None:
            self.normalise = self.algorithm.normaliser()

    def __call__(
        self, updates: ClientUpdates, base: Tensors, plan: RoundPlan
    ) -> tuple[Tensors, dict[str, Any]]:
        if updates.params is None:
            raise TrainingError("federated validation needs each party's parameters")
        metrics: dict[str, Any] = {}
        if self.validators:
            metrics["fv"] = self.validate(updates.params, plan.number)
        params = self.aggregate(updates.params, self.weights)
        return params, {**metrics, "weights": self.weights.tolist()}

    def aggregate(self, stacked: Tensors, weights: np.ndarray) -> Tensors:
        """Eq. (4): the FedAvg core with the weighting ``weights``."""
        device = next(iter(stacked.values())).device
        return self.algorithm.aggregate(stacked, torch.as_tensor(weights, device=device))

    def validate(self, stacked: Tensors, round_number: int) -> dict[str, Any]:
        """One FV step (Alg. 2, eqs. 7–13): score T candidate aggregates on every validator and
        move the weighting toward the best."""
        rng = np.random.default_rng([self.seed, round_number, 3])
        candidates = candidate_weightings(self.weights, self.algorithm.fv_candidates, rng)
        scores = np.zeros((len(self.validators), len(candidates)))
        for t, candidate in enumerate(candidates):
            params = self.aggregate(stacked, candidate)
            for v, validator in enumerate(self.validators):
                embeddings = self.embed(validator.samples, params)
                scores[v, t] = validator.accuracy(embeddings, self.folds)
        normalised = self.normalise(scores)
        self.weights, best = fv_update(self.weights, candidates, normalised, self.algorithm.fv_rate)
        return {"scores": scores.tolist(), "best": best, "candidates": candidates.tolist()}


def make_cross_silo(
    config: Any, dataset: FederatedDataset, backbone: nn.Module, engine: EngineConfig, device: Any
) -> CrossSilo:
    """The trainer of a cross-silo run config (:data:`uvtrain.run.TRAINERS`); it is evaluated
    on :meth:`CrossSilo.evaluation_dataset` (the unknown identities are the held-out test
    people, not the validators')."""
    algorithm = config.method
    parties = partition(dataset, config.method.parties, config.method.partition, config.seed)
    # the same split with FV on or off, so that every run of a comparison has the same test people
    validators, test = split_unknown(dataset, config.method.validators, config.seed)
    if algorithm.solo_party:
        parties, validators = solo(parties, algorithm.solo_party), []
    elif config.method.parties > 1 and algorithm.fv and not validators:
        raise ConfigError("fv needs at least one validator (--validators)")
    # every party, every round: the schedule's sampling is refused for the setting
    # (uvtrain.methods.SETTINGS), so nothing the run set is replaced here
    engine = replace(engine, fraction=1.0, sampling="random")
    silo = CrossSilo(
        algorithm, backbone, parties, validators, engine, device, config.method.fv_folds
    )
    silo.test_identities = test
    return silo


def solo(parties: list[Party], number: int) -> list[Party]:
    """The paper's Table 1 "Solo" ("the model is trained with only one dataset"): party
    ``number`` (1-based) of the federation alone — a 1-party run on its own data, the trainer's
    centralised case, with no validators (nothing to aggregate, so nothing to weigh). Scored on
    the federation's held-out people, so it stands beside the federated runs."""
    if not 1 <= number <= len(parties):
        raise ConfigError(f"solo_party: {number} for {len(parties)} parties")
    return [parties[number - 1]]


def held_out_pairs(dataset: FederatedDataset, seed: int) -> VerificationSet | None:
    """The held-out people's verification pairs (the paper's test protocol)."""
    if len(dataset.unknown) < 2:
        return None
    return verification_set("test", list(dataset.unknown), seed + 1000)
