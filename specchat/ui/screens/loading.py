"""Shown while models are fetched, derived and loaded: one progress bar per step, fed by the
resolver's ``Progress`` records (through the loading worker), and a screen for when it fails.
"""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Center, Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, ProgressBar, Static

from specchat.loading import LOAD_TASK
from specchat.models.progress import WAIT, Progress, format_bytes, format_duration

LOADING_TASK = LOAD_TASK  # the runtime reports it: a percentage of the weights, the memory


def progress_detail(p: Progress, elapsed: float) -> str:
    """``40.2 MB / 98.4 MB · 12.3 MB/s · 0:05 left`` (the bar and the task are shown apart)."""

    def amount(v: float) -> str:
        return format_bytes(v) if p.unit == "B" else f"{v:.0f} {p.unit}"

    if p.unit == WAIT:
        return f"{format_duration(elapsed)} so far"
    rate = p.done / elapsed if elapsed > 0 else 0.0
    parts = [amount(p.done) + (f" / {amount(p.total)}" if p.total else "")]
    if rate > 0:
        parts.append(f"{amount(rate)}/s")
    if p.finished:
        parts.append(f"done in {format_duration(elapsed)}")
    elif p.total and rate > 0:
        parts.append(f"{format_duration((p.total - p.done) / rate)} left")
    else:
        parts.append(f"{format_duration(elapsed)} so far")
    if p.detail and not p.finished:
        parts.append(p.detail)
    return " · ".join(parts)


class LoadingScreen(Screen[None]):
    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label
        self._started: dict[str, float] = {}

    def compose(self) -> ComposeResult:
        with Center(), Vertical(id="loading-box"):
            yield Static(Text.assemble("Opening ", (self.label, "bold")), id="loading-title")
            yield Static("Checking the model files…", id="loading-task")
            yield ProgressBar(total=None, show_eta=False, id="loading-bar")
            yield Static("", id="loading-detail")
            yield Static("", id="loading-memory")
            yield Static("Models missing on disk are fetched and prepared once; later starts "
                         "take seconds.  Ctrl+Q quits.", id="loading-hint")

    def show_progress(self, p: Progress) -> None:
        if p.notice:  # a one-off line (a broken file moved aside): in place of the hint
            self.query_one("#loading-hint", Static).update(Text(p.notice))
            return
        now = time.monotonic()
        start = self._started.setdefault(p.task, now)
        bar = self.query_one(ProgressBar)
        self.query_one("#loading-task", Static).update(Text(p.task))
        if p.total:
            bar.update(total=p.total, progress=min(p.done, p.total))
        else:
            bar.update(total=None)
        self.query_one("#loading-detail", Static).update(progress_detail(p, now - start))
        if p.note:
            self.query_one("#loading-memory", Static).update(Text(f"Memory: {p.note}"))
        if p.finished:
            self._started.pop(p.task, None)

    def show_loading(self, p: Progress | None = None) -> None:
        """The models being loaded: a spinner until the memory plan is made, then the share
        of the weights loaded (the bar's percentage) and the memory they will take."""
        if p is not None and p.total:
            self.show_progress(p)
            return
        self.query_one("#loading-task", Static).update(LOADING_TASK + "…")
        self.query_one(ProgressBar).update(total=None)
        self.query_one("#loading-detail", Static).update("")


class LoadFailedScreen(Screen[str]):
    """The models could not be opened: say why, offer a retry. Dismisses with retry|quit."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "retry", "Retry"), Binding("q,escape", "quit_app", "Quit")]

    def __init__(self, label: str, message: str) -> None:
        super().__init__()
        self.label = label
        self.message = message

    def compose(self) -> ComposeResult:
        with Center(), Vertical(id="failed-box"):
            yield Static(Text.assemble("Could not open ", (self.label, "bold")),
                         id="failed-title")
            yield Static(self.message, id="failed-message", markup=False)
            yield Static("A first start fetches models: it needs the network. A damaged model "
                         "file: remove it with `specchat models rm ID`, then retry. "
                         "`specchat doctor` checks the installation.", id="failed-hint")
            with Horizontal(id="failed-buttons"):
                yield Button("Retry (r)", id="retry", variant="primary")
                yield Button("Quit (q)", id="quit", variant="error")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss("retry" if event.button.id == "retry" else "quit")

    def action_retry(self) -> None:
        self.dismiss("retry")

    def action_quit_app(self) -> None:
        self.dismiss("quit")
