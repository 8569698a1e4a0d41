"""A tool's result as the text the model reads: text content as it is, structured content as
JSON, and a line in place of what a language model cannot read (an image, audio, a binary
resource). Untrusted text: control characters go through :func:`safe_text`, and a result
longer than :data:`MAX_RESULT_CHARS` is cut there, with a line that says so."""

from __future__ import annotations

import json
from typing import Any

from specchat.textsafe import safe_text

MAX_RESULT_CHARS = 200_000  # far above any context here; a guard against a 5 MB answer


def result_text(result: Any) -> str:
    """``result`` (an MCP ``CallToolResult``) as one text."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or ():
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(str(block.text))
        elif kind in ("image", "audio"):
            size = len(getattr(block, "data", "") or "") * 3 // 4
            parts.append(f"[{kind}: {getattr(block, 'mime_type', '?')}, {size:,} bytes, not "
                         "shown to the model]")
        elif kind == "resource":
            res = block.resource
            text = getattr(res, "text", None)
            parts.append(str(text) if text is not None
                         else f"[resource {res.uri}: binary, not shown to the model]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, indent=2))
    return clip(safe_text("\n".join(parts)))


def clip(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """``text``, cut at ``limit`` characters with a line saying how much was left out."""
    if len(text) <= limit:
        return text
    return (text[:limit] + f"\n[… cut: the result is {len(text):,} characters; the first "
            f"{limit:,} are shown]")


def looks_like_file(text: str) -> bool:
    """Whether a result reads as a file's text (several lines, not a one-line answer): such a
    result is also offered to the prediction drafter, as an attached file is."""
    return text.count("\n") >= 4 and len(text) >= 80
