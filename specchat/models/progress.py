"""Progress reports for long model operations (fetch, extract, derive, download).

Sources call a ``ProgressFn`` with :class:`Progress` records; the CLI renders them as a text bar
on stderr, the app as a progress bar. Rate and ETA are the renderer's business.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


@contextmanager
def watch_folder(folder: Path, task: str, report: ProgressFn, total: float | None = None,
                 every: float = 0.25) -> Iterator[None]:
    """Report the growing size of the files under ``folder`` while the body runs.

    Lets us show byte progress for a child process (pip) that only writes files. The caller
    reports the end (finished or failed): only it knows how the child process ended.
    """
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(every):
            report(Progress(task, folder_bytes(folder), total))

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


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


class TextProgress:
    """Renders progress as one self-overwriting line (a plain line per update when not a TTY)."""

    def __init__(self, stream: TextIO | None = None, min_interval: float = 0.2) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.min_interval = min_interval
        self._started: dict[str, float] = {}
        self._last = 0.0

    def __call__(self, p: Progress) -> None:
        if p.notice:
            self.stream.write(("\r\x1b[2K" if self.tty else "") + "specchat: note: "
                              + safe_text(p.notice) + "\n")
            self.stream.flush()
            return
        now = time.monotonic()
        first_wait = p.unit == WAIT and p.task not in self._started  # said at once, always
        start = self._started.setdefault(p.task, now)
        if p.failed:
            if self.tty and p.task in self._started:
                self.stream.write("\r\x1b[2K" + safe_text(f"{p.task}: failed") + "\n")
                self.stream.flush()
            self._started.pop(p.task, None)
            return
        if not p.finished and not first_wait and now - self._last < self.min_interval:
            return
        if not self.tty and not p.finished and not first_wait and now - self._last < 5:
            return  # logs and pipes get a line every few seconds, not a flood
        self._last = now
        line = safe_text(describe(p, now - start))  # tasks name files: shown, never obeyed
        if self.tty:
            self.stream.write("\r\x1b[2K" + line + ("\n" if p.finished else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        if p.finished:
            self._started.pop(p.task, None)


def describe(p: Progress, elapsed: float) -> str:
    """``task  [#####-----]  41%  40.2 MB / 98.4 MB  12.3 MB/s  ETA 0:05``"""
    if p.unit == WAIT:
        if p.finished:
            return f"{p.task.removesuffix('…')}: over after {format_duration(elapsed)}"
        return f"{p.task}  {format_duration(elapsed)}"
    amount = format_bytes(p.done) if p.unit == "B" else f"{p.done:.0f} {p.unit}"
    rate = p.done / elapsed if elapsed > 0 else 0.0
    rate_s = f"{format_bytes(rate)}/s" if p.unit == "B" else f"{rate:.1f} {p.unit}/s"
    if p.finished:
        return f"{p.task}: done ({amount} in {format_duration(elapsed)})"
    if p.total:
        frac = min(1.0, p.done / p.total)
        bar = "#" * int(frac * 20) + "-" * (20 - int(frac * 20))
        total = format_bytes(p.total) if p.unit == "B" else f"{p.total:.0f} {p.unit}"
        eta = (p.total - p.done) / rate if rate > 0 else 0
        return (f"{p.task}  [{bar}] {frac:4.0%}  {amount} / {total}  {rate_s}  "
                f"ETA {format_duration(eta)}" + (f"  ({p.detail})" if p.detail else ""))
    return (f"{p.task}  {amount}  {rate_s}  {format_duration(elapsed)} elapsed"
            + (f"  ({p.detail})" if p.detail else ""))
