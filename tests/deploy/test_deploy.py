"""The Flower deployment: settings, the device's update against the simulator's, and a real
federation on loopback (a SuperLink and SuperNodes as processes, SecAgg+ for FedUV)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from tests.conftest import PASSPHRASE  # noqa: E402
from uvdeploy.device import Device, DeviceError  # noqa: E402
from uvdeploy.local import LaunchError, LocalFederation, app_dir  # noqa: E402
from uvdeploy.settings import (  # noqa: E402
    DeploySettings,
    build_model,
    pack,
    to_arrays,
)
from uvtrain.config import ConfigError  # noqa: E402
from uvtrain.engine import EngineConfig, Simulation, draw_batches  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _device_folder(voice_dir: Path, speaker: int, root: Path) -> Path:
    """``device/samples`` (clips 0-5 of a speaker) and ``device/test`` (clips 6-7)."""
    folder = root / f"device-{speaker}"
    for split, clips in (("samples", range(6)), ("test", range(6, 8))):
        (folder / split).mkdir(parents=True)
        for index in clips:
            source = voice_dir / f"speaker{speaker}" / f"clip{index}.wav"
            (folder / split / source.name).write_bytes(source.read_bytes())
    return folder


# -- settings -------------------------------------------------------------------------------------


def test_settings_read_the_run_config_and_refuse_what_cannot_deploy() -> None:
    settings = DeploySettings.from_run_config({"method": "feduv", "rounds": 3, "backbone": ""})
    assert settings.run.rounds == 3 and settings.run.backbone is None
    assert settings.secure  # auto: SecAgg+ for FedUV
    assert not DeploySettings.from_run_config({"method": "fedhide"}).secure
    assert DeploySettings.from_run_config({"method": "fedaws", "secagg": "on"}).secure
    with pytest.raises(ConfigError, match="unknown run config key"):
        DeploySettings.from_run_config({"method": "feduv", "roundz": 3})
    with pytest.raises(ConfigError, match="does not run on Flower"):
        DeploySettings.from_run_config({"method": "softmax"})
    with pytest.raises(ConfigError, match="image_size"):
        DeploySettings.from_run_config(
            {"method": "fedhide", "modality": "image", "image_size": "64"}
        )


def test_the_flower_app_declares_every_setting_with_its_default() -> None:
    """`flwr run --run-config` only overrides keys the app declares: the app's pyproject must
    list every setting, with the same defaults as the code."""
    declared = tomllib.loads((app_dir() / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    defaults = DeploySettings.from_run_config({"method": "feduv"}).to_dict()
    expected = {k: "" if v is None else v for k, v in defaults.items()}
    assert declared["config"] == expected
    assert declared["components"] == {
        "serverapp": "uvdeploy.server:app",
        "clientapp": "uvdeploy.client:app",
    }


def test_fedaws_sends_a_device_only_its_own_class_embedding() -> None:
    algorithm = DeploySettings.from_run_config({"method": "fedaws"}).algorithm()
    shared = {"embeddings": torch.randn(5, 8)}
    view, index = algorithm.client_view(shared, 3)
    assert view["embeddings"].shape == (1, 8) and index == 0
    assert torch.equal(view["embeddings"][0], shared["embeddings"][3])
    fedhide = DeploySettings.from_run_config({"method": "fedhide"}).algorithm()
    bank = {"proxies": torch.randn(5, 8)}
    assert fedhide.client_view(bank, 3) == (bank, 3)  # proxies are public by design


# -- the device ------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["fedhide", "fedaws"])
def test_a_devices_update_is_the_simulators(
    method: str, voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The device decodes its folder with the SDK and trains with the engine's own code: from
    the same weights, state and batches, its update equals the simulator's per-client step."""
    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    settings = DeploySettings.from_run_config(
        {"method": method, "local_steps": 2, "batch_size": 4, "lr": 0.05}
    )
    folder = _device_folder(voice_dir, 1, tmp_path)
    device = Device({"data": str(folder / "samples"), "store": str(tmp_path / "store")}, settings)
    samples = device.samples()
    assert samples.shape == (6 * 2, 32000)  # 2.5-s clips: two 2-s windows each
    model = build_model(settings, 2)
    engine = EngineConfig(local_steps=2, batch_size=4, lr=0.05, crop=settings.crop)
    simulation = Simulation(settings.algorithm(), model.backbone, [samples, samples], engine)
    simulation.params = {k: v + 0.01 * torch.randn_like(v) for k, v in simulation.params.items()}
    if method == "fedaws":  # what the simulator's round does before training (client_receive)
        simulation.private["prototype"][1] = simulation.shared["embeddings"][1]
    batches = draw_batches(torch.as_tensor(samples), 2, 4, settings.crop, np.random.default_rng(5))
    expected, expected_private, _ = simulation._local_loop(torch.tensor([1]), batches[None], 0.05)

    view, index = settings.algorithm().client_view(simulation.shared, 1)
    config = {"devices": 2, "index": index, "lr": 0.05, "shared": pack(view)}
    private = {k: v[1] for k, v in simulation.private.items()}
    if method == "fedaws":  # the device's row comes from the server's view, not its own state
        private = {"prototype": torch.zeros_like(private["prototype"])}
    update, count, metrics, kept = device.train(
        to_arrays(simulation.params), config, private, rng=np.random.default_rng(5)
    )
    assert count == len(samples) and np.isfinite(metrics["loss"]) and "message" in metrics
    for array, name in zip(update, sorted(simulation.params), strict=True):
        got = simulation.params[name] + torch.from_numpy(array)
        torch.testing.assert_close(got, expected[name][0], rtol=0, atol=1e-6)
    torch.testing.assert_close(kept["prototype"], expected_private["prototype"][0])


def test_a_device_keeps_its_codeword_encrypted_and_refuses_a_plain_feduv_round(
    voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bch127
) -> None:
    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    folder = _device_folder(voice_dir, 2, tmp_path)
    node = {"data": str(folder / "samples"), "store": str(tmp_path / "store")}
    settings = DeploySettings.from_run_config({"method": "feduv"})
    device = Device(node, settings)
    assert device.status(bch127.fingerprint) == {"user_id": -1, "codeword": False, "samples": 12}
    device.assign(123456, bch127)
    assert device.status(bch127.fingerprint) == {"user_id": 123456, "codeword": True, "samples": 12}
    stored = b"".join(p.read_bytes() for p in (tmp_path / "store").iterdir() if p.is_file())
    bits = np.packbits(device.template().codeword).tobytes()
    assert bits not in stored and b"123456" not in stored  # encrypted at rest
    with pytest.raises(DeviceError, match="another code"):
        device.constants(0, "0" * 64)

    with pytest.raises(DeviceError, match="refusing to send a plain FedUV update"):
        device.check_round(secure=False)
    device.check_round(secure=True)
    Device({**node, "allow_plain_feduv": "true"}, settings).check_round(secure=False)


# -- the server's round ----------------------------------------------------------------------------


def _server(values: dict, samples: dict[int, int]):
    """A server with its registration done by hand: nodes 11, 12, 13 are rows 0, 1, 2; small
    parameters stand for the model's (the round only moves and averages tensors)."""
    from uvdeploy.server import FederatedServer

    settings = DeploySettings.from_run_config({"fraction": 1.0, **values})
    server = FederatedServer(settings, grid=None, context=None, echo=lambda line: None)
    server.rows = {11: 0, 12: 1, 13: 2}
    server.node_of_row = {0: 11, 1: 12, 2: 13}
    server.roster, server.samples = [101, 102, 103], samples
    generator = torch.Generator().manual_seed(0)
    server.params = {"a": torch.randn(3, 2, generator=generator), "b": torch.randn(4)}
    server.shared = server.algorithm.init_shared(3, 8, generator, {"index": torch.arange(3)})
    return server


def _replies(server, deltas: list[dict], messages: list[dict]):
    from uvdeploy.server import Replies

    replies = Replies()
    for node, delta, message in zip((13, 11, 12), deltas, messages, strict=True):
        replies.node_ids.append(node)
        replies.counts.append(server.samples[node])
        replies.metrics.append({"loss": float(node), "message": pack(message)})
        replies.updates.append([delta[name].numpy() for name in sorted(delta)])
    return replies


def test_a_plain_flower_round_is_run_round_with_the_devices_as_local_training() -> None:
    """The devices' deltas go through the weighted mean (θ + Σ n_k/n δ_k), their messages
    through the method's server_update with their rows, the loss is sample-weighted."""
    server = _server({"method": "fedhide"}, {11: 4, 12: 6, 13: 2})
    before, shared = dict(server.params), dict(server.shared)
    deltas = [{k: 0.1 * torch.randn_like(v) for k, v in before.items()} for _ in range(3)]
    proxies = [{"proxy": torch.randn(8)} for _ in range(3)]
    sent = []
    server._send = lambda instructions, number: (
        sent.append(instructions) or _replies(server, deltas, proxies)
    )
    metrics = server.round(1, [11, 12, 13])
    assert [node for node, _ in sent[0]] == [11, 12, 13]
    weights = torch.tensor([2.0, 4.0, 6.0]) / 12  # nodes 13, 11, 12 as they replied
    for name, value in before.items():
        expected = value + sum(w * d[name] for w, d in zip(weights, deltas, strict=True))
        torch.testing.assert_close(server.params[name], expected)
    assert torch.equal(server.shared["proxies"][2], proxies[0]["proxy"])
    assert torch.equal(server.shared["proxies"][0], proxies[1]["proxy"])
    assert not torch.equal(server.shared["proxies"], shared["proxies"])
    assert metrics["loss"] == pytest.approx((2 * 13 + 4 * 11 + 6 * 12) / 12)
    assert metrics["clients"] == 3 and metrics["secure"] is False
    assert metrics["update_max_abs"] > 0


def test_a_flower_round_stops_when_the_model_does_not_change_or_is_not_finite() -> None:
    from uvdeploy.errors import DeploymentError

    server = _server({"method": "fedhide"}, {11: 4, 12: 6, 13: 2})
    proxies = [{"proxy": torch.randn(8)} for _ in range(3)]
    zeros = [{k: torch.zeros_like(v) for k, v in server.params.items()} for _ in range(3)]
    server._send = lambda instructions, number: _replies(server, zeros, proxies)
    with pytest.raises(DeploymentError, match="round 1: the model did not change"):
        server.round(1, [11, 12, 13])
    nans = [{k: torch.full_like(v, float("nan")) for k, v in server.params.items()}] * 3
    server._send = lambda instructions, number: _replies(server, nans, proxies)
    with pytest.raises(DeploymentError, match="round 1: the aggregated update is not finite"):
        server.round(1, [11, 12, 13])


def test_a_secure_flower_round_is_fused_with_secaggs_workflow() -> None:
    """Under SecAgg+ the workflow is the fused aggregator: the round takes the unmasked mean;
    a secure round without it (e.g. with per-client postprocessing) cannot run."""
    from uvdeploy.errors import DeploymentError
    from uvdeploy.server import FlowerSecAggPlus
    from uvtrain.rounds import RoundPlan, run_round

    server = _server({"method": "fedhide", "secagg": "on"}, {11: 4, 12: 6, 13: 2})
    assert isinstance(server.aggregator, FlowerSecAggPlus) and server.aggregator.fusable()
    before = dict(server.params)
    mean = {k: 0.01 * torch.ones_like(v) for k, v in before.items()}
    proxies = [{"proxy": torch.randn(8)} for _ in range(3)]
    replies = _replies(server, [mean] * 3, proxies)
    calls = []

    def collect(instructions, number, max_weight):
        calls.append(max_weight)
        return replies, [mean[name].numpy() for name in sorted(mean)]

    server.aggregator.collect = collect
    metrics = server.round(1, [11, 12, 13])
    assert calls == [pytest.approx(6 * 1.01)] and metrics["secure"] is True
    for name, value in before.items():
        torch.testing.assert_close(server.params[name], value + mean[name])
    plan = RoundPlan(2, np.array([0, 1, 2]), 0.1)
    with pytest.raises(DeploymentError, match="secure round"):
        run_round(
            server.algorithm,
            plan,
            server.params,
            server.shared,
            server,
            server.aggregator,
            [lambda updates, base, plan: updates],
        )


# -- a real federation ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def federation(voice_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """Four devices (speakers 0-3) on a loopback SuperLink, shared by the runs below."""
    root = tmp_path_factory.mktemp("federation")
    devices = [_device_folder(voice_dir, speaker, root / "devices") for speaker in range(4)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
        patch.setenv("UVTRAIN_DATA", str(root / "no-datasets"))  # devices read only their folders
        with LocalFederation(devices, root / "workspace") as running:
            yield running, root, devices


def _run(federation, out: Path, **values) -> dict:
    running, _, devices = federation
    lines: list[str] = []
    settings = {"min_devices": len(devices), "wait_seconds": 120.0, "out": str(out), **values}
    code = running.run(settings, lines.append, timeout=400)
    status = json.loads((out / "status.json").read_text())
    return {"code": code, "status": status, "lines": lines}


@pytest.mark.slow
def test_feduv_trains_under_secagg_and_every_device_ends_enrolled(federation) -> None:
    from uvsdk import Verifier

    _, root, devices = federation
    out = root / "feduv"
    # a cohort of 3 of the 4 devices each round; every device registers, trains and enrolls
    result = _run(federation, out, method="feduv", rounds=2, fraction=0.75, lr=0.2)
    assert result["status"] == {"state": "finished", "rounds": 2}, result["lines"]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["round"] for m in metrics] == [1, 2] and all(m["secure"] for m in metrics)
    assert metrics[1]["loss"] < metrics[0]["loss"]  # the model learns
    report = json.loads((out / "report.json").read_text())
    assert report["deployment"]["secure_aggregation"] is True
    assert report["warmup"]["devices_enrolled"] == 4
    registry = json.loads((out / "devices.json").read_text())["assigned"]
    assert len(set(registry)) == 4
    log = "\n".join(result["lines"])
    for device in devices:
        bundle = device / "store" / "model.uvb"
        verifier = Verifier(bundle, store=device / "store", passphrase=PASSPHRASE)
        template = verifier.store.load("default")
        assert template.mode == "codeword" and template.is_enrolled
        assert template.user_id in registry
        assert str(int(template.threshold * 1e4)) not in log  # no threshold in the server's log
        score = verifier.score(device / "test" / "clip6.wav")
        assert np.isfinite(score)


@pytest.mark.slow
def test_fedaws_runs_plain_resumes_and_devices_keep_their_user_ids(federation) -> None:
    _, root, _ = federation
    out = root / "fedaws"
    before = json.loads((root / "feduv" / "devices.json").read_text())["assigned"]
    out.mkdir()
    (out / "devices.json").write_text(json.dumps({"assigned": before}))
    result = _run(federation, out, method="fedaws", rounds=1, fraction=1.0, export=False)
    assert result["status"]["state"] == "finished", result["lines"]
    assert "4 device(s) registered (0 newly assigned)" in "\n".join(result["lines"])
    report = json.loads((out / "report.json").read_text())
    assert report["deployment"]["secure_aggregation"] is False
    assert json.loads((out / "devices.json").read_text())["assigned"] == before
    # the same folder with more rounds resumes from the checkpoint
    again = _run(federation, out, method="fedaws", rounds=2, fraction=1.0, export=False)
    assert again["status"]["state"] == "finished", again["lines"]
    assert "resumed at round 1" in "\n".join(again["lines"])
    rounds = [
        json.loads(line)["round"] for line in (out / "metrics.jsonl").read_text().splitlines()
    ]
    assert rounds == [1, 2]


@pytest.mark.slow
def test_a_round_that_secagg_cannot_finish_stops_the_run(federation) -> None:
    """When SecAgg+ cannot finish a round (here: no device answers its first stage within
    ``round_seconds``; in a probe on an older setup, every device raising in its key sharing),
    Flower's workflow logs "halted" and returns as if all were well: the model silently never
    changes. The server must stop with an error instead of reporting a finished run."""
    _, root, _ = federation
    out = root / "broken"
    result = _run(
        federation, out, method="feduv", rounds=2, fraction=1.0, round_seconds=0.2, export=False
    )
    assert result["status"]["state"] == "failed"
    assert "round 1" in result["status"]["error"]
    assert "did not change" in result["status"]["error"] or "failed" in result["status"]["error"]
    assert not (out / "report.json").exists()
    assert not (out / "metrics.jsonl").read_text().strip()  # no round was logged as done


def test_run_local_needs_a_passphrase_and_device_folders(tmp_path: Path, monkeypatch) -> None:
    from uvdeploy.local import run_local

    (tmp_path / "devices" / "a" / "samples").mkdir(parents=True)
    with pytest.raises(LaunchError, match="UVSDK_PASSPHRASE"):
        run_local(tmp_path / "devices", tmp_path / "run", {"method": "feduv"})
    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    with pytest.raises(LaunchError, match="no device folders"):
        run_local(tmp_path, tmp_path / "run", {"method": "feduv"})
    with pytest.raises(ConfigError, match="unknown run config key"):
        run_local(tmp_path / "devices", tmp_path / "run", {"method": "feduv", "nope": 1})


def test_the_deploy_command_fails_in_one_line(tmp_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from uvtrain.cli import app

    runner = CliRunner()
    (tmp_path / "devices" / "a" / "samples").mkdir(parents=True)
    common = ["deploy", "local", "--devices", str(tmp_path / "devices"), "--out", str(tmp_path)]
    result = runner.invoke(app, [*common, "--method", "feduv"])
    assert result.exit_code == 2 and "UVSDK_PASSPHRASE" in result.output
    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    result = runner.invoke(app, [*common, "--method", "softmax"])
    assert result.exit_code == 2 and "does not run on Flower" in result.output
    result = runner.invoke(app, [*common, "--method", "feduv", "--set", "lr"])
    assert result.exit_code == 2 and "KEY=VALUE" in result.output
    result = runner.invoke(app, [*common, "--method", "feduv", "--set", "secagg=maybe"])
    assert result.exit_code == 2 and "secagg must be" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = runner.invoke(app, ["deploy", "app"])
    assert result.exit_code == 0 and (Path(result.output.strip()) / "pyproject.toml").is_file()
