"""Does taking each recording chain's mean embedding out make the stated FAR hold on a chain the
calibration never saw?

People recorded on one chain (one studio, one app, one kind of device) share a component of
their embeddings that is not their voice, so strangers on the chain score alike: the reason the
stated 1 % became 35 % on Flight of the Amazon Queen (docs/model-card.md). A deployment can learn
its chain's mean without labels and without any person's embedding leaving a device (a sum under
secure aggregation). This measures what subtracting it would buy, before anything is built.

The protocol is ``far_rules.py``'s (the same leave-one-source-out folds, cohort, enrollment and
rules ``global`` and ``chain``, and the ``oracle`` bound), in three arms on the same people:

- ``as shipped``: ``far_rules.py``'s rows exactly (its functions, no centring);
- ``centred``: the calibration is ``uvexport calibrate --centre``'s
  (:func:`uvexport.calibrate.calibrate_vectors` with each source a recording chain: every
  calibration trial centred by its chain's mean without its people,
  :mod:`uvsdk.measurement`), and on the held-out source every vector is unit-normalised, has
  a mean subtracted and is normalised again (docs/spec.md §6.8). **No held-out trial is
  scored with a mean that holds either of its two people** (leave-two-out): each pair of
  people of the source and condition is scored with the mean of that source's *other* people
  in that condition (its unit vectors' mean), both the template's and the test clip's vectors
  centred by it; a person's genuine trials are scored in their pair with the next person by
  name. This is a deployment whose mean ``uvexport centre`` took from its own people. A real
  deployment's mean would come from many more people than a source holds here (4-23):
  ``--centre-people N`` takes the held-out side's mean from at most N of the other people (a
  draw seeded by ``--draw-seed``), to see how the figures move with the people behind the mean.
  ``--centre-devices N`` scores instead with the mean a federation of N devices would release
  (``uvtrain deploy local --centre-bundle``, :mod:`uvdeploy.centre`): each person weighs the
  same (one device each), plus one draw (seeded by ``--draw-seed``) per fold and condition of
  the noise its DP adds at ``--centre-epsilon`` (the run's own plan: one release, every device
  once, C = 1; shares calibrated to SecAgg+'s default m_min = max(N/2, 3), so with every device
  summed the noise is z·√(N/m_min)/N per entry). The other people of the held-out source stand
  for the devices' exact mean; only the noise is the N devices';
- ``calibration's mean``: the same calibration, the held-out source centred by the mean the
  calibrated bundle ships (every calibration vector's): the bundle before ``uvexport centre``.

``--score-norm`` sets the score rule of both arms (``uvexport calibrate``'s choices; the
shipped AS-norm by default).

Prints both arms' pooled rows (FAR, FRR, FRR on clips >= 2 s, fold-conditions within 2 x of the
stated FAR, worst ratio, owners with >= 95 % of their clips accepted), ``--detail`` every fold
and condition; writes ``report.json`` and ``centring.png`` (FRR on clips >= 2 s against the
worst ratio, per arm and rule) under ``--out``.

    python benchmarks/far_centring.py --speakers real-speech/speakers --out eval-centring/ \\
        [--bundle BUNDLE.uvb] [--cache emb.npz] [--conditions clean,telephone-gsm] \\
        [--score-norm as-norm|s-norm|none] [--centre-people N | --centre-devices N \\
        [--centre-epsilon E]] [--draw-seed S] [--detail]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
from far_generalisation import (
    LONG_CLIP_SECONDS,
    argument_parser,
    chains,
    embed,
    source_folds,
    split,
)
from far_rules import (
    Thresholds,
    Trials,
    calibrated_fold,
    condition_trials,
    fit_chain,
    fit_global,
    fold_done,
    oracle_row,
    pooled,
    print_detail,
    print_summary,
    rule_rows,
)

from uvexport.calibrate import (
    DEFAULT_COHORT_SIZE,
    DEFAULT_SCORE_NORM,
    SCORE_NORM_CHOICES,
    Calibrated,
    build_cohort,
    calibrate_vectors,
    centred_by_chain,
)
from uvsdk import Bundle
from uvsdk.calibration import DEFAULT_ENROLL_SAMPLES, MIN_FALSE_ACCEPTS
from uvsdk.cohort import Cohort
from uvsdk.verifier import default_bundle_path

ARMS = ("as shipped", "centred", "calibration's mean")
COUNTED = (
    "impostor",
    "genuine",
    "false_accepts",
    "false_rejects",
    "long_genuine",
    "long_false_rejects",
)
"""The counts of a row (:func:`far_rules.rule_row`'s), summed over pairs."""
RULES = ("global", "chain", "each chain")
"""The rules of the centred arms: ``far_rules.py``'s ``global`` and ``chain``, and ``each
chain``, the product's: every user's threshold from a table built with ``uvexport calibrate
--each-chain`` (each row's threshold the worst chain's among those that resolve its FAR, and
never below a laxer row's, :func:`uvsdk.measurement.table_from_scores`). The ``as shipped`` arm
has the first two (``far_rules.py``'s rows)."""

Vectors = Mapping[str, np.ndarray]
Centre = Callable[[tuple[str, str]], np.ndarray]
"""The mean a pair of people is scored with."""


def unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float64)
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


def centred(vectors: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """``vectors`` unit-normalised, ``mean`` taken out, normalised again (float32, as embedded)."""
    return unit(unit(vectors) - mean).astype(np.float32)


def mean_of(by_person: Vectors, names: list[str]) -> np.ndarray:
    """The mean of the unit vectors of ``names`` (each clip weighs the same)."""
    return np.concatenate([unit(by_person[name]) for name in names if len(by_person[name])]).mean(0)


def person_mean(by_person: Vectors, names: list[str]) -> np.ndarray:
    """The mean over ``names`` of each person's mean unit vector (each person weighs the same:
    a federation's devices, :meth:`uvdeploy.device.Device.chain_vector`)."""
    return np.mean([unit(by_person[name]).mean(0) for name in names if len(by_person[name])], 0)


def release_noise_std(devices: int, epsilon: float) -> float:
    """The std of each entry of the noise on the mean ``devices`` devices release at
    ``epsilon``: the federation's own plan and noise (:mod:`uvdeploy.centre`: one release, every
    device once, ``C`` = 1, the default ``δ`` and SecAgg+'s default ``m_min``), all ``N`` summed,
    divided by ``N``."""
    from uvdeploy.centre import noise_norm, single_release
    from uvdeploy.dp import min_survivors, plan
    from uvdeploy.settings import DeploySettings

    values = {"method": "fedhide", "centre_bundle": "-", "dp_epsilon": epsilon}
    settings = single_release(DeploySettings.from_run_config(values))
    planned = plan(settings, devices)
    assert planned is not None
    std = planned.noise_multiplier * planned.clip_norm
    return noise_norm(std, devices, min_survivors(settings, devices), 1)


def others_mean(by_person: Vectors, pool: Vectors | None = None) -> Centre:
    """Leave-two-out: a pair is scored with the mean of every other person of ``by_person``
    (``pool``: of ``pool`` instead, a wider set the pair is also left out of)."""
    pool = by_person if pool is None else pool

    def centre(pair: tuple[str, str]) -> np.ndarray:
        return mean_of(pool, [name for name in pool if name not in pair])

    return centre


def pair_trials(
    by_person: Vectors,
    seconds: Vectors,
    enroll: int,
    cohort: Cohort | None,
    centre: Centre,
    cohort_people: np.ndarray | None = None,
) -> list[tuple[Trials, set[str]]]:
    """One condition's trials, pair by pair: each unordered pair of enrolled people scored with
    both their vectors centred by ``centre(pair)`` (both directions of impostor trials, and the
    genuine trials of each person whose partner is the pair's other: the next person by name).
    Each element is one pair's :class:`far_rules.Trials`, consistent in itself (its warm-up
    scores under its mean), with the people whose genuine trials it holds. A person alone in
    ``by_person`` has no pair, so no trials: a calibration source of one person adds no genuine
    trials to the centred table (``uvexport calibrate``'s table holds them)."""
    names = sorted(name for name, vectors in by_person.items() if len(vectors) > enroll)
    partner = {name: names[(i + 1) % len(names)] for i, name in enumerate(names)}
    out = []
    for pair in itertools.combinations(names, 2):
        mean = centre(pair)
        vectors = {name: centred(by_person[name], mean) for name in pair}
        trials = condition_trials(vectors, seconds, enroll, cohort, cohort_people)
        assert trials is not None
        keep = {name for name in pair if partner[name] in pair}
        mine = np.isin(trials.owners, list(keep))
        trials = dataclasses.replace(
            trials,
            genuine=trials.genuine[mine],
            genuine_seconds=trials.genuine_seconds[mine],
            owners=trials.owners[mine],
        )
        out.append((trials, keep))
    return out


def joined(parts: list[tuple[Trials, set[str]]]) -> Trials:
    """The pairs' trials as one (their warm-up scores differ pair to pair: dropped)."""

    def joined_field(name: str) -> np.ndarray:
        return np.concatenate([getattr(trials, name) for trials, _ in parts])

    arrays = [f.name for f in dataclasses.fields(Trials) if f.name != "warmup"]
    return Trials(warmup={}, **{name: joined_field(name) for name in arrays})


def centred_calibration(
    vectors: Mapping[str, Vectors],
    seconds: Mapping[str, Vectors],
    rest: set[str],
    impostors: str,
    score_norm: str = DEFAULT_SCORE_NORM,
) -> tuple[Calibrated, dict[str, Trials]]:
    """The centred arm's calibration: ``uvexport calibrate --centre``'s
    (:func:`uvexport.calibrate.calibrate_vectors` with each source as a recording chain: its
    table of leave-two-out centred scores, its cohort centred by each chain's whole mean, its
    mean of every calibration vector), and its trials per condition centred the same way (for
    the ``chain`` rule)."""
    sources = chains(rest, "chain")
    assert sources is not None
    calibrated = calibrate_vectors(
        vectors, data="centred", groups=chains(rest, impostors), score_norm=score_norm,
        centre=sources,
    )  # fmt: skip
    cohort = calibrated.normaliser()
    table = calibrated.calibration.tables["prototype"]
    cohort_people = None
    if cohort is not None:
        usable = {c: centred_by_chain(vectors[c], sources) for c in table.conditions}
        _, cohort_people = build_cohort(usable, DEFAULT_COHORT_SIZE)
    trials = {
        condition: condition_trials(
            vectors[condition],
            seconds[condition],
            DEFAULT_ENROLL_SAMPLES,
            cohort,
            cohort_people,
            centre=sources,
        )
        for condition in table.conditions
    }
    return calibrated, {c: t for c, t in trials.items() if t is not None}


def centred_rows(
    parts: list[tuple[Trials, set[str]]], thresholds: Thresholds, stated_far: float, condition: str
) -> dict:
    """A rule's row on one held-out condition, as :func:`far_rules.rule_row` counts it, summed
    over the pairs (each pair judged under its own mean and warm-up scores; each owner's
    acceptance from the pair that holds their genuine trials)."""
    counts = dict.fromkeys(COUNTED, 0)
    acceptance = []
    for trials, keep in parts:
        genuine_threshold, impostor_threshold = thresholds(trials)
        rejected = trials.genuine < genuine_threshold
        long = trials.genuine_seconds >= LONG_CLIP_SECONDS
        counts["impostor"] += trials.impostor.size
        counts["genuine"] += trials.genuine.size
        counts["false_accepts"] += int(np.sum(trials.impostor >= impostor_threshold))
        counts["false_rejects"] += int(rejected.sum())
        counts["long_genuine"] += int(long.sum())
        counts["long_false_rejects"] += int(rejected[long].sum())
        acceptance += [float(np.mean(~rejected[trials.owners == p])) for p in sorted(keep)]
    observed = counts["false_accepts"] / counts["impostor"]
    return {
        "condition": condition,
        **counts,
        "observed_far": observed,
        "ratio": observed / stated_far,
        "resolvable": stated_far * counts["impostor"] >= MIN_FALSE_ACCEPTS,
        "owner_acceptance": acceptance,
    }


def shipped_fold(
    vectors: dict, seconds: dict, held_out: set[str], args: argparse.Namespace
) -> dict[str, list[dict]]:
    """The ``as shipped`` arm: ``far_rules.py``'s rows of this fold (rules, then the oracle)."""
    calibrated, calibration, test = calibrated_fold(
        vectors, seconds, held_out, args, args.score_norm
    )
    stated = calibrated.calibration.tables["prototype"].row_for(args.far).far
    rules = {"global": fit_global(calibrated, args.far)}
    rules["chain"] = fit_chain(calibration, calibrated, args.far)
    return rule_rows(test, rules, stated, args.far)


def centred_fold(
    vectors: dict,
    seconds: dict,
    rest: set[str],
    held_out: set[str],
    args: argparse.Namespace,
    rng: np.random.Generator,
) -> dict[str, dict[str, list[dict]]]:
    """The centred arms' rows of this fold, one calibration (``uvexport calibrate --centre``'s)
    behind both: ``centred``, the held-out chain's trials leave-two-out centred by its own
    people's mean (``args.centre_people``: from at most that many others), what ``uvexport
    centre`` sets; and ``calibration's mean``, centred by the mean the calibrated bundle ships
    (the bundle before ``uvexport centre``)."""
    calibrated, calibration = centred_calibration(
        split(vectors, rest), seconds, rest, args.impostors, args.score_norm
    )
    assert calibrated.centre is not None
    sources = chains(rest, "chain")
    each = calibrate_vectors(
        split(vectors, rest), data="centred, each chain", groups=chains(rest, args.impostors),
        score_norm=args.score_norm, centre=sources, each_chain=args.impostors == "chain",
    )  # fmt: skip
    shipped = np.frombuffer(calibrated.centre, "<f4").astype(np.float64)
    stated = calibrated.calibration.tables["prototype"].row_for(args.far).far
    fitted = (fit_global(calibrated, args.far), fit_chain(calibration, calibrated, args.far))
    rules = dict(zip(RULES, (*fitted, fit_global(each, args.far)), strict=True))
    cohort = calibrated.normaliser()
    arms: dict[str, dict[str, list[dict]]] = {
        arm: {name: [] for name in (*rules, "oracle")} for arm in ARMS[1:]
    }
    for condition, by_person in split(vectors, held_out).items():
        everyone = others_mean(by_person)

        noise = 0.0
        if args.centre_devices:
            std = release_noise_std(args.centre_devices, args.centre_epsilon)
            noise = rng.normal(0.0, std, size=next(iter(by_person.values())).shape[-1])

        def own(
            pair: tuple[str, str], everyone: Centre = everyone, by=by_person, noise=noise
        ) -> np.ndarray:
            if args.centre_devices:
                return person_mean(by, [name for name in by if name not in pair]) + noise
            if not args.centre_people:
                return everyone(pair)
            others = sorted(name for name in by if name not in pair and len(by[name]))
            drawn = rng.choice(others, min(args.centre_people, len(others)), replace=False)
            return mean_of(by, sorted(drawn))

        for arm, centre in zip(ARMS[1:], (own, lambda pair: shipped), strict=True):
            parts = pair_trials(by_person, seconds[condition], args.enroll, cohort, centre)
            if not parts:
                continue
            rows = arms[arm]
            for name, thresholds in rules.items():
                rows[name].append(centred_rows(parts, thresholds, stated, condition))
            rows["oracle"].append({"condition": condition, **oracle_row(joined(parts), args.far)})
    return arms


def plot(report: dict, out: Path) -> None:
    """``centring.png``: FRR on clips >= 2 s against the worst FAR ratio, per arm and rule."""
    from matplotlib.figure import Figure

    from uvtrain.io import save_figure

    figure = Figure(figsize=(6.4, 4.5))
    axis = figure.add_subplot()
    for arm, marker in zip(ARMS, "os^", strict=True):
        for rule in [name for name in report["summary"][arm] if name != "oracle"]:
            summary = report["summary"][arm][rule]
            worst = summary["worst_ratio"]
            axis.scatter(
                math.nan if worst is None else worst,
                summary["frr_long"],
                marker=marker,
                s=50,
                label=f"{arm}, {rule}",
            )
        oracle = report["summary"][arm]["oracle"]["frr_long"]
        axis.axhline(
            oracle, ls=":", lw=1, color={ARMS[0]: "grey", ARMS[1]: "k"}.get(arm, "tab:red")
        )
    axis.axvline(2, color="k", lw=1, ls="--", label="target: ratio <= 2")
    axis.axhline(0.05, color="k", lw=1, label="target: FRR <= 5 %")
    axis.set_xscale("log")
    ticks = [1, 2, 5, 10, 20, 50, 100]
    axis.set_xticks(ticks, [f"{tick}x" for tick in ticks])
    axis.set_xticks([], minor=True)
    axis.set_xlabel("worst observed / stated FAR over resolvable fold-conditions")
    axis.set_ylabel(f"FRR on clips >= {LONG_CLIP_SECONDS:g} s (pooled; dotted: the oracle)")
    axis.set_title(
        f"each chain's mean taken out, leave-one-source-out, --far {report['far']:g}, "
        f"--score-norm {report['score_norm']}",
        fontsize=10,
    )
    axis.legend(fontsize=8)
    save_figure(figure, out / "centring.png")


def main() -> int:
    parser = argument_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--detail", action="store_true", help="print every fold and condition")
    parser.add_argument(
        "--centre-people",
        type=int,
        default=0,
        help="the held-out side's mean from at most this many of the other people (0: all)",
    )
    parser.add_argument(
        "--draw-seed", type=int, default=0, help="the seed of --centre-people's draws"
    )
    parser.add_argument(
        "--centre-devices",
        type=int,
        default=0,
        help="the held-out side's mean as a federation of this many devices releases it "
        "(each person weighing the same, with its DP noise at --centre-epsilon)",
    )
    parser.add_argument(
        "--centre-epsilon", type=float, default=8.0, help="the DP ε of --centre-devices"
    )
    parser.add_argument(
        "--score-norm",
        choices=SCORE_NORM_CHOICES,
        default=DEFAULT_SCORE_NORM,
        help="the score rule in both arms, as uvexport calibrate --score-norm (default: the "
        "shipped AS-norm; none: raw cosines)",
    )
    args = parser.parse_args()
    if args.centre_people < 0:
        parser.error(f"--centre-people must be 0 or more, not {args.centre_people}")
    if args.centre_devices and (args.centre_people or args.centre_devices < 3):
        parser.error("--centre-devices takes 3 or more, without --centre-people")
    if not args.centre_epsilon > 0:
        parser.error(f"--centre-epsilon must be positive, not {args.centre_epsilon}")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    vectors, seconds = embed(args, Bundle(args.bundle or default_bundle_path()))
    people, sources, folds = source_folds(vectors)
    report: dict = {"far": args.far, "enroll": args.enroll, "folds": []}
    report["centre_people"] = args.centre_people or "all"
    report["draw_seed"] = args.draw_seed
    if args.centre_devices:
        report["centre_devices"] = args.centre_devices
        report["centre_epsilon"] = args.centre_epsilon
        report["centre_noise_std"] = release_noise_std(args.centre_devices, args.centre_epsilon)
    report["score_norm"] = args.score_norm
    rng = np.random.default_rng(args.draw_seed)
    for number, fold in enumerate(folds, 1):
        rest = set(people) - sources[fold]
        arms = {
            ARMS[0]: shipped_fold(vectors, seconds, sources[fold], args),
            **centred_fold(vectors, seconds, rest, sources[fold], args, rng),
        }
        report["folds"].append({"source": fold, "arms": arms})
        if args.detail:
            for arm, rows in arms.items():
                print(f"-- {arm}")
                print_detail(fold, rows)
        fold_done(number, folds, started)
    print(file=sys.stderr)
    report["summary"] = {
        arm: {
            name: pooled([row for fold in report["folds"] for row in fold["arms"][arm][name]])
            for name in report["folds"][0]["arms"][arm]
        }
        for arm in ARMS
    }
    print(f"rule      FAR     FRR   FRR>=2s  <=2x    worst  owner>=95% (median)  --far {args.far}")
    for arm in ARMS:
        print(f"-- {arm}")
        for name, summary in report["summary"][arm].items():
            print_summary(name, summary)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(report, args.out)
    print(f"wrote {args.out / 'report.json'}, centring.png ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
