"""The tests' subprocesses, limited by their progress, never by a wall clock.

:func:`run_until_stalled` starts a command in a session of its own, reads its output as it comes
and fails the test only when the command has printed nothing for ``stall_seconds``: a slow but
progressing command (a busy machine) is never stopped, a stuck one is. Before failing it kills the
command's whole process group (whatever the command started with it) and shows the output."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

#: the end of the output shown when a command stalls
SHOWN_CHARACTERS = 4000


def run_until_stalled(
    command: Sequence[str | Path],
    *,
    stall_seconds: float,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` to its end (stdin empty) and return its exit code, stdout and stderr.

    Parameters
    ----------
    command
        The program and its arguments.
    stall_seconds
        Fail the test when neither stdout nor stderr has had new output for this long (the
        process group is killed first); a command that keeps printing runs as long as it needs.
    cwd, env
        As for :class:`subprocess.Popen`.
    check
        Also fail the test, with the output, when the command exits with a non-zero code.
    """
    arguments = [str(part) for part in command]
    process = subprocess.Popen(
        arguments,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=None if env is None else dict(env),
        start_new_session=True,
    )
    output: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    try:
        finished = _read_until_closed(process, output, stall_seconds) and _exits_within(
            process, stall_seconds
        )
    finally:
        code = _kill_group(process)
    stdout, stderr = (b"".join(output[name]).decode(errors="replace") for name in output)
    result = subprocess.CompletedProcess(arguments, code, stdout, stderr)
    if not finished:
        pytest.fail(
            f"{arguments}: no new output for {stall_seconds:.0f} s: its process group was "
            f"killed\n{_tail(result)}",
            pytrace=False,
        )
    if check and code != 0:
        pytest.fail(f"{arguments}: exit code {code}\n{_tail(result)}", pytrace=False)
    return result


def _read_until_closed(
    process: subprocess.Popen, output: dict[str, list[bytes]], stall_seconds: float
) -> bool:
    """Collect stdout and stderr into ``output`` until both are closed; False when neither had
    new output for ``stall_seconds`` first."""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, "stdout")
        selector.register(process.stderr, selectors.EVENT_READ, "stderr")
        while selector.get_map():
            ready = selector.select(timeout=stall_seconds)
            if not ready:
                return False
            for key, _ in ready:
                chunk = os.read(key.fd, 65536)
                if chunk:
                    output[key.data].append(chunk)
                else:
                    selector.unregister(key.fileobj)
    return True


def _exits_within(process: subprocess.Popen, seconds: float) -> bool:
    """Whether it exits within ``seconds`` (after closing its output), left unreaped: while it
    is, its process id, and so its group's, cannot be taken by another process."""
    deadline = time.monotonic() + seconds
    while os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _kill_group(process: subprocess.Popen) -> int:
    """Kill the command's process group (it and anything it left behind), reap it and close its
    pipes; returns its exit code."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    code = process.wait()
    for stream in (process.stdout, process.stderr):
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
