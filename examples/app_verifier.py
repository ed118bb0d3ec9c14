"""A desktop-style app that embeds the SDK through ``uvsdk.Verifier``: copy from here.

No microphone: recordings come in as audio files (wav, flac, ogg, ...), given on the command line
or typed at the prompt. The app enrolls its user once, then unlocks or refuses, and turns every
SDK error into one friendly line (exit code 2).

    python examples/app_verifier.py --bundle voice.uvb --store app-data enroll clips/
    python examples/app_verifier.py --bundle voice.uvb --store app-data verify attempt.wav
    python examples/app_verifier.py --bundle voice.uvb --store app-data      # interactive

Without ``--bundle`` the SDK takes ``$UVSDK_BUNDLE``, else the bundle shipped in the package. The
passphrase that protects the stored voice profile comes from ``$UVSDK_PASSPHRASE``, else it is
asked for (``--keyring`` keeps a random key in the OS keyring instead). Exit codes: 0 enrolled or
accepted, 1 rejected, 2 error.
"""

from __future__ import annotations

import argparse
import datetime
import getpass
import os
import sys
from pathlib import Path

from uvsdk import (
    BundleError,
    EnrollmentError,
    KeyUnavailableError,
    LockedOutError,
    MediaError,
    ModelMismatchError,
    NotEnrolledError,
    TemplateError,
    UvsdkError,
    Verifier,
    WrongKeyError,
)

# What to tell the user when a recording cannot be used (MediaError.reason).
RECORDING_PROBLEMS = {
    "too_short": "is too short: record at least a second of speech",
    "too_long": "is too long: keep it under a minute",
    "silent": "is silent: check the microphone",
    "clipped": "is too loud (clipped): move away from the microphone",
    "undecodable": "cannot be read as audio",
    "truncated": "is cut short (an incomplete file)",
    "non_finite": "holds invalid samples",
    "empty": "is empty",
}


def friendly(error: UvsdkError) -> str:
    """One line for the user; the SDK's own message (never a secret) as the detail."""
    if isinstance(error, MediaError):
        return f"That recording {RECORDING_PROBLEMS.get(error.reason, 'cannot be used')} ({error})"
    if isinstance(error, LockedOutError):
        when = datetime.datetime.fromtimestamp(error.until).strftime("%H:%M:%S")
        return f"Too many failed attempts: try again after {when}."
    if isinstance(error, ModelMismatchError):  # before TemplateError, its base class
        return "The voice model was updated since you enrolled: please enroll again."
    if isinstance(error, WrongKeyError):
        return "Wrong passphrase: your voice profile stays locked."
    if isinstance(error, TemplateError):
        return f"Your saved voice profile cannot be read ({error}): delete it and enroll again."
    if isinstance(error, NotEnrolledError):
        return "No voice enrolled yet: run 'enroll' with five or more recordings first."
    if isinstance(error, EnrollmentError):
        return f"Enrollment did not work: {error}"
    if isinstance(error, KeyUnavailableError):
        return f"No passphrase: {error}"
    if isinstance(error, BundleError):
        return f"The voice model cannot be used: {error}"
    return f"Something went wrong: {error}"


def ask_passphrase(confirm: bool) -> str:
    """The app's passphrase dialog (``confirm``: a new profile, so ask twice)."""
    if os.environ.get("UVSDK_PASSPHRASE"):
        return os.environ["UVSDK_PASSPHRASE"]
    if not sys.stdin.isatty():
        raise KeyUnavailableError("set UVSDK_PASSPHRASE or run the app in a terminal")
    first = getpass.getpass("Passphrase for your voice profile: ")
    if confirm and getpass.getpass("Repeat it: ") != first:
        raise KeyUnavailableError("the two passphrases differ")
    return first


def enroll(verifier: Verifier, user: str, sources: list[Path]) -> int:
    """Enroll from a folder (one source) or from a list of files."""
    samples = sources[0] if len(sources) == 1 and sources[0].is_dir() else sources
    report = verifier.enroll(samples, user=user)
    for sample in report.samples:
        if not sample.used:
            print(f"  skipped {Path(sample.file).name}: {sample.detail}")
    print(f"Enrolled {user} from {report.used} recordings ({report.mode} mode).")
    return 0


def verify(verifier: Verifier, user: str, source: Path) -> int:
    """One unlock attempt; it counts towards the failed-attempt back-off."""
    decision = verifier.verify(source, user=user)
    if decision.accepted:
        print(f"Welcome back, {user}. (score {decision.score:.3f})")
        return 0
    print(f"Not recognised. (score {decision.score:.3f})")
    return 1


def ask(prompt: str) -> str:
    """A line from the user; blank at the end of input."""
    try:
        return input(prompt).strip()
    except EOFError:
        return ""


def interactive(verifier: Verifier, user: str) -> int:
    """Read file paths from stdin: enrollment first when needed, then unlock attempts."""
    print(f"Voice unlock with model {verifier.bundle.manifest.name!r}.")
    if user not in verifier.store.users():
        print(f"No voice enrolled for {user}: give five or more recordings, then a blank line.")
        paths = []
        while line := ask("recording> "):
            paths.append(Path(line))
        enroll(verifier, user, paths)
    print("Unlock: give a recording (blank line to quit).")
    while line := ask("attempt> "):
        try:
            verify(verifier, user, Path(line))
        except MediaError as error:  # a bad file: say so, and let the user try another
            print(friendly(error))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundle", type=Path, help="model bundle (default: the SDK's)")
    parser.add_argument("--store", type=Path, help="where voice profiles are kept")
    parser.add_argument("--user", default="default", help="whose voice (default: default)")
    parser.add_argument("--trust", type=Path, action="append", help="publisher's public key")
    parser.add_argument("--keyring", action="store_true", help="key in the OS keyring")
    parser.add_argument("command", nargs="?", choices=["enroll", "verify"])
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args(argv)
    if args.command == "verify" and len(args.files) != 1:
        parser.error("verify takes one recording")
    if args.command == "enroll" and not args.files:
        parser.error("enroll takes a folder or several recordings")

    verifier = Verifier(
        args.bundle,
        store=args.store,
        passphrase=ask_passphrase,
        use_keyring=args.keyring,
        trusted_keys=args.trust,  # None: $UVSDK_TRUSTED_KEYS, else signatures are not checked
    )
    try:
        if args.command == "enroll":
            return enroll(verifier, args.user, args.files)
        if args.command == "verify":
            return verify(verifier, args.user, args.files[0])
        return interactive(verifier, args.user)
    except UvsdkError as error:
        print(f"app: {friendly(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
