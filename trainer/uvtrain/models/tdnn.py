"""The x-vector TDNN on log-mel features (Snyder et al., ICASSP 2018), the default audio
backbone (the cheapest that learns on a CPU)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from .base import Backbone, _ConvUnit, _sample_rate
from .frontends import LogMelFrontend


class LogMelTDNN(Backbone):
    """Log-mel front end + a compact x-vector TDNN with statistics pooling.

    waveform → :class:`LogMelFrontend` (40 bands, 25 ms / 10 ms) → ``[batch, mels, frames]`` →
    frame layers Conv1d (kernel, dilation) → GroupNorm → ReLU: (5, 1), (3, 2), (3, 3), (1, 1) of
    ``channels``, then (1, 1) of ``3 · channels`` → mean and standard deviation over time →
    Linear to ``embedding_dim``.

    The x-vector network (Snyder et al., "X-vectors: robust DNN embeddings for speaker
    recognition", ICASSP 2018) has 512 channels and 1500 before pooling; this is the same shape at
    ``channels=128`` (384 before pooling), about 11 MFLOP per second of audio against the
    ``logmel-resnet``'s ~200: the backbone that lets a federated run with hundreds of speakers
    learn on a 2-core CPU in minutes (``benchmarks/simulate.py`` measures both). GroupNorm
    replaces BatchNorm, as everywhere here.

    Parameters
    ----------
    sample_rate : int, optional
        Input sample rate.
    embedding_dim : int, optional
        Output dimension.
    channels : int, optional
        Width of the frame layers.
    n_mels, frame_seconds, hop_seconds, window : optional
        Of the :class:`LogMelFrontend` (``window``: ``"hann"``, or the FedHide paper's
        ``"hamming"``).
    """

    modality: ClassVar[str] = "audio"
    takes_window: ClassVar[bool] = True
    #: (kernel, dilation) of the frame layers before the last, wider one.
    FRAME_LAYERS: ClassVar[tuple[tuple[int, int], ...]] = ((5, 1), (3, 2), (3, 3), (1, 1))

    def __init__(
        self,
        sample_rate: int = 16000,
        embedding_dim: int = 256,
        channels: int = 64,
        n_mels: int = 40,
        frame_seconds: float = 0.025,
        hop_seconds: float = 0.010,
        window: str = "hann",
    ) -> None:
        super().__init__()
        self.frontend = LogMelFrontend(
            sample_rate, n_mels, frame_seconds, hop_seconds, window=window
        )
        specs = [(channels, k, d) for k, d in self.FRAME_LAYERS] + [(3 * channels, 1, 1)]
        widths = [n_mels] + [width for width, _, _ in specs]
        self.frames = nn.Sequential(
            *(
                _ConvUnit(i, o, k, padding=d * (k // 2), dims=1, dilation=d)
                for i, (o, k, d) in zip(widths[:-1], specs, strict=True)
            )
        )
        self.embedding_dim = int(embedding_dim)
        self.embedding = nn.Linear(2 * widths[-1], self.embedding_dim)
        #: Shortest input: one analysis frame (the frame layers pad).
        self.min_samples = self.frontend.min_samples

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **options: Any) -> LogMelTDNN:
        return cls(sample_rate=_sample_rate(spec), **options)

    def forward(self, waveform: Tensor) -> Tensor:
        """``float32 [batch, samples]`` → ``[batch, embedding_dim]``."""
        frames = self.frames(self.frontend(waveform))
        mean = frames.mean(dim=-1)
        std = (frames - mean.unsqueeze(-1)).pow(2).mean(dim=-1).add(1e-5).sqrt()
        return self.embedding(torch.cat([mean, std], dim=-1))
