"""What a model takes, by modality: one class per kind of input, owning everything that differs.

A bundle's manifest names its ``modality`` and its ``input`` spec; :data:`INPUTS` maps the one
to the class that reads the other (:func:`model_input`), and from then on nobody asks which
modality it is: the input object loads a file into the model's input (:meth:`load`), checks it
(:meth:`check`), trims and cuts it into the model's windows (:meth:`trim`, :meth:`windows`),
states the ONNX contract (:attr:`dtype`, :attr:`onnx_input`, :attr:`dynamic_axes`), makes the
exporter's probe inputs (:meth:`parity_inputs`, :meth:`probe_inputs`, :meth:`random_batch`),
writes a sample back as a file (:meth:`save`) and names the trainer's default backbone for it
(:attr:`default_backbone`: a name, since the SDK imports nothing of the trainer). What the
trainer and the exporter may do with an input is declared once, in :attr:`features`.

Adding a modality is one class here and one entry of :data:`INPUTS`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .errors import BundleError, MediaError
from .media import (
    DEFAULT_MAX_SECONDS,
    check_audio,
    load_audio,
    load_image,
    trim_silence,
    window_starts,
)

WINDOW_SECONDS_RANGE = (0.1, 30.0)
MIN_HOP_SECONDS = 0.05
MAX_WINDOW_SAMPLES = 1 << 20  # one window at most 4 MiB of float32 (65 s at 16 kHz)

AUGMENT = "augment"
"""Feature: training may flip and rotate a sample without changing whose it is."""
INVERSION = "inversion"
"""Feature: the audit's inversion attacks reconstruct this kind of sample (pictures)."""
TRIAL_LIST = "trial-list"
"""Feature: a trial list of recordings (FedHide's VoxCeleb1 protocol) can be scored."""
RECORDING_CONDITIONS = "recording-conditions"
"""Feature: the exporter's simulated recording conditions (noise, rooms, codecs) apply."""

BANDS = ("wide", "narrow")
"""What an audio model's front end hears (``input.band``, spec §3.4): ``wide``, the clip as
recorded (the default, and a manifest without ``band``), or ``narrow``, nothing above 4 kHz (the
band of a telephone chain's 8 kHz sampling), so that telephone and wideband recordings of one
voice score alike. The graph does the band-limiting; the field says so."""


@dataclass(frozen=True)
class AudioInput:
    """Raw mono audio in [-1, 1] at ``sample_rate``, cut into windows (seconds)."""

    modality: ClassVar[str] = "audio"
    suffixes: ClassVar[frozenset[str]] = frozenset(
        {".wav", ".flac", ".ogg", ".oga", ".mp3", ".aiff", ".aif"}
    )
    features: ClassVar[frozenset[str]] = frozenset({TRIAL_LIST, RECORDING_CONDITIONS})
    dtype: ClassVar[type] = np.float32
    onnx_input: ClassVar[tuple[str, int]] = ("tensor(float)", 2)
    dynamic_axes: ClassVar[dict[int, str]] = {1: "samples"}
    default_backbone: ClassVar[str] = "logmel-tdnn"
    """The cheapest audio network that learns here (``logmel-resnet`` and ``fast-resnet34`` are
    the FedHide-style alternatives)."""

    sample_rate: int
    window_seconds: float
    hop_seconds: float
    min_seconds: float
    band: str = "wide"

    def __post_init__(self) -> None:
        if self.band not in BANDS:
            raise BundleError(
                f"manifest: input.band {self.band!r:.40} is not one of {', '.join(BANDS)}"
            )
        if not 1000 <= self.sample_rate <= 384_000:
            raise BundleError(f"manifest: input.sample_rate {self.sample_rate} is not plausible")
        low, high = WINDOW_SECONDS_RANGE
        if not low <= self.window_seconds <= high:
            raise BundleError(
                f"manifest: input.window_seconds {self.window_seconds:g} is outside [{low:g}, {high:g}]"
            )
        if not MIN_HOP_SECONDS <= self.hop_seconds <= self.window_seconds:
            raise BundleError(
                f"manifest: input.hop_seconds {self.hop_seconds:g} is outside "
                f"[{MIN_HOP_SECONDS:g}, window_seconds]"
            )
        if not 0 < self.min_seconds <= self.window_seconds:
            raise BundleError("manifest: input needs 0 < min_seconds <= window_seconds")
        if round(self.window_seconds * self.sample_rate) > MAX_WINDOW_SAMPLES:
            raise BundleError(
                f"manifest: a window of {self.window_seconds:g} s at {self.sample_rate} Hz is "
                f"more than {MAX_WINDOW_SAMPLES} samples"
            )

    @property
    def window_samples(self) -> int:
        """One window, in samples."""
        return round(self.window_seconds * self.sample_rate)

    def describe(self) -> str:
        """One line for ``uvsdk info``."""
        heard = ", heard as narrow band (nothing above 4 kHz)" if self.band == "narrow" else ""
        return (
            f"audio at {self.sample_rate} Hz, windows of {self.window_seconds:g} s "
            f"every {self.hop_seconds:g} s, at least {self.min_seconds:g} s{heard}"
        )

    # -- a sample ------------------------------------------------------------------------------

    def load(self, path: str | Path, *, max_seconds: float = DEFAULT_MAX_SECONDS) -> np.ndarray:
        """A file decoded to mono float32 samples at the model's rate (:func:`load_audio`)."""
        return load_audio(path, self.sample_rate, max_seconds=max_seconds)

    def from_array(self, array: np.ndarray) -> np.ndarray:
        """An already decoded input as the model's samples (1-D float32)."""
        return np.asarray(array, dtype=np.float32).reshape(-1)

    def check(self, sample: np.ndarray, *, name: str, allow_clipped: bool = False) -> None:
        """:func:`check_audio` against ``min_seconds``; clipping passes with ``allow_clipped``."""
        try:
            check_audio(sample, self.sample_rate, min_seconds=self.min_seconds, name=name)
        except MediaError as error:
            if not (allow_clipped and error.reason == "clipped"):
                raise

    def trim(self, sample: np.ndarray) -> np.ndarray:
        """Leading and trailing silence dropped (:func:`trim_silence`), as verification does."""
        return trim_silence(sample, self.sample_rate, min_seconds=self.min_seconds)

    def windows(self, sample: np.ndarray, batch: int | None = None) -> Iterator[np.ndarray]:
        """The model's windows of one clip (:func:`uvsdk.media.audio_windows`: a clip shorter
        than a window is repeat-padded to one), ``batch`` at a time (``None``: all at once), so
        memory stays bounded whatever the clip and hop."""
        width, starts = window_starts(
            sample.size, self.sample_rate, self.window_seconds, self.hop_seconds
        )
        if sample.size < width:
            sample = np.resize(sample, width)
        step = batch or len(starts)
        for first in range(0, len(starts), step):
            yield np.stack([sample[s : s + width] for s in starts[first : first + step]])

    def seconds(self, sample: np.ndarray) -> float | None:
        """How long a sample is, in seconds."""
        return sample.size / self.sample_rate

    def crop_samples(self, seconds: float | None) -> int:
        """A training crop of ``seconds`` in samples (0: no crop)."""
        if not seconds:
            return 0
        return max(1, round(seconds * self.sample_rate))

    def save(self, sample: np.ndarray, stem: Path) -> Path:
        """``sample`` written where :meth:`load` reads it back: ``STEM.wav``, 16-bit PCM."""
        import soundfile

        path = stem.with_suffix(".wav")
        soundfile.write(path, sample, self.sample_rate, subtype="PCM_16")
        return path

    # -- the exporter's probes -----------------------------------------------------------------

    def parity_inputs(self, clips: np.ndarray) -> list[np.ndarray]:
        """Real inputs for an export's torch-vs-ONNX check from test clips: several batch
        sizes and lengths (the last is the example the graph is traced with)."""
        rate, length = self.sample_rate, clips.shape[1]
        return [
            clips[:1],
            clips[1:4, : max(rate // 2, length // 3)],
            clips[4:9, : length // 2 + 123],
        ]

    def probe_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Synthetic inputs for the same check where there is no data (the Flower server): a
        window and a half, then a batch of 2 windows (the traced example)."""
        width = self.window_samples
        return [
            (0.1 * rng.standard_normal((1, width + width // 2))).astype(np.float32),
            (0.1 * rng.standard_normal((2, width))).astype(np.float32),
        ]

    def random_batch(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``count`` random windows of the contract (uniform in [-1, 1])."""
        return rng.uniform(-1, 1, (count, self.window_samples)).astype(np.float32)


@dataclass(frozen=True)
class ImageInput:
    """Raw ``uint8`` pixels, ``height × width × channels``."""

    modality: ClassVar[str] = "image"
    suffixes: ClassVar[frozenset[str]] = frozenset(
        {".png", ".jpg", ".jpeg", ".pgm", ".bmp", ".tif", ".tiff", ".webp"}
    )
    features: ClassVar[frozenset[str]] = frozenset({AUGMENT, INVERSION})
    dtype: ClassVar[type] = np.uint8
    onnx_input: ClassVar[tuple[str, int]] = ("tensor(uint8)", 4)
    dynamic_axes: ClassVar[dict[int, str]] = {}
    window_samples: ClassVar[None] = None

    height: int
    width: int
    channels: int

    def __post_init__(self) -> None:
        if not (0 < self.height <= 4096 and 0 < self.width <= 4096 and self.channels in (1, 3, 4)):
            raise BundleError(
                "manifest: image input needs 0 < height, width <= 4096, channels 1/3/4"
            )

    @property
    def shape(self) -> tuple[int, int, int]:
        """One image: ``(height, width, channels)``."""
        return (self.height, self.width, self.channels)

    @property
    def default_backbone(self) -> str:
        """``mnistuv-conv2d`` below 32 pixels on a side, else ``celeba-conv2d`` (both end in a
        spatial mean, so any size works)."""
        return "mnistuv-conv2d" if min(self.height, self.width) < 32 else "celeba-conv2d"

    def describe(self) -> str:
        """One line for ``uvsdk info``."""
        return f"images {self.height}x{self.width}x{self.channels} (uint8)"

    # -- a sample ------------------------------------------------------------------------------

    def load(self, path: str | Path, *, max_seconds: float = DEFAULT_MAX_SECONDS) -> np.ndarray:
        """A file decoded to ``uint8`` pixels of the model's size (:func:`load_image`)."""
        return load_image(path, self.height, self.width, self.channels)

    def from_array(self, array: np.ndarray) -> np.ndarray:
        """An already decoded input as the model's pixels (``uint8``)."""
        return np.asarray(array, dtype=np.uint8)

    def check(self, sample: np.ndarray, *, name: str, allow_clipped: bool = False) -> None:
        """The image is of the model's shape."""
        if sample.shape != self.shape:
            raise MediaError(
                f"{name}: image of shape {sample.shape} is not the model's", "not_image"
            )

    def trim(self, sample: np.ndarray) -> np.ndarray:
        """An image as it is."""
        return sample

    def windows(self, sample: np.ndarray, batch: int | None = None) -> Iterator[np.ndarray]:
        """One image is one batch of one."""
        yield sample[None]

    def seconds(self, sample: np.ndarray) -> float | None:
        """An image has no duration."""
        return None

    def crop_samples(self, seconds: float | None) -> int:
        """Images are not cropped in time: 0."""
        return 0

    def save(self, sample: np.ndarray, stem: Path) -> Path:
        """``sample`` written where :meth:`load` reads it back: ``STEM.png``."""
        from PIL import Image

        path = stem.with_suffix(".png")
        image = sample[..., 0] if sample.shape[-1] == 1 else sample
        Image.fromarray(np.asarray(image, dtype=np.uint8)).save(path)
        return path

    # -- the exporter's probes -----------------------------------------------------------------

    def parity_inputs(self, clips: np.ndarray) -> list[np.ndarray]:
        """Real inputs for an export's torch-vs-ONNX check from test images: a batch of one
        and of six (the traced example)."""
        return [clips[:1], clips[1:7]]

    def probe_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Synthetic inputs for the same check where there is no data: random images, a batch
        of 1 and of 2 (the traced example)."""
        return [self.random_batch(rng, count) for count in (1, 2)]

    def random_batch(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``count`` random images of the contract."""
        return rng.integers(0, 256, (count, *self.shape), dtype=np.uint8)


ModelInput = AudioInput | ImageInput
"""A model's input (a bundle's ``input``, a dataset's spec)."""

INPUTS: dict[str, type[AudioInput] | type[ImageInput]] = {
    kind.modality: kind for kind in (AudioInput, ImageInput)
}
"""The input class of each modality a manifest may name."""

_FIELD_TYPES = {"int": int, "float": float, "str": str}


def input_fields(kind: type[AudioInput] | type[ImageInput]) -> list[tuple[str, type, Any]]:
    """The spec keys of an input class, their JSON types and their defaults, in order: a key
    whose default is :data:`dataclasses.MISSING` is required, another may be left out (and is
    left out of a spec when it has its default: :func:`input_spec`)."""
    return [(field.name, _FIELD_TYPES[str(field.type)], field.default) for field in fields(kind)]


def input_class(modality: str) -> type[AudioInput] | type[ImageInput]:
    """The input class a modality names: the one place a modality's name is looked up.

    Raises
    ------
    ValueError
        An unknown modality.
    """
    kind = INPUTS.get(modality)
    if kind is None:
        raise ValueError(f"unknown modality {modality!r}; expected 'audio' or 'image'")
    return kind


def model_input(modality: str, spec: Mapping[str, Any]) -> ModelInput:
    """The input of a modality from an input spec (a dataset's, or a deployment's): its keys
    converted to their types, others ignored. The manifest reads its own more strictly
    (:meth:`uvsdk.bundle.Manifest.from_dict`).

    Raises
    ------
    ValueError
        An unknown modality.
    """
    kind = input_class(modality)
    return kind(
        **{
            name: type_(spec[name])
            for name, type_, default in input_fields(kind)
            if name in spec or default is MISSING
        }
    )


def input_spec(source: ModelInput) -> dict[str, Any]:
    """The manifest's ``input`` object (a dataset's spec) of an input: every key but those at
    their default (a wide-band model's manifest has no ``band``, as before spec version 8)."""
    return {
        field.name: getattr(source, field.name)
        for field in fields(source)
        if field.default is MISSING or getattr(source, field.name) != field.default
    }
