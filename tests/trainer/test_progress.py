"""One progress display for long work: the plain line (stderr not a terminal), its ETA, when it
is printed, and the tqdm bar on a terminal. Needs no torch."""

from __future__ import annotations

import io

import pytest

from uvtrain.progress import Progress, duration_text, eta_seconds, progress_line


def test_eta_is_the_sessions_rate_times_what_is_left() -> None:
    assert eta_seconds(done=120, total=800, initial=0, elapsed=130.0) == pytest.approx(
        736.667, 1e-3
    )
    # resumed at 100: only the 20 rounds of this session took the 130 s
    assert eta_seconds(done=120, total=800, initial=100, elapsed=130.0) == pytest.approx(4420.0)
    assert eta_seconds(done=100, total=800, initial=100, elapsed=5.0) is None  # no step yet
    assert eta_seconds(done=800, total=800, initial=0, elapsed=60.0) == 0.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.4, "0 s"),
        (42.4, "42 s"),
        (59.6, "1 min 0 s"),
        (130.0, "2 min 10 s"),
        (599.0, "9 min 59 s"),
        (736.667, "12 min"),
        (3599.0, "60 min"),
        (3900.0, "1 h 05 min"),
        (4420.0, "1 h 14 min"),
    ],
)
def test_durations_read_as_a_person_says_them(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_the_plain_line_has_the_percentage_elapsed_time_and_eta() -> None:
    line = progress_line("feduv", "round", 120, 800, 130.0, 736.667, {"loss": "0.4312"})
    assert line == "feduv: round 120/800 (15%), loss 0.4312, 2 min 10 s elapsed, ETA 12 min"
    done = progress_line("synth-voices", "speaker", 300, 300, 93.0, 0.0)
    assert done == "synth-voices: speaker 300/300 (100%), 1 min 33 s elapsed"  # no ETA once done
    first = progress_line("x", "file", 0, 7, 0.0, None)
    assert first == "x: file 0/7 (0%), 0 s elapsed"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_lines_after_the_first_step_then_every_so_often_and_at_the_end() -> None:
    stream, clock = io.StringIO(), Clock()
    bar = Progress("feduv", 10, unit="round", stream=stream, every_seconds=30.0, clock=clock)
    for _ in range(10):
        clock.now += 10.0  # a round takes 10 s
        bar.update(1, {"loss": "0.5000"})
    bar.close()
    assert stream.getvalue().splitlines() == [
        "feduv: round 1/10 (10%), loss 0.5000, 10 s elapsed, ETA 1 min 30 s",
        "feduv: round 4/10 (40%), loss 0.5000, 40 s elapsed, ETA 1 min 0 s",
        "feduv: round 7/10 (70%), loss 0.5000, 1 min 10 s elapsed, ETA 30 s",
        "feduv: round 10/10 (100%), loss 0.5000, 1 min 40 s elapsed",
    ]
    assert "\r" not in stream.getvalue()


def test_a_resumed_count_starts_at_its_initial_step() -> None:
    stream, clock = io.StringIO(), Clock()
    bar = Progress("fedhide", 8, unit="round", initial=6, stream=stream, clock=clock)
    bar.note("fedhide: resumed from round 6")
    clock.now += 4.0
    bar.update()
    assert stream.getvalue().splitlines() == [
        "fedhide: resumed from round 6",
        "fedhide: round 7/8 (87%), 4 s elapsed, ETA 4 s",
    ]


def test_disabled_progress_prints_nothing() -> None:
    stream = io.StringIO()
    with Progress("x", 3, stream=stream, enabled=False) as bar:
        bar.note("resumed from round 1")
        bar.update(3)
    assert stream.getvalue() == ""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_tqdm_bar() -> None:
    pytest.importorskip("tqdm")
    stream = Terminal()
    with Progress("feduv", 4, unit="round", stream=stream) as bar:
        bar.update(1, {"loss": "0.5000"})
        bar.update(3)
    text = stream.getvalue()
    assert "\r" in text and "100%" in text and "4/4" in text and "loss=0.5000" in text
