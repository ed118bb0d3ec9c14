"""``uvexport``: a trained run folder → a signed ``.uvb`` bundle, and Ed25519 signing keys.

    uvexport RUN_DIR --out NAME.uvb [--sign-key KEY.pem] [--quantize none|int8]
    uvexport keygen --out KEY.pem
    uvexport default-voice --out sdk/uvsdk/data/default.uvb [--work DIR] [--rounds N]

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
    parser.add_argument(
        "--quantize",
        choices=("none", "int8"),
        default="none",
        help="int8: write the fastest int8 scheme that is not slower than float32 and moves no "
        "score by more than the drift bound (both measured here); fail when none is",
    )
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
    result = export_run(args.run_dir, args.out, sign_key=key, quantize=args.quantize)
    print(
        f"wrote {result.path} ({result.size_bytes / 1e6:.2f} MB{', signed' if key else ''}) in "
        f"{result.seconds:.1f} s; ONNX Runtime vs torch max abs difference "
        f"{result.max_abs_diff:.2e}"
    )
    q = result.quantization
    if q.get("scheme", "none") != "none":
        print(
            f"int8 {q['scheme']}: {q['int8_ms']:.2f} ms vs float32 {q['fp32_ms']:.2f} ms per "
            f"input ({q['speedup']:.2f}x; wall {q['int8_wall_ms']:.2f} vs "
            f"{q['fp32_wall_ms']:.2f} ms), score drift {q['score_drift']:.4f} (bound "
            f"{q['drift_bound']:g}), model {q['int8_bytes'] / 1e6:.2f} MB vs "
            f"{q['fp32_bytes'] / 1e6:.2f} MB"
        )
        for c in q["candidates"]:
            if "error" in c:
                print(f"  {c['scheme']:<16} failed: {c['error']}")
            else:
                print(
                    f"  {c['scheme']:<16} {c['int8_ms']:6.2f} ms  "
                    f"{q['fp32_ms'] / c['int8_ms']:5.2f}x  drift {c['score_drift']:.4f}  "
                    f"{c['bytes'] / 1e6:.2f} MB"
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


def _default_voice(arguments: Sequence[str]) -> None:
    from .default_voice import RECIPE, build_default_voice

    parser = argparse.ArgumentParser(
        prog="uvexport default-voice",
        description="Rebuild the default voice bundle shipped in the uvsdk wheel.",
    )
    parser.add_argument("--out", type=Path, required=True, help="the bundle to write (.uvb)")
    parser.add_argument(
        "--work", type=Path, default=Path("default-voice-work"), help="data and run folder"
    )
    parser.add_argument("--wheel", type=Path, help="local Resemblyzer wheel (no download)")
    parser.add_argument(
        "--rounds",
        type=int,
        help=f"FedHide rounds that adapt the encoder (recipe: {RECIPE['rounds']})",
    )
    parser.add_argument("--speakers", type=int, help=f"recipe: {RECIPE['speakers']}")
    args = parser.parse_args(arguments)
    result = build_default_voice(
        args.out, work=args.work, wheel=args.wheel, rounds=args.rounds, speakers=args.speakers
    )
    print(
        f"wrote {result.path} ({result.size_bytes / 1e6:.2f} MB) in {result.seconds:.1f} s; "
        f"ONNX Runtime vs torch max abs difference {result.max_abs_diff:.2e}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        if arguments[:1] == ["keygen"]:
            _keygen(arguments[1:])
        elif arguments[:1] == ["default-voice"]:
            _default_voice(arguments[1:])
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
