"""A federation's recording-chain mean (``centre_bundle``, :mod:`uvdeploy.centre`), in process:
each device's chain vector against a hand computation with the SDK, the server's one release
through the one DP mechanism (its ε against Balle and Wang's closed form), the bundle it
writes, and what is refused (one line, nothing released). On a real federation:
``test_local.py``."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from tests.conftest import PASSPHRASE  # noqa: E402
from tests.deploy.devices import device_folder  # noqa: E402
from uvdeploy.device import Device, DeviceError  # noqa: E402
from uvdeploy.settings import DeploySettings  # noqa: E402
from uvtrain.config import ConfigError  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CENTRED = REPO / "conformance" / "bundles" / "voice-embedding-centre.uvb"
UNCENTRED = REPO / "conformance" / "bundles" / "voice-embedding.uvb"


def _settings(**values) -> DeploySettings:
    return DeploySettings.from_run_config({"method": "fedhide", **values})


def test_a_centre_run_is_secure_and_refuses_what_one_release_cannot_be() -> None:
    settings = _settings(centre_bundle=str(CENTRED))
    assert settings.secure and settings.mechanism == "distributed"  # auto: SecAgg+ and DP
    for values, message in (
        ({"secagg": "off"}, "leaves it only inside SecAgg+"),
        ({"adaptive_clipping": True}, "adaptive clipping and tree noise need rounds"),
        ({"dp_noise": "tree"}, "adaptive clipping and tree noise need rounds"),
        ({"dp": "central"}, "would show the server the devices' exact sum"),
    ):
        with pytest.raises(ConfigError, match=message) as caught:
            _settings(centre_bundle=str(CENTRED), **values)
        assert len(str(caught.value).splitlines()) == 1


def test_a_devices_chain_vector_is_the_mean_of_its_files_unit_vectors(
    voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's vector of each usable file, made unit, averaged: every device weighs the same
    in the chain's mean (norm at most 1). A bundle that is not the one named is refused."""
    from uvsdk import Verifier

    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    folder = device_folder(voice_dir, 1, tmp_path)
    (folder / "samples" / "notes.txt").write_text("not audio")  # skipped, as enrollment does
    device = Device(
        {"data": str(folder / "samples"), "store": str(tmp_path / "store")}, _settings().input
    )
    blob = CENTRED.read_bytes()
    vector = device.chain_vector(blob, hashlib.sha256(blob).hexdigest())
    verifier = Verifier(CENTRED)
    units = []
    for path in sorted((folder / "samples").glob("*.wav")):
        raw = verifier.embed(path).astype(np.float64)
        units.append(raw / np.linalg.norm(raw))
    assert len(units) == 6 and vector.dtype == np.float32
    np.testing.assert_allclose(vector, np.mean(units, axis=0), atol=1e-6)
    assert 0.5 < np.linalg.norm(vector) <= 1.0  # one voice: its clips point one way
    with pytest.raises(DeviceError, match="not the one named"):
        device.chain_vector(blob, "0" * 64)


def test_a_device_sends_its_chain_vector_only_inside_secagg() -> None:
    from flwr.common import FitIns, ndarrays_to_parameters

    from uvdeploy.client import _centre_reply

    fitins = FitIns(ndarrays_to_parameters([np.zeros(40, np.float32)]), {"task": "centre"})
    with pytest.raises(DeviceError, match="outside SecAgg"):
        _centre_reply(None, None, fitins, secure=False)


class _Federation:
    """What a centre run's server asks of Flower, by hand: four devices (nodes 11-14), SecAgg+'s
    unmasked mean of their replies, their answers to ``enroll``."""

    def __init__(self, vectors: list[np.ndarray], dropped: int = 0) -> None:
        self.vectors, self.dropped = vectors, dropped
        self.calls: list[tuple] = []
        self.enrolled: list[bytes] = []

    def install(self, server) -> None:
        from uvdeploy.rounds import Replies

        nodes = [11, 12, 13, 14]
        server.wait_for_devices = lambda: nodes

        def register(found, roster):
            server.roster, server.samples = [101, 102, 103, 104], dict.fromkeys(found, 6)
            return {node: row for row, node in enumerate(found)}

        def collect(instructions, number, max_weight, clipping_range):
            self.calls.append((instructions, number, max_weight, clipping_range))
            kept = self.vectors[: len(self.vectors) - self.dropped]
            replies = Replies(node_ids=nodes[: len(kept)], counts=[1] * len(kept))
            return replies, [np.mean(kept, axis=0).astype(np.float32)]

        def query(requests):
            self.enrolled.extend(bytes(body["bundle"]) for body in requests.values())
            return {node: {"enrolled": True} for node in requests}

        server.register, server.secagg.collect, server._query = register, collect, query


def _server(tmp_path: Path, **values):
    from uvdeploy.centre import CentreServer

    settings = _settings(centre_bundle=str(CENTRED), out=str(tmp_path / "run"), **values)
    return CentreServer(settings, grid=None, context=None, echo=lambda line: None)


def _vectors(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    common = rng.normal(size=40)
    rows = [common + 0.5 * rng.normal(size=40) for _ in range(4)]
    return [(0.8 * row / np.linalg.norm(row)).astype(np.float32) for row in rows]


def _centre(path: Path) -> np.ndarray:
    with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as archive:
        return np.frombuffer(archive.read("centre.f32"), "<f4")


def test_the_server_releases_the_devices_sum_over_the_roster_through_the_one_mechanism(
    tmp_path: Path,
) -> None:
    """Distributed DP (the default): one release of every device once, C = 1, shares calibrated
    to m_min; the server unmasks the sum (the shares' noise is in it), divides by the roster N
    (fixed beforehand: a device that drops out shrinks the mean, it does not change the
    denominator) and writes it into the bundle, which every device enrolls with. Its ε is one
    Gaussian mechanism's, the same against the server and against the bundle's holders,
    checked against Balle and Wang's closed form (Theorem 8), computed here apart."""
    from tests.trainer.test_privacy import _analytic_gaussian_epsilon
    from uvdeploy.dp import released
    from uvsdk.bundle import Bundle

    vectors = _vectors()
    federation = _Federation(vectors, dropped=1)
    server = _server(tmp_path, dp_noise_multiplier=0.05)
    federation.install(server)
    report = server.run()
    (instructions, number, max_weight, clipping_range) = federation.calls[0]
    config = instructions[0][1].config
    blob = CENTRED.read_bytes()
    assert [node for node, _ in instructions] == [11, 12, 13, 14] and number == 1
    assert config["task"] == "centre" and config["bundle"] == blob
    assert config["bundle_sha256"] == hashlib.sha256(blob).hexdigest()
    assert config["dp"] == "distributed" and config["dp_clip_norm"] == 1.0
    assert config["dp_survivors"] == 3 and max_weight == 1.0 and clipping_range >= 8.0
    privacy = report["privacy"]
    assert privacy["users"] == 4 and privacy["expected_cohort"] == 4 and privacy["rounds"] == 1
    assert privacy["sampling_rate"] == 1.0 and privacy["min_survivors"] == 3
    z, delta = privacy["noise_multiplier"], privacy["delta"]
    assert z == 0.05 and privacy["epsilon_release"] == privacy["epsilon_server"]
    assert privacy["epsilon_server"] == pytest.approx(_analytic_gaussian_epsilon(z, delta), 1e-6)
    bundle = tmp_path / "run" / "model.uvb"
    expected = np.sum(vectors[:3], axis=0) / 4  # three survivors' sum over the roster of four
    np.testing.assert_allclose(_centre(bundle), expected, atol=1e-6)
    manifest = Bundle(bundle).manifest
    assert manifest.score_norm is not None and manifest.score_norm.centre is not None
    assert manifest.score_norm.centre.people == 4
    assert federation.enrolled == [bundle.read_bytes()] * 4
    release = manifest.extra["centre_release"]
    assert release["source"] == "federation" and (release["devices"], release["summed"]) == (4, 3)
    assert release["privacy"]["epsilon"] == privacy["epsilon_server"]
    assert release["privacy"]["delta"] == delta and release["privacy"]["min_survivors"] == 3
    from typer.testing import CliRunner

    from uvsdk.cli import app as sdk

    shown = CliRunner().invoke(sdk, ["info", "--bundle", str(bundle)])
    line = f"measured on 4 devices under SecAgg+ with DP: ε = {privacy['epsilon_server']:.3g}"
    assert shown.exit_code == 0 and line in shown.output, shown.output
    assert "against the server and anyone holding this bundle" in shown.output
    assert report["survivors"] == 3 and report["enrolled"] == {"devices_enrolled": 4}
    assert released(tmp_path / "run") == 1
    # the ledger counts the release: the same folder never releases a second mean
    again = _server(tmp_path, dp_noise_multiplier=0.05)
    _Federation(vectors).install(again)
    with pytest.raises(Exception, match="released already"):
        again.run()


def test_a_release_whose_noise_would_swamp_the_mean_is_refused_before_devices_send(
    tmp_path: Path,
) -> None:
    """Noise on the mean is in every centred vector alike: above MAX_NOISE_NORM the stated FAR
    was measured not to hold. Four devices at ε = 8 (z ≈ 0.65) would add a noise of norm about
    0.65·√(4/3)/4·√40 ≈ 1.19: refused in one line, no device asked for its vector."""
    from uvdeploy.centre import MAX_NOISE_NORM, noise_norm

    assert noise_norm(0.05, 4, 3, 40) == pytest.approx(0.05 * np.sqrt(4 / 3) / 4 * np.sqrt(40))
    assert noise_norm(0.05, 4, 3, 40) < MAX_NOISE_NORM
    federation = _Federation(_vectors())
    server = _server(tmp_path)  # the default budget, ε = 8
    federation.install(server)
    with pytest.raises(ConfigError, match="norm of about 1.19,") as caught:
        server.run()
    assert len(str(caught.value).splitlines()) == 1
    # as many devices as the bound asks for: 0.653·√(N/m_min)/N·√40 <= 0.13 from N = 46
    # (m_min = 23; N = 45 has m_min = 22 and 0.131)
    assert "it takes about 46 devices, or a larger dp_epsilon" in str(caught.value)
    assert federation.calls == [] and not (tmp_path / "run" / "model.uvb").exists()


def test_without_dp_the_mean_is_exact_and_a_swamped_mean_is_refused(tmp_path: Path) -> None:
    from uvdeploy.errors import DeploymentError

    vectors = _vectors(1)
    federation = _Federation(vectors)
    server = _server(tmp_path, dp="off", export=False)
    federation.install(server)
    report = server.run()
    assert report["privacy"] is None and federation.enrolled == []
    from uvsdk.bundle import Bundle

    written = Bundle(tmp_path / "run" / "model.uvb").manifest.extra["centre_release"]
    assert written == {"source": "federation", "devices": 4, "summed": 4, "privacy": None}
    # a new mean (uvexport centre, uvexport calibrate) drops how the old one was measured
    from uvexport.centre import write_centred

    again = Bundle(tmp_path / "run" / "model.uvb")
    mean = np.zeros(40, "<f4").tobytes()
    write_centred(again, mean, 5, tmp_path / "new.uvb")
    assert "centre_release" not in Bundle(tmp_path / "new.uvb").manifest.extra
    np.testing.assert_allclose(
        _centre(tmp_path / "run" / "model.uvb"), np.mean(vectors, axis=0), atol=1e-6
    )
    # a mean whose norm is 1 or more (noise that swamps it) is refused, nothing written
    swamped = _server(tmp_path / "b", dp="off")
    _Federation([np.full(40, 1.1 / np.sqrt(40), np.float32)] * 4).install(swamped)
    with pytest.raises(DeploymentError, match="not below 1") as caught:
        swamped.run()
    assert len(str(caught.value).splitlines()) == 1
    assert not (tmp_path / "b" / "run" / "model.uvb").exists()


def test_a_bundle_whose_scores_are_not_centred_is_refused_before_any_device_is_asked(
    tmp_path: Path,
) -> None:
    from uvdeploy.centre import CentreServer

    for bundle, values, message in (
        (UNCENTRED, {}, "takes no recording chain's mean out"),
        (CENTRED, {"sample_rate": 8000}, "the run's input keys are not its bundle's"),
        (CENTRED.with_name("image-embedding.uvb"), {}, "takes no recording chain's mean out"),
    ):
        settings = _settings(centre_bundle=str(bundle), out=str(tmp_path / "run"), **values)
        server = CentreServer(settings, grid=None, context=None, echo=lambda line: None)
        server.wait_for_devices = lambda: pytest.fail("a device was asked")
        with pytest.raises(ConfigError, match=message) as caught:
            server.run()
        assert len(str(caught.value).splitlines()) == 1


def test_the_command_takes_a_method_or_a_centre_bundle(tmp_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from uvtrain.cli import app

    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    for name in "abcd":
        (tmp_path / "devices" / name / "samples").mkdir(parents=True)
    common = ["deploy", "local", "--devices", str(tmp_path / "devices"), "--out", str(tmp_path)]
    runner = CliRunner()
    for flags, message in (
        ([], "give --method (a training run) or --centre-bundle"),
        (["--method", "fedhide", "--centre-bundle", str(CENTRED)], "give --method"),
        (["--centre-bundle", str(tmp_path / "none.uvb")], "no such file"),
        (["--centre-bundle", str(tmp_path / "devices" / "a")], "no such file"),
        (["--centre-bundle", __file__], "--centre-bundle: "),  # not a bundle
        (["--centre-bundle", str(CENTRED), "--secagg", "off"], "only inside SecAgg+"),
        (["--centre-bundle", str(CENTRED), "--adaptive-clipping"], "need rounds"),
    ):
        result = runner.invoke(app, [*common, *flags])
        assert result.exit_code == 2 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "federation").exists()
    # what the command hands the federation: the bundle's own input keys, so that the devices
    # register their files as it decodes them; and its last line
    import uvdeploy.local

    handed = []
    report = {"task": "centre", "devices": 4, "bundle": "model.uvb", "privacy": None}
    monkeypatch.setattr(
        uvdeploy.local, "run_local", lambda d, o, values, **k: handed.append(values) or report
    )
    result = runner.invoke(app, [*common, "--centre-bundle", str(CENTRED), "--dp", "off"])
    assert result.exit_code == 0, result.output
    assert handed[0]["centre_bundle"] == str(CENTRED.resolve()) and handed[0]["dp"] == "off"
    assert {k: handed[0][k] for k in ("modality", "sample_rate", "window_seconds")} == {
        "modality": "audio",
        "sample_rate": 16000,
        "window_seconds": 2.0,
    }
    assert "mean voice of 4 devices (no DP)" in result.output
