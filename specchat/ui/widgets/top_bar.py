"""The chat screen's top bar: the chat's title and what holds for its replies (its own system
prompt, a reply format, its tools), and what the user should know about it (read-only here,
messages not saved yet). The bar shows its ``title`` reactive; :func:`topbar_text` makes it."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from specchat.session.conversation import Conversation
from specchat.store.chat_tools import ChatTools
from specchat.textsafe import safe_text


def tools_part(tools: ChatTools) -> Text | None:
    """``  · tools: git, notes`` for the top bar (None: no tools)."""
    if not tools.on:
        return None
    return Text(f"  · tools: {safe_text(', '.join(tools.servers))}", "bold")


def topbar_text(c: Conversation, read_only: bool, unsaved: int) -> Text:
    out = Text(f"specchat · {safe_text(c.title)}")  # text, not markup
    if c.preset is not None or c.system_prompt is not None:
        out.append(f"  · prompt: {safe_text(c.preset or 'its own')}", "dim")
    if c.reply_format.constrained:  # why the replies are JSON (F10)
        out.append(f"  · replies: {c.reply_format.label}", "bold")
    tools = tools_part(c.tools)
    if tools is not None:
        out.append(tools)
    if read_only:
        out.append("  · read-only: open in another specchat", "bold yellow")
    if unsaved:
        out.append(f"  · {unsaved} message{'s' if unsaved > 1 else ''} not saved yet "
                   "(retrying)", "bold red")
    return out


class TopBar(Static):
    DEFAULT_CSS = """
    TopBar { height: 1; padding: 0 1; background: $panel; color: $text; text-style: bold; }
    """

    title: reactive[Text] = reactive(Text, init=False)  # drawn only when its text changes

    def __init__(self, title: Text, **kwargs: object) -> None:
        super().__init__(title, **kwargs)  # type: ignore[arg-type]
        self.set_reactive(TopBar.title, title)

    def watch_title(self, title: Text) -> None:
        self.update(title)
