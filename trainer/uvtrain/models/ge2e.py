"""The pretrained GE2E speaker encoder of Resemblyzer in plain torch, with its trainable
residual adapter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import NORM_EPSILON, Backbone, _sample_rate
from .frontends import LogMelFrontend


class GE2ESpeakerEncoder(Backbone):
    """The pretrained GE2E speaker encoder of Resemblyzer, in plain torch, with a trainable adapter.

    The speaker encoder of Wan et al. ("Generalized End-to-End Loss for Speaker Verification",
    ICASSP 2018) as trained by Resemblyzer (Apache-2.0; weights ``resemblyzer/pretrained.pt`` of
    its wheel, trained on LibriSpeech, VoxCeleb 1 and 2): 40-band mel power spectrogram (25 ms
    Hann frames every 10 ms, ``librosa.feature.melspectrogram``'s filterbank, no logarithm) →
    3-layer LSTM of 256 → Linear 256 → ReLU → unit norm, on partial utterances of 160 frames
    (1.6 s) every 77 frames, whose embeddings are averaged and normalised
    (``VoiceEncoder.embed_utterance``). The waveform is first raised to −30 dBFS when quieter
    (Resemblyzer's ``normalize_volume(increase_only=True)``); its voice-activity trimming is not
    reproduced (the SDK windows clips instead). All of it is in ``forward``, so in the ONNX graph.

    Then a residual adapter ``e + A e + b`` (``A``, ``b`` zero at start, so an untrained model is
    the pretrained encoder exactly) is what federated training adapts; with ``freeze_encoder``
    (default) the LSTM and its projection are frozen (``requires_grad=False``: the engine passes
    them like buffers, and never sends or averages them).

    The pretrained weights are loaded with :func:`load_backbone_checkpoint` (``--pretrained
    pretrained.pt``; see :mod:`uvtrain.pretrained`): the parameter names ``lstm.*`` and
    ``linear.*`` are Resemblyzer's.
    """

    modality: ClassVar[str] = "audio"
    SAMPLE_RATE: ClassVar[int] = 16000
    #: Frames of one partial utterance, and the step between partials (1.3 per second).
    PARTIAL_FRAMES: ClassVar[int] = 160
    PARTIAL_STEP: ClassVar[int] = 77
    #: A trailing partial is kept when at least this many of its frames hold audio (75 %).
    MIN_COVERAGE_FRAMES: ClassVar[int] = 120
    #: Weights an int8 export keeps at float16 (``uvexport --quantize weights``): the LSTM's.
    #: Measured on the exporter's synth-voices probes (a 0-round ``--pretrained ge2e`` run): with
    #: the LSTM's weights int8 (blocks of 32, zero points) the scores moved by 0.149, with only
    #: its recurrence weights at float16 by 0.148, with all of them at float16 by 0.0014 (the
    #: bundle 5.75 MB -> 3.05 MB).
    half_precision: ClassVar[tuple[str, ...]] = ("lstm.",)
    #: −30 dBFS as an RMS of samples in [-1, 1].
    TARGET_RMS: ClassVar[float] = 10.0 ** (-30.0 / 20.0)

    def __init__(
        self,
        sample_rate: int = 16000,
        embedding_dim: int = 256,
        hidden: int = 256,
        layers: int = 3,
        n_mels: int = 40,
        freeze_encoder: bool = True,
    ) -> None:
        super().__init__()
        if int(sample_rate) != self.SAMPLE_RATE:
            raise ValueError(f"the GE2E encoder takes 16 kHz audio, not {sample_rate} Hz")
        self.frontend = LogMelFrontend(
            self.SAMPLE_RATE, n_mels, 0.025, 0.010, normalise="none", librosa=True
        )
        self.lstm = nn.LSTM(n_mels, hidden, layers, batch_first=True)
        self.linear = nn.Linear(hidden, hidden)
        self.embedding_dim = int(embedding_dim)
        self.adapter = nn.Linear(hidden, self.embedding_dim)
        nn.init.zeros_(self.adapter.weight)
        nn.init.zeros_(self.adapter.bias)
        self._residual = self.embedding_dim == hidden
        if freeze_encoder:
            self.lstm.requires_grad_(False)
            self.linear.requires_grad_(False)
        #: Shortest input: the frame padding is a reflection of 200 samples.
        self.min_samples = self.frontend.min_samples

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], **options: Any) -> GE2ESpeakerEncoder:
        return cls(sample_rate=_sample_rate(spec), **options)

    def mel(self, waveform: Tensor) -> Tensor:
        """``[batch, samples]`` → mel power ``[batch, frames, n_mels]``, ``frames = 1 +
        samples // 160`` (centred frames, reflected edges)."""
        rms = waveform.pow(2).mean(dim=-1, keepdim=True).sqrt()
        gain = (self.TARGET_RMS / rms.clamp_min(1e-8)).clamp_min(1.0)
        return self.frontend(waveform * gain).transpose(1, 2)

    def partials(self, mel: Tensor) -> Tensor:
        """``[batch, frames, n_mels]`` → ``[batch, partials, 160, n_mels]``: windows every 77
        frames, zero-padded at the end, the last kept when 120 of its frames (75 %) hold audio
        (``VoiceEncoder.compute_partial_slices(rate=1.3, min_coverage=0.75)``)."""
        frames = mel.shape[1]
        count = torch.sym_max(1, (frames - self.MIN_COVERAGE_FRAMES) // self.PARTIAL_STEP + 1)
        padded = F.pad(mel, (0, 0, 0, self.PARTIAL_FRAMES))
        starts = torch.arange(count, device=mel.device) * self.PARTIAL_STEP
        index = starts[:, None] + torch.arange(self.PARTIAL_FRAMES, device=mel.device)[None, :]
        return padded[:, index]

    def encode(self, mel: Tensor) -> Tensor:
        """Pretrained GE2E embeddings of ``[batch, frames, n_mels]``: partials, averaged, unit."""
        batch = mel.shape[0]
        partials = self.partials(mel).reshape(-1, self.PARTIAL_FRAMES, mel.shape[2])
        _, (hidden, _) = self.lstm(partials)
        partial = F.relu(self.linear(hidden[-1]))
        partial = partial / torch.linalg.vector_norm(partial, dim=-1, keepdim=True).clamp_min(
            NORM_EPSILON
        )
        mean = partial.reshape(batch, -1, partial.shape[-1]).mean(dim=1)
        return mean / torch.linalg.vector_norm(mean, dim=-1, keepdim=True).clamp_min(NORM_EPSILON)

    def forward(self, waveform: Tensor) -> Tensor:
        """``float32 [batch, samples]`` → ``[batch, embedding_dim]``."""
        embedding = self.encode(self.mel(waveform))
        adapted = self.adapter(embedding)
        return embedding + adapted if self._residual else adapted
