"""A generation's events as the JSON of the API it was asked through: OpenAI's chat and text
completions (:class:`ReplyWriter`), whole or as streamed chunks for server-sent events, and
llama-server's own shape for ``/infill`` (:class:`InfillWriter`). Each carries what
llama-server reports beside it and specchat's own figures (``figures.py``); a reply's tool
calls are read out of its text as it streams and written as OpenAI's ``tool_calls``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specchat.engine.decode.events import TokenEvent
from specchat.engine.decode.generic_tools import GenericCallStream, read_generic
from specchat.engine.decode.messages import ToolCall
from specchat.engine.decode.tool_calls import CallDelta, ToolCallStream, read_calls, read_stream
from specchat.engine.policy.in_force import InForce
from specchat.serve.figures import (
    chat_logprobs,
    completion_logprobs,
    extension,
    fates,
    server_probabilities,
    timings,
    usage,
)
from specchat.serve.job import Finished

# The engine's stop reasons in OpenAI's words. A cancelled reply has no reader, except at
# shutdown, where "length" says it was cut short.
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "context": "length",
                  "cancelled": "length"}


@dataclass
class ReplyWriter:
    """The OpenAI JSON of one reply, chat or text completion, whole or as chunks."""

    chat: bool
    model: str
    setup: InForce
    with_fates: bool = False
    include_usage: bool = False
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    # Log-probabilities were asked for: the tokens' bytes to write them with (the job's).
    pieces: Mapping[int, bytes] | None = None
    # Tools were offered: the reply's calls are read out of its text (which ``reply_start``,
    # put after the prompt when a call is required, begins).
    tools: frozenset[str] | None = None  # the offered tools' names
    reply_start: str = ""
    generic: bool = False  # the calls are the generic JSON reply (engine/decode/generic_tools)
    ends_with_done = True  # a stream's last line is "data: [DONE]"
    named_events = False
    _offset: int = 0  # characters streamed so far (a completion's text_offset)
    _calls: ToolCallStream | GenericCallStream | None = None

    def __post_init__(self) -> None:
        if not self.id:
            self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]
        if self.tools is not None:
            self._calls = call_stream(self.tools, self.generic)

    def _read(self, text: str, end: bool = False) -> tuple[str, list[CallDelta]]:
        """A chunk's content and call deltas (the text itself when no tools were offered)."""
        if self._calls is None:
            return text, []
        if self.reply_start:
            text, self.reply_start = self.reply_start + text, ""
        content, deltas = read_stream(self._calls, text, end)
        return content, deltas

    def _finish_reason(self, done: Finished) -> str:
        called = self._calls is not None and self._calls.calls
        if called and done.stats.stop_reason in ("eos", "stop"):
            return "tool_calls"
        return FINISH_REASONS[done.stats.stop_reason]

    def _logprobs(self, tokens: Sequence[TokenEvent]) -> dict[str, Any] | None:
        if self.pieces is None:
            return None
        if self.chat:
            return {"content": chat_logprobs(tokens, self.pieces), "refusal": None}
        return completion_logprobs(tokens, self.pieces, self._offset)

    @property
    def _object(self) -> str:
        return "chat.completion" if self.chat else "text_completion"

    def _head(self, chunk: bool) -> dict[str, Any]:
        obj = self._object + (".chunk" if chunk and self.chat else "")
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": None}

    def _choice(self, text: str | None, finish: str | None, chunk: bool,
                deltas: Sequence[CallDelta] = (), calls: Sequence[ToolCall] = ()
                ) -> dict[str, Any]:
        if not self.chat:
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        if chunk:
            delta: dict[str, Any] = {} if text is None else {"content": text}
            if deltas:
                delta["tool_calls"] = [_delta(d) for d in deltas]
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        message: dict[str, Any] = {"role": "assistant", "content": text or ""}
        if calls:  # OpenAI's content is null beside calls when there is no text
            message["content"] = text if text and text.strip() else None
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
        return {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}

    def first_chunks(self) -> list[dict[str, Any]]:
        """A chat stream opens with the assistant's role, as OpenAI's does."""
        if not self.chat:
            return []
        doc = self._head(True)
        doc["choices"] = [{"index": 0, "delta": {"role": "assistant", "content": ""},
                           "logprobs": None, "finish_reason": None}]
        return [doc]

    def chunks(self, tokens: Sequence[TokenEvent]) -> list[dict[str, Any]]:
        """The chunks of tokens committed together: their text, then each call delta in a
        chunk of its own (none when they add no text and neither fates nor log-probabilities
        were asked for: a character still incomplete)."""
        text, deltas = self._read("".join(t.text for t in tokens))
        if not text and not deltas and not self.with_fates and self.pieces is None:
            return []
        doc = self._head(True)
        doc["choices"] = [self._choice(text if text or not deltas else None, None, True)]
        if self.pieces is not None:
            doc["choices"][0]["logprobs"] = self._logprobs(tokens)
            self._offset += len(text)
        if self.with_fates:
            doc["specchat"] = {"tokens": fates(tokens)}
        out = [doc] if text or not deltas or self.with_fates or self.pieces is not None else []
        return out + self._call_chunks(deltas)

    def _call_chunks(self, deltas: Sequence[CallDelta]) -> list[dict[str, Any]]:
        """OpenAI's shape of a streamed call: a first chunk with its index, id, type and name
        (arguments empty), then its argument fragments, one chunk each."""
        out = []
        for d in split_deltas(deltas):
            doc = self._head(True)
            doc["choices"] = [{"index": 0, "delta": {"tool_calls": [_delta(d)]},
                               "logprobs": None, "finish_reason": None}]
            out.append(doc)
        return out

    def final_chunks(self, done: Finished) -> list[dict[str, Any]]:
        """The stream's end, as OpenAI's: what text or calls were still held, the finish reason
        in a chunk of its own with an empty delta (llama-server's timings and ours beside it),
        and with ``stream_options.include_usage`` a last chunk with no choices and the usage."""
        text, deltas = self._read("", end=True)
        out = []
        if text:
            doc = self._head(True)
            doc["choices"] = [self._choice(text, None, True)]
            out.append(doc)
        out += self._call_chunks(deltas)
        doc = self._head(True)
        doc["choices"] = [self._choice(None, self._finish_reason(done), True)]
        doc["timings"] = timings(done.stats)
        doc["specchat"] = extension(done, self.setup)
        out.append(doc)
        if self.include_usage:
            doc = self._head(True)
            doc["choices"] = []
            doc["usage"] = usage(done.stats, done.prediction)
            out.append(doc)
        return out

    def response(self, tokens: Sequence[TokenEvent], done: Finished) -> dict[str, Any]:
        doc = self._head(False)
        text = "".join(t.text for t in tokens)
        calls: list[ToolCall] = []
        if self.tools is not None:
            text, calls = (read_generic(text, self.tools) if self.generic else
                           read_calls(self.reply_start + text, self.tools))
            self._calls = ToolCallStream(calls)
        doc["choices"] = [self._choice(text, self._finish_reason(done), False, calls=calls)]
        if self.pieces is not None:
            doc["choices"][0]["logprobs"] = self._logprobs(tokens)
        doc["usage"] = usage(done.stats, done.prediction)
        doc["timings"] = timings(done.stats)
        ext = extension(done, self.setup)
        if self.with_fates:
            ext["tokens"] = fates(tokens)
        doc["specchat"] = ext
        return doc


def call_stream(names: frozenset[str], generic: bool) -> ToolCallStream | GenericCallStream:
    """What reads a reply's calls as it streams: tagged calls, or the generic JSON reply."""
    return GenericCallStream(names) if generic else ToolCallStream(names=names)


def split_deltas(deltas: Sequence[CallDelta]) -> list[CallDelta]:
    """Deltas with a call's head (id, name) apart from its arguments: the head first with
    none, then the arguments, as OpenAI streams a call."""
    out = []
    for d in deltas:
        if d.id is not None and d.arguments:
            out += [CallDelta(d.index, d.id, d.name, ""), CallDelta(d.index, None, None,
                                                                      d.arguments)]
        else:
            out.append(d)
    return out


def _delta(d: CallDelta) -> dict[str, Any]:
    """A call's piece as OpenAI streams it: id, type and name on its first, then arguments."""
    if d.id is None:
        return {"index": d.index, "function": {"arguments": d.arguments}}
    return {"index": d.index, "id": d.id, "type": "function",
            "function": {"name": d.name, "arguments": d.arguments}}


# The engine's stop reasons as llama-server's stop_type.
STOP_TYPES = {"eos": "eos", "stop": "word", "length": "limit", "context": "limit",
              "cancelled": "limit"}


@dataclass
class InfillWriter:
    """llama-server's ``/infill`` JSON (its ``/completion`` shape): ``content`` and ``stop``
    per chunk, then the figures — ``tokens_predicted``, ``tokens_evaluated``,
    ``tokens_cached``, ``timings`` — with specchat's own; no ``[DONE]`` line, as there."""

    model: str
    setup: InForce
    with_fates: bool = False
    include_usage: bool = False  # (an OpenAI stream option: not in this shape)
    pieces: Mapping[int, bytes] | None = None
    ends_with_done = False
    named_events = False

    def first_chunks(self) -> list[dict[str, Any]]:
        return []

    def _probs(self, doc: dict[str, Any], tokens: Sequence[TokenEvent]) -> dict[str, Any]:
        if self.pieces is not None:
            doc["completion_probabilities"] = server_probabilities(tokens, self.pieces)
        return doc

    def chunks(self, tokens: Sequence[TokenEvent]) -> list[dict[str, Any]]:
        text = "".join(t.text for t in tokens)
        if not text and not self.with_fates and self.pieces is None:
            return []
        doc = {"index": 0, "content": text, "tokens": [t.token_id for t in tokens],
               "stop": False}
        if self.with_fates:
            doc["specchat"] = {"tokens": fates(tokens)}
        return [self._probs(doc, tokens)]

    def _end(self, text: str, done: Finished) -> dict[str, Any]:
        s = done.stats
        return {"index": 0, "content": text, "tokens": [], "stop": True, "model": self.model,
                "tokens_predicted": s.generated_tokens, "tokens_evaluated": s.prompt_tokens,
                "tokens_cached": s.cached_tokens, "stop_type": STOP_TYPES[s.stop_reason],
                "timings": timings(s), "specchat": extension(done, self.setup)}

    def final_chunks(self, done: Finished) -> list[dict[str, Any]]:
        return [self._end("", done)]

    def response(self, tokens: Sequence[TokenEvent], done: Finished) -> dict[str, Any]:
        doc = self._end("".join(t.text for t in tokens), done)
        doc["tokens"] = [t.token_id for t in tokens]
        if self.with_fates:
            doc["specchat"]["tokens"] = fates(tokens)
        return self._probs(doc, tokens)
