"""How a cross-silo run's known identities become its parties (organisations): by dataset, by
language family or language, or a seeded random split (:func:`partition`); the cross-silo
trainer (:mod:`uvtrain.crosssilo`) trains them.

For ``synth-voices``, parties by language: whole language families (``gmw``, ``roa``, ``zlw``,
...) when there are at least two per party, else whole languages, so the parties differ the way
organisations in different countries do; several datasets (``--dataset a,b,c``,
:func:`uvtrain.data.base.combine`): each party holds one dataset, or 1/m of one (the paper's 12
parties); otherwise (faces) a seeded random split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .base import FederatedDataset


@dataclass(frozen=True)
class Party:
    """One organisation's training data: its identities' samples with labels ``0 .. C_p − 1``."""

    name: str
    identities: tuple[str, ...]
    groups: tuple[str, ...]
    samples: np.ndarray
    labels: np.ndarray


def _languages(dataset: FederatedDataset) -> dict[str, str] | None:
    speakers = dataset.extra.get("speakers")
    if not isinstance(speakers, dict):
        return None
    found = {name: info.get("language") for name, info in speakers.items()}
    return found if all(isinstance(v, str) for v in found.values()) else None


def partition(
    dataset: FederatedDataset, parties: int, how: str = "auto", seed: int = 0
) -> list[Party]:
    """Split the known identities into ``parties`` parties (see the module docstring).

    ``how``: ``dataset`` (several datasets, :func:`uvtrain.data.base.combine`), ``language``
    (synth-voices), ``random``, or ``auto`` (one party: everyone; else dataset when there are
    several, else language when the dataset records its speakers' languages, else random)."""
    clients = dataset.clients
    if parties < 1 or parties > len(clients):
        raise ConfigError(f"parties: {parties} for {len(clients)} identities")
    languages = _languages(dataset)
    sources = dataset.extra.get("sources")
    if how == "auto" and parties == 1:  # the centralised baseline pools whatever there is
        how = "random"
    elif how == "auto":
        how = "dataset" if sources else "language" if languages else "random"
    if how == "dataset":
        members, groups = _by_dataset(dataset, parties, seed)
    elif how == "language":
        if languages is None:
            raise ConfigError(f"partition 'language': {dataset.name} records no languages")
        families = {name: language.split("/")[0] for name, language in languages.items()}
        unit_of = families if len(set(families.values())) >= 2 * parties else languages
        units: dict[str, list[int]] = {}
        for index, client in enumerate(clients):
            units.setdefault(unit_of[client.identity], []).append(index)
        if len(units) < parties:
            raise ConfigError(f"parties: {parties} but only {len(units)} languages")
        members: list[list[int]] = [[] for _ in range(parties)]
        groups: list[list[str]] = [[] for _ in range(parties)]
        # largest unit first, to the party with the fewest identities so far (lowest index on ties)
        for unit in sorted(units, key=lambda name: (-len(units[name]), name)):
            target = min(range(parties), key=lambda p: (len(members[p]), p))
            members[target].extend(units[unit])
            groups[target].append(unit)
    elif how == "random":
        order = np.random.default_rng([seed, 5]).permutation(len(clients))
        members = [sorted(part.tolist()) for part in np.array_split(order, parties)]
        groups = [[] for _ in range(parties)]
    else:
        raise ConfigError(f"partition must be auto, dataset, language or random, not {how!r}")
    result = []
    for number, (indices, names) in enumerate(zip(members, groups, strict=True)):
        indices = sorted(indices)
        chosen = [clients[i] for i in indices]
        samples = np.concatenate([client.train for client in chosen])
        labels = np.concatenate([np.full(len(c.train), i) for i, c in enumerate(chosen)])
        result.append(
            Party(
                f"party{number + 1}",
                tuple(c.identity for c in chosen),
                tuple(sorted(names)),
                samples,
                labels,
            )
        )
    return result


def _by_dataset(
    dataset: FederatedDataset, parties: int, seed: int
) -> tuple[list[list[int]], list[list[str]]]:
    """The parties of several datasets: ``parties`` a multiple m of the datasets, each dataset's
    identities split evenly into m seeded random parts (the paper's 12 parties: "each of the 3
    training datasets is evenly split into 4 parts", labelled ``-A`` .. ``-D`` as in its Fig. 6);
    m = 1: a party per dataset."""
    sources, names = dataset.extra.get("sources"), dataset.extra.get("datasets")
    if not sources or not names:
        raise ConfigError(f"partition 'dataset': {dataset.name} is one dataset (--dataset a,b,c)")
    if parties % len(names):
        raise ConfigError(
            f"parties: {parties} is not a multiple of the {len(names)} datasets ({', '.join(names)})"
        )
    share = parties // len(names)
    members: list[list[int]] = []
    groups: list[list[str]] = []
    for number, name in enumerate(names):
        indices = [i for i, c in enumerate(dataset.clients) if sources[c.identity] == name]
        if len(indices) < share:
            raise ConfigError(f"{name}: {len(indices)} identities for {share} parties")
        order = np.random.default_rng([seed, 5, number]).permutation(indices)
        for part, chunk in enumerate(np.array_split(order, share)):
            members.append(sorted(chunk.tolist()))
            groups.append([name if share == 1 else f"{name}-{chr(ord('A') + part)}"])
    return members, groups
