"""The median fundamental frequency (F0) of a speaker's voiced frames, for the gender labels of
the real-speech people (:data:`~.sources.LABELS`) where no credit names them.

The estimator is plain autocorrelation (Boersma 1993, without the path finder), in numpy:

1. each clip is made mono, resampled to :data:`RATE` (soxr) and low-passed at
   :data:`LOWPASS_HZ` (FFT, bins above zeroed): the fundamental stays, the formants go;
2. frames of :data:`FRAME_SECONDS` every :data:`HOP_SECONDS`, Hann-windowed; a frame whose RMS
   is more than :data:`SILENCE_DB` below the clip's loudest frame is silence, skipped;
3. the frame's autocorrelation divided by the window's own (so that long lags are not
   penalised), normalised by lag 0; the lags of :data:`MIN_F0_HZ`-:data:`MAX_F0_HZ` are searched;
4. the frame is voiced when its highest peak there reaches :data:`VOICING`; its period is the
   shortest lag whose local peak reaches :data:`OCTAVE_RATIO` of that highest peak (a periodic
   signal peaks again at 2, 3, ... periods: taking the highest would halve F0 by chance),
   refined by a parabola through the peak and its neighbours;
5. a speaker's F0 is the median over the voiced frames of all their clips; its *spread* is the
   ratio of the 90th to the 10th percentile of the clips' own medians (one steady voice: 1.1-1.8).

:func:`gender_from_f0` turns it into a label with the thresholds :data:`MALE_MAX_HZ` and
:data:`FEMALE_MIN_HZ`-:data:`FEMALE_MAX_HZ` (typical adult speaking F0: men about 85-155 Hz,
women 165-255 Hz, children above 250 Hz); in between, and above, it says ``unknown``: a raised
or acted voice, or a child's, cannot be told apart by pitch alone. A spread above
:data:`MAX_SPREAD` (the clips' pitches more than an octave apart) says ``unknown`` too: two voices
in one folder, or a voice the estimator does not follow.

    python -m uvtrain.data.real_speech.pitch SPEAKERS_DIR [--clips N]

prints every speaker folder's median F0, its voiced frames and the label the thresholds give.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RATE = 16000
LOWPASS_HZ = 1000.0
FRAME_SECONDS = 0.040
HOP_SECONDS = 0.010
SILENCE_DB = 30.0
MIN_F0_HZ = 60.0
MAX_F0_HZ = 500.0
VOICING = 0.5
OCTAVE_RATIO = 0.9
#: A median F0 at or below this is a man's voice.
MALE_MAX_HZ = 150.0
#: A median F0 in this range is a woman's voice (above it: ``unknown``, a child or a raised voice).
FEMALE_MIN_HZ = 170.0
FEMALE_MAX_HZ = 255.0
#: A spread (90th / 10th percentile of the clips' medians) above this: ``unknown``.
MAX_SPREAD = 2.0

METHOD = (
    "median F0 of the voiced frames, autocorrelation (uvtrain.data.real_speech.pitch: 16 kHz, "
    "low-passed at 1 kHz, 40 ms Hann frames every 10 ms, voiced at normalised peak >= 0.5, "
    "60-500 Hz)"
)
THRESHOLDS = (
    "male <= 150 Hz, female 170-255 Hz, otherwise unknown; unknown when the clips' medians spread "
    "more than 2x (90th / 10th percentile)"
)


def _prepare(audio: np.ndarray, rate: int) -> np.ndarray:
    audio = np.asarray(audio, dtype=np.float64)
    if audio.ndim == 2:
        audio = audio.mean(axis=1)
    if rate != RATE:
        import soxr

        audio = soxr.resample(audio, rate, RATE)
    spectrum = np.fft.rfft(audio)
    spectrum[np.fft.rfftfreq(len(audio), 1 / RATE) > LOWPASS_HZ] = 0
    return np.fft.irfft(spectrum, len(audio))


def frame_f0(audio: np.ndarray, rate: int) -> np.ndarray:
    """The F0 (Hz) of every voiced frame of one clip (``[frames]``, possibly empty)."""
    signal = _prepare(audio, rate)
    size, hop = round(FRAME_SECONDS * RATE), round(HOP_SECONDS * RATE)
    if len(signal) < size:
        return np.zeros(0)
    frames = np.lib.stride_tricks.sliding_window_view(signal, size)[::hop]
    frames = frames - frames.mean(axis=1, keepdims=True)
    rms = np.sqrt(np.mean(frames**2, axis=1))
    loud = rms >= rms.max(initial=0.0) * 10 ** (-SILENCE_DB / 20)
    frames = frames[loud & (rms > 0)]
    if not len(frames):
        return np.zeros(0)
    window = np.hanning(size)
    n = 2 * size
    power = np.abs(np.fft.rfft(frames * window, n)) ** 2
    auto = np.fft.irfft(power, n)[:, :size]
    own = np.fft.irfft(np.abs(np.fft.rfft(window, n)) ** 2, n)[:size]
    auto = auto / own / np.maximum(auto[:, :1] / own[0], 1e-12)
    low, high = int(RATE / MAX_F0_HZ), int(np.ceil(RATE / MIN_F0_HZ))
    found = []
    for row in auto:
        lags = row[low - 1 : high + 2]
        inner = lags[1:-1]
        peaks = np.flatnonzero((inner > lags[:-2]) & (inner >= lags[2:]))
        if not len(peaks) or inner[peaks].max() < VOICING:
            continue
        best = inner[peaks].max()
        at = peaks[np.argmax(inner[peaks] >= OCTAVE_RATIO * best)] + 1  # index into ``lags``
        left, middle, right = lags[at - 1], lags[at], lags[at + 1]
        curve = left - 2 * middle + right
        shift = 0.5 * (left - right) / curve if curve < 0 else 0.0
        found.append(RATE / (low - 1 + at + shift))
    return np.asarray(found)


@dataclass(frozen=True)
class Pitch:
    """A speaker's measured pitch."""

    #: Median F0 (Hz) over the voiced frames of all the clips; ``None`` when none was voiced.
    f0: float | None
    #: Voiced frames, and clips read.
    voiced_frames: int
    clips: int
    #: 90th / 10th percentile of the clips' own median F0 (``None`` under 2 voiced clips).
    spread: float | None

    def gender(self) -> str:
        """:func:`gender_from_f0` of this measurement."""
        return gender_from_f0(self.f0, self.spread)


def median_f0(clips: Iterable[tuple[np.ndarray, int]]) -> Pitch:
    """The pitch of a speaker's ``clips`` (``(audio, rate)`` each)."""
    values = [frame_f0(audio, rate) for audio, rate in clips]
    voiced = [v for v in values if len(v)]
    pooled = np.concatenate(voiced) if voiced else np.zeros(0)
    spread = None
    if len(voiced) >= 2:
        low, high = np.percentile([np.median(v) for v in voiced], [10, 90])
        spread = float(high / low)
    f0 = float(np.median(pooled)) if len(pooled) else None
    return Pitch(f0, int(len(pooled)), len(values), spread)


def gender_from_f0(f0: float | None, spread: float | None = None) -> str:
    """``male``, ``female`` or ``unknown`` by the thresholds of this module."""
    if f0 is None or (spread is not None and spread > MAX_SPREAD):
        return "unknown"
    if f0 <= MALE_MAX_HZ:
        return "male"
    if FEMALE_MIN_HZ <= f0 <= FEMALE_MAX_HZ:
        return "female"
    return "unknown"


def folder_f0(folder: Path, clips: int = 60) -> Pitch:
    """A speaker folder's pitch over at most ``clips`` of its WAV files (evenly spread over the
    sorted names)."""
    import soundfile as sf

    files = sorted(Path(folder).glob("*.wav"))
    if len(files) > clips:
        files = [files[i] for i in np.linspace(0, len(files) - 1, clips).round().astype(int)]
    read = []
    for file in files:
        audio, rate = sf.read(str(file), dtype="float32")
        read.append((audio, rate))
    return median_f0(read)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("speakers", type=Path, help="the folder of <source>-<speaker> folders")
    parser.add_argument("--clips", type=int, default=60, help="clips per speaker at most")
    args = parser.parse_args(argv)
    print(f"# {METHOD}; {THRESHOLDS}")
    print("folder                                  F0 Hz  spread  voiced clips  label")
    for folder in sorted(p for p in args.speakers.iterdir() if p.is_dir()):
        pitch = folder_f0(folder, args.clips)
        f0 = "   n/a" if pitch.f0 is None else f"{pitch.f0:6.1f}"
        spread = "  n/a" if pitch.spread is None else f"{pitch.spread:5.2f}"
        print(
            f"{folder.name:38s} {f0}  {spread}  {pitch.voiced_frames:6d} {pitch.clips:5d}  "
            f"{pitch.gender()}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
