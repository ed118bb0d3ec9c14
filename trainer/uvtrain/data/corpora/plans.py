"""The plan of each corpus loader under a protocol (:func:`plan_corpus`)."""

from __future__ import annotations

from pathlib import Path

from ..protocol import DataProtocol, Plan
from .celeba_corpus import celeba_sources
from .cifar100_corpus import cifar100_sources
from .common import MNIST_UV_DIGITS, _folder
from .mnist_uv_corpus import FEMNIST_LAYOUT, _femnist_digits, _femnist_files, mnist_uv_sources
from .vggface2_corpus import vggface2_sources
from .voxceleb import voxceleb1_sources, voxceleb2_sources


def plan_corpus(name: str, root: Path, protocol: DataProtocol, seed: int = 0) -> Plan:
    """The plan the loader of corpus ``name`` decodes under ``protocol`` (the same index and
    choice, nothing decoded): which identities are known with which train/validation/test items,
    which are unknown with which items. MNIST-UV's items are example numbers."""
    if name == "mnist-uv":
        _folder(root, "mnist-uv", FEMNIST_LAYOUT)
        writers = _femnist_digits(_femnist_files(root), MNIST_UV_DIGITS, True, False)
        sources = mnist_uv_sources(writers, MNIST_UV_DIGITS, protocol.samples_per_split)
    elif name == "cifar-100":
        sources = cifar100_sources(root)[1]
    else:
        finders = {
            "voxceleb1": voxceleb1_sources,
            "voxceleb2": voxceleb2_sources,
            "celeba": celeba_sources,
            "vggface2": vggface2_sources,
        }
        sources = finders[name](root)
    return sources.plan(name, protocol, seed)
