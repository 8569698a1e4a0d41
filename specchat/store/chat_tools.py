"""Which tools a chat offers the model, kept in ``chats.tools`` (JSON).

``servers``: the configured MCP servers (config.yaml's ``mcp_servers``) whose tools the chat
offers; none: tools are off. ``off``: tools of those servers left out, as ``SERVER/TOOL``
(the tool's own name). ``always``: tools the user answered "Always allow this tool in
this chat" for; they run without asking again, in this chat only. ``choice``: auto (the model
decides), required (every turn's first reply must call a tool) or a tool's name (it must call
that one). The store only keeps what the user chose; a server named here that is no longer
configured is left out when the chat offers its tools, with a notice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ChatTools:
    servers: tuple[str, ...] = ()
    always: tuple[str, ...] = ()
    choice: str = "auto"
    off: tuple[str, ...] = ()

    def offers(self, server: str, tool: str) -> bool:
        """Whether the chat offers ``tool`` of ``server`` (its server chosen, it not left out)."""
        return server in self.servers and f"{server}/{tool}" not in self.off

    @property
    def on(self) -> bool:
        return bool(self.servers)

    def allowing(self, name: str) -> ChatTools:
        """With ``name`` always allowed."""
        return self if name in self.always else replace(self, always=(*self.always, name))

    def to_json(self) -> str | None:
        if self == NO_TOOLS:
            return None
        return json.dumps({"servers": list(self.servers), "always": list(self.always),
                           "choice": self.choice, "off": list(self.off)}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: object) -> ChatTools:
        """From the column (NULL, absent at an older schema, or damaged: no tools)."""
        if not isinstance(text, str):
            return NO_TOOLS
        try:
            doc = json.loads(text)
        except ValueError:
            return NO_TOOLS
        if not isinstance(doc, dict):
            return NO_TOOLS

        def names(key: str) -> tuple[str, ...]:
            value = doc.get(key)
            return tuple(dict.fromkeys(x for x in value if isinstance(x, str))) \
                if isinstance(value, list) else ()

        choice = doc.get("choice")
        return cls(names("servers"), names("always"),
                   choice if isinstance(choice, str) and choice.strip() else "auto",
                   names("off"))


NO_TOOLS = ChatTools()
