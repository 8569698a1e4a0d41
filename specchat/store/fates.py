"""The fate of every character of a reply: which tokens were accepted drafts, corrections,
bonus tokens or plain target tokens, and which draft tokens the target threw away.

:class:`FateTrace` is built from the engine's events as they stream (the app draws it live), and
encodes to a compact string for the database, so a reloaded chat shows the same colours.

Encoding (version 1), a JSON object: ``runs`` is a run-length string over the segments, one
letter per kind (``p`` plain, ``a`` accepted, ``c`` corrected, ``b`` bonus, ``x`` rejected draft,
``t`` a token tree's losing branch, each starting with "⎇") followed by a character count, e.g.
``"a12c3x5b1"``; the reply's own characters come from the message text, the rejected ones from
``x`` (all rejected and losing-branch text, concatenated). ~10 bytes per run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from specchat.engine.decode.events import GenerationStats, RejectedEvent, TokenEvent, TokenOrigin
from specchat.engine.decode.fold import EventFold

REJECTED = "x"
BRANCH = "t"  # a losing branch of a token tree (drafted, never on the accepted path)
BRANCH_MARK = "⎇"
CODES = {TokenOrigin.PLAIN: "p", TokenOrigin.ACCEPTED: "a", TokenOrigin.CORRECTED: "c",
         TokenOrigin.BONUS: "b"}
KINDS = (*CODES.values(), REJECTED, BRANCH)
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Segment:
    """A run of text of one kind: ``p``/``a``/``c``/``b`` (reply), ``x`` (rejected draft), ``t``
    (a tree's losing branch)."""

    text: str
    kind: str

    @property
    def rejected(self) -> bool:
        """Drafted text that is not in the reply (shown only when asked)."""
        return self.kind in (REJECTED, BRANCH)


class FateTrace:
    """A reply as segments in display order, each rejected draft run right after the token
    that replaced it.

    The decoder may report a step's rejected drafts before or after its corrected token; both
    orders give the same segments. A rejected run that comes first waits for the token at its
    position; one that comes after the token it belongs to is shown at once.
    """

    def __init__(self, keep: bool = True) -> None:
        # keep False: only orders the segments and gives them out (the reply's generation
        # worker: the trace is built where the segments arrive, on the UI thread).
        self._keep = keep
        self.segments: list[Segment] = []
        self._last_pos: int | None = None  # position of the last reply token shown
        self._run_next: int | None = None  # position a rejected event must have to extend the run
        self._pending: list[RejectedEvent] = []  # rejected drafts waiting for their token
        self._branch = 0  # the losing branch being shown (each starts with BRANCH_MARK)

    # --- building from events -----------------------------------------------------------

    def add_token(self, ev: TokenEvent) -> list[Segment]:
        """Add a reply token; return the segments that became visible, in order."""
        out = [Segment(ev.text, CODES[ev.origin])] if ev.text else []
        self._branch = 0
        self._last_pos = ev.position
        self._run_next = None
        if self._pending and self._pending[0].position <= ev.position:
            waiting, self._pending = self._pending, []
            out += [Segment(_visible(r.text), REJECTED) for r in waiting if r.text]
            self._run_next = waiting[-1].position + 1
        if self._keep:
            self.extend(out)
        return out

    def add_rejected(self, ev: RejectedEvent) -> list[Segment]:
        """Add a rejected draft token; return what became visible (nothing if it must wait)."""
        attached = (self._last_pos is not None and ev.position <= self._last_pos) or (
            self._run_next is not None and ev.position == self._run_next)
        if not attached:
            self._pending.append(ev)
            return []
        self._run_next = ev.position + 1
        if ev.branch:
            mark = BRANCH_MARK if ev.branch != self._branch else ""
            self._branch = ev.branch
            out = [Segment(mark + _visible(ev.text), BRANCH)] if mark or ev.text else []
        else:
            self._branch = 0
            out = [Segment(_visible(ev.text), REJECTED)] if ev.text else []
        if self._keep:
            self.extend(out)
        return out

    def finish(self) -> list[Segment]:
        """At the end of the reply: show any rejected drafts whose token never came (an EOG)."""
        out = [Segment(_visible(r.text), REJECTED) for r in self._pending if r.text]
        self._pending.clear()
        if self._keep:
            self.extend(out)
        return out

    def extend(self, new: Iterable[Segment]) -> None:
        """Append segments, merging a run with the one before it when both are of the same kind."""
        for seg in new:
            last = self.segments[-1] if self.segments else None
            if last is not None and last.kind == seg.kind:
                self.segments[-1] = Segment(last.text + seg.text, seg.kind)
            else:
                self.segments.append(seg)

    # --- reading --------------------------------------------------------------------------

    @property
    def text(self) -> str:
        """The reply's own text (rejected drafts excluded)."""
        return "".join(s.text for s in self.segments if not s.rejected)

    def counts(self) -> dict[str, int]:
        """Characters per kind, e.g. for a summary line."""
        out = dict.fromkeys(KINDS, 0)
        for s in self.segments:
            out[s.kind] += len(s.text)
        return out

    # --- storage --------------------------------------------------------------------------

    def encode(self) -> str:
        runs = "".join(f"{s.kind}{len(s.text)}" for s in self.segments if s.text)
        rejected = "".join(s.text for s in self.segments if s.rejected)
        return json.dumps({"v": FORMAT_VERSION, "runs": runs, "x": rejected},
                          ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str, encoded: str | None) -> FateTrace:
        """Rebuild a trace from a message's text and its encoding.

        Anything that does not add up (an old or damaged row) gives the text as one plain run,
        so a message is never lost for want of its colours.
        """
        trace = cls()
        try:
            trace.segments = _decode_runs(text, encoded) if encoded else []
        except (ValueError, KeyError, TypeError):
            trace.segments = []
        if not encoded or "".join(s.text for s in trace.segments if not s.rejected) != text:
            trace.segments = [Segment(text, CODES[TokenOrigin.PLAIN])] if text else []
        return trace

    @classmethod
    def plain(cls, text: str, kind: str = "p") -> FateTrace:
        trace = cls()
        trace.segments = [Segment(text, kind)] if text else []
        return trace


class FateFold(EventFold):
    """The one way a reply's events become its fate trace, wherever it is drawn as it streams
    (the chat's live view, a race column): the event fold, with its tokens, rejected drafts
    and end fed to a :class:`FateTrace`. ``shown`` gathers the segments that became visible
    since the last :meth:`take_shown`; ``keep`` is FateTrace's."""

    def __init__(self, keep: bool = True) -> None:
        super().__init__()
        self.trace = FateTrace(keep=keep)
        self.shown: list[Segment] = []

    def on_token(self, ev: TokenEvent) -> None:
        self.shown += self.trace.add_token(ev)

    def on_rejected(self, ev: RejectedEvent) -> None:
        self.shown += self.trace.add_rejected(ev)

    def on_stats(self, ev: GenerationStats) -> None:
        self.shown += self.trace.finish()

    def take_shown(self) -> list[Segment]:
        """The segments shown since the last take, in order."""
        out, self.shown = self.shown, []
        return out


def merge_segments(segments: Iterable[Segment]) -> list[Segment]:
    """Join neighbouring segments of the same kind (fewer spans to draw and store)."""
    trace = FateTrace()
    trace.extend(segments)
    return trace.segments


def _decode_runs(text: str, encoded: str) -> list[Segment]:
    doc = json.loads(encoded)
    if not isinstance(doc, dict) or doc.get("v") != FORMAT_VERSION:
        raise ValueError("unknown fate encoding")
    runs, rejected = str(doc["runs"]), str(doc.get("x", ""))
    segments: list[Segment] = []
    i = ti = xi = 0
    while i < len(runs):
        kind = runs[i]
        if kind not in KINDS:
            raise ValueError(f"bad run kind {kind!r}")
        j = i + 1
        while j < len(runs) and runs[j].isdigit():
            j += 1
        n = int(runs[i + 1 : j])
        if kind in (REJECTED, BRANCH):
            part, xi = rejected[xi : xi + n], xi + n
        else:
            part, ti = text[ti : ti + n], ti + n
        if len(part) != n:
            raise ValueError("run longer than its text")
        segments.append(Segment(part, kind))
        i = j
    if ti != len(text) or xi != len(rejected):
        raise ValueError("runs do not cover the text")
    return segments


def _visible(text: str) -> str:
    # A rejected newline would reflow the reply around text that is not in it: show a symbol.
    return text.replace("\r", "").replace("\n", "⏎")
