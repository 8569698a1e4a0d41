"""OpenAI's Responses API (``POST /v1/responses``), its reply: a response object, whole or as
the typed events of its stream, for a request that ``responses_request.py`` read into a chat.

A reply's text is a ``message`` output item and each tool call a ``function_call`` item; a
stream gives each item as it is added, its text or arguments as deltas, then its done events,
and the whole response last. With ``include: ["message.output_text.logprobs"]``, the output
text's log-probabilities are written as chat writes them, on the ``output_text`` parts and
their delta and done events. The conversation with the reply is kept in the
:class:`~specchat.serve.responses_request.ResponseStore` (unless ``store`` is false) for a
later ``previous_response_id``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specchat.engine.decode.events import TokenEvent
from specchat.engine.decode.generic_tools import GenericCallStream, read_generic
from specchat.engine.decode.messages import Message, ToolCall
from specchat.engine.decode.tool_calls import CallDelta, ToolCallStream, read_calls, read_stream
from specchat.engine.policy.in_force import InForce
from specchat.serve.figures import chat_logprobs, extension, fates, timings
from specchat.serve.job import Finished
from specchat.serve.replies import call_stream, split_deltas
from specchat.serve.responses_request import ResponsesRequest, ResponseStore


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


@dataclass
class _Open:
    """An output item being streamed."""

    index: int
    id: str
    kind: str  # message | function_call
    text: list[str] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # a message's, so far


@dataclass
class TextTokens:
    """The tokens whose log-probabilities an output text carries: the reply's tokens in order,
    each once the text given out holds its text as the next part, until the first token
    whose text is not (a call's, which no output text shows): from there on, none. A reply
    without calls thus gives every token's; whole and streamed replies give the same."""

    held: list[TokenEvent] = field(default_factory=list)
    shown: str = ""  # the output text given out so far
    at: int = 0  # how much of it the matched tokens wrote
    ended: bool = False

    def add(self, tokens: Sequence[TokenEvent]) -> None:
        if not self.ended:
            self.held += tokens

    def show(self, text: str) -> list[TokenEvent]:
        """``text`` given out: the tokens that wrote it (and any before it still held)."""
        self.shown += text
        out: list[TokenEvent] = []
        while self.held and not self.ended:
            t = self.held[0]
            if self.shown.startswith(t.text, self.at):
                out.append(self.held.pop(0))
                self.at += len(t.text)
            elif not t.text.startswith(self.shown[self.at:]):
                self.end()
            else:  # its text is not all given out yet
                break
        return out

    def end(self) -> None:
        self.ended, self.held = True, []


@dataclass
class ResponsesWriter:
    """A response object, whole or as the typed events of a stream (``event:`` lines named
    as the ``type`` they carry, no ``[DONE]``), and the conversation kept for later turns."""

    request: ResponsesRequest
    model: str
    setup: InForce
    store: ResponseStore
    tools: frozenset[str] | None = None
    reply_start: str = ""
    with_fates: bool = False
    generic: bool = False  # the calls are the generic JSON reply (engine/decode/generic_tools)
    # ``include`` asked for log-probabilities: the tokens' bytes to write them with (the
    # job's). A generic JSON reply's text is read out of the JSON its tokens wrote: none there.
    pieces: Mapping[int, bytes] | None = None
    id: str = field(default_factory=lambda: _new_id("resp_"))
    created: int = field(default_factory=lambda: int(time.time()))
    ends_with_done = False
    include_usage = False
    named_events = True
    _seq: int = 0
    _items: list[dict[str, Any]] = field(default_factory=list)  # the finished output items
    _open: _Open | None = None
    _calls: ToolCallStream | GenericCallStream | None = None
    _tokens: TextTokens | None = None

    def __post_init__(self) -> None:
        if self.tools is not None:
            self._calls = call_stream(self.tools, self.generic)
        if self.pieces is not None and not self.generic:
            self._tokens = TextTokens()

    def _logprobs(self, tokens: Sequence[TokenEvent]) -> list[dict[str, Any]]:
        return chat_logprobs(tokens, self.pieces) if self.pieces is not None else []

    # ------------------------------------------------------------------ the object

    def _object(self, status: str, output: list[dict[str, Any]],
                done: Finished | None = None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "error": None, "incomplete_details": None, "model": self.model, "output": output,
            "truncation": "disabled", "usage": None, "user": None, "reasoning": None,
            "background": False, **self.request.echo}
        if done is not None:
            s = done.stats
            if s.stop_reason in ("length", "context"):
                doc["status"] = "incomplete"
                doc["incomplete_details"] = {"reason": "max_output_tokens"}
            doc["usage"] = {
                "input_tokens": s.prompt_tokens,
                "input_tokens_details": {"cached_tokens": s.cached_tokens},
                "output_tokens": s.generated_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": s.prompt_tokens + s.generated_tokens}
            doc["timings"] = timings(s)
            doc["specchat"] = extension(done, self.setup)
        return doc

    @staticmethod
    def _message(item_id: str, text: str, status: str = "completed",
                 logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {"id": item_id, "type": "message", "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [],
                             "logprobs": logprobs or []}]}

    @staticmethod
    def _call(item_id: str, call: ToolCall, status: str = "completed") -> dict[str, Any]:
        return {"id": item_id, "type": "function_call", "status": status,
                "call_id": call.id, "name": call.name, "arguments": call.arguments}

    def _keep(self, text: str, calls: Sequence[ToolCall]) -> None:
        if self.request.store:
            reply = Message("assistant", text, tuple(calls))
            self.store.put(self.id, (*self.request.conversation, reply))

    def response(self, tokens: Sequence[TokenEvent], done: Finished) -> dict[str, Any]:
        text = "".join(t.text for t in tokens)
        calls: list[ToolCall] = []
        if self.tools is not None:
            text, calls = (read_generic(text, self.tools) if self.generic else
                           read_calls(self.reply_start + text, self.tools))
        output = []
        if text.strip() or not calls:
            logprobs: list[dict[str, Any]] = []
            if self._tokens is not None:
                self._tokens.add(tokens)
                logprobs = self._logprobs(self._tokens.show(text))
            output.append(self._message(_new_id("msg_"), text, logprobs=logprobs))
        output += [self._call(_new_id("fc_"), c) for c in calls]
        self._keep(text, calls)
        doc = self._object("completed", output, done)
        if self.with_fates:
            doc["specchat"]["tokens"] = fates(tokens)
        return doc

    # ------------------------------------------------------------------ the stream

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        doc = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return doc

    def first_chunks(self) -> list[dict[str, Any]]:
        shell = self._object("in_progress", [])
        return [self._event("response.created", response=shell),
                self._event("response.in_progress", response=shell)]

    def _close(self) -> list[dict[str, Any]]:
        o, self._open = self._open, None
        if o is None:
            return []
        if o.kind == "message":
            text = "".join(o.text)
            item = self._message(o.id, text, logprobs=o.logprobs)
            part = item["content"][0]
            events = [self._event("response.output_text.done", item_id=o.id,
                                  output_index=o.index, content_index=0, text=text,
                                  logprobs=o.logprobs),
                      self._event("response.content_part.done", item_id=o.id,
                                  output_index=o.index, content_index=0, part=part)]
        else:
            args = "".join(o.text)
            item = self._call(o.id, ToolCall(o.call_id, o.name, args))
            events = [self._event("response.function_call_arguments.done", item_id=o.id,
                                  output_index=o.index, name=o.name, arguments=args)]
        self._items.append(item)
        return [*events, self._event("response.output_item.done", output_index=o.index,
                                     item=item)]

    def _text(self, text: str) -> list[dict[str, Any]]:
        events = []
        if self._open is None or self._open.kind != "message":
            events += self._close()
            o = self._open = _Open(len(self._items), _new_id("msg_"), "message")
            events += [self._event("response.output_item.added", output_index=o.index,
                                   item={**self._message(o.id, "", "in_progress"),
                                         "content": []}),
                       self._event("response.content_part.added", item_id=o.id,
                                   output_index=o.index, content_index=0,
                                   part={"type": "output_text", "text": "",
                                         "annotations": [], "logprobs": []})]
        self._open.text.append(text)
        logprobs = self._logprobs(self._tokens.show(text)) if self._tokens is not None else []
        self._open.logprobs += logprobs
        return [*events, self._event("response.output_text.delta", item_id=self._open.id,
                                     output_index=self._open.index, content_index=0,
                                     delta=text, logprobs=logprobs)]

    def _deltas(self, deltas: Sequence[CallDelta]) -> list[dict[str, Any]]:
        events = []
        if deltas and self._tokens is not None:  # a call's tokens: no output text's
            self._tokens.end()
        for d in split_deltas(deltas):
            if d.id is not None:
                events += self._close()
                o = self._open = _Open(len(self._items), _new_id("fc_"), "function_call",
                                       call_id=d.id, name=d.name or "")
                events.append(self._event(
                    "response.output_item.added", output_index=o.index,
                    item=self._call(o.id, ToolCall(d.id, o.name, ""), "in_progress")))
            elif self._open is not None and self._open.kind == "function_call":
                self._open.text.append(d.arguments)
                events.append(self._event("response.function_call_arguments.delta",
                                          item_id=self._open.id,
                                          output_index=self._open.index, delta=d.arguments))
        return events

    def _read(self, text: str, end: bool = False) -> list[dict[str, Any]]:
        if self._calls is None:
            return self._text(text) if text else []
        if self.reply_start:
            text, self.reply_start = self.reply_start + text, ""
        content, deltas = read_stream(self._calls, text, end)
        # A call's content comes before it: the text the stream held, then the call.
        return (self._text(content) if content else []) + self._deltas(deltas)

    def chunks(self, tokens: Sequence[TokenEvent]) -> list[dict[str, Any]]:
        if self._tokens is not None:
            self._tokens.add(tokens)
        return self._read("".join(t.text for t in tokens))

    def final_chunks(self, done: Finished) -> list[dict[str, Any]]:
        events = self._read("", end=True)
        if not self._items and self._open is None:  # an empty reply is an empty message
            events += self._text("")
        events += self._close()
        text = "".join(c["text"] for i in self._items if i["type"] == "message"
                       for c in i["content"])
        calls = [ToolCall(i["call_id"], i["name"], i["arguments"]) for i in self._items
                 if i["type"] == "function_call"]
        self._keep(text, calls)
        final = self._object("completed", list(self._items), done)
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        return [*events, self._event(kind, response=final)]
