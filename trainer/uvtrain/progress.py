"""Progress of long work (training rounds, dataset synthesis, the audit's loops), one way for all.

On a terminal it is a tqdm bar (percentage, rate, ETA). Elsewhere (a log file, CI, a pipe) a bar
would fill the log with carriage returns, so it is a plain line on stderr after the first step,
then at most every :data:`LINE_SECONDS`, and at the last step::

    feduv: round 120/800 (15%), loss 0.4312, 2 min 10 s elapsed, ETA 12 min

The line and the ETA are pure functions (:func:`progress_line`, :func:`eta_seconds`,
:func:`duration_text`); :class:`Progress` decides when to print them. Nothing heavy is imported:
tqdm only when a bar is shown.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

#: Seconds between two progress lines when stderr is not a terminal.
LINE_SECONDS = 30.0


def eta_seconds(done: int, total: int, initial: int, elapsed: float) -> float | None:
    """Seconds left at the rate of this session: ``elapsed`` over the ``done - initial`` steps
    taken since it started at ``initial`` (a resumed run's earlier rounds took no time here);
    ``None`` before the first step."""
    taken = done - initial
    if taken <= 0:
        return None
    return max(0, total - done) * elapsed / taken


def duration_text(seconds: float) -> str:
    """``"42 s"``, ``"2 min 10 s"`` (under 10 min), ``"12 min"``, ``"1 h 05 min"``."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, rest = divmod(whole, 60)
    if minutes < 10:
        return f"{minutes} min {rest} s"
    if minutes < 60:
        return f"{round(whole / 60)} min"
    hours, minutes = divmod(round(whole / 60), 60)
    return f"{hours} h {minutes:02d} min"


def progress_line(
    label: str,
    unit: str,
    done: int,
    total: int,
    elapsed: float,
    eta: float | None,
    figures: Mapping[str, str] | None = None,
) -> str:
    """``"LABEL: UNIT DONE/TOTAL (P%), FIGURE VALUE, ..., T elapsed, ETA T"``: the line printed
    when stderr is not a terminal (no ETA once done, or before the first step)."""
    percent = 100 * done // total if total > 0 else 100
    parts = [f"{label}: {unit} {done}/{total} ({percent}%)"]
    parts += [f"{name} {value}" for name, value in (figures or {}).items()]
    parts.append(f"{duration_text(elapsed)} elapsed")
    if eta is not None and done < total:
        parts.append(f"ETA {duration_text(eta)}")
    return ", ".join(parts)


class Progress:
    """``total`` steps of ``unit`` (``"round"``, ``"speaker"``, ``"file"``), from ``initial``
    (a resumed run's round): a tqdm bar when ``stream`` is a terminal, else the lines of
    :func:`progress_line`; nothing when ``enabled`` is false. A context manager; ``clock`` is
    :func:`time.monotonic` (a test passes its own); ``transient``: the bar is cleared when
    closed (a step inside a longer job)."""

    def __init__(
        self,
        label: str,
        total: int,
        *,
        unit: str = "step",
        initial: int = 0,
        enabled: bool = True,
        stream: TextIO | None = None,
        every_seconds: float = LINE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        transient: bool = False,
    ) -> None:
        self.label, self.total, self.unit, self.initial = label, total, unit, initial
        self.done = initial
        self.enabled = enabled
        self.stream = sys.stderr if stream is None else stream
        self.every_seconds, self.clock = every_seconds, clock
        self.started = clock()
        self.last_line: float | None = None
        self.bar: Any = None
        if enabled and _is_terminal(self.stream):
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=total,
                initial=initial,
                desc=label,
                unit=unit,
                file=self.stream,
                leave=not transient,
            )

    def update(self, count: int = 1, figures: Mapping[str, str] | None = None) -> None:
        """``count`` more steps done; ``figures`` (``{"loss": "0.4312"}``) shown beside."""
        self.done += count
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(count)
            if figures:
                self.bar.set_postfix(dict(figures))
            return
        now = self.clock()
        due = self.last_line is None or now - self.last_line >= self.every_seconds
        if due or self.done >= self.total:
            self.last_line = now
            elapsed = now - self.started
            eta = eta_seconds(self.done, self.total, self.initial, elapsed)
            line = progress_line(
                self.label, self.unit, self.done, self.total, elapsed, eta, figures
            )
            print(line, file=self.stream, flush=True)

    def note(self, text: str) -> None:
        """One line of its own (``resumed from round 40``), beside the bar or the lines."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
