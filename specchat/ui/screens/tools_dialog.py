"""This chat's tools (Ctrl+P → "Tools for this chat"): which configured MCP servers' tools the
chat offers the model, the tool choice, and the tools it always allows.

The servers are config.yaml's ``mcp_servers``; none ticked, tools are off. Their tools are
listed in a worker thread (which starts the servers, as a reply would), each ticked unless the
chat leaves it out. Each call still asks first, unless the user answered "always" for that
tool in this chat: the dialog lists those and can forget them. Dismisses with the new
:class:`ChatTools`, or None when cancelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, SelectionList, Static

from specchat.mcp_config import McpServer
from specchat.store.chat_tools import ChatTools
from specchat.textsafe import safe_text
from specchat.tools.hub import McpHub, ToolServerError
from specchat.ui.messages import ToolsListed

NO_SERVERS = ("No MCP servers are configured. Add them under mcp_servers: in config.yaml (a "
              "command, or a url), or import Claude Desktop's with `specchat mcp import FILE`; "
              "`specchat mcp list` shows what each offers.")
CHOICE_HINT = ("Tool choice: auto (the model decides), required (each turn's first reply must "
               "call a tool) or a tool's name (it must call that one).")


def server_label(name: str, server: McpServer) -> str:
    """``git · mcp-server-git --repository …`` (never the env or headers)."""
    where = server.describe()
    where = where if len(where) <= 60 else where[:57] + "..."
    return safe_text(f"{name} · {where}")


class ToolsScreen(ModalScreen[ChatTools | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "save", "Save", priority=True),
    ]
    DEFAULT_CSS = """
    ToolsScreen { align: center middle; }
    #tools-box { width: 90; max-width: 95%; height: auto; max-height: 95%; padding: 1 2;
                 border: round $accent; background: $surface; overflow-y: auto; }
    #tools-servers { height: auto; max-height: 8; margin-bottom: 1; background: $boost; }
    #tools-list { height: auto; max-height: 12; margin-bottom: 1; background: $boost; }
    #tools-choice { background: $boost; }
    #tools-hint, #tools-always-text { height: auto; color: $text-muted; }
    """

    def __init__(self, current: ChatTools, servers: Mapping[str, McpServer],
                 takes_tools: bool, hub: McpHub | None = None) -> None:
        super().__init__()
        self.current = current
        self.servers = dict(servers)
        self.takes_tools = takes_tools  # the model's template has a tool format
        self.hub = hub  # lists the servers' tools (None: the dialog shows servers only)
        self.listed: set[str] = set()  # SERVER/TOOL of every tool listed

    def compose(self) -> ComposeResult:
        with Vertical(id="tools-box"):
            yield Static("Tools for this chat", classes="dialog-title")
            if not self.servers:
                yield Static(NO_SERVERS, id="tools-hint", markup=False)
                with Horizontal(classes="dialog-buttons"):
                    yield Button("Close (Esc)", id="tools-cancel", compact=True)
                return
            yield Static("The MCP servers whose tools this chat offers the model (none "
                         "ticked: no tools). Each call asks you first.", id="tools-hint",
                         markup=False)
            chosen = set(self.current.servers)
            yield SelectionList[str](
                *((server_label(n, s), n, n in chosen) for n, s in self.servers.items()),
                id="tools-servers")
            yield Static("Their tools (unticked: left out of this chat):" if self.hub else "",
                         markup=False, classes="dialog-hint")
            yield Static("Listing the servers' tools (this starts them)…" if self.hub else "",
                         id="tools-listing", markup=False, classes="dialog-hint")
            yield SelectionList[str](id="tools-list")
            yield Static(CHOICE_HINT, markup=False, classes="dialog-hint")
            yield Input(value=self.current.choice, placeholder="auto", id="tools-choice",
                        compact=True)
            if self.current.always:
                yield Static("Always allowed in this chat: "
                             + safe_text(", ".join(self.current.always)),
                             id="tools-always-text", markup=False)
                yield Checkbox("Forget these: ask again for every call", id="tools-forget",
                               compact=True)
            if not self.takes_tools:
                yield Static("This model's chat template has no tool format: its replies "
                             "cannot call tools (name a model whose template has one, e.g. "
                             "--pair qwen-coder).", classes="dialog-hint", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Save (Ctrl+S)", variant="primary", id="tools-save", compact=True)
                yield Button("Cancel (Esc)", id="tools-cancel", compact=True)

    def on_mount(self) -> None:
        if self.servers:
            self.query_one("#tools-list").display = False
            self.query_one("#tools-servers", SelectionList).focus()
            if self.hub is not None:
                self.list_tools(self.hub, list(self.servers))

    @work(thread=True, exit_on_error=False, group="tools-list")
    def list_tools(self, hub: McpHub, names: list[str]) -> None:
        """Every configured server's tools (starting it), in a thread."""
        tools, failed = [], []
        for name in names:
            try:
                tools += hub.tools(name)
            except ToolServerError as e:
                failed.append(str(e))
            except Exception as e:  # never a traceback: the dialog says it
                failed.append(f"{name}: {type(e).__name__}: {e}")
        self.post_message(ToolsListed(tools, failed))

    def on_tools_listed(self, msg: ToolsListed) -> None:
        listing = self.query_one("#tools-listing", Static)
        listing.update(safe_text("; ".join(msg.failed)) if msg.failed else "")
        listing.display = bool(msg.failed)
        box = self.query_one("#tools-list", SelectionList)
        for t in msg.tools:
            key = f"{t.server}/{t.name}"
            self.listed.add(key)
            label = f"{t.name} · {t.server}" + (f" — {t.summary}" if t.summary else "")
            box.add_option((safe_text(label if len(label) <= 80 else label[:77] + "..."), key,
                            key not in self.current.off))
        box.display = bool(msg.tools)

    def chosen(self) -> ChatTools:
        """What the dialog shows now."""
        picked: list[str] = list(self.query_one("#tools-servers", SelectionList).selected)
        servers = tuple(n for n in self.servers if n in picked)  # in config order
        choice = self.query_one("#tools-choice", Input).value.strip() or "auto"
        forget = bool(self.query(Checkbox)) and self.query_one("#tools-forget", Checkbox).value
        ticked = set(self.query_one("#tools-list", SelectionList).selected)
        # Left out: the listed tools not ticked, and what was left out of a server not listed.
        off = [k for k in self.current.off if k not in self.listed]
        off += sorted(k for k in self.listed if k not in ticked)
        return ChatTools(servers, () if forget else self.current.always, choice, tuple(off))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "tools-save":
            self.action_save()
        else:
            self.action_cancel()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_save()

    def action_save(self) -> None:
        if not self.servers:
            self.dismiss(None)
            return
        self.dismiss(self.chosen())

    def action_cancel(self) -> None:
        self.dismiss(None)
