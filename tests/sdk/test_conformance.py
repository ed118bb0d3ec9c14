"""The conformance vectors (conformance/) are the SDK's behaviour written down: regenerating them
from the SDK must change nothing, and the rules they rest on hold."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from uvsdk.calibration import canonical_json
from uvsdk.codeword import gf2_rank

CONFORMANCE = Path(__file__).parents[2] / "conformance"


def _generator():
    spec = importlib.util.spec_from_file_location(
        "conformance_generate", CONFORMANCE / "generate.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_regenerating_the_vectors_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert _generator().main(["--check"]) == 0, capsys.readouterr().err


def test_the_check_sees_a_changed_vector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    generate = _generator()
    vectors = tmp_path / "vectors"
    vectors.mkdir()
    document = json.loads((CONFORMANCE / "vectors" / "backoff.json").read_text())
    document["lockouts"][5]["seconds"] += 1.0
    (vectors / "backoff.json").write_text(json.dumps(document))
    monkeypatch.setattr(generate, "VECTORS", vectors)
    assert generate.main(["--check", "--only", "backoff"]) == 1
    assert generate.main(["--check", "--only", "codeword"]) == 1  # missing file


def test_model_outputs_are_compared_with_a_tolerance_and_the_rest_exactly() -> None:
    differences = _generator().differences
    assert differences({"v": [0.5]}, {"v": [0.5 + 1e-9]}, model=True) == []
    assert differences({"v": [0.5]}, {"v": [0.5 + 1e-3]}, model=True)
    assert differences({"v": [0.5]}, {"v": [0.5 + 1e-12]})
    assert differences({"n": 1}, {"n": 1.0})


def test_every_file_states_its_format() -> None:
    files = sorted((CONFORMANCE / "vectors").glob("*.json"))
    assert [f.stem for f in files] == sorted(_generator().GENERATORS)
    for file in files:
        document = json.loads(file.read_text())
        assert document["format"] == "uvsdk-conformance/1" and document["kind"] == file.stem


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (1e-05, "0.00001"),
        (1.5e-07, "1.5e-7"),
        (1e21, "1e+21"),
        (1.2345678901234568e20, "123456789012345680000"),
        (-0.716, "-0.716"),
        (0.0, "0"),
        (55, "55"),
        ({"b": [True, None], "a": "é\n"}, '{"a":"é\\n","b":[true,null]}'),
    ],
)
def test_canonical_json_writes_what_javascript_writes(value: object, text: str) -> None:
    """RFC 8785: ECMAScript number formatting, sorted keys, no whitespace."""
    assert canonical_json(value) == text


def test_canonical_json_refuses_what_is_not_json() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        canonical_json(float("nan"))
    with pytest.raises(TypeError):
        canonical_json({1, 2})


def test_generator_rank_is_over_gf2() -> None:
    full_over_reals = np.array([[1, 1, 0], [0, 1, 1], [1, 0, 1]])
    assert np.linalg.matrix_rank(full_over_reals) == 3 and gf2_rank(full_over_reals) == 2
    assert gf2_rank(np.eye(5, dtype=np.uint8)) == 5
    assert gf2_rank(np.zeros((3, 4), np.uint8)) == 0
