"""Definitions shared by the trainer's models and the exporter's reference graphs (numpy only).

One mel filterbank and one raw-waveform layer table, so training and serving cannot drift apart.
"""

from __future__ import annotations

import numpy as np

#: Our raw-waveform conv net, of about the cost of the FedUV paper's VoxCeleb network but not its
#: Table 2 layers (those are ``feduv-voxceleb-conv1d``; about 1.24 GFLOP per 2-s clip here):
#: (in channels, out channels, kernel, stride) of each conv1d layer.
VOXCELEB_LAYERS: tuple[tuple[int, int, int, int], ...] = (
    (1, 128, 251, 10),
    (128, 128, 5, 2),
    (128, 256, 3, 2),
    (256, 256, 3, 2),
    (256, 512, 3, 2),
    (512, 512, 3, 1),
)


#: Analysis windows of the log-mel frontends: ``hann`` (ours, librosa's) and ``hamming`` (the
#: FedHide paper's speaker features, Park & Yun, Sec. 4.1).
WINDOWS = ("hann", "hamming")


def analysis_window(name: str, length: int) -> np.ndarray:
    """The periodic window of ``length`` samples, as ``torch.hann_window`` /
    ``torch.hamming_window`` make it (``periodic=True``, torchaudio's default):
    ``hann`` ``0.5 − 0.5 cos(2πn/N)``, ``hamming`` ``0.54 − 0.46 cos(2πn/N)``, ``n = 0 … N−1``.
    ``float64 [length]``."""
    if name == "hann":
        return np.hanning(length + 1)[:-1]
    if name == "hamming":
        return np.hamming(length + 1)[:-1]
    raise ValueError(f"window must be one of {WINDOWS}, not {name!r}")


def dft_kernels(
    frame_length: int, bins: np.ndarray | None = None, window: str = "hann"
) -> np.ndarray:
    """Windowed cosine then sine kernels at DFT ``bins`` (default ``0 … n/2``), the window
    periodic (:func:`analysis_window`; Hann by default).

    ``float64 [2 · len(bins), frame_length]``: a strided convolution with them frames a waveform
    and takes its DFT in one operator (``cos² + sin²`` is the power spectrum).
    """
    bins = np.arange(frame_length // 2 + 1) if bins is None else np.asarray(bins)
    angle = 2.0 * np.pi * np.outer(bins, np.arange(frame_length)) / frame_length
    return np.concatenate([np.cos(angle), np.sin(angle)]) * analysis_window(window, frame_length)


def hertz_to_mel(frequency: np.ndarray | float) -> np.ndarray:
    """HTK mel scale: ``2595 · log10(1 + f / 700)``."""
    return 2595.0 * np.log10(1.0 + np.asarray(frequency, dtype=np.float64) / 700.0)


def mel_to_hertz(mel: np.ndarray) -> np.ndarray:
    """Inverse of :func:`hertz_to_mel`."""
    return 700.0 * (10.0 ** (np.asarray(mel) / 2595.0) - 1.0)


def mel_filterbank(
    n_mels: int,
    n_fft: int,
    sample_rate: int,
    fmin: float = 20.0,
    fmax: float | None = None,
    *,
    area: bool = False,
) -> np.ndarray:
    """Triangular filters equally spaced on the HTK mel scale.

    Parameters
    ----------
    n_mels : int
        Number of filters.
    n_fft : int
        DFT length; bin ``k`` is at ``k · sample_rate / n_fft`` Hz, ``k = 0 … n_fft // 2``.
    sample_rate : int
        Sample rate in Hz.
    fmin, fmax : float, optional
        Lower edge of the first and upper edge of the last filter, Hz (``fmax``: Nyquist).
    area : bool, optional
        ``False``: filters of peak 1 (Kaldi's fbank). ``True``: each filter sums to 1, so a band
        is the average power of its bins.

    Returns
    -------
    numpy.ndarray
        ``float64 [n_mels, n_fft // 2 + 1]``. A filter narrower than the bin spacing gets weight 1
        on its nearest bin, so that no band is empty.
    """
    top = sample_rate / 2.0 if fmax is None else float(fmax)
    if not 0.0 <= fmin < top <= sample_rate / 2.0:
        raise ValueError(f"need 0 <= fmin < fmax <= {sample_rate / 2}, got {fmin}, {top}")
    bins = np.arange(n_fft // 2 + 1) * sample_rate / n_fft
    edges = mel_to_hertz(np.linspace(hertz_to_mel(fmin), hertz_to_mel(top), n_mels + 2))
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins - lower) / (centre - lower)
    falling = (upper - bins) / (upper - centre)
    weights = np.maximum(0.0, np.minimum(rising, falling))
    for band in np.flatnonzero(weights.sum(axis=1) == 0.0):
        weights[band, np.argmin(np.abs(bins - centre[band, 0]))] = 1.0
    return weights / weights.sum(axis=1, keepdims=True) if area else weights


def _slaney_hertz_to_mel(frequency: np.ndarray) -> np.ndarray:
    """Slaney's Auditory Toolbox mel scale (librosa's default): linear below 1 kHz, log above."""
    frequency = np.asarray(frequency, dtype=np.float64)
    linear = frequency / (200.0 / 3.0)
    log_part = 15.0 + np.log(np.maximum(frequency, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(frequency >= 1000.0, log_part, linear)


def _slaney_mel_to_hertz(mel: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_slaney_hertz_to_mel`."""
    mel = np.asarray(mel, dtype=np.float64)
    return np.where(
        mel >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0)), (200.0 / 3.0) * mel
    )


def slaney_mel_filterbank(n_mels: int, n_fft: int, sample_rate: int) -> np.ndarray:
    """The mel filterbank of ``librosa.filters.mel(sr, n_fft, n_mels)`` with its defaults.

    Slaney mel scale from 0 Hz to Nyquist, triangles normalised to unit area in Hz ("slaney"
    norm): the frontend the GE2E speaker encoder of Resemblyzer was trained with
    (``librosa.feature.melspectrogram``). Returns ``float64 [n_mels, n_fft // 2 + 1]``.
    """
    bins = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)
    edges = _slaney_mel_to_hertz(
        np.linspace(_slaney_hertz_to_mel(0.0), _slaney_hertz_to_mel(sample_rate / 2.0), n_mels + 2)
    )
    widths = np.diff(edges)
    ramps = edges[:, None] - bins[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    return weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]


#: Kaldi's fbank defaults, as ``torchaudio.compliance.kaldi.fbank`` and 3D-Speaker's ``FBank``
#: use them: 25 ms frames every 10 ms, DC offset removed per frame, pre-emphasis 0.97, the
#: "povey" window (a symmetric Hann window to the power 0.85), zero-padded to a power of two.
KALDI_PREEMPHASIS = 0.97
KALDI_POVEY_POWER = 0.85


def kaldi_frame_kernels(
    frame_length: int, n_fft: int | None = None, window: str = "povey"
) -> np.ndarray:
    """Kaldi's per-frame processing and the DFT as one linear map: cosine then sine kernels.

    Kaldi (``feature-window.cc``, ``ProcessWindow``; ``torchaudio.compliance.kaldi._get_window``)
    takes a frame ``x`` of ``frame_length`` samples, removes its mean, pre-emphasises it
    (``y[i] = x[i] − 0.97 x[i−1]``, ``y[0] = x[0] − 0.97 x[0]``), multiplies by the povey window
    (``window="hamming"``: Kaldi's hamming, ``0.54 − 0.46 cos(2πn / (N − 1))``, as WeSpeaker's
    front end asks) and zero-pads it to ``n_fft`` (the next power of two) before the DFT. Each
    step is linear in
    ``x``, so the whole is one matrix: row ``k`` of the result is the real (then imaginary) part
    of DFT bin ``k`` of the processed frame, for bins ``0 … n_fft / 2``. A strided convolution
    with these kernels frames a waveform and takes Kaldi's spectrum in one operator.

    Returns
    -------
    numpy.ndarray
        ``float64 [2 · (n_fft // 2 + 1), frame_length]``.
    """
    n_fft = int(n_fft or 1 << (frame_length - 1).bit_length())
    if n_fft < frame_length:
        raise ValueError(f"n_fft {n_fft} is shorter than the frame ({frame_length})")
    dc = np.eye(frame_length) - 1.0 / frame_length
    emphasis = np.eye(frame_length) - KALDI_PREEMPHASIS * np.eye(frame_length, k=-1)
    emphasis[0, 0] = 1.0 - KALDI_PREEMPHASIS
    steps = np.arange(frame_length)
    cosine = np.cos(2.0 * np.pi * steps / (frame_length - 1))
    if window == "povey":
        window_values = (0.5 - 0.5 * cosine) ** KALDI_POVEY_POWER
    elif window == "hamming":
        window_values = 0.54 - 0.46 * cosine
    else:
        raise ValueError(f"window must be povey or hamming, not {window!r}")
    processing = window_values[:, None] * (emphasis @ dc)
    angle = 2.0 * np.pi * np.outer(np.arange(n_fft // 2 + 1), steps) / n_fft
    return np.concatenate([np.cos(angle), -np.sin(angle)]) @ processing


def kaldi_mel_filterbank(
    n_mels: int, n_fft: int, sample_rate: int, fmin: float = 20.0, fmax: float = 0.0
) -> np.ndarray:
    """Kaldi's mel filterbank (``mel-computations.cc``; ``torchaudio.compliance.kaldi.get_mel_banks``).

    Triangles equally spaced on Kaldi's mel scale ``1127 · ln(1 + f / 700)`` (:func:`hertz_to_mel`:
    the same scale, 2595 / ln 10 = 1127.0), their slopes linear *in mel* (not in hertz, unlike
    :func:`mel_filterbank`), peak 1; the Nyquist bin gets no weight. ``fmax ≤ 0`` counts down from
    Nyquist (Kaldi's ``high_freq``).

    Returns
    -------
    numpy.ndarray
        ``float64 [n_mels, n_fft // 2 + 1]``.
    """
    nyquist = sample_rate / 2.0
    top = fmax + nyquist if fmax <= 0.0 else float(fmax)
    if not 0.0 <= fmin < top <= nyquist:
        raise ValueError(f"need 0 <= fmin < fmax <= {nyquist}, got {fmin}, {top}")
    low, high = hertz_to_mel(fmin), hertz_to_mel(top)
    delta = (high - low) / (n_mels + 1)
    band = np.arange(n_mels)[:, None]
    left, centre, right = low + band * delta, low + (band + 1) * delta, low + (band + 2) * delta
    bins = hertz_to_mel(np.arange(n_fft // 2) * sample_rate / n_fft)[None, :]
    weights = np.maximum(
        0.0, np.minimum((bins - left) / (centre - left), (right - bins) / (right - centre))
    )
    return np.concatenate([weights, np.zeros((n_mels, 1))], axis=1)
