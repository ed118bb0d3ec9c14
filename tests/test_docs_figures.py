"""Figures the README states that a reader can re-run are the code's, not typed ones that drift
(issue 47: "1,046 Python tests, 9 of them skipped" when 1,056 were collected; "builds the 250-voice
set" when it builds 300). Each test reads the figure from the page and compares it with what the
code or the dataset builder gives; the test counts are simply not typed."""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def stated(pattern: str, text: str = README) -> re.Match[str]:
    """The one place ``pattern`` matches; fails when the sentence is gone or stated twice."""
    found = list(re.finditer(pattern, text))
    assert len(found) == 1, f"{pattern!r}: {len(found)} matches in the README"
    return found[0]


def test_the_deployment_set_is_the_size_the_builder_makes() -> None:
    from uvtrain.data.espeak import synth_voices

    voices = int(stated(r"builds the (\d+)-voice set")[1])
    assert voices == inspect.signature(synth_voices).parameters["speakers"].default


def test_the_training_block_states_the_split_the_builder_makes() -> None:
    from uvtrain.data.base import unknown_count

    figures = stated(
        r"--speakers (\d+) --root data +# espeak-ng voices: (\d+) train, (\d+) never seen"
    )
    speakers, known, unknown = (int(figures[i]) for i in (1, 2, 3))
    assert (known, unknown) == (speakers - unknown_count(speakers), unknown_count(speakers))


@pytest.mark.parametrize(("flag", "size"), [("", "default"), (" --small", "small")])
def test_the_quickstart_sizes_are_the_scripts(flag: str, size: str) -> None:
    spec = importlib.util.spec_from_file_location("quickstart", ROOT / "examples/quickstart.py")
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    figures = stated(
        rf"python examples/quickstart.py --out qs{re.escape(flag)} +# (\d+) speakers, (\d+) rounds"
    )
    speakers, rounds, _ = quickstart.SIZES[size]
    assert (int(figures[1]), int(figures[2])) == (speakers, rounds)


@pytest.mark.parametrize("document", ["README.md", "docs/testing.md"])
def test_no_count_of_tests_is_typed(document: str) -> None:
    """How many tests there are is what pytest prints."""
    text = (ROOT / document).read_text(encoding="utf-8")
    typed = re.findall(r"\b\d[\d,]*\s+(?:Python\s+|JavaScript\s+)?tests\b(?!/)", text)
    assert typed == [], typed
