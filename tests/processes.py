"""The tests' subprocesses, limited by their progress, never by a wall clock.

:func:`run_until_stalled` starts a command in a session of its own, reads its output as it comes
and fails the test only when the command has made no progress for ``stall_seconds``: no new
output and (by default) no CPU time used by its process group, so that a slow but progressing
command (a busy machine, a long silent computation) is never stopped and a stuck one (waiting on
something that never comes) is. Before failing it kills the command's whole process group
(whatever the command started with it) and shows the output."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

#: the end of the output shown when a command stalls
SHOWN_CHARACTERS = 4000
#: how often the process group's CPU time is looked at while it prints nothing
CHECK_SECONDS = 1.0


def run_until_stalled(
    command: Sequence[str | Path],
    *,
    stall_seconds: float,
    cpu_is_progress: bool = True,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` to its end (stdin empty) and return its exit code, stdout and stderr:
    :func:`finish` (:func:`start` (``command``)).

    Parameters
    ----------
    command
        The program and its arguments.
    stall_seconds
        Fail the test when the command has made no progress for this long (its process group
        is killed first); a command that keeps progressing runs as long as it needs.
    cpu_is_progress
        Progress is new output on stdout or stderr, and, when true, CPU time used by the
        process group (read from /proc; output only where there is none).
    cwd, env
        As for :class:`subprocess.Popen`.
    check
        Also fail the test, with the output, when the command exits with a non-zero code.
    """
    process = start(command, cwd=cwd, env=env)
    return finish(
        process, stall_seconds=stall_seconds, cpu_is_progress=cpu_is_progress, check=check
    )


def start(
    command: Sequence[str | Path],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen:
    """Start ``command`` in a session of its own (stdin empty, stdout and stderr piped), for
    :func:`finish`; several can run at once."""
    return subprocess.Popen(
        [str(part) for part in command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=None if env is None else dict(env),
        start_new_session=True,
    )


def finish(
    process: subprocess.Popen,
    *,
    stall_seconds: float,
    cpu_is_progress: bool = True,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Read a :func:`start`-ed command's output to its end and return its result; the
    arguments are :func:`run_until_stalled`'s."""
    arguments = list(process.args)
    output: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    watch = ProgressWatch(process.pid, stall_seconds, cpu_is_progress)
    try:
        finished = _read_until_closed(process, output, watch) and _exits(process, watch)
    finally:
        code = _kill_group(process)
    stdout, stderr = (b"".join(output[name]).decode(errors="replace") for name in output)
    result = subprocess.CompletedProcess(arguments, code, stdout, stderr)
    if not finished:
        pytest.fail(
            f"{arguments}: no progress for {stall_seconds:.0f} s: its process group was "
            f"killed\n{_tail(result)}",
            pytrace=False,
        )
    if check and code != 0:
        pytest.fail(f"{arguments}: exit code {code}\n{_tail(result)}", pytrace=False)
    return result


class ProgressWatch:
    """When a process group last made progress (:meth:`progressed`, or CPU time it used), and
    whether it has stalled."""

    def __init__(self, group: int, stall_seconds: float, cpu_is_progress: bool) -> None:
        self.group, self.stall_seconds, self.cpu_is_progress = group, stall_seconds, cpu_is_progress
        self.last = self.looked = time.monotonic()
        self.ticks = -1

    def progressed(self) -> None:
        self.last = time.monotonic()

    def stalled(self) -> bool:
        """Whether it has made no progress for ``stall_seconds`` (CPU time looked at now)."""
        if self.cpu_is_progress and time.monotonic() - self.looked >= CHECK_SECONDS:
            self.looked = time.monotonic()
            ticks = group_cpu_ticks(self.group)
            if ticks != self.ticks:
                self.ticks = ticks
                self.progressed()
        return time.monotonic() - self.last > self.stall_seconds

    def wait(self) -> float:
        """Seconds to wait for output before looking again."""
        return (
            min(CHECK_SECONDS, self.stall_seconds) if self.cpu_is_progress else self.stall_seconds
        )


def _read_until_closed(
    process: subprocess.Popen, output: dict[str, list[bytes]], watch: ProgressWatch
) -> bool:
    """Collect stdout and stderr into ``output`` until both are closed; False when the command
    stalled first."""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, "stdout")
        selector.register(process.stderr, selectors.EVENT_READ, "stderr")
        while selector.get_map():
            ready = selector.select(timeout=watch.wait())
            for key, _ in ready:
                chunk = os.read(key.fd, 65536)
                if chunk:
                    output[key.data].append(chunk)
                    watch.progressed()
                else:
                    selector.unregister(key.fileobj)
            if not ready and watch.stalled():
                return False
    return True


def _exits(process: subprocess.Popen, watch: ProgressWatch) -> bool:
    """Whether it exits (after closing its output) before it stalls, left unreaped: while it
    is, its process id, and so its group's, cannot be taken by another process."""
    while not _has_exited(process):
        if watch.stalled():
            return False
        time.sleep(0.05)
    return True


def _has_exited(process: subprocess.Popen) -> bool:
    """Whether it has exited, without reaping it."""
    if process.returncode is not None:
        return True
    return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def group_cpu_ticks(group: int) -> int:
    """The CPU time (clock ticks, with that of reaped children) of the processes in a process
    group, read from /proc; 0 where there is none."""
    total = 0
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group:  # after the name: state, parent, group, ...
            total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total


def wait_until(
    condition: Callable[[], bool], process: subprocess.Popen, *, stall_seconds: float
) -> None:
    """Wait until ``condition()`` holds while ``process`` (started in a session of its own)
    runs; fail the test, its process group killed, when it exits first or uses no CPU time for
    ``stall_seconds``."""
    watch = ProgressWatch(process.pid, stall_seconds, cpu_is_progress=True)
    while not condition():
        if _has_exited(process):
            code = _kill_group(process)
            pytest.fail(f"{process.args}: exited ({code}) first", pytrace=False)
        if watch.stalled():
            _kill_group(process)
            pytest.fail(f"{process.args}: no progress for {stall_seconds:.0f} s", pytrace=False)
        time.sleep(0.05)


def _kill_group(process: subprocess.Popen) -> int:
    """Kill the command's process group (it and anything it left behind), reap it and close its
    pipes; returns its exit code."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    code = process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    return code


def _tail(result: subprocess.CompletedProcess[str]) -> str:
    return (
        f"--- stdout (end):\n{result.stdout[-SHOWN_CHARACTERS:]}"
        f"--- stderr (end):\n{result.stderr[-SHOWN_CHARACTERS:]}"
    )


def is_running(pid: int) -> bool:
    """Whether a process exists and is not a zombie (read from /proc)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def is_gone(pid: int) -> bool:
    """Whether a process that was just killed has gone. It waits for that (a SIGKILLed process
    goes within milliseconds); its bound, 60 s, is only reached when it was not killed."""
    for _ in range(600):
        if not is_running(pid):
            return True
        time.sleep(0.1)
    return False
