"""A conversation's messages, as OpenAI's API carries them, and as a chat template reads them.

:class:`Message` and :class:`ToolCall` are what every layer above the engine hands the chat
template (:mod:`.chat_template`): the session, the server, the tools, the benchmarks.
:meth:`Message.as_dict` is the mapping a Hugging Face template expects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """A function call an assistant message made, as OpenAI's API carries it."""

    id: str
    name: str
    arguments: str  # JSON text


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant" | "tool"
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant message's calls
    tool_call_id: str | None = None  # a tool message: the call it answers

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            # Templates take arguments as a mapping (Hugging Face's convention: Qwen's writes
            # `arguments | tojson`); OpenAI sends JSON text.
            d["tool_calls"] = [{"id": c.id, "type": "function",
                                "function": {"name": c.name, "arguments": _arguments(c.arguments)}}
                               for c in self.tool_calls]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        return d


def _arguments(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text
