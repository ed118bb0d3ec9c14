"""Measuring a calibration (:class:`uvsdk.calibration.Calibration`) from a bundle's vectors of
real people: each person enrolled exactly as the SDK enrolls, their other samples genuine trials
and the other people's (of their recording chain) impostor trials, under every recording
condition; each FAR's threshold the worst condition's (:func:`measure`); and, with several
recording chains, what the rows do on a chain they were not fitted on (:func:`held_out_figures`).
The exporter runs it (``uvexport calibrate``); a device only reads the result.
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
from .cohort import Cohort
from .scoring import codeword_scores, cosine_scores, leave_one_out_scores, prototype


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
) -> Table:
    """A table from each condition's ``(genuine, impostor)`` trial scores: for each FAR that
    every condition's trials resolve, the smallest threshold that accepts at most ``far`` of
    the impostor trials in **every** condition (the worst condition decides); the false accepts
    and the FRR there are pooled over the conditions."""
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
    users are not).
    """
    names = [name for name, v in vectors.items() if len(v)]
    everyone = np.concatenate([np.asarray(vectors[name]) for name in names])
    owners = np.repeat(np.array(names, dtype=object), [len(vectors[name]) for name in names])
    chain_of = None if groups is None else np.array([groups[o] for o in owners], dtype=object)
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
        reference = prototype(enrolled)
        warmup[name] = leave_one_out_scores(enrolled)
        genuine[name] = cosine_scores(reference, tests)
        impostor[name] = cosine_scores(reference, others)
        if cohort is not None:

            def exclude(test_owners: np.ndarray | None, person: str = name) -> np.ndarray | None:
                if cohort_people is None:
                    return None
                mask = np.asarray(cohort_people == person)[None, :]
                if test_owners is not None:
                    mask = mask | (cohort_people[None, :] == test_owners[:, None])
                return mask

            enrolled_stats = cohort.statistics(reference[None], exclude(None))
            warmup[name] = normalised_leave_one_out(enrolled, cohort, exclude(None))
            genuine[name] = cohort.rule.normalise(
                genuine[name], enrolled_stats, cohort.statistics(tests, exclude(None))
            )
            impostor[name] = cohort.rule.normalise(
                impostor[name], enrolled_stats, cohort.statistics(others, exclude(other_owners))
            )
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
    of several people, the prototype table carries its :func:`held_out_figures`.
    """
    trials, people = {}, set()
    for condition, vectors in conditions.items():
        _, genuine, impostor = enrollment_trials(
            vectors, enroll_samples, cohort=cohort, cohort_people=cohort_people, groups=groups
        )
        if len(genuine) < 2:
            raise ValueError(
                f"calibration needs at least 2 people with more than {enroll_samples} usable "
                f"samples in each condition; {len(genuine)} have in {condition}"
            )
        people |= set(genuine)
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
) -> HeldOut | None:
    """Leave-one-chain-out figures of ``table``'s rows: for each recording chain with several
    people, the thresholds are fitted as :func:`measure` fits them on the other chains alone
    (their cohort vectors only), then applied to the held-out chain: its impostor pairs (within
    the chain) give the FAR, its genuine clips of at least ``min_seconds`` the FRR. The chain's
    vectors leave the cohort for its fold (AS-norm's ``top_k`` then at most half of what is
    left, as :func:`uvexport.calibrate.calibrate_vectors` chooses it). Counts are pooled over the
    chains; the range is the lowest and highest single chain; a chain whose fold leaves too
    small a cohort to normalise is skipped. ``None`` when fewer than two chains can be held out
    (nothing to hold out)."""
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
                                   "groups": groups}  # fmt: skip
        if cohort is not None and cohort_people is not None:  # the chain is in no cohort
            keep = np.array([groups.get(p) != chain for p in cohort_people], dtype=bool)
            options["cohort_people"] = cohort_people[keep]
            options["cohort"] = Cohort(
                cohort.vectors[keep], max(2, min(cohort.top_k, int(keep.sum()) // 2)), cohort.method
            )
        fit, test, long_enough = {}, {}, {}
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
                grid=fars,
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
