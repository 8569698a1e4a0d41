"""Tool calls for a model whose chat template has no format for them, as llama.cpp's generic
handler does: the tools are described in the system message, and the reply is constrained by
a grammar to one JSON object, ``{"tool_calls": [{"name": …, "arguments": {…}}, …]}`` to call
tools or ``{"content": "…"}`` to answer.

Earlier turns are written in the same JSON (an assistant's calls) or as a user's
``{"tool_response": …}`` (a tool's result), since such a template takes neither tool calls nor
tool messages. :class:`GenericCallStream` reads the reply: a text answer streams as its
string is written, and a call as OpenAI streams one, its id and name then its arguments' text
as it is written (a reply cut short by the token limit gives the answer so far, or the calls
as far as they were written)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specchat.engine.decode.messages import Message, ToolCall
from specchat.engine.decode.tool_calls import CallDelta, new_call_id

# JSON as the prompt shows it, not free whitespace anywhere: a model then cannot pad a reply
# out to its token limit.
COMPACT = {"whitespace_flexible": False}
CONTENT_HEAD = '{"content":"'  # how a text answer begins under that grammar
CALLS_HEAD = '{"tool_calls":['  # and calls


def instruction(tools: Sequence[Mapping[str, Any]], choice: str) -> str:
    """The system text that offers the tools (OpenAI's tool objects)."""
    listed = json.dumps([t["function"] for t in tools], ensure_ascii=False)
    if choice == "auto":
        how = ('Respond in JSON: either {"tool_calls": [{"name": <tool name>, "arguments": '
               '{...}}]} to call tools, or {"content": <your reply>} to answer the user.')
    else:
        how = ('Respond in JSON: {"tool_calls": [{"name": <tool name>, "arguments": {...}}]} '
               'to call the tools.')
    return f"You can call these tools:\n{listed}\n{how}"


def generic_messages(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]],
                     choice: str) -> list[Message]:
    """The conversation as such a template can render it: the tools in the system message,
    earlier calls as the JSON the reply is made to write, tool results as user messages."""
    out: list[Message] = []
    for m in messages:
        if m.role == "assistant" and m.tool_calls:
            calls = [{"name": c.name, "arguments": _arguments(c.arguments), "id": c.id}
                     for c in m.tool_calls]
            out.append(Message("assistant", json.dumps({"tool_calls": calls},
                                                       ensure_ascii=False)))
        elif m.role == "tool":
            response = {"tool_call_id": m.tool_call_id, "content": m.content}
            out.append(Message("user", json.dumps({"tool_response": response},
                                                  ensure_ascii=False)))
        else:
            out.append(m)
    text = instruction(tools, choice)
    if out and out[0].role == "system":
        return [Message("system", f"{out[0].content}\n\n{text}"), *out[1:]]
    return [Message("system", text), *out]


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def generic_schema(tools: Sequence[Mapping[str, Any]], choice: str,
                   parallel: bool = True) -> dict[str, Any]:
    """The JSON schema of the reply: calls of the offered tools (one call of the named one when
    the choice names one, one call without ``parallel``), or, with ``auto``, a text answer
    instead."""
    chosen = [t for t in tools if choice in ("auto", "required")
              or t["function"]["name"] == choice]
    items = [{"type": "object",
              "properties": {"name": {"const": t["function"]["name"]},
                             "arguments": t["function"].get("parameters") or {"type": "object"}},
              "required": ["name", "arguments"], "additionalProperties": False}
             for t in chosen]
    array: dict[str, Any] = {"type": "array", "items": items[0] if len(items) == 1
                             else {"anyOf": items}, "minItems": 1}
    if not parallel or choice not in ("auto", "required"):
        array["maxItems"] = 1
    calls = {"type": "object", "properties": {"tool_calls": array},
             "required": ["tool_calls"], "additionalProperties": False}
    if choice != "auto":
        return {**calls, "x-guidance": COMPACT}
    answer = {"type": "object", "properties": {"content": {"type": "string"}},
              "required": ["content"], "additionalProperties": False}
    return {"anyOf": [calls, answer], "x-guidance": COMPACT}


def read_generic(text: str, names: frozenset[str]) -> tuple[str, list[ToolCall]]:
    """A whole reply's content and calls: the calls as :class:`GenericCallStream` gives them
    (their arguments as written) when the reply is the compact form the grammar makes,
    else read as any JSON."""
    if text.startswith(CALLS_HEAD):
        reader = _CompactCalls(names)
        reader.read(text)
        if reader.calls:
            return "", reader.tool_calls()
    return _read_json(text, names)


def _read_json(text: str, names: frozenset[str]) -> tuple[str, list[ToolCall]]:
    """The reply read as a JSON document (completed when cut short in its answer's string)."""
    doc = None
    for ending in ("", '"}', "}"):  # a reply cut short in its content's string
        try:
            doc = json.loads(text + ending)
            break
        except ValueError:
            continue
    if not isinstance(doc, dict):
        if text.startswith(CONTENT_HEAD):  # cut inside an escape: the answer so far
            return _string_prefix(text[len(CONTENT_HEAD):]), []
        if text.startswith(CALLS_HEAD):  # cut short: the calls written whole
            doc = {"tool_calls": _whole_items(text, len(CALLS_HEAD))}
            if not doc["tool_calls"]:
                return "", []
        else:
            return text, []
    calls = doc.get("tool_calls")
    if isinstance(calls, list) and calls:
        out = []
        for c in calls:
            if not (isinstance(c, dict) and c.get("name") in names):
                return text, []
            args = c.get("arguments", {})
            out.append(ToolCall(new_call_id(), c["name"], args if isinstance(args, str)
                                else json.dumps(args, ensure_ascii=False)))
        return "", out
    content = doc.get("content")
    if not isinstance(content, str):
        return text, []
    if content and "\ud800" <= content[-1] < "\udc00":  # cut between a pair's halves
        content = content[:-1]
    return content, []


_NAME_HEAD = '{"name":"'  # a call's opening in the compact form, up to its name
_ARGS_HEAD = '","arguments":'  # from the name's closing quote to its arguments


def _call_head(text: str) -> tuple[str, int] | bool:
    """A compact call's name and where its arguments begin in ``text`` (which starts where the
    call does); True: not all written yet; False: not a compact call's head."""
    if not text.startswith(_NAME_HEAD):
        return _NAME_HEAD.startswith(text)
    i = len(_NAME_HEAD)
    while i < len(text) and text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    rest = text[i:]
    if not rest.startswith(_ARGS_HEAD):
        return i >= len(text) or _ARGS_HEAD.startswith(rest)
    try:
        name = json.loads(text[len(_NAME_HEAD) - 1:i + 1])
    except ValueError:
        return False
    return (name, i + len(_ARGS_HEAD)) if isinstance(name, str) else False


@dataclass
class _Written:
    """A call as it is written: its name, and its arguments' text so far."""

    index: int
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)


@dataclass
class _CompactCalls:
    """The calls of a reply in the compact form its grammar makes the model write,
    ``{"tool_calls":[{"name":…,"arguments":…},…]}``, read as they are written: each call's
    id and name once its name is whole, then its arguments' text as it comes. The arguments'
    end is found by the JSON's own structure (brackets, strings and their escapes), so no text
    is held back. Text in another form (spaces, other keys, a tool not offered) stops the
    reading (``broken``): the calls already read stay, as written."""

    names: frozenset[str]
    calls: list[_Written] = field(default_factory=list)
    broken: bool = False
    _at: int = len(CALLS_HEAD)  # how far the text is read
    _state: str = "item"  # item | args | close | next | end
    _kind: str = ""  # the arguments' JSON value: "" (not begun) | container | string | scalar
    _depth: int = 0
    _in_string: bool = False
    _escape: bool = False

    def read(self, text: str) -> list[CallDelta]:
        """The deltas of what ``text`` (the reply so far, which starts with CALLS_HEAD) adds."""
        out: list[CallDelta] = []
        while self._at < len(text) and not self.broken and self._state != "end":
            if self._state == "item":
                head = _call_head(text[self._at:])
                if head is True:
                    break
                if head is False or isinstance(head, bool) or head[0] not in self.names:
                    self.broken = True
                    break
                name, length = head
                call = _Written(len(self.calls), new_call_id(), name)
                self.calls.append(call)
                out.append(CallDelta(call.index, call.id, name))
                self._at += length
                self._state, self._kind, self._depth = "args", "", 0
                self._in_string = self._escape = False
            elif self._state == "args":
                start = self._at
                self._at = self._value(text)
                if self._at > start:
                    piece = text[start:self._at]
                    self.calls[-1].arguments.append(piece)
                    out.append(CallDelta(self.calls[-1].index, arguments=piece))
            else:
                c = text[self._at]
                self._at += 1
                if self._state == "close" and c == "}":
                    self._state = "next"
                elif self._state == "next" and c in ",]":
                    self._state = "item" if c == "," else "end"
                else:
                    self.broken = True
        return out

    def _value(self, text: str) -> int:
        """Read on through the arguments' JSON value; where its text read so far ends (the
        state becomes "close" once the value is whole)."""
        i = self._at
        while i < len(text):
            c = text[i]
            if not self._kind:
                if c in " \t\n\r":
                    pass  # (not in the compact form; harmless before the value)
                elif c in "{[":
                    self._kind, self._depth = "container", 1
                elif c == '"':
                    self._kind, self._in_string = "string", True
                elif c in "}],":
                    self.broken = True
                    return i
                else:
                    self._kind = "scalar"
            elif self._in_string:
                if self._escape:
                    self._escape = False
                elif c == "\\":
                    self._escape = True
                elif c == '"':
                    self._in_string = False
                    if self._kind == "string":
                        self._state = "close"
                        return i + 1
            elif self._kind == "scalar":
                if c in "}],":  # a number, true, false or null ends where its call does
                    self._state = "close"
                    return i
            elif c == '"':
                self._in_string = True
            elif c in "{[":
                self._depth += 1
            elif c in "}]":
                self._depth -= 1
                if self._depth == 0:
                    self._state = "close"
                    return i + 1
            i += 1
        return i

    def tool_calls(self) -> list[ToolCall]:
        return [ToolCall(c.id, c.name, "".join(c.arguments)) for c in self.calls]


@dataclass
class GenericCallStream:
    """:class:`~specchat.engine.decode.tool_calls.ToolCallStream`'s interface for the JSON
    reply. A text answer (``{"content": "…"}``) streams as its string is written, each
    escape once whole; calls stream as OpenAI's do — a call's id and name once its name is
    written, then its arguments' text as it comes (the reply in the compact form its grammar
    makes; in any other form the calls come out at :meth:`finish`, once their JSON is whole).
    Fed the whole reply at once it gives what :func:`read_generic` reads."""

    names: frozenset[str] = frozenset()
    calls: list[ToolCall] = field(default_factory=list)
    _raw: str = ""
    _sent: str = ""  # the answer's text given out so far
    _compact: _CompactCalls | None = None

    def feed(self, text: str) -> tuple[str, list[CallDelta]]:
        self._raw += text
        raw = self._raw
        if raw.startswith(CALLS_HEAD):
            if self._compact is None:
                self._compact = _CompactCalls(self.names)
            return "", self._compact.read(raw)
        if not raw.startswith(CONTENT_HEAD):
            return "", []
        decoded = _string_prefix(raw[len(CONTENT_HEAD):])
        out = decoded[len(self._sent):]
        self._sent += out
        return out, []

    def finish(self) -> tuple[str, list[CallDelta]]:
        raw, self._raw = self._raw, ""
        if self._compact is not None and self._compact.calls:  # given out as they came
            self.calls = self._compact.tool_calls()
            return "", []
        content, self.calls = _read_json(raw, self.names)
        # What was given out is the answer's start (both are read from the same text).
        rest = content[len(self._sent):] if content.startswith(self._sent) else ""
        return rest, [CallDelta(i, c.id, c.name, c.arguments) for i, c in enumerate(self.calls)]


def _whole_items(text: str, at: int) -> list[Any]:
    """The JSON values of an array written from ``at`` on, as far as they are whole."""
    decoder, items = json.JSONDecoder(), []
    while at < len(text):
        try:
            item, at = decoder.raw_decode(text, at)
        except ValueError:
            break
        items.append(item)
        if not text.startswith(",", at):
            break
        at += 1
    return items


def _string_prefix(body: str) -> str:
    """The text of a JSON string's body written so far (after its opening quote): up to its
    closing quote, without an escape still incomplete or half a surrogate pair."""
    i, end = 0, len(body)
    while i < end:
        c = body[i]
        if c == '"':
            end = i
            break
        if c == "\\":
            if i + 1 >= end:
                end = i
                break
            if body[i + 1] == "u":
                if i + 6 > end:
                    end = i
                    break
                code = int(body[i + 2:i + 6], 16) if all(
                    h in "0123456789abcdefABCDEF" for h in body[i + 2:i + 6]) else -1
                if 0xD800 <= code < 0xDC00 and i + 12 > end:  # its low half still to come
                    end = i
                    break
                i += 12 if 0xD800 <= code < 0xDC00 else 6
                continue
            i += 2
            continue
        i += 1
    try:
        return str(json.loads('"' + body[:min(i, end)] + '"'))
    except ValueError:
        return ""
