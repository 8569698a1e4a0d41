"""The tool calls a reply writes, read out of its text as it streams.

Templates that take tools (:attr:`ChatTemplate.takes_tools`) have the model write each call as
``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` (Qwen2.5, Hermes and their
fine-tunes). :class:`ToolCallStream` takes the reply's text piece by piece and gives back the
text that is the reply's content and, for each call, OpenAI's deltas: the first with the call's
id and name, then its arguments in fragments as they are written. Fed the whole text at once it
gives the same calls, so a streamed and a whole reply agree.

Small models often leave the tags out and answer with the call's JSON alone, in a code fence or
bare. A reply that is nothing but such an object (or a list of them), naming an offered tool,
is read as calls too; while a reply still could be one (it begins with ``{``, ``[`` or a
fence) its text is held back, up to :data:`BARE_MAX` characters.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from specchat.engine.decode.grammar import compile_grammar
from specchat.engine.decode.messages import ToolCall

OPEN, CLOSE = "<tool_call>", "</tool_call>"
BARE_MAX = 4000
_FENCE = re.compile(r"\A\s*```(?:json)?\s*\n?(.*?)\n?\s*```\s*\Z", re.DOTALL)
# The opening of a call's JSON up to its arguments, when the model writes the name first (as
# the templates show it): from there the arguments can stream.
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*(?=\S)')


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _held(text: str, tag: str) -> int:
    """Where the longest end of ``text`` that could be the start of ``tag`` begins."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return len(text) - n
    return len(text)


@dataclass
class CallDelta:
    """One piece of a call: ``id`` and ``name`` on its first, argument text on any."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class _Call:
    index: int
    id: str
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


@dataclass
class ToolCallStream:
    """Text in, (content, call deltas) out. ``calls`` holds the calls completed so far."""

    calls: list[ToolCall] = field(default_factory=list)
    names: frozenset[str] = frozenset()  # the offered tools (a bare call must name one)
    _pending: str = ""
    # start (nothing out yet) | bare (a reply that may be a call's JSON alone) | content |
    # head (a call before its arguments) | args | whole (a call read at its end)
    _state: str = "start"
    _call: _Call | None = None

    def feed(self, text: str) -> tuple[str, list[CallDelta]]:
        self._pending += text
        content: list[str] = []
        deltas: list[CallDelta] = []
        while self._step(content, deltas, final=False):
            pass
        return "".join(content), deltas

    def finish(self) -> tuple[str, list[CallDelta]]:
        """The rest, at the reply's end: a call cut short (a stop at its closing tag, the
        token limit) is completed as far as it was written."""
        content: list[str] = []
        deltas: list[CallDelta] = []
        while self._step(content, deltas, final=True):
            pass
        return "".join(content), deltas

    def _step(self, content: list[str], deltas: list[CallDelta], final: bool) -> bool:
        """Move on as far as the text allows; True when another step may move further."""
        p = self._pending
        if self._state == "start":
            lead = p.lstrip()
            if not lead and not final:
                return False
            could_be_bare = bool(self.names) and lead[:1] in ("{", "[", "`")
            self._state = "bare" if could_be_bare else "content"
            return True
        if self._state == "bare":
            if OPEN in p or len(p) > BARE_MAX:
                self._state = "content"
                return True
            if not final:
                return False
            calls = self._bare(p)
            if calls:
                for c in calls:
                    deltas.append(CallDelta(len(self.calls), c.id, c.name, c.arguments))
                    self.calls.append(c)
                self._pending = ""
                return False
            self._state = "content"
            return True
        if self._state == "content":
            at = p.find(OPEN)
            if at >= 0:
                self._out(content, p[:at])
                self._pending = p[at + len(OPEN):]
                self._call = _Call(len(self.calls), new_call_id())
                self._state = "head"
                return True
            keep = len(p) if final else _held(p, OPEN)
            self._out(content, p[:keep])
            self._pending = p[keep:]
            return False
        call = self._call
        assert call is not None
        end = p.find(CLOSE)
        if self._state == "head":
            m = _HEAD.match(p)
            if m is not None and (end < 0 or m.end() <= end):
                if p[m.end()] == '"':  # arguments as a JSON string: read at the call's end
                    self._state = "whole"
                    return True
                call.name = _unquote(m.group(1))
                deltas.append(CallDelta(call.index, call.id, call.name))
                self._pending = p[m.end():]
                self._state = "args"
                return True
            if end >= 0 or final:  # not written name first: read whole
                self._state = "whole"
                return True
            return False
        if self._state == "args":
            if end >= 0 or final:
                body = (p[:end] if end >= 0 else p).rstrip()
                if body.endswith("}"):
                    body = body[:-1].rstrip()  # the call's own closing brace
                self._args(call, deltas, body)
                self._close(end)
                return end >= 0
            keep = _args_held(p)
            if keep > 0:
                self._args(call, deltas, p[:keep])
                self._pending = p[keep:]
            return False
        # whole: the call is read once its closing tag (or the reply's end) is there
        if end < 0 and not final:
            return False
        body = p[:end] if end >= 0 else p
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("name"), str):
            args = doc.get("arguments", doc.get("parameters", {}))
            call.name = doc["name"]
            call.arguments = [args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)]
            deltas.append(CallDelta(call.index, call.id, call.name, call.arguments[0]))
            self._close(end)
        else:  # not a call after all: its text is content
            self._out(content, OPEN + body + (CLOSE if end >= 0 else ""))
            self._call = None
            self._state = "content"
            self._pending = p[end + len(CLOSE):] if end >= 0 else ""
        return end >= 0

    def _bare(self, text: str) -> list[ToolCall]:
        m = _FENCE.match(text)
        try:
            doc = json.loads(m.group(1) if m else text)
        except ValueError:
            return []
        items = doc if isinstance(doc, list) else [doc]
        out = []
        for item in items:
            if not (isinstance(item, dict) and item.get("name") in self.names):
                return []
            args = item.get("arguments", item.get("parameters", {}))
            if not isinstance(args, (dict, str)):
                return []
            out.append(ToolCall(new_call_id(), item["name"], args if isinstance(args, str)
                                else json.dumps(args, ensure_ascii=False)))
        return out

    def _args(self, call: _Call, deltas: list[CallDelta], text: str) -> None:
        if not call.arguments:
            text = text.lstrip()
        if text:
            call.arguments.append(text)
            deltas.append(CallDelta(call.index, arguments=text))

    def _close(self, end: int) -> None:
        call = self._call
        assert call is not None and call.name is not None
        self.calls.append(ToolCall(call.id, call.name, "".join(call.arguments)))
        self._call = None
        self._state = "content"
        self._pending = self._pending[end + len(CLOSE):] if end >= 0 else ""

    def _out(self, content: list[str], text: str) -> None:
        # Between and after calls the model writes line breaks, not content.
        if text and not (self.calls and not text.strip()):
            content.append(text)


def _args_held(text: str) -> int:
    """How much of a call's arguments can go out: not the end that may be its closing brace
    and the start of the closing tag."""
    keep = _held(text, CLOSE)
    head = text[:keep].rstrip()
    if head.endswith("}"):
        return len(head) - 1
    return len(head)


def _unquote(raw: str) -> str:
    try:
        value = json.loads(f'"{raw}"')
    except ValueError:
        return raw
    return value if isinstance(value, str) else raw


class CallReader(Protocol):
    """A reply's text in, (content, call deltas) out: a template's calls or generic JSON ones."""

    def feed(self, text: str) -> tuple[str, list[CallDelta]]: ...

    def finish(self) -> tuple[str, list[CallDelta]]: ...


def read_stream(reader: CallReader, text: str, end: bool = False) -> tuple[str, list[CallDelta]]:
    """``reader`` fed ``text``, and at the reply's ``end`` finished too."""
    content, deltas = reader.feed(text)
    if end:
        more, rest = reader.finish()
        content, deltas = content + more, deltas + rest
    return content, deltas


def read_calls(text: str, names: frozenset[str] = frozenset()) -> tuple[str, list[ToolCall]]:
    """A whole reply's content and calls (``names``: the offered tools)."""
    stream = ToolCallStream(names=names)
    a, _ = stream.feed(text)
    b, _ = stream.finish()
    return a + b, stream.calls


def call_start(choice: str) -> str:
    """What a reply that must call a tool begins with, put after the prompt: the opening of a
    call, and the function's name when one is named (``choice``: auto, none, required or a
    name). The model writes the rest, sampled as always from the target's distribution given
    that start."""
    if choice == "required":
        return f'{OPEN}\n{{"name": "'
    if choice not in ("auto", "none"):
        return f'{OPEN}\n{{"name": {json.dumps(choice)}, "arguments": '
    return ""


def call_grammar(listed: Sequence[Mapping[str, Any]], choice: str) -> str | None:
    """For a call the reply must make (``required``, a named function): the grammar of what
    follows :func:`call_start` — the function's name where any may be called, its arguments as
    its ``parameters`` schema says, the call's closing brace — so the reply is the masked
    target's, a valid call. None for ``auto`` and ``none``. ``listed``: OpenAI's tool list.
    Raises :class:`~specchat.engine.decode.grammar.GrammarError` for a schema a call cannot
    follow."""
    if choice in ("auto", "none"):
        return None

    def args(t: Mapping[str, Any]) -> str:
        # JSON as the templates show calls (", " and ": "), not any whitespace anywhere: a
        # model then cannot pad the arguments out to the token limit.
        schema = dict(t["function"].get("parameters") or {"type": "object"})
        schema.setdefault("x-guidance", {"whitespace_flexible": False, "item_separator": ", ",
                                         "key_separator": ": "})
        return json.dumps(schema)

    if choice == "required":
        # After '{"name": "': the name, then its arguments (names are [a-zA-Z0-9_-]).
        rules = [f'c{i}: "{t["function"]["name"]}\\", \\"arguments\\": " %json {args(t)} "}}"'
                 for i, t in enumerate(listed)]
        text = "start: " + " | ".join(f"c{i}" for i in range(len(listed))) + "\n" \
            + "\n".join(rules)
    else:
        tool = next(t for t in listed if t["function"]["name"] == choice)
        text = f'start: %json {args(tool)} "}}"'
    return compile_grammar("grammar", text)
