"""``uvexport import``: a speaker encoder someone holds (an ONNX file) becomes a bundle that the
SDK runs as the encoder, with the project's front end put in front of it."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from uvexport.cli import main
from uvsdk import Bundle, Verifier
from uvsdk.media import trim_silence
from uvtrain.models.frontends import KaldiFbank

RATE = 16000


class FilterbankEncoder(nn.Module):
    """A small x-vector-like encoder on filterbank features, as published encoders are."""

    def __init__(self, bands: int = 80, bands_first: bool = False) -> None:
        super().__init__()
        self.bands_first = bands_first
        self.conv = nn.Conv1d(bands, 48, 5)
        self.out = nn.Linear(96, 24)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = features if self.bands_first else features.transpose(1, 2)
        hidden = torch.relu(self.conv(x))
        return self.out(torch.cat([hidden.mean(-1), hidden.std(-1)], -1))


class WaveformEncoder(nn.Module):
    """An encoder with its own front end: framed samples, a linear map, mean over frames."""

    def __init__(self) -> None:
        super().__init__()
        self.frames = nn.Conv1d(1, 16, 400, stride=160)
        self.out = nn.Linear(16, 8)

    def forward(self, samples: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.frames(samples[:, None])).mean(-1))


def exported(model: nn.Module, example: torch.Tensor, path: Path, axis: int) -> Path:
    """``model`` as an ONNX file the way its publisher would write it (other names than ours)."""
    from torch.export import Dim

    torch.onnx.export(
        model.eval(), (example,), str(path), dynamo=True, external_data=False,
        input_names=["feats"], output_names=["embs"],
        dynamic_shapes=({0: Dim("B"), axis: Dim("T", min=16)},),
    )  # fmt: skip
    return path


def clip(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    voice = np.sin(2 * np.pi * (140 + 40 * seed) * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    return (0.2 * voice + 0.02 * rng.standard_normal(t.size)).astype(np.float32)


def by_hand(bundle: Bundle, samples: np.ndarray, embed) -> np.ndarray:
    """The SDK's clip vector computed apart: trimmed, windowed, each window embedded by the
    torch model, the windows' mean (docs/spec.md §5.3-5.4)."""
    spec = bundle.manifest.input
    windows = np.concatenate(list(spec.windows(trim_silence(samples, RATE, min_seconds=0.5))))
    with torch.no_grad():
        rows = embed(torch.from_numpy(windows)).numpy()
    return rows.astype(np.float64).mean(0)


def imported(tmp_path: Path, model: Path, *options: str) -> tuple[int, Path]:
    """``uvexport import MODEL --out MODEL-STEM.uvb OPTIONS``: its status and the bundle's path."""
    out = tmp_path / f"{model.stem}.uvb"
    return main(["import", str(model), "--out", str(out), *options]), out


@pytest.mark.parametrize(("bands_first", "window"), [(False, "povey"), (True, "hamming")])
def test_a_filterbank_encoder_becomes_a_bundle_the_sdk_runs_as_the_encoder(
    tmp_path, capsys, bands_first: bool, window: str
) -> None:
    torch.manual_seed(0)
    encoder = FilterbankEncoder(bands_first=bands_first)
    example = torch.randn(2, 80, 200) if bands_first else torch.randn(2, 200, 80)
    model = exported(encoder, example, tmp_path / "encoder.onnx", 2 if bands_first else 1)
    status, out = imported(
        tmp_path, model, "--features", "kaldi-fbank", "--fbank-window", window,
        "--licence", "Apache-2.0", "--about", "a test encoder",
    )  # fmt: skip
    printed = capsys.readouterr()
    assert status == 0, printed.err
    assert "24-d embeddings" in printed.out and "uvexport calibrate" in printed.out
    bundle = Bundle(out)
    manifest = bundle.manifest
    assert (manifest.method, manifest.dim, manifest.output_kind) == ("reference", 24, "embedding")
    assert manifest.calibration is None and manifest.extra["weights_licence"] == "Apache-2.0"
    frontend = manifest.extra["imported"]["frontend"]
    assert frontend["window"] == window
    assert frontend["layout"] == ("bands-first" if bands_first else "frames-first")
    fbank = KaldiFbank(RATE, 80, window=window).eval()

    def embed(windows: torch.Tensor) -> torch.Tensor:
        features = fbank(windows)
        return encoder(features.transpose(1, 2) if bands_first else features)

    verifier = Verifier(bundle, store=tmp_path / "store")
    for seconds, seed in ((1.3, 0), (3.7, 1)):
        samples = clip(seconds, seed)
        np.testing.assert_allclose(
            verifier.embed(samples), by_hand(bundle, samples, embed), rtol=1e-4, atol=1e-5
        )
    # the other window is another front end: its vectors move (the window is not ignored)
    other = KaldiFbank(RATE, 80, window="hamming" if window == "povey" else "povey").eval()
    samples = clip(2.5, 2)
    with torch.no_grad():
        moved = by_hand(bundle, samples, lambda w: encoder(_layout(other(w), bands_first)))
    assert np.abs(verifier.embed(samples) - moved).max() > 1e-3


def _layout(features: torch.Tensor, bands_first: bool) -> torch.Tensor:
    return features.transpose(1, 2) if bands_first else features


def test_a_waveform_encoder_and_an_older_opset_are_imported(tmp_path, capsys) -> None:
    """A model with its own front end is taken as it is; a model written at an older ONNX opset
    is brought to the exporter's (here one whose ReduceMean takes its axes as an attribute,
    which opset 18 takes as an input)."""
    import onnx
    from onnx import helper, numpy_helper

    torch.manual_seed(1)
    wave = WaveformEncoder()
    model = exported(wave, torch.randn(2, RATE), tmp_path / "wave.onnx", 1)
    status, out = imported(tmp_path, model, "--features", "waveform", "--window-seconds", "1.5")
    assert status == 0, capsys.readouterr().err
    bundle = Bundle(out)
    assert bundle.manifest.input.window_seconds == 1.5
    samples = clip(2.2, 3)
    np.testing.assert_allclose(
        Verifier(bundle, store=tmp_path / "s1").embed(samples),
        by_hand(bundle, samples, wave.eval()),
        rtol=1e-4,
        atol=1e-5,
    )

    weights = np.random.default_rng(5).standard_normal((80, 6)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "x"], ["energy"]),
            helper.make_node("ReduceMean", ["energy"], ["pooled"], axes=[1], keepdims=0),
            helper.make_node("MatMul", ["pooled", "w"], ["y"]),
        ],
        "old",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["B", "T", 80])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["B", 6])],
        [numpy_helper.from_array(weights, "w")],
    )
    old = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save(old, tmp_path / "old.onnx")
    status, out = imported(tmp_path, tmp_path / "old.onnx", "--features", "kaldi-fbank")
    assert status == 0, capsys.readouterr().err
    bundle = Bundle(out)
    fbank = KaldiFbank(RATE, 80).eval()
    np.testing.assert_allclose(
        Verifier(bundle, store=tmp_path / "s2").embed(samples),
        by_hand(bundle, samples, lambda w: (fbank(w) ** 2).mean(1) @ torch.from_numpy(weights)),
        rtol=1e-4,
        atol=1e-5,
    )
    with zipfile.ZipFile(out) as archive:
        opsets = onnx.load_from_string(archive.read("model.onnx")).opset_import
    assert {o.domain: o.version for o in opsets}[""] == 18


def test_what_cannot_be_imported_is_refused_in_one_line_and_nothing_is_written(
    tmp_path, capsys
) -> None:
    import onnx
    from onnx import helper

    torch.manual_seed(2)
    fbank_model = exported(FilterbankEncoder(), torch.randn(2, 200, 80), tmp_path / "fbank.onnx", 1)
    wave_model = exported(WaveformEncoder(), torch.randn(2, RATE), tmp_path / "wave.onnx", 1)
    (tmp_path / "garbage.onnx").write_bytes(b"not a model at all")
    two = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        "two",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, ["B", 8]) for n in "ab"],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["B", 8])],
    )
    onnx.save(
        helper.make_model(two, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "two.onnx"
    )
    frames = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "frames",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["B", "T", 80])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["B", "T", 80])],
    )
    onnx.save(
        helper.make_model(frames, opset_imports=[helper.make_opsetid("", 18)]),
        tmp_path / "frames.onnx",
    )
    cases = [
        (tmp_path / "missing.onnx", ["--features", "kaldi-fbank"], "no such file"),
        (tmp_path / "garbage.onnx", ["--features", "kaldi-fbank"], "not a valid ONNX model"),
        (tmp_path / "two.onnx", ["--features", "waveform"], "one input and gives one output"),
        (wave_model, ["--features", "kaldi-fbank"], "not rank 2"),
        (fbank_model, ["--features", "waveform"], "not rank 3"),
        (fbank_model, ["--features", "kaldi-fbank", "--mel-bins", "40"], "--mel-bins must match"),
        (tmp_path / "frames.onnx", ["--features", "kaldi-fbank"], "not one finite embedding"),
        (fbank_model, ["--features", "mfcc"], "--features must be one of"),
        (fbank_model, ["--features", "kaldi-fbank", "--fbank-window", "hann"], "--fbank-window"),
        (fbank_model, ["--features", "kaldi-fbank", "--mel-bins", "4"], "--mel-bins must be"),
        (fbank_model, ["--features", "kaldi-fbank", "--hop-seconds", "9"], "hop_seconds"),
    ]
    for model, options, expected in cases:
        status, out = imported(tmp_path, model, *options)
        err = capsys.readouterr().err
        assert status == 2, (model.name, options, err)
        assert err.startswith("uvexport: ") and err.count("\n") == 1, err
        assert expected in err, (expected, err)
        assert not out.exists()
    assert sorted(p.suffix for p in tmp_path.iterdir() if p.is_file()) == [".onnx"] * 5


NODE_EMBED = """
import { readFile } from "node:fs/promises";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
const [dist, bundlePath, clip] = process.argv.slice(1);
const uvsdk = await import(pathToFileURL(dist + "/src/node.js").href);
const ort = await import("onnxruntime-node");
const bundle = await uvsdk.loadBundle(new Uint8Array(await readFile(bundlePath)), { name: "b.uvb" });
const folder = await mkdtemp(join(tmpdir(), "uvsdk-import-"));
const verifier = await uvsdk.Verifier.create({ ort, bundle, passphrase: "a passphrase for a test",
  scryptLog2N: 10, store: new uvsdk.FileStore(join(folder, "t"), { stateDir: join(folder, "s") }) });
const { samples } = await uvsdk.decodeWavFile(clip);
console.log(JSON.stringify(Array.from(await verifier.embed(samples))));
"""


def test_the_typescript_sdk_embeds_an_imported_bundle_as_python_does(tmp_path) -> None:
    """The second implementation runs the joined graph (front end, transpose, encoder) and
    gives Python's vector (needs node and the built port: CI builds it beside pytest)."""
    import shutil

    import soundfile as sf

    from tests.processes import run_until_stalled

    js = Path(__file__).resolve().parents[2] / "js"
    node = shutil.which("node")
    if node is None or not (js / "dist" / "src" / "node.js").is_file():
        pytest.skip("needs node and the built TypeScript port (cd js && npm run build)")
    torch.manual_seed(3)
    encoder = FilterbankEncoder(bands_first=True)
    model = exported(encoder, torch.randn(2, 80, 200), tmp_path / "encoder.onnx", 2)
    status, out = imported(tmp_path, model, "--features", "kaldi-fbank")
    assert status == 0
    wav = tmp_path / "clip.wav"
    sf.write(wav, clip(2.5, 4), RATE, subtype="PCM_16")
    result = run_until_stalled(
        [node, "--input-type=module", "-e", NODE_EMBED, "--", str(js / "dist"), str(out), str(wav)],
        stall_seconds=120,
        cwd=js,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    typescript = np.array(json.loads(result.stdout.strip().splitlines()[-1]))
    python = Verifier(Bundle(out), store=tmp_path / "store").embed(wav)
    assert typescript.shape == python.shape == (24,)
    np.testing.assert_allclose(typescript, python, rtol=1e-5, atol=1e-6)
