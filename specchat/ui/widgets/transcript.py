"""The scrolling transcript: user messages and assistant replies.

A reply streams in as token-fate text (see fate_text.py: only its last block is redrawn).
When it is complete it can be shown as Markdown instead; the Markdown widget is built once, from
the final text, the first time it is needed. The widgets read their :class:`Turn` and draw the
segments they are given; only the chat session changes a turn.

A message with alternatives (a regenerated reply, an edited message) shows which one it is,
``‹ 2/3 ›``, in its header; a click on the arrows asks the screen to flip
(:class:`Transcript.Clicked`, step -1 or +1), a click elsewhere on a message selects it
(step 0). The selected message (the screen's message cursor) carries the ``-selected`` class.

The view (Markdown or tokens) and whether rejected drafts show are reactives, bound to the chat
screen's; the reply being written is ``reply`` (from :meth:`Transcript.add_reply` to
:meth:`Transcript.end_reply`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Markdown, Static

from specchat.engine.decode.events import GenerationStats
from specchat.session.conversation import Turn
from specchat.store.fates import Segment
from specchat.store.stats import ReplyStats
from specchat.store.tool_parts import CallRecord
from specchat.textsafe import safe_text
from specchat.tools.files import size_text, split_files
from specchat.ui.widgets.fate_text import FateText
from specchat.ui.widgets.tool_card import ToolCard

VIEWS = ("markdown", "tokens")
Position = tuple[int, int]  # (which alternative, of how many), from 1


def counter(header: Text, position: Position) -> tuple[int, int] | None:
    """Append ``  ‹ 2/3 ›`` to a header when there are alternatives; returns the columns the
    counter spans (a click left of its middle flips back, right of it forward)."""
    which, of = position
    if of < 2:
        return None
    header.append("  ")
    start = header.cell_len
    header.append(f"‹ {which}/{of} ›", style="bold")
    return start, header.cell_len


def clicked_step(span: tuple[int, int] | None, x: int) -> int:
    if span is None or not span[0] <= x < span[1]:
        return 0
    return -1 if x < (span[0] + span[1]) // 2 else 1


def keep_line_breaks() -> MarkdownIt:
    """Markdown where a single line break stays one: a model writes a poem, an address or a
    list without bullets line by line, and CommonMark would join those lines into one."""
    md = MarkdownIt("gfm-like")

    def hard_breaks(state: StateCore) -> None:
        for token in state.tokens:
            for child in token.children or ():
                if child.type == "softbreak":
                    child.type = "hardbreak"

    md.core.ruler.push("keep_line_breaks", hard_breaks)
    return md


def reply_summary(stats: ReplyStats | None, status: str) -> str:
    """``128 tokens · 54.2 tok/s decode · α 0.72 · τ 2.81 · acc.len 2.95 · stopped by you``
    (decode: the first token, which waits for the prompt, left out; the acceptance length is
    1 + accepted / steps, as vLLM reports it)."""
    s = stats.generation if stats else GenerationStats()
    parts = []
    if s.generated_tokens:
        parts.append(f"{s.generated_tokens} tokens")
    if s.decode_tps:
        parts.append(f"{s.decode_tps:.1f} tok/s decode")
    if s.alpha is not None:
        parts.append(f"α {s.alpha:.2f}")
    if s.tau is not None and s.steps:
        parts.append(f"τ {s.tau:.2f}")
    if s.acceptance_length is not None:
        parts.append(f"acc.len {s.acceptance_length:.2f}")
    reason = s.stop_reason
    if status == "cancelled":
        parts.append("stopped by you")
    elif status == "error":
        parts.append("failed")
    elif status == "interrupted":
        parts.append("interrupted: specchat was closed while it was written")
    elif reason == "length":
        parts.append("max tokens reached")
    elif reason == "context":
        parts.append("context full")
    return " · ".join(parts)


class UserMessage(Static):
    def __init__(self, turn: Turn, position: Position = (1, 1)) -> None:
        body = Text("You", style="bold")
        self._span = counter(body, position)
        body.append("\n")
        # The files the message carries (attached, see tools.files.with_files) as one line
        # each, not their whole text: the chat keeps, exports and sends the whole text.
        files, words = split_files(turn.text)
        for path, text in files:
            lines = text.count("\n")
            body.append(f"▣ {safe_text(path)}", "bold")
            body.append(f" · {lines} line{'s' if lines != 1 else ''} · "
                        f"{size_text(len(text.encode('utf-8')))}\n", "dim")
        body.append(safe_text(words if files else turn.text))
        super().__init__(body, classes="message user")
        self.turn = turn
        self.position = position

    def on_click(self, event: events.Click) -> None:
        at = event.get_content_offset(self)
        step = clicked_step(self._span, at.x) if at is not None and at.y == 0 else 0
        self.post_message(Transcript.Clicked(self.turn, step))


class AssistantMessage(Vertical):
    """One reply: a header, the token-fate view, the Markdown view, and a summary line."""

    def __init__(self, turn: Turn, *, streaming: bool, view: str, show_rejected: bool,
                 position: Position = (1, 1)) -> None:
        super().__init__(classes="message assistant")
        self.turn = turn  # read only
        self.position = position
        self._span: tuple[int, int] | None = None
        self.streaming = streaming
        self.view = view
        self.show_rejected = show_rejected
        self._kinds = {seg.kind for seg in turn.trace.segments}
        self._status = turn.status
        self._stats = turn.stats
        self._fates = FateText(turn.trace.segments, show_rejected, classes="fates")
        self._header = Static(self._header_text(), classes="who")
        self._meta = Static(self._meta_text(), classes="meta")
        self._markdown: Markdown | None = None

    def compose(self) -> ComposeResult:
        yield self._header
        yield self._fates
        yield self._meta

    def on_mount(self) -> None:
        self._apply_view()

    # --- what the header and summary say ---------------------------------------------------

    def _header_text(self) -> Text:
        # What ran: a reply whose every step was plain (γ 0) is plain, whatever the decoder.
        drafted = self._stats.generation.drafted if self._stats else 0
        speculative = bool(self._kinds & {"a", "c", "b", "x"}) or bool(drafted)
        mode = "speculative" if speculative else "plain"
        out = Text("Assistant", style="bold")
        if self._kinds or not self.streaming:  # known once tokens arrive
            out.append(f"  {mode}", style="dim")
        self._span = counter(out, self.position)
        if self.streaming:
            out.append("  generating… (Esc stops)", style="dim italic")
        return out

    def on_click(self, event: events.Click) -> None:
        at = event.get_content_offset(self._header)
        step = clicked_step(self._span, at.x) if at is not None and at.y == 0 else 0
        self.post_message(Transcript.Clicked(self.turn, step))

    def _meta_text(self) -> str:
        return "" if self.streaming else reply_summary(self._stats, self._status)

    # --- streaming --------------------------------------------------------------------------

    def append(self, segments: Iterable[Segment]) -> bool:
        """Add streamed text; return whether the message got taller."""
        segments = list(segments)
        first = not self._kinds
        self._kinds |= {seg.kind for seg in segments}
        taller = self._fates.append(segments)
        if first:
            self._header.update(self._header_text())
        return taller

    def finish(self, status: str, stats: ReplyStats | None) -> None:
        self.streaming = False
        self._status, self._stats = status, stats
        self._header.update(self._header_text())
        self._meta.update(self._meta_text())
        self._apply_view()

    # --- views ------------------------------------------------------------------------------

    def set_view(self, view: str, show_rejected: bool) -> None:
        if show_rejected != self.show_rejected:
            self.show_rejected = show_rejected
            self._fates.rebuild(self.turn.trace.segments, show_rejected)
        self.view = view
        self._apply_view()

    def _apply_view(self, tries: int = 20) -> None:
        # A reply that called tools shows its words here (its calls are cards below it; the
        # token view shows the call as the model wrote it, fates and all).
        said = self.turn.said
        markdown = self.view == "markdown" and not self.streaming and bool(said)
        if markdown and self._markdown is None and self._fates.parent is None:
            # A reply that ended before its parts were mounted (a short one after a tool's
            # result, on a busy machine): the Markdown goes after them once they are.
            if tries > 0:
                self.call_after_refresh(self._apply_view, tries - 1)
            return
        if markdown and self._markdown is None:
            self._markdown = Markdown(safe_text(said), classes="markdown",
                                      parser_factory=keep_line_breaks)
            self.mount(self._markdown, after=self._fates)
        if self._markdown is not None:
            self._markdown.display = markdown
        self._fates.display = not markdown and not (
            self.view == "markdown" and not self.streaming and self.turn.calls and not said)
        self._meta.display = bool(self._meta_text())


class Transcript(VerticalScroll):
    """The conversation; it follows new text while the user is at the bottom (after a resize
    or a change of view too), and stays put when they have scrolled up to read."""

    DEFAULT_CSS = """
    Transcript { height: 1fr; padding: 0 1; }
    Transcript .message { height: auto; margin: 1 0 0 0; }
    Transcript .message.user { padding: 0 1; background: $boost; border-left: thick $accent; }
    Transcript .message.assistant { padding: 0 1; border-left: thick $success 50%; }
    /* not in the chat database yet: the top bar says so */
    Transcript .message.-unsaved { border-left: thick $error; }
    /* the message a search opened the chat at */
    Transcript .message.-found { background: $warning 15%; }
    /* the message cursor (Ctrl+Up / Ctrl+Down): what F4, Ctrl+G, Alt+←/→ act on */
    Transcript .message.-selected { background: $accent 25%; outline-left: thick $foreground; }
    Transcript .message.assistant .fates { height: auto; }
    Transcript .message.assistant .markdown { height: auto; margin: 0; padding: 0; }
    Transcript .message.assistant .meta { height: auto; color: $text-muted; }
    """

    @dataclass
    class Clicked(Message):
        """A message was clicked: ``step`` -1 / +1 on its ‹ › counter, else 0 (select it)."""

        turn: Turn
        step: int

    view = reactive("markdown", init=False)  # of finished replies: "markdown" or "tokens"
    show_rejected = reactive(False, init=False)  # struck-out drafts (in the token view)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.position: Callable[[Turn], Position] = lambda _turn: (1, 1)
        self.following = True  # the view keeps to the end as text comes (see watch_scroll_y)
        self.reply: AssistantMessage | None = None  # the reply being written

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        # Where the user (or scroll_end) put the view: at the end it follows the text, above
        # it it stays put. A layout change (new text, a resize, Ctrl+T) moves no scroll
        # position, so it never turns following off.
        self.following = new_value >= self.max_scroll_y

    def on_mount(self) -> None:
        # Every layout pass, whatever changed the height (new text, a resize, Ctrl+T, Markdown
        # sizing itself late): a pass started by a scroll updates the size without a watcher
        # or a Resize, so following each size change alone left the view short of the end on
        # a busy machine.
        self.screen.screen_layout_refresh_signal.subscribe(self, self._hold_end)

    def _hold_end(self, _screen: object) -> None:
        if self.following and self.scroll_y < self.max_scroll_y:
            self.scroll_end(animate=False, immediate=True)  # the layout is current: no waiting

    def _follow(self, at_bottom: bool) -> None:
        if at_bottom or self.following:
            self.scroll_end(animate=False)  # after the next layout, when the new size is known

    def show_turns(self, turns: Iterable[Turn]) -> None:
        self.remove_children()
        shown = list(turns)
        answered = {t.tool.call_id for t in shown if t.role == "tool" and t.tool is not None}
        widgets: list[Static | AssistantMessage | ToolCard] = []
        for t in shown:
            widgets.append(self._widget(t))
            # A call the turn never answered (it stopped first) still shows what was asked.
            widgets += [ToolCard(c, ended=True) for c in t.calls if c.id not in answered]
        if widgets:
            self.mount_all(widgets)
        self._follow(True)

    def _widget(self, turn: Turn) -> Static | AssistantMessage | ToolCard:
        if turn.role == "tool":
            call = turn.call()
            return ToolCard(call or CallRecord(turn.tool.call_id if turn.tool else "",
                                               turn.tool.name if turn.tool else "?", "{}"),
                            result=turn)
        if turn.role == "assistant":
            return AssistantMessage(turn, streaming=False, view=self.view,
                                    show_rejected=self.show_rejected,
                                    position=self.position(turn))
        return UserMessage(turn, self.position(turn))

    def add_user(self, turn: Turn) -> None:
        self.mount(UserMessage(turn, self.position(turn)))
        self._follow(True)

    def add_reply(self, turn: Turn) -> AssistantMessage:
        """The reply being written, at the end (``reply`` from now on)."""
        widget = AssistantMessage(turn, streaming=True, view=self.view,
                                  show_rejected=self.show_rejected,
                                  position=self.position(turn))
        self.reply = widget
        self.mount(widget)
        self._follow(True)
        return widget

    def end_reply(self, status: str, stats: ReplyStats | None, dropped: bool = False) -> None:
        """The reply being written ended (``dropped``: nothing of it is kept)."""
        widget, self.reply = self.reply, None
        if widget is not None and dropped:
            widget.remove()
        elif widget is not None:
            self.finish(widget, status, stats)

    def add(self, widget: Widget) -> None:
        """Another part of the turn at the end (a tool call's card, a note), followed."""
        self.mount(widget)
        self._follow(True)

    def append(self, widget: AssistantMessage, segments: Iterable[Segment]) -> None:
        at_bottom = self.is_vertical_scroll_end
        if widget.append(segments):  # only a taller reply can need scrolling
            self._follow(at_bottom)

    def finish(self, widget: AssistantMessage, status: str, stats: ReplyStats | None) -> None:
        at_bottom = self.is_vertical_scroll_end
        widget.finish(status, stats)
        self._follow(at_bottom)

    def mark_unsaved(self, turns: Iterable[Turn]) -> None:
        """Messages not in the database yet get a red edge (the top bar says how many)."""
        pending = {id(t) for t in turns}
        for w in self.query(".message"):
            turn = getattr(w, "turn", None)
            w.set_class(turn is not None and id(turn) in pending, "-unsaved")

    def select(self, turn: Turn | None) -> None:
        """Mark ``turn``'s message as the selected one (None: no selection) and show it."""
        for w in self.query(".message"):
            mine = turn is not None and getattr(w, "turn", None) is turn
            w.set_class(mine, "-selected")
            if mine:
                self.scroll_to_widget(w, animate=False)

    def watch_view(self) -> None:
        self._apply_view()

    def watch_show_rejected(self) -> None:
        self._apply_view()

    def _apply_view(self) -> None:
        for w in self.query(AssistantMessage):
            w.set_view(self.view, self.show_rejected)
