"""The whole pipeline in one command: synthetic voices → federated FedUV training → signed bundle →
one simulated client's codeword → enrollment with the warm-up → verification.

    python examples/quickstart.py --out qs            # 1 min 41 s on 2 idle CPU cores
    python examples/quickstart.py --out qs --small    # 47 s idle: what CI runs

(the development machine, CPU only, nothing else running; with other jobs on the same cores it
takes several times as long — README.md, Quickstart, gives the figures measured both ways).

Every step is the real command (``uvtrain``, ``uvexport``, ``uvsdk``) run as a subprocess, except
step 4, which stands in for the device that took part in training (see :func:`provision_codeword`).
Under ``--out`` it writes ``data/`` (the corpus), ``run/`` (the training run), ``keys/`` (the
signing key pair), ``voice.uvb`` (the bundle), ``store/`` (the simulated client's encrypted
template), ``enroll/`` and ``test/`` (WAV clips) and ``results.json`` (the decisions).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: speakers (a fifth of them never take part in training), rounds, fraction of clients a round
SIZES = {"default": (60, 600, 0.25), "small": (32, 200, 0.5)}
#: FedUV with plain FedAvg at the server (η 1, not its default server lr): the figures measured
TRAINING = ["--method", "feduv", "--batch-size", "16", "--lr", "0.5", "--lr-decay", "0.005"]
TRAINING += ["--server-optimizer", "sgd", "--server-lr", "1"]
MODULES = {"uvtrain": "uvtrain.cli", "uvexport": "uvexport.cli", "uvsdk": "uvsdk.cli"}
IMPOSTORS = 8  # test clips of this many other known users, and of as many never-seen speakers
MARKER = ".uvsdk-quickstart"


class StepFailed(Exception):
    """A step failed: the message says which and why; the quickstart exits with code 2."""


def run(
    tool: str, *args: object, capture: bool = False, ok: tuple[int, ...] = (0,), echo: str = ""
) -> Any:
    """Run ``tool`` (as ``python -m``, with this interpreter), echoing the command line (or
    ``echo``, shorter). Its progress and messages go straight to the terminal; ``capture`` keeps
    stdout to parse. An exit code outside ``ok`` fails the step.
    """
    words = [str(arg) for arg in args]
    print(f"$ {tool} {echo or shlex.join(words)}", flush=True)
    result = subprocess.run(
        [sys.executable, "-m", MODULES[tool], *words],
        stdout=subprocess.PIPE if capture else None,
        text=True,
    )
    if result.returncode not in ok:
        raise StepFailed(f"{tool} {words[0]} exited with code {result.returncode}")
    return result


def step(number: int, title: str) -> float:
    print(f"\n[{number}/6] {title}", flush=True)
    return time.perf_counter()


def done(started: float, *paths: Path) -> None:
    where = ", ".join(str(path) for path in paths)
    print(f"  -> {where}  ({time.perf_counter() - started:.0f} s)", flush=True)


def prepare(out: Path) -> None:
    """A fresh output folder: new, empty, or one a previous quickstart made (then replaced)."""
    if out.exists() and any(out.iterdir()):
        if not (out / MARKER).is_file():
            raise StepFailed(f"{out} exists and was not made by the quickstart: pick another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("made by examples/quickstart.py; running it again replaces it\n")


def provision_codeword(
    run_dir: Path, client: int, bundle: Path, store: Path, user: str
) -> tuple[int, Any]:
    """Put the codeword simulated client ``client`` trained with into its device's store.

    The simulation made every client's codeword as a device does — the server-assigned id bits,
    then random bits, encoded with the SDK's encoder — with the random bits from a seeded
    generator where a device uses :mod:`secrets` (:func:`uvtrain.algorithms.feduv.client_codewords`).
    This recomputes client ``client``'s codeword, checks it against the one in the trained run,
    and saves it with the SDK's template store: encrypted (AES-256-GCM, key from
    ``$UVSDK_PASSPHRASE``), bound to the bundle's code, never printed or written in clear.
    Returns the client's (public) user id and the run's dataset.
    """
    import numpy as np

    from uvsdk.bundle import Bundle
    from uvsdk.codeword import bipolar
    from uvsdk.template import Template, TemplateStore
    from uvtrain.algorithms.feduv import client_codewords, client_user_ids
    from uvtrain.run import load_run

    config, dataset, simulation = load_run(run_dir)
    code = Bundle(bundle).manifest.code
    if config.method.name != "feduv" or code is None or code.n != config.method.code_length:
        raise StepFailed(f"{run_dir} is not a FedUV run exported to {bundle.name}")
    clients = len(dataset.clients)
    if not 0 <= client < clients:
        raise StepFailed(f"--client {client}: the run's clients are 0 to {clients - 1}")
    bits = client_codewords(clients, config.method.code_length, config.seed)[client]
    if not np.array_equal(bipolar(bits), simulation.constants["codeword"][client].cpu().numpy()):
        raise StepFailed("the recomputed codeword is not the one the client trained with")
    user_id = int(client_user_ids(clients, config.seed, code.id_bits)[client])
    template = Template(
        user=user, created=time.time(), codeword=bits, user_id=user_id, code_sha256=code.fingerprint
    )
    TemplateStore(store).save(template)
    return user_id, dataset


def write_clips(dataset: Any, client: int, enroll: Path, test: Path) -> dict[str, str]:
    """Write the client's enrollment clips and the test clips; returns who speaks each test clip.

    Enrollment: the client's clips the trainer held out for its warm-up (validation) and those it
    trained on — all recorded on its device; the SDK needs at least 5. Genuine test clips: its
    held-out test clips, used neither in training nor in enrollment. Impostors: a test clip of
    each of the first other known users (voices the model trained on, clips it did not) and one
    of each of the first speakers who never took part in training.
    """
    import soundfile as sf

    rate = int(dataset.spec["sample_rate"])
    mine = dataset.clients[client]
    enroll.mkdir()
    for split in ("val", "train"):
        for index, clip in enumerate(getattr(mine, split)):
            sf.write(enroll / f"{split}-{index:02d}.wav", clip, rate, subtype="PCM_16")
    clips = {f"genuine-{i}.wav": (clip, f"client {client}") for i, clip in enumerate(mine.test)}
    others = [other for i, other in enumerate(dataset.clients) if i != client][:IMPOSTORS]
    for other in others:
        clips[f"known-{other.identity}.wav"] = (other.test[0], "another known user")
    for stranger in dataset.unknown[:IMPOSTORS]:
        clips[f"unseen-{stranger.identity}.wav"] = (stranger.test[0], "never seen in training")
    test.mkdir()
    for name, (clip, _) in clips.items():
        sf.write(test / name, clip, rate, subtype="PCM_16")
    return {name: who for name, (_, who) in clips.items()}


def report(decisions: list[dict], who: dict[str, str], out: Path) -> dict:
    """Print the accept/reject table and the totals; write them, without the threshold."""
    print(f"\n  {'clip':<24} {'who':<24} {'score':>7}  decision  right?")
    rows = []
    for decision in decisions:
        name = Path(decision["file"]).name
        right = decision["accepted"] == name.startswith("genuine-")
        verdict = "ACCEPT" if decision["accepted"] else "REJECT"
        print(
            f"  {name:<24} {who[name]:<24} {decision['score']:>7.3f}  {verdict:<8}  "
            f"{'right' if right else 'WRONG'}"
        )
        rows.append({"file": name, "who": who[name], "score": decision["score"], "right": right})
        rows[-1]["accepted"] = decision["accepted"]
    genuine = [row for row in rows if row["file"].startswith("genuine-")]
    impostors = [row for row in rows if not row["file"].startswith("genuine-")]
    accepted = sum(row["accepted"] for row in genuine)
    rejected = sum(not row["accepted"] for row in impostors)
    summary = {
        "genuine_accept_rate": accepted / len(genuine),
        "impostor_reject_rate": rejected / len(impostors),
        "mean_genuine_score": sum(row["score"] for row in genuine) / len(genuine),
        "mean_impostor_score": sum(row["score"] for row in impostors) / len(impostors),
        "decisions": rows,
    }
    print(
        f"\n  accept iff score >= {decisions[0]['threshold']:.3f} (the warm-up threshold)\n"
        f"  genuine accepted:   {accepted} of {len(genuine)} "
        f"({summary['genuine_accept_rate']:.0%})\n"
        f"  impostors rejected: {rejected} of {len(impostors)} "
        f"({summary['impostor_reject_rate']:.0%})"
    )
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def quickstart(args: argparse.Namespace) -> dict:
    """The six steps; raises :class:`StepFailed`."""
    sizes = SIZES["small" if args.small else "default"]
    speakers = args.speakers or sizes[0]
    rounds = args.rounds or sizes[1]
    fraction = args.fraction or sizes[2]
    unseen = round(0.2 * speakers)
    if speakers < 5 or not 0 <= args.client < speakers - unseen:
        raise StepFailed(f"need --speakers >= 5 and --client below {speakers - unseen}")
    out, user = args.out, f"client{args.client}"
    data, run_dir, keys = out / "data", out / "run", out / "keys"
    bundle, store, enroll, test = out / "voice.uvb", out / "store", out / "enroll", out / "test"
    prepare(out)

    started = step(
        1,
        f"synthetic voices: {speakers} espeak-ng speakers, {speakers - unseen} of them federated "
        f"clients, {unseen} never seen in training",
    )
    build = ["synth-voices", "--speakers", speakers, "--root", data]
    built = run("uvtrain", "data", "build", *build, capture=True)
    corpus = Path(built.stdout.strip().rsplit(": ", 1)[-1])
    done(started, corpus)

    started = step(
        2,
        f"federated training: FedUV, {rounds} rounds of {fraction:g} of the clients "
        "(each client's clips stay in its own loss; the server averages model updates)",
    )
    settings = ["--rounds", rounds, "--fraction", fraction, "--device", args.device]
    run("uvtrain", "run", *TRAINING, *settings, "--dataset", corpus, "--out", run_dir)
    done(started, run_dir)

    started = step(3, "export: ONNX bundle (log-mel front end inside), checked and signed")
    keys.mkdir()
    run("uvexport", "keygen", "--out", keys / "signing.pem")
    run("uvexport", run_dir, "--out", bundle, "--sign-key", keys / "signing.pem")
    os.environ["UVSDK_TRUSTED_KEYS"] = str(keys / "signing.pub.pem")  # the SDK now checks it
    done(started, bundle, keys / "signing.pub.pem")

    started = step(4, f"the secret codeword of simulated client {args.client}")
    user_id, dataset = provision_codeword(run_dir, args.client, bundle, store, user)
    print(
        f"  Client {args.client} ({dataset.clients[args.client].identity}, server-assigned user "
        f"id {user_id}) trained with a secret BCH codeword: its id bits, then random bits.\n"
        "  Its simulated device now holds that codeword, encrypted. In a real deployment the\n"
        f"  device makes it itself before training: uvsdk codeword new --user-id {user_id}\n"
        "  and it never leaves the device; the server knows the user id only."
    )
    done(started, store / f"{user}.uvt")

    started = step(5, f"enroll client {args.client} on its device: the warm-up threshold")
    who = write_clips(dataset, args.client, enroll, test)
    device = ["--bundle", bundle, "--store", store, "--user", user]  # what the SDK works with
    # FedUV's codeword mode, asked for: by default a bundle enrolls in the mode its run verified
    # better on its own evaluation (prototype unless codeword measured better; uvsdk info says)
    mode = ["--mode", "codeword"]
    enrolled = run("uvsdk", "enroll", "--samples", enroll, *mode, *device, capture=True)
    print("  " + enrolled.stdout.strip().splitlines()[-1])
    if "in codeword mode" not in enrolled.stdout:
        raise StepFailed("enrollment did not use the client's codeword")
    done(started, enroll, store / f"{user}.uvt")

    started = step(6, f"verify {len(who)} clips: genuine, other known users, never-seen speakers")
    options = ["--json", "--no-backoff", *device]
    echo = f"verify {shlex.quote(str(test))}/*.wav {shlex.join(map(str, options))}"
    clips = [test / name for name in sorted(who)]
    verified = run("uvsdk", "verify", *clips, *options, capture=True, ok=(0, 1), echo=echo)
    summary = report(json.loads(verified.stdout), who, out)
    done(started, test, out / "results.json")

    print("\nfiles:")
    for path, what in (
        (corpus, "the corpus: every speaker's train / validation / test clips"),
        (run_dir, "the run: config.json, checkpoint.pt, metrics.jsonl, report.json, roc.png"),
        (keys, "signing.pem (keep it secret) and signing.pub.pem (what apps trust)"),
        (bundle, "the signed model bundle the SDK runs"),
        (store, f"{user}.uvt: the client's codeword and enrollment, encrypted"),
        (enroll, "the enrollment clips (WAV)"),
        (test, "the test clips (WAV): genuine-*, known-*, unseen-*"),
        (out / "results.json", "the table above"),
    ):
        print(f"  {str(path):<44} {what}")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("qs"), help="output folder (replaced)")
    parser.add_argument("--small", action="store_true", help="the small sizes CI runs")
    parser.add_argument("--speakers", type=int, help="synthetic speakers (60; small: 32)")
    parser.add_argument("--rounds", type=int, help="federated rounds (600; small: 200)")
    parser.add_argument("--fraction", type=float, help="of the clients a round (0.25; small: 0.5)")
    parser.add_argument("--client", type=int, default=0, help="the simulated client to enroll")
    parser.add_argument("--device", default="auto", help="training device: auto, cpu or cuda")
    args = parser.parse_args(argv)
    # The passphrase of the template store, for the commands (else uvsdk asks on the terminal).
    os.environ.setdefault("UVSDK_PASSPHRASE", "quickstart passphrase: use your own")
    began = time.perf_counter()
    try:
        summary = quickstart(args)
    except StepFailed as failure:
        print(f"\nquickstart: {failure}", file=sys.stderr)
        return 2
    print(f"\nquickstart finished in {time.perf_counter() - began:.0f} s")
    if summary["mean_genuine_score"] <= summary["mean_impostor_score"]:
        print("quickstart: the genuine clips score no higher than the impostors", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
