"""``uvexport``: a trained run folder → a signed ``.uvb`` bundle, and Ed25519 signing keys.

    uvexport RUN_DIR --out NAME.uvb [--sign-key KEY.pem]
    uvexport keygen --out KEY.pem

Errors are one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _export(arguments: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="uvexport",
        description="Export a uvtrain run folder to a .uvb bundle (ONNX, parity-checked).",
        epilog="uvexport keygen --out KEY.pem makes an Ed25519 signing key.",
    )
    parser.add_argument("run_dir", type=Path, help="the uvtrain run folder")
    parser.add_argument("--out", type=Path, required=True, help="the bundle to write (.uvb)")
    parser.add_argument("--sign-key", type=Path, help="Ed25519 private key (PEM) to sign with")
    args = parser.parse_args(arguments)
    from .bundle import load_signing_key
    from .export import export_run

    key = None
    if args.sign_key is not None:
        try:
            key = load_signing_key(args.sign_key)
        except (OSError, ValueError) as error:
            message = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise SystemExit(
                f"uvexport: cannot use {args.sign_key} as a signing key: {message}"
            ) from None
    result = export_run(args.run_dir, args.out, sign_key=key)
    print(
        f"wrote {result.path} ({result.size_bytes / 1e6:.2f} MB{', signed' if key else ''}) in "
        f"{result.seconds:.1f} s; ONNX Runtime vs torch max abs difference "
        f"{result.max_abs_diff:.2e}"
    )


def _keygen(arguments: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="uvexport keygen", description="Make an Ed25519 key.")
    parser.add_argument("--out", type=Path, required=True, help="private key file (PEM)")
    args = parser.parse_args(arguments)
    from .bundle import generate_signing_key, save_signing_key

    try:
        private, public = save_signing_key(generate_signing_key(), args.out)
    except FileExistsError:
        raise SystemExit(f"uvexport: {args.out} exists; not overwritten") from None
    print(f"private key: {private} (keep it secret)\npublic key:  {public} (give it to apps)")


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        if arguments[:1] == ["keygen"]:
            _keygen(arguments[1:])
        else:
            _export(arguments)
    except SystemExit as stop:
        if isinstance(stop.code, str):  # our one-line errors
            print(stop.code, file=sys.stderr)
            return 2
        return int(stop.code or 0)  # argparse: --help is 0, a usage error is 2
    except Exception as error:  # noqa: BLE001 - every failure is one line and exit 2
        from .export import ExportError

        prefix = "" if isinstance(error, ExportError) else f"{type(error).__name__}: "
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"uvexport: {prefix}{message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
