"""The model's input as a type (uvsdk.inputs): one class per modality owns what differs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from uvsdk.errors import BundleError, MediaError
from uvsdk.inputs import INPUTS, AudioInput, ImageInput, input_spec, model_input
from uvsdk.media import audio_windows

AUDIO = AudioInput(sample_rate=16000, window_seconds=2.0, hop_seconds=1.0, min_seconds=0.5)
IMAGE = ImageInput(height=28, width=28, channels=3)


def test_a_modality_names_its_class_and_a_spec_builds_it() -> None:
    assert {name: kind.modality for name, kind in INPUTS.items()} == {
        "audio": "audio",
        "image": "image",
    }
    spec = {"sample_rate": 16000, "window_seconds": 2, "hop_seconds": 1, "min_seconds": 0.5}
    assert model_input("audio", {**spec, "other": 1}) == AUDIO
    assert input_spec(AUDIO) == {**spec, "window_seconds": 2.0, "hop_seconds": 1.0}
    assert model_input("image", input_spec(IMAGE)) == IMAGE
    with pytest.raises(ValueError, match="unknown modality 'video'"):
        model_input("video", spec)


def test_the_band_is_optional_wide_by_default_and_written_only_when_narrow() -> None:
    """``input.band`` (spec §3.4): a spec without it is wide band, as every manifest before
    spec version 8 is, and a wide input's spec leaves it out, so those manifests stay as they
    were; ``narrow`` is kept and said."""
    spec = input_spec(AUDIO)
    assert AUDIO.band == "wide" and "band" not in spec
    narrow = model_input("audio", {**spec, "band": "narrow"})
    assert narrow.band == "narrow" and input_spec(narrow) == {**spec, "band": "narrow"}
    assert narrow.describe().endswith(", heard as narrow band (nothing above 4 kHz)")
    assert "band" not in AUDIO.describe()
    with pytest.raises(
        BundleError, match=r"^manifest: input.band 'fm' is not one of wide, narrow$"
    ):
        model_input("audio", {**spec, "band": "fm"})


@pytest.mark.parametrize("seconds", [0.7, 2.0, 4.3, 9.9])
def test_audio_windows_are_the_media_windows_in_any_batches(seconds: float) -> None:
    clip = np.random.default_rng(1).uniform(-0.5, 0.5, round(seconds * 16000)).astype(np.float32)
    expected = audio_windows(clip, 16000, 2.0, 1.0)
    for batch in (None, 1, 3):
        pieces = list(AUDIO.windows(clip, batch))
        assert all(len(piece) <= (batch or len(expected)) for piece in pieces)
        np.testing.assert_array_equal(np.concatenate(pieces), expected)


def test_an_image_is_one_window_and_checked_for_its_shape() -> None:
    image = np.zeros((28, 28, 3), np.uint8)
    (only,) = IMAGE.windows(image)
    assert only.shape == (1, 28, 28, 3) and IMAGE.seconds(image) is None
    with pytest.raises(MediaError, match="not the model's") as error:
        IMAGE.check(np.zeros((28, 28, 1), np.uint8), name="x.png")
    assert error.value.reason == "not_image"


def test_a_clipped_clip_passes_only_when_clipping_is_allowed() -> None:
    clip = np.sin(np.linspace(0, 800, 16000)).astype(np.float32)  # a full-scale sine: clipped
    AUDIO.check(clip, name="loud.wav", allow_clipped=True)
    with pytest.raises(MediaError) as error:
        AUDIO.check(clip, name="loud.wav")
    assert error.value.reason == "clipped"


def test_a_saved_sample_loads_back(tmp_path: Path) -> None:
    clip = (0.3 * np.sin(np.linspace(0, 400, 24000))).astype(np.float32)
    path = AUDIO.save(clip, tmp_path / "clip")
    assert path.suffix == ".wav" and path.suffix in AudioInput.suffixes
    np.testing.assert_allclose(AUDIO.load(path), clip, atol=1e-4)
    pixels = np.random.default_rng(2).integers(0, 256, (28, 28, 3), dtype=np.uint8)
    path = IMAGE.save(pixels, tmp_path / "face")
    assert path.suffix in ImageInput.suffixes
    np.testing.assert_array_equal(IMAGE.load(path), pixels)


def test_the_default_backbone_the_contract_and_the_features() -> None:
    assert AUDIO.default_backbone == "logmel-tdnn"
    assert IMAGE.default_backbone == "mnistuv-conv2d"
    assert ImageInput(64, 64, 3).default_backbone == "celeba-conv2d"
    assert (AUDIO.dtype, AUDIO.onnx_input, AUDIO.dynamic_axes) == (
        np.float32,
        ("tensor(float)", 2),
        {1: "samples"},
    )
    assert (IMAGE.dtype, IMAGE.onnx_input, IMAGE.dynamic_axes) == (
        np.uint8,
        ("tensor(uint8)", 4),
        {},
    )
    assert "augment" in IMAGE.features and "augment" not in AUDIO.features
    assert "trial-list" in AUDIO.features and "inversion" in IMAGE.features
    assert AUDIO.crop_samples(0.5) == 8000 and AUDIO.crop_samples(0) == 0
    assert IMAGE.crop_samples(0.5) == 0


def test_probe_inputs_are_the_contract_s() -> None:
    """What the Flower server and the ORT check probe the exported graph with (their arrays are
    part of a bundle's recorded parity, so they stay as they were)."""
    rng = np.random.default_rng(7)
    width = 32000
    expected = [
        (0.1 * rng.standard_normal((1, width + width // 2))).astype(np.float32),
        (0.1 * rng.standard_normal((2, width))).astype(np.float32),
    ]
    for got, want in zip(AUDIO.probe_inputs(np.random.default_rng(7)), expected, strict=True):
        np.testing.assert_array_equal(got, want)
    rng = np.random.default_rng(7)
    expected = [rng.integers(0, 256, size=(n, 28, 28, 3), dtype=np.uint8) for n in (1, 2)]
    for got, want in zip(IMAGE.probe_inputs(np.random.default_rng(7)), expected, strict=True):
        np.testing.assert_array_equal(got, want)
    clips = np.zeros((9, 32000), np.float32)
    shapes = [batch.shape for batch in AUDIO.parity_inputs(clips)]
    assert shapes == [(1, 32000), (3, 10666), (5, 16123)]
