"""The ``uvsdk`` command: a thin layer over :class:`uvsdk.Verifier`.

Exit codes: 0 done (every file accepted), 1 at least one file rejected, 2 any error. Errors are
one line on stderr, never a traceback (set ``UVSDK_DEBUG=1`` to see one), and so are usage errors
(a missing argument, a bad option value, an unknown option). Every file name printed has its
control characters escaped, so a name cannot forge an output line.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from .commandline import CONTEXT_SETTINGS, OneLineUsageGroup, reader_gone
from .errors import UvsdkError, printable

#: ``--far``'s default as its help states it: :data:`uvsdk.calibration.DEFAULT_FAR` (not imported
#: here: it brings numpy, and this module is imported for every command and for ``--help``).
FAR_SHOWN = "0.01"


app = typer.Typer(
    name="uvsdk",
    cls=OneLineUsageGroup,
    help="Enroll and verify users on this device with a federatedly trained model.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=CONTEXT_SETTINGS,
)
codeword_app = typer.Typer(help="FedUV codewords (secret, made and kept on this device).")
app.add_typer(codeword_app, name="codeword")

User = Annotated[str, typer.Option("--user", help="User name (letters, digits, . _ -).")]
BundlePath = Annotated[
    Path | None,
    typer.Option(
        "--bundle",
        help="Model bundle (.uvb or folder). Default: $UVSDK_BUNDLE, else the shipped one.",
    ),
]
StoreDir = Annotated[
    Path | None,
    typer.Option(
        "--store", help="Template folder. Default: $UVSDK_STORE, else the user data folder."
    ),
]

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"uvsdk: error: {message}", err=True)
    return typer.Exit(code)


#: What to do next, after the error's own line, by error code (docs/spec.md's codes); USER is the
#: command's --user.
NEXT_STEPS = {
    "template.wrong-passphrase": (
        "type it again, or set UVSDK_PASSPHRASE to the one it was made with; if it is lost, "
        "uvsdk delete --user USER removes the template and you enroll again"
    ),
}


def _error_line(error: UvsdkError, user: str) -> str:
    """The error's message and, where there is one, the next step (:data:`NEXT_STEPS`)."""
    step = NEXT_STEPS.get(error.code)
    return f"{error}: {step.replace('USER', user)}" if step else str(error)


def _errors_to_exit(command: F) -> F:
    """Turn the SDK's errors (and anything unexpected) into one line on stderr and exit 2."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except typer.Exit:
            raise
        except BrokenPipeError:
            raise typer.Exit(reader_gone()) from None
        except UvsdkError as error:
            line = _error_line(error, str(kwargs.get("user", "default")))
            raise _fail(line, error.exit_code) from None
        except KeyboardInterrupt:
            raise _fail("interrupted", 130) from None
        except Exception as error:
            if os.environ.get("UVSDK_DEBUG"):
                raise
            # The message may quote input (a file name, a passphrase byte): escape, shorten.
            detail = printable(" ".join(str(error).split()))[:200]
            raise _fail(f"unexpected {type(error).__name__}: {detail}") from None

    return wrapper  # type: ignore[return-value]


def _verifier(bundle: Path | None, store: Path | None, **options: Any) -> Any:
    from .verifier import Verifier

    keyring_wanted = os.environ.get("UVSDK_KEYRING", "").lower() in ("1", "true", "yes")
    # Read once and dropped from this process's environment, so no child process or crash
    # report inherits it (on Linux /proc/PID/environ keeps the initial block; see docs/sdk.md).
    passphrase = os.environ.pop("UVSDK_PASSPHRASE", None) or None
    freshness = os.environ.get("UVSDK_FRESHNESS") or None  # keyring | file
    return Verifier(
        bundle,
        store=store,
        use_keyring=keyring_wanted,
        passphrase=passphrase,
        freshness=freshness,
        on_lock_wait=lambda line: typer.echo(f"uvsdk: {printable(line)}", err=True),
        **options,
    )


@app.command()
@_errors_to_exit
def enroll(
    samples: Annotated[
        Path, typer.Option("--samples", help="Folder of enrollment clips or images.")
    ],
    user: User = "default",
    bundle: BundlePath = None,
    tpr: Annotated[float, typer.Option("--tpr", help="Target true-positive rate q.")] = 0.95,
    store: StoreDir = None,
    far: Annotated[
        float | None,
        typer.Option(
            "--far",
            help="False-accept rate in (0, 0.5]: the threshold is the bundle's calibrated "
            "threshold at this FAR (when the bundle is calibrated).",
            show_default=FAR_SHOWN,
        ),
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            help="auto | prototype | codeword. auto: by the user's codeword when they hold one "
            "and the bundle is a codeword bundle that does not enroll by prototype (a "
            "DP-trained one does: see uvsdk info); codeword: insist on the codeword.",
        ),
    ] = "auto",
) -> None:
    """Enroll a user from a folder of samples (at least 5 usable).

    With a calibrated bundle the threshold is the bundle's at --far (for a codeword, at least
    the warm-up rule at --tpr); without one, the warm-up rule at --tpr over your own samples.
    """
    # a bad --far: one line, before any work; none given: the Verifier's default
    verifier = _verifier(bundle, store, **({} if far is None else {"far": far}))

    def show(sample: Any) -> None:
        if sample.used:
            extent = (
                f"{sample.seconds:.1f} s, {sample.windows} window(s)" if sample.seconds else "image"
            )
            typer.echo(f"  used     {printable(Path(sample.file).name)}  ({extent})")
        else:
            typer.echo(f"  skipped  {sample.detail}")

    report = verifier.enroll(samples, user=user, target_tpr=tpr, on_sample=show, mode=mode)
    typer.echo(
        f"enrolled {user!r} in {report.mode} mode from {report.used} of {len(report.samples)} "
        f"samples (target TPR {report.target_tpr:g}); template: {printable(str(report.template))}"
    )
    typer.echo(_expected_line(report, verifier.bundle.manifest.calibration))
    if report.advice:
        typer.echo(f"warning: {report.advice}", err=True)


#: what the expected FAR does not cover (docs/model-card.md: a held-out source recorded unlike the
#: calibration accepted 39 % of strangers at the stated 1 %)
UNSEEN_CHAIN = "strangers recorded unlike them can be accepted far more often"


def _expected_line(report: Any, calibration: Any) -> str:
    """One plain sentence: what the FAR and FRR the bundle's calibration expects for this user
    mean (no secret: the user's threshold is not shown)."""
    if not report.calibrated:
        return (
            f"No false-accept rate is stated: this bundle has no calibration for {report.mode} "
            "mode, so what is accepted rests on your own samples alone."
        )
    if report.held_out is not None:
        return _held_out_line(report)
    table = calibration.tables[report.mode]
    conditions = len(table.conditions)
    measured = (
        f"as measured on {table.people} people in {conditions} recording "
        f"condition{'s' if conditions != 1 else ''} (--far {report.far:g}); {UNSEEN_CHAIN}"
    )
    accepted = f"{_one_in(report.expected_far, 'about').capitalize()} attempts by someone else"
    if report.expected_frr is None:
        return f"{accepted} would be accepted, {measured}."
    own = _one_in(report.expected_frr, "about")
    return (
        f"{accepted} would be accepted, and {own} of your own (FRR "
        f"{report.expected_frr.split()[-1]}) rejected, {measured}."
    )


def _held_out_line(report: Any) -> str:
    """The sentence from figures measured held out: what this user's threshold did on people of
    recording chains it was not fitted on (docs/formats.md, ``held_out``)."""
    row = report.held_out
    seconds = f"{report.held_out_seconds:g} s"
    accepted = _one_in(f"{row.far_measured:.6g}", "about").capitalize()
    rejected = _one_in(f"{row.frr:.6g}", "about")
    return (
        f"{accepted} attempts by a stranger recorded like you would be accepted, and {rejected} "
        f"of your own attempts of {seconds} or more rejected (measured on people of "
        f"{report.held_out_chains} recording chains this threshold was not fitted on: "
        f"{_percent(row.far_low)}-{_percent(row.far_high)} and {_percent(row.frr_low)}-"
        f"{_percent(row.frr_high)} by chain; --far {report.far:g} is what held on the people "
        f"it was fitted on; {UNSEEN_CHAIN})."
    )


def _percent(rate: float) -> str:
    return f"{100 * rate:.0f} %" if rate >= 0.1 else f"{100 * rate:.1f} %"


def _one_in(rate: str, plain: str) -> str:
    """``"0.0094"`` as ``"about 1 in 106"``; ``"< 0.005"`` as ``"fewer than 1 in 200"``."""
    qualifier, _, number = rate.rpartition(" ")
    value = float(number)
    words = {"": plain, "<": "fewer than", "<=": "at most", ">=": "at least", ">": "more than"}
    if value <= 0:
        return "possibly some" if qualifier.startswith(">") else "almost none"
    return f"{words.get(qualifier, plain)} 1 in {max(1, round(1 / value))}"


@app.command()
@_errors_to_exit
def verify(
    files: Annotated[
        list[Path],
        # readable=False: an unreadable file is that file's error, not a usage error of the batch
        typer.Argument(help="Clips or images to verify.", readable=False, resolve_path=False),
    ],
    user: User = "default",
    bundle: BundlePath = None,
    store: StoreDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    no_backoff: Annotated[
        bool,
        typer.Option("--no-backoff", help="Do not count attempts (the owner evaluating files)."),
    ] = False,
) -> None:
    """Score files against a user's template: ACCEPT or REJECT for each."""
    verifier = _verifier(bundle, store)
    results, failed = [], False
    for file in files:
        if file.is_dir():  # not an attempt: nothing is scored or counted
            shown = printable(str(file))
            typer.echo(
                f"uvsdk: error: {shown} is a folder: give the files in it, e.g. {shown}/*.wav",
                err=True,
            )
            failed = True
            continue
        try:
            decision = verifier.verify(file, user=user, backoff=not no_backoff)
        except UvsdkError as error:
            typer.echo(f"uvsdk: error: {_error_line(error, user)}", err=True)
            failed = True
            if _stops_the_batch(error):
                break
            continue
        results.append(decision)
        if not as_json:
            verdict = "ACCEPT" if decision.accepted else "REJECT"
            places = _decimals(decision.score, decision.threshold)
            typer.echo(
                f"{verdict}  score={decision.score:.{places}f}  "
                f"threshold={decision.threshold:.{places}f}  {printable(str(file))}"
            )
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "file": d.file,
                        "score": round(d.score, 6),
                        "threshold": round(d.threshold, 6),
                        "accepted": bool(d.accepted),
                    }
                    for d in results
                ],
                indent=2,
            )
        )
    if failed:
        raise typer.Exit(2)
    raise typer.Exit(0 if all(d.accepted for d in results) else 1)


def _decimals(score: float, threshold: float) -> int:
    """Decimal places that show a score apart from its threshold: 4, or more (at most 9) when
    they agree to 4 (issue 47: a model at chance scored 0.9997-1.0000 against threshold=1.0000,
    and four places hid which side each clip fell on)."""
    for places in range(4, 9):
        if f"{score:.{places}f}" != f"{threshold:.{places}f}":
            return places
    return 9


def _stops_the_batch(error: UvsdkError) -> bool:
    """Errors about the user, key or model end a batch; errors about one file do not."""
    from .errors import MediaError

    return not isinstance(error, MediaError)


@codeword_app.command("new")
@_errors_to_exit
def codeword_new(
    user: User = "default",
    user_id: Annotated[
        int | None,
        typer.Option("--user-id", help="Id assigned by the training server (default: random)."),
    ] = None,
    bundle: BundlePath = None,
    store: StoreDir = None,
) -> None:
    """Make this user's secret codeword; it is stored encrypted and never leaves the device."""
    verifier = _verifier(bundle, store)
    chosen = verifier.new_codeword(user=user, user_id=user_id)
    code = verifier.bundle.manifest.code
    typer.echo(
        f"made a secret {code.family.upper()}({code.n},{code.k}) codeword for {user!r} "
        f"with user id {chosen}; it is kept encrypted in {printable(str(verifier.store.path(user)))}. "
        "Give the training server the user id only."
    )


@app.command()
@_errors_to_exit
def info(bundle: BundlePath = None, store: StoreDir = None) -> None:
    """Describe the bundle and list the store's users (no secret is shown)."""
    from .bundle import key_fingerprint
    from .errors import BundleError

    verifier = _verifier(bundle, store)
    try:
        loaded = verifier.bundle
    except BundleError as error:
        if bundle is not None or os.environ.get("UVSDK_BUNDLE"):
            raise
        typer.echo(f"bundle: none ({error})")
    else:
        manifest = loaded.manifest
        typer.echo(f"bundle: {printable(str(loaded.path))}")
        typer.echo(
            f"  name: {printable(manifest.name)}   method: {manifest.method}   "
            f"modality: {manifest.modality}"
        )
        description = manifest.extra.get("description")
        if isinstance(description, str) and description.strip():
            typer.echo(f"  about: {printable(' '.join(description.split()))}")
        typer.echo(f"  input: {manifest.input.describe()}")
        typer.echo(f"  output: {manifest.output_kind}, dim {manifest.dim}")
        if manifest.code is not None:
            code = manifest.code
            typer.echo(
                f"  code: {code.family.upper()}({code.n},{code.k}), d_min {code.d_min}, "
                f"{code.id_bits} id bits"
            )
        typer.echo(f"  model sha256: {manifest.model_sha256}")
        _show_training(manifest)
        _show_calibration(manifest.calibration)
        if manifest.cohort is not None and manifest.score_norm is not None:  # counts only
            norm = manifest.score_norm.describe(manifest.cohort.count)
            typer.echo(f"  score normalisation: {norm} (other people's, no secret)")
        else:
            typer.echo("  score normalisation: none (prototype scores are raw cosines)")
        centre = None if manifest.score_norm is None else manifest.score_norm.centre
        if centre is not None:
            typer.echo(
                f"  recording chain: its mean voice, from {centre.people:,} people, taken out of "
                "every vector before scoring (a population average, no one's voice)"
            )
            release = _centre_release(manifest.extra.get("centre_release"))
            if release:
                typer.echo(f"    {release}")
        if loaded.signed_by:
            typer.echo(f"  signature: verified (key {loaded.signed_by})")
        elif loaded.signature is not None:
            typer.echo(
                "  signature: present, not checked (no trusted keys: set UVSDK_TRUSTED_KEYS)"
            )
        else:
            typer.echo("  signature: none")
        if verifier.trusted_keys:
            from .bundle import load_public_keys

            prints = ", ".join(key_fingerprint(k) for k in load_public_keys(verifier.trusted_keys))
            typer.echo(f"  trusted keys: {prints}")
    users = verifier.store.users()
    typer.echo(f"store: {printable(str(verifier.store.directory))} ({len(users)} template(s))")
    for name in users:
        try:
            stamp = verifier.store.path(name).stat().st_mtime
        except OSError:  # removed since it was listed
            continue
        when = datetime.datetime.fromtimestamp(stamp).astimezone().isoformat(timespec="seconds")
        typer.echo(f"  {name}  (updated {when})")
    for entry, why in verifier.store.ignored():
        typer.echo(f"  ignored: {printable(entry)} ({why})")


def _centre_release(release: object) -> str | None:
    """The line ``info`` prints for a federation's chain mean (the manifest's
    ``centre_release``, docs/formats.md), or ``None`` for anything not of that form."""
    if not isinstance(release, dict) or release.get("source") != "federation":
        return None
    devices, privacy = release.get("devices"), release.get("privacy")
    if type(devices) is not int or devices < 1:
        return None
    if privacy is None:
        return f"measured on {devices:,} devices under SecAgg+, without DP (their exact mean)"
    if not isinstance(privacy, dict):
        return None
    epsilon, delta = privacy.get("epsilon"), privacy.get("delta")
    if not all(type(x) in (int, float) and 0 <= x < math.inf for x in (epsilon, delta)):
        return None
    return (
        f"measured on {devices:,} devices under SecAgg+ with DP: ε = {epsilon:.3g}, "
        f"δ = {delta:.2g} (add-or-remove-one device) against the server and anyone holding "
        "this bundle"
    )


def _show_training(manifest: Any) -> None:
    """How the model was trained and the enrollment mode that follows (public: no user's data).

    Parameters
    ----------
    manifest:
        The bundle's :class:`uvsdk.bundle.Manifest`.
    """
    training = manifest.training
    if training is None:
        typer.echo("  training: not stated")
        default = "codeword when the user holds one" if manifest.code is not None else "prototype"
        typer.echo(f"  enrollment: {default} (--mode to choose)")
        return
    privacy = training.privacy
    guarantee = "without differential privacy" if privacy is None else privacy.describe()
    typer.echo(f"  training: {printable(training.method)}, {guarantee}")
    typer.echo(f"  enrollment: {training.enrollment} by default (--mode to choose)")
    if privacy is not None and manifest.code is not None:
        typer.echo(
            "  codeword mode is bounded by the privacy guarantee: its EER cannot go below "
            f"{privacy.membership_eer_floor:.2g} here; this bundle enrolls by "
            f"{training.enrollment} unless --mode "
            f"{'codeword' if training.enrollment == 'prototype' else 'prototype'}"
        )


def _show_calibration(calibration: Any) -> None:
    """The bundle's calibration table (public: the model's, measured on calibration people)."""
    if calibration is None:
        typer.echo("  calibration: none (each user's own samples set their threshold; no FAR)")
        return
    typer.echo(f"  calibration: {printable(' '.join(calibration.data.split()))}")
    for mode, table in calibration.tables.items():
        trials = f"{table.impostor_trials} impostor"
        if table.genuine_trials:
            trials += f" / {table.genuine_trials} genuine"
        enrolled = f", enrolled on {table.enroll_samples} samples" if table.enroll_samples else ""
        typer.echo(f"    {mode}: {table.people} people{enrolled}, {trials} trials")
        typer.echo(
            f"      {table.score} scores, in {len(table.conditions)} recording condition(s), "
            f"the worst deciding: {', '.join(table.conditions)}"
        )
        for row in table.rows:
            frr = f"  FRR {row.frr:.3f}" if row.frr is not None else ""
            typer.echo(
                f"      FAR {row.far:<7g} at score >= {row.threshold:+.4f}{frr}  "
                f"({row.false_accepts} false accepts)"
            )
        held = table.held_out
        if held is not None:
            typer.echo(
                f"      held out: each of {held.chains} recording chains in turn, the rows "
                f"fitted on the others; FRR on clips of {held.min_seconds:g} s or more "
                "(pooled, lowest-highest chain):"
            )
            for got in held.rows:
                typer.echo(
                    f"      FAR {got.far:<7g} held out: FAR {got.far_measured:.3f} "
                    f"({got.far_low:.3f}-{got.far_high:.3f})  FRR {got.frr:.3f} "
                    f"({got.frr_low:.3f}-{got.frr_high:.3f})"
                )


@app.command()
@_errors_to_exit
def delete(
    user: User = "default",
    store: StoreDir = None,
) -> None:
    """Remove a user's template (their codeword and enrollment) from this device."""
    verifier = _verifier(None, store)
    path = verifier.store.path(user)
    verifier.delete(user)
    typer.echo(f"deleted {user!r} ({printable(str(path))})")


def main() -> None:
    """Console entry point."""
    app(prog_name="uvsdk")


if __name__ == "__main__":
    sys.exit(main())
