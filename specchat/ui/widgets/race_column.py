"""One side of the race: a title, the reply streaming in token-fate colours, and its live
figures (decode tokens/s, time to first token, elapsed), driven by the replay's events."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from specchat.engine.decode.events import Event, GenerationStats, TokenEvent
from specchat.engine.decode.stats import decode_rate
from specchat.store.fates import FateFold, FateTrace
from specchat.textsafe import safe_text
from specchat.ui.widgets.fate_text import FateText


class _Replayed(FateFold):
    """A side's events as the replay shows them, each at the time it falls due."""

    def __init__(self) -> None:
        super().__init__()
        self.due_t = 0.0  # the replay's time of the events being added
        self.ttft: float | None = None
        self.last_token_at: float | None = None
        self.finished_at: float | None = None

    def on_token(self, ev: TokenEvent) -> None:
        super().on_token(ev)
        if self.ttft is None:
            self.ttft = self.due_t
        self.last_token_at = self.due_t

    def on_stats(self, ev: GenerationStats) -> None:
        super().on_stats(ev)
        self.finished_at = self.due_t


class RaceColumn(Vertical):
    def __init__(self, title: str, show_rejected: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.title_text = title
        self.show_rejected = show_rejected
        self.reset_state()

    def reset_state(self) -> None:
        self.replayed = _Replayed()

    @property
    def trace(self) -> FateTrace:
        return self.replayed.trace

    @property
    def tokens(self) -> int:
        return self.replayed.tokens

    @property
    def ttft(self) -> float | None:
        return self.replayed.ttft

    @property
    def finished_at(self) -> float | None:
        return self.replayed.finished_at

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
        self.replayed.due_t = due_t
        for ev in events:
            self.replayed.add(ev)
        segments = self.replayed.take_shown()
        if segments and self.fate_text.append(segments):
            self.query_one(VerticalScroll).scroll_end(animate=False)

    def tick(self, now: float) -> None:
        self.query_one(".race-figures", Static).update(self.figures(now))

    def figures(self, now: float) -> Text:
        """Decode tokens/s (the tokens after the first, from the first token to the latest, or
        to ``now`` while the side still runs), the tokens, the time to first token, elapsed."""
        r = self.replayed
        elapsed = r.finished_at if r.finished_at is not None else now
        end = r.last_token_at if r.finished_at is not None else now
        tps = decode_rate(r.tokens, end - r.ttft) if r.ttft is not None and end is not None \
            else 0.0
        ttft = "–" if r.ttft is None else f"{r.ttft * 1000:.0f} ms"
        out = Text()
        out.append(f"{tps:.1f} tok/s", "bold")
        out.append(f" decode · {r.tokens} tokens · TTFT {ttft} · {elapsed:.2f} s")
        if r.finished_at is not None:
            out.append(" ✓", "bold")
        return out

    def set_show_rejected(self, show: bool) -> None:
        self.show_rejected = show
        self.fate_text.rebuild(self.trace.segments, show)
