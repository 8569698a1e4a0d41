"""What a message carries of tool calls, kept in the ``messages.tool`` column (JSON).

An assistant message that called tools keeps its calls (id, tool name, the arguments' JSON
text as the model wrote them); a ``tool`` message keeps which call it answers, the tool's
name, how the call ended (ok, error, refused, cancelled) and how long it took. The message's
``content`` stays what the model wrote (the call's own text included) or the result the model
read: search, export and repair see them as text like any other message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from specchat.engine.decode.tool_calls import OPEN

RESULT_STATUSES = ("ok", "error", "refused", "cancelled")


@dataclass(frozen=True)
class CallRecord:
    """One call an assistant message made."""

    id: str
    name: str
    arguments: str  # JSON text, as written


@dataclass(frozen=True)
class ToolPart:
    """An assistant message's ``calls``, or a tool message's answer to ``call_id``."""

    calls: tuple[CallRecord, ...] = ()
    call_id: str | None = None  # a tool message: the call it answers
    name: str = ""  # a tool message: the tool that ran (or was refused)
    status: str = ""  # a tool message: ok | error | refused | cancelled
    seconds: float = 0.0

    @property
    def is_result(self) -> bool:
        return self.call_id is not None

    def to_json(self) -> str:
        if self.is_result:
            doc: dict[str, Any] = {"call_id": self.call_id, "name": self.name,
                                   "status": self.status, "seconds": round(self.seconds, 3)}
        else:
            doc = {"calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                             for c in self.calls]}
        return json.dumps(doc, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: object) -> ToolPart | None:
        """From the column (None, or a damaged cell: no tool part; never raises)."""
        if not isinstance(text, str):
            return None
        try:
            doc = json.loads(text)
        except ValueError:
            return None
        if not isinstance(doc, dict):
            return None
        if isinstance(doc.get("call_id"), str):
            status = doc.get("status")
            seconds = doc.get("seconds")
            return cls(call_id=doc["call_id"], name=str(doc.get("name") or ""),
                       status=status if status in RESULT_STATUSES else "error",
                       seconds=float(seconds) if isinstance(seconds, (int, float)) else 0.0)
        calls = []
        for c in doc.get("calls") or ():
            if isinstance(c, dict) and isinstance(c.get("id"), str) \
                    and isinstance(c.get("name"), str):
                args = c.get("arguments")
                calls.append(CallRecord(c["id"], c["name"], args if isinstance(args, str)
                                        else json.dumps(args)))
        return cls(calls=tuple(calls)) if calls else None


def prose(content: str, part: ToolPart | None) -> str:
    """What an assistant message said in words: with calls, the text before the first call
    (a forced call's reply begins inside the call: no words); else the whole text."""
    if part is None or not part.calls:
        return content
    if OPEN not in content:
        return ""
    return content.split(OPEN, 1)[0].strip()


def pretty_arguments(arguments: str) -> str:
    """A call's arguments as indented JSON (as written when they are not JSON)."""
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments
