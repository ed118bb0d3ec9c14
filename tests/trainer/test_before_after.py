"""Before and after: each method's tiny run gives the checkpoint, metrics and report it gave when
the golden file was written (issue 48: a change to the shell around the round keeps every figure).

``tests/trainer/before_after.json`` holds, per run, a fingerprint of every checkpoint tensor and
the run's figures. Every run trains on one math thread (how many threads share a sum changes its
last bits). On a machine of the torch, CPU capability and CPU vendor that wrote a set, the
tensors are compared bit for bit (the SHA-256 of each one's bytes) and the figures at a relative
1e-12 (the accountant's numpy sums follow the process's BLAS threads, which pytest's workers set
to one). The golden file holds one set of runs per such machine. A CPU with no set of its own
may round differently in the last bits, and training carries them forward, so there each
tensor's float64 absolute sum is compared at a relative :data:`ANOTHER_CPU`, its sum within that
fraction of its absolute sum, and the figures at :data:`ANOTHER_CPU_FIGURES`: a changed draw,
order or formula moves them by far more.

``UVTRAIN_WRITE_BEFORE_AFTER=1 pytest tests/trainer/test_before_after.py -n 0`` writes this
machine's set (another machine's set is added beside the others so). For a change that is meant
to move the figures, delete the file first and say so in the commit: the other machines' sets go
with it, and those machines compare at the tolerances until one writes its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from typer.testing import CliRunner  # noqa: E402

from uvtrain.cli import app  # noqa: E402

GOLDEN = Path(__file__).with_name("before_after.json")
WRITE = os.environ.get("UVTRAIN_WRITE_BEFORE_AFTER") == "1"
TINY = ["--dataset", "formant-voices", "--clients", "8", "--fraction", "0.5", "--batch-size", "4"]
#: The tolerances on a CPU with no golden of its own, from the two that have one (AMD EPYC and
#: Intel Xeon, the same torch and AVX512): most runs agree to 1e-7; softmax's absolute sums differ
#: by up to 4.2e-4, fedface's (its momentum buffers) by up to 5.6e-3 and its figures by 1.8e-2
#: (test accuracy 0.579 against 0.570: 3 of 330 borderline clips). On the two machines with a
#: golden every bit is compared.
ANOTHER_CPU = 2e-2
ANOTHER_CPU_FIGURES = 5e-2
#: what a run measures of time or the machine: never compared
UNTIMED = {"seconds", "client_updates_per_s", "rounds_per_s", "throughput", "device", "out"}


def run(method: str, rounds: int, *extra: str) -> list[str]:
    """``uvtrain run`` of ``method`` on the tiny dataset for ``rounds`` rounds."""
    return ["run", "--method", method, *TINY, "--rounds", str(rounds), *extra]


DP = ("--dp-noise-multiplier", "0.8")
RUNS: dict[str, list[str]] = {
    "feduv": run("feduv", 3),
    "fedhide": run("fedhide", 3),
    "softmax": run("softmax", 3),
    "fedaws": run("fedaws", 3),
    "feduv-dp-central": run("feduv", 3, "--dp", "central", *DP, "--clip-norm", "0.5"),
    "feduv-dp-distributed": run("feduv", 3, "--dp", "distributed", *DP),
    "fedhide-dp-ftrl": run(
        "fedhide",
        4,
        "--dp",
        "central",
        "--dp-noise",
        "tree",
        *DP,
        "--clip-norm",
        "0.5",
        "--no-adaptive-clipping",
    ),  # fmt: skip
    "fedface": [
        "run",
        "--method",
        "fedface",
        "--dataset",
        "formant-voices",
        "--rounds",
        "3",
        "--local-steps",
        "2",
        "--batch-size",
        "8",
        "--crop-seconds",
        "0.5",
        "--lr",
        "0.003",
        "--parties",
        "3",
        "--validators",
        "1",
    ],  # fmt: skip
    "audit": [
        "audit",
        "--method",
        "feduv",
        "--dataset",
        "formant-voices",
        "--small",
        "--no-inversion",
        "--methods",
        "none",
        "--cohorts",
        "none",
        "--clients",
        "8",
        "--rounds",
        "4",
        "--dp",
        "off",
    ],  # fmt: skip
}


def machine() -> str:
    """What decides the last bits of a float: torch, the CPU's vector unit, the platform and the
    CPU's vendor (the threads are one: :func:`one_thread`). The vendor because the same torch and
    vector unit round differently on AMD and Intel (oneDNN and MKL pick their kernels by it): the
    golden file written on an AMD EPYC differed in the last bits of every tensor on an Intel Xeon."""
    capability = torch.backends.cpu.get_cpu_capability()
    return f"torch {torch.__version__}, {capability}, {platform.machine()}, {cpu_vendor()}"


def cpu_vendor() -> str:
    """The CPU's vendor as Linux names it (``GenuineIntel``, ``AuthenticAMD``), else ``unknown``."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return "unknown"
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip()
    return "unknown"


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One math thread for each run, the count restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tensor_prints(value: Any, prefix: str = "") -> dict[str, dict[str, Any]]:
    """Every tensor (and numpy array) in a nested checkpoint, by its path of keys."""
    out: dict[str, dict[str, Any]] = {}
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            out.update(tensor_prints(value[key], f"{prefix}/{key}"))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            out.update(tensor_prints(item, f"{prefix}/{i}"))
    elif isinstance(value, (torch.Tensor, np.ndarray)):
        array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
        array = np.ascontiguousarray(array)
        flat = array.astype(np.float64).ravel()
        out[prefix] = {
            "shape": list(array.shape),
            "dtype": str(array.dtype),
            "sha256": hashlib.sha256(array.tobytes()).hexdigest(),
            "sum": float(flat.sum()),
            "abs": float(np.abs(flat).sum()),
            "first": [float(x) for x in flat[:4]],
        }
    return out


def figures(value: Any) -> Any:
    """A report or metrics line without what measures time or names the folder."""
    if isinstance(value, dict):
        return {k: figures(v) for k, v in value.items() if k not in UNTIMED}
    if isinstance(value, list):
        return [figures(v) for v in value]
    return value


def fingerprint(out: Path, audit: bool) -> dict[str, Any]:
    if audit:
        return {"report": figures(json.loads((out / "audit.json").read_text()))}
    state = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return {
        "tensors": tensor_prints(state),
        "metrics": [figures(json.loads(line)) for line in lines],
        "report": figures(json.loads((out / "report.json").read_text())),
    }


def close(ours: Any, golden: Any, path: str, rel: float) -> list[str]:
    """Where ``ours`` differs from ``golden`` beyond ``rel`` (numbers) or at all (the rest)."""
    if isinstance(golden, dict) and isinstance(ours, dict):
        if set(ours) != set(golden):
            return [f"{path}: keys {sorted(set(ours) ^ set(golden))} differ"]
        return [d for k in golden for d in close(ours[k], golden[k], f"{path}/{k}", rel)]
    if isinstance(golden, list) and isinstance(ours, list):
        if len(ours) != len(golden):
            return [f"{path}: {len(ours)} items, golden {len(golden)}"]
        return [
            d
            for i, (a, b) in enumerate(zip(ours, golden, strict=True))
            for d in close(a, b, f"{path}/{i}", rel)
        ]
    numbers = (int, float)
    if isinstance(golden, numbers) and isinstance(ours, numbers) and not isinstance(golden, bool):
        if ours == pytest.approx(golden, rel=rel, abs=rel * 1e-3):
            return []
        return [f"{path}: {ours!r}, golden {golden!r}"]
    return [] if ours == golden else [f"{path}: {ours!r}, golden {golden!r}"]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("before-after-data")


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_run_gives_what_it_gave_before(
    name: str, data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UVTRAIN_DATA", str(data_root))
    out = tmp_path / name
    result = CliRunner().invoke(app, [*RUNS[name], "--out", str(out)])
    assert result.exit_code == 0, result.output
    ours = fingerprint(out, audit=RUNS[name][0] == "audit")
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {"machines": {}}
    if WRITE:
        golden["machines"].setdefault(machine(), {})[name] = ours
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        return
    mine = golden["machines"].get(machine(), {})
    if name in mine:  # a machine like the one that wrote it: every bit of every tensor
        expected = mine[name]
        tensors = close(ours.get("tensors"), expected.get("tensors"), name, rel=0.0)
        assert tensors + close(untensored(ours), untensored(expected), name, rel=1e-12) == []
        return
    written = [runs[name] for runs in golden["machines"].values() if name in runs]
    assert written, f"no golden for {name}: write it (module docstring)"
    # another CPU: the bits may differ, and what counts outcomes may flip a borderline one
    expected = written[0]
    assert (
        sums_differ(ours, expected, name)
        + close(untensored(ours), untensored(expected), name, rel=ANOTHER_CPU_FIGURES)
        == []
    )


def untensored(fingerprint_: dict[str, Any]) -> dict[str, Any]:
    """A run's fingerprint less its tensors: its metrics and report."""
    return {key: value for key, value in fingerprint_.items() if key != "tensors"}


def sums_differ(ours: dict[str, Any], golden: dict[str, Any], name: str) -> list[str]:
    """Where a tensor's shape, dtype, absolute sum (relative :data:`ANOTHER_CPU`) or sum (within
    :data:`ANOTHER_CPU` of its absolute sum: a sum that cancels to near zero keeps no relative
    precision) differs from the golden's: what last-bit rounding cannot move."""
    mine, theirs = ours.get("tensors", {}), golden.get("tensors", {})
    if set(mine) != set(theirs):
        return [f"{name}: tensors {sorted(set(mine) ^ set(theirs))} differ"]
    out = []
    for path, want in theirs.items():
        got = mine[path]
        if (got["shape"], got["dtype"]) != (want["shape"], want["dtype"]):
            out.append(
                f"{name}{path}: {got['shape']} {got['dtype']}, golden {want['shape']} {want['dtype']}"
            )
        elif got["abs"] != pytest.approx(want["abs"], rel=ANOTHER_CPU, abs=1e-12):
            out.append(f"{name}{path}/abs: {got['abs']!r}, golden {want['abs']!r}")
        elif abs(got["sum"] - want["sum"]) > ANOTHER_CPU * want["abs"] + 1e-12:
            out.append(f"{name}{path}/sum: {got['sum']!r}, golden {want['sum']!r}")
    return out
