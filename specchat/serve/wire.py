"""The bytes this server writes: compact JSON, and server-sent events.

A stream is ``data:`` lines (one JSON document each: JSON escapes newlines, so one line always
holds it), named by an ``event:`` line where the Responses API names them, ended by OpenAI's
``data: [DONE]`` line where the shape has one; a failure after the stream began (its status
already 200) is an error event, as llama-server sends one. JSON is compact, keeps non-ASCII
text as it is, and refuses NaN (which JSON has not).
"""

from __future__ import annotations

import json
from typing import Any

from specchat.serve.api_errors import ApiError

DONE = b"data: [DONE]\n\n"


def dumps(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def event(doc: Any, name: str | None = None) -> bytes:
    """One server-sent event, named (an ``event:`` line, as the Responses API's are) or not.
    JSON escapes newlines, so one ``data:`` line always holds it."""
    head = b"event: " + name.encode("utf-8") + b"\n" if name else b""
    return head + b"data: " + dumps(doc).encode("utf-8") + b"\n\n"


def error_event(error: ApiError, named: bool = False) -> bytes:
    """A failure after the stream began (its status is already 200): an error event, as
    llama-server sends one (the Responses API's ``error`` event where named), then the stream
    ends."""
    if named:
        e = error.body()["error"]
        return event({"type": "error", "sequence_number": 0, **e}, "error")
    return event(error.body())
