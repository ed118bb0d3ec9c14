"""Feature extraction inside the model (so inside the exported ONNX graph): the log-mel
frontend of the audio backbones and the pixel normalisation of the image backbones."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from uvsdk.inputs import BANDS

from ..features import (
    WINDOWS,
    dft_kernels,
    kaldi_frame_kernels,
    kaldi_mel_filterbank,
    mel_filterbank,
    slaney_mel_filterbank,
)
from .base import LOG_EPSILON


def _register_bands(module: nn.Module, kernels: np.ndarray, filterbank: np.ndarray) -> None:
    """The constants of a filterbank frontend, as non-persistent buffers: ``dft_kernels`` (the
    cosine then sine kernels of one strided ``conv1d``) and ``filterbank`` repeated for the two
    halves, so that ``filterbank @ spectrum²`` is each band's power (:func:`_band_power`)."""
    module.register_buffer(
        "dft_kernels", torch.tensor(kernels[:, None, :], dtype=torch.float32), persistent=False
    )
    module.register_buffer(
        "filterbank",
        torch.tensor(np.concatenate([filterbank, filterbank], axis=1), dtype=torch.float32),
        persistent=False,
    )


def _band_power(module: nn.Module, signal: Tensor, hop: int) -> Tensor:
    """``[batch, 1, samples]`` → each band's power ``[batch, bands, frames]`` with the constants
    :func:`_register_bands` gave ``module``."""
    spectrum = F.conv1d(signal, module.dft_kernels, stride=hop)
    return torch.matmul(module.filterbank, spectrum * spectrum)


class LogMelFrontend(nn.Module):
    """Raw waveform → per-utterance normalised log-mel energies, in plain torch operators.

    Framing and the DFT are one strided ``conv1d`` with fixed windowed (periodic Hann, or Hamming)
    cosine and sine kernels (``n_fft`` = frame length, no padding: the frames of ``torch.stft(center=False)``); the
    power spectrum ``cos² + sin²`` times the mel filterbank is one matrix product with the filterbank
    repeated for the two halves; then ``log(· + 1e-6)`` and a per-utterance normalisation.
    Defaults: 40 bands, 25 ms frames every 10 ms, as the
    log-mel input of Fast ResNet-34 (Chung et al., "In defence of metric learning for speaker
    recognition", Interspeech 2020) used by FedHide (Park & Yun, "FedHide: Federated Learning by
    Hiding in the Neighbors", Sec. 4.1: 40 mel filterbanks, "a Hamming window of 25ms length and
    10ms hop size"; ``window="hamming"``).

    Parameters
    ----------
    sample_rate : int, optional
        Sample rate of the input, Hz.
    n_mels : int, optional
        Mel bands.
    frame_seconds, hop_seconds : float, optional
        Frame length and hop.
    fmin, fmax : float, optional
        Band edges of the filterbank (``fmax`` defaults to Nyquist).
    normalise : {"gain", "band", "none"}, optional
        ``gain`` (default) subtracts one number per utterance, the mean over bands and frames: the
        input's gain goes, the spectral envelope stays. ``band`` subtracts each band's mean over
        time (cepstral mean normalisation): it also removes channel colouring, but with it every
        time-invariant part of a voice's spectrum — on voices whose identity is mostly their
        static envelope (the synthetic ones here) it left test EER at chance where ``gain``
        learned (0.50 vs 0.32 after 100 FedUV rounds on 40 formant voices).
    window : {"hann", "hamming"}, optional
        Analysis window of the frames, periodic (:func:`uvtrain.features.analysis_window`). Hann
        is our default; Hamming is the FedHide paper's (Sec. 4.1), which the FedHide, FedGN and
        FedCS methods ask for. Both are fixed weights of the graph's first convolution, so the
        exported ONNX model carries the one it was trained with.
    librosa : bool, optional
        ``True``: the mel *power* of ``librosa.feature.melspectrogram`` instead — frames centred
        (half a frame of reflected signal at each end), the Slaney filterbank from 0 Hz to
        Nyquist (``fmin``/``fmax`` unused), no logarithm; ``normalise`` must be ``"none"``. The
        input of the pretrained GE2E encoder (:class:`GE2ESpeakerEncoder`).

    Notes
    -----
    Input ``float32 [batch, samples]`` with ``samples >= min_samples`` (one frame); output
    ``float32 [batch, n_mels, frames]``, ``frames = (samples - frame_length) // hop + 1``
    (``1 + samples // hop`` with ``librosa``).
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        n_mels: int = 40,
        frame_seconds: float = 0.025,
        hop_seconds: float = 0.010,
        fmin: float = 20.0,
        fmax: float | None = None,
        normalise: str = "gain",
        librosa: bool = False,
        window: str = "hann",
    ) -> None:
        super().__init__()
        if normalise not in ("gain", "band", "none"):
            raise ValueError(f"normalise must be 'gain', 'band' or 'none', not {normalise!r}")
        if librosa and normalise != "none":
            raise ValueError("the librosa mel power takes normalise='none'")
        if window not in WINDOWS or (librosa and window != "hann"):
            raise ValueError(f"window must be one of {WINDOWS} (hann with librosa), not {window!r}")
        self.window = window
        self.librosa = bool(librosa)
        self.sample_rate = int(sample_rate)
        self.n_mels = int(n_mels)
        self.frame_length = int(round(frame_seconds * sample_rate))
        self.hop = int(round(hop_seconds * sample_rate))
        self.normalise = normalise
        if self.frame_length < 2 or self.hop < 1 or self.n_mels < 1:
            raise ValueError(
                f"frame ({frame_seconds} s), hop ({hop_seconds} s) or n_mels ({n_mels}) too small"
            )
        kernels = dft_kernels(self.frame_length, window=window)
        if librosa:
            filterbank = slaney_mel_filterbank(self.n_mels, self.frame_length, self.sample_rate)
        else:
            filterbank = mel_filterbank(
                self.n_mels, self.frame_length, self.sample_rate, fmin, fmax
            )
        _register_bands(self, kernels, filterbank)

    @property
    def min_samples(self) -> int:
        """Shortest input: one frame (centred: more than the half frame that is reflected)."""
        return self.frame_length // 2 + 1 if self.librosa else self.frame_length

    def frames(self, samples: int) -> int:
        """Number of frames for an input of ``samples`` samples."""
        if self.librosa:
            return 1 + samples // self.hop
        return (samples - self.frame_length) // self.hop + 1

    def forward(self, waveform: Tensor) -> Tensor:
        """``[batch, samples]`` → ``[batch, n_mels, frames]``."""
        signal = waveform.unsqueeze(1)
        if self.librosa:
            signal = F.pad(signal, (self.frame_length // 2,) * 2, mode="reflect")
        bands = _band_power(self, signal, self.hop)
        if self.librosa:
            return bands
        log_bands = torch.log(bands + LOG_EPSILON)
        if self.normalise == "band":
            log_bands = log_bands - log_bands.mean(dim=-1, keepdim=True)
        elif self.normalise == "gain":
            log_bands = log_bands - log_bands.mean(dim=(-2, -1), keepdim=True)
        return log_bands


#: The top of the ``narrow`` band: the Nyquist frequency of a telephone chain's 8 kHz sampling.
NARROW_BAND_HZ = 4000.0
#: Kaldi's floor under the mel energies before the logarithm (``std::numeric_limits<float>::epsilon``).
KALDI_LOG_FLOOR = float(np.finfo(np.float32).eps)


class KaldiFbank(nn.Module):
    """Raw waveform → Kaldi log-mel filterbank energies, mean-normalised over time, in plain torch.

    The input of 3D-Speaker's CAM++ (its ``FBank(80, 16000, mean_nor=True)``:
    ``torchaudio.compliance.kaldi.fbank(wav, num_mel_bins=80, dither=0)`` and then each band's
    mean over the utterance subtracted), written without torchaudio so that it is one graph with
    the network: frames of 25 ms every 10 ms without padding (Kaldi's ``snip_edges``), the
    per-frame DC removal, pre-emphasis, povey window and zero-padded DFT as one strided
    ``conv1d`` (:func:`uvtrain.features.kaldi_frame_kernels`), the power spectrum times Kaldi's
    mel filterbank (:func:`uvtrain.features.kaldi_mel_filterbank`), ``log(max(·, ε))`` with
    float32's ε, then the mean over frames subtracted from each band. Checked against
    ``kaldi-native-fbank`` (an independent C++ port of Kaldi) in the tests.

    ``band="narrow"`` weighs the spectrum's bins above :data:`NARROW_BAND_HZ` (4 kHz, the Nyquist
    frequency of a telephone chain's 8 kHz) by zero before the filterbank: every clip, wideband or
    not, is heard as through a narrowband chain, so that a threshold set on one kind of channel
    holds on the other (issue 44's measurement: CAM++'s FAR at a wideband FAR-1 % threshold was
    37 % on telephone speech, 0.6 % with every clip band-limited). Bands wholly above it are the
    log floor, so 0 after the mean normalisation. ``window="hamming"`` frames with Kaldi's hamming
    window instead of its povey window (WeSpeaker's models; ``uvexport import``).

    Input ``float32 [batch, samples]`` (``samples >= min_samples``, one frame); output
    ``float32 [batch, frames, n_mels]``, ``frames = (samples − 400) // 160 + 1`` at 16 kHz.
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        n_mels: int = 80,
        frame_seconds: float = 0.025,
        hop_seconds: float = 0.010,
        mean_normalise: bool = True,
        band: str = "wide",
        window: str = "povey",
    ) -> None:
        super().__init__()
        if band not in BANDS:
            raise ValueError(f"band must be one of {BANDS}, not {band!r}")
        self.band = band
        self.sample_rate = int(sample_rate)
        self.n_mels = int(n_mels)
        self.frame_length = int(round(frame_seconds * sample_rate))
        self.hop = int(round(hop_seconds * sample_rate))
        self.mean_normalise = bool(mean_normalise)
        kernels = kaldi_frame_kernels(self.frame_length, window=window)
        n_fft = 2 * (kernels.shape[0] // 2 - 1)
        filterbank = kaldi_mel_filterbank(self.n_mels, n_fft, self.sample_rate)
        if band == "narrow":
            frequencies = np.arange(filterbank.shape[1]) * self.sample_rate / n_fft
            filterbank = filterbank * (frequencies <= NARROW_BAND_HZ)
        _register_bands(self, kernels, filterbank)

    @property
    def min_samples(self) -> int:
        """Shortest input: one frame."""
        return self.frame_length

    def frames(self, samples: int) -> int:
        """Number of frames for an input of ``samples`` samples."""
        return (samples - self.frame_length) // self.hop + 1

    def forward(self, waveform: Tensor) -> Tensor:
        """``[batch, samples]`` → ``[batch, frames, n_mels]``."""
        bands = _band_power(self, waveform.unsqueeze(1), self.hop)
        log_bands = torch.log(bands.clamp_min(KALDI_LOG_FLOOR)).transpose(1, 2)
        if self.mean_normalise:
            log_bands = log_bands - log_bands.mean(dim=1, keepdim=True)
        return log_bands


class ImageFrontend(nn.Module):
    """uint8 ``[batch, height, width, channels]`` → normalised float32 ``[batch, channels, H, W]``.

    ``x / 255``, channels-last to channels-first, then ``(x − mean) / std`` per channel.

    Parameters
    ----------
    mean, std : float or sequence of float, optional
        Per-channel statistics of ``x / 255`` (one value applies to every channel).
    """

    def __init__(
        self, mean: float | Sequence[float] = 0.5, std: float | Sequence[float] = 0.5
    ) -> None:
        super().__init__()
        mean_values = torch.as_tensor(mean, dtype=torch.float32).reshape(1, -1, 1, 1)
        std_values = torch.as_tensor(std, dtype=torch.float32).reshape(1, -1, 1, 1)
        if bool((std_values <= 0).any()):
            raise ValueError(f"std must be positive, got {std}")
        self.register_buffer("mean", mean_values, persistent=False)
        self.register_buffer("std", std_values, persistent=False)

    def forward(self, pixels: Tensor) -> Tensor:
        """``uint8 [batch, H, W, C]`` → ``float32 [batch, C, H, W]``."""
        scaled = pixels.to(self.mean.dtype) / 255.0
        return (scaled.permute(0, 3, 1, 2) - self.mean) / self.std
