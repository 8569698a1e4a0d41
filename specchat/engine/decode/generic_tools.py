"""Tool calls for a model whose chat template has no format for them, as llama.cpp's generic
handler does: the tools are described in the system message, and the reply is constrained by
a grammar to one JSON object, ``{"tool_calls": [{"name": …, "arguments": {…}}, …]}`` to call
tools or ``{"content": "…"}`` to answer.

Earlier turns are written in the same JSON (an assistant's calls) or as a user's
``{"tool_response": …}`` (a tool's result), since such a template takes neither tool calls nor
tool messages. The reply is read once it is whole: :class:`GenericCallStream` holds the text
back until the end, then gives the content or the calls (a reply cut short by the token limit
gives what it holds as content)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specchat.engine.decode.chat_template import Message, ToolCall
from specchat.engine.decode.tool_calls import CallDelta, new_call_id

# JSON as the prompt shows it, not free whitespace anywhere: a model then cannot pad a reply
# out to its token limit.
COMPACT = {"whitespace_flexible": False}


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
    """A whole reply's content and calls."""
    doc = None
    for ending in ("", '"}', "}"):  # a reply cut short in its content's string
        try:
            doc = json.loads(text + ending)
            break
        except ValueError:
            continue
    if not isinstance(doc, dict):
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
    return (content, []) if isinstance(content, str) else (text, [])


@dataclass
class GenericCallStream:
    """:class:`~specchat.engine.decode.tool_calls.ToolCallStream`'s interface for the JSON
    reply: nothing comes out until :meth:`finish`."""

    names: frozenset[str] = frozenset()
    calls: list[ToolCall] = field(default_factory=list)
    _text: list[str] = field(default_factory=list)

    def feed(self, text: str) -> tuple[str, list[CallDelta]]:
        self._text.append(text)
        return "", []

    def finish(self) -> tuple[str, list[CallDelta]]:
        content, self.calls = read_generic("".join(self._text), self.names)
        self._text = []
        return content, [CallDelta(i, c.id, c.name, c.arguments)
                         for i, c in enumerate(self.calls)]
