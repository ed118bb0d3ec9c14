"""The tests' subprocess helper (tests/processes.py): a command is stopped for making no
progress (no output, no CPU time), never for taking long, and stopping it kills its whole
process group."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.processes import is_gone, run_until_stalled

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


def _printed(message: str) -> str:
    """The stdout shown in a failure's message (one line here)."""
    return message.split("--- stdout (end):\n")[1].split("--- stderr")[0].strip()


def test_a_command_that_stops_printing_is_killed_with_its_process_group() -> None:
    """A shell that starts a child, prints its process id and then waits in silence: the test
    fails with the output so far, and the child (same group, holding the pipes) is gone."""
    script = "sleep 100000 & echo child $!; wait"
    with pytest.raises(pytest.fail.Exception, match="no progress for 2 s") as failed:
        run_until_stalled(["sh", "-c", script], stall_seconds=2)
    message = str(failed.value)
    assert "process group was killed" in message
    assert is_gone(int(_printed(message).removeprefix("child ")))


def test_a_slow_command_that_keeps_printing_runs_to_its_end() -> None:
    """Twelve lines a quarter of a second apart: longer in all than the 2-s stall limit, never
    silent that long; its exit code, stdout and stderr come back apart."""
    program = (
        "import sys, time\n"
        "for number in range(12):\n"
        "    print(number, flush=True)\n"
        "    time.sleep(0.25)\n"
        "print('done', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    result = run_until_stalled([sys.executable, "-c", program], stall_seconds=2)
    assert result.returncode == 3
    assert result.stdout.split() == [str(number) for number in range(12)]
    assert result.stderr == "done\n"
    with pytest.raises(pytest.fail.Exception, match="exit code 3"):
        run_until_stalled([sys.executable, "-c", program], stall_seconds=2, check=True)


def test_a_command_that_closes_its_output_and_goes_on_silently_is_killed() -> None:
    script = "echo pid $$; exec >/dev/null 2>&1; sleep 100000"
    with pytest.raises(pytest.fail.Exception, match="no progress for 2 s") as failed:
        run_until_stalled(["sh", "-c", script], stall_seconds=2)
    assert is_gone(int(_printed(str(failed.value)).removeprefix("pid ")))


#: computes for 3.5 s of CPU time without printing anything (a slow machine: longer)
SILENT_WORK = "import time\nwhile time.process_time() < 3.5:\n    sum(range(10000))\n"


def test_a_command_that_computes_in_silence_is_progressing() -> None:
    """CPU time used by the group is progress: a silent 3.5-s computation outlasts a 2-s limit;
    counted on its output alone, it is stopped."""
    result = run_until_stalled([sys.executable, "-c", SILENT_WORK], stall_seconds=2)
    assert result.returncode == 0 and result.stdout == ""
    with pytest.raises(pytest.fail.Exception, match="no progress for 2 s"):
        run_until_stalled(
            [sys.executable, "-c", SILENT_WORK], stall_seconds=2, cpu_is_progress=False
        )
