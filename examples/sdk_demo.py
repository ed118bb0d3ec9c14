"""The SDK end to end on synthetic voices, with the real ``uvsdk`` commands.

It writes, under ``--out``:

- ``reference-voice.uvb``: a small reference bundle (a log-mel embedding built as an ONNX graph,
  centred on a background set of voices) standing in for a trained model: a copy of
  ``examples/reference-voice.uvb``, so that the demo needs only the SDK (``pip install -e .``, no
  torch, no onnx). ``python examples/sdk_demo.py --write-reference`` rebuilds that file (it needs
  the ``train`` extra); a test checks that the rebuilt bundle is the committed one;
- ``enroll/``: 8 clips of one synthetic speaker; ``test/``: 3 other clips of that speaker and
  clips of 5 speakers never seen before;
- ``store/``: the encrypted template.

Then it runs ``uvsdk enroll`` and ``uvsdk verify`` as a person would — each command is echoed
exactly as it runs, and its output is printed as it came — and ends with a table saying who each
test clip was.

The template is encrypted with ``$UVSDK_PASSPHRASE`` when it is set, so that your own ``uvsdk``
commands open the same store afterwards; without it the demo uses a passphrase of its own (and
says so)::

    export UVSDK_PASSPHRASE='a long passphrase'
    python examples/sdk_demo.py --out demo
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import soundfile as sf

from uvtrain.data.formant import voice_corpus  # numpy only: no torch

SAMPLE_RATE = 16000
#: used only when ``$UVSDK_PASSPHRASE`` is not set
DEMO_PASSPHRASE = "demo passphrase: use your own"
#: one line of ``uvsdk verify``: ``ACCEPT|REJECT  score=…  threshold=…  FILE``
DECISION = re.compile(r"^(ACCEPT|REJECT)\s+score=(\S+)\s+threshold=\S+\s+(.+)$")
#: the bundle :func:`build_bundle` writes, committed, so that the demo runs with the SDK alone
REFERENCE_BUNDLE = Path(__file__).resolve().with_name("reference-voice.uvb")


def build_bundle(path: Path) -> Path:
    """A reference voice bundle, its embedding centred on 40 background speakers (needs the
    ``train`` extra: onnx builds the graph)."""
    from uvexport.bundle import make_manifest, write_bundle
    from uvexport.reference import centred_spectral_embedding_model
    from uvsdk.inputs import AudioInput

    background = voice_corpus(40, 4, 2.0, SAMPLE_RATE, seed=1000)
    clips = [clip for speaker in background for clip in speaker]
    model = centred_spectral_embedding_model(clips, SAMPLE_RATE, n_bands=40)
    manifest = make_manifest(
        model,
        name="reference-voice",
        method="reference",
        source=AudioInput(SAMPLE_RATE, window_seconds=2.0, hop_seconds=1.0, min_seconds=0.5),
        output_kind="embedding",
        dim=40,
        extra={"description": "log-mel reference embedding for demos; not a trained model"},
    )
    return write_bundle(path, model, manifest)


def write_clips(out: Path) -> tuple[Path, Path]:
    """Enrollment clips of speaker 0, and test clips of speaker 0 and of 5 strangers."""
    speakers = voice_corpus(6, 11, 3.0, SAMPLE_RATE, seed=2026)
    enroll, test = out / "enroll", out / "test"
    for folder in (enroll, test):
        folder.mkdir(parents=True)
    for index, clip in enumerate(speakers[0][:8]):
        sf.write(enroll / f"me-{index}.wav", clip, SAMPLE_RATE, subtype="PCM_16")
    for index, clip in enumerate(speakers[0][8:]):
        sf.write(test / f"me-{index}.wav", clip, SAMPLE_RATE, subtype="PCM_16")
    for speaker in range(1, 6):
        for index, clip in enumerate(speakers[speaker][:2]):
            sf.write(test / f"stranger{speaker}-{index}.wav", clip, SAMPLE_RATE, subtype="PCM_16")
    return enroll, test


def uvsdk(*args: str | Path) -> subprocess.CompletedProcess:
    """Run the ``uvsdk`` command installed beside this interpreter (else ``python -m uvsdk.cli``),
    echoing exactly the command line it runs and then printing its output as it came."""
    script = Path(sys.executable).with_name("uvsdk")
    if script.is_file():
        command, shown = [str(script), *map(str, args)], ["uvsdk", *map(str, args)]
    else:
        command = [sys.executable, "-m", "uvsdk.cli", *map(str, args)]
        shown = ["python", "-m", "uvsdk.cli", *map(str, args)]
    print("$ " + shlex.join(shown), flush=True)
    result = subprocess.run(command, capture_output=True, text=True)
    print(result.stdout + result.stderr, end="", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("demo"), help="output folder")
    parser.add_argument(
        "--write-reference",
        action="store_true",
        help=f"rebuild {REFERENCE_BUNDLE.name} beside this script (needs the train extra) and exit",
    )
    args = parser.parse_args()
    if args.write_reference:
        print(f"wrote {build_bundle(REFERENCE_BUNDLE)}")
        return 0
    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    if not os.environ.get("UVSDK_PASSPHRASE"):
        os.environ["UVSDK_PASSPHRASE"] = DEMO_PASSPHRASE
        print(
            f"UVSDK_PASSPHRASE is not set: the demo encrypts {out / 'store'} with a passphrase of its\n"
            "own (DEMO_PASSPHRASE in examples/sdk_demo.py). Export UVSDK_PASSPHRASE before running\n"
            "the demo to open that store with your own uvsdk commands afterwards.\n",
            flush=True,
        )

    bundle = out / REFERENCE_BUNDLE.name
    shutil.copyfile(REFERENCE_BUNDLE, bundle)
    enroll, test = write_clips(out)
    store = out / "store"

    enrolled = uvsdk("enroll", "--samples", enroll, "--bundle", bundle, "--store", store)
    if enrolled.returncode != 0:
        return enrolled.returncode
    # A batch of 13 clips, 10 of them strangers: --no-backoff, else the fifth rejection in a row
    # would lock the user out for 30 s and the remaining clips would not be scored.
    clips = sorted(test.glob("*.wav"))
    verified = uvsdk("verify", *clips, "--no-backoff", "--bundle", bundle, "--store", store)
    if verified.returncode == 2:
        return 2
    decisions = [DECISION.match(line) for line in verified.stdout.splitlines()]
    if not decisions or not all(decisions):
        print("sdk_demo: unexpected output from uvsdk verify", file=sys.stderr)
        return 2

    print(f"\n{'clip':<22} {'who':<10} {'score':>7}  decision")
    right = 0
    for decision in decisions:
        verdict, score, name = decision[1], float(decision[2]), Path(decision[3]).name
        genuine = name.startswith("me-")
        correct = (verdict == "ACCEPT") == genuine
        right += correct
        print(
            f"{name:<22} {'owner' if genuine else 'stranger':<10} {score:>7.3f}  "
            f"{verdict}{'' if correct else '  (wrong)'}"
        )
    print(f"\n{right} of {len(decisions)} decisions right.")
    print(f"bundle: {bundle}\nclips: {enroll}, {test}\nencrypted template: {store}")
    return 0 if right >= len(decisions) - 1 else 1


if __name__ == "__main__":
    sys.exit(main())
