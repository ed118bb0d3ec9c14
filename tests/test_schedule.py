"""The order pytest-xdist hands the test files to its workers in (tests/conftest.py): the
slowest files first, so that no worker is left alone with one at the end."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SLOWEST_FILES, pytest_report_header, scheduling_order

ROOT = Path(__file__).resolve().parents[1]


def test_every_listed_slow_file_exists() -> None:
    """A renamed or split file must be renamed here too, or it would silently run last."""
    assert len(set(SLOWEST_FILES)) == len(SLOWEST_FILES)
    for name in SLOWEST_FILES:
        assert (ROOT / name).is_file(), name


def test_slow_files_come_first_then_the_most_tests_each_file_in_its_order() -> None:
    slow, slower = SLOWEST_FILES[1], SLOWEST_FILES[0]
    items = [
        ("tests/a.py", 1),
        (slow, 1),
        ("tests/b.py", 1),
        ("tests/b.py", 2),
        (slower, 1),
        (slow, 2),
        ("tests/c.py", 1),
    ]
    ordered = scheduling_order(items, lambda item: item[0])
    assert ordered == [
        (slower, 1),
        (slow, 1),
        (slow, 2),
        ("tests/b.py", 1),
        ("tests/b.py", 2),
        ("tests/a.py", 1),
        ("tests/c.py", 1),
    ]


def test_the_header_says_why_the_first_results_take_minutes() -> None:
    """Printed before collection, which shows nothing for about a minute (issue 47)."""
    (line,) = pytest_report_header(None)
    assert SLOWEST_FILES[0] in line and "-m 'not slow'" in line and "docs/testing.md" in line
