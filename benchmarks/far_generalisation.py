"""Does the FAR a bundle states hold where it was not calibrated? Leave-one-source-out, under
every simulated recording condition.

The speakers come from several sources (``uvtrain data real-speech`` writes one folder per
speaker, named ``<source>-<speaker>``). Each source with at least :data:`MIN_FOLD_SPEAKERS`
speakers is a fold in turn: the bundle is calibrated on **every other source** exactly as
``uvexport calibrate`` calibrates (:func:`uvexport.calibrate.calibrate_vectors`: its cohort,
AS-norm, the worst condition deciding; its impostor trials pairs of people of one source, as
``uvexport calibrate --impostors chain``, or every pair with ``--impostors all``), and tested on
the held-out source, which neither the thresholds nor the cohort have seen. Smaller sources are
only ever calibrated on (they are named).

Every clip is embedded once per condition (:func:`uvexport.calibrate.embed_conditions`: decoded as
the SDK decodes, turned into each condition of :mod:`uvexport.conditions`, ``long`` utterances
joined from a speaker's consecutive clips, embedded by ``uvsdk.Verifier.embed``). In the test
source, in each condition, each speaker is enrolled on their first ``--enroll`` vectors with the
SDK's own rule (:func:`uvsdk.calibration.user_threshold` on AS-norm scores against the fold's
cohort); their other vectors are genuine trials, every vector of every other test speaker an
impostor trial. Those impostor trials are all **within-source** pairs (a fold is one source: the
same recording chain, and mostly the same language and delivery), the strangers an app meets;
``impostor``, ``observed_far`` and ``ratio`` are theirs. Beside them, per impostor class
(:data:`IMPOSTOR_CLASSES`, each with its trials and its (template, impostor) person pairs):

- ``within_source``: the same trials again, with the FAR on test clips of at least 2 s;
- ``within_source_same_gender``: those pairs whose two people have the same known gender
  (``--genders``; by default the real-speech labels, :func:`uvtrain.data.real_speech.folder_labels`;
  a person labelled ``unknown`` is in no same-gender pair);
- ``cross_source``: the held-out templates against every clip of the **other** sources' people.
  Those people are the fold's calibration people: the thresholds were set on them and they are
  in the cohort (each clip is normalised without its own person's cohort vectors, as calibration
  scores them), so this class is in-sample on the impostor side: the easy pairs, told apart by
  their channel, that the calibration table's FAR is stated on today.

Printed for every fold and condition, and pooled:

- the stated FAR (the row the SDK uses for ``--far``) and the observed (within-source) FAR on the
  held-out source, and their ratio (the target: at most 2); the FAR of each impostor class;
- the FRR, and the FRR on test clips of at least 2 s (target: at most 5 %);
- the EER of the normalised and of the raw cosine scores (no threshold);
- the rule before AS-norm (raw cosines, calibrated on clean clips only, the threshold
  ``max(warm-up, calibrated)``): its FAR and FRR, for comparison.

Writes ``report.json``, ``far.png`` (observed against stated FAR per fold and condition) and
``frr.png`` under ``--out``; ``--cache FILE.npz`` keeps the embeddings for the next run.

    python benchmarks/far_generalisation.py --speakers real-speech/speakers --out eval/ \\
        [--bundle BUNDLE.uvb] [--conditions clean,telephone-gsm,long] [--cache emb.npz] \\
        [--genders genders.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from uvexport.calibrate import (
    DEFAULT_COHORT_SIZE,
    DEFAULT_CONDITIONS,
    DEFAULT_TOP_K,
    MAX_SAMPLES_PER_PERSON,
    Embedded,
    audio_conditions,
    calibrate_vectors,
    embed_conditions,
    people_folders,
    print_progress,
)
from uvexport.fuse import join
from uvsdk import Bundle
from uvsdk.calibration import DEFAULT_FAR, user_threshold
from uvsdk.cohort import Cohort, as_norm
from uvsdk.measurement import enrollment_trials
from uvsdk.scoring import cosine_scores, prototype, warmup_threshold
from uvsdk.verifier import default_bundle_path
from uvtrain.evaluation import equal_error_rate

MIN_FOLD_SPEAKERS = 3
"""A source is a fold when it has at least this many speakers (impostor pairs need several)."""
LONG_CLIP_SECONDS = 2.0
"""The FRR target is stated on test clips of at least this long."""
TARGET_TPR = 0.95
IMPOSTOR_CLASSES = ("within_source", "within_source_same_gender", "cross_source")
"""The impostor pairs counted apart: a template and an impostor's clips of the same source, of the
same source and the same known gender, and of two sources (see the module's docstring)."""
IMPOSTOR_CLASS_TEXT = {
    "within_source": "template and impostor clips from the held-out source (one recording "
    "chain): the trials of 'impostor' and 'observed_far'",
    "within_source_same_gender": "within-source pairs whose two people have the same known "
    "gender (female, male or child; 'unknown' pairs with nobody)",
    "cross_source": "held-out templates against every clip of the other sources' people: the "
    "fold's calibration people, whom the thresholds and the cohort have seen (each clip "
    "normalised without its own person's cohort vectors)",
}
KNOWN_GENDERS = ("female", "male", "child")
COUNT_KEYS = ("trials", "false_accepts", "long_trials", "long_false_accepts")
"""Per (template, impostor) pair: its impostor trials and false accepts, on all test clips and
on those of at least :data:`LONG_CLIP_SECONDS`."""


def source_of(person: str) -> str:
    """The source of a ``<source>-<speaker>`` folder name."""
    return person.split("-", 1)[0]


def source_folds(vectors: Mapping[str, Mapping[str, np.ndarray]]):
    """Every person (sorted), each source's people, and the folds: the sources of at least
    :data:`MIN_FOLD_SPEAKERS` people, each held out in turn."""
    people = sorted({person for by_person in vectors.values() for person in by_person})
    sources: dict[str, set[str]] = {}
    for person in people:
        sources.setdefault(source_of(person), set()).add(person)
    folds = [s for s, members in sources.items() if len(members) >= MIN_FOLD_SPEAKERS]
    return people, sources, folds


def chains(people: set[str] | list[str], impostors: str = "chain") -> dict[str, str] | None:
    """Each person's recording chain, their source: the impostor groups ``uvexport calibrate``
    forms in the real-speech folder (:func:`uvexport.calibrate.recording_chains`); ``None``
    for ``--impostors all``."""
    return {person: source_of(person) for person in people} if impostors == "chain" else None


def pair_classes(enrolled: str, impostor: str, genders: Mapping[str, str]) -> tuple[str, ...]:
    """The :data:`IMPOSTOR_CLASSES` that the trials of ``enrolled``'s template against
    ``impostor``'s clips belong to (``genders``: person -> gender; a missing one is unknown)."""
    if source_of(enrolled) != source_of(impostor):
        return ("cross_source",)
    gender = genders.get(enrolled, "unknown")
    if gender in KNOWN_GENDERS and genders.get(impostor, "unknown") == gender:
        return ("within_source", "within_source_same_gender")
    return ("within_source",)


def class_counts(
    pairs: Mapping[tuple[str, str], Mapping[str, int]], genders: Mapping[str, str], stated: float
) -> dict[str, dict]:
    """Per impostor class: its pairs, its :data:`COUNT_KEYS` summed over them, ``far`` and
    ``far_long`` (``None`` without trials), and ``resolvable`` (at least 10 false accepts
    expected at the ``stated`` FAR). ``pairs``: (template's person, impostor) -> counts."""
    out = {name: dict.fromkeys(("pairs", *COUNT_KEYS), 0) for name in IMPOSTOR_CLASSES}
    for (enrolled, impostor), counts in pairs.items():
        for name in pair_classes(enrolled, impostor, genders):
            out[name]["pairs"] += 1
            for key in COUNT_KEYS:
                out[name][key] += int(counts[key])
    for entry in out.values():
        entry["far"] = entry["false_accepts"] / entry["trials"] if entry["trials"] else None
        entry["far_long"] = (
            entry["long_false_accepts"] / entry["long_trials"] if entry["long_trials"] else None
        )
        entry["resolvable"] = stated * entry["trials"] >= 10
    return out


def pair_counts(
    scores: np.ndarray, owners: np.ndarray, long: np.ndarray, threshold: float
) -> dict[str, dict[str, int]]:
    """One template's impostor ``scores``, split by the person each trial's clip is of
    (``owners``): per impostor, its :data:`COUNT_KEYS` at ``threshold`` (``long``: the clip is
    at least :data:`LONG_CLIP_SECONDS`)."""
    accepted = np.asarray(scores) >= threshold
    counts = {}
    for impostor in dict.fromkeys(owners.tolist()):
        mine = owners == impostor
        counts[impostor] = {
            "trials": int(mine.sum()),
            "false_accepts": int((accepted & mine).sum()),
            "long_trials": int((long & mine).sum()),
            "long_false_accepts": int((accepted & long & mine).sum()),
        }
    return counts


def trial_owners(by_person: Mapping[str, np.ndarray], person: str) -> np.ndarray:
    """Whose clip each of ``person``'s impostor trials is, in the order of
    :func:`uvsdk.measurement.enrollment_trials` (every other person's vectors, in turn)."""
    names = [name for name, vectors in by_person.items() if len(vectors) and name != person]
    return np.repeat(np.array(names, dtype=object), [len(by_person[name]) for name in names])


def long_clips(seconds: Mapping[str, np.ndarray], owners: np.ndarray) -> np.ndarray:
    """Whether each clip of ``owners`` (every vector of each person in turn, as
    :func:`trial_owners` orders them) lasts at least :data:`LONG_CLIP_SECONDS`."""
    lengths = [np.asarray(seconds[name]) for name in dict.fromkeys(owners.tolist())]
    return np.concatenate(lengths or [np.zeros(0)]) >= LONG_CLIP_SECONDS


def cohort_owners(calibrated, calibration_vectors: Mapping[str, Mapping[str, np.ndarray]]):
    """The person of each cohort vector of ``calibrated`` (the cohort is drawn from the
    calibration vectors; each is found by its bytes), or ``None`` without a cohort."""
    if calibrated.cohort is None:
        return None
    owner_of = {
        np.asarray(vector, dtype="<f4").tobytes(): person
        for by_person in calibration_vectors.values()
        for person, vectors in by_person.items()
        for vector in np.asarray(vectors)
    }
    rows = np.frombuffer(calibrated.cohort, "<f4").reshape(calibrated.cohort_spec.count, -1)
    owners = [owner_of.get(row.tobytes()) for row in rows]
    if any(owner is None for owner in owners):
        raise RuntimeError("a cohort vector is none of the calibration vectors")
    return np.array(owners, dtype=object)


def cross_source_trials(
    test_by_person: Mapping[str, np.ndarray],
    other_by_person: Mapping[str, np.ndarray],
    enroll: int,
    cohort: Cohort | None,
    cohort_people: np.ndarray | None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Each test person's template (their first ``enroll`` vectors, as
    :func:`uvsdk.measurement.enrollment_trials` enrolls them) scored against every vector of the
    other sources' people, AS-norm normalised as ``enrollment_trials`` normalises calibration
    people: the tested clip's statistics leave out its own person's cohort vectors. Returns the
    scores per test person and the owner of each scored vector."""
    names = [name for name, vectors in other_by_person.items() if len(vectors)]
    if not names:
        return {}, np.zeros(0, dtype=object)
    others = np.concatenate([np.asarray(other_by_person[name]) for name in names])
    owners = np.repeat(np.array(names, dtype=object), [len(other_by_person[n]) for n in names])
    tested = None
    if cohort is not None:
        exclude = None
        if cohort_people is not None:
            exclude = cohort_people[None, :] == owners[:, None]
        tested = cohort.statistics(others, exclude)
    scores = {}
    for person, vectors in test_by_person.items():
        if len(vectors) <= enroll:
            continue
        reference = prototype(np.asarray(vectors)[:enroll])
        raw = cosine_scores(reference, others)
        if cohort is None:
            scores[person] = raw
        else:
            scores[person] = as_norm(raw, cohort.statistics(reference[None]), tested)
    return scores, owners


def embed(args: argparse.Namespace, bundle: Bundle) -> tuple[dict, dict]:
    """``vectors[condition][person]`` and ``seconds[condition][person]`` (``--cache`` keeps
    them: the same cache ``uvexport calibrate --cache`` reads and writes). With ``--fuse``, each
    vector is the bundle's and the second bundle's of the same clip fused (:func:`fuse`)."""
    conditions = audio_conditions(args.conditions.split(",")) if args.conditions else None

    def vectors_of(model: Bundle, cache: str | None, label: str) -> Embedded:
        embedded = embed_conditions(
            model,
            people_folders(args.speakers),
            conditions or DEFAULT_CONDITIONS,
            max_samples=args.max_samples,
            progress=print_progress,
            label=label,
            cache=cache,
        )
        print(file=sys.stderr)
        return embedded

    first = vectors_of(bundle, args.cache, "embedding")
    if not args.fuse:
        return first.vectors, first.seconds
    if not 0 < args.fuse_weight < 1:
        raise SystemExit(f"--fuse-weight must be between 0 and 1, not {args.fuse_weight}")
    second = vectors_of(Bundle(args.fuse), args.fuse_cache, "embedding (--fuse)")
    return fuse(first, second, args.fuse_weight), first.seconds


def fuse(first: Embedded, second: Embedded, weight: float) -> dict:
    """Score-level fusion of two encoders as one vector per clip, as ``uvexport fuse``'s graph
    makes it (:func:`uvexport.fuse.join`): its cosine is ``w · cos(a, a') + (1 − w) · cos(b,
    b')``, so calibration, AS-norm and enrollment run on it unchanged. The two embeddings must
    be of the same clips (the same files, conditions and seeds)."""
    fused: dict = {}
    for condition, by_person in first.vectors.items():
        fused[condition] = {}
        for person, a in by_person.items():
            if not np.array_equal(
                first.seconds[condition][person], second.seconds[condition][person]
            ):
                raise SystemExit(f"--fuse: {person} ({condition}) is not the same clips in both")
            fused[condition][person] = join(a, second.vectors[condition][person], weight)
    return fused


def split(
    table: Mapping[str, Mapping[str, np.ndarray]], keep: set[str]
) -> dict[str, dict[str, np.ndarray]]:
    return {c: {p: v for p, v in by.items() if p in keep} for c, by in table.items()}


def old_rule_thresholds(calibration_vectors: dict, far: float) -> float:
    """The rule before AS-norm: raw cosines calibrated on clean clips only."""
    clean = {"clean": calibration_vectors["clean"]}
    calibrated = calibrate_vectors(clean, data="old rule", cohort_size=0)
    return calibrated.calibration.tables["prototype"].row_for(far).threshold


def evaluate_fold(
    test_vectors: dict,
    test_seconds: dict,
    calibrated,
    old_floor: float,
    *,
    enroll: int,
    far: float,
    other_vectors: dict | None = None,
    other_seconds: dict | None = None,
    genders: Mapping[str, str] | None = None,
    fold_pairs: dict[str, set] | None = None,
) -> list[dict]:
    """One row per condition of the held-out source. With ``other_vectors`` and
    ``other_seconds`` (the calibration people's, per condition) each row has its
    ``impostor_classes`` (:func:`class_counts`), and ``fold_pairs`` (when given) gathers the
    (template, impostor) pairs of each class over the conditions."""
    cohort = calibrated.normaliser()  # None without a cohort: raw cosines (--cohort-size 0)
    calibration = calibrated.calibration
    stated = calibration.tables["prototype"].row_for(far)
    people = None
    if other_vectors is not None:
        people = cohort_owners(calibrated, other_vectors)
    rows = []
    for condition, by_person in test_vectors.items():
        warm, genuine, impostor = enrollment_trials(by_person, enroll, cohort=cohort)
        raw_warm, raw_genuine, raw_impostor = enrollment_trials(by_person, enroll)
        if len(genuine) < 2:
            continue
        cross, cross_owners = {}, np.zeros(0, dtype=object)
        if other_vectors is not None and other_seconds is not None:
            others = other_vectors.get(condition, {})
            cross, cross_owners = cross_source_trials(by_person, others, enroll, cohort, people)
            cross_long = long_clips(other_seconds[condition], cross_owners)
        pairs: dict[tuple[str, str], dict[str, int]] = {}
        counts = dict.fromkeys(
            ("fa", "fr", "genuine", "impostor", "long_fr", "long_genuine", "old_fa", "old_fr"), 0
        )
        for person in genuine:
            threshold, _ = user_threshold(warm[person], TARGET_TPR, calibration, "prototype", far)
            long = test_seconds[condition][person][enroll:] >= LONG_CLIP_SECONDS
            rejected = genuine[person] < threshold
            owners = trial_owners(by_person, person)
            assert len(owners) == len(impostor[person])
            impostor_long = long_clips(test_seconds[condition], owners)
            split_counts = pair_counts(impostor[person], owners, impostor_long, threshold)
            if person in cross:
                split_counts.update(pair_counts(cross[person], cross_owners, cross_long, threshold))
            for other, entry in split_counts.items():
                pairs[(person, other)] = entry
            counts["fa"] += int(np.sum(impostor[person] >= threshold))
            counts["fr"] += int(np.sum(rejected))
            counts["long_fr"] += int(np.sum(rejected & long))
            counts["long_genuine"] += int(np.sum(long))
            counts["genuine"] += genuine[person].size
            counts["impostor"] += impostor[person].size
            old = max(warmup_threshold(raw_warm[person], TARGET_TPR), old_floor)
            counts["old_fa"] += int(np.sum(raw_impostor[person] >= old))
            counts["old_fr"] += int(np.sum(raw_genuine[person] < old))
        all_genuine = np.concatenate(list(genuine.values()))
        all_impostor = np.concatenate(list(impostor.values()))
        raw = (
            np.concatenate(list(raw_genuine.values())),
            np.concatenate(list(raw_impostor.values())),
        )
        observed = counts["fa"] / counts["impostor"]
        rows.append(
            {
                "condition": condition,
                "speakers": len(genuine),
                "genuine": counts["genuine"],
                "impostor": counts["impostor"],
                "stated_far": stated.far,
                "observed_far": observed,
                "ratio": observed / stated.far,
                "resolvable": stated.far * counts["impostor"] >= 10,
                "frr": counts["fr"] / counts["genuine"],
                "long_genuine": counts["long_genuine"],
                "frr_long": counts["long_fr"] / counts["long_genuine"]
                if counts["long_genuine"]
                else None,
                "eer": equal_error_rate(all_genuine, all_impostor),
                "eer_raw": equal_error_rate(*raw),
                "old_far": counts["old_fa"] / counts["impostor"],
                "old_frr": counts["old_fr"] / counts["genuine"],
            }
        )
        if other_vectors is not None:
            classes = class_counts(pairs, genders or {}, stated.far)
            within = classes["within_source"]
            assert (within["trials"], within["false_accepts"]) == (counts["impostor"], counts["fa"])
            rows[-1]["impostor_classes"] = classes
            if fold_pairs is not None:
                for pair in pairs:
                    for name in pair_classes(*pair, genders or {}):
                        fold_pairs.setdefault(name, set()).add(pair)
    return rows


def print_row(fold: str, row: dict) -> None:
    long = "  n/a" if row["frr_long"] is None else f"{row['frr_long']:.3f}"
    mark = "" if row["resolvable"] else "  (FAR not resolvable: < 10 expected false accepts)"
    print(
        f"{fold:11s} {row['condition']:15s} {row['speakers']:3d} {row['genuine']:6d} "
        f"{row['impostor']:7d}  {row['stated_far']:.3f}  {row['observed_far']:.4f} "
        f"{row['ratio']:5.2f}  {row['frr']:.3f}  {long} ({row['long_genuine']:4d})  "
        f"{row['eer']:.3f} {row['eer_raw']:.3f}  {row['old_far']:.4f} {row['old_frr']:.3f}{mark}"
    )


CLASS_NAMES = {
    "within_source": "within-source",
    "within_source_same_gender": "same gender within-source",
    "cross_source": "cross-source (calibration people)",
}


def class_text(entry: dict) -> str:
    """``FAR 0.0123 (>= 2 s: 0.0150) over 12345 trials, 90 pairs``."""
    far = "n/a" if entry["far"] is None else f"{entry['far']:.4f}"
    long = "n/a" if entry["far_long"] is None else f"{entry['far_long']:.4f}"
    return (
        f"FAR {far} (>= {LONG_CLIP_SECONDS:g} s: {long}, {entry['long_trials']} trials) over "
        f"{entry['trials']} trials, {entry['pairs']} pairs"
    )


def print_classes(row: dict) -> None:
    """The row's impostor classes, one line each, under its row."""
    for name, entry in row.get("impostor_classes", {}).items():
        print(f"{'':12s}{CLASS_NAMES[name]:34s} {class_text(entry)}")


def load_genders(path: Path | None) -> tuple[dict[str, str], str]:
    """Person (folder) -> gender, and where it came from: ``path`` (a JSON object of folder ->
    gender or -> ``{"gender": ...}``, or a ``sources.json`` written by ``uvtrain data
    real-speech``), else the real-speech labels (:func:`uvtrain.data.real_speech.folder_labels`)."""
    if path is None:
        from uvtrain.data.real_speech import folder_labels

        labels: Mapping = folder_labels()
        where = "uvtrain.data.real_speech labels (labels.json)"
    else:
        labels = json.loads(Path(path).read_text(encoding="utf-8"))
        if "sources" in labels:  # a sources.json
            labels = {
                folder: label
                for row in labels["sources"]
                for folder, label in row.get("people", {}).items()
            }
        where = str(path)
    genders = {
        person: (label["gender"] if isinstance(label, Mapping) else str(label))
        for person, label in labels.items()
    }
    return genders, where


def plot(report: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conditions = list(dict.fromkeys(r["condition"] for f in report["folds"] for r in f["rows"]))
    for key, name, ylabel in (
        ("observed_far", "far.png", "observed FAR on the held-out source"),
        ("frr", "frr.png", "FRR on the held-out source"),
    ):
        figure, axes = plt.subplots(figsize=(10, 4.5))
        for number, fold in enumerate(report["folds"]):
            xs = [conditions.index(r["condition"]) + 0.08 * number for r in fold["rows"]]
            ys = [max(r[key], 1e-4) for r in fold["rows"]]
            axes.scatter(xs, ys, label=fold["source"], s=22)
        if key == "observed_far":
            stated = report["far"]
            axes.axhline(stated, color="k", lw=1, label=f"stated FAR {stated:g}")
            axes.axhline(2 * stated, color="k", lw=1, ls="--", label="2 x stated")
            axes.set_yscale("log")
        else:
            axes.axhline(0.05, color="k", lw=1, ls="--", label="FRR 5 %")
        axes.set_xticks(range(len(conditions)), conditions, rotation=30, ha="right")
        axes.set_ylabel(ylabel)
        axes.set_title(f"leave-one-source-out, --far {report['far']:g}")
        axes.legend(fontsize=7, ncol=2)
        figure.tight_layout()
        figure.savefig(out / name, dpi=110)
        plt.close(figure)


def argument_parser(description: str) -> argparse.ArgumentParser:
    """The options of a leave-one-source-out benchmark: the speakers, the bundle, the conditions,
    the stated FAR, the enrollment size and the embeddings cache (``far_rules.py`` adds its own)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--speakers", required=True, type=Path, help="one folder per speaker")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--bundle", type=Path, default=None, help="default: the shipped bundle")
    parser.add_argument("--conditions", default=None, help="comma-separated (default: all)")
    parser.add_argument("--far", type=float, default=DEFAULT_FAR)
    parser.add_argument("--enroll", type=int, default=5)
    parser.add_argument(
        "--max-samples",
        type=int,
        default=MAX_SAMPLES_PER_PERSON,
        help="clips per speaker at most (uvexport calibrate's)",
    )
    parser.add_argument("--cache", default=None, help="an .npz to keep the embeddings in")
    parser.add_argument(
        "--fuse",
        type=Path,
        default=None,
        help="a second bundle whose embeddings are fused with --bundle's (the cosine a weighted "
        "mean of the two encoders'; what a two-encoder model would do)",
    )
    parser.add_argument("--fuse-cache", default=None, help="--cache for the --fuse bundle")
    parser.add_argument(
        "--fuse-weight", type=float, default=0.5, help="--bundle's weight w in the fused cosine"
    )
    parser.add_argument(
        "--impostors",
        choices=("chain", "all"),
        default="chain",
        help="the calibration's impostor trials, as uvexport calibrate --impostors: pairs "
        "within each source (default) or every pair",
    )
    return parser


def main() -> int:
    parser = argument_parser(__doc__.split("\n\n")[0])
    parser.add_argument(
        "--genders",
        type=Path,
        default=None,
        help="JSON: folder -> gender, or a real-speech sources.json (default: the real-speech "
        "labels); for the same-gender impostor pairs",
    )
    parser.add_argument(
        "--cohort-size",
        type=int,
        default=DEFAULT_COHORT_SIZE,
        help="the calibration's score rule, as uvexport calibrate --cohort-size: 0 for raw "
        "cosines, else AS-norm against a cohort of this many vectors",
    )
    parser.add_argument(
        "--top-k",
        type=int,
        default=DEFAULT_TOP_K,
        help="AS-norm's top-K (at least the cohort size: S-norm, the whole cohort)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    genders, genders_from = load_genders(args.genders)
    bundle = Bundle(args.bundle or default_bundle_path())
    vectors, seconds = embed(args, bundle)
    people, sources, folds = source_folds(vectors)
    small = sorted(set(sources) - set(folds))
    print(
        f"{len(people)} speakers in {len(sources)} sources; folds: {', '.join(folds)}; "
        f"always calibrated on (fewer than {MIN_FOLD_SPEAKERS} speakers): {', '.join(small)}"
    )
    known = {p: genders.get(p, "unknown") for p in people}
    print(
        "genders ("
        + genders_from
        + "): "
        + ", ".join(f"{n} {g}" for g, n in sorted(Counter(known.values()).items()))
        + "; imp: within-source impostor trials (the held-out source's own people)"
    )
    print(
        "fold        condition       spk    gen     imp  stated observed ratio  FRR   "
        "FRR>=2s (n)    EER   raw    old: FAR  FRR"
    )
    report: dict = {
        "far": args.far,
        "enroll": args.enroll,
        "folds": [],
        "small_sources": small,
        "impostor": "within_source",
        "calibration_impostors": args.impostors,
        "cohort_size": args.cohort_size,
        "top_k": args.top_k,
        "impostor_classes": IMPOSTOR_CLASS_TEXT,
        "genders": {"from": genders_from, "people": known},
    }
    for fold in folds:
        held_out = sources[fold]
        rest = set(people) - held_out
        calibration_vectors = split(vectors, rest)
        calibrated = calibrate_vectors(
            calibration_vectors,
            data=f"all but {fold}",
            groups=chains(rest, args.impostors),
            cohort_size=args.cohort_size,
            top_k=args.top_k,
        )
        old_floor = old_rule_thresholds(calibration_vectors, args.far)
        fold_pairs: dict[str, set] = {}
        rows = evaluate_fold(
            split(vectors, held_out),
            split(seconds, held_out),
            calibrated,
            old_floor,
            enroll=args.enroll,
            far=args.far,
            other_vectors=calibration_vectors,
            other_seconds=split(seconds, rest),
            genders=known,
            fold_pairs=fold_pairs,
        )
        for row in rows:
            print_row(fold, row)
            print_classes(row)
        report["folds"].append(
            {
                "source": fold,
                "speakers": len(held_out),
                "calibrated_on": sorted(rest),
                "impostor_pairs": {n: len(fold_pairs.get(n, ())) for n in IMPOSTOR_CLASSES},
                "rows": rows,
            }
        )
    summarise(report)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(report, args.out)
    print(
        f"wrote {args.out / 'report.json'}, far.png, frr.png ({time.perf_counter() - started:.0f} s)"
    )
    return 0


def summarise(report: dict) -> None:
    """The pooled figures and the targets, printed and kept in the report."""
    rows = [r for f in report["folds"] for r in f["rows"]]
    resolvable = [r for r in rows if r["resolvable"]]
    worst = max(resolvable, key=lambda r: r["ratio"]) if resolvable else None
    long_rows = [r for r in rows if r["frr_long"] is not None]
    long_fr = sum(r["frr_long"] * r["long_genuine"] for r in long_rows)
    long_n = sum(r["long_genuine"] for r in long_rows)
    fa = sum(r["observed_far"] * r["impostor"] for r in rows)
    old_fa = sum(r["old_far"] * r["impostor"] for r in rows)
    impostor = sum(r["impostor"] for r in rows)
    genuine = sum(r["genuine"] for r in rows)
    summary = {
        "pooled_far": fa / impostor,
        "pooled_frr": sum(r["frr"] * r["genuine"] for r in rows) / genuine,
        "pooled_frr_long": long_fr / long_n if long_n else None,
        "long_genuine": long_n,
        "old_pooled_far": old_fa / impostor,
        "old_pooled_frr": sum(r["old_frr"] * r["genuine"] for r in rows) / genuine,
        "worst_ratio": None if worst is None else worst["ratio"],
        "within_2x": sum(r["ratio"] <= 2 for r in resolvable),
        "resolvable_rows": len(resolvable),
        "mean_eer": float(np.mean([r["eer"] for r in rows])),
        "mean_eer_raw": float(np.mean([r["eer_raw"] for r in rows])),
    }
    classes = {}
    for name in IMPOSTOR_CLASSES:
        entries = [(r, r["impostor_classes"][name]) for r in rows if "impostor_classes" in r]
        if not entries:
            continue
        pooled = {key: sum(e[key] for _, e in entries) for key in COUNT_KEYS}
        ratios = [e["far"] / r["stated_far"] for r, e in entries if e["resolvable"]]
        pooled.update(
            far=pooled["false_accepts"] / pooled["trials"] if pooled["trials"] else None,
            far_long=pooled["long_false_accepts"] / pooled["long_trials"]
            if pooled["long_trials"]
            else None,
            pairs=sum(f.get("impostor_pairs", {}).get(name, 0) for f in report["folds"]),
            worst_ratio=max(ratios) if ratios else None,
            within_2x=sum(ratio <= 2 for ratio in ratios),
            resolvable_rows=len(ratios),
        )
        classes[name] = pooled
    if classes:
        summary["impostor_classes"] = classes
    report["summary"] = summary
    for name, pooled in classes.items():
        worst = pooled["worst_ratio"]
        print(
            f"pooled {CLASS_NAMES[name]}: {class_text(pooled)}; observed <= 2 x stated in "
            f"{pooled['within_2x']} of {pooled['resolvable_rows']} fold-conditions that resolve "
            f"it (worst ratio {math.nan if worst is None else worst:.2f})"
        )
    print(
        f"pooled: FAR {summary['pooled_far']:.4f} (old rule {summary['old_pooled_far']:.4f}), "
        f"FRR {summary['pooled_frr']:.3f} (old {summary['old_pooled_frr']:.3f}), FRR on clips "
        f">= {LONG_CLIP_SECONDS:g} s {summary['pooled_frr_long'] or math.nan:.3f} "
        f"({long_n} trials); observed <= 2 x stated in {summary['within_2x']} of "
        f"{summary['resolvable_rows']} fold-conditions that resolve the FAR (worst ratio "
        f"{summary['worst_ratio'] or math.nan:.2f}); mean EER {summary['mean_eer']:.3f} "
        f"normalised, {summary['mean_eer_raw']:.3f} raw"
    )


if __name__ == "__main__":
    sys.exit(main())
