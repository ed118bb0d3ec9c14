"""Which Beneath a Steel Sky characters are different people? The measurement behind the ``bass``
real-speech source's ``SPEAKERS`` (docs/trainer.md, "Beneath a Steel Sky").

The game's credits name four actors and no actor per character, and about 34 characters speak.
This script attributes every scripted line to its character by its talk animation (as
``uvtrain.data.real_speech.bass`` does for the kept ones, here for all of them), embeds up to
``--clips`` lines of 2 s or more of each character with two encoders (the shipped CAM++ bundle and
a GE2E bundle), and computes each pair of characters' EER (a pair's within-character clip pairs
against its cross-character ones). Taking the characters by their number of lines of 2 s or
more, it keeps each one that both encoders keep apart from every character kept before it
(pairwise EER under ``--eer`` and ``--second-eer``), and says whether the kept set is the one
``uvtrain.data.real_speech.bass.SPEAKERS`` names.

    uvexport default-voice --encoder ge2e --quantize none --out ge2e.uvb
    python benchmarks/bass_voices.py --deb beneath-a-steel-sky_0.0372-8_all.deb \\
        --second-bundle ge2e.uvb [--bundle sdk/uvsdk/data/default.uvb] [--clips 40]
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

from uvsdk.verifier import Verifier, default_bundle_path
from uvtrain.data.real_speech import bass, extract_deb
from uvtrain.evaluation.metrics import equal_error_rate

#: Talk animation (compact name in sky.cpt) -> character, first match wins. The father's and
#: son's animations towards Foster come before Foster's own, the judge's towards Hobbins before
#: Hobbins'.
CHARACTERS = [
    (r"^dad|sc81_dad", "dad"), (r"^son", "son"),
    (r"judge|jdg", "judge"),  # sc42_jdg_to_jobs: the judge, speaking to Hobbins
    (r"fost|big_f_|crouch_talk|fsit_talk", "foster"), (r"^joey", "joey"), (r"jobs", "hobbins"),
    (r"^lamb", "lamb"), (r"anita", "anita"), (r"foreman|forprod", "foreman"),
    (r"monitor", "monitor"), (r"shades", "shades"), (r"^rad", "radman"), (r"welder", "welder"),
    (r"skorl", "skorl"), (r"walter", "walter"), (r"burke_medi", "burke"), (r"burke", "burke"),
    (r"anchor", "anchor"), (r"trevor", "trevor"), (r"medi", "medi"), (r"gall|gal_", "gallagher"),
    (r"helga", "helga"), (r"ken_", "ken"), (r"dani", "danielle"), (r"henri", "henri"),
    (r"vinc", "vincent"), (r"guard_talk|blunt", "blunt"), (r"garden", "gardener"),
    (r"barman", "barman"), (r"col_", "colston"), (r"juke", "jukebox"), (r"babs", "babs"),
    (r"pros", "prosecutor"), (r"clerk", "clerk"), (r"body_talk", "body"),
    (r"stuck_talk", "stuck"), (r"spec_dat", "spec_dat"), (r"smlguard", "guard"),
    (r"big_ss", "big_ss"), (r"android", "android"),
]  # fmt: skip
#: Robots, screens and other processed voices: not a person's voice as recorded.
PROCESSED = {"joey", "medi", "monitor", "spec_dat", "jukebox", "android", "big_ss"}
MIN_SECONDS = 2.0


def character(animation: str) -> str | None:
    """The character a talk animation is named for (``None``: none of :data:`CHARACTERS`)."""
    for pattern, name in CHARACTERS:
        if re.search(pattern, animation):
            return name
    return None


def clips(game: bass.Game, texts: list[int], folder: Path) -> list[Path]:
    """The texts' speech of at least 2 s, as WAV files under ``folder``."""
    speech = {text: game.speech(text) for text in texts}
    return [
        bass.write_wav(folder / f"{text:05d}.wav", pcm)
        for text, pcm in speech.items()
        if pcm is not None and len(pcm) >= MIN_SECONDS * bass.RATE
    ]


def pair_eers(vectors: dict[str, np.ndarray]) -> dict[tuple[str, str], float]:
    def within(x: np.ndarray) -> np.ndarray:
        return (x @ x.T)[np.triu_indices(len(x), 1)]

    return {
        (a, b): equal_error_rate(np.r_[within(vectors[a]), within(vectors[b])], (vectors[a] @ vectors[b].T).ravel())
        for a, b in itertools.combinations(sorted(vectors), 2)
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--deb", type=Path, help="the pinned beneath-a-steel-sky .deb")
    source.add_argument("--tree", type=Path, help="a folder the package is extracted in")
    parser.add_argument(
        "--bundle", type=Path, default=None, help="first encoder (default: shipped)"
    )
    parser.add_argument("--second-bundle", type=Path, required=True, help="second encoder (GE2E)")
    parser.add_argument("--clips", type=int, default=40, help="clips per character at most")
    parser.add_argument("--min-clips", type=int, default=12, help="fewer: character left out")
    parser.add_argument("--eer", type=float, default=0.20, help="first encoder's pair EER limit")
    parser.add_argument("--second-eer", type=float, default=0.25, help="second encoder's limit")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tree = args.tree
        if tree is None:
            tree = Path(scratch) / "tree"
            extract_deb(args.deb, tree, bass.MEMBERS)
        game = bass.Game(tree)
        audio: dict[str, list[Path]] = {}
        for name, its_texts in sorted(bass.lines(game, character).items()):
            if name in PROCESSED:
                continue
            folder = Path(scratch) / name
            folder.mkdir()
            found = sorted(clips(game, its_texts, folder))
            if len(found) >= args.min_clips:
                audio[name] = found
        counts = {name: len(paths) for name, paths in audio.items()}
        eers = []
        for bundle in (args.bundle or default_bundle_path(), args.second_bundle):
            verifier = Verifier(bundle=bundle, store=Path(scratch) / "store")
            vectors = {}
            for name, paths in audio.items():
                chosen = list(paths)
                random.Random(0).shuffle(chosen)
                x = np.stack([verifier.embed(p) for p in chosen[: args.clips]])
                vectors[name] = x / np.linalg.norm(x, axis=1, keepdims=True)
            eers.append(pair_eers(vectors))
            print(f"embedded {len(vectors)} characters with {Path(bundle).name}", file=sys.stderr)

    def pair(a: str, b: str) -> tuple[float, float]:
        key = (a, b) if (a, b) in eers[0] else (b, a)
        return eers[0][key], eers[1][key]

    kept: list[str] = []
    for name in sorted(counts, key=lambda n: (-counts[n], n)):
        near = [(k, *pair(name, k)) for k in kept]
        if all(first < args.eer and second < args.second_eer for _, first, second in near):
            kept.append(name)
            print(f"keep  {name:12s} {counts[name]:3d} clips >= 2 s")
        else:
            k, first, second = max(near, key=lambda t: max(t[1] / args.eer, t[2] / args.second_eer))
            print(
                f"leave {name:12s} {counts[name]:3d} clips >= 2 s: near {k} (EER {first:.3f}, {second:.3f})"
            )
    pairs = [pair(a, b) for a, b in itertools.combinations(kept, 2)]
    for index, label in enumerate(("first", "second")):
        values = [p[index] for p in pairs]
        print(
            f"kept pairs, {label} encoder: EER median {np.median(values):.3f}, max {max(values):.3f}"
        )
    named = set(bass.SPEAKERS.values())
    same = "the same" if set(kept) == named else "another"
    print(f"kept: {', '.join(kept)}; bass.SPEAKERS names {same} set")
    return 0


if __name__ == "__main__":
    sys.exit(main())
