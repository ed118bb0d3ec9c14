"""``vectors/model.json``: PCM or pixels → the vector the SDK embeds (spec §3.8, §5.4)."""

from __future__ import annotations

from typing import Any

import numpy as np

from uvsdk.inputs import AudioInput
from uvsdk.media import trim_silence, window_starts

from .shared import DEFAULT_BUNDLE, b64, document, f32, start_of, verifier, wav

MODEL_TOLERANCE = 1e-4  # a port's model output may differ by this x max(1, max |expected|)


def generate() -> dict[str, Any]:
    cases = []
    audio_cases = [
        (
            "bundles/voice-embedding.uvb",
            ["speaker0-0.wav", "long-4.3s.wav", "short-0.7s.wav", "padded-silence.wav"],
        ),
        ("bundles/voice-codeword.uvb", ["speaker0-0.wav", "long-4.3s.wav"]),
        (DEFAULT_BUNDLE, ["speaker0-0.wav", "long-4.3s.wav"]),
    ]
    for bundle, files in audio_cases:
        v = verifier(bundle)
        spec = v.bundle.manifest.input
        assert isinstance(spec, AudioInput)
        for name in files:
            samples = wav(name)
            trimmed = trim_silence(samples, spec.sample_rate, min_seconds=spec.min_seconds)
            start = start_of(samples, trimmed)
            width, starts = window_starts(
                trimmed.size, spec.sample_rate, spec.window_seconds, spec.hop_seconds
            )
            first = np.resize(trimmed, width) if trimmed.size < width else trimmed[:width]
            window0 = v.bundle.run(first[None])[0]
            vector = v.embed(samples)
            cases.append(
                {
                    "bundle": bundle,
                    "wav": f"audio/{name}",
                    "trim": [start, start + trimmed.size],
                    "width": width,
                    "starts": starts,
                    "window0_output": f32(window0),
                    "vector": f32(vector),
                    "tolerance": _tolerance(vector, window0),
                }
            )
    v = verifier("bundles/image-embedding.uvb")
    for seed in (0, 1):
        pixels = np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)
        vector = v.embed(pixels)
        cases.append(
            {
                "bundle": "bundles/image-embedding.uvb",
                "pixels_u8": b64(pixels.tobytes()),
                "shape": [32, 32, 3],
                "vector": f32(vector),
                "tolerance": _tolerance(vector),
            }
        )
    return document(
        "model",
        "Decoded input -> the clip's vector: audio is 16-bit WAV at the bundle's rate (sample / "
        "32768), trimmed, cut into windows (each repeat-padded when the clip is shorter), run, "
        "and the window outputs averaged; images are uint8 H x W x C. window0_output is the "
        "model's output for the first window alone. A port passes when every element is within "
        "`tolerance` of the expected one (spec §3.8, §5.4).",
        tolerance_rule=f"{MODEL_TOLERANCE} x max(1, max |expected|)",
        cases=cases,
    )


def _tolerance(*vectors: np.ndarray) -> float:
    largest = max(float(np.max(np.abs(v))) for v in vectors)
    return MODEL_TOLERANCE * max(1.0, largest)
