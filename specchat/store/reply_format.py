"""A chat's reply format: free text, any JSON object, a JSON schema or a grammar (Lark or GBNF).

The chat keeps the schema's or the grammar's text itself, not the path of a file it came from
(a file may move or change). The text stays when the kind changes (back to free text, say), so
switching back finds it. Compiling it is the engine's (``engine.decode.grammar``), through
:mod:`specchat.session.reply_format`; the store only keeps what the user chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FormatKind = Literal["text", "json_object", "json_schema", "grammar"]
FORMAT_KINDS: tuple[FormatKind, ...] = ("text", "json_object", "json_schema", "grammar")
# How the app names each kind (the top bar, notices).
FORMAT_LABELS: dict[FormatKind, str] = {"text": "text", "json_object": "JSON object",
                                        "json_schema": "JSON schema", "grammar": "grammar"}


@dataclass(frozen=True)
class ReplyFormat:
    kind: FormatKind = "text"
    source: str | None = None  # the schema's or the grammar's text (kept for any kind)

    @property
    def constrained(self) -> bool:
        """Whether replies follow a grammar (anything but free text)."""
        return self.kind != "text"

    @property
    def uses_source(self) -> bool:
        """Whether the kind reads ``source`` (a schema, a grammar)."""
        return self.kind in ("json_schema", "grammar")

    @property
    def label(self) -> str:
        return FORMAT_LABELS[self.kind]

    @classmethod
    def from_columns(cls, kind: object, source: object) -> ReplyFormat:
        """From the ``chats`` row's columns (NULL or absent at an older schema: free text)."""
        known: FormatKind = next((k for k in FORMAT_KINDS if k == kind), "text")
        return cls(known, source if isinstance(source, str) else None)


TEXT = ReplyFormat()
