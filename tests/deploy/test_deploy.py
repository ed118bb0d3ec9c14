"""The Flower deployment in process: settings, the device's update against the simulator's, and
the server's round (plain, secure, under DP). A real federation on loopback: ``test_local.py``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from tests.conftest import PASSPHRASE  # noqa: E402
from tests.deploy.devices import device_folder
from uvdeploy.device import Device, DeviceError  # noqa: E402
from uvdeploy.errors import DeployError  # noqa: E402
from uvdeploy.local import app_dir  # noqa: E402
from uvdeploy.settings import (  # noqa: E402
    DeploySettings,
    build_model,
    message_spec,
    pack,
    to_arrays,
)
from uvdeploy.training import TrainingDevice  # noqa: E402
from uvtrain.batches import draw_batches  # noqa: E402
from uvtrain.config import ConfigError  # noqa: E402
from uvtrain.engine import EngineConfig, Simulation, split_parameters  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


# -- settings -------------------------------------------------------------------------------------


def test_settings_read_the_run_config_and_refuse_what_cannot_deploy() -> None:
    settings = DeploySettings.from_run_config({"method": "feduv", "rounds": 3, "backbone": ""})
    assert settings.run.schedule.rounds == 3 and settings.run.model.backbone is None
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
    for key in ("server_optimizer", "server_lr", "lr_decay"):
        expected[key] = ""  # not set: the method's own (FedUV's server lr and lr decay)
    assert declared["config"] == expected
    assert defaults["server_lr"] == 5.0 and defaults["lr_decay"] == 0.005
    fedhide = DeploySettings.from_run_config({**declared["config"], "method": "fedhide"})
    assert fedhide.run.schedule.server_lr == 1.0 and fedhide.run.schedule.lr_decay == 0.01
    assert declared["components"] == {
        "serverapp": "uvdeploy.server:app",
        "clientapp": "uvdeploy.client:app",
    }


def test_dp_defaults_to_distributed_under_secagg_and_refuses_what_cannot_hold() -> None:
    """``dp = "auto"``: distributed at ε = 8 whenever SecAgg+ is on, off otherwise; distributed
    turns ``secagg = "auto"`` on and is refused with it off; the plan is made for the devices."""
    from uvdeploy.dp import can_release, min_survivors, plan, skip_probability

    feduv = DeploySettings.from_run_config({"method": "feduv", "rounds": 2, "fraction": 0.75})
    assert feduv.secure and feduv.mechanism == "distributed"
    assert DeploySettings.from_run_config({"method": "fedhide"}).mechanism == "off"
    assert DeploySettings.from_run_config({"method": "feduv", "secagg": "off"}).mechanism == "off"
    fedhide = DeploySettings.from_run_config({"method": "fedhide", "dp": "distributed"})
    assert fedhide.secure and fedhide.mechanism == "distributed"
    central = DeploySettings.from_run_config({"method": "fedhide", "dp": "central"})
    assert not central.secure and central.mechanism == "central"
    planned = plan(feduv, 4)
    assert planned is not None and planned.mechanism == "distributed"
    assert (
        planned.epsilon_release == pytest.approx(8.0, rel=1e-2) and planned.epsilon_release <= 8.0
    )
    assert planned.sampling_rate == 0.75 and planned.delta == 1e-6  # min(4^-1.1, 1e-6)
    # by default the participation rule, one period for every device to join once (4 // 3 = 1
    # round here): the one ε holds against the server; dp_period = 0 is Poisson sampling
    assert planned.period == 1 and planned.epsilon_server == planned.epsilon_release
    assert plan(DeploySettings.from_run_config({"method": "feduv", "fraction": 0.25,
                                                "min_cohort": 2}), 8).period == 4  # fmt: skip
    poisson = plan(DeploySettings.from_run_config({"method": "feduv", "rounds": 2,
                                                   "fraction": 0.75, "dp_period": 0}), 4)  # fmt: skip
    assert poisson is not None and poisson.period is None
    assert poisson.epsilon_server > poisson.epsilon_release
    assert (
        planned.rounds == 2
        and plan(DeploySettings.from_run_config({"method": "fedaws"}), 4) is None
    )
    # the noise shares are calibrated to the fewest survivors SecAgg+ can finish with:
    # max(its threshold for the expected cohort, min_cohort), which the server gives the workflow
    assert min_survivors(feduv, 3) == 3 and min_survivors(feduv, 10) == 5
    strict = DeploySettings.from_run_config({"method": "feduv", "reconstruction_threshold": 1.0})
    assert min_survivors(strict, 10) == 10
    assert min_survivors(central, 7) == 1  # plain rounds: a failed device stops the round
    # a Poisson-sampled round releases only when it sampled m_min; the chance it does not is
    # P(Binomial(N, q) < m_min), by hand: 4 devices at q = 0.75, m_min = 3
    assert can_release(feduv, 3, 3) and not can_release(feduv, 3, 2)
    by_hand = 0.25**4 + 4 * 0.75 * 0.25**3 + 6 * 0.75**2 * 0.25**2
    assert skip_probability(4, 0.75, 3) == pytest.approx(by_hand)
    assert skip_probability(1000, 0.1, 50) < 1e-8 and skip_probability(4, 0.75, 0) == 0
    for values, message in (
        ({"dp": "distributed", "secagg": "off"}, "dp distributed needs secure aggregation"),
        ({"dp_epsilon": 0.0}, "dp_epsilon must be positive"),
        ({"dp_epsilon": 2.0, "dp_noise_multiplier": 1.0}, "not both"),
        ({"dp": "maybe"}, "dp must be one of"),
    ):
        with pytest.raises(ConfigError, match=message):
            DeploySettings.from_run_config({"method": "feduv", **values})
    with pytest.raises(ConfigError, match="spends the whole budget"):  # adaptive clipping's count
        plan(DeploySettings.from_run_config({"method": "feduv", "adaptive_clipping": True}), 4)


def test_fedaws_sends_a_device_only_its_own_class_embedding() -> None:
    algorithm = DeploySettings.from_run_config({"method": "fedaws"}).run.method
    shared = {"embeddings": torch.randn(5, 8)}
    view, index = algorithm.client_view(shared, 3)
    assert view["embeddings"].shape == (1, 8) and index == 0
    assert torch.equal(view["embeddings"][0], shared["embeddings"][3])
    fedhide = DeploySettings.from_run_config({"method": "fedhide"}).run.method
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
    folder = device_folder(voice_dir, 1, tmp_path)
    device = TrainingDevice(
        {"data": str(folder / "samples"), "store": str(tmp_path / "store")}, settings
    )
    samples = device.samples()
    assert samples.shape == (6 * 2, 32000)  # 2.5-s clips: two 2-s windows each
    model = build_model(settings, 2)
    engine = EngineConfig(local_steps=2, batch_size=4, lr=0.05, crop=settings.crop)
    simulation = Simulation(settings.run.method, model.backbone, [samples, samples], engine)
    simulation.params = {k: v + 0.01 * torch.randn_like(v) for k, v in simulation.params.items()}
    if method == "fedaws":  # what the simulator's round does before training (client_receive)
        simulation.private["prototype"][1] = simulation.shared["embeddings"][1]
    batches = draw_batches(torch.as_tensor(samples), 2, 4, settings.crop, np.random.default_rng(5))
    expected, expected_private, _ = simulation._local_loop(torch.tensor([1]), batches[None], 0.05)

    view, index = settings.run.method.client_view(simulation.shared, 1)
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


def test_a_device_with_local_epochs_passes_over_its_samples_once_an_epoch(
    voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``local_epochs`` (the FedUV paper's "1 local epoch") reaches the devices: each epoch is
    one pass over the device's own samples in batches of B, the last one smaller, instead of
    ``local_steps`` batches drawn with replacement."""
    import uvdeploy.training

    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    settings = DeploySettings.from_run_config(
        {"method": "fedhide", "local_epochs": 2, "batch_size": 5, "lr": 0.05, "crop_seconds": 2.0}
    )
    assert settings.to_dict()["local_epochs"] == 2
    folder = device_folder(voice_dir, 1, tmp_path)
    device = TrainingDevice(
        {"data": str(folder / "samples"), "store": str(tmp_path / "store")}, settings
    )
    samples = torch.as_tensor(device.samples())  # 12 windows
    seen: list = []
    real = uvdeploy.training.local_update

    def spy(*args, **kwargs):
        seen.append(args[7])
        return real(*args, **kwargs)

    monkeypatch.setattr(uvdeploy.training, "local_update", spy)
    model = build_model(settings, 2)
    params, _ = split_parameters(model)
    dim = int(model.backbone.embedding_dim)
    algorithm = settings.run.method
    shared = algorithm.init_shared(2, dim, torch.Generator(), {"index": torch.arange(2)})
    view, index = algorithm.client_view(shared, 1)
    config = {"devices": 2, "index": index, "lr": 0.05, "shared": pack(view)}
    _, _, metrics, _ = device.train(to_arrays(params), config, {}, rng=np.random.default_rng(3))
    (batches,) = seen
    assert [len(batch) for batch in batches] == [5, 5, 2, 5, 5, 2]
    for epoch in (batches[:3], batches[3:]):  # every window once an epoch (crops: whole windows)
        rows = torch.cat(list(epoch))
        assert sorted(map(bytes, rows.numpy())) == sorted(map(bytes, samples.numpy()))
    assert np.isfinite(metrics["loss"])


def test_a_devices_dp_step_clips_and_adds_its_share_of_the_noise() -> None:
    """The device's DP step (uvdeploy.dp.private_update): its update clipped to the round's
    norm with the simulator's code; in distributed, noise of std z·C/√m_min (a test seed here,
    a fresh secret one on a device); with adaptive clipping its noisy bit, last."""
    from uvdeploy.dp import private_update
    from uvtrain.privacy import update_norms

    generator = torch.Generator().manual_seed(0)
    big = {"w": 3.0 * torch.randn(100, 200, generator=generator), "b": torch.randn(50)}
    small = {name: 1e-4 * value for name, value in big.items()}
    central = {"dp": "central", "dp_clip_norm": 0.5}
    clipped = private_update(big, central)
    stacked = {name: torch.from_numpy(a)[None] for name, a in zip(("b", "w"), clipped, strict=True)}
    assert float(update_norms(stacked)[0]) == pytest.approx(0.5, rel=1e-5)
    for got, name in zip(private_update(small, central), ("b", "w"), strict=True):
        assert np.array_equal(got, small[name].numpy())  # inside the bound: untouched
    instructions = {
        "dp": "distributed",
        "dp_clip_norm": 0.5,
        "dp_noise": 1.2,
        "dp_survivors": 3,
        "dp_adaptive": True,
        "dp_count_std": 0.9,
    }
    noisy = private_update(small, instructions, torch.Generator().manual_seed(7))
    assert len(noisy) == 3 and noisy[2].shape == (1,)
    noise = np.concatenate(
        [(noisy[0] - small["b"].numpy()), (noisy[1] - small["w"].numpy()).ravel()]
    )
    assert noise.std() == pytest.approx(1.2 * 0.5 / np.sqrt(3), rel=0.03)  # 20,050 entries
    assert abs(noise.mean()) < 4 * 0.35 / np.sqrt(noise.size)
    # The bits come from fresh secret seeds, so these two checks can fail by chance; their
    # bands are sized to a false failure below 1e-6 together. The bit is N(½, σ²) (unclipped:
    # +½), σ = 0.9/√3 ≈ 0.52; of n = 1000 draws: n·s²/σ² ~ χ²(999), and outside s/σ ∈ [0.88,
    # 1.12] with probability 8.3e-8 (scipy.stats.chi2); the mean is off by more than 5.2 σ/√n
    # with probability 2.0e-7. (The old 300 draws, ±15 % and 4 σ: 3e-4, a CI failure in 3,000.)
    bits = [private_update(small, instructions)[2][0] for _ in range(1000)]  # secret seeds
    assert np.std(bits) == pytest.approx(0.9 / np.sqrt(3), rel=0.12)
    assert np.mean(bits) == pytest.approx(0.5, abs=5.2 * 0.9 / np.sqrt(3) / np.sqrt(1000))
    again = private_update(small, instructions)
    assert not np.array_equal(again[1], private_update(small, instructions)[1])  # fresh noise


def test_a_device_draws_its_noise_from_a_secret_seed_it_never_sends(
    voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, caplog
) -> None:
    """A DP round on a real device: the noise's generator is seeded from `secrets` (caught here
    to look for it), and the seed is in nothing the device returns, keeps or prints."""
    import uvtrain.privacy.noise

    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    settings = DeploySettings.from_run_config({"method": "fedhide", "dp": "distributed"})
    folder = device_folder(voice_dir, 1, tmp_path)
    device = TrainingDevice(
        {"data": str(folder / "samples"), "store": str(tmp_path / "store")}, settings
    )
    seeds: list[int] = []
    draw = uvtrain.privacy.noise.secrets.randbits

    def randbits(bits: int) -> int:
        seeds.append(draw(bits))
        return seeds[-1]

    monkeypatch.setattr(uvtrain.privacy.noise.secrets, "randbits", randbits)
    caplog.set_level("DEBUG")
    model = build_model(settings, 2)
    params = {k: v.detach() for k, v in model.named_parameters()}
    dim = int(model.backbone.embedding_dim)
    shared = settings.run.method.init_shared(2, dim, torch.Generator(), {"index": torch.arange(2)})
    config = {"devices": 2, "index": 0, "lr": 0.05, "shared": pack(shared), "dp": "distributed"}
    config.update(dp_clip_norm=0.1, dp_noise=1.0, dp_survivors=3, dp_adaptive=False)
    device.check_round(secure=True, dp="distributed")
    update, count, metrics, kept = device.train(to_arrays(params), config, {})
    # the batches', the message's and the DP noise's seeds; every device weighs the same
    assert len(seeds) == 3 and count == 1
    sent = b"".join(a.tobytes() for a in update) + json.dumps(str(metrics)).encode()
    kept_bytes = b"".join(v.numpy().tobytes() for v in kept.values())
    printed = capsys.readouterr()
    for seed in seeds:
        for form in (str(seed).encode(), seed.to_bytes(8, "little"), seed.to_bytes(8, "big")):
            assert form not in sent and form not in kept_bytes
        assert str(seed) not in printed.out + printed.err + caplog.text
    assert np.std(np.concatenate([a.ravel() for a in update])) > 0.01  # noised: 0.1/√3 per entry


def test_a_device_keeps_its_codeword_encrypted_and_refuses_a_plain_feduv_round(
    voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bch127
) -> None:
    monkeypatch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
    folder = device_folder(voice_dir, 2, tmp_path)
    node = {"data": str(folder / "samples"), "store": str(tmp_path / "store")}
    settings = DeploySettings.from_run_config({"method": "feduv"})
    device = Device(node, settings.input)  # registration: the SDK's work, no torch
    assert device.status(bch127.fingerprint) == {"user_id": -1, "codeword": False, "samples": 12}
    device.assign(123456, bch127)
    assert device.status(bch127.fingerprint) == {"user_id": 123456, "codeword": True, "samples": 12}
    stored = b"".join(p.read_bytes() for p in (tmp_path / "store").iterdir() if p.is_file())
    bits = np.packbits(device.template().codeword).tobytes()
    assert bits not in stored and b"123456" not in stored  # encrypted at rest
    device = TrainingDevice(node, settings)
    with pytest.raises(DeviceError, match="another code"):
        device.constants(0, "0" * 64)

    with pytest.raises(DeviceError, match="refusing to send a plain FedUV update"):
        device.check_round(secure=False)
    device.check_round(secure=True, dp="distributed")  # secagg auto: SecAgg+ and distributed DP
    with pytest.raises(DeviceError, match="the round asks for dp 'off'"):
        device.check_round(secure=True, dp="off")
    plain = DeploySettings.from_run_config({"method": "feduv", "secagg": "off"})
    TrainingDevice({**node, "allow_plain_feduv": "true"}, plain).check_round(secure=False)


def test_registration_and_enrollment_load_no_torch(voice_dir: Path, tmp_path: Path) -> None:
    """A SuperNode starts a process per message: the ClientApp's registration (``status``,
    ``assign``) and enrollment are the SDK's work and must not load torch (about 2 s of CPU a
    process). In a fresh interpreter, as the SuperNode's app process is: the device the query
    handler builds registers, takes its user id and enrolls with the shipped bundle."""
    import subprocess
    import textwrap

    from uvsdk.verifier import default_bundle_path

    folder = device_folder(voice_dir, 1, tmp_path)
    node = {"data": str(folder / "samples"), "store": str(tmp_path / "store")}
    script = textwrap.dedent(
        f"""
        import sys
        from flwr.app import Context, RecordDict
        import uvdeploy.client as client
        context = Context(1, 1, {node!r}, RecordDict(), {{"method": "fedhide", "rounds": 2}})
        me = client._device(context)
        assert me.status(None) == {{"user_id": -1, "codeword": False, "samples": 12}}
        me.assign(7, None)
        assert me.status(None)["user_id"] == 7
        reply = me.enroll(open({str(default_bundle_path())!r}, "rb").read(), 0.95)
        assert reply["enrolled"] and reply["samples"] == 6, reply
        print("torch" in sys.modules, sorted(m for m in sys.modules if m.startswith("uvtrain.")))
        """
    )
    env = {**os.environ, "UVSDK_PASSPHRASE": PASSPHRASE}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    loaded, modules = done.stdout.strip().split(" ", 1)
    assert loaded == "False", f"torch was imported; uvtrain modules loaded: {modules}"
    assert (tmp_path / "store" / "model.uvb").exists()  # the bundle the device enrolled with


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
    server.message_spec = message_spec(server.algorithm, server.shared, 8)
    return server


def _replies(server, deltas: list[dict], messages: list[dict]):
    from uvdeploy.rounds import Replies

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
    metrics = server.advance(server.plan(1), server).metrics
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


def test_a_flower_round_applies_the_server_optimizer_and_checkpoints_its_state(
    tmp_path: Path,
) -> None:
    """The Flower server's round goes through the run's server optimiser (the simulator's
    :class:`ServerOptimizer`): with momentum β the second round moves by η (β Δ₁ + Δ₂), and the
    momentum is in the checkpoint."""
    from uvtrain.server_optimizers import ServerOptimizer

    values = {"method": "fedhide", "server_optimizer": "momentum", "server_lr": 0.5}
    server = _server(
        {**values, "server_momentum": 0.8, "out": str(tmp_path)}, {11: 1, 12: 1, 13: 1}
    )
    assert isinstance(server.server_optimizer, ServerOptimizer)
    assert server.server_optimizer.kind == "momentum" and server.server_optimizer.lr == 0.5
    proxies = [{"proxy": torch.randn(8)} for _ in range(3)]
    steps = []
    for number in (1, 2):
        deltas = [
            {k: 0.1 * torch.randn_like(v) for k, v in server.params.items()} for _ in range(3)
        ]
        steps.append({k: sum(d[k] for d in deltas) / 3 for k in server.params})
        server._send = lambda instructions, n, deltas=deltas: _replies(server, deltas, proxies)
        before = dict(server.params)
        server.advance(server.plan(number), server)
    for name, value in before.items():
        expected = value + 0.5 * (0.8 * steps[0][name] + steps[1][name])
        torch.testing.assert_close(server.params[name], expected)
    saved = server.state_dict()["server_optimizer"]  # what the Checkpoint callback writes
    assert saved["kind"] == "momentum"
    for name in before:
        torch.testing.assert_close(
            saved["state"][f"m.{name}"], 0.8 * steps[0][name] + steps[1][name]
        )


def test_a_flower_round_stops_when_the_model_does_not_change_or_is_not_finite() -> None:
    from uvdeploy.errors import DeploymentError

    server = _server({"method": "fedhide"}, {11: 4, 12: 6, 13: 2})
    proxies = [{"proxy": torch.randn(8)} for _ in range(3)]
    zeros = [{k: torch.zeros_like(v) for k, v in server.params.items()} for _ in range(3)]
    server._send = lambda instructions, number: _replies(server, zeros, proxies)
    with pytest.raises(DeploymentError, match="round 1: the model did not change"):
        server.advance(server.plan(1), server)
    nans = [{k: torch.full_like(v, float("nan")) for k, v in server.params.items()}] * 3
    server._send = lambda instructions, number: _replies(server, nans, proxies)
    with pytest.raises(DeploymentError, match="round 1: the aggregated update is not finite"):
        server.advance(server.plan(1), server)


def test_a_secure_flower_round_is_fused_with_secaggs_workflow() -> None:
    """Under SecAgg+ the workflow is the fused aggregator: the round takes the unmasked mean;
    a secure round without it (e.g. with per-client postprocessing) cannot run."""
    from uvdeploy.errors import DeploymentError
    from uvdeploy.rounds import FlowerSecAggPlus
    from uvtrain.rounds import RoundPlan, run_round

    server = _server({"method": "fedhide", "secagg": "on", "dp": "off"}, {11: 4, 12: 6, 13: 2})
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
    metrics = server.advance(server.plan(1), server).metrics
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


def test_a_central_dp_round_sums_the_clipped_updates_and_adds_the_servers_noise(
    tmp_path: Path,
) -> None:
    """Plain rounds, dp central: the server clips the devices' updates again (same code), adds
    N(0, (z·C)²) from its own secret randomness to the sum, divides by the devices, equal
    weights; the ε spent is in the round's metrics and the release is in the ledger."""
    from uvdeploy.dp import released

    server = _server(
        {"method": "fedhide", "dp": "central", "clip_norm": 0.5, "out": str(tmp_path)},
        {11: 4, 12: 6, 13: 2},
    )
    server.params = {"a": torch.zeros(40, 500), "b": torch.zeros(10)}
    server._plan_privacy(None)
    from uvtrain.privacy import PrivateSum

    dp = server.dp
    assert dp is not None and dp.survivors == 1
    assert isinstance(server.aggregator, PrivateSum) and server.aggregator.mechanism is dp.mechanism
    assert dp.plan.sampling_rate == 1.0 and dp.plan.epsilon_release == pytest.approx(8.0, rel=1e-2)
    generator = torch.Generator().manual_seed(1)
    deltas = [
        {k: 0.01 * torch.randn(v.shape, generator=generator) for k, v in server.params.items()}
    ]
    deltas += [{k: torch.full_like(v, 1.0) for k, v in server.params.items()}] * 2  # norm > C
    proxies = [{"proxy": torch.randn(8)} for _ in range(3)]
    sent = []
    server._send = lambda instructions, number: (
        sent.append(instructions) or _replies(server, deltas, proxies)
    )
    metrics = server.advance(server.plan(1), server).metrics
    config = sent[0][0][1].config
    assert config["dp"] == "central" and config["dp_clip_norm"] == 0.5 and config["dp_noise"] == 0
    assert (
        metrics["epsilon"] == pytest.approx(dp.plan.spent_release(1)) and metrics["survivors"] == 3
    )
    change = torch.cat([server.params[k].reshape(-1) for k in ("a", "b")])
    scale = 0.5 / np.sqrt(20010)  # each big update clipped to 0.5: every entry 0.5/√n
    signal = 0.01 * torch.cat([deltas[0][k].reshape(-1) for k in ("a", "b")]) + 2 * scale
    noise = (change - signal / 3) * 3
    assert float(noise.std()) == pytest.approx(dp.plan.noise_multiplier * 0.5, rel=0.03)
    assert released(tmp_path) == 1 and dp.state_dict() == {"clip_norm": 0.5, "releases": 1}


def test_a_secure_dp_round_finishes_with_enough_survivors_and_refuses_fewer(tmp_path) -> None:
    """Distributed DP under SecAgg+: the workflow's threshold is m_min, each device reports one
    sample (max_weight 1) and the range fits the noise; a round that ends with m′ >= m_min
    survivors moves the model by their mean (the noise is in it); fewer are refused; adaptive
    clipping reads the noisy count from the last array."""
    from uvdeploy.errors import DeploymentError
    from uvdeploy.rounds import FlowerSecAggPlus

    values = {"method": "fedhide", "dp": "distributed", "min_cohort": 2, "out": str(tmp_path)}
    values.update(clip_norm=0.5, adaptive_clipping=True, clip_count_std=10.0)
    server = _server(values, {11: 4, 12: 6, 13: 2})
    assert server.settings.mechanism == "distributed" and server.secure
    secagg = server.aggregator
    server._plan_privacy(None)
    assert server.dp is not None and server.dp.survivors == 2  # max(SecAgg+'s 2, min_cohort 2)
    assert isinstance(secagg, FlowerSecAggPlus) and secagg.reconstruction_threshold == 2
    before = dict(server.params)
    mean = {k: 0.01 * torch.ones_like(v) for k, v in before.items()}
    proxies = [{"proxy": torch.randn(8)} for _ in range(3)]
    calls = []

    def collect(instructions, number, max_weight, clipping_range):
        calls.append((instructions[0][1].config, max_weight, clipping_range))
        replies = _replies(server, [mean] * 3, proxies)
        for field in ("node_ids", "counts", "metrics", "updates"):  # node 12 dropped out
            del getattr(replies, field)[2]
        replies.failures.append("node 12 did not answer")
        return replies, [mean[k].numpy() for k in sorted(mean)] + [np.array([0.25])]

    secagg.collect = collect
    metrics = server.advance(server.plan(1), server).metrics
    config, max_weight, clipping_range = calls[0]
    assert config["dp"] == "distributed" and config["dp_survivors"] == 2
    assert config["dp_noise"] == pytest.approx(server.dp.plan.update_noise)
    assert max_weight == 1.0 and clipping_range >= 0.5 * (1 + 8 * config["dp_noise"] / np.sqrt(2))
    # the sum of the survivors' ±½ bits (2 × 0.25) over the expected cohort qN = 3, plus ½
    assert metrics["survivors"] == 2 and metrics["unclipped"] == pytest.approx(0.5 / 3 + 0.5)
    for name, value in before.items():  # distributed: no noise added by the server; sum / qN
        torch.testing.assert_close(server.params[name], value + mean[name] * 2 / 3)
    assert server.dp.clip_norm == pytest.approx(0.5 * np.exp(-0.2 * (0.5 / 3 + 0.5 - 0.5)))
    server.dp.survivors = 3  # a sum of fewer than m_min devices is never released
    with pytest.raises(DeploymentError, match="round 2: 1 of 3 device"):
        server.advance(server.plan(2), server)


@pytest.mark.parametrize("mechanism", ["central", "distributed"])
def test_one_mechanism_releases_the_same_in_the_simulator_the_audit_and_flower(
    mechanism: str,
) -> None:
    """THE SAME mechanism object (uvtrain.privacy.Mechanism, adaptive clipping on) through
    the simulator's steps, the audit's SecAgg+ transport and the Flower device and server
    functions, on the same updates: the same release (SecAgg+: to within its quantisation), the
    same metrics (clip norm, noisy unclipped fraction, ε) and the same next clip norm. Central:
    a device's half is deterministic and must equal the simulator's rows; distributed: its
    shares are its own secret, so Flower's server half gets the simulator's users' output."""
    from types import SimpleNamespace

    from uvdeploy.dp import FlowerPrivacy, private_update
    from uvdeploy.rounds import Replies
    from uvdeploy.server import FederatedServer
    from uvtrain.audit import SecAggModel, SecAggPlus
    from uvtrain.config import Privacy
    from uvtrain.privacy import (
        PrivateSum,
        PrivateUsers,
        mechanism_from_plan,
        plan_privacy,
        seeded_noise,
    )
    from uvtrain.rounds import ClientUpdates, RoundPlan

    plan = plan_privacy(
        Privacy(
            mechanism,
            clip_norm=0.5,
            dp_noise_multiplier=1.5,
            adaptive_clipping=True,
            clip_count_std=1.0,
        ),
        rounds=4,
        cohort=4,
        users=8,
    )
    assert plan is not None
    dp = mechanism_from_plan(plan, seeded_noise(11), survivors=3)
    start = dp.state_dict()
    generator = torch.Generator().manual_seed(2)
    base = {"b": torch.randn(6, generator=generator), "w": torch.randn(5, 4, generator=generator)}
    scales = torch.tensor([0.1, 2.0, 0.2, 3.0, 0.05])
    deltas = {
        k: torch.randn(5, *v.shape, generator=generator) * scales.reshape(-1, *[1] * v.dim())
        for k, v in base.items()
    }
    round_plan = RoundPlan(2, np.array([0, 2, 3, 5, 7]), 0.1)
    clients = torch.tensor(round_plan.clients)
    updates = ClientUpdates(clients, torch.ones(5), torch.zeros(5, 1), deltas=deltas)

    # the simulator: the user half as postprocessing, the server half over the plain sum
    sent = PrivateUsers(dp)(updates, base, round_plan)
    simulated, simulated_metrics = PrivateSum(dp)(sent, base, round_plan)
    after = dp.state_dict()
    assert after != start and {"clip_norm", "unclipped", "epsilon"} <= set(simulated_metrics)
    assert simulated_metrics["epsilon"] == plan.spent_release(2)

    # the audit: the same users' output through SecAgg+ as the transport
    dp.load_state_dict(start)
    secure = PrivateSum(dp, SecAggPlus(SecAggModel(), np.random.default_rng(4)))
    audited, audited_metrics = secure(sent, base, round_plan)
    assert audited_metrics == simulated_metrics and dp.state_dict() == after
    step = 16 / 2**22 * 1.01 * 5 / plan.cohort  # a level per member, over qN
    for name in base:
        assert float((audited[name] - simulated[name]).abs().max()) <= step + 1e-6

    # Flower: each device's user half (central: the simulator's rows exactly) ...
    dp.load_state_dict(start)
    flower = FlowerPrivacy(dp, survivors=3)
    instructions = {**flower.instructions(), "round": round_plan.number}
    rows = [
        [sent.deltas["b"][row].numpy(), sent.deltas["w"][row].numpy(),
         np.array([sent.clip_bits[row]], dtype=np.float32)]
        for row in range(5)
    ]  # fmt: skip
    if mechanism == "central":
        devices = [private_update({k: v[row] for k, v in deltas.items()}, instructions)
                   for row in range(5)]  # fmt: skip
        for device, row in zip(devices, rows, strict=True):
            assert all(np.array_equal(a, b) for a, b in zip(device, row, strict=True))
    # ... and the server's half on the plain replies (central only: clipped again) or on
    # SecAgg+'s mean
    server = SimpleNamespace(params=base)
    for secure_round in (False, True) if mechanism == "central" else (True,):
        dp.load_state_dict(start)
        replies = Replies(node_ids=list(range(5)), counts=[1] * 5, updates=rows)
        mean = [np.mean([r[i] for r in rows], axis=0) for i in range(3)] if secure_round else None
        received = ClientUpdates(clients, torch.ones(5), torch.zeros(5, 1))
        FederatedServer._private_sum(server, flower, received, replies, mean, round_plan.number)
        released, metrics = PrivateSum(dp)(received, base, round_plan)
        assert received.metrics["survivors"] == 5
        assert metrics["clip_norm"] == simulated_metrics["clip_norm"]
        assert metrics["epsilon"] == simulated_metrics["epsilon"]
        assert metrics["unclipped"] == pytest.approx(simulated_metrics["unclipped"], abs=1e-6)
        assert dp.underlying.clip_norm == pytest.approx(after["clip_norm"], rel=1e-6)
        for name in base:
            torch.testing.assert_close(released[name], simulated[name], rtol=1e-5, atol=1e-6)
    assert flower.releases == (2 if mechanism == "central" else 1)  # each one in the ledger


def test_a_dp_run_that_would_spend_more_than_planned_refuses_to_start(tmp_path: Path) -> None:
    """Resuming a DP run with other rounds, or after a noisy aggregate was released past the
    last checkpoint (its round would be released twice), is refused in one line."""
    from uvdeploy.dp import LEDGER

    settings = {"method": "fedhide", "dp": "central", "out": str(tmp_path), "rounds": 3}
    server = _server(settings, {11: 4, 12: 6, 13: 2})
    (tmp_path / "config.json").write_text(json.dumps({**server.settings.to_dict(), "rounds": 2}))
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(ConfigError, match="a DP run planned for 2 rounds"):
        server._resume()
    (tmp_path / "checkpoint.pt").unlink()
    (tmp_path / LEDGER).write_text(json.dumps({"releases": 1, "round": 1}))
    with pytest.raises(DeployError, match="round 1 did not complete"):
        server._plan_privacy(None)


def test_a_device_builds_the_model_without_the_servers_pretrained_file(tmp_path: Path) -> None:
    """``pretrained`` names a file on the server (another run's folder): the server loads it,
    and a device, whose trainable weights all come from the server each round, rebuilds the
    shape without it (it has no such file)."""
    source = tmp_path / "elsewhere" / "checkpoint.pt"
    settings = DeploySettings.from_run_config(
        {"method": "fedhide", "backbone": "logmel-tdnn", "pretrained": str(source)}
    )
    with pytest.raises(Exception, match="checkpoint.pt"):
        build_model(settings, 2)  # the server's side reads it: missing here
    model = build_model(settings, 2, on_device=True)
    source.parent.mkdir()
    torch.save({"backbone": {k: v + 1 for k, v in model.backbone.state_dict().items()}}, source)
    server = build_model(settings, 2)
    name = next(name for name, _ in model.backbone.named_parameters())
    loaded = dict(server.backbone.named_parameters())[name]
    torch.testing.assert_close(loaded, dict(model.backbone.named_parameters())[name] + 1)


def test_a_round_line_says_skipped_rounds_and_the_eta() -> None:
    """Issue 47: a round with too few devices sampled read ``loss nan, 0 devices``, and no round
    line gave an ETA."""
    from uvdeploy.rounds import round_line

    trained = {"round": 2, "loss": 0.43217, "clients": 3, "seconds": 48.24}
    assert round_line(trained, 5, "", 150.0) == (
        "round 2/5: loss 0.4322, 3 devices, 48.2 s, ETA 2 min 30 s"
    )
    skipped = {"round": 3, "loss": float("nan"), "clients": 0, "sampled": 1, "skipped": True}
    line = round_line(skipped, 5, ", ε spent 2.1 of 8", 90.0)
    assert line == (
        "round 3/5: skipped, 1 device(s) sampled, too few to release a sum (the model "
        "unchanged), ETA 1 min 30 s, ε spent 2.1 of 8"
    )
    assert "nan" not in line and "ETA" not in round_line({**trained, "round": 5}, 5, "", 0.0)
