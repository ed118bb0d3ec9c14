"""uvexport.conditions: simulated recording conditions, checked on small synthetic signals (tones at
200 Hz, 1 kHz and 6 kHz plus a chirp) by what each condition must do to them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from uvexport.conditions import (
    CONDITIONS,
    RT60_RANGE,
    apply_condition,
    codec_round_trip,
    concatenate_clips,
    resample,
    telephone_channel,
    write_condition,
)

RATE = 16000
NAMES = [
    "clean",
    "telephone-ulaw",
    "telephone-gsm",
    "wideband-codec",
    "noise-10db",
    "noise-5db",
    "reverb",
    "far-field",
]


def _tones(seconds: float = 1.0, peak: float = 0.6) -> np.ndarray:
    """Tones at 200 Hz, 1 kHz and 6 kHz plus a linear chirp from 100 Hz to 7 kHz, scaled to
    ``peak``."""
    time = np.arange(int(seconds * RATE)) / RATE
    chirp_phase = 2 * np.pi * (100 * time + (7000 - 100) / (2 * seconds) * time**2)
    mix = sum(np.sin(2 * np.pi * frequency * time) for frequency in (200, 1000, 6000))
    mix = mix + np.sin(chirp_phase)
    return (peak * mix / np.max(np.abs(mix))).astype(np.float32)


def _band_energy(samples: np.ndarray, low: float, high: float) -> float:
    """Energy of the 16-kHz samples between ``low`` and ``high`` Hz (Parseval, one-sided)."""
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64))) ** 2
    frequencies = np.fft.rfftfreq(len(samples), 1 / RATE)
    return float(spectrum[(frequencies >= low) & (frequencies < high)].sum())


def _power(samples: np.ndarray) -> float:
    return float(np.mean(np.asarray(samples, dtype=np.float64) ** 2))


def test_the_conditions_are_the_fixed_set_in_order_with_a_sentence_each() -> None:
    assert list(CONDITIONS) == NAMES
    for name, condition in CONDITIONS.items():
        assert condition.name == name
        assert condition.description.endswith(".") and "\n" not in condition.description


def test_an_unknown_condition_raises_a_value_error_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="telephone-gmz") as raised:
        apply_condition("telephone-gmz", _tones(), RATE, seed=0)
    for name in NAMES:
        assert name in str(raised.value)
    with pytest.raises(ValueError, match="far-field"):
        write_condition("codec", tmp_path / "missing.wav", tmp_path / "out.wav", seed=0)
    assert not (tmp_path / "out.wav").exists()


@pytest.mark.parametrize("name", NAMES)
def test_every_condition_is_deterministic_float32_and_never_clips(name: str) -> None:
    loud = _tones(peak=1.0)
    first, rate = apply_condition(name, loud, RATE, seed=7)
    again, again_rate = apply_condition(name, loud, RATE, seed=7)
    assert first.dtype == np.float32 and first.ndim == 1
    assert np.isfinite(first).all()
    assert np.max(np.abs(first)) <= 0.99
    assert rate == again_rate == {"telephone-ulaw": 8000, "telephone-gsm": 8000}.get(name, RATE)
    assert len(first) == round(len(loud) * rate / RATE)
    np.testing.assert_array_equal(first, again)


@pytest.mark.parametrize("name", ["noise-10db", "reverb", "far-field"])
def test_a_random_condition_changes_with_the_seed(name: str) -> None:
    first, _ = apply_condition(name, _tones(), RATE, seed=1)
    second, _ = apply_condition(name, _tones(), RATE, seed=2)
    assert not np.allclose(first, second, atol=1e-3)


def test_clean_is_the_input_unchanged() -> None:
    samples = _tones()
    result, rate = apply_condition("clean", samples, RATE, seed=0)
    assert rate == RATE
    np.testing.assert_array_equal(result, samples)


def test_unusable_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="1-D"):
        apply_condition("clean", np.zeros((2, 100), dtype=np.float32), RATE, seed=0)
    with pytest.raises(ValueError, match="NaN"):
        apply_condition("reverb", np.full(100, np.nan, dtype=np.float32), RATE, seed=0)


@pytest.mark.parametrize("name", ["telephone-ulaw", "telephone-gsm"])
def test_the_telephone_conditions_keep_1_khz_and_remove_6_khz(name: str) -> None:
    samples = _tones()
    result, rate = apply_condition(name, samples, RATE, seed=0)
    assert rate == 8000
    wide = resample(result, rate, RATE)
    assert _band_energy(wide, 3600, 8000) < 0.01 * _band_energy(samples, 3600, 8000)
    assert _band_energy(wide, 5900, 6100) < 1e-4 * _band_energy(samples, 5900, 6100)
    kept = _band_energy(wide, 950, 1050) / _band_energy(samples, 950, 1050)
    assert 0.5 < kept < 1.5


def test_mu_law_goes_through_the_codec_with_its_error_bound() -> None:
    """G.711 μ-law keeps 8 bits: its error is about 3 % of the sample (one step of the sample's
    segment), far above 16-bit rounding, and no more than one step anywhere."""
    reference, _ = telephone_channel(_tones(), RATE)
    result, _ = apply_condition("telephone-ulaw", _tones(), RATE, seed=0)
    error = np.abs(result.astype(np.float64) - reference)
    step = np.abs(reference) / 16 + 2 / 8192  # one step of the top segment is 1/16 of its bottom
    assert np.all(error <= step)
    assert np.sqrt(_power(error)) > 0.003 * np.sqrt(_power(reference))  # 16-bit: 0.003 %


def test_gsm_goes_through_the_codec() -> None:
    reference, _ = telephone_channel(_tones(), RATE)
    result, _ = apply_condition("telephone-gsm", _tones(), RATE, seed=0)
    assert _power(result - reference) > 0.01 * _power(reference)


def test_the_wideband_codec_is_opus_at_16_khz() -> None:
    samples = resample(_tones(), RATE, 8000)
    result, rate = apply_condition("wideband-codec", samples, 8000, seed=0)
    assert rate == RATE and len(result) == RATE
    reference = resample(samples, 8000, RATE)
    assert _power(result - reference) > 1e-3 * _power(reference)
    kept = _band_energy(result, 950, 1050) / _band_energy(reference, 950, 1050)
    assert 0.5 < kept < 1.5


def test_the_wideband_codec_runs_at_a_low_bitrate() -> None:
    """Opus at about 16 kbit/s (0.40 of the power, on these tones) loses far more than at its
    highest bitrate (0.005); MP3 at libsndfile's default would lose 0.001."""
    samples = _tones()
    result, _ = apply_condition("wideband-codec", samples, RATE, seed=0)
    options = {"file_format": "OGG", "subtype": "OPUS", "compression_level": 0.0}
    highest = codec_round_trip(samples, RATE, **options)
    assert _power(result - samples) > 10 * _power(highest - samples)


@pytest.mark.parametrize(("name", "snr_db"), [("noise-10db", 10.0), ("noise-5db", 5.0)])
def test_the_noise_conditions_hit_their_signal_to_noise_ratio(name: str, snr_db: float) -> None:
    samples = _tones(peak=0.3)  # quiet enough never to be scaled down
    for seed in range(3):
        result, _ = apply_condition(name, samples, RATE, seed=seed)
        noise = result.astype(np.float64) - samples
        assert abs(10 * np.log10(_power(samples) / _power(noise)) - snr_db) < 0.5


def test_the_speech_power_is_measured_on_the_non_silent_part() -> None:
    samples = np.concatenate([np.zeros(RATE // 2, dtype=np.float32), _tones(0.5, peak=0.3)])
    result, _ = apply_condition("noise-10db", samples, RATE, seed=0)
    noise = result.astype(np.float64) - samples
    assert abs(10 * np.log10(_power(samples[RATE // 2 :]) / _power(noise)) - 10) < 0.5


def _decay_time(response: np.ndarray) -> float:
    """RT60 from a response's Schroeder decay curve: a line through -5 to -25 dB, extrapolated
    to -60 dB (T20)."""
    remaining = np.cumsum(response[::-1].astype(np.float64) ** 2)[::-1]
    curve = 10 * np.log10(remaining / remaining[0])
    fitted = (curve <= -5) & (curve >= -25)
    slope, _ = np.polyfit(np.flatnonzero(fitted) / RATE, curve[fitted], 1)
    return -60 / slope


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reverb_decays_with_the_drawn_reverberation_time(seed: int) -> None:
    impulse = np.zeros(RATE, dtype=np.float32)
    impulse[160] = 0.5
    result, rate = apply_condition("reverb", impulse, RATE, seed=seed)
    assert rate == RATE
    assert np.max(np.abs(result)) == pytest.approx(0.5)  # renormalised to the input's peak
    assert np.abs(result[:160]).max() < 1e-6  # causal: nothing before the direct sound
    drawn = np.random.default_rng(seed).uniform(*RT60_RANGE)  # the first draw, as documented
    assert _decay_time(result[160:]) == pytest.approx(drawn, rel=0.1)
    tail = result[160 + RATE // 20 :]  # 50 ms after the direct sound
    assert _power(tail) > 1e-4 * _power(result)


def test_reverb_keeps_the_input_peak() -> None:
    result, _ = apply_condition("reverb", _tones(peak=0.6), RATE, seed=5)
    assert np.max(np.abs(result)) == pytest.approx(0.6, rel=1e-5)


def test_far_field_is_the_reverb_plus_noise_at_15_db() -> None:
    samples = _tones(peak=0.3)
    reverberant, _ = apply_condition("reverb", samples, RATE, seed=4)
    result, _ = apply_condition("far-field", samples, RATE, seed=4)
    noise = result.astype(np.float64) - reverberant
    assert abs(10 * np.log10(_power(reverberant) / _power(noise)) - 15) < 0.5


def test_write_condition_writes_the_decoded_audio_as_16_bit_wav(tmp_path: Path) -> None:
    source = tmp_path / "source.wav"
    sf.write(source, _tones(), RATE, subtype="PCM_16")
    decoded, _ = sf.read(source, dtype="float32")
    out = write_condition("telephone-gsm", source, tmp_path / "out" / "gsm.wav", seed=3)
    assert out == tmp_path / "out" / "gsm.wav"
    info = sf.info(out)
    assert (info.format, info.subtype, info.samplerate) == ("WAV", "PCM_16", 8000)
    written, _ = sf.read(out, dtype="float32")
    expected, _ = apply_condition("telephone-gsm", decoded, RATE, seed=3)
    np.testing.assert_allclose(written, expected, atol=1.01 / 32768)


def _clip(value: float, seconds: float, rate: int = RATE) -> tuple[np.ndarray, int]:
    return np.full(int(seconds * rate), value, dtype=np.float32), rate


def test_concatenate_clips_reaches_the_target_in_order() -> None:
    clips = [_clip(0.1, 0.4), _clip(0.2, 0.4), _clip(0.3, 0.4), _clip(0.4, 0.4)]
    joined, rate = concatenate_clips(clips, target_seconds=1.0, gap_seconds=0.15)
    gap = int(0.15 * RATE)
    assert rate == RATE and joined.dtype == np.float32
    assert len(joined) == 3 * int(0.4 * RATE) + 2 * gap  # 1.5 s: the fourth clip is not needed
    starts = [0, int(0.4 * RATE) + gap, 2 * (int(0.4 * RATE) + gap)]
    for start, (clip, _) in zip(starts, clips, strict=False):
        np.testing.assert_array_equal(joined[start : start + len(clip)], clip)
        assert np.all(joined[start + len(clip) : start + len(clip) + gap] == 0)


def test_concatenate_clips_resamples_to_the_first_rate_and_refuses_too_little() -> None:
    joined, rate = concatenate_clips(
        [_clip(0.1, 0.5), _clip(0.2, 0.5, rate=8000)], target_seconds=1.0, gap_seconds=0.0
    )
    assert rate == RATE and len(joined) == RATE
    assert np.abs(joined[RATE // 2 + 800 : -800] - 0.2).max() < 1e-3
    with pytest.raises(ValueError, match="short of the 2 s"):
        concatenate_clips([_clip(0.1, 0.5), _clip(0.2, 0.5)], target_seconds=2.0)
    with pytest.raises(ValueError, match="no clips"):
        concatenate_clips([], target_seconds=1.0)
