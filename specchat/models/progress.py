"""Progress reports for long operations (fetch, extract, derive, download, load, calibrate,
train heads, prove, bench, race).

Sources call a ``ProgressFn`` with :class:`Progress` records (:class:`Steps` counts a task's
steps); the CLI renders them with :class:`TextProgress` on stderr, the app as a progress bar.
Rate and ETA are the renderer's business.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from specchat.locks import Wait, WaitFn
from specchat.textsafe import safe_text


@dataclass(frozen=True)
class Progress:
    task: str
    done: float = 0.0
    total: float | None = None  # None: size unknown (a spinner, not a bar)
    unit: str = "B"
    finished: bool = False
    failed: bool = False  # the task stopped without finishing (an error follows)
    detail: str = ""  # where inside the task it is, e.g. "part 3/22: pkg-part3==0.2.0"
    note: str = ""  # a line about the whole task, shown apart (the memory a load will take)
    notice: str = ""  # a one-off line for the user (a broken file moved aside), shown once


WAIT = "wait"  # the unit of a wait for another specchat (its time is all there is to show)


ProgressFn = Callable[[Progress], None]


def no_progress(_: Progress) -> None:
    pass


def waits(report: ProgressFn) -> WaitFn:
    """A lock's wait (:func:`specchat.locks.held`) as progress: a task named by the wait."""
    def on_wait(w: Wait) -> None:
        report(Progress(w.message, w.waited_s, None, unit=WAIT, finished=w.over))

    return on_wait


def notice(report: ProgressFn, text: str) -> None:
    report(Progress("", finished=True, notice=text))  # finished: never replaced by a later one


def folder_bytes(folder: Path) -> int:
    n = 0
    try:
        for p in folder.rglob("*"):
            try:
                if p.is_file():
                    n += p.stat().st_size
            except OSError:
                pass
    except OSError:
        pass
    return n


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def format_duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}:{seconds % 60:02d}"


# Off a terminal (a log, a pipe, CI) a task with a known total writes a line each time another
# STEP_PERCENT of it is done, and at most HEARTBEAT_S apart while its records still come (a slow step
# shows the run is alive); one of unknown size writes a line every UNSIZED_S.
STEP_PERCENT = 5
HEARTBEAT_S = 60.0
UNSIZED_S = 5.0


class TextProgress:
    """Renders progress on a terminal as one self-overwriting line (a bar, the rate and the
    ETA), elsewhere as a plain line per few percent; :meth:`say` writes a line of its own
    without breaking the bar. The commands' one renderer (fetch, load, calibrate, train-heads,
    prove, bench, race)."""

    def __init__(self, stream: TextIO | None = None, min_interval: float = 0.2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.min_interval = min_interval
        self.clock = clock
        self._started: dict[str, float] = {}
        self._step: dict[str, int] = {}  # off a terminal: the last step written, per task
        self._written: dict[str, float] = {}  # off a terminal: when its last line was
        self._last = 0.0
        self._bar = ""  # on a terminal: the bar now shown, redrawn under a said line

    def __call__(self, p: Progress) -> None:
        if p.notice:
            self.say("specchat: note: " + p.notice)
            return
        now = self.clock()
        first = p.task not in self._started  # a task's start is shown at once, as it begins
        start = self._started.setdefault(p.task, now)
        if p.failed:
            if self.tty and self._bar:
                self._write("\r\x1b[2K" + safe_text(f"{p.task}: failed") + "\n")
                self._bar = ""
            self._forget(p.task)
            return
        due = self._due(p, now)  # (always asked: it keeps the steps written)
        if not (p.finished or first or due):
            return
        self._last = now
        line = safe_text(describe(p, now - start))  # tasks name files: shown, never obeyed
        if self.tty:
            # One screen line: a wrapped one would leave its start behind at each redraw.
            line = line[:max(20, shutil.get_terminal_size().columns - 1)]
            self._write("\r\x1b[2K" + line + ("\n" if p.finished else ""))
            self._bar = "" if p.finished else line
        else:
            self._written[p.task] = now
            self._write(line + "\n")
        if p.finished:
            self._forget(p.task)

    def say(self, line: str) -> None:
        """A line of its own (a finished run's figures), above the bar on a terminal."""
        text = safe_text(line)
        if self.tty and self._bar:
            self._write("\r\x1b[2K" + text + "\n" + self._bar)
        else:
            self._write(text + "\n")

    def _due(self, p: Progress, now: float) -> bool:
        if self.tty:
            return now - self._last >= self.min_interval
        if not p.total:
            return now - self._written.get(p.task, -UNSIZED_S) >= UNSIZED_S
        # In whole percents first: 15 / 5 is 3 where 0.15 / 0.05 is 2.9999999999999996.
        step = math.floor(100 * min(1.0, max(0.0, p.done / p.total)) + 1e-9) // STEP_PERCENT
        if step > self._step.get(p.task, -1):
            self._step[p.task] = step
            return True
        return now - self._written.get(p.task, now) >= HEARTBEAT_S

    def _forget(self, task: str) -> None:
        for d in (self._started, self._step, self._written):
            d.pop(task, None)

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


class Steps:
    """A task counted in steps (samples, runs, tokens) for a :data:`ProgressFn`: its start
    (which starts the renderer's clock), each step, and its end; as a context manager, a task
    left by an exception ends as failed."""

    def __init__(self, task: str, total: float, report: ProgressFn, unit: str = "steps") -> None:
        self.task, self.total, self.report, self.unit = task, total, report, unit
        self.done = 0.0
        report(Progress(task, 0, total, unit=unit))

    def add(self, n: float = 1, detail: str = "") -> None:
        self.done += n
        self.report(Progress(self.task, self.done, self.total, unit=self.unit, detail=detail))

    def at(self, done: float, detail: str = "") -> None:
        self.done = done
        self.report(Progress(self.task, done, self.total, unit=self.unit, detail=detail))

    def finish(self) -> None:
        self.report(Progress(self.task, self.done, self.total, unit=self.unit, finished=True))

    def fail(self) -> None:
        self.report(Progress(self.task, self.done, self.total, unit=self.unit, failed=True))

    def __enter__(self) -> Steps:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.finish()
        else:
            self.fail()


def describe(p: Progress, elapsed: float) -> str:
    """``task  [#####-----]  41%  40.2 MB / 98.4 MB  12.3 MB/s  ETA 0:05``"""
    if p.unit == WAIT:
        if p.finished:
            return f"{p.task.removesuffix('…')}: over after {format_duration(elapsed)}"
        return f"{p.task}  {format_duration(elapsed)}"
    size = p.unit == "B"
    amount = format_bytes(p.done) if size else f"{_count(p.done)} {p.unit}"
    rate = p.done / elapsed if elapsed > 0 else 0.0
    if rate <= 0 or p.unit == "s":  # nothing yet; or a time budget, one second a second
        rate_s = ""
    elif size:
        rate_s = f"{format_bytes(rate)}/s"
    else:  # a slow unit (a bench run) reads better as seconds each
        rate_s = f"{rate:.1f} {p.unit}/s" if rate >= 1 else f"{1 / rate:.1f} s each"
    if p.finished:
        return f"{p.task}: done ({amount} in {format_duration(elapsed)})"
    detail = f"  ({p.detail})" if p.detail else ""
    if p.total:
        frac = min(1.0, p.done / p.total)
        bar = "#" * int(frac * 20) + "-" * (20 - int(frac * 20))
        of = f"{format_bytes(p.done)} / {format_bytes(p.total)}" if size else \
            f"{_count(p.done)}/{_count(p.total)} {p.unit}"
        # No ETA before anything is done: a rate of nothing says nothing.
        eta = f"  ETA {format_duration((p.total - p.done) / rate)}" if rate > 0 else ""
        return f"{p.task}  [{bar}] {frac:4.0%}  {of}" + (f"  {rate_s}" if rate_s else "") + \
            eta + detail
    return (f"{p.task}  {amount}" + (f"  {rate_s}" if rate_s else "")
            + f"  {format_duration(elapsed)} elapsed" + detail)


def _count(x: float) -> str:
    """A count as a whole number, or to a tenth when it is not one (half a run: 0.5)."""
    return f"{x:.0f}" if abs(x - round(x)) < 0.05 else f"{x:.1f}"
