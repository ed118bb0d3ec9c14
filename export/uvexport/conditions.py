"""Simulated recording conditions, for calibrating and benchmarking thresholds beyond clean audio.

A verification threshold calibrated on clean recordings moves on telephone audio, lossy codecs,
noise and reverberation. Each :class:`Condition` here turns a clean clip into the same clip as
that condition would deliver it: deterministic given its seed, float32 mono, never clipping (the
result is scaled down when its peak exceeds :data:`MAX_PEAK`).

The codecs run through libsndfile (the decoder the SDK itself reads files with): a clip is encoded
into an in-memory file and decoded back, so the result is what a receiver hears. Filters, noise
and room responses are plain numpy (FFT), resampling is soxr's.

The long-utterance condition is not a per-clip transform (it needs several clips of one speaker),
so it is not in :data:`CONDITIONS`: :func:`concatenate_clips` joins a speaker's consecutive clips
into one utterance of at least a target duration.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from uvsdk.media import load_audio

MAX_PEAK = 0.99
"""Largest absolute sample value a condition returns; a louder result is scaled down to it."""

TELEPHONE_BAND = (300.0, 3400.0)
"""Pass band of the telephone channel in Hz (ITU-T G.712's 300–3400 Hz)."""

TELEPHONE_RATE = 8000
"""Sample rate of the telephone codecs (G.711 μ-law, GSM 06.10), in Hz."""

WIDEBAND_RATE = 16000
"""Sample rate the wide-band codec (Opus) runs at, in Hz."""

OPUS_COMPRESSION_LEVEL = 0.96
"""libsndfile's Opus compression level (0 = highest, 1 = lowest bitrate; mapped linearly onto
about 256 to 6 kbit/s): 0.96 gives about 16 kbit/s at 16 kHz mono, a voice-call bitrate."""

TRANSITION_HZ = 200.0
"""Width of the band-pass filter's transition bands, in Hz."""

ACTIVE_FRAME_SECONDS = 0.02
"""Frame length over which speech activity is judged, in seconds."""

ACTIVE_THRESHOLD_DB = -40.0
"""A frame is speech when its power is above the loudest frame's by more than this, in dB."""

RT60_RANGE = (0.3, 0.7)
"""Range the reverberation time is drawn from, uniformly, in seconds."""

DIRECT_TO_REVERBERANT_DB = 3.0
"""Energy of the direct path over the energy of the room's tail in the impulse response, in dB."""

REFLECTION_ONSET_SECONDS = 0.0025
"""Delay of the first reflection after the direct path, in seconds."""

BABBLE_TALKERS = 4
"""Number of speech-shaped noise streams, each with its own syllabic rhythm, in the babble."""

SYLLABLE_RATE_RANGE = (3.0, 6.0)
"""Range of each babble stream's amplitude-modulation rate, in Hz (syllables per second)."""

FAR_FIELD_SNR_DB = 15.0
"""Signal-to-noise ratio of the noise added after the room in the far-field condition, in dB."""


Transform = Callable[[np.ndarray, int, np.random.Generator], tuple[np.ndarray, int]]


@dataclass(frozen=True)
class Condition:
    """A recording condition: a named, seeded transform of a clean clip.

    Attributes
    ----------
    name : str
        The condition's fixed name, e.g. ``"telephone-gsm"``.
    description : str
        What it simulates, in one plain sentence.
    transform : callable
        ``(samples, rate, rng) -> (samples, rate)``, called by :meth:`apply` on checked input.
    """

    name: str
    description: str
    transform: Transform = field(repr=False, compare=False)

    def apply(
        self, samples: np.ndarray, rate: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, int]:
        """Apply the condition to one clip.

        Parameters
        ----------
        samples : numpy.ndarray
            1-D float mono samples in [-1, 1], finite and not empty.
        rate : int
            Their sample rate in Hz.
        rng : numpy.random.Generator
            Source of every random choice (noise, room); the same state gives the same result.

        Returns
        -------
        tuple of (numpy.ndarray, int)
            The float32 samples, peak at most :data:`MAX_PEAK`, and their sample rate (8 kHz for
            the telephone conditions, 16 kHz for the wide-band codec, else ``rate``).

        Raises
        ------
        ValueError
            The samples are not 1-D, empty or not finite, or the rate is not positive.
        """
        samples = _checked(samples, rate)
        result, result_rate = self.transform(samples, rate, rng)
        return limit_peak(result), result_rate


def _checked(samples: np.ndarray, rate: int) -> np.ndarray:
    """The samples as float64, after checking that a condition can use them."""
    samples = np.asarray(samples)
    if samples.ndim != 1 or samples.size == 0:
        raise ValueError(f"expected 1-D mono samples, got an array of shape {samples.shape}")
    if not np.issubdtype(samples.dtype, np.floating):
        raise ValueError(f"expected float samples in [-1, 1], got {samples.dtype}")
    if not np.isfinite(samples).all():
        raise ValueError("the samples contain NaN or infinite values")
    if int(rate) <= 0:
        raise ValueError(f"the sample rate must be positive, got {rate}")
    return samples.astype(np.float64)


def limit_peak(samples: np.ndarray) -> np.ndarray:
    """The samples as float32, scaled down if their peak exceeds :data:`MAX_PEAK`."""
    samples = np.asarray(samples, dtype=np.float64)
    peak = float(np.max(np.abs(samples))) if samples.size else 0.0
    if peak > MAX_PEAK:
        samples = samples * (MAX_PEAK / peak)
    return samples.astype(np.float32)


def resample(samples: np.ndarray, rate: int, new_rate: int) -> np.ndarray:
    """Resample with soxr (``"HQ"``), as the SDK does; the samples unchanged when the rates match.

    Returns
    -------
    numpy.ndarray
        1-D float32 samples at ``new_rate``.
    """
    samples = np.asarray(samples, dtype=np.float32)
    if rate == new_rate:
        return samples.copy()
    return np.asarray(soxr.resample(samples, rate, new_rate, "HQ"), dtype=np.float32)


def fft_convolve(signal: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Full linear convolution of two 1-D arrays through the FFT (length ``len + len - 1``)."""
    length = len(signal) + len(kernel) - 1
    size = 1 << (length - 1).bit_length()
    spectrum = np.fft.rfft(signal, size) * np.fft.rfft(kernel, size)
    return np.fft.irfft(spectrum, size)[:length]


def bandpass_taps(low: float, high: float, rate: int) -> np.ndarray:
    """A linear-phase band-pass FIR: a windowed sinc (Blackman window, about 74 dB stop band).

    The cut-offs ``low`` and ``high`` (Hz) are the -6 dB points; the transition bands are
    :data:`TRANSITION_HZ` wide, which sets the (odd) number of taps, ``5.5 * rate / width``.
    """
    count = int(np.ceil(5.5 * rate / TRANSITION_HZ)) | 1
    offsets = np.arange(count) - (count - 1) / 2

    def lowpass(cutoff: float) -> np.ndarray:
        return 2 * cutoff / rate * np.sinc(2 * cutoff / rate * offsets)

    return (lowpass(high) - lowpass(low)) * np.blackman(count)


def band_limit(samples: np.ndarray, rate: int, low: float, high: float) -> np.ndarray:
    """Band-pass filter the samples between ``low`` and ``high`` Hz, without delay (same length)."""
    taps = bandpass_taps(low, high, rate)
    delay = (len(taps) - 1) // 2
    return fft_convolve(np.asarray(samples, dtype=np.float64), taps)[delay : delay + len(samples)]


def telephone_channel(samples: np.ndarray, rate: int) -> tuple[np.ndarray, int]:
    """The telephone channel before its codec: 8 kHz, band-limited to :data:`TELEPHONE_BAND`.

    Returns
    -------
    tuple of (numpy.ndarray, int)
        Float32 samples at :data:`TELEPHONE_RATE` (peak at most :data:`MAX_PEAK`) and that rate.
    """
    narrow = resample(samples, rate, TELEPHONE_RATE)
    return limit_peak(band_limit(narrow, TELEPHONE_RATE, *TELEPHONE_BAND)), TELEPHONE_RATE


def codec_round_trip(
    samples: np.ndarray, rate: int, *, file_format: str, subtype: str, **options: float | str
) -> np.ndarray:
    """Encode into an in-memory file through libsndfile and decode it back.

    Parameters
    ----------
    samples : numpy.ndarray
        1-D samples with a peak of at most 1 (libsndfile does not clip on encoding).
    rate : int
        Their sample rate in Hz (one the codec supports).
    file_format, subtype : str
        libsndfile's container and encoding, e.g. ``"WAV"`` and ``"GSM610"``.
    **options
        Passed to :func:`soundfile.write` (``compression_level``, ``bitrate_mode``).

    Returns
    -------
    numpy.ndarray
        The decoded float32 samples, cut or zero-padded to the input's length (a block codec pads
        its last block).
    """
    buffer = io.BytesIO()
    data = np.asarray(samples, dtype=np.float32)
    sf.write(buffer, data, rate, subtype=subtype, format=file_format, **options)
    buffer.seek(0)
    decoded, _ = sf.read(buffer, dtype="float32")
    result = np.zeros(len(samples), dtype=np.float32)
    result[: min(len(samples), len(decoded))] = decoded[: len(samples)]
    return result


def _clean(samples: np.ndarray, rate: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    return samples, rate


def _telephone_ulaw(
    samples: np.ndarray, rate: int, rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    narrow, narrow_rate = telephone_channel(samples, rate)
    return codec_round_trip(narrow, narrow_rate, file_format="WAV", subtype="ULAW"), narrow_rate


def _telephone_gsm(
    samples: np.ndarray, rate: int, rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    narrow, narrow_rate = telephone_channel(samples, rate)
    return codec_round_trip(narrow, narrow_rate, file_format="WAV", subtype="GSM610"), narrow_rate


def _wideband_codec(
    samples: np.ndarray, rate: int, rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    wide = limit_peak(resample(samples, rate, WIDEBAND_RATE))
    decoded = codec_round_trip(
        wide,
        WIDEBAND_RATE,
        file_format="OGG",
        subtype="OPUS",
        compression_level=OPUS_COMPRESSION_LEVEL,
    )
    return decoded, WIDEBAND_RATE


def active_power(samples: np.ndarray, rate: int) -> float:
    """Mean power of the speech in a clip: over the frames of :data:`ACTIVE_FRAME_SECONDS` whose
    power is within :data:`ACTIVE_THRESHOLD_DB` of the loudest frame's (a clip shorter than one
    frame is one frame)."""
    samples = np.asarray(samples, dtype=np.float64)
    frame = max(1, int(round(ACTIVE_FRAME_SECONDS * rate)))
    count = max(1, len(samples) // frame)
    powers = np.array(
        [np.mean(part**2) for part in np.array_split(samples[: count * frame], count)]
    )
    active = powers >= powers.max() * 10 ** (ACTIVE_THRESHOLD_DB / 10)
    return float(powers[active].mean())


def pink_noise(length: int, rng: np.random.Generator) -> np.ndarray:
    """Gaussian noise with a 1/f power spectrum (white noise's spectrum scaled by 1/sqrt(f), no
    DC), normalised to unit RMS."""
    spectrum = np.fft.rfft(rng.standard_normal(length))
    frequencies = np.arange(len(spectrum), dtype=np.float64)
    frequencies[0] = np.inf
    return _unit_rms(np.fft.irfft(spectrum / np.sqrt(frequencies), length))


def speech_shaped_noise(length: int, rate: int, rng: np.random.Generator) -> np.ndarray:
    """Gaussian noise with a long-term speech spectrum, normalised to unit RMS.

    The amplitude response is a second-order high-pass at 100 Hz times a roll-off of 9 dB per
    octave above 500 Hz: flat-topped near 100–500 Hz, like the long-term average speech spectrum
    (Byrne et al., 1994) in outline.
    """
    spectrum = np.fft.rfft(rng.standard_normal(length))
    frequencies = np.fft.rfftfreq(length, 1 / rate)
    high_pass = (frequencies / 100) ** 2 / (1 + (frequencies / 100) ** 2)
    roll_off = (1 + (frequencies / 500) ** 2) ** -0.75
    return _unit_rms(np.fft.irfft(spectrum * high_pass * roll_off, length))


def babble_noise(length: int, rate: int, rng: np.random.Generator) -> np.ndarray:
    """Babble-like noise: :data:`BABBLE_TALKERS` speech-shaped streams, each switched on and off at
    its own syllable rate (a raised sine, rate drawn from :data:`SYLLABLE_RATE_RANGE`, random
    phase), summed and normalised to unit RMS. No real voice is in it, so no speaker either."""
    time = np.arange(length) / rate
    total = np.zeros(length)
    for _ in range(BABBLE_TALKERS):
        syllable_rate = rng.uniform(*SYLLABLE_RATE_RANGE)
        phase = rng.uniform(0, 2 * np.pi)
        envelope = 0.5 * (1 + np.sin(2 * np.pi * syllable_rate * time + phase))
        total += envelope * speech_shaped_noise(length, rate, rng)
    return _unit_rms(total)


def background_noise(length: int, rate: int, rng: np.random.Generator) -> np.ndarray:
    """The noise the noise conditions add: pink and babble noise at equal power, unit RMS."""
    return _unit_rms(pink_noise(length, rng) + babble_noise(length, rate, rng))


def _unit_rms(samples: np.ndarray) -> np.ndarray:
    rms = float(np.sqrt(np.mean(samples**2)))
    return samples / rms if rms > 0 else samples


def add_noise(
    samples: np.ndarray, rate: int, snr_db: float, rng: np.random.Generator
) -> np.ndarray:
    """Add :func:`background_noise` so that :func:`active_power` over the noise's mean power is
    ``snr_db``.

    Raises
    ------
    ValueError
        The clip is digital silence (no speech to set a noise level against).
    """
    speech_power = active_power(samples, rate)
    if speech_power == 0:
        raise ValueError("cannot add noise at a signal-to-noise ratio to a silent clip")
    noise = background_noise(len(samples), rate, rng)
    return samples + noise * np.sqrt(speech_power * 10 ** (-snr_db / 10))


def room_impulse_response(rt60: float, rate: int, rng: np.random.Generator) -> np.ndarray:
    """A synthetic room impulse response: a direct path and an exponentially decaying tail.

    The tail is Gaussian noise from :data:`REFLECTION_ONSET_SECONDS` on, its amplitude falling as
    ``exp(-ln(1000) t / rt60)`` (energy down 60 dB after ``rt60``, where the response ends), scaled
    so that the direct path has :data:`DIRECT_TO_REVERBERANT_DB` more energy than the tail.
    """
    length = max(2, int(np.ceil(rt60 * rate)))
    time = np.arange(length) / rate
    tail = rng.standard_normal(length) * np.exp(-np.log(1000) * time / rt60)
    tail[: max(1, int(round(REFLECTION_ONSET_SECONDS * rate)))] = 0
    tail *= np.sqrt(10 ** (-DIRECT_TO_REVERBERANT_DB / 10) / np.sum(tail**2))
    tail[0] = 1.0
    return tail


def reverberate(samples: np.ndarray, rate: int, rng: np.random.Generator) -> np.ndarray:
    """Convolve with a :func:`room_impulse_response` whose RT60 is the first value drawn from
    ``rng`` (uniform in :data:`RT60_RANGE`); the result keeps the input's length (the tail past
    its end is cut) and is rescaled to the input's peak."""
    rt60 = rng.uniform(*RT60_RANGE)
    response = room_impulse_response(rt60, rate, rng)
    wet = fft_convolve(samples, response)[: len(samples)]
    peak, wet_peak = np.max(np.abs(samples)), np.max(np.abs(wet))
    return wet * (peak / wet_peak) if wet_peak > 0 else wet


def _noise(snr_db: float) -> Transform:
    def transform(
        samples: np.ndarray, rate: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, int]:
        return add_noise(samples, rate, snr_db, rng), rate

    return transform


def _reverb(samples: np.ndarray, rate: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    return reverberate(samples, rate, rng), rate


def _far_field(samples: np.ndarray, rate: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    return add_noise(reverberate(samples, rate, rng), rate, FAR_FIELD_SNR_DB, rng), rate


CONDITIONS: dict[str, Condition] = {
    condition.name: condition
    for condition in (
        Condition("clean", "The recording as it is.", _clean),
        Condition(
            "telephone-ulaw",
            "A landline call: the 300-3400 Hz telephone band at 8 kHz through G.711 mu-law.",
            _telephone_ulaw,
        ),
        Condition(
            "telephone-gsm",
            "A mobile call: the 300-3400 Hz telephone band at 8 kHz through the GSM 06.10 codec.",
            _telephone_gsm,
        ),
        Condition(
            "wideband-codec",
            "A wide-band voice call or voice message: 16 kHz Opus at about 16 kbit/s.",
            _wideband_codec,
        ),
        Condition(
            "noise-10db",
            "Background noise (pink noise and babble) at 10 dB below the speech.",
            _noise(10.0),
        ),
        Condition(
            "noise-5db",
            "Loud background noise (pink noise and babble) at 5 dB below the speech.",
            _noise(5.0),
        ),
        Condition(
            "reverb",
            "A reverberant room, with a reverberation time between 0.3 and 0.7 s.",
            _reverb,
        ),
        Condition(
            "far-field",
            "A distant microphone: a reverberant room plus background noise at 15 dB.",
            _far_field,
        ),
    )
}
"""The recording conditions by name, in a fixed order (``clean`` first)."""


def get_condition(name: str) -> Condition:
    """The condition called ``name``.

    Raises
    ------
    ValueError
        No condition has that name; the message lists the known ones.
    """
    try:
        return CONDITIONS[name]
    except KeyError:
        raise ValueError(
            f"unknown recording condition {name!r}; known: {', '.join(CONDITIONS)}"
        ) from None


def apply_condition(
    name: str, samples: np.ndarray, rate: int, *, seed: int
) -> tuple[np.ndarray, int]:
    """Apply the condition called ``name`` to a clip, with ``numpy.random.default_rng(seed)``.

    Returns
    -------
    tuple of (numpy.ndarray, int)
        Float32 samples (peak at most :data:`MAX_PEAK`) and their sample rate.

    Raises
    ------
    ValueError
        An unknown condition (the message names the known ones) or unusable samples.
    """
    return get_condition(name).apply(samples, rate, np.random.default_rng(seed))


def write_condition(name: str, source_file: Path, out_file: Path, *, seed: int) -> Path:
    """Decode an audio file, apply a condition and write the result as 16-bit PCM WAV.

    The source is decoded as the SDK decodes (:func:`uvsdk.media.load_audio`, channels averaged)
    at its own sample rate; the WAV is written at the rate the condition returns. For the codec
    conditions it holds the decoded audio, so any WAV reader gets what the codec delivered.

    Returns
    -------
    pathlib.Path
        ``out_file`` (its folder is made if missing).

    Raises
    ------
    ValueError
        An unknown condition.
    uvsdk.errors.MediaError
        The source cannot be decoded.
    """
    condition = get_condition(name)
    source_file, out_file = Path(source_file), Path(out_file)
    rate = sf.info(str(source_file)).samplerate
    samples = load_audio(source_file, rate, max_seconds=3600.0)
    result, result_rate = condition.apply(samples, rate, np.random.default_rng(seed))
    out_file.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(out_file), result, result_rate, subtype="PCM_16", format="WAV")
    return out_file


def concatenate_clips(
    clips: list[tuple[np.ndarray, int]], *, target_seconds: float, gap_seconds: float = 0.15
) -> tuple[np.ndarray, int]:
    """The long-utterance condition: one speaker's consecutive clips joined into one.

    Clips are taken in order, resampled to the first clip's rate, with ``gap_seconds`` of silence
    between two, until the result lasts at least ``target_seconds``; the rest are left out.

    Parameters
    ----------
    clips : list of (numpy.ndarray, int)
        The clips, in the order they were recorded, each as (samples, sample rate).
    target_seconds : float
        Shortest duration of the result (positive).
    gap_seconds : float, optional
        Silence between two clips (not negative).

    Returns
    -------
    tuple of (numpy.ndarray, int)
        Float32 samples (peak at most :data:`MAX_PEAK`) at the first clip's rate, and that rate.

    Raises
    ------
    ValueError
        No clips, a target that is not positive, a negative gap, unusable samples, or clips that
        together fall short of the target.
    """
    if not clips:
        raise ValueError("no clips to concatenate")
    if target_seconds <= 0 or gap_seconds < 0:
        raise ValueError(
            f"need a positive target and a gap not negative, got {target_seconds} and {gap_seconds}"
        )
    rate = int(clips[0][1])
    target = int(np.ceil(target_seconds * rate))
    gap = np.zeros(int(round(gap_seconds * rate)), dtype=np.float32)
    parts: list[np.ndarray] = []
    length = 0
    for samples, clip_rate in clips:
        clip = resample(_checked(samples, clip_rate), clip_rate, rate)
        if parts:
            parts.append(gap)
            length += len(gap)
        parts.append(clip)
        length += len(clip)
        if length >= target:
            return limit_peak(np.concatenate(parts)), rate
    raise ValueError(
        f"the {len(clips)} clips last {length / rate:.2f} s with their gaps, "
        f"short of the {target_seconds:g} s asked for"
    )
