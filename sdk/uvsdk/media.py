"""Decoding of the SDK's inputs: audio files to mono float32, images to uint8 pixels.

This is the only preprocessing outside the model (feature extraction lives inside the ONNX graph):
decode, mix to mono, resample, window (audio); decode, orient, convert, resize and crop (images).
The trainer reads its files through these same functions, so training and the device see the same
samples. Every failure is a :class:`~uvsdk.errors.MediaError` whose one-line message names the file
and whose ``reason`` says what was wrong.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import BinaryIO

import numpy as np
import soundfile as sf
import soxr
from PIL import Image, ImageOps

from uvsdk.errors import MediaError
from uvsdk.errors import printable as _printable

__all__ = [
    "DEFAULT_MAX_SECONDS",
    "MAX_PEAK",
    "audio_windows",
    "check_audio",
    "load_audio",
    "load_image",
    "trim_silence",
]

DEFAULT_MAX_SECONDS = 60.0
"""Longest audio file accepted by default, in seconds."""

MAX_SAMPLE_RATE = 768_000
"""Highest input sample rate accepted (anything above is a corrupt or hostile header)."""

SILENCE_RMS = 1e-3
"""RMS level below which audio counts as silent (-60 dBFS)."""

CLIP_LEVEL = 0.999
"""Magnitude at or above which a sample counts as clipped."""

MAX_CLIPPED_FRACTION = 0.01
"""Largest fraction of clipped samples tolerated."""

MAX_PEAK = 2.0
"""Largest sample magnitude accepted (+6 dBFS). Float files may go a little over full scale
(and resampling overshoots); anything far beyond is not normalised audio, and values near the
float32 limit (3e38) overflow inside any model."""

_BLOCK_VALUES = 1 << 18  # samples (frames x channels) decoded per read: about 1 MiB of float32
# A chunk line of libsndfile's log: a chunk id (4 characters, at the start of the line) and its
# size; an indented field (``  Bytes/sec : 32000 (should be 2)``) is no chunk and no truncation.
_SHORTFALL = re.compile(r"^(\S[^:\n]{0,3}?)\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)
# WAV encodings decoded (docs/spec.md §5.1): bits per sample by format code, PCM and IEEE float
_WAV_BITS = {1: (8, 16, 24, 32), 3: (32, 64)}
_WAV_EXTENSIBLE = 0xFFFE
_WAV_MAX_CHUNKS = 4096  # chunks looked at before the fmt chunk; a real file has a few
_STREAMING_SIZE = 0xFFFFFFFF  # size placeholder written by streaming encoders; not a truncation
_UNKNOWN_FRAMES = 2**63 - 1  # what libsndfile reports when the header does not give the length


def _check_file(path: Path) -> None:
    if not path.exists():
        raise MediaError(f"{_printable(path.name)}: no such file", reason="undecodable")
    if not path.is_file():
        raise MediaError(f"{_printable(path.name)}: not a regular file", reason="undecodable")


def _check_wav_header(raw: BinaryIO, name: str) -> None:
    """Refuse a RIFF/WAVE file whose PCM or float encoding the spec does not admit (§5.1):
    8, 16, 24 or 32 bits per sample (PCM), 32 or 64 (float), and a block align of channels ×
    bits / 8. libsndfile reads 12-bit samples as 16-bit ones and guesses a block align of 0;
    the TypeScript port refuses both, and so does this, before libsndfile sees the file. Other
    WAV formats (μ-law, A-law, ADPCM) and other containers are left to libsndfile."""
    size = os.fstat(raw.fileno()).st_size
    head = raw.read(12)
    at = 12
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:] != b"WAVE":
        return
    for _ in range(_WAV_MAX_CHUNKS):
        if at + 8 > size:
            return
        raw.seek(at)
        chunk = raw.read(8)
        length = int.from_bytes(chunk[4:8], "little")
        if chunk[:4] == b"data":
            return
        if chunk[:4] == b"fmt ":
            fmt = raw.read(min(length, 40))
            if len(fmt) < 16:
                return  # libsndfile refuses it
            code, channels = int.from_bytes(fmt[0:2], "little"), int.from_bytes(fmt[2:4], "little")
            align, bits = int.from_bytes(fmt[12:14], "little"), int.from_bytes(fmt[14:16], "little")
            if code == _WAV_EXTENSIBLE and len(fmt) >= 26:
                code = int.from_bytes(fmt[24:26], "little")  # the sub-format GUID's first bytes
            if code in _WAV_BITS and (bits not in _WAV_BITS[code] or align != channels * bits // 8):
                raise MediaError(
                    f"{name}: not a readable audio file (unsupported WAV encoding: format {code}, "
                    f"{bits} bits, block align {align})",
                    reason="undecodable",
                )
            return
        at += 8 + length + (length & 1)


def _truncation(extra_info: str) -> str | None:
    """Describe the last chunk libsndfile found to claim more bytes than the file holds, if any.

    libsndfile reads such files silently, only logging e.g. ``data : 64000 (should be 31978)``.
    """
    short = [
        f"{chunk.strip()} chunk: {declared} bytes announced, {actual} present"
        for chunk, declared, actual in _SHORTFALL.findall(extra_info)
        if int(actual) < int(declared) < _STREAMING_SIZE
    ]
    return short[-1] if short else None


def load_audio(
    path: str | os.PathLike[str], sample_rate: int, *, max_seconds: float = DEFAULT_MAX_SECONDS
) -> np.ndarray:
    """Decode an audio file to mono float32 samples at ``sample_rate``.

    Any format and sample encoding libsndfile reads (WAV, FLAC, Ogg Vorbis, AIFF, ...; 8- to 32-bit
    integer or float; any channel count) is accepted. Channels are averaged to mono, then the signal
    is resampled with soxr (``"HQ"``) when its rate differs from ``sample_rate``.

    Memory stays bounded whatever the file: it is decoded in small blocks, and never more than
    ``ceil(max_seconds * rate) + 1`` frames are read, so a long file (or one whose header lies about
    its length) is refused without being read whole.

    Parameters
    ----------
    path
        The audio file.
    sample_rate
        Sample rate of the returned signal, in Hz.
    max_seconds
        Longest duration accepted.

    Returns
    -------
    numpy.ndarray
        1-D float32 samples, nominally in [-1, 1].

    Raises
    ------
    MediaError
        ``undecodable`` (missing file, not audio, decoder error), ``truncated`` (the file is shorter
        than its header says), ``too_long``, ``empty`` (no samples), ``non_finite`` (NaN or
        infinite samples) or ``too_short`` (too few samples to resample to a single one).
    """
    path = Path(path)
    name = _printable(path.name)
    _check_file(path)
    try:
        # Opened by Python, not by libsndfile: any file name the OS accepts works (libsndfile
        # needs it encodable as UTF-8), and a permission error is reported as such.
        with open(path, "rb") as raw:
            _check_wav_header(raw, name)
            raw.seek(0)
            return _decode(raw, name, sample_rate, max_seconds)
    except (RuntimeError, OSError, ValueError, TypeError, EOFError) as e:
        if isinstance(e, OSError) and e.strerror:
            detail = e.strerror  # not str(e): that repeats the full path
        else:
            detail = str(getattr(e, "error_string", "") or e).strip().rstrip(".")
        raise MediaError(f"{name}: not a readable audio file ({detail})", "undecodable") from e


def _decode(raw: BinaryIO, name: str, sample_rate: int, max_seconds: float) -> np.ndarray:
    """:func:`load_audio` of the open file ``raw``, through libsndfile."""
    with sf.SoundFile(raw) as f:
        rate, channels = f.samplerate, f.channels
        shortfall = _truncation(f.extra_info)
        if shortfall:
            raise MediaError(
                f"{name}: truncated: the file is shorter than its header says ({shortfall})",
                reason="truncated",
            )
        if not 0 < rate <= MAX_SAMPLE_RATE:
            raise MediaError(f"{name}: unsupported sample rate {rate} Hz", reason="undecodable")
        if f.frames != _UNKNOWN_FRAMES and f.frames > max_seconds * rate:
            raise MediaError(
                f"{name}: {f.frames / rate:.1f} s long, at most {max_seconds:g} s accepted",
                reason="too_long",
            )
        limit = math.ceil(max_seconds * rate) + 1
        block_frames = max(1, _BLOCK_VALUES // channels)
        parts: list[np.ndarray] = []
        count = 0
        while count < limit:
            block = f.read(min(block_frames, limit - count), dtype="float32", always_2d=True)
            if len(block) == 0:
                break
            if not np.isfinite(block).all():
                raise MediaError(f"{name}: contains NaN or infinite samples", "non_finite")
            mono = block[:, 0] if channels == 1 else block.mean(axis=1, dtype=np.float64)
            parts.append(mono.astype(np.float32))
            count += len(block)

    if count == 0:
        raise MediaError(f"{name}: empty: the file holds no audio samples", reason="empty")
    if count > max_seconds * rate:
        raise MediaError(
            f"{name}: longer than {max_seconds:g} s, which is the most accepted", "too_long"
        )
    samples = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if rate != sample_rate:
        samples = soxr.resample(samples, rate, sample_rate, "HQ")
        if len(samples) == 0:
            raise MediaError(
                f"{name}: too short to use: {count} sample(s) at {rate} Hz", "too_short"
            )
    return np.ascontiguousarray(samples, dtype=np.float32)


def check_audio(
    samples: np.ndarray, sample_rate: int, *, min_seconds: float, name: str = "audio"
) -> None:
    """Check that decoded audio is usable, raising on the first problem found.

    The checks run in this order: non-finite samples, out of range, too short, silent, clipped.
    ``clipped`` comes
    last so that a caller that tolerates clipping (verification does) knows every other check passed
    when it catches it.

    Parameters
    ----------
    samples
        1-D samples, as returned by :func:`load_audio`.
    sample_rate
        Their sample rate, in Hz.
    min_seconds
        Shortest duration accepted.
    name
        What to call the audio in messages (usually the file name).

    Raises
    ------
    MediaError
        ``non_finite``, ``out_of_range`` (a sample beyond ±2, +6 dBFS), ``too_short``, ``silent``
        (RMS below -60 dBFS) or ``clipped`` (more than 1 % of samples at or above 0.999 in
        magnitude).
    """
    x = np.asarray(samples)
    if x.ndim != 1:
        raise ValueError(f"expected 1-D samples, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise MediaError(f"{name}: contains NaN or infinite samples", reason="non_finite")
    peak = float(np.max(np.abs(x))) if len(x) else 0.0
    if peak > MAX_PEAK:
        raise MediaError(
            f"{name}: samples reach {peak:.3g}, far outside [-1, 1]: not normalised audio",
            reason="out_of_range",
        )
    seconds = len(x) / sample_rate
    if seconds < min_seconds:
        raise MediaError(
            f"{name}: too short: {seconds:.2f} s of audio, at least {min_seconds:.2f} s needed",
            reason="too_short",
        )
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if len(x) else 0.0
    if rms < SILENCE_RMS:
        level = f"{20 * math.log10(rms):.0f} dBFS" if rms > 0 else "digital silence"
        raise MediaError(f"{name}: silent: level {level}, below -60 dBFS", reason="silent")
    clipped = float(np.mean(np.abs(x) >= CLIP_LEVEL))
    if clipped > MAX_CLIPPED_FRACTION:
        raise MediaError(
            f"{name}: clipped: {clipped:.1%} of samples at full scale, at most 1% tolerated",
            reason="clipped",
        )


TRIM_FRAME_SECONDS = 0.025
TRIM_TOP_DB = 25.0
TRIM_MARGIN_SECONDS = 0.1
"""Silence trimming (:func:`trim_silence`): 25-ms frames, a frame is speech when its energy is
within 25 dB of the loudest frame's, and 0.1 s of margin is kept on each side. Measured on the
KLettres voices (docs/model-card.md): 40 dB trimmed too little, 15-20 dB too much."""


def trim_silence(
    samples: np.ndarray,
    sample_rate: int,
    *,
    min_seconds: float = 0.0,
    top_db: float = TRIM_TOP_DB,
    frame_seconds: float = TRIM_FRAME_SECONDS,
    margin_seconds: float = TRIM_MARGIN_SECONDS,
) -> np.ndarray:
    """Drop leading and trailing silence (the middle is kept as it is).

    Frames of ``frame_seconds`` whose mean energy is within ``top_db`` of the loudest frame's
    count as speech; the clip is cut from the first such frame to the end of the last, with
    ``margin_seconds`` kept on each side. The result is never shorter than ``min_seconds`` (the
    span is widened around its centre, within the clip), so a clip that passed
    :func:`check_audio` stays usable. This is the SDK's only trimming: enrollment, verification
    and calibration all embed through it, and a port must do the same (docs/formats.md).
    """
    x = np.asarray(samples, dtype=np.float32)
    frame = max(1, round(frame_seconds * sample_rate))
    count = len(x) // frame
    if count < 2:
        return x
    energy = np.mean(np.square(x[: count * frame].reshape(count, frame), dtype=np.float64), axis=1)
    level = 10.0 * np.log10(np.maximum(energy, 1e-20))
    speech = np.flatnonzero(level >= level.max() - top_db)
    margin = round(margin_seconds * sample_rate)
    start = max(0, int(speech[0]) * frame - margin)
    stop = min(len(x), (int(speech[-1]) + 1) * frame + margin)
    if stop - start == len(x):
        return x
    need = min(len(x), math.ceil(min_seconds * sample_rate))
    if stop - start < need:
        centre = (start + stop) // 2
        start = max(0, min(centre - need // 2, len(x) - need))
        stop = start + need
    return x[start:stop]


def audio_windows(
    samples: np.ndarray, sample_rate: int, window_seconds: float, hop_seconds: float
) -> np.ndarray:
    """Cut a clip into fixed-length windows covering all of it.

    Windows start at 0, hop, 2·hop, ... while they fit; when the last of them stops short of the
    end, one more window aligned to the end of the clip is added, so the tail is always covered.

    A clip shorter than one window is repeat-padded (tiled from its start) to exactly one window.
    Repetition rather than zero padding is the usual choice in speaker-verification toolkits: it
    keeps the window's spectral statistics those of speech instead of diluting them with silence.
    Checking that a clip is long enough to use at all is :func:`check_audio`'s job, not this one's.

    Parameters
    ----------
    samples
        1-D samples, not empty.
    sample_rate
        Their sample rate, in Hz.
    window_seconds, hop_seconds
        Window length and hop, in seconds.

    Returns
    -------
    numpy.ndarray
        float32 array of shape ``[n_windows, round(window_seconds * sample_rate)]``.
    """
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim != 1 or len(x) == 0:
        raise ValueError(f"expected non-empty 1-D samples, got shape {x.shape}")
    width, starts = window_starts(len(x), sample_rate, window_seconds, hop_seconds)
    if len(x) <= width:
        return np.resize(x, width)[None, :]
    return np.stack([x[s : s + width] for s in starts])


def window_starts(
    length: int, sample_rate: int, window_seconds: float, hop_seconds: float
) -> tuple[int, list[int]]:
    """The window width and the start of every window of :func:`audio_windows`, in samples.

    Lets a caller cut and embed the windows a batch at a time (bounded memory). A clip no longer
    than one window has the single start 0 (it is repeat-padded to the width).
    """
    width = round(window_seconds * sample_rate)
    hop = round(hop_seconds * sample_rate)
    if width < 1 or hop < 1:
        raise ValueError("window and hop must each be at least one sample long")
    if length <= width:
        return width, [0]
    starts = list(range(0, length - width + 1, hop))
    if starts[-1] + width < length:
        starts.append(length - width)
    return width, starts


_TARGET_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def _to_mode(img: Image.Image, mode: str) -> Image.Image:
    """Convert any Pillow image to ``mode``, compositing transparency over white."""
    if img.mode.startswith("I"):
        # 16/32-bit greyscale: Pillow's own conversion clips to 255; scale the 16-bit range instead.
        values = np.asarray(img, dtype=np.float64)
        if img.mode.startswith("I;16") or values.max(initial=0) > 255:
            values = values / 257.0
        img = Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), "L")
    elif img.mode == "F":
        img = Image.fromarray(np.clip(np.rint(np.asarray(img)), 0, 255).astype(np.uint8), "L")
    has_alpha = img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info
    if has_alpha and mode != "RGBA":
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(white, rgba)
    return img if img.mode == mode else img.convert(mode)


def _cut(img: Image.Image, box: tuple[int, int, int, int]) -> Image.Image:
    """``img`` cut to ``box`` (left, top, width, height), within the image's bounds."""
    left, top, box_width, box_height = box
    right = min(img.width, left + box_width)
    bottom = min(img.height, top + box_height)
    left, top = max(0, left), max(0, top)
    if right <= left or bottom <= top:
        raise ValueError(f"the box {box} lies outside the {img.width}x{img.height} image")
    return img.crop((left, top, right, bottom))


def load_image(
    path: str | os.PathLike[str],
    height: int,
    width: int,
    channels: int,
    box: tuple[int, int, int, int] | None = None,
) -> np.ndarray:
    """Decode an image to uint8 pixels of the given size.

    The image is rotated upright by its EXIF orientation, converted from any mode (greyscale,
    palette, 16-bit, CMYK, with or without alpha) to ``L``, ``RGB`` or ``RGBA`` for 1, 3 or 4
    channels, with transparency composited over white when the target has no alpha, cut to
    ``box`` when one is given, then resized to cover ``width`` x ``height`` keeping its aspect
    ratio (bicubic) and centre-cropped.

    Parameters
    ----------
    path
        The image file (any format Pillow reads).
    height, width
        Output size, in pixels.
    channels
        1 (greyscale), 3 (RGB) or 4 (RGBA).
    box
        ``(left, top, box_width, box_height)`` in the upright image's pixels (a face detector's
        box), cut to the image's bounds; ``None``: the whole image.

    Returns
    -------
    numpy.ndarray
        uint8 array of shape ``[height, width, channels]``.

    Raises
    ------
    MediaError
        ``not_image`` when the file is not an image Pillow recognises, ``truncated`` when its data
        stops early, ``undecodable`` when it is missing, corrupt or too large to decode safely
        (Pillow's decompression-bomb limit).
    """
    if channels not in _TARGET_MODES:
        raise ValueError(f"channels must be 1, 3 or 4, got {channels}")
    if height < 1 or width < 1:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    path = Path(path)
    name = _printable(path.name)
    _check_file(path)
    try:
        with Image.open(path) as img:
            img.load()  # decode now, so truncated or corrupt data fails here
            img = ImageOps.exif_transpose(img)
            img = _to_mode(img, _TARGET_MODES[channels])
            if box is not None:
                img = _cut(img, box)
            img = ImageOps.fit(img, (width, height), method=Image.Resampling.BICUBIC)
            pixels = np.array(img, dtype=np.uint8)
    except Image.UnidentifiedImageError as e:
        raise MediaError(f"{name}: not an image (format not recognised)", "not_image") from e
    except Image.DecompressionBombError as e:
        raise MediaError(f"{name}: image too large to decode safely ({e})", "undecodable") from e
    except Exception as e:  # Pillow's decoders raise many exception types on corrupt input
        detail = " ".join(str(e).split()) or type(e).__name__
        why = "truncated" if "truncated" in detail.lower() else "undecodable"
        raise MediaError(f"{name}: cannot decode image ({detail})", why) from e
    return pixels.reshape(height, width, channels)
