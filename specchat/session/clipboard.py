"""What a copy puts on the clipboard: a message's raw text, or one of its fenced code blocks.

The text is the message as written (the Markdown source of a reply), minus every control
character but newline and tab (:func:`~specchat.textsafe.without_controls`): a model's ESC
sequence must not reach the terminal the text is pasted into. No Textual here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specchat.textsafe import without_controls

# CommonMark: up to 3 spaces, then 3+ backticks or tildes; an info string (no backtick in it
# after a backtick fence).
_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})([^`]*)$")


@dataclass(frozen=True)
class CodeBlock:
    language: str  # the info string's first word ("" when none)
    code: str  # the lines between the fences, without the fences

    def label(self, width: int = 60) -> str:
        """``python · def f(x):  (12 lines)`` for a picker."""
        lines = self.code.splitlines()
        first = next((ln.strip() for ln in lines if ln.strip()), "(empty)")
        if len(first) > width:
            first = first[: width - 1] + "…"
        n = len(lines)
        return f"{self.language or 'code'} · {first}  ({n} line{'s' if n != 1 else ''})"


def code_blocks(text: str) -> list[CodeBlock]:
    """The fenced code blocks of a Markdown text, in order; one left open runs to the end
    (as CommonMark reads it)."""
    blocks: list[CodeBlock] = []
    lines = text.replace("\r\n", "\n").split("\n")
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        close = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not close.match(lines[i]):
            line = lines[i]
            # Content lines lose up to the opening fence's indentation (CommonMark).
            strip = min(indent, len(line) - len(line.lstrip(" ")))
            body.append(line[strip:])
            i += 1
        i += 1  # past the closing fence
        language = info.split()[0] if info else ""
        blocks.append(CodeBlock(language, "\n".join(body)))
    return blocks


def clipboard_text(text: str) -> str:
    """``text`` as the clipboard gets it: exact, but with no control characters."""
    return without_controls(text)
