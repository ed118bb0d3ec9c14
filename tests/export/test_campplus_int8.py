"""benchmarks/campplus_int8.py's layer groups: every weighted layer of CAM++ outside the frontend
is in exactly one group, so the group rows of its table cover the network and never count a layer
twice (the rows are read against the whole-network row)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from torch import nn

from tests.processes import run_until_stalled
from uvtrain.models import CAMPPlusEncoder

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
_spec = importlib.util.spec_from_file_location("campplus_int8", BENCHMARKS / "campplus_int8.py")
campplus_int8 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(campplus_int8)


def test_every_layer_outside_the_frontend_is_in_exactly_one_group() -> None:
    encoder = CAMPPlusEncoder()
    weights = [
        f"backbone.{name}.weight"
        for name, module in encoder.named_modules()
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Linear)) and not name.startswith("frontend")
    ]
    assert len(weights) > 200  # the whole D-TDNN, not a part of it
    groups = {weight: [] for weight in weights}
    for weight in weights:
        for group in campplus_int8.GROUPS:
            if campplus_int8.in_group(weight, group):
                groups[weight].append(group)
    assert {w: g for w, g in groups.items() if len(g) != 1} == {}
    sizes = {g: sum(found == [g] for found in groups.values()) for g in campplus_int8.GROUPS}
    assert sizes["D-TDNN bottlenecks (1×1)"] == sizes["D-TDNN context convolutions"]
    assert sizes["context-aware masks"] == 2 * sizes["D-TDNN context convolutions"]
    assert all(sizes.values())  # no group names nothing


def test_bad_input_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    """A missing bundle, a bundle whose weights are already stored as int8 (the shipped default)
    and a missing calibration file are each refused in one line, exit code 2, nothing written."""
    default = Path(__file__).resolve().parents[2] / "sdk" / "uvsdk" / "data" / "default.uvb"
    out = tmp_path / "out"
    script = [sys.executable, str(BENCHMARKS / "campplus_int8.py"), "--speakers", str(tmp_path)]
    cases = {
        "not a readable bundle": ["--bundle", str(tmp_path / "none.uvb"), "--calibration", "real"],
        "already quantized": ["--bundle", str(default), "--calibration", "real"],
        "--calibration": ["--bundle", str(default), "--calibration", str(tmp_path / "x.npz")],
    }
    for expected, args in cases.items():
        done = run_until_stalled([*script, *args, "--out", str(out)], stall_seconds=300)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], done.stderr
        assert not out.exists()
