"""Turns committed token ids into the reply's text and ``TokenEvent``s, and decides when to stop.

Shared by plain and speculative decoding: end-of-generation tokens end the reply; stop strings
end it at their first character. While the text so far ends with the beginning of a stop
string, token events are held back, so a stop string never flashes on screen.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from specchat.engine.decode.events import TokenEvent, TokenLogprob, TokenOrigin
from specchat.engine.llama.model import LlamaModel


class Reply:
    def __init__(self, model: LlamaModel, stop: Sequence[str] = ()) -> None:
        self.model = model
        self.stop = tuple(s for s in stop if s)
        self.tokens: list[int] = []  # every committed token, EOG included
        self.text = ""
        self.stop_reason: str | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held: list[TokenEvent] = []
        self._released = 0  # characters of ``text`` already given out in events

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    def add(self, token: int, origin: TokenOrigin, t: float,
            logprob: TokenLogprob | None = None) -> list[TokenEvent]:
        """Commit one token; return the events that can be shown now."""
        if self.done:
            return []
        self.tokens.append(token)
        if self.model.is_eog(token):
            self.stop_reason = "eos"
            return self.flush()
        piece = self._decoder.decode(self.model.piece(token))
        event = TokenEvent(token, piece, origin, len(self.tokens) - 1, t, logprob)
        self.text += piece
        if not self.stop:
            self._released += len(piece)
            return [event]
        self._held.append(event)
        return self._release_for_stop()

    def _release_for_stop(self) -> list[TokenEvent]:
        window_start = max(0, self._released - max(len(s) for s in self.stop))
        hits = [i for s in self.stop if (i := self.text.find(s, window_start)) >= 0]
        if hits:
            self.stop_reason = "stop"
            self.text = self.text[: min(hits)]
            return self._release(len(self.text), trim=True)
        keep = max((k for s in self.stop for k in range(1, len(s)) if self.text.endswith(s[:k])),
                   default=0)
        return self._release(len(self.text) - keep, trim=False)

    def _release(self, upto: int, trim: bool) -> list[TokenEvent]:
        out = []
        while self._held and self._released + len(self._held[0].text) <= upto:
            ev = self._held.pop(0)
            self._released += len(ev.text)
            out.append(ev)
        if trim and self._held:
            ev = self._held[0]
            cut = upto - self._released
            if cut > 0:
                out.append(TokenEvent(ev.token_id, ev.text[:cut], ev.origin, ev.position, ev.t,
                                      ev.logprob))
                self._released += cut
            self._held.clear()
        return out

    def flush(self) -> list[TokenEvent]:
        """At the end: give out whatever was held (a stop string that never completed)."""
        tail = self._decoder.decode(b"", final=True)
        self.text += tail
        out, self._held = self._held, []
        self._released = len(self.text)
        return out

    @property
    def n_generated(self) -> int:
        return len(self.tokens)
