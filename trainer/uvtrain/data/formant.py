"""Source–filter synthetic voices: a tiny, instant, numpy-only stand-in for real speech.

The SDK's tests, demos and benchmarks need voices that differ from speaker to speaker and stay
consistent within one speaker, without downloading a corpus, running a text-to-speech engine or
importing torch. This module makes them in a few milliseconds per clip with numpy alone. It is *not*
the trainer's synthetic corpus: that one (espeak-ng based, real phonemes and words) comes later;
nothing here should be mistaken for speech a person would recognise.

The model is the classic source–filter one (Fant, *Acoustic Theory of Speech Production*, 1960):

* **source** — a glottal pulse train at a time-varying fundamental ``f0(t)`` (declination, random
  intonation, vibrato), with cycle-to-cycle jitter and shimmer, plus aspiration (breath) noise;
* **filter** — a spectral envelope that is a sum of second-order resonances at the speaker's formant
  frequencies (a parallel formant synthesiser, Klatt 1980), times a spectral tilt in dB per octave.
  The envelope is fixed within one utterance, so it is applied as one multiplication in the
  frequency domain (``rfft`` → ``× H(f)`` → ``irfft``, the noise added in between); with the pitch
  and amplitude contours computed at a 1 kHz control rate, a 2 s clip at 16 kHz costs 3–4 ms;
* **prosody and channel** — a syllable-like amplitude envelope with random pauses (applied to the
  source), and additive speech-shaped noise (falling 6 dB/octave) at a random SNR of 20–40 dB.

A speaker is a :class:`FormantVoice` drawn by :func:`random_voice`; every utterance perturbs it
slightly (standard deviations: mean pitch 3 %, formants 3 %, bandwidths 5 %, tilt 0.3 dB/octave),
besides its own intonation, rhythm and noise, so that no two clips of one speaker are identical.
The speaker population is spread wide enough (each formant 15 % per speaker, levels 6 dB, tilts
−10 to −3 dB/octave) that the fixed log-mel front end of :mod:`uvexport.reference` tells 8 speakers
apart at an EER of about 4 % (2 s clips).
Everything is reproducible from the seed of the :class:`numpy.random.Generator` passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

__all__ = ["FormantVoice", "random_voice", "spectral_envelope", "synthesize", "voice_corpus"]

#: Formants of a neutral vowel for a 17.5 cm vocal tract (quarter-wave resonator), Hz.
NEUTRAL_FORMANTS: tuple[float, ...] = (500.0, 1500.0, 2500.0, 3500.0)
#: Peak amplitude of every synthesised clip.
PEAK: float = 0.5
#: Rate of the pitch contour and the amplitude envelope, interpolated to the sample rate (Hz).
CONTROL_RATE_HZ: float = 1000.0
#: Probability of a pause (80–350 ms) after each syllable.
PAUSE_PROBABILITY: float = 0.15
#: Range of the signal-to-noise ratio of the additive noise, dB.
SNR_RANGE_DB: tuple[float, float] = (20.0, 40.0)
#: Speaker population: relative spread of the vocal-tract scale and of each formant, spread of the
#: formant levels (dB) and range of the spectral tilt (dB/octave).
SPEAKER_TRACT_SPREAD: float = 0.08
SPEAKER_FORMANT_SPREAD: float = 0.15
SPEAKER_GAIN_SPREAD_DB: float = 6.0
SPEAKER_TILT_RANGE: tuple[float, float] = (-10.0, -3.0)
#: Slope of the additive noise's spectrum above 100 Hz, dB/octave: about that of long-term
#: average speech, so that the SNR is similar in every band (speech-shaped noise).
NOISE_SLOPE_DB_PER_OCTAVE: float = -6.0
#: Standard deviations of an utterance's mean pitch, formants and bandwidths around the speaker's
#: (relative), and of its tilt (dB/octave).
UTTERANCE_F0_SPREAD: float = 0.03
UTTERANCE_FORMANT_SPREAD: float = 0.03
UTTERANCE_BANDWIDTH_SPREAD: float = 0.05
UTTERANCE_TILT_SPREAD_DB: float = 0.3
#: Spacing of the frequency grid on which the spectral envelope is evaluated, then interpolated.
ENVELOPE_GRID_HZ: float = 5.0
#: Frequency below which the spectral tilt and the noise's slope are flat (Hz).
TILT_REFERENCE_HZ: float = 100.0
#: Corner of the high-pass that removes the pulse train's DC and sub-audio content (Hz).
HIGHPASS_HZ: float = 50.0


@dataclass(frozen=True)
class FormantVoice:
    """One synthetic speaker: the parameters that stay fixed across its utterances.

    Parameters
    ----------
    f0 : float
        Mean fundamental frequency in Hz (adult range roughly 85–260).
    formants : tuple of float
        Formant centre frequencies in Hz, ascending (typically 3 or 4 of them).
    bandwidths : tuple of float
        Formant bandwidths in Hz, one per formant.
    tilt : float
        Spectral tilt in dB per octave above 100 Hz (negative: the spectrum falls).
    formant_gains : tuple of float
        Relative level of each formant in dB; empty means 0 dB for all.
    breathiness : float
        Amplitude of aspiration noise relative to the pulse train's RMS (0 = none).
    jitter : float
        Standard deviation of each glottal period, as a fraction of the period.
    shimmer : float
        Standard deviation of each glottal pulse's amplitude, as a fraction of it.
    vibrato_rate : float
        Vibrato frequency in Hz.
    vibrato_depth : float
        Vibrato amplitude in semitones.
    pitch_range : float
        Standard deviation of the random intonation contour, in semitones.
    syllable_rate : float
        Mean number of syllables per second.
    """

    f0: float
    formants: tuple[float, ...]
    bandwidths: tuple[float, ...]
    tilt: float
    formant_gains: tuple[float, ...] = ()
    breathiness: float = 0.1
    jitter: float = 0.01
    shimmer: float = 0.05
    vibrato_rate: float = 5.0
    vibrato_depth: float = 0.1
    pitch_range: float = 2.0
    syllable_rate: float = 4.0

    def __post_init__(self) -> None:
        if not 20.0 <= self.f0 <= 1000.0:
            raise ValueError(f"f0 must lie in [20, 1000] Hz, got {self.f0}")
        if not 1 <= len(self.formants) == len(self.bandwidths):
            raise ValueError("formants and bandwidths must be non-empty and of equal length")
        if self.formant_gains and len(self.formant_gains) != len(self.formants):
            raise ValueError("formant_gains must be empty or have one entry per formant")
        if min(self.formants) <= 0.0 or min(self.bandwidths) <= 0.0:
            raise ValueError("formants and bandwidths must be positive")
        non_negative = (self.breathiness, self.jitter, self.shimmer, self.vibrato_depth)
        if min(non_negative) < 0.0 or self.pitch_range < 0.0:
            raise ValueError("breathiness, jitter, shimmer, vibrato and pitch range must be >= 0")
        if self.syllable_rate <= 0.0 or self.vibrato_rate < 0.0:
            raise ValueError("syllable_rate must be positive and vibrato_rate non-negative")


def random_voice(rng: np.random.Generator) -> FormantVoice:
    """Draw a random speaker.

    The mean pitch is log-uniform in 85–260 Hz. The four formants are the neutral vowel's scaled by
    a vocal-tract factor loosely tied to pitch (higher voices have shorter tracts; 8 % spread), each
    with its own deviation (15 % spread, clipped at 30 %), kept ascending at least 200 Hz apart.
    Formant levels spread by 6 dB, the tilt is uniform in −10…−3 dB/octave; breathiness, jitter,
    shimmer, vibrato, intonation range and speaking rate are uniform in plausible ranges.

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    FormantVoice
        The speaker.
    """
    f0 = float(np.exp(rng.uniform(np.log(85.0), np.log(260.0))))
    tract_scale = (f0 / 140.0) ** 0.25 * np.exp(rng.normal(0.0, SPEAKER_TRACT_SPREAD))
    spread = SPEAKER_FORMANT_SPREAD
    deviation = 1.0 + np.clip(
        rng.normal(0.0, spread, len(NEUTRAL_FORMANTS)), -2 * spread, 2 * spread
    )
    formants = np.asarray(NEUTRAL_FORMANTS) * tract_scale * deviation
    for index in range(1, len(formants)):
        formants[index] = max(formants[index], formants[index - 1] + 200.0)
    bandwidths = rng.uniform((50.0, 70.0, 100.0, 150.0), (110.0, 140.0, 200.0, 300.0))
    return FormantVoice(
        f0=f0,
        formants=tuple(float(value) for value in formants),
        bandwidths=tuple(float(value) for value in bandwidths),
        tilt=float(rng.uniform(*SPEAKER_TILT_RANGE)),
        formant_gains=tuple(
            float(g) for g in rng.normal(0.0, SPEAKER_GAIN_SPREAD_DB, len(formants))
        ),
        breathiness=float(rng.uniform(0.02, 0.25)),
        jitter=float(rng.uniform(0.005, 0.02)),
        shimmer=float(rng.uniform(0.02, 0.1)),
        vibrato_rate=float(rng.uniform(4.0, 7.0)),
        vibrato_depth=float(rng.uniform(0.0, 0.3)),
        pitch_range=float(rng.uniform(1.0, 3.0)),
        syllable_rate=float(rng.uniform(3.0, 6.0)),
    )


def _perturb(voice: FormantVoice, rng: np.random.Generator) -> FormantVoice:
    """Return the voice of one utterance: the speaker's, slightly varied."""
    spread = UTTERANCE_FORMANT_SPREAD
    relative = np.clip(rng.normal(0.0, spread, len(voice.formants)), -2 * spread, 2 * spread)
    formants = np.sort(np.asarray(voice.formants) * (1.0 + relative))
    bandwidths = np.asarray(voice.bandwidths) * np.exp(
        rng.normal(0.0, UTTERANCE_BANDWIDTH_SPREAD, len(formants))
    )
    return replace(
        voice,
        f0=float(voice.f0 * np.exp(rng.normal(0.0, UTTERANCE_F0_SPREAD))),
        formants=tuple(float(value) for value in formants),
        bandwidths=tuple(float(value) for value in bandwidths),
        tilt=float(voice.tilt + rng.normal(0.0, UTTERANCE_TILT_SPREAD_DB)),
    )


def _pitch_contour(
    voice: FormantVoice, seconds: float, times: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Fundamental frequency in Hz at ``times`` (s): declination + intonation + vibrato.

    Declination falls by up to 2 semitones over the clip; intonation interpolates knots every
    250 ms drawn from N(0, ``pitch_range``) semitones; vibrato is a sinusoid.
    """
    declination = rng.uniform(-2.0, 0.5) * (times / max(seconds, 1e-9) - 0.5)
    knot_times = np.arange(0.0, seconds + 0.5, 0.25)
    intonation = np.interp(times, knot_times, rng.normal(0.0, voice.pitch_range, knot_times.size))
    vibrato_phase = rng.uniform(0.0, 2.0 * np.pi)
    vibrato = voice.vibrato_depth * np.sin(2.0 * np.pi * voice.vibrato_rate * times + vibrato_phase)
    return voice.f0 * 2.0 ** ((declination + intonation + vibrato) / 12.0)


def _pulse_positions(
    f0: np.ndarray, hop: int, sample_rate: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Glottal pulse positions (fractional samples) and local periods (samples).

    ``f0`` holds the pitch at control points ``hop`` samples apart; the phase (in cycles) grows
    linearly between them, and a pulse sits wherever it crosses an integer.
    """
    steps = f0[:-1] * hop / sample_rate
    phase = rng.uniform(0.0, 1.0) + np.concatenate([[0.0], np.cumsum(steps)])
    cycles = np.arange(np.ceil(phase[0]), np.floor(phase[-1]) + 1.0)
    segment = np.clip(np.searchsorted(phase, cycles, side="right") - 1, 0, steps.size - 1)
    position = (segment + (cycles - phase[segment]) / steps[segment]) * hop
    return position, sample_rate / f0[segment]


def _glottal_source(
    voice: FormantVoice, samples: int, sample_rate: int, rng: np.random.Generator
) -> np.ndarray:
    """Pulse train at the utterance's ``f0(t)``, with jitter and shimmer.

    The pitch is computed at a 1 kHz control rate. Each pulse is split between its two neighbouring
    samples (linear fractional delay), so that pitch is not quantised to whole samples.
    """
    hop = max(int(round(sample_rate / CONTROL_RATE_HZ)), 1)
    control = np.arange(0, samples + 2 * hop, hop)
    f0 = _pitch_contour(voice, samples / sample_rate, control / sample_rate, rng)
    f0 = np.clip(f0, 40.0, 0.25 * sample_rate)
    position, period = _pulse_positions(f0, hop, sample_rate, rng)
    position = position + voice.jitter * period * rng.standard_normal(position.size)
    keep = (position >= 0.0) & (position < samples - 1)
    position = position[keep]
    amplitude = np.maximum(1.0 + voice.shimmer * rng.standard_normal(keep.size)[keep], 0.0)
    whole = position.astype(np.int64)
    fraction = position - whole
    pulses = np.bincount(whole, amplitude * (1.0 - fraction), minlength=samples)
    pulses[1:] += np.bincount(whole, amplitude * fraction, minlength=samples)[:-1]
    return pulses


def spectral_envelope(voice: FormantVoice, frequencies: np.ndarray) -> np.ndarray:
    """Magnitude response of the vocal-tract filter at ``frequencies`` (Hz).

    A sum of second-order resonances ``F² / sqrt((F² − f²)² + (B f)²)``, each scaled to peak at its
    formant gain (a parallel formant synthesiser, Klatt 1980), times the spectral tilt and a
    4th-order high-pass at 50 Hz.

    Parameters
    ----------
    voice : FormantVoice
        The (utterance's) voice.
    frequencies : numpy.ndarray
        Frequencies in Hz, non-negative.

    Returns
    -------
    numpy.ndarray
        Linear magnitude, same shape as ``frequencies``.
    """
    frequencies = np.asarray(frequencies, dtype=np.float64)
    centres = np.asarray(voice.formants)[:, None]
    bandwidths = np.asarray(voice.bandwidths)[:, None]
    gains_db = np.asarray(voice.formant_gains or (0.0,) * len(voice.formants))[:, None]
    squared = frequencies**2
    resonances = (bandwidths * centres) / np.sqrt(
        (centres**2 - squared) ** 2 + bandwidths**2 * squared
    )
    envelope = np.sum(10.0 ** (gains_db / 20.0) * resonances, axis=0)
    tilt = _slope(frequencies, voice.tilt)
    highpass = 1.0 / np.sqrt(1.0 + (HIGHPASS_HZ**2 / np.maximum(squared, 1e-6)) ** 4)
    return envelope * tilt * highpass


def _syllable_envelope(
    voice: FormantVoice, samples: int, sample_rate: int, rng: np.random.Generator
) -> np.ndarray:
    """Amplitude envelope: syllable-long bumps of random height, with a pause after some.

    Built at the 1 kHz control rate and linearly interpolated to the sample rate. The first
    syllable starts within 50 ms, so that no clip is silent.
    """
    seconds = samples / sample_rate
    times = np.arange(0.0, seconds + 2.0 / CONTROL_RATE_HZ, 1.0 / CONTROL_RATE_HZ)
    envelope = np.zeros(times.size)
    start = rng.uniform(0.0, min(0.05, seconds / 4.0))
    while start < seconds:
        length = rng.uniform(0.6, 1.4) / voice.syllable_rate
        inside = (times >= start) & (times < start + length)
        bump = np.sqrt(np.sin(np.pi * (times[inside] - start) / length))
        envelope[inside] = rng.uniform(0.4, 1.0) * bump
        start += length
        if rng.random() < PAUSE_PROBABILITY:
            start += rng.uniform(0.08, 0.35)
    return np.interp(np.arange(samples) / sample_rate, times, envelope)


def _slope(frequencies: np.ndarray, db_per_octave: float) -> np.ndarray:
    """Linear gain that is 1 up to 100 Hz and changes by ``db_per_octave`` per octave above."""
    octaves = np.log2(np.maximum(frequencies, TILT_REFERENCE_HZ) / TILT_REFERENCE_HZ)
    return 10.0 ** (db_per_octave * octaves / 20.0)


def _mean_square(spectrum: np.ndarray, samples: int) -> float:
    """Mean square of ``irfft(spectrum, samples)``, from the spectrum (Parseval)."""
    weights = np.full(spectrum.size, 2.0)
    weights[0] = 1.0
    if samples % 2 == 0:
        weights[-1] = 1.0
    return float(np.sum(weights * (spectrum.real**2 + spectrum.imag**2)) / samples**2)


def synthesize(
    voice: FormantVoice, seconds: float, sample_rate: int, rng: np.random.Generator
) -> np.ndarray:
    """Synthesise one utterance of ``voice``.

    Parameters
    ----------
    voice : FormantVoice
        The speaker; this utterance perturbs it slightly (see the module docstring).
    seconds : float
        Duration in seconds.
    sample_rate : int
        Sample rate in Hz (at least 1 kHz).
    rng : numpy.random.Generator
        Source of randomness; the same seed gives the same clip.

    Returns
    -------
    numpy.ndarray
        float32 mono samples, shape ``(round(seconds * sample_rate),)``, peak 0.5.
    """
    samples = int(round(seconds * sample_rate))
    if samples < 2 or sample_rate < 1000:
        raise ValueError(f"need >= 2 samples at >= 1 kHz, got {seconds} s at {sample_rate} Hz")
    utterance = _perturb(voice, rng)
    pulses = _glottal_source(utterance, samples, sample_rate, rng)
    breath = utterance.breathiness * np.sqrt(np.mean(pulses**2)) * rng.standard_normal(samples)
    source = (pulses + breath) * _syllable_envelope(utterance, samples, sample_rate, rng)
    frequencies = np.fft.rfftfreq(samples, 1.0 / sample_rate)
    grid = np.arange(0.0, sample_rate / 2.0 + ENVELOPE_GRID_HZ, ENVELOPE_GRID_HZ)
    speech = np.fft.rfft(source) * np.interp(frequencies, grid, spectral_envelope(utterance, grid))
    noise_shape = np.interp(frequencies, grid, _slope(grid, NOISE_SLOPE_DB_PER_OCTAVE))
    gaussian = rng.standard_normal((2, frequencies.size))
    noise = noise_shape * (gaussian[0] + 1j * gaussian[1])
    snr = 10.0 ** (rng.uniform(*SNR_RANGE_DB) / 10.0)
    gain = np.sqrt(_mean_square(speech, samples) / (snr * _mean_square(noise, samples) + 1e-30))
    noisy = np.fft.irfft(speech + gain * noise, samples)
    return (PEAK / (np.max(np.abs(noisy)) + 1e-20) * noisy).astype(np.float32)


def voice_corpus(
    n_speakers: int,
    clips_per_speaker: int,
    seconds: float,
    sample_rate: int = 16000,
    seed: int = 0,
) -> list[list[np.ndarray]]:
    """Make a small corpus of synthetic speakers.

    Speaker ``i`` and its clip ``j`` depend only on ``(seed, i)`` and ``(seed, i, j)``, so a larger
    corpus with the same seed starts with the same speakers and clips.

    Parameters
    ----------
    n_speakers : int
        Number of speakers.
    clips_per_speaker : int
        Number of utterances per speaker.
    seconds : float
        Duration of each utterance.
    sample_rate : int, optional
        Sample rate in Hz.
    seed : int, optional
        Seed of everything.

    Returns
    -------
    list of list of numpy.ndarray
        ``corpus[speaker][clip]``, each a float32 mono clip.
    """
    if n_speakers < 1 or clips_per_speaker < 1:
        raise ValueError("need at least one speaker and one clip per speaker")
    corpus = []
    for speaker in range(n_speakers):
        voice = random_voice(np.random.default_rng([seed, speaker, 0]))
        clips = [
            synthesize(voice, seconds, sample_rate, np.random.default_rng([seed, speaker, 1, clip]))
            for clip in range(clips_per_speaker)
        ]
        corpus.append(clips)
    return corpus
