"""A paper's data protocol: how many identities train, which are unknown, how many samples each.

Without a protocol the corpus loaders keep their small defaults (a capped random choice of
identities, 20 % of them unknown, every identity's samples split 60/20/20). A
:class:`DataProtocol` states instead what a paper's experiment used, and :func:`plan_identities`
turns a corpus's index (identity → its files or rows) into the plan the loader then decodes:
which identities are known clients with which train/validation/test items, which are unknown
with which items. The plan is made before anything is decoded, so it can be checked on a copy of
any size (tests/trainer/test_paper_data.py).

The papers' protocols (the presets set them: :mod:`uvtrain.presets`):

* FedUV Sec. 6.1: VoxCeleb 1,000 speakers of 25/10/10 clips, unknown 200 speakers × 5; CelebA
  1,000 identities (of those with at least 30 images) of 20/5/5, unknown 1,000 × 1; MNIST-UV
  1,000 writers of 50/15/15, unknown 1,000 × 1.
* FedHide Sec. 4.1 and Table 1: CIFAR-100's 100 classes, the 500 training images of each to
  train, its 100 test images to test; VoxCeleb1's 1,211 development speakers train, its 40 test
  speakers are unseen; VGGFace2's 8,631 training identities train, its 500 test identities are
  unseen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..errors import DatasetError

if TYPE_CHECKING:  # numpy is imported where a plan is made: the config imports this module
    import numpy as np

Item = TypeVar("Item")

#: Fewest samples of an identity kept without a per-split count (one each for train, val, test).
MIN_SAMPLES = 3
#: Without ``unknown_identities`` (and with ``identities`` given), a quarter as many unknown
#: identities as known: 20 % of all, as the loaders' default unknown fraction.
UNKNOWN_PER_KNOWN = 0.25
#: Without a per-split count, the share of a corpus's official training samples (CIFAR-100's)
#: that goes to validation.
OFFICIAL_VALIDATION_SHARE = 0.1


@dataclass(frozen=True)
class DataProtocol:
    """The data keys of a run (:class:`uvtrain.config.Data`) that choose identities and samples.

    Attributes
    ----------
    identities : int or None
        Known identities (clients), exactly; ``None``: every eligible one.
    unknown_identities : int or None
        Identities held out of training; ``None``: all of the corpus's official test identities
        with ``official_split``, else a quarter as many as the known ones (without
        ``identities``: 20 % of the eligible ones).
    samples_per_split : tuple of int or None
        Train, validation and test samples of every known identity, exactly; identities with
        fewer are not eligible. ``None``: every sample, split 60/20/20.
    unknown_samples : int or None
        Samples of every unknown identity; ``None``: all of them.
    official_split : bool
        Use the corpus's own split: VoxCeleb1's and VoxCeleb2's test speakers and VGGFace2's
        ``test/`` identities are the unknown ones, CIFAR-100's test images each class's test split.
    """

    identities: int | None = None
    unknown_identities: int | None = None
    samples_per_split: tuple[int, int, int] | None = None
    unknown_samples: int | None = None
    official_split: bool = False

    def __post_init__(self) -> None:
        if self.identities is not None and self.identities < 2:
            raise DatasetError(f"identities must be at least 2, not {self.identities}")
        if self.unknown_identities is not None and self.unknown_identities < 0:
            raise DatasetError(f"unknown_identities must be >= 0, not {self.unknown_identities}")
        if self.unknown_samples is not None and self.unknown_samples < 1:
            raise DatasetError(f"unknown_samples must be at least 1, not {self.unknown_samples}")
        if self.samples_per_split is not None:
            train, val, test = self.samples_per_split
            if train < 1 or val < 0 or test < 0:
                raise DatasetError(
                    f"samples_per_split must be train >= 1, validation and test >= 0, not "
                    f"{train},{val},{test}"
                )

    @classmethod
    def from_keys(
        cls,
        identities: int | None = None,
        unknown_identities: int | None = None,
        samples_per_split: str = "",
        unknown_samples: int | None = None,
        official_split: bool = False,
    ) -> DataProtocol | None:
        """The protocol of the data keys, ``None`` when none is set (the loaders' defaults)."""
        counts = parse_samples_per_split(samples_per_split)
        if (identities, unknown_identities, counts, unknown_samples) == (None,) * 4 and not (
            official_split
        ):
            return None
        return cls(identities, unknown_identities, counts, unknown_samples, official_split)

    @property
    def known_samples(self) -> int:
        """Fewest samples a known identity needs."""
        return sum(self.samples_per_split) if self.samples_per_split else MIN_SAMPLES

    def describe(self) -> dict[str, Any]:
        """The protocol as JSON (a dataset's ``extra["protocol"]``)."""
        counts = self.samples_per_split
        return {
            "identities": self.identities,
            "unknown_identities": self.unknown_identities,
            "samples_per_split": ",".join(map(str, counts)) if counts else "",
            "unknown_samples": self.unknown_samples,
            "official_split": self.official_split,
        }


def parse_samples_per_split(text: str) -> tuple[int, int, int] | None:
    """``"25,10,10"`` → ``(25, 10, 10)``; ``""`` → ``None``; anything else a one-line error."""
    if not text.strip():
        return None
    parts = text.split(",")
    if len(parts) != 3 or not all(part.strip().isdigit() for part in parts):
        raise DatasetError(
            f"samples_per_split must be three counts TRAIN,VALIDATION,TEST (e.g. 25,10,10), "
            f"not {text!r}"
        )
    train, val, test = (int(part) for part in parts)
    return train, val, test


@dataclass(frozen=True)
class Plan(Generic[Item]):
    """Which items become which identity's samples, before anything is decoded.

    ``known``: identity → its (train, validation, test) items; ``unknown``: identity → its items.
    Both in sorted identity order."""

    known: dict[str, tuple[list[Item], list[Item], list[Item]]]
    unknown: dict[str, list[Item]]
    protocol: DataProtocol = field(default_factory=DataProtocol)


def _eligible(index: Mapping[str, list[Item]], needed: int) -> list[str]:
    return sorted(name for name, items in index.items() if len(items) >= needed)


def _draw(
    rng: np.random.Generator, pool: list[str], count: int | None, corpus: str, what: str
) -> list[str]:
    """``count`` names of ``pool`` at random (sorted), all of it for ``None``; too few: an error."""
    if count is None:
        return list(pool)
    if count > len(pool):
        raise DatasetError(f"{corpus}: {count} {what} asked, the copy has {len(pool)}")
    return sorted(pool[i] for i in rng.choice(len(pool), size=count, replace=False))


def _split_known(
    items: list[Item], counts: tuple[int, int, int] | None, rng: np.random.Generator
) -> tuple[list[Item], list[Item], list[Item]]:
    from .base import split_counts

    shuffled = [items[i] for i in rng.permutation(len(items))]
    train, val, test = counts or split_counts(len(shuffled))
    return (
        shuffled[:train],
        shuffled[train : train + val],
        shuffled[train + val : train + val + test],
    )


def _take(items: list[Item], count: int | None, rng: np.random.Generator) -> list[Item]:
    return [items[i] for i in rng.permutation(len(items))[:count]]


def plan_identities(
    corpus: str,
    index: Mapping[str, list[Item]],
    protocol: DataProtocol,
    *,
    seed: int,
    test_identities: Mapping[str, list[Item]] | None = None,
    test_samples: Mapping[str, list[Item]] | None = None,
) -> Plan[Item]:
    """The plan of a corpus under ``protocol``.

    Parameters
    ----------
    corpus : str
        The corpus's name (for errors).
    index : mapping of str to list
        Identity → its items (files, rows): the corpus's training part under ``official_split``.
    protocol : DataProtocol
        What to choose.
    seed : int
        Seed of every choice.
    test_identities : mapping, optional
        The corpus's official test identities (VoxCeleb1's 40 speakers, VGGFace2's ``test/``):
        the unknown ones under ``official_split``.
    test_samples : mapping, optional
        The corpus's official test samples of the same identities (CIFAR-100's test images):
        each known identity's test split under ``official_split``.

    Returns
    -------
    Plan
        Known identities with their split items, unknown identities with theirs.
    """
    if protocol.official_split and test_identities is None and test_samples is None:
        raise DatasetError(
            f"{corpus}: no official split (official_split: voxceleb1, voxceleb2, vggface2, "
            "cifar-100)"
        )
    import numpy as np

    rng = np.random.default_rng([seed, 0x9A7A])
    if protocol.official_split and test_samples is not None:
        return _plan_sample_split(corpus, index, test_samples, protocol, rng)
    if protocol.official_split:
        what = f"identities with at least {protocol.known_samples} samples"
        known = _draw(
            rng, _eligible(index, protocol.known_samples), protocol.identities, corpus, what
        )
        pool = _eligible(test_identities or {}, protocol.unknown_samples or 1)
        unknown = _draw(rng, pool, protocol.unknown_identities, corpus, "test identities")
        unknown_index: Mapping[str, list[Item]] = test_identities or {}
    else:
        known, unknown = _random_split(corpus, index, protocol, rng)
        unknown_index = index
    return Plan(
        {name: _split_known(index[name], protocol.samples_per_split, rng) for name in known},
        {name: _take(unknown_index[name], protocol.unknown_samples, rng) for name in unknown},
        protocol,
    )


def _random_split(
    corpus: str, index: Mapping[str, list[Item]], protocol: DataProtocol, rng: np.random.Generator
) -> tuple[list[str], list[str]]:
    """Known identities drawn first (FedUV Sec. 6.1: "1,000 speakers"), then the unknown ones
    from the remaining (its "200 of the remaining speakers")."""
    from .base import unknown_count

    eligible = _eligible(index, protocol.known_samples)
    what = f"identities with at least {protocol.known_samples} samples"
    if protocol.identities is None:
        count = protocol.unknown_identities
        if count is None:
            count = unknown_count(len(eligible))
        unknown = _draw(rng, eligible, count, corpus, what + " (as unknown)")
        held = set(unknown)
        return [name for name in eligible if name not in held], unknown
    known = _draw(rng, eligible, protocol.identities, corpus, what)
    chosen = set(known)
    rest = [name for name in _eligible(index, protocol.unknown_samples or 1) if name not in chosen]
    count = protocol.unknown_identities
    if count is None:
        count = min(len(rest), round(UNKNOWN_PER_KNOWN * protocol.identities))
    samples = protocol.unknown_samples or 1
    unknown = _draw(rng, rest, count, corpus, f"other identities with at least {samples} samples")
    return known, unknown


def _plan_sample_split(
    corpus: str,
    index: Mapping[str, list[Item]],
    test_samples: Mapping[str, list[Item]],
    protocol: DataProtocol,
    rng: np.random.Generator,
) -> Plan[Item]:
    """CIFAR-100 (FedHide Sec. 4.1): each class's training images give its train and validation
    splits, its test images its test split; unknown classes (none by default) keep all theirs."""
    counts = protocol.samples_per_split
    train_needed = counts[0] + counts[1] if counts else 2
    test_needed = counts[2] if counts else 1
    eligible = [
        name
        for name in _eligible(index, train_needed)
        if len(test_samples.get(name, ())) >= test_needed
    ]
    what = f"classes with {train_needed} training and {test_needed} test samples"
    known = _draw(rng, eligible, protocol.identities, corpus, what)
    rest = [name for name in sorted(index) if name not in set(known)]
    unknown = _draw(rng, rest, protocol.unknown_identities or 0, corpus, "other classes")
    plan_known = {}
    for name in known:
        train_items = _take(index[name], None, rng)
        val = counts[1] if counts else max(1, round(OFFICIAL_VALIDATION_SHARE * len(train_items)))
        train = counts[0] if counts else len(train_items) - val
        tests = _take(test_samples[name], counts[2] if counts else None, rng)
        plan_known[name] = (train_items[:train], train_items[train : train + val], tests)
    plan_unknown = {
        name: _take([*index[name], *test_samples.get(name, [])], protocol.unknown_samples, rng)
        for name in unknown
    }
    return Plan(plan_known, plan_unknown, protocol)
