"""The SDK-only path of docs/sdk.md, as an app developer takes it: a fresh virtual environment
with ``pip install -e .`` alone (no extras: no torch, no onnx), then ``python
examples/sdk_demo.py --out demo``. Issue 47: the demo built its bundle with onnx and ended in
``ModuleNotFoundError``; it now copies the committed ``examples/reference-voice.uvb``
(``tests/test_examples.py`` checks that file is what the builder makes).

The install reads the machine's pip configuration and cache, as a developer's would; it takes
about a minute on the 2-core development machine (most of it pip unpacking wheels)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.processes import run_until_stalled

ROOT = Path(__file__).resolve().parents[1]
#: what the SDK-only environment must not hold (the train extra's heavy modules)
HEAVY = ("torch", "onnx", "galois", "onnxscript")


@pytest.mark.slow
def test_the_sdk_demo_runs_with_only_pip_install_e(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("VIRTUAL_ENV", "PYTHONPATH", "UVSDK_", "PYTEST_"))
    }
    environment["HOME"] = str(tmp_path / "home")
    run_until_stalled([sys.executable, "-m", "venv", venv], stall_seconds=300, check=True)
    python = venv / "bin" / "python"
    run_until_stalled(
        [python, "-m", "pip", "install", "--quiet", "-e", ROOT],
        stall_seconds=300,
        env=environment,
        check=True,
    )
    probe = f"import importlib.util as u; print([m for m in {HEAVY!r} if u.find_spec(m)])"
    found = run_until_stalled([python, "-c", probe], stall_seconds=120, check=True)
    assert found.stdout.strip() == "[]", f"the SDK-only venv holds {found.stdout}"

    environment["PATH"] = os.pathsep.join([str(venv / "bin"), environment.get("PATH", "")])
    demo = run_until_stalled(
        [python, ROOT / "examples" / "sdk_demo.py", "--out", tmp_path / "demo"],
        stall_seconds=300,
        cwd=tmp_path,
        env=environment,
    )
    output = demo.stdout + demo.stderr
    assert demo.returncode == 0, output[-3000:]
    assert "Traceback" not in output
    assert "$ uvsdk enroll" in output and "$ uvsdk verify" in output
    # the README shows the demo's table: its lines are the demo's own (a figure checked, not typed)
    lines = set(demo.stdout.splitlines())
    shown = readme_demo_lines()
    assert shown and [line for line in shown if line not in lines] == []


def readme_demo_lines() -> list[str]:
    """The lines of the demo's output the README shows (its "In 30 seconds" section's untyped
    block, ``...`` and blank lines left out)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## In 30 seconds", 1)[1].split("\n## ", 1)[0]
    blocks: list[tuple[str, list[str]]] = []
    inside = False
    for line in section.splitlines():
        if line.startswith("```"):
            if not inside:
                blocks.append((line[3:].strip(), []))
            inside = not inside
        elif inside:
            blocks[-1][1].append(line)
    output = next(lines for language, lines in blocks if language == "")
    return [line for line in output if line.strip() not in ("", "...")]
