"""``vectors/media.json``: input checks, silence trimming, windows (spec §5.2–§5.4)."""

from __future__ import annotations

import math
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from uvsdk.media import check_audio, load_audio, trim_silence, window_starts

from .shared import b64, document, f32_b64, outcome, start_of, wav


def generate() -> dict[str, Any]:
    rate = 8000  # the checks at a low rate keep the file small; they depend on no rate
    seconds = 0.6
    count = int(seconds * rate)
    rng = np.random.default_rng(1)
    speech = wav("speaker0-0.wav")[::2][:count]
    tone = (0.3 * np.sin(2 * np.pi * 220 * np.arange(count) / rate)).astype(np.float32)
    clipped = tone.copy()
    clipped[: count // 20] = 1.0  # 5 % at full scale
    slightly = tone.copy()
    slightly[: count // 200] = -1.0  # 0.5 % at full scale: tolerated
    loud = tone.copy()
    loud[500] = 2.5
    nan = tone.copy()
    nan[10] = np.nan
    check_inputs = {
        "speech": speech,
        "digital-silence": np.zeros(count, np.float32),
        "quiet-65dBFS": (tone / 0.3 * 10 ** (-65 / 20) * math.sqrt(2)).astype(np.float32),
        "too-short-0.3s": tone[: int(0.3 * rate)],
        "exactly-min-0.5s": tone[: rate // 2],
        "clipped-5pct": clipped,
        "clipped-0.5pct": slightly,
        "out-of-range": loud,
        "nan": nan,
        "inf": np.where(np.arange(count) == 3, np.inf, tone).astype(np.float32),
    }
    checks = []
    for name, samples in check_inputs.items():
        expect = {}
        for use, tolerate_clipped in (("enroll", False), ("verify", True)):
            _, error = outcome(
                lambda s=samples, n=name: check_audio(s, rate, min_seconds=0.5, name=n)
            )
            code = None if error is None else error.code
            expect[use] = None if tolerate_clipped and code == "media.clipped" else code
        checks.append(
            {
                "name": name,
                "sample_rate": rate,
                "min_seconds": 0.5,
                "samples_f32": f32_b64(samples),
                "enroll": expect["enroll"],
                "verify": expect["verify"],
            }
        )

    burst = np.concatenate(
        [rng.normal(0, 1e-4, 13230), rng.normal(0, 0.2, 4410), rng.normal(0, 1e-4, 13230)]
    ).astype(np.float32)  # 0.7 s at 44.1 kHz: 0.1 s of noise between silences
    trim_inputs = [  # (name, samples or a WAV of audio/, rate, the min_seconds tried)
        ("padded-silence", "padded-silence.wav", 16000, (0.5, 2.0)),
        ("speech-no-silence", speech, 8000, (0.5,)),
        ("burst-44.1kHz", burst, 44100, (0.5, 0.0)),  # widened to 0.5 s, or not
        ("one-frame", tone[:300], 8000, (0.0,)),
        (
            "quiet-start",
            np.concatenate([tone[:2000] * 0.01, tone]).astype(np.float32),
            8000,
            (0.5,),
        ),
    ]
    trims = []
    for name, given, sr, minimums in trim_inputs:
        samples = wav(given) if isinstance(given, str) else given
        results = []
        for minimum in minimums:
            trimmed = trim_silence(samples, sr, min_seconds=minimum)
            start = start_of(samples, trimmed)
            results.append({"min_seconds": minimum, "start": start, "stop": start + trimmed.size})
        source = (
            {"wav": f"audio/{given}"}
            if isinstance(given, str)
            else {"samples_f32": f32_b64(samples)}
        )
        trims.append({"name": name, "sample_rate": sr, **source, "results": results})

    windows = []
    for length, sr, window, hop in [
        (32000, 16000, 2.0, 1.0),
        (32001, 16000, 2.0, 1.0),
        (31999, 16000, 2.0, 1.0),
        (68800, 16000, 2.0, 1.0),
        (48000, 16000, 2.0, 1.0),
        (1, 16000, 2.0, 1.0),
        (100000, 44100, 1.5, 0.25),
        (50000, 22050, 1.6, 0.8),
        (123457, 8000, 3.0, 0.05),
        (70000, 16000, 2.0, 2.0),
        (40000, 11025, 0.10002, 0.05),
        (60000, 11025, 2.5, 1.5),  # 27562.5 and 16537.5 samples: round half to even
    ]:
        width, starts = window_starts(length, sr, window, hop)
        windows.append(
            {
                "length": length,
                "sample_rate": sr,
                "window_seconds": window,
                "hop_seconds": hop,
                "width": width,
                "starts": starts,
            }
        )
    return document(
        "media",
        "Input checks (the error code: enroll refuses clipped audio, verify tolerates it), "
        "silence trimming, and "
        "window starts (spec §5.2–§5.4); WAV files decoded at their own rate with max_seconds: "
        "the frames decoded, or the error code (spec §5.1).",
        checks=checks,
        trims=trims,
        windows=windows,
        decoding=_decoding(),
    )


def _wav_file(
    rate: int,
    frames: int,
    *,
    bits: int = 16,
    align: int | None = None,
    byte_rate: int | None = None,
    code: int = 1,
    announced: int | None = None,
) -> bytes:
    """A mono RIFF/WAVE file of a 440 Hz tone whose header says what it is given to say."""
    width = 2 if bits == 12 else bits // 8
    tone = 0.3 * np.sin(2 * np.pi * 440 * np.arange(frames) / max(rate, 1000))
    if code == 3:
        data = tone.astype(f"<f{width}").tobytes()
    elif width == 2:
        data = (tone * 32767).astype("<i2").tobytes()
    else:
        data = (tone * 32767).astype("<i2").astype("<i4").tobytes()[: frames * width]
    align = width if align is None else align
    fmt = struct.pack("<HHIIHH", code, 1, rate, rate * width if byte_rate is None else byte_rate,
                      align, bits)  # fmt: skip
    size = len(data) if announced is None else announced
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", size)
    return b"RIFF" + struct.pack("<I", len(body) + len(data)) + body + data


def _decoding() -> list[dict[str, Any]]:
    """WAV headers each core must read alike (issue 46: the reference decoded 12-bit samples and
    a block align of 0 that the TypeScript port refused, and called a 1 Hz file whose byte rate
    disagrees truncated where the port found it too long)."""
    files = [
        ("pcm16", _wav_file(8000, 800), 8000),
        ("float32", _wav_file(8000, 800, bits=32, code=3), 8000),
        ("pcm12-in-16-bit-containers", _wav_file(8000, 800, bits=12), 8000),
        ("block-align-0", _wav_file(8000, 800, align=0), 8000),
        ("block-align-3-for-16-bits", _wav_file(8000, 800, align=3), 8000),
        ("rate-1-hz-61-frames-byte-rate-32000", _wav_file(1, 61, byte_rate=32000), 1),
        ("rate-1-hz-30-frames", _wav_file(1, 30), 1),
        ("data-announces-more-than-present", _wav_file(8000, 800, announced=4000), 8000),
    ]
    cases = []
    with tempfile.TemporaryDirectory() as folder:
        for name, blob, rate in files:
            path = Path(folder) / f"{name}.wav"
            path.write_bytes(blob)
            samples, error = outcome(lambda p=path, r=rate: load_audio(p, r, max_seconds=60.0))
            result = {"error": error.code} if error else {"frames": int(samples.size)}
            cases.append({"name": name, "wav_b64": b64(blob), "max_seconds": 60.0, **result})
    return cases
