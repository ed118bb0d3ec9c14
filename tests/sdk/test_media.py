"""Tests of uvsdk.media: audio and image decoding, checks and windowing."""

from __future__ import annotations

import io
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from uvsdk.errors import MediaError
from uvsdk.media import DEFAULT_MAX_SECONDS, audio_windows, check_audio, load_audio, load_image

SR = 16000


def tone(freq: float = 440.0, sr: int = SR, seconds: float = 1.0, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(sr * seconds)) / sr
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def write(path: Path, x: np.ndarray, sr: int = SR, **kwargs) -> Path:
    sf.write(path, x, sr, **kwargs)
    return path


def write_bytes(x: np.ndarray, fmt: str, subtype: str, sr: int = SR) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, sr, format=fmt, subtype=subtype)
    return buf.getvalue()


def peak_hz(x: np.ndarray, sr: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / sr)[np.argmax(spectrum)])


def reason(excinfo: pytest.ExceptionInfo[MediaError]) -> str:
    return excinfo.value.reason


# ---------------------------------------------------------------------------------------------
# load_audio: formats


def test_wav_16bit_mono_round_trip(tmp_path):
    x = tone()
    y = load_audio(write(tmp_path / "a.wav", x, subtype="PCM_16"), SR)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, x, atol=1 / 32768)


def test_stereo_is_mixed_to_mono_by_mean(tmp_path):
    left, right = tone(440.0), tone(1000.0, amp=0.25)
    y = load_audio(write(tmp_path / "s.wav", np.stack([left, right], axis=1), subtype="FLOAT"), SR)
    assert y.ndim == 1
    np.testing.assert_allclose(y, (left + right) / 2, atol=1e-6)


def test_many_channels_are_averaged(tmp_path):
    x = np.tile(tone()[:, None], (1, 6)) * np.linspace(0.1, 1.0, 6, dtype=np.float32)
    y = load_audio(write(tmp_path / "m.wav", x, subtype="FLOAT"), SR)
    np.testing.assert_allclose(y, x.mean(axis=1), atol=1e-6)


@pytest.mark.parametrize(
    ("subtype", "atol"),
    [("PCM_U8", 1 / 64), ("PCM_24", 1e-6), ("PCM_32", 1e-6), ("FLOAT", 0), ("DOUBLE", 1e-7)],
)
def test_wav_bit_depths(tmp_path, subtype, atol):
    x = tone()
    y = load_audio(write(tmp_path / "d.wav", x, subtype=subtype), SR)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, x, atol=atol)


@pytest.mark.parametrize("sr_in", [8000, 22050, 44100, 48000])
def test_resampled_to_target_rate_keeps_pitch(tmp_path, sr_in):
    y = load_audio(write(tmp_path / "r.wav", tone(sr=sr_in), sr_in, subtype="PCM_16"), SR)
    assert y.dtype == np.float32
    assert abs(len(y) - SR) <= 1
    assert abs(peak_hz(y, SR) - 440.0) <= 1.0


@pytest.mark.parametrize(("suffix", "subtype"), [(".flac", "PCM_16"), (".ogg", "VORBIS")])
def test_flac_and_ogg_decode(tmp_path, suffix, subtype):
    x = tone()
    y = load_audio(write(tmp_path / f"c{suffix}", x, subtype=subtype), SR)
    assert y.dtype == np.float32 and abs(len(y) - len(x)) <= 1
    assert abs(peak_hz(y, SR) - 440.0) <= 1.0
    if suffix == ".flac":
        np.testing.assert_allclose(y, x, atol=1 / 32768)


def test_format_is_detected_from_content_not_name(tmp_path):
    x = tone()
    y = load_audio(write(tmp_path / "really_flac.wav", x, format="FLAC", subtype="PCM_16"), SR)
    np.testing.assert_allclose(y, x, atol=1 / 32768)


def test_streaming_wav_size_placeholders_are_not_truncation(tmp_path):
    # Encoders writing to a pipe leave 0xFFFFFFFF in the RIFF and data sizes.
    data = bytearray(write_bytes(tone(), "WAV", "PCM_16"))
    data[4:8] = data[40:44] = struct.pack("<I", 0xFFFFFFFF)
    (tmp_path / "pipe.wav").write_bytes(bytes(data))
    assert len(load_audio(tmp_path / "pipe.wav", SR)) == SR


# ---------------------------------------------------------------------------------------------
# load_audio: failures


def test_text_file_named_wav_is_undecodable(tmp_path):
    path = tmp_path / "notes.wav"
    path.write_text("this is not audio\n" * 20)
    with pytest.raises(MediaError, match=r"^notes\.wav: ") as e:
        load_audio(path, SR)
    assert reason(e) == "undecodable"
    assert "\n" not in str(e.value) and str(tmp_path) not in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(MediaError, match=r"^gone\.wav: no such file$") as e:
        load_audio(tmp_path / "gone.wav", SR)
    assert reason(e) == "undecodable"


def test_directory_is_refused(tmp_path):
    (tmp_path / "dir.wav").mkdir()
    with pytest.raises(MediaError, match="not a regular file") as e:
        load_audio(tmp_path / "dir.wav", SR)
    assert reason(e) == "undecodable"


@pytest.mark.parametrize(("fmt", "suffix"), [("WAV", ".wav"), ("AIFF", ".aiff"), ("W64", ".w64")])
def test_truncated_file(tmp_path, fmt, suffix):
    data = write_bytes(tone(seconds=2.0), fmt, "PCM_16")
    path = tmp_path / f"cut{suffix}"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(MediaError, match=r"^cut\.\w+: truncated") as e:
        load_audio(path, SR)
    assert reason(e) == "truncated"


@pytest.mark.parametrize(("fmt", "subtype"), [("FLAC", "PCM_16"), ("OGG", "VORBIS")])
def test_truncated_compressed_file_is_refused(tmp_path, fmt, subtype):
    data = write_bytes(tone(seconds=2.0), fmt, subtype)
    path = tmp_path / "cut.bin"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(MediaError) as e:
        load_audio(path, SR)
    assert reason(e) in {"truncated", "undecodable"}


def test_header_only_wav_is_truncated(tmp_path):
    # The header promises 2 s of samples and none follow: the honest word is "truncated".
    data = write_bytes(tone(seconds=2.0), "WAV", "PCM_16")
    (tmp_path / "head.wav").write_bytes(data[:44])
    with pytest.raises(MediaError) as e:
        load_audio(tmp_path / "head.wav", SR)
    assert reason(e) == "truncated"


def test_wav_with_no_samples_is_empty(tmp_path):
    path = write(tmp_path / "empty.wav", np.zeros(0, np.float32), subtype="PCM_16")
    with pytest.raises(MediaError, match="empty") as e:
        load_audio(path, SR)
    assert reason(e) == "empty"


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_float_wav(tmp_path, bad):
    x = tone()
    x[1234] = bad
    with pytest.raises(MediaError, match="NaN or infinite") as e:
        load_audio(write(tmp_path / "nan.wav", x, subtype="FLOAT"), 8000)  # before resampling
    assert reason(e) == "non_finite"


def test_max_seconds_boundary(tmp_path):
    assert (
        len(load_audio(write(tmp_path / "ok.wav", tone(seconds=2.0)), SR, max_seconds=2)) == 2 * SR
    )
    with pytest.raises(MediaError, match=r"^long\.wav: 2\.1 s long, at most 2 s accepted$") as e:
        load_audio(write(tmp_path / "long.wav", tone(seconds=2.1)), SR, max_seconds=2)
    assert reason(e) == "too_long"


def test_one_hour_file_is_refused_with_bounded_memory(tmp_path):
    path = tmp_path / "hour.wav"
    block = (tone(seconds=62.5) * 32767).astype(np.int16)  # 1e6 frames
    with sf.SoundFile(path, "w", SR, 1, "PCM_16") as f:
        for start in range(0, 3600 * SR, len(block)):
            f.write(block[: 3600 * SR - start])
    assert path.stat().st_size > 100e6
    tracemalloc.start()
    try:
        with pytest.raises(MediaError, match=r"^hour\.wav: 3600\.0 s long, at most 60 s") as e:
            load_audio(path, SR)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert reason(e) == "too_long"
    assert DEFAULT_MAX_SECONDS == 60.0
    assert peak < 50e6


def test_length_unknown_from_header_is_bounded_by_the_read(tmp_path):
    # A FLAC whose STREAMINFO says "total samples unknown": only the bounded read can tell.
    data = bytearray(write_bytes(tone(seconds=10.0), "FLAC", "PCM_16"))
    assert data[:4] == b"fLaC"
    data[21] &= 0xF0
    data[22:26] = bytes(4)
    path = tmp_path / "stream.flac"
    path.write_bytes(bytes(data))
    tracemalloc.start()
    try:
        with pytest.raises(MediaError, match=r"^stream\.flac: longer than 3 s") as e:
            load_audio(path, SR, max_seconds=3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert reason(e) == "too_long"
    assert peak < 3 * 4 * SR + 4e6  # the 3 s allowed, plus a block


# ---------------------------------------------------------------------------------------------
# check_audio


def test_check_audio_accepts_good_audio():
    check_audio(tone(), SR, min_seconds=0.5, name="good.wav")


def test_check_audio_too_short():
    with pytest.raises(MediaError) as e:
        check_audio(tone(seconds=0.31), SR, min_seconds=0.5, name="clip.wav")
    assert reason(e) == "too_short"
    assert str(e.value) == "clip.wav: too short: 0.31 s of audio, at least 0.50 s needed"


@pytest.mark.parametrize("x", [np.zeros(SR, np.float32), tone(amp=5e-4)], ids=["zeros", "-69dB"])
def test_check_audio_silent(x):
    with pytest.raises(MediaError, match=r"^quiet\.wav: silent") as e:
        check_audio(x, SR, min_seconds=0.5, name="quiet.wav")
    assert reason(e) == "silent"


def test_check_audio_clipped_is_the_last_check():
    x = np.clip(tone(amp=2.0), -1, 1)
    with pytest.raises(MediaError, match=r"^loud\.wav: clipped") as e:
        check_audio(x, SR, min_seconds=0.5, name="loud.wav")
    assert reason(e) == "clipped"
    with pytest.raises(MediaError) as e:  # clipped and too short: too short wins
        check_audio(x[:1000], SR, min_seconds=0.5)
    assert reason(e) == "too_short"
    x[:100] = 1.0  # under 1 % clipped is tolerated
    check_audio(np.concatenate([tone(), x[:100]]), SR, min_seconds=0.5)


def test_check_audio_non_finite_comes_first():
    x = np.zeros(10, np.float32)
    x[3] = np.nan
    with pytest.raises(MediaError) as e:
        check_audio(x, SR, min_seconds=0.5)
    assert reason(e) == "non_finite"


def test_check_audio_empty_is_too_short_or_silent():
    with pytest.raises(MediaError) as e:
        check_audio(np.zeros(0, np.float32), SR, min_seconds=0.5)
    assert reason(e) == "too_short"
    with pytest.raises(MediaError) as e:
        check_audio(np.zeros(0, np.float32), SR, min_seconds=0.0)
    assert reason(e) == "silent"


# ---------------------------------------------------------------------------------------------
# audio_windows (sample rate 10: a 1 s window is 10 samples, a 0.5 s hop is 5)


@pytest.mark.parametrize(
    ("length", "starts"),
    [
        (10, [0]),
        (20, [0, 5, 10]),
        (23, [0, 5, 10, 13]),  # end-aligned tail
        (25, [0, 5, 10, 15]),  # already reaches the end: no duplicate
        (11, [0, 1]),
    ],
)
def test_audio_windows_positions(length, starts):
    x = np.arange(length, dtype=np.float32)
    w = audio_windows(x, 10, 1.0, 0.5)
    assert w.dtype == np.float32 and w.shape == (len(starts), 10)
    np.testing.assert_array_equal(w, np.stack([x[s : s + 10] for s in starts]))


def test_audio_windows_hop_longer_than_window_still_covers_the_end():
    x = np.arange(35, dtype=np.float32)
    w = audio_windows(x, 10, 1.0, 2.0)
    np.testing.assert_array_equal(w[:, 0], [0, 20, 25])


def test_audio_windows_short_clip_is_repeat_padded():
    w = audio_windows(np.arange(1, 5, dtype=np.float64), 10, 1.0, 0.5)
    assert w.dtype == np.float32
    np.testing.assert_array_equal(w, [[1, 2, 3, 4, 1, 2, 3, 4, 1, 2]])


def test_audio_windows_realistic_shape():
    w = audio_windows(tone(seconds=5.5), SR, 2.0, 1.0)
    assert w.shape == (5, 2 * SR)  # starts 0, 1, 2, 3 s and the tail at 3.5 s


@given(
    length=st.integers(1, 400),
    window=st.integers(1, 60),
    hop=st.integers(1, 60),
)
@settings(max_examples=150, deadline=None)
def test_audio_windows_cover_every_sample(length, window, hop):
    x = np.arange(length, dtype=np.float32)
    w = audio_windows(x, 1, float(window), float(hop))
    assert w.shape[1] == window
    if length <= window:
        assert w.shape[0] == 1 and set(w[0].tolist()) == set(x.tolist())
        return
    starts = w[:, 0].astype(int)
    assert starts[0] == 0 and starts[-1] == length - window
    assert len(set(starts.tolist())) == len(starts)
    for s, row in zip(starts, w, strict=True):
        np.testing.assert_array_equal(row, x[s : s + window])
    assert np.all(np.diff(starts) <= max(hop, 1))


# ---------------------------------------------------------------------------------------------
# load_image


def save(img: Image.Image, path: Path, **kwargs) -> Path:
    img.save(path, **kwargs)
    return path


def test_png_rgb_same_size_is_exact(tmp_path):
    rng = np.random.default_rng(0)
    px = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
    out = load_image(save(Image.fromarray(px), tmp_path / "a.png"), 24, 32, 3)
    assert out.dtype == np.uint8 and out.shape == (24, 32, 3)
    np.testing.assert_array_equal(out, px)


def test_rgba_is_composited_over_white(tmp_path):
    px = np.zeros((8, 8, 4), np.uint8)
    px[..., 0] = 200  # red, fully transparent on the left, opaque on the right
    px[:, 4:, 3] = 255
    path = save(Image.fromarray(px, "RGBA"), tmp_path / "t.png")
    out = load_image(path, 8, 8, 3)
    np.testing.assert_array_equal(out[:, :4], 255)
    np.testing.assert_array_equal(out[:, 4:], np.broadcast_to([200, 0, 0], (8, 4, 3)))
    grey = load_image(path, 8, 8, 1)
    assert grey.shape == (8, 8, 1) and (grey[:, :4] == 255).all()
    rgba = load_image(path, 8, 8, 4)
    assert rgba.shape == (8, 8, 4) and (rgba[:, :4, 3] == 0).all()


def test_greyscale_jpeg_to_three_channels(tmp_path):
    px = np.tile(np.linspace(0, 255, 40).astype(np.uint8), (30, 1))
    out = load_image(save(Image.fromarray(px, "L"), tmp_path / "g.jpg", quality=95), 30, 40, 3)
    assert out.shape == (30, 40, 3)
    assert (out[..., 0] == out[..., 1]).all() and (out[..., 1] == out[..., 2]).all()
    assert np.abs(out[..., 0].astype(int) - px).max() <= 8


def test_pgm_to_one_channel(tmp_path):
    px = np.arange(16 * 16, dtype=np.uint8).reshape(16, 16)
    out = load_image(save(Image.fromarray(px, "L"), tmp_path / "g.pgm"), 16, 16, 1)
    assert out.shape == (16, 16, 1) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[..., 0], px)


@pytest.mark.parametrize("transparent", [False, True])
def test_palette_png(tmp_path, transparent):
    img = Image.new("P", (6, 6), 1)
    img.putpalette([0, 0, 0, 10, 20, 30] + [0] * 762)
    img.putpixel((0, 0), 0)
    kwargs = {"transparency": 0} if transparent else {}
    out = load_image(save(img, tmp_path / "p.png", **kwargs), 6, 6, 3)
    assert out.shape == (6, 6, 3)
    np.testing.assert_array_equal(out[5, 5], [10, 20, 30])
    np.testing.assert_array_equal(out[0, 0], [255, 255, 255] if transparent else [0, 0, 0])


def test_16bit_greyscale_png_is_scaled_not_clipped(tmp_path):
    px = np.array([[0, 257 * 100, 65535, 1000]], dtype=np.uint16)
    path = save(Image.fromarray(px), tmp_path / "d.png")
    with Image.open(path) as image:
        assert image.mode.startswith("I")
    out = load_image(path, 1, 4, 1)
    np.testing.assert_array_equal(out[0, :, 0], [0, 100, 255, 4])
    assert load_image(path, 1, 4, 3).shape == (1, 4, 3)


@pytest.mark.parametrize("mode", ["1", "LA", "CMYK", "I", "F"])
def test_other_modes(tmp_path, mode):
    img = Image.new(mode, (9, 7))
    suffix = ".tiff" if mode in {"CMYK", "I", "F"} else ".png"
    out = load_image(save(img, tmp_path / f"m{suffix}"), 5, 5, 3)
    assert out.shape == (5, 5, 3) and out.dtype == np.uint8


@pytest.mark.parametrize(("h", "w", "c"), [(17, 29, 3), (29, 17, 1), (1, 1, 4), (64, 3, 3)])
def test_odd_sizes(tmp_path, h, w, c):
    rng = np.random.default_rng(1)
    img = Image.fromarray(rng.integers(0, 256, (53, 37, 3), dtype=np.uint8))
    out = load_image(save(img, tmp_path / "o.png"), h, w, c)
    assert out.shape == (h, w, c) and out.dtype == np.uint8


def test_aspect_ratio_kept_by_centre_crop(tmp_path):
    px = np.zeros((100, 300, 3), np.uint8)
    px[:, :100, 0] = 255
    px[:, 100:200, 1] = 255
    px[:, 200:, 2] = 255
    out = load_image(save(Image.fromarray(px), tmp_path / "wide.png"), 50, 50, 3)
    np.testing.assert_array_equal(out[:, 2:-2], np.broadcast_to([0, 255, 0], (50, 46, 3)))


def test_exif_orientation_is_applied(tmp_path):
    px = np.zeros((20, 40, 3), np.uint8)
    px[:10] = [255, 0, 0]  # stored: top half red, bottom half blue
    px[10:] = [0, 0, 255]
    exif = Image.Exif()
    exif[0x0112] = 6  # display rotated 90 degrees clockwise
    path = save(Image.fromarray(px), tmp_path / "rot.png", exif=exif)
    out = load_image(path, 40, 20, 3)
    np.testing.assert_array_equal(out[:, 0], np.broadcast_to([0, 0, 255], (40, 3)))
    np.testing.assert_array_equal(out[:, -1], np.broadcast_to([255, 0, 0], (40, 3)))


def test_random_bytes_named_png(tmp_path):
    path = tmp_path / "noise.png"
    path.write_bytes(np.random.default_rng(2).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    with pytest.raises(MediaError, match=r"^noise\.png: not an image") as e:
        load_image(path, 8, 8, 3)
    assert reason(e) == "not_image"


@pytest.mark.parametrize(("fmt", "suffix"), [("PNG", ".png"), ("JPEG", ".jpg")])
def test_truncated_image(tmp_path, fmt, suffix):
    px = np.random.default_rng(3).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(px).save(buf, fmt)
    path = tmp_path / f"cut{suffix}"
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(MediaError, match=r"^cut\.\w+: ") as e:
        load_image(path, 8, 8, 3)
    assert reason(e) == "truncated"


def test_decompression_bomb_is_refused(tmp_path, monkeypatch):
    path = save(Image.new("L", (100, 100)), tmp_path / "bomb.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # Pillow refuses above twice this
    with pytest.raises(MediaError, match=r"^bomb\.png: image too large") as e:
        load_image(path, 8, 8, 3)
    assert reason(e) == "undecodable"


def test_missing_image(tmp_path):
    with pytest.raises(MediaError, match=r"^x\.png: no such file$"):
        load_image(tmp_path / "x.png", 8, 8, 3)


def test_bad_channel_count(tmp_path):
    with pytest.raises(ValueError):
        load_image(tmp_path / "x.png", 8, 8, 2)


# ---------------------------------------------------------------------------------------------
# Property-based: arbitrary bytes either decode to a valid array or raise MediaError


def wav_header(channels: int, rate: int, bits: int, tag: int, riff: int, data: int) -> bytes:
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block & 0xFFFFFFFF, block, bits)
    return (
        b"RIFF" + struct.pack("<I", riff) + b"WAVE"
        b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", data)
    )


u32 = st.integers(0, 2**32 - 1)
wav_headers = st.builds(
    wav_header,
    channels=st.sampled_from([0, 1, 2, 3, 8, 255]),
    rate=st.sampled_from([0, 1, 8000, 16000, 44100, 768000, 10**9, 2**32 - 1]),
    bits=st.sampled_from([0, 1, 8, 12, 16, 24, 32, 64]),
    tag=st.sampled_from([0, 1, 2, 3, 6, 7, 0xFFFE, 0x1234]),
    riff=u32,
    data=u32,
)
SMALL_WAV = write_bytes(tone(seconds=0.05), "WAV", "PCM_16")


def png_bytes(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


SMALL_PNG = png_bytes(Image.new("RGB", (5, 4), (9, 8, 7)))


@st.composite
def mutated(draw, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 8))):
        out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
    return bytes(out[: draw(st.integers(0, len(out)))])


audio_bytes = st.one_of(
    st.binary(max_size=2048),
    st.tuples(wav_headers, st.binary(max_size=2048)).map(b"".join),
    mutated(SMALL_WAV),
)
image_bytes = st.one_of(
    st.binary(max_size=2048),
    st.binary(max_size=2048).map(lambda b: b"\x89PNG\r\n\x1a\n" + b),
    mutated(SMALL_PNG),
)


@given(data=audio_bytes)
@settings(max_examples=150, deadline=None)
def test_load_audio_never_raises_anything_but_media_error(tmp_path_factory, data):
    path = tmp_path_factory.getbasetemp() / "fuzz.wav"
    path.write_bytes(data)
    try:
        y = load_audio(path, SR, max_seconds=5)
    except MediaError as e:
        assert "\n" not in str(e) and str(e).startswith("fuzz.wav: ")
        return
    assert y.dtype == np.float32 and y.ndim == 1 and len(y) > 0 and np.isfinite(y).all()


@given(data=image_bytes)
@settings(max_examples=150, deadline=None)
def test_load_image_never_raises_anything_but_media_error(tmp_path_factory, data):
    path = tmp_path_factory.getbasetemp() / "fuzz.png"
    path.write_bytes(data)
    try:
        out = load_image(path, 6, 5, 3)
    except MediaError as e:
        assert "\n" not in str(e) and str(e).startswith("fuzz.png: ")
        return
    assert out.dtype == np.uint8 and out.shape == (6, 5, 3)


@given(x=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), max_size=300))
@settings(max_examples=150, deadline=None)
def test_check_audio_raises_only_media_error(x):
    try:
        check_audio(np.array(x, np.float32), 100, min_seconds=0.5)
    except MediaError as e:
        assert e.reason in {"non_finite", "out_of_range", "too_short", "silent", "clipped"}


def test_trim_silence_cuts_leading_and_trailing_silence_only() -> None:
    from uvsdk.media import trim_silence

    rate = 16000
    rng = np.random.default_rng(0)
    tone = 0.3 * np.sin(2 * np.pi * 220 * np.arange(rate) / rate)
    quiet = 1e-4 * rng.standard_normal(rate)  # -80 dBFS: far more than 25 dB below the tone
    clip = np.concatenate([quiet, tone, quiet[: rate // 2], tone, quiet]).astype(np.float32)
    trimmed = trim_silence(clip, rate)
    # 1 s + 0.5 s (a pause inside is kept) + 1 s, with 0.1 s of margin on each side
    assert abs(trimmed.size - round(2.7 * rate)) <= 0.025 * rate
    assert np.array_equal(trim_silence(tone, rate), tone.astype(np.float32))  # nothing to trim
    short = np.concatenate([quiet, tone[: rate // 10], quiet]).astype(np.float32)
    assert trim_silence(short, rate, min_seconds=0.5).size == rate // 2  # never below the minimum
    assert trim_silence(short, rate).size < rate // 2


def test_load_image_cuts_to_a_box_within_the_image(tmp_path):
    """``box`` (left, top, width, height) is cut before the resize, clipped to the image; a box
    outside the image is a MediaError."""
    pixels = np.zeros((20, 30, 3), np.uint8)
    pixels[5:15, 10:20] = (255, 0, 0)
    path = tmp_path / "face.png"
    Image.fromarray(pixels).save(path)
    face = load_image(path, 4, 4, 3, box=(10, 5, 10, 10))
    assert np.all(face == (255, 0, 0))
    clipped = load_image(path, 4, 4, 3, box=(25, -5, 20, 20))  # only x 25-29, y 0-14 exist
    assert np.all(clipped == 0)
    assert not np.all(load_image(path, 4, 4, 3) == (255, 0, 0))
    with pytest.raises(MediaError, match="outside"):
        load_image(path, 4, 4, 3, box=(40, 0, 5, 5))
