"""The Flower deployment run for real: a federation on loopback (a SuperLink and SuperNodes as
processes, SecAgg+ for FedUV) through :mod:`uvdeploy.local`, how it stops a run that makes no
progress, and ``uvtrain deploy``'s one-line errors. The settings, the device's update and the
server's round, in process: ``test_deploy.py``."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from tests.conftest import PASSPHRASE  # noqa: E402
from tests.deploy.devices import device_folder  # noqa: E402
from tests.processes import is_gone, is_running, run_until_stalled, wait_until  # noqa: E402
from uvdeploy.local import LaunchError, LocalFederation  # noqa: E402
from uvdeploy.settings import (  # noqa: E402
    DeploySettings,
    build_model,
)
from uvtrain.config import ConfigError  # noqa: E402
from uvtrain.engine import split_parameters  # noqa: E402

# -- a real federation ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def federation(voice_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """Four devices (speakers 0-3) on a loopback SuperLink, shared by the runs below."""
    root = tmp_path_factory.mktemp("federation")
    devices = [device_folder(voice_dir, speaker, root / "devices") for speaker in range(4)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("UVSDK_PASSPHRASE", PASSPHRASE)
        patch.setenv("UVTRAIN_DATA", str(root / "no-datasets"))  # devices read only their folders
        with LocalFederation(devices, root / "workspace") as running:
            yield running, root, devices


# a run in which neither the server nor a device has logged anything for this long is stuck;
# the server's own waits are longer still, so that a slow machine never fails a test
STALL_SECONDS = 300.0
SERVER_WAIT = {"wait_seconds": 3600.0, "round_seconds": 3600.0}


def _run(federation, out: Path, **values) -> dict:
    running, _, devices = federation
    lines: list[str] = []
    settings = {"min_devices": len(devices), **SERVER_WAIT, "out": str(out), **values}
    code = running.run(settings, lines.append, stall_seconds=STALL_SECONDS)
    assert (out / "status.json").exists(), "\n".join(lines)
    status = json.loads((out / "status.json").read_text())
    return {"code": code, "status": status, "lines": lines}


@pytest.mark.slow
def test_a_run_without_progress_is_stopped_and_leaves_the_federation_clean(federation) -> None:
    """Issue 30's case on a real federation: a run waiting for a fifth device that never comes
    makes no progress; it is stopped, its ``flwr run`` ended and the run stopped on the
    SuperLink (``flwr ls``: every run finished), so the runs below share a clean federation and
    read only their own logs."""
    running, root, devices = federation
    settings = {"method": "fedaws", "min_devices": len(devices) + 1, **SERVER_WAIT}
    settings.update(out=str(root / "stalled"), export=False)
    lines: list[str] = []
    with pytest.raises(LaunchError, match="no progress"):
        running.run(
            settings, lines.append, stall_seconds=20
        )  # it is meant to stall: no need to wait long
    # it said what it waits for (issue 47), once: a line a while would count as progress
    waiting = [line for line in lines if line.startswith("waiting for devices: ")]
    assert len(waiting) == 1 and f"{len(devices)} of {len(devices) + 1} connected" in waiting[0]
    assert not [p.name for p in running.processes if p.name.startswith("flwr-run")]
    listing = run_until_stalled(
        [running.bin_dir / "flwr", "ls", "uvtrain-local", "--format", "json"],
        stall_seconds=STALL_SECONDS,
        cwd=running.folder,
        env=running.env,
        check=True,
    )
    runs = json.loads(listing.stdout)["runs"]
    assert [run["status"] for run in runs] == ["finished:stopped"], runs
    assert not (root / "stalled" / "report.json").exists()


@pytest.mark.slow
def test_feduv_trains_with_distributed_dp_under_secagg_and_every_device_ends_enrolled(
    federation,
) -> None:
    """The default deployment of FedUV: SecAgg+ and distributed DP at ε = 8 under the
    participation rule (one period of devices / cohort = 1 round: a device may join every
    round, and the ε counts all of them, so it holds against the server too), here with
    adaptive clipping from C = 0.05. The released model carries exactly the noise the devices'
    shares add up to, through SecAgg+'s quantization: its change over the two rounds has the
    std z_Δ·√(Σ_r C_r² m′_r / m_min) / (qN) (the clipped updates are negligible beside it)."""
    from tests.trainer.test_privacy import _analytic_gaussian_epsilon
    from uvsdk import Verifier
    from uvtrain.checkpoints import read_checkpoint
    from uvtrain.rounds import period_cohort

    _, root, devices = federation
    out = root / "feduv"
    # a cohort of 3 of the 4 devices each round; every device registers, trains and enrolls
    result = _run(
        federation,
        out,
        method="feduv",
        rounds=2,
        fraction=0.75,
        lr=0.2,
        clip_norm=0.05,
        adaptive_clipping=True,
        clip_count_std=1.0,
    )
    assert result["status"] == {"state": "finished", "rounds": 2}, result["lines"]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["round"] for m in metrics] == [1, 2] and all(m["secure"] for m in metrics)
    settings = DeploySettings.from_run_config(json.loads((out / "config.json").read_text()))
    report = json.loads((out / "report.json").read_text())
    assert report["deployment"]["secure_aggregation"] is True
    assert report["warmup"]["devices_enrolled"] == 4
    # issue 47: an empty splits said nothing; the report and the last line say why
    assert report["splits"] == {} and report["evaluation"].startswith("not evaluated here")
    assert result["lines"][-1] == f"note: {report['evaluation']}"
    assert "round 1/2: " in "\n".join(result["lines"]) and ", ETA " in "\n".join(result["lines"])
    privacy = report["privacy"]
    assert privacy["mechanism"] == "distributed" and privacy["rounds"] == 2
    assert privacy["epsilon"] == pytest.approx(8.0, rel=1e-2) and privacy["epsilon"] <= 8.0
    assert privacy["delta"] == 1e-6 and privacy["sampling_rate"] == 0.75
    assert privacy["clip_norm"] == 0.05 and privacy["min_survivors"] == 3
    log = "\n".join(result["lines"])
    z, cohort, users = privacy["noise_multiplier"], privacy["expected_cohort"], privacy["users"]
    assert privacy["sampling"] == "period" and cohort == 3 and users == 4
    assert privacy["participation"]["period"] == 1 and privacy["server_participations"] == 2
    assert privacy["epsilon_server"] == privacy["epsilon"]
    # the server draws 3 of the 4 devices a round, as the simulator's period_cohort does
    drawn = [period_cohort(settings.run.seed, r, 4, 3, 1) for r in (1, 2)]
    assert [len(d) for d in drawn] == [3, 3] and [m["survivors"] for m in metrics] == [3, 3]
    for row in metrics:  # the ε spent so far (a device in each round so far: one Gaussian of
        # z/√r, Balle and Wang's closed form by hand), in the metrics and on each round's line
        spent = _analytic_gaussian_epsilon(z / np.sqrt(row["round"]), privacy["delta"])
        assert row["epsilon"] == pytest.approx(spent, rel=1e-6) == row["epsilon_server"]
        assert f"round {row['round']}/2: " in log
        assert f"ε spent {row['epsilon']:.3g} of {privacy['epsilon']:.3g} (the server's too)" in log
    assert metrics[0]["clip_norm"] == 0.05
    checkpoint = read_checkpoint(out / "checkpoint.pt")
    assert checkpoint["privacy"]["clip_norm"] != 0.05  # adaptive: moved by round 2's count
    start, _ = split_parameters(build_model(settings, 4))
    final = checkpoint["params"]
    change = torch.cat([(final[k] - start[k]).reshape(-1) for k in sorted(start)])
    z_update = privacy["adaptive_clipping"]["update_noise_multiplier"]
    # each survivor's share z_Δ·C_r/√m_min, their sum over qN = 3, the released mean taken by
    # the server optimiser's step η (plain sgd; FedUV's default η is 5)
    schedule = settings.run.schedule
    assert schedule.server_optimizer == "sgd"
    shares = sum(m["clip_norm"] ** 2 * m["survivors"] / (3 * 3**2) for m in metrics)
    expected = schedule.server_lr * z_update * np.sqrt(shares)
    assert float(change.std()) == pytest.approx(expected, rel=0.03)
    registry = json.loads((out / "devices.json").read_text())["assigned"]
    assert len(set(registry)) == 4
    # the exported bundle states the run's privacy, and so enrolls by prototype (README, sdk.md:
    # under DP codeword mode is a membership test the ε floors): each device holds its codeword,
    # unused, and a prototype made from its own samples
    from uvsdk.bundle import Bundle

    training = Bundle(out / "model.uvb").manifest.training
    assert training is not None and training.method == "feduv"
    assert training.enrollment == "prototype"
    stated = training.privacy
    assert stated is not None and stated.mechanism == "distributed"
    assert (stated.epsilon, stated.delta) == (privacy["epsilon"], privacy["delta"])
    assert stated.epsilon_server == privacy["epsilon_server"]
    assert stated.membership_eer_floor == privacy["membership_eer_floor"]
    assert stated.simulated_deployment is False
    for device in devices:
        bundle = device / "store" / "model.uvb"
        verifier = Verifier(bundle, store=device / "store", passphrase=PASSPHRASE)
        template = verifier.store.load("default")
        assert template.mode == "prototype" and template.is_enrolled
        assert template.codeword is not None  # trained with, kept, unused
        assert template.user_id in registry
        # no threshold in the server's log, as a float would be written there (repr or six
        # significant digits); a shorter form (0.0005, or 0.3012 beside the log's 4-decimal
        # losses) could be there by chance
        t = template.threshold
        forms = {repr(t), f"{t:.6g}"}
        assert not [f for f in forms if len(f.strip("-0.")) >= 4 and f in log], forms
        score = verifier.score(device / "test" / "clip6.wav")
        assert np.isfinite(score)


@pytest.mark.slow
def test_feduv_trains_with_dp_ftrl_under_secagg_one_round_a_period_per_device(federation) -> None:
    """DP-FTRL on real devices: SecAgg+ as the transport, the server's tree noise on the sum it
    unmasks (central), cohorts of 2 of the 4 devices under the rule "one round in each period
    of 2" (the server's selection; each device keeps its own record and would refuse a second),
    ε = 8 for the whole run whoever knows the cohorts, stated in report.json and the bundle.
    One period (2 rounds) here: the tree's restart at each period, and the cohorts of many
    periods, are checked in process (tests/trainer/test_dp_ftrl.py)."""
    from uvsdk.bundle import Bundle
    from uvtrain.privacy import TreeNoise  # noqa: F401 - the mechanism under test
    from uvtrain.rounds import period_cohort

    _, root, devices = federation
    out = root / "feduv-ftrl"
    result = _run(federation, out, method="feduv", rounds=2, fraction=0.5, lr=0.2, min_cohort=2,
                  dp="central", dp_noise="tree", clip_norm=0.05)  # fmt: skip
    assert result["status"] == {"state": "finished", "rounds": 2}, result["lines"]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(m["secure"] for m in metrics) and [m["survivors"] for m in metrics] == [2] * 2
    privacy = json.loads((out / "report.json").read_text())["privacy"]
    assert privacy["noise"] == "tree" and privacy["participation"]["period"] == 2
    assert privacy["participation"]["tree_depths"] == [2]
    assert privacy["epsilon"] == privacy["epsilon_server"] <= 8.0
    assert privacy["epsilon"] == pytest.approx(8.0, rel=1e-6)
    assert "DP-FTRL (tree aggregation), central" in "\n".join(result["lines"])
    # every device in exactly one round of the period, as the server drew them and as each
    # device recorded it
    settings = DeploySettings.from_run_config(json.loads((out / "config.json").read_text()))
    rounds = [period_cohort(settings.run.seed, r, 4, 2, 2) for r in (1, 2)]
    assert sorted(np.concatenate(rounds).tolist()) == [0, 1, 2, 3]
    last = [json.loads((d / "store" / "participation.json").read_text()) for d in devices]
    assert sorted(record["round"] for record in last) == [1, 1, 2, 2]
    training = Bundle(out / "model.uvb").manifest.training
    assert training is not None and training.enrollment == "prototype"
    assert training.privacy is not None and training.privacy.mechanism == "central"
    assert training.privacy.epsilon == privacy["epsilon"]


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


@pytest.mark.slow
def test_the_devices_measure_their_chains_mean_under_secagg_and_dp_and_enroll_with_it(
    federation,
) -> None:
    """``centre_bundle``: no training; each device's chain vector (the SDK's unit vectors of its
    files, averaged) goes through the DP mechanism's user half and SecAgg+, the server releases
    the noisy sum over the four devices into ``model.uvb`` and every device enrolls with it.
    The released mean differs from the exact one (computed here with the SDK) by the noise the
    shares add up to: z·C·√(m′/m_min)/N per entry; its ε is one Gaussian's, by hand."""
    from tests.trainer.test_privacy import _analytic_gaussian_epsilon
    from uvsdk import Verifier
    from uvsdk.bundle import Bundle

    _, root, devices = federation
    out = root / "centre"
    source = Path(__file__).resolve().parents[2] / "conformance" / "bundles"
    bundle = source / "voice-embedding-centre.uvb"
    values = {"centre_bundle": str(bundle), "dp_noise_multiplier": 0.05}
    result = _run(federation, out, method="fedhide", **values)
    assert result["status"] == {"state": "finished", "task": "centre"}, result["lines"]
    report = json.loads((out / "report.json").read_text())
    privacy = report["privacy"]
    assert report["devices"] == report["survivors"] == 4 and privacy["users"] == 4
    assert privacy["mechanism"] == "distributed" and privacy["min_survivors"] == 3
    z, delta = privacy["noise_multiplier"], privacy["delta"]
    assert privacy["epsilon_server"] == pytest.approx(_analytic_gaussian_epsilon(z, delta), 1e-6)
    verifier = Verifier(bundle)
    exact = []
    for device in devices:
        units = [
            verifier.embed(p).astype(np.float64) for p in sorted((device / "samples").iterdir())
        ]
        exact.append(np.mean([u / np.linalg.norm(u) for u in units], axis=0))
    written = Bundle(out / "model.uvb")
    assert written.manifest.score_norm.centre.people == 4
    noise = written.centre.mean - np.mean(exact, axis=0)
    expected = z * np.sqrt(4 / 3) / 4
    assert 0.5 * expected < float(noise.std()) < 1.6 * expected, (float(noise.std()), expected)
    for device in devices:
        assert (device / "store" / "model.uvb").read_bytes() == (out / "model.uvb").read_bytes()
        enrolled = Verifier(
            device / "store" / "model.uvb", store=device / "store", passphrase=PASSPHRASE
        )
        assert enrolled.store.load("default").is_enrolled
        assert np.isfinite(enrolled.score(device / "test" / "clip6.wav"))


FAKE_FLWR = """#!/bin/sh
# a stand-in for `flwr`: run 1 starts a child and then prints nothing; later runs finish;
# `flwr ls` lists run 41 as running the first time, every run as finished after that
here=$(dirname "$0")
if [ "$1" = stop ]; then echo "$2" >> "$here/stopped"; exit 0; fi
if [ "$1" = ls ]; then
    status=running; [ -e "$here/listed" ] && status=finished:stopped; touch "$here/listed"
    echo '{"success": true, "runs": [{"run-id": "40", "status": "finished:completed"},'
    echo ' {"run-id": "41", "status": "'"$status"'"}]}'
    exit 0
fi
number=$(( $(cat "$here/count" 2>/dev/null || echo 0) + 1 ))
echo "$number" > "$here/count"
echo "Successfully started run 4$number"
echo "INFO : [uvtrain] the output of run $number"
if [ "$number" = 1 ]; then
    sleep 100000 &
    echo "$!" > "$here/child"
    wait
fi
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_stalled_run_ends_its_process_group_and_its_run_and_the_next_reads_its_own_log(
    tmp_path: Path,
) -> None:
    """With a stand-in for ``flwr``: a run that prints nothing for ``stall_seconds`` has its
    whole process group ended, the child it started included, and the SuperLink's unfinished
    run stopped (``flwr stop 41``, not the finished 40); the next run on the same federation
    writes and echoes only its own log."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "flwr").write_text(FAKE_FLWR)
    (fake / "flwr").chmod(0o755)
    federation = LocalFederation([], tmp_path / "workspace")
    federation.logs.mkdir(parents=True)
    federation.bin_dir = fake
    federation._start("superlink", ["sleep", "100000"])  # runs are stopped on a live SuperLink
    try:
        first: list[str] = []
        with pytest.raises(LaunchError, match="no progress .* for 2 s: stopped"):
            federation.run({"method": "fedaws"}, first.append, stall_seconds=2)
        assert first == ["the output of run 1"]
        assert (fake / "stopped").read_text().split() == ["41"]
        assert is_gone(int((fake / "child").read_text()))
        assert [p.name for p in federation.processes] == ["superlink"]
        second: list[str] = []
        assert federation.run({"method": "fedaws"}, second.append, stall_seconds=2) == 0
        assert second == ["the output of run 2"]
        assert (fake / "stopped").read_text().split() == ["41"]  # finished: nothing to stop
        logs = federation.logs
        assert "run 1" in (logs / "flwr-run-1.log").read_text()
        assert "run 1" not in (logs / "flwr-run-2.log").read_text()
        assert (tmp_path / "workspace" / "run-config-2.toml").read_text() == 'method = "fedaws"\n'
    finally:
        federation.stop()


# it binds its port first and says which (in a file, not its log), so that no other process can
# take the port while it works; it listens only after the work
LISTEN_AFTER_WORK = """
import os, socket, sys, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
with open(sys.argv[1] + ".part", "w") as told:
    told.write(str(server.getsockname()[1]))
os.replace(sys.argv[1] + ".part", sys.argv[1])
while time.process_time() < 4:  # 4 s of CPU time in silence (a slow machine: longer)
    sum(range(10000))
server.listen()
time.sleep(100000)
"""


def test_waiting_for_a_port_fails_on_no_progress_never_on_time(tmp_path: Path) -> None:
    """The SuperLink's start is waited for on progress: a process that sleeps is given up on
    after 2 s without CPU time or output; one that computes silently for longer than that and
    then listens is waited for."""
    from uvdeploy.local import _wait_for_port

    federation = LocalFederation([], tmp_path)
    federation.logs.mkdir(parents=True)
    # Each port is bound before its wait and stays bound (the first by the test, never listening;
    # the second by the busy process, before its work), not probed free and bound later: another
    # process could listen on a port probed free and end the first wait, or take the second
    # before it is bound, by chance.
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", 0))
        silent = federation._start("silent", ["sleep", "100000"])
        with pytest.raises(LaunchError, match="made no progress for 2 s"):
            _wait_for_port(held.getsockname()[1], silent, 2, "the SuperLink")
        told = tmp_path / "port"
        busy = federation._start("busy", [sys.executable, "-c", LISTEN_AFTER_WORK, str(told)])
        wait_until(told.exists, busy.popen, stall_seconds=STALL_SECONDS)
        _wait_for_port(int(told.read_text()), busy, 2, "the SuperLink")
        assert busy.popen.poll() is None
    finally:
        held.close()
        federation.stop()
    assert all(not is_running(process.pid) for process in (silent.popen, busy.popen))


def test_a_port_taken_after_the_probe_is_retried_on_another(tmp_path: Path, monkeypatch) -> None:
    """The port probed free is taken (here by a listening socket, which a bare connect would
    mistake for the server) before the SuperLink, and then a SuperNode, binds it: each exits,
    and is started again on a fresh port, waited for until its log says it bound that port."""
    import uvdeploy.local as local

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    # the SuperLink's first try, its second, then the SuperNode's first; later probes are real
    ports = iter([taken, None, taken])
    probe = local._free_port
    monkeypatch.setattr(local, "_free_port", lambda: next(ports, None) or probe())
    device = tmp_path / "device"
    (device / "samples").mkdir(parents=True)
    try:
        with LocalFederation([device], tmp_path / "federation") as federation:
            assert federation.port != taken
            assert f"127.0.0.1:{federation.port}" in (federation.home / "config.toml").read_text()
            logs = federation.logs
            for first, second in (("superlink", "superlink-2"), ("supernode-00", "supernode-00-2")):
                assert "address already in use" in (logs / f"{first}.log").read_text().lower()
                assert "(Press CTRL+C to quit)" in (logs / f"{second}.log").read_text()
            processes = [process.popen for process in federation.processes]
            running = [popen.poll() is None for popen in processes]
            assert running == [False, True, False, True]  # each first try exited
        assert all(not is_running(popen.pid) for popen in processes)
    finally:
        squatter.close()


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
    for name in "bcd":  # four devices: a secure round's cohort of three
        (tmp_path / "devices" / name / "samples").mkdir(parents=True)
    for flags, message in (
        (["--dp-epsilon", "0"], "dp_epsilon must be positive, not 0"),
        (["--dp", "distributed", "--secagg", "off"], "dp distributed needs secure aggregation"),
        (["--adaptive-clipping"], "spends the whole budget"),  # planned before any process
        (["--dp-noise", "tree"], "needs --dp central"),  # the default placement is distributed
        (["--dp-period", "-2"], "dp_period must be in [0, 10^6]"),
    ):
        result = runner.invoke(app, [*common, "--method", "feduv", *flags])
        assert result.exit_code == 2 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "federation").exists()
    result = runner.invoke(app, ["deploy", "app"])
    assert result.exit_code == 0 and (Path(result.output.strip()) / "pyproject.toml").is_file()
