"""Text from a model or a file, made safe to show on a terminal.

A model's reply, a chat title or a GGUF's metadata can hold escape sequences (``ESC]0;…`` renames
the terminal, ``ESC]52;…`` writes the clipboard, C1 ``\\x9b`` is a CSI on some terminals). Every
place that shows such text passes it through :func:`safe_text` first: control characters become
visible stand-ins, so the user sees what the model wrote and the terminal obeys none of it.
Newlines and tabs are kept. Storage and ``--json`` keep the exact text (JSON escapes it).

A leaf module: it imports nothing from specchat.
"""

from __future__ import annotations

KEPT = "\n\t"


def _table() -> dict[int, str]:
    table: dict[int, str] = {}
    for code in range(0x20):  # C0 → the Unicode control pictures (ESC → ␛, BEL → ␇)
        if chr(code) not in KEPT:
            table[code] = chr(0x2400 + code)
    table[0x7F] = "\u2421"  # DEL → ␡
    for code in range(0x80, 0xA0):  # C1 has no pictures: spell it as Python would
        table[code] = f"\\x{code:02x}"
    return table


_TABLE = _table()
_DROP: dict[int, None] = dict.fromkeys(_TABLE)
# In JSON only C1 and DEL need help: json.dumps escapes C0 itself, but not these.
_JSON_TABLE = {code: f"\\u{code:04x}" for code in (0x7F, *range(0x80, 0xA0))}


def control_table() -> dict[int, str]:
    """Code point → what is shown instead, for every character :func:`safe_text` replaces."""
    return dict(_TABLE)


def safe_text(text: str) -> str:
    """``text`` with every control character but newline and tab shown, not obeyed.

    A CR that ends a line (``\\r\\n``) is dropped: Windows line ends are not an attack.
    """
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    return text.translate(_TABLE)


def without_controls(text: str) -> str:
    """``text`` with every control character but newline and tab removed (``\\r\\n`` → ``\\n``):
    what goes to the clipboard, where a stand-in would be wrong and an ESC would be obeyed
    by the terminal it is pasted into."""
    return text.replace("\r\n", "\n").translate(_DROP)


def is_safe(text: str) -> bool:
    """Whether ``text`` holds nothing a terminal would obey (for tests and assertions)."""
    return not any(ord(c) in _TABLE for c in text)


def safe_json(line: str) -> str:
    """A JSON document from ``json.dumps(..., ensure_ascii=False)`` with DEL and C1 escaped
    too (they can only occur inside strings there, where ``\\u00XX`` means the same)."""
    return line.translate(_JSON_TABLE)
