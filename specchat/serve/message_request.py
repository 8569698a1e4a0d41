"""A chat's messages, checked: their roles, their text and an assistant's tool calls.

A message's content is a string, an array of text parts (joined) or null; a part of any other
type (an image, a file) is a 400 naming it, since this server reads text only. The Responses
API reads its input items' text with the same :func:`content_text`, with its own part types.
"""

from __future__ import annotations

from typing import Any

from specchat.engine.decode.messages import Message, ToolCall
from specchat.serve.api_errors import bad_request
from specchat.serve.fields import shown, unicode_text, wrong_type
from specchat.serve.tool_request import tool_calls

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
         "tool": "tool"}


def content_text(value: Any, param: str, kinds: tuple[str, ...] = ("text",),
                 expected: str = "'text'") -> str:
    """A message's text: a string, or an array of text parts (joined), or null. ``kinds``: the
    part types read as text (``expected`` names them in the error for any other)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return unicode_text(value, param)
    if not isinstance(value, list):
        raise wrong_type(param, "a string or an array of content parts", value)
    texts = []
    for j, part in enumerate(value):
        where = f"{param}[{j}]"
        if not isinstance(part, dict):
            raise wrong_type(where, "an object", part)
        kind = part.get("type")
        if kind not in kinds:
            raise bad_request(f"'{where}.type' must be {expected}: this server reads text only, "
                              f"not {shown(kind)!r}", f"{where}.type")
        text = part.get("text")
        if not isinstance(text, str):
            raise wrong_type(f"{where}.text", "a string", text)
        texts.append(unicode_text(text, f"{where}.text"))
    return "".join(texts)


def messages(value: Any) -> tuple[Message, ...]:
    if value is None:
        raise bad_request("'messages' is required", "messages", "missing_required_parameter")
    if not isinstance(value, list):
        raise wrong_type("messages", "an array of messages", value)
    if not value:
        raise bad_request("'messages' is empty: give at least one message", "messages")
    out = []
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise wrong_type(where, "an object", m)
        role = m.get("role")
        if not isinstance(role, str):
            raise wrong_type(f"{where}.role", "a string", role)
        if role not in ROLES:
            raise bad_request(f"'{where}.role' must be system, developer, user, assistant or "
                              f"tool, not {role[:40]!r}", f"{where}.role")
        calls: tuple[ToolCall, ...] = ()
        if m.get("tool_calls") is not None:
            if role != "assistant":
                raise bad_request(f"'{where}.tool_calls' is an assistant message's",
                                  f"{where}.tool_calls")
            calls = tool_calls(m["tool_calls"], f"{where}.tool_calls")
        call_id = m.get("tool_call_id")
        if role == "tool":
            if not isinstance(call_id, str):
                raise bad_request(f"'{where}.tool_call_id' is required: the id of the call "
                                  "this message answers", f"{where}.tool_call_id",
                                  "missing_required_parameter")
        else:
            call_id = None
        out.append(Message(ROLES[role], content_text(m.get("content"), f"{where}.content"),
                           calls, call_id))
    return tuple(out)
