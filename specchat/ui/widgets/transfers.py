"""Progress bars for long model operations (downloads, quantization, calibration), one per task.

Fed with :class:`~specchat.models.progress.Progress` records on the UI thread; shows bytes,
rate and ETA for downloads, steps for the rest, and says when a task failed or finished.
"""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import ProgressBar, Static

from specchat.models.progress import WAIT, Progress, describe, format_bytes, format_duration


def label_for(p: Progress, elapsed: float) -> str:
    """``download x.gguf · 40.2 MB of 98.4 MB · 12.3 MB/s · 0:05 left`` (the bar shows the %)."""
    if p.finished:
        return describe(p, elapsed)
    if p.unit == WAIT:  # a wait for another specchat: only its time to show
        return f"{p.task} · {format_duration(elapsed)}"
    if p.unit == "%":  # the bar shows it; no rate or ETA (a paused task's time would count)
        return " · ".join(x for x in (p.task, p.detail) if x)
    rate = p.done / elapsed if elapsed > 0 else 0.0
    if p.unit == "B":
        amount = format_bytes(p.done) + (f" of {format_bytes(p.total)}" if p.total else "")
        speed = f"{format_bytes(rate)}/s"
    else:
        amount = f"{p.done:.0f}" + (f" of {p.total:.0f}" if p.total else "") + f" {p.unit}"
        speed = f"{rate:.1f} {p.unit}/s"
    parts = [p.task, amount]
    if elapsed > 1 and rate > 0:
        parts.append(speed)
        if p.total:
            parts.append(f"{format_duration((p.total - p.done) / rate)} left")
    if p.detail:
        parts.append(p.detail)
    return " · ".join(parts)


class TransferRow(Vertical):
    DEFAULT_CSS = """
    TransferRow { height: auto; margin-bottom: 1; }
    TransferRow .transfer-label { color: $text-muted; }
    TransferRow.-failed .transfer-label { color: $error; }
    TransferRow.-done .transfer-label { color: $success; }
    """

    def __init__(self, task: str) -> None:
        super().__init__()
        self.task_name = task
        self.started = time.monotonic()
        self.bar = ProgressBar(show_eta=False, show_percentage=True)
        self.label = Static(task, classes="transfer-label", markup=False)

    def compose(self) -> ComposeResult:
        yield self.bar
        yield self.label

    def show(self, p: Progress) -> None:
        bar, label = self.bar, self.label
        if p.failed:
            self.add_class("-failed")
            label.update(f"{p.task}: stopped")
            return
        if p.total:
            bar.update(total=p.total, progress=min(p.done, p.total))
        if p.finished:
            self.add_class("-done")
            bar.update(total=max(p.done, 1), progress=max(p.done, 1))
        label.update(label_for(p, time.monotonic() - self.started))


class TransferList(Widget):
    """One :class:`TransferRow` per task name, in order of appearance."""

    DEFAULT_CSS = "TransferList { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: dict[str, TransferRow] = {}

    def compose(self) -> ComposeResult:
        yield from ()

    def show(self, p: Progress) -> None:
        if p.notice:  # a one-off line (a broken file moved aside): shown as it is, no bar
            self.mount(Static(p.notice, classes="transfer-notice", markup=False))
            return
        row = self.rows.get(p.task)
        if row is None:
            row = self.rows[p.task] = TransferRow(p.task)
            self.mount(row)
        row.show(p)

    def clear(self) -> None:
        for row in self.rows.values():
            row.remove()
        self.rows.clear()
