"""Resemblyzer's own pipeline as the pretrained peer: embeddings of audio files, in an ``.npz``.

The default voice bundle is Resemblyzer 0.1.4's GE2E encoder ported to ONNX (docs/model-card.md).
This script embeds files the way Resemblyzer itself does — ``resemblyzer.preprocess_wav(path)``
(librosa decoding and resampling to 16 kHz, volume raised to −30 dBFS, webrtcvad silence
trimming), then ``VoiceEncoder("cpu").embed_utterance(wav)`` — so the SDK's figures can be set
beside those of the original.

It has two halves:

- **the worker** (``main``) runs in a separate virtual environment that has ``resemblyzer``
  (set-up: docs/benchmarks.md, "Resemblyzer as the peer"); the project's environment never
  installs it::

      /path/to/venv-resemblyzer/bin/python benchmarks/resemblyzer_peer.py speakers/ --out peer.npz

  Arguments are audio files or folders (every audio file under a folder, e.g. a folder of speaker
  folders), plus ``--files-from LIST`` (one path a line). The ``.npz`` holds ``paths`` and
  ``embeddings`` (row *i* is the unit 256-d vector of ``paths[i]``), ``seconds_in`` and
  ``seconds_out`` (the 16-kHz audio before and after webrtcvad trimming), ``failed_paths`` and
  ``failed_reasons`` (files it could not embed, and why), and ``versions`` (JSON). With
  ``--untrimmed``, also ``embeddings_untrimmed``: ``embed_utterance`` of the same audio before
  trimming, which tells the trimming's share of a difference from the rest.

- **the helper** (:func:`peer_embeddings`), importable from the project's environment (it needs
  only numpy), runs the worker with the peer's python and returns ``{path: vector}``. The peer's
  python is always named, by ``--peer-python`` (:func:`add_peer_argument`) or
  ``$UVSDK_PEER_PYTHON``; there is no silent default.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

try:
    import numpy as np
except ModuleNotFoundError:  # a python without numpy was named as the peer: main() says so
    np = None  # type: ignore[assignment]

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".oga", ".mp3", ".aiff", ".aif"}
PEER_ENV = "UVSDK_PEER_PYTHON"
SETUP_HINT = "set up the peer venv as in docs/benchmarks.md, 'Resemblyzer as the peer'"


# -- the helper (project environment) --------------------------------------------------------


class PeerUnavailable(RuntimeError):
    """No usable peer python was named; the message is one line for the user."""


class PeerEmbeddings(NamedTuple):
    vectors: dict[str, np.ndarray]  # {path: unit vector}, for the files Resemblyzer embedded
    failed: dict[str, str]  # {path: why not}
    seconds: dict[str, tuple[float, float]]  # {path: (seconds before trimming, after)}
    versions: dict[str, str]  # the peer environment's package versions
    untrimmed: dict[str, np.ndarray]  # {path: vector without webrtcvad trimming}, if asked


def add_peer_argument(parser: argparse.ArgumentParser) -> None:
    """``--peer-python PATH`` (default ``$UVSDK_PEER_PYTHON``; neither: no peer)."""
    parser.add_argument(
        "--peer-python",
        default=os.environ.get(PEER_ENV),
        help=f"python of a venv with resemblyzer==0.1.4 (default ${PEER_ENV}; {SETUP_HINT})",
    )


def peer_python(named: str | os.PathLike[str] | None = None) -> str:
    """The peer's python: ``named``, else ``$UVSDK_PEER_PYTHON``; :class:`PeerUnavailable` if
    neither is set or it is not an executable."""
    value = os.fspath(named) if named else os.environ.get(PEER_ENV)
    if not value:
        raise PeerUnavailable(
            f"no Resemblyzer peer: give --peer-python PATH or set {PEER_ENV} ({SETUP_HINT})"
        )
    found = shutil.which(value)
    if found is None:
        raise PeerUnavailable(
            f"Resemblyzer peer python {value!r} is not an executable ({SETUP_HINT})"
        )
    return found


def peer_embeddings(
    files: Iterable[str | os.PathLike[str]],
    python: str | os.PathLike[str] | None = None,
    *,
    threads: int = 1,
    untrimmed: bool = False,
    env: dict[str, str] | None = None,
) -> PeerEmbeddings:
    """Embed ``files`` with Resemblyzer's own pipeline, in the peer's python.

    Keys are ``str(path)`` of each path as given. ``untrimmed`` also embeds each file without
    webrtcvad trimming (:attr:`PeerEmbeddings.untrimmed`; twice the model time). Progress goes to stderr. ``env`` is the
    worker's environment (default: this one without ``PYTHONPATH``/``PYTHONHOME``, which belong to
    the project's interpreter). Raises :class:`PeerUnavailable` when no peer python is named,
    :class:`RuntimeError` when the worker fails as a whole.
    """
    executable = peer_python(python)
    paths = [os.fspath(f) for f in files]
    if env is None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    with tempfile.TemporaryDirectory(prefix="uvsdk-peer-") as work:
        listing, out = Path(work, "files.txt"), Path(work, "peer.npz")
        listing.write_text("".join(p + "\n" for p in paths), encoding="utf-8")
        command = [executable, __file__, "--files-from", str(listing), "--out", str(out)]
        command += ["--threads", str(threads)] + (["--untrimmed"] if untrimmed else [])
        result = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True)
        if result.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"the Resemblyzer peer ({executable}) exited with status {result.returncode}"
                + (f": {result.stdout.strip()}" if result.stdout.strip() else "")
            )
        return read_embeddings(out)


def read_embeddings(path: str | os.PathLike[str]) -> PeerEmbeddings:
    """The worker's ``.npz`` as :class:`PeerEmbeddings`."""
    with np.load(path) as data:
        names = [str(p) for p in data["paths"]]
        vectors = dict(zip(names, np.asarray(data["embeddings"], np.float32), strict=True))
        seconds = {
            name: (float(a), float(b))
            for name, a, b in zip(names, data["seconds_in"], data["seconds_out"], strict=True)
        }
        failed = dict(
            zip(
                (str(p) for p in data["failed_paths"]),
                (str(r) for r in data["failed_reasons"]),
                strict=True,
            )
        )
        versions = json.loads(str(data["versions"]))
        whole = (
            dict(zip(names, np.asarray(data["embeddings_untrimmed"], np.float32), strict=True))
            if "embeddings_untrimmed" in data.files
            else {}
        )
    return PeerEmbeddings(vectors, failed, seconds, versions, whole)


# -- the worker (peer environment) -----------------------------------------------------------


def audio_files(arguments: Sequence[str], files_from: Path | None) -> list[str]:
    """Files as given, folders expanded to their audio files (sorted), ``files_from`` appended."""
    found: list[str] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            found += sorted(
                str(f)
                for f in path.rglob("*")
                if f.suffix.lower() in AUDIO_SUFFIXES and f.is_file()
            )
        else:
            found.append(argument)
    if files_from is not None:
        found += [line for line in files_from.read_text(encoding="utf-8").splitlines() if line]
    return list(dict.fromkeys(found))  # each file once, in order


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": sys.version.split()[0]}
    for package in ("resemblyzer", "librosa", "numpy", "scipy", "torch", "webrtcvad", "soxr"):
        with contextlib.suppress(PackageNotFoundError):
            found[package] = version(package)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="*", help="audio files, or folders of them")
    parser.add_argument("--files-from", type=Path, help="a text file of paths, one a line")
    parser.add_argument("--out", type=Path, required=True, help="the .npz to write")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument(
        "--untrimmed",
        action="store_true",
        help="also embed each file without webrtcvad trimming (``embeddings_untrimmed``)",
    )
    args = parser.parse_args(argv)
    files = audio_files(args.inputs, args.files_from)
    if not files:
        parser.error("no audio files given")
    # Known noise: webrtcvad 2.0.10 imports pkg_resources; librosa announces its audioread
    # fallback, which only files that soundfile cannot read take (a failure is recorded anyway).
    warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
    warnings.filterwarnings("ignore", "PySoundFile failed", UserWarning)
    warnings.filterwarnings("ignore", ".*__audioread_load", FutureWarning)
    try:
        if np is None:
            raise ImportError("no numpy")
        import librosa
        import torch
        from resemblyzer import VoiceEncoder, audio, hparams, preprocess_wav
    except ImportError as error:
        print(f"{sys.executable} cannot import resemblyzer ({error}); {SETUP_HINT}")
        return 2
    torch.set_num_threads(args.threads)
    encoder = VoiceEncoder("cpu", verbose=False)

    def untrimmed(path: str) -> np.ndarray:
        """``preprocess_wav(path)`` up to, not including, its webrtcvad trimming."""
        wav, rate = librosa.load(path, sr=None)
        wav = librosa.resample(wav, orig_sr=rate, target_sr=hparams.sampling_rate)
        return audio.normalize_volume(wav, hparams.audio_norm_target_dBFS, increase_only=True)

    paths, vectors, whole, seconds_in, seconds_out = [], [], [], [], []
    failed, reasons = [], []
    started = time.perf_counter()
    for number, path in enumerate(files, 1):
        try:
            wav = preprocess_wav(path)
            if wav.size == 0:
                raise ValueError("no speech left after webrtcvad trimming")
            vector = encoder.embed_utterance(wav)
            if not np.all(np.isfinite(vector)):
                raise ValueError("non-finite embedding")
            before = untrimmed(path)
            if args.untrimmed:
                whole.append(np.asarray(encoder.embed_utterance(before), np.float32))
        except Exception as error:  # noqa: BLE001 - one bad file is recorded, the rest go on
            failed.append(path)
            reasons.append(f"{type(error).__name__}: {error}".splitlines()[0])
        else:
            paths.append(path)
            vectors.append(np.asarray(vector, np.float32))
            seconds_in.append(before.size / hparams.sampling_rate)
            seconds_out.append(wav.size / hparams.sampling_rate)
        print(
            f"\r  resemblyzer: {number}/{len(files)} files ({time.perf_counter() - started:.0f} s)",
            end="",
            file=sys.stderr,
            flush=True,
        )
    print(file=sys.stderr)

    args.out.parent.mkdir(parents=True, exist_ok=True)

    def stacked(rows: list[np.ndarray]) -> np.ndarray:
        return np.stack(rows) if rows else np.zeros((0, hparams.model_embedding_size), np.float32)

    extra = {"embeddings_untrimmed": stacked(whole)} if args.untrimmed else {}
    with open(args.out, "wb") as handle:  # a handle: np.savez would append ".npz" to a bare name
        np.savez(
            handle,
            paths=np.array(paths, dtype=str),
            embeddings=stacked(vectors),
            **extra,
            seconds_in=np.array(seconds_in, np.float64),
            seconds_out=np.array(seconds_out, np.float64),
            failed_paths=np.array(failed, dtype=str),
            failed_reasons=np.array(reasons, dtype=str),
            versions=np.array(json.dumps(_versions())),
        )
    print(f"{len(paths)} embedded, {len(failed)} failed: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
