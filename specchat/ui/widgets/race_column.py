"""One side of the race: a title, the reply streaming in token-fate colours, and its live
figures (tokens/s, time to first token, elapsed), driven by the replay's events."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from specchat.engine.decode.events import Event, GenerationStats, RejectedEvent, StepEvent, TokenEvent
from specchat.store import FateTrace
from specchat.textsafe import safe_text
from specchat.ui.widgets.fate_text import FateText


class RaceColumn(Vertical):
    def __init__(self, title: str, show_rejected: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.title_text = title
        self.show_rejected = show_rejected
        self.reset_state()

    def reset_state(self) -> None:
        self.trace = FateTrace()
        self.tokens = 0
        self.steps = 0
        self.ttft: float | None = None
        self.finished_at: float | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text(safe_text(self.title_text)), classes="race-title")
        with VerticalScroll(classes="race-text"):
            yield FateText([], self.show_rejected)
        yield Static(self.figures(0.0), classes="race-figures")

    @property
    def fate_text(self) -> FateText:
        return self.query_one(FateText)

    def set_title(self, title: str) -> None:
        self.title_text = title
        self.query_one(".race-title", Static).update(Text(safe_text(title)))

    def reset(self) -> None:
        self.reset_state()
        self.fate_text.rebuild([], self.show_rejected)
        self.query_one(".race-figures", Static).update(self.figures(0.0))

    def add(self, due_t: float, events: Iterable[Event]) -> None:
        """Show the events that fell due at ``due_t`` (seconds into the replay)."""
        segments = []
        for ev in events:
            if isinstance(ev, TokenEvent):
                self.tokens += 1
                if self.ttft is None:
                    self.ttft = due_t
                segments += self.trace.add_token(ev)
            elif isinstance(ev, RejectedEvent):
                segments += self.trace.add_rejected(ev)
            elif isinstance(ev, StepEvent):
                self.steps += 1
            elif isinstance(ev, GenerationStats):
                segments += self.trace.finish()
                self.finished_at = due_t
        if segments and self.fate_text.append(segments):
            self.query_one(VerticalScroll).scroll_end(animate=False)

    def tick(self, now: float) -> None:
        self.query_one(".race-figures", Static).update(self.figures(now))

    def figures(self, now: float) -> Text:
        elapsed = self.finished_at if self.finished_at is not None else now
        tps = self.tokens / elapsed if elapsed > 0 else 0.0
        ttft = "–" if self.ttft is None else f"{self.ttft * 1000:.0f} ms"
        out = Text()
        out.append(f"{tps:.1f} tok/s", "bold")
        out.append(f" · {self.tokens} tokens · TTFT {ttft} · {elapsed:.2f} s")
        if self.finished_at is not None:
            out.append(" ✓", "bold")
        return out

    def set_show_rejected(self, show: bool) -> None:
        self.show_rejected = show
        self.fate_text.rebuild(self.trace.segments, show)
