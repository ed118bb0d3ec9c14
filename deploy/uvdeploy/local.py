"""A whole Flower federation on this machine: a SuperLink, one SuperNode per device folder, and
``flwr run`` — on loopback, every process started and stopped by its process id.

It is the deployment exactly as it runs across machines (the same ServerApp and ClientApp, the
same gRPC/HTTP transport, SecAgg+), with ``127.0.0.1`` for every address and no TLS; see
docs/deploy.md for the real thing. ``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1`` is set for
every process, so Flower installs nothing at run time: the code is the installed ``uvtrain``.

A device folder holds ``samples/`` (the user's clips or images) and gets ``store/`` (the SDK's
encrypted templates: the codeword, later the enrollment) and ``store/model.uvb`` (the final
model). :func:`write_devices` makes such folders from a built-in dataset.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from uvtrain.io import CHECKPOINT, CONFIG, REPORT, STATUS, atomic_write, read_json
from uvtrain.progress import duration_text

from .errors import LaunchError
from .settings import DeploySettings

CONNECTION = "uvtrain-local"


def app_dir() -> Path:
    """The Flower app folder (its ``pyproject.toml`` names the ServerApp and ClientApp)."""
    return Path(str(resources.files("uvdeploy") / "app"))


PORT_ATTEMPTS = 3  # starts tried for a SuperLink or SuperNode, each on a port probed free


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PortTaken(LaunchError):
    """The port probed free was taken before the process bound it."""


def _bound_line(port: int) -> str:
    """What a Flower server (uvicorn) logs once it has bound ``port`` itself."""
    return f":{port} (Press CTRL+C to quit)"


def _wait_for_port(
    port: int, process: _Process, stall_seconds: float, name: str, *, bound_line: str = ""
) -> None:
    """Wait until the process listens on ``port``; fail when it exits first or makes no
    progress (no CPU time used, no new log output) for ``stall_seconds``: a busy machine only
    makes the wait longer. With ``bound_line``, the port counts as this process's only once its
    log says so (another process may be listening there); one that exits on a port already in
    use raises :class:`PortTaken`."""
    last_progress, seen = time.monotonic(), _progress_of(process)
    log = Path(process.log.name)
    while time.monotonic() - last_progress < stall_seconds:
        if process.popen.poll() is not None:
            code = process.popen.returncode
            if "address already in use" in log.read_text(errors="replace").lower():
                raise PortTaken(f"{name} exited at start: port {port} already in use")
            raise LaunchError(f"{name} exited at start (code {code}); see {log}")
        with socket.socket() as probe:
            probe.settimeout(0.5)
            listening = probe.connect_ex(("127.0.0.1", port)) == 0
        if listening and (not bound_line or bound_line in log.read_text(errors="replace")):
            return
        time.sleep(0.2)
        if _progress_of(process) != seen:
            last_progress, seen = time.monotonic(), _progress_of(process)
    raise LaunchError(
        f"{name} did not open port {port} and made no progress for {stall_seconds:.0f} s"
    )


def _progress_of(process: _Process) -> tuple[int, str]:
    """Its log's size and its CPU time (from /proc where there is one)."""
    size = Path(process.log.name).stat().st_size
    try:
        fields = Path(f"/proc/{process.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return size, ""
    return size, " ".join(fields[11:13])  # utime stime


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    return repr(value)


def write_devices(
    dataset: str,
    out: str | Path,
    *,
    clients: int,
    seed: int = 0,
    root: str | None = None,
) -> list[Path]:
    """Device folders from a built-in dataset: ``DEVICE/samples/`` (the client's training
    clips, as WAV or PNG files) and ``DEVICE/test/`` (its held-out ones, to try ``uvsdk verify``
    with after the run). Returns the device folders."""
    from uvtrain.data.registry import load_dataset

    data = load_dataset(dataset, root=root, seed=seed)
    if clients > len(data.clients):
        raise LaunchError(f"--clients {clients}: {dataset} has {len(data.clients)}")
    folders = []
    for number, client in enumerate(data.clients[:clients]):
        folder = Path(out) / f"device-{number:02d}"
        for split, arrays in (("samples", client.train), ("test", client.test)):
            target = folder / split
            target.mkdir(parents=True, exist_ok=True)
            for index, sample in enumerate(arrays):
                data.input.save(sample, target / f"{split}-{index:03d}")
        folders.append(folder)
    return folders


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen
    log: Any


class LocalFederation:
    """A SuperLink and SuperNodes on loopback; a context manager that stops them all.

    Each process starts in a session of its own, so stopping it signals its whole process group
    (the SuperExec and app processes Flower spawns under it); processes Flower detaches from the
    group are found by the ``--parent-pid`` they were given and stopped too.
    """

    def __init__(self, devices: list[Path], folder: Path, *, user: str = "default") -> None:
        self.devices, self.folder, self.user = devices, folder, user
        self.home = folder / "flower"
        self.logs = folder / "logs"
        self.processes: list[_Process] = []
        self.bin_dir = Path(sys.executable).parent  # Flower's commands, this interpreter's
        self.env = {
            **os.environ,
            # Flower starts its helpers from the PATH
            "PATH": os.pathsep.join([str(self.bin_dir), os.environ.get("PATH", "")]),
            "FLWR_HOME": str(self.home),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            # How often each SuperExec (the SuperLink's and every SuperNode's) asks for a new app
            # task, each time a request to its HTTP API. Measured on the 2-core machine with four
            # devices (docs/deploy.md): an idle federation uses 0.41 cores at 0.1 s, 0.14 at
            # 0.5 s and 0.09 at Flower's 1 s; a SecAgg+ round took 31-38 s at 0.1 s, 32 s at 0.5 s
            # and 32-34 s at 1 s (most of a stage is the SuperNode's own 3 s wait for messages)
            "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.5",
        }
        self.port = 0
        self.runs = 0  # numbers each run's log and run config

    def _start(self, name: str, command: list[str]) -> _Process:
        log = open(self.logs / f"{name}.log", "w")  # noqa: SIM115 (closed in stop())
        popen = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.folder,
            start_new_session=True,
        )
        process = _Process(name, popen, log)
        self.processes.append(process)
        return process

    def __enter__(self) -> LocalFederation:
        self.home.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        bin_dir = self.bin_dir
        try:
            _, self.port = self._listen(
                "superlink",
                lambda port: [
                    str(bin_dir / "flower-superlink"),
                    "--insecure",
                    "--port",
                    str(port),
                    "--disable-runtime-dependency-installation",
                ],
            )
            atomic_write(
                self.home / "config.toml",
                f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
                f'address = "127.0.0.1:{self.port}"\ninsecure = true\n',
            )
            nodes = [
                (f"supernode-{number:02d}", self._supernode_command(device))
                for number, device in enumerate(self.devices)
            ]
            started = [(name, command, *self._launch(name, command)) for name, command in nodes]
            for name, command, node, port in started:  # all start at once; each waited for
                try:
                    _wait_for_port(port, node, 60, name, bound_line=_bound_line(port))
                except PortTaken:
                    self._listen(name, command, attempts=PORT_ATTEMPTS - 1, first=2)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _supernode_command(self, device: Path) -> Callable[[int], list[str]]:
        """A device's SuperNode command line, given the port of its ClientAppIo API."""
        store = device / "store"
        node_config = " ".join(
            f"{key}={_toml_value(str(value))}"
            for key, value in (
                ("data", (device / "samples").resolve()),
                ("store", store.resolve()),
                ("bundle", (store / "model.uvb").resolve()),
                ("user", self.user),
            )
        )
        return lambda port: [
            str(self.bin_dir / "flower-supernode"),
            "--insecure",
            "--superlink",
            f"127.0.0.1:{self.port}",
            "--port",
            str(port),
            "--node-config",
            node_config,
        ]

    def _launch(self, name: str, command: Callable[[int], list[str]]) -> tuple[_Process, int]:
        """Start ``command`` on a port probed free; returns the process and the port."""
        port = _free_port()
        return self._start(name, command(port)), port

    def _listen(
        self,
        name: str,
        command: Callable[[int], list[str]],
        *,
        attempts: int = PORT_ATTEMPTS,
        first: int = 1,
    ) -> tuple[_Process, int]:
        """Start ``command`` and wait until it has bound its port. A port probed free can be
        taken before the process binds it (another federation's, say): the process then exits
        at start and is started again on another port, each try with its own log (``NAME``,
        ``NAME-2``, ...)."""
        attempt = first
        while True:
            process, port = self._launch(name if attempt == 1 else f"{name}-{attempt}", command)
            try:
                _wait_for_port(port, process, 60, name, bound_line=_bound_line(port))
                return process, port
            except PortTaken:
                if attempt == first + attempts - 1:
                    raise
            attempt += 1

    def run(
        self,
        settings: dict[str, Any],
        echo: Callable[[str], None],
        *,
        stall_seconds: float | None = None,
        timeout: float | None = None,
    ) -> int:
        """``flwr run`` the app with these run-config values; returns its exit code.

        Each run writes and reads its own ``logs/flwr-run-N.log``. ``stall_seconds`` stops a run
        whose log and the SuperNodes' logs have all stayed unchanged that long (no progress);
        ``timeout`` stops one that has not finished within that many seconds. After a stopped or
        failed run its ``flwr run`` process group is ended and every unfinished run on the
        SuperLink is stopped (``flwr stop``), so the federation is ready for the next run."""
        self.runs += 1
        overrides = self.folder / f"run-config-{self.runs}.toml"
        atomic_write(
            overrides, "".join(f"{key} = {_toml_value(value)}\n" for key, value in settings.items())
        )
        command = [
            str(self.bin_dir / "flwr"),
            "run",
            str(app_dir()),
            CONNECTION,
            "--run-config",
            str(overrides),
            "--stream",
        ]
        flwr = self._start(f"flwr-run-{self.runs}", command)
        flwr.log.close()
        try:
            self._follow(flwr, echo, stall_seconds, timeout)
        except BaseException:
            self._end_group(flwr, grace=0)
            self._stop_unfinished_runs()
            raise
        code = self._end_group(flwr, grace=0)
        if code != 0:  # e.g. its log stream broke: the run may still be going on the SuperLink
            self._stop_unfinished_runs()
        return code

    def _follow(
        self,
        flwr: _Process,
        echo: Callable[[str], None],
        stall_seconds: float | None,
        timeout: float | None,
    ) -> None:
        """Echo the run's ``[uvtrain]`` lines until ``flwr run`` exits (left unreaped)."""
        log = _LogReader(Path(flwr.log.name))
        started = last_progress = time.monotonic()
        sizes = self._progress()
        while True:
            done = _has_exited(flwr.popen)
            for line in log.new_lines():
                if "[uvtrain]" in line:
                    echo(line[line.index("[uvtrain]") + 10 :])
            if done:
                return
            now, seen = time.monotonic(), self._progress()
            if seen != sizes:
                sizes, last_progress = seen, now
            if stall_seconds is not None and now - last_progress > stall_seconds:
                raise LaunchError(
                    f"the run made no progress (its log and the SuperNodes' logs unchanged) "
                    f"for {stall_seconds:.0f} s: stopped"
                )
            if timeout is not None and now - started > timeout:
                raise LaunchError(f"the run did not finish within {timeout:.0f} s: stopped")
            time.sleep(0.5)

    def _progress(self) -> dict[str, int]:
        """The sizes of the runs' and the SuperNodes' logs: one grows whenever the server logs
        a step or a device takes a message (the SuperLink's own log is left out)."""
        return {
            path.name: path.stat().st_size
            for path in self.logs.glob("*.log")
            if path.name.startswith(("flwr-run-", "supernode-"))
        }

    def _stop_unfinished_runs(self) -> None:
        """``flwr stop`` every run on the SuperLink that has not finished (all of them are this
        federation's): their ServerApps and ClientApps end with them. Listed after ``flwr run``
        has ended, so that a run it was still starting is found too."""
        link = [p for p in self.processes if p.name == "superlink"]
        if not link or _has_exited(link[0].popen):
            return
        listing = self._flwr(f"flwr-ls-{self.runs}", ["ls", CONNECTION, "--format", "json"])
        try:
            runs = json.loads(listing)["runs"]
        except (ValueError, KeyError):  # its log (logs/flwr-ls-N.log) says why
            return
        for run in runs:
            if not str(run["status"]).startswith("finished"):
                run_id = str(run["run-id"])
                self._flwr(f"flwr-stop-{run_id}", ["stop", run_id, CONNECTION])

    def _flwr(self, name: str, arguments: list[str]) -> str:
        """Run a short ``flwr`` command (ended after a minute); returns its output."""
        command = self._start(name, [str(self.bin_dir / "flwr"), *arguments])
        self._end_group(command, grace=60)
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def _end_group(self, process: _Process, *, grace: float) -> int:
        """End one process's group (:func:`_end_group`) and forget it; returns its exit code."""
        code = _end_group(process, grace=grace)
        self.processes.remove(process)
        return code

    def stop(self) -> None:
        """Stop every process this federation started (and what they spawned), by process id."""
        pids = [p.popen.pid for p in self.processes]
        for process in reversed(self.processes):
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in self.processes:
            _exits_within(process.popen, max(0.1, deadline - time.monotonic()))
            _kill_group(process)
        for pid in _children_by_parent_flag(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.processes = []


class _LogReader:
    """The complete lines a growing log file has gained since the last call."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.partial = path, 0, b""

    def new_lines(self) -> list[str]:
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = self.partial + handle.read()
        self.offset += len(data) - len(self.partial)
        *lines, self.partial = data.split(b"\n")
        return [line.decode(errors="replace") for line in lines]


def _has_exited(popen: subprocess.Popen) -> bool:
    """Whether the process has exited, without reaping it: while it is unreaped its process id,
    and so its process group's, cannot be taken by another process."""
    if popen.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _exits_within(popen: subprocess.Popen, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not _has_exited(popen):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _signal_group(process: _Process, number: signal.Signals) -> None:
    if process.popen.returncode is None:  # unreaped: the group id is still this process's
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.popen.pid, number)


def _end_group(process: _Process, *, grace: float) -> int:
    """Wait up to ``grace`` seconds for a process to exit, SIGTERM its process group and wait
    10 s more, then SIGKILL the group (whatever is left in it, the process exited or not) and
    reap the process; close its log. Returns its exit code."""
    if not _exits_within(process.popen, grace):
        _signal_group(process, signal.SIGTERM)
        _exits_within(process.popen, 10)
    return _kill_group(process)


def _kill_group(process: _Process) -> int:
    """SIGKILL the process's group (whatever is left in it, the process exited or not), reap
    the process and close its log; returns its exit code."""
    _signal_group(process, signal.SIGKILL)
    code = process.popen.wait()
    if not process.log.closed:
        process.log.close()
    return int(code)


def _children_by_parent_flag(pids: list[int]) -> list[int]:
    """Processes started with ``--parent-pid P`` for one of ``pids`` (Flower's SuperExec and app
    processes), read from /proc; empty where there is no /proc."""
    found = []
    wanted = {str(pid) for pid in pids}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for flag, value in zip(arguments, arguments[1:], strict=False):
            if flag == b"--parent-pid" and value.decode(errors="replace") in wanted:
                found.append(int(entry.name))
    return found


def run_local(
    devices_dir: str | Path,
    out: str | Path,
    values: dict[str, Any],
    *,
    echo: Callable[[str], None] = print,
    stall_seconds: float | None = None,
    timeout: float | None = None,
    user: str = "default",
) -> dict[str, Any]:
    """Train on the device folders under ``devices_dir`` with a loopback federation; returns the
    server's report. ``values`` are run-config keys (``method``, ``rounds``, ...);
    ``stall_seconds`` and ``timeout`` are :meth:`LocalFederation.run`'s."""
    devices = sorted(p for p in Path(devices_dir).iterdir() if (p / "samples").is_dir())
    if not devices:
        raise LaunchError(f"no device folders (with a samples/ folder) in {devices_dir}")
    if not os.environ.get("UVSDK_PASSPHRASE"):
        raise LaunchError(
            "set UVSDK_PASSPHRASE: the devices keep their codewords in encrypted stores"
        )
    out = Path(out).resolve()
    settings = {"min_devices": len(devices), **values, "out": str(out)}
    # a bad key or value fails here, before any process starts; so does a DP run that cannot
    # keep within its budget or would train a DP run further (the server checks both again)
    from .dp import check_rounds, plan

    parsed = DeploySettings.from_run_config(settings)
    if parsed.centre_bundle:  # one release, every device once
        from .centre import single_release

        parsed = single_release(parsed)
    plan(parsed, len(devices))
    if (out / CHECKPOINT).exists() and (out / CONFIG).exists():
        check_rounds(parsed, read_json(out / CONFIG), out)
    out.mkdir(parents=True, exist_ok=True)
    workspace = out / "federation"
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir()
    (out / STATUS).unlink(missing_ok=True)
    echo(f"starting a SuperLink and {len(devices)} SuperNodes on 127.0.0.1 (logs: {workspace})")
    started = time.monotonic()
    with LocalFederation(devices, workspace, user=user) as federation:
        echo(
            f"the SuperLink and {len(devices)} SuperNodes are up after "
            f"{duration_text(time.monotonic() - started)}; the server app starts and the "
            "devices register (the server says how many are connected while it waits)"
        )
        code = federation.run(settings, echo, stall_seconds=stall_seconds, timeout=timeout)
    status_path = out / STATUS
    status = read_json(status_path) if status_path.exists() else {}
    if status.get("state") != "finished":
        reason = status.get("error") or f"flwr run exited {code}; see {workspace / 'logs'}"
        raise LaunchError(reason)
    return read_json(out / REPORT)
