"""One recording chain as an app's deployment, through the SDK: the stated FAR and the owners'
FRR when the app calibrates on everyone else, with and without its own chain's mean taken out.

The leave-one-source-out benchmarks (far_rules.py, far_centring.py) score vectors with the
benchmark's own arithmetic, on at most 60 files per person and with leave-two-out means. This
one runs what an app runs: ``uvexport calibrate`` on every source but ``--source`` (the same
options for both bundles: ``--conditions``, ``--score-norm``, ``--each-chain``), once as it is
and once with ``--centre`` the held-out source's people (the bundle then takes their mean out);
then each of those people enrolls through :class:`uvsdk.Verifier` on their first
``--enroll`` files (by name) that enrollment can use at ``--far``, their other files are their own attempts and every
file of the source's other people a stranger's. Each file is embedded once by the verifier and
scored by the verifier's own scoring against each template (``verify`` would embed it again
for every owner); the decision is ``score >= threshold``, as ``verify`` takes it.

Prints, per bundle: strangers accepted (pooled, and the worst owner's share), and the owners'
FRR on clips of at least 2 s, over all their files and by the file's place after enrollment
(``--bins``: files 6-60 are the ones the leave-one-source-out benchmarks test on). Writes
``report.json`` and ``deployment.png`` under ``--out``, and the two bundles.

    python benchmarks/far_deployment.py --speakers real-speech/speakers --source fotaq \\
        --out eval-deployment/ [--bundle MODEL.uvb] [--conditions clean,telephone-gsm] \\
        [--score-norm none] [--each-chain] [--cache emb.npz] [--far 0.01] [--also B.uvb]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from uvexport.calibrate import SCORE_NORM_CHOICES, calibrate_bundle, print_progress
from uvsdk import Bundle, Verifier
from uvsdk.errors import MediaError
from uvsdk.measurement import HELD_OUT_MIN_SECONDS
from uvsdk.verifier import default_bundle_path

BINS = (60, 120)
"""The FRR is also given by the file's place (by name, from 1): up to 60, up to 120, beyond."""


def split_folders(speakers: Path, source: str, scratch: Path) -> tuple[Path, Path]:
    """Links to ``speakers``' person folders: everyone but ``source`` as the calibration (beside
    a copy of its ``sources.json``, so that each source is a recording chain), and ``source``'s
    people as the deployment."""
    calibration, deployment = scratch / "calibration", scratch / "deployment"
    calibration.mkdir()
    deployment.mkdir()
    shutil.copy(speakers / "sources.json", calibration / "sources.json")
    for person in sorted(p for p in speakers.iterdir() if p.is_dir()):
        held_out = person.name.split("-", 1)[0] == source
        (deployment if held_out else calibration).joinpath(person.name).symlink_to(person)
    if not any(deployment.iterdir()):
        raise SystemExit(f"no person folder of source {source!r} under {speakers}")
    return calibration, deployment


def embedded(
    verifier: Verifier, deployment: Path
) -> dict[str, list[tuple[str, np.ndarray, float]]]:
    """Every file of every deployment person: its name, vector and seconds (undecodable or too
    short files are left out, as enrollment leaves them)."""
    out: dict[str, list[tuple[str, np.ndarray, float]]] = {}
    people = sorted(deployment.iterdir())
    started = time.perf_counter()
    for number, person in enumerate(people, 1):
        out[person.name] = []
        for file in sorted(f for f in person.iterdir() if f.is_file()):
            try:
                vector, info = verifier._embed(file, allow_clipped=True)
            except MediaError:
                continue
            out[person.name].append((file.name, vector, info["seconds"]))
        left = (time.perf_counter() - started) / number * (len(people) - number)
        print_progress(f"embedded {number}/{len(people)} people (about {left:.0f} s left)")
    print(file=sys.stderr)
    return out


def measure(bundle: Path, deployment: Path, clips: dict, args: argparse.Namespace) -> dict:
    """Each person enrolled through the SDK, every other person's files scored against them."""
    store = Path(tempfile.mkdtemp(prefix="far-deployment-"))
    verifier = Verifier(bundle, store=store, passphrase="far deployment", far=args.far)
    accepts = trials = 0
    worst = 0.0
    owners: dict[str, dict[str, int]] = {}
    bins = {label: [0, 0] for label in bin_labels(args.enroll)}
    try:
        for person in sorted(clips):
            files = sorted(f for f in (deployment / person).iterdir() if f.is_file())
            chosen = enrollment_files(verifier, files, args.enroll)
            verifier.enroll(chosen, user="owner")
            template = verifier.store.load("owner")
            enrolled = {f.name for f in chosen}
            place = {f.name: number for number, f in enumerate(files, 1)}
            own = [0, 0]
            for name, vector, seconds in clips[person]:
                if name in enrolled or seconds < HELD_OUT_MIN_SECONDS:
                    continue
                rejected = verifier._score(template, vector) < template.threshold
                counts = bins[bin_of(place[name], args.enroll)]
                counts[0] += rejected
                counts[1] += 1
                own[0] += rejected
                own[1] += 1
            mine = total = 0
            for other, rows in clips.items():
                for _, vector, _ in rows if other != person else ():
                    total += 1
                    mine += verifier._score(template, vector) >= template.threshold
            accepts, trials = accepts + mine, trials + total
            worst = max(worst, mine / total)
            owners[person] = {"false_accepts": int(mine), "impostor_trials": total,
                              "false_rejects": int(own[0]), "long_genuine": own[1]}  # fmt: skip
            verifier.delete("owner")
    finally:
        shutil.rmtree(store, ignore_errors=True)
    rejects = sum(r for r, _ in bins.values())
    genuine = sum(n for _, n in bins.values())
    return {
        "bundle": bundle.name,
        "far": accepts / trials,
        "false_accepts": accepts,
        "impostor_trials": trials,
        "worst_owner_far": worst,
        "frr_long": rejects / genuine if genuine else None,
        "long_genuine": genuine,
        "frr_by_place": {k: (r / n if n else None, n) for k, (r, n) in bins.items()},
        "owners": owners,
    }


def enrollment_files(verifier: Verifier, files: list[Path], count: int) -> list[Path]:
    """The first ``count`` files (by name) enrollment can use: a clipped, too short or silent
    file is passed over, as an app would ask for another recording."""
    chosen = []
    for file in files:
        try:
            verifier.embed(file, allow_clipped=False)
        except MediaError:
            continue
        chosen.append(file)
        if len(chosen) == count:
            return chosen
    raise SystemExit(f"{files[0].parent.name}: fewer than {count} files enrollment can use")


def bin_labels(enroll: int) -> list[str]:
    """The places' labels: the first starts after the ``enroll`` enrollment files."""
    edges = [enroll, *BINS]
    return [f"{a + 1}-{b}" for a, b in zip(edges, edges[1:], strict=False)] + [f"{BINS[-1] + 1}+"]


def bin_of(place: int, enroll: int) -> str:
    labels = bin_labels(enroll)
    for edge, label in zip(BINS, labels, strict=False):
        if place <= edge:
            return label
    return labels[-1]


def plot(report: dict, out: Path) -> None:
    """``deployment.png``: the owners' FRR by the file's place, per bundle, the FAR in the legend."""
    from matplotlib.figure import Figure

    from uvtrain.io import save_figure

    figure = Figure(figsize=(6.4, 4.2))
    axis = figure.add_subplot()
    labels = bin_labels(report["enroll"])
    width = 0.8 / len(report["bundles"])
    for number, row in enumerate(report["bundles"]):
        values = [row["frr_by_place"][label][0] or 0.0 for label in labels]
        axis.bar(
            np.arange(len(labels)) + number * width,
            values,
            width,
            label=f"{row['bundle']}: strangers accepted {row['far']:.2%}",
        )
    axis.set_xticks(np.arange(len(labels)) + width / 2, [f"files {label}" for label in labels])
    axis.axhline(0.05, color="k", lw=1, label="target: FRR <= 5 %")
    axis.set_ylabel(f"owners' FRR, clips >= {HELD_OUT_MIN_SECONDS:g} s")
    axis.set_title(
        f"{report['source']} as the deployment, stated FAR {report['far']:g}", fontsize=10
    )
    axis.legend(fontsize=8)
    save_figure(figure, out / "deployment.png")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--speakers", type=Path, required=True, help="the real-speech folder")
    parser.add_argument("--source", required=True, help="the source held out as the deployment")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--bundle", type=Path, default=None, help="default: the shipped bundle")
    parser.add_argument("--conditions", default="clean,telephone-gsm")
    parser.add_argument("--score-norm", choices=SCORE_NORM_CHOICES, default="none")
    parser.add_argument("--each-chain", action="store_true")
    parser.add_argument("--cache", type=Path, default=None, help="uvexport calibrate --cache")
    parser.add_argument("--far", type=float, default=0.01)
    parser.add_argument("--enroll", type=int, default=5)
    parser.add_argument(
        "--also",
        type=Path,
        action="append",
        default=[],
        help="another bundle of the same model to measure beside the two (e.g. one whose chain "
        "mean a federation of the source's devices measured: uvtrain deploy --centre-bundle)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    model = args.bundle or default_bundle_path()
    conditions = tuple(c.strip() for c in args.conditions.split(",") if c.strip())
    report: dict = {"source": args.source, "far": args.far, "enroll": args.enroll,
                    "score_norm": args.score_norm, "each_chain": args.each_chain,
                    "conditions": list(conditions), "bundles": []}  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        calibration, deployment = split_folders(args.speakers, args.source, Path(scratch))
        bundles = []
        for name, centre in (("as-calibrated.uvb", None), ("own-mean.uvb", deployment)):
            path, _ = calibrate_bundle(
                model, calibration, args.out / name, conditions=conditions,
                score_norm=args.score_norm, each_chain=args.each_chain, cache=args.cache,
                centre=centre, progress=print_progress,
            )  # fmt: skip
            print(file=sys.stderr)
            bundles.append(path)
        for extra in args.also:  # the vectors are embedded once, by the first bundle's model
            if Bundle(extra).manifest.model_sha256 != Bundle(bundles[0]).manifest.model_sha256:
                parser.error(f"--also {extra}: not the model of {model}")
            bundles.append(extra)
        clips = embedded(Verifier(bundles[0], store=Path(scratch) / "embed"), deployment)
        for path in bundles:
            row = measure(path, deployment, clips, args)
            report["bundles"].append(row)
            by_place = ", ".join(
                f"{label} {frr:.3f} ({n})" for label, (frr, n) in row["frr_by_place"].items() if n
            )
            print(
                f"{row['bundle']}: strangers accepted {row['far']:.4f} ({row['false_accepts']} of "
                f"{row['impostor_trials']}; worst owner {row['worst_owner_far']:.3f}); owners' "
                f"FRR, clips >= 2 s {row['frr_long']:.3f} ({row['long_genuine']}): by file "
                f"{by_place}"
            )
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(report, args.out)
    print(
        f"wrote {args.out / 'report.json'}, deployment.png ({time.perf_counter() - started:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
