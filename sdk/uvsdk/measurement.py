"""Measuring a calibration (:class:`uvsdk.calibration.Calibration`) from a bundle's vectors of
real people: each person enrolled exactly as the SDK enrolls, their other samples genuine trials
and the other people's (of their recording chain) impostor trials, under every recording
condition; each FAR's threshold the worst condition's (:func:`measure`); and, with several
recording chains, what the rows do on a chain they were not fitted on (:func:`held_out_figures`).
The exporter runs it (``uvexport calibrate``); a device only reads the result.

With ``centre`` (person → recording chain) every trial is scored as a bundle with a recording
chain's mean scores it (docs/spec.md §6.8), the mean being of the chain's **other** people:
a person's enrollment and genuine clips are centred by the mean of their chain without them,
and each impostor trial by the mean without either of its two people (leave-two-out), so that
no trial is helped by a mean that holds its own voices (a deployment's mean holds its people,
but among thousands). A chain of fewer than :data:`MIN_CHAIN_PEOPLE` people in a condition
takes the mean of every other person of the condition instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .calibration import (
    CODEWORDS_PER_PERSON,
    DEFAULT_ENROLL_SAMPLES,
    FAR_GRID,
    MAX_FAR,
    MIN_FALSE_ACCEPTS,
    Calibration,
    HeldOut,
    HeldOutRow,
    Row,
    Table,
    normalised_leave_one_out,
)
from .cohort import Centre, Cohort
from .scoring import codeword_scores, cosine_scores, leave_one_out_scores, prototype

MIN_CHAIN_PEOPLE = 3
"""A recording chain of fewer people in a condition is not a chain of its own: it is centred by
the whole condition's other people (a mean of one or two voices carries them:
benchmarks/far_centring.py), and ``each_chain`` does not hold it to its own FAR (its impostor
trials are one pair's: one source of two actors set every row of the table from FAR 0.2 down,
docs/model-card.md)."""


class ChainMeans:
    """The sums behind leave-out chain means of one condition's vectors: each person's pool
    (their chain, or ``*``, the whole condition, for a chain of fewer than
    :data:`MIN_CHAIN_PEOPLE` people), each pool's sum and count of unit vectors and each
    person's own."""

    def __init__(self, vectors: Mapping[str, np.ndarray], chains: Mapping[str, str]) -> None:
        names = [name for name, v in vectors.items() if len(v)]
        sizes: dict[str, int] = {}
        for name in names:
            sizes[chains[name]] = sizes.get(chains[name], 0) + 1
        self.pool = {
            name: chains[name] if sizes[chains[name]] >= MIN_CHAIN_PEOPLE else "*" for name in names
        }
        self.own = {name: _units(vectors[name]).sum(axis=0) for name in names}
        self.count = {name: len(vectors[name]) for name in names}
        self.sums: dict[str, np.ndarray] = {}
        self.counts: dict[str, int] = {}
        for name in names:
            for pool in {self.pool[name], "*"}:
                self.sums[pool] = self.sums.get(pool, 0.0) + self.own[name]
                self.counts[pool] = self.counts.get(pool, 0) + self.count[name]

    def without(self, *people: str) -> Centre:
        """The mean of the first person's pool without ``people`` (their unit vectors' mean)."""
        pool = self.pool[people[0]]
        total, count = self.sums[pool].copy(), self.counts[pool]
        for name in set(people):
            if pool == "*" or self.pool[name] == pool:
                total -= self.own[name]
                count -= self.count[name]
        if count < 1:
            raise ValueError("no other person's vectors to take a chain's mean from")
        return Centre(total / count)

    @staticmethod
    def whole(vectors: Mapping[str, np.ndarray], chains: Mapping[str, str]) -> dict[str, Centre]:
        """Each person's pool mean over everyone in it (the cohort's centring)."""
        means = ChainMeans(vectors, chains)
        return {
            name: Centre(means.sums[pool] / means.counts[pool]) for name, pool in means.pool.items()
        }


def _by_chain(
    impostor: Mapping[str, np.ndarray], groups: Mapping[str, str]
) -> list[tuple[str, np.ndarray]]:
    """Each chain's impostor scores (its people's, against its people), for the chains of at
    least :data:`MIN_CHAIN_PEOPLE` enrolled people."""
    members: dict[str, list[str]] = {}
    for name in impostor:
        members.setdefault(groups[name], []).append(name)
    return [
        (chain, np.concatenate([impostor[name] for name in names]))
        for chain, names in sorted(members.items())
        if len(names) >= MIN_CHAIN_PEOPLE
    ]


def _units(vectors: np.ndarray) -> np.ndarray:
    rows = np.asarray(vectors, dtype=np.float64)
    return rows / np.maximum(np.linalg.norm(rows, axis=-1, keepdims=True), 1e-12)


def far_threshold(impostor: np.ndarray, far: float) -> float:
    """The smallest threshold that accepts at most ``far × len(impostor)`` of these impostor
    scores (accept iff ``score >= threshold``)."""
    descending = np.sort(np.asarray(impostor, np.float64).ravel())[::-1]
    allowed = math.floor(far * descending.size + 1e-9)
    # strictly above the (allowed + 1)-th highest impostor score: at most `allowed` accepted
    return float(np.nextafter(descending[allowed], np.inf))


def table_from_scores(
    mode: str,
    trials: Mapping[str, tuple[np.ndarray, np.ndarray]],
    *,
    people: int,
    enroll_samples: int,
    score: str,
    grid: Sequence[float] = FAR_GRID,
    each_chain: Mapping[str, np.ndarray] | None = None,
) -> Table:
    """A table from each condition's ``(genuine, impostor)`` trial scores: for each FAR that
    every condition's trials resolve, the smallest threshold that accepts at most ``far`` of
    the impostor trials in **every** condition (the worst condition decides); the false accepts
    and the FRR there are pooled over the conditions. ``each_chain`` (impostor scores of each
    recording chain in each condition): the threshold also accepts at most ``far`` of each of
    them that resolves the FAR, so that it holds on every chain, not only pooled over them."""
    scores = {
        name: (np.asarray(g, np.float64).ravel(), np.asarray(i, np.float64).ravel())
        for name, (g, i) in trials.items()
    }
    for genuine, impostor in scores.values():
        if not (np.all(np.isfinite(genuine)) and np.all(np.isfinite(impostor))):
            raise ValueError("calibration scores must be finite")
    genuine = np.concatenate([g for g, _ in scores.values()])
    impostor = np.concatenate([i for _, i in scores.values()])
    fewest = min(i.size for _, i in scores.values())
    rows: list[Row] = []
    for far in sorted(grid, reverse=True):
        if far > MAX_FAR or far * fewest < MIN_FALSE_ACCEPTS:
            continue
        threshold = max(far_threshold(i, far) for _, i in scores.values())
        for impostor_chain in (each_chain or {}).values():
            if far * impostor_chain.size >= MIN_FALSE_ACCEPTS - 1e-9:
                threshold = max(threshold, far_threshold(impostor_chain, far))
        if rows:  # identical scores can only make a stricter FAR need a higher threshold
            threshold = max(threshold, rows[-1].threshold)
        accepts = int(np.count_nonzero(impostor >= threshold))
        frr = rejects = None
        if genuine.size:
            rejects = int(np.count_nonzero(genuine < threshold))
            frr = rejects / genuine.size
        rows.append(Row(far, threshold, accepts, frr, rejects))
    if not rows:
        raise ValueError(
            f"{fewest} impostor trials in a condition cannot state any FAR (a row needs "
            f"far x trials >= {MIN_FALSE_ACCEPTS}): calibrate on more people or samples"
        )
    return Table(
        mode,
        people,
        enroll_samples,
        int(genuine.size),
        int(impostor.size),
        tuple(rows),
        score,
        tuple(scores),
    )


def enrollment_trials(
    vectors: Mapping[str, np.ndarray],
    enroll_samples: int,
    *,
    cohort: Cohort | None = None,
    cohort_people: np.ndarray | None = None,
    groups: Mapping[str, str] | None = None,
    centre: Mapping[str, str] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Enroll every person with more than ``enroll_samples`` vectors on their first ones, as
    :meth:`uvsdk.Verifier.enroll` does in prototype mode.

    Returns per person: the warm-up (leave-one-out) scores of the enrollment samples, the genuine
    scores (their other samples) and the impostor scores (every sample of every other person;
    with ``groups``, person → recording chain, only of the other people of the same chain: the
    strangers an app meets record on the same app and devices, and people of other chains are
    told apart by their channel as much as by their voice).
    With a ``cohort`` every score is AS-norm normalised, as the SDK does; ``cohort_people``
    names the person of each cohort vector, and a person's own vectors never take part in the
    statistics of their enrollment or of their samples (calibration people are in the cohort;
    users are not). With ``centre`` (person → recording chain) every vector is centred by its
    chain's mean without the trial's people first (the module's leave-two-out rule).
    """
    names = [name for name, v in vectors.items() if len(v)]
    everyone = np.concatenate([np.asarray(vectors[name]) for name in names])
    owners = np.repeat(np.array(names, dtype=object), [len(vectors[name]) for name in names])
    chain_of = None if groups is None else np.array([groups[o] for o in owners], dtype=object)
    means = None if centre is None else ChainMeans(vectors, centre)
    warmup, genuine, impostor = {}, {}, {}
    for name in names:
        own = np.asarray(vectors[name])
        if len(own) <= enroll_samples:
            continue
        enrolled, tests = own[:enroll_samples], own[enroll_samples:]
        strangers = owners != name
        if chain_of is not None:
            strangers &= chain_of == groups[name]
        others, other_owners = everyone[strangers], owners[strangers]

        def exclude(test_owners: np.ndarray | None, person: str = name) -> np.ndarray | None:
            if cohort_people is None:
                return None
            mask = np.asarray(cohort_people == person)[None, :]
            if test_owners is not None:
                mask = mask | (cohort_people[None, :] == test_owners[:, None])
            return mask

        def scored(
            enrolled: np.ndarray, tests: np.ndarray, test_owners: np.ndarray | None
        ) -> tuple[np.ndarray, np.ndarray]:
            """Warm-up and test scores of one enrollment, as the SDK computes them."""
            reference = prototype(enrolled)
            scores = cosine_scores(reference, tests)
            if cohort is None:
                return leave_one_out_scores(enrolled), scores
            enrolled_stats = cohort.statistics(reference[None], exclude(None))
            return normalised_leave_one_out(enrolled, cohort, exclude(None)), cohort.rule.normalise(
                scores, enrolled_stats, cohort.statistics(tests, exclude(test_owners))
            )

        if means is None:
            warmup[name], genuine[name] = scored(enrolled, tests, None)
            impostor[name] = scored(enrolled, others, other_owners)[1]
            continue
        mean = means.without(name)
        warmup[name], genuine[name] = scored(mean.apply(enrolled), mean.apply(tests), None)
        parts = []
        for stranger in dict.fromkeys(other_owners):
            mine = other_owners == stranger
            mean = means.without(name, stranger)
            parts.append(
                scored(mean.apply(enrolled), mean.apply(others[mine]), other_owners[mine])[1]
            )
        impostor[name] = np.concatenate(parts) if parts else np.zeros(0)
    return warmup, genuine, impostor


def measure(
    conditions: Mapping[str, Mapping[str, np.ndarray]],
    *,
    data: str,
    enroll_samples: int = DEFAULT_ENROLL_SAMPLES,
    generator: np.ndarray | None = None,
    seed: int = 0,
    cohort: Cohort | None = None,
    cohort_people: np.ndarray | None = None,
    groups: Mapping[str, str] | None = None,
    seconds: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    centre: Mapping[str, str] | None = None,
    each_chain: bool = False,
) -> Calibration:
    """The calibration of a bundle from its vectors of a calibration set under each recording
    condition (``{condition: {person: [N, dim]}}``, e.g. from :meth:`uvsdk.Verifier.embed` of
    :mod:`uvexport.conditions`' versions of each file).

    The prototype table enrolls each person on their first ``enroll_samples`` vectors of each
    condition, with AS-norm against ``cohort`` when given (``cohort_people``: whose each cohort
    vector is). With a ``generator`` (codeword bundles), the codeword table scores every vector
    against :data:`CODEWORDS_PER_PERSON` codewords per person, drawn from the code with a seeded
    generator (they are the calibration's, not anyone's secret). ``groups`` (person →
    recording chain) keeps the impostor trials within each chain (:func:`enrollment_trials`);
    with ``seconds`` (the audio behind each vector, as ``conditions``) and at least two chains
    of several people, the prototype table carries its :func:`held_out_figures`. ``centre``
    (person → recording chain): every prototype trial centred by a leave-out chain mean (the
    module's rule), as a bundle with a recording chain's mean scores. ``each_chain`` (with
    ``groups``): each prototype row's threshold holds on every chain of at least
    :data:`MIN_CHAIN_PEOPLE` people that resolves its FAR
    (:func:`table_from_scores`).
    """
    if each_chain and groups is None:
        raise ValueError("each_chain needs the recording chains (groups)")
    per_chain: dict[str, np.ndarray] = {}
    trials, people = {}, set()
    for condition, vectors in conditions.items():
        _, genuine, impostor = enrollment_trials(
            vectors,
            enroll_samples,
            cohort=cohort,
            cohort_people=cohort_people,
            groups=groups,
            centre=centre,
        )
        if len(genuine) < 2:
            raise ValueError(
                f"calibration needs at least 2 people with more than {enroll_samples} usable "
                f"samples in each condition; {len(genuine)} have in {condition}"
            )
        people |= set(genuine)
        if each_chain:
            assert groups is not None
            per_chain.update(
                {f"{condition}/{chain}": scores for chain, scores in _by_chain(impostor, groups)}
            )
        trials[condition] = (
            np.concatenate(list(genuine.values())),
            np.concatenate(list(impostor.values())),
        )
    tables = {
        "prototype": table_from_scores(
            "prototype",
            trials,
            people=len(people),
            enroll_samples=enroll_samples,
            score="cosine" if cohort is None else cohort.method,
            each_chain=per_chain if each_chain else None,
        )
    }
    if seconds is not None and groups is not None:
        held_out = held_out_figures(
            conditions,
            seconds,
            table=tables["prototype"],
            enroll_samples=enroll_samples,
            groups=groups,
            cohort=cohort,
            cohort_people=cohort_people,
            centre=centre,
            each_chain=each_chain,
        )
        if held_out is not None:
            tables["prototype"] = dataclasses.replace(tables["prototype"], held_out=held_out)
    if generator is not None:
        tables["codeword"] = _codeword_table(conditions, np.asarray(generator, np.uint8), seed)
    return Calibration(data, tables)


HELD_OUT_MIN_SECONDS = 2.0
"""The held-out FRR counts genuine test clips of at least this many seconds: what a user says
to the app (a name, a sentence), not the one-word clips some sources hold."""


def held_out_figures(
    conditions: Mapping[str, Mapping[str, np.ndarray]],
    seconds: Mapping[str, Mapping[str, np.ndarray]],
    *,
    table: Table,
    enroll_samples: int,
    groups: Mapping[str, str],
    cohort: Cohort | None = None,
    cohort_people: np.ndarray | None = None,
    min_seconds: float = HELD_OUT_MIN_SECONDS,
    centre: Mapping[str, str] | None = None,
    each_chain: bool = False,
) -> HeldOut | None:
    """Leave-one-chain-out figures of ``table``'s rows: for each recording chain with several
    people, the thresholds are fitted as :func:`measure` fits them on the other chains alone
    (their cohort vectors only), then applied to the held-out chain: its impostor pairs (within
    the chain) give the FAR, its genuine clips of at least ``min_seconds`` the FRR. The chain's
    vectors leave the cohort for its fold (AS-norm's ``top_k`` then at most half of what is
    left, as :func:`uvexport.calibrate.calibrate_vectors` chooses it). Counts are pooled over the
    chains; the range is the lowest and highest single chain; a chain whose fold leaves too
    small a cohort to normalise is skipped. ``None`` when fewer than two chains can be held out
    (nothing to hold out). ``centre``: every trial centred as :func:`measure` centres it, each
    side's means from its own people (the held-out chain's from its own); ``each_chain``: the
    fold's thresholds fitted as :func:`measure` fits them with it."""
    chains = sorted({groups[p] for p in groups})
    members = {c: {p for p in groups if groups[p] == c} for c in chains}
    testable = [c for c in chains if len(members[c]) >= 2]
    if len(testable) < 2:
        return None
    fars = [row.far for row in table.rows]
    pooled = {far: [0, 0, 0, 0] for far in fars}  # accepts, impostors, rejects, genuine
    per_chain: dict[float, list[tuple[float | None, float | None]]] = {far: [] for far in fars}
    folds = 0
    for chain in testable:
        options: dict[str, Any] = {"cohort": cohort, "cohort_people": cohort_people,
                                   "groups": groups, "centre": centre}  # fmt: skip
        if cohort is not None and cohort_people is not None:  # the chain is in no cohort
            keep = np.array([groups.get(p) != chain for p in cohort_people], dtype=bool)
            options["cohort_people"] = cohort_people[keep]
            options["cohort"] = Cohort(
                cohort.vectors[keep], max(2, min(cohort.top_k, int(keep.sum()) // 2)), cohort.method
            )
        fit, test, long_enough, fit_chains = {}, {}, {}, {}
        try:  # the other chains' cohort may be too small to normalise: no fold
            for condition, vectors in conditions.items():
                inside = {p: v for p, v in vectors.items() if p in members[chain]}
                outside = {p: v for p, v in vectors.items() if p not in members[chain]}
                _, genuine, impostor = enrollment_trials(outside, enroll_samples, **options)
                if len(genuine) >= 2 and sum(len(i) for i in impostor.values()):
                    fit[condition] = (
                        np.concatenate(list(genuine.values())),
                        np.concatenate(list(impostor.values())),
                    )
                    for other, scores in _by_chain(impostor, groups) if each_chain else ():
                        fit_chains[f"{condition}/{other}"] = scores
                _, genuine, impostor = enrollment_trials(inside, enroll_samples, **options)
                if genuine:
                    kept = [
                        scores[np.asarray(seconds[condition][p])[enroll_samples:] >= min_seconds]
                        for p, scores in genuine.items()
                    ]
                    test[condition] = np.concatenate(list(impostor.values()))
                    long_enough[condition] = np.concatenate(kept)
        except ValueError:
            continue
        if not fit or not test:
            continue
        try:
            fitted = table_from_scores(
                "prototype", fit, people=2, enroll_samples=enroll_samples, score=table.score,
                grid=fars, each_chain=fit_chains or None,
            )  # fmt: skip
        except ValueError:  # the other chains resolve no FAR of the table
            continue
        folds += 1
        impostors = np.concatenate(list(test.values()))
        genuine_long = np.concatenate(list(long_enough.values()))
        for row in fitted.rows:
            accepts = int(np.count_nonzero(impostors >= row.threshold))
            rejects = int(np.count_nonzero(genuine_long < row.threshold))
            counts = pooled[row.far]
            counts[0] += accepts
            counts[1] += impostors.size
            counts[2] += rejects
            counts[3] += genuine_long.size
            per_chain[row.far].append((
                accepts / impostors.size if impostors.size else None,
                rejects / genuine_long.size if genuine_long.size else None,
            ))  # fmt: skip
    rows = []
    for far in fars:
        accepts, impostors, rejects, genuine = pooled[far]
        fars_seen = [f for f, _ in per_chain[far] if f is not None]
        frrs_seen = [r for _, r in per_chain[far] if r is not None]
        if len(per_chain[far]) < 2 or not impostors or not genuine:
            continue
        rows.append(HeldOutRow(far, accepts, impostors, min(fars_seen), max(fars_seen),
                               rejects, genuine, min(frrs_seen), max(frrs_seen)))  # fmt: skip
    if not rows or folds < 2:
        return None
    return HeldOut(folds, float(min_seconds), tuple(rows))


def _codeword_table(
    conditions: Mapping[str, Mapping[str, np.ndarray]], generator: np.ndarray, seed: int
) -> Table:
    from .codeword import bipolar, encode

    rng = np.random.default_rng(seed)
    people = max(sum(1 for v in vectors.values() if len(v)) for vectors in conditions.values())
    messages = rng.integers(
        0, 2, size=(people * CODEWORDS_PER_PERSON, generator.shape[0]), dtype=np.uint8
    )
    codewords = np.stack([bipolar(encode(m, generator)) for m in messages])
    trials = {}
    for condition, vectors in conditions.items():
        outputs = np.concatenate([v for v in vectors.values() if len(v)])
        trials[condition] = (np.zeros(0), codeword_scores(codewords, outputs))
    return table_from_scores("codeword", trials, people=people, enroll_samples=0, score="codeword")
