"""Tool calls in the app, driven with Pilot: a tiny real model whose template takes tools, under
the real speculative decoder, calls the FastMCP test server (tests/fixtures/mcp_test_server.py)
over stdio. A forced call shows as a card; nothing runs until it is answered (Allow once,
Always allow this tool in this chat, Deny); the result goes back to the model and the reply
goes on; Esc during a hanging call cancels it; the chat's tools and the calls are saved."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Input, SelectionList
from ui_helpers import app_test, make_services, ready, screen_with, tiny_runtime, wait_for

from specchat.config import UserConfig
from specchat.devtools.tiny_models import TOOLS_TEMPLATE, TinySpec, json_vocabulary, write_tiny_model
from specchat.engine.decode.sampling import SamplerSettings
from specchat.mcp_config import McpServer
from specchat.store.chat_tools import ChatTools
from specchat.ui.app import SpecchatApp
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.screens.tools_dialog import ToolsScreen
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.tool_card import ToolCard, TranscriptNoteLine
from specchat.ui.widgets.transcript import AssistantMessage

SIZE = (120, 40)
TEST_SERVER = Path(__file__).resolve().parent / "fixtures" / "mcp_test_server.py"
SAMPLING = SamplerSettings(temperature=0, max_tokens=24)


@pytest.fixture(scope="module")
def tools_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny JSON target with a template that takes tools (as tests/test_ask_tools.py)."""
    return write_tiny_model(tmp_path_factory.mktemp("tools") / "tools.gguf", TinySpec(seed=1),
                            tokens=json_vocabulary(), chat_template=TOOLS_TEMPLATE,
                            name="tiny-tools")


def services_for(tmp_path: Path, target: Path, draft: Path, **config: Any) -> Any:
    log = tmp_path / "calls.log"
    server = McpServer("t", command=sys.executable, args=(str(TEST_SERVER),),
                       env={"MCP_TEST_LOG": str(log)}, timeout_s=20)
    cfg = UserConfig(sampling=SAMPLING, gamma=3, drafter="model", mcp_servers={"t": server},
                     **config)
    return make_services(tmp_path, tiny_runtime(target, draft, n_ctx=4096), config=cfg), log


def calls_run(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


async def send(pilot: Any, chat: ChatScreen, text: str) -> None:
    await pilot.click(ChatInput)
    await pilot.press(*text, "enter")


async def card(pilot: Any, chat: ChatScreen, n: int = 1, asking: bool = True) -> ToolCard:
    """The ``n``-th card, once it is there (and, ``asking``, puts its question)."""
    def there() -> bool:
        cards = list(chat.query(ToolCard))
        # Its parts drawn (a card can be told things before its children mount), and asking.
        return (len(cards) >= n and bool(cards[n - 1].query(".tool-state"))
                and bool(cards[n - 1].query("#tool-deny"))
                and (not asking or cards[n - 1].asking))
    await wait_for(pilot, there, timeout=120)
    return list(chat.query(ToolCard))[n - 1]


async def turn_ended(pilot: Any, chat: ChatScreen) -> None:
    await wait_for(pilot, lambda: chat.job is None and chat.job_widget is None, timeout=60)
    await pilot.pause()


def topbar(chat: ChatScreen) -> str:
    return str(chat.query_one("#topbar").render())


@app_test
async def test_a_forced_call_is_asked_run_and_answered_in_the_transcript(
        tmp_path: Path, tools_target: Path, tiny_json_draft: Path) -> None:
    services, log = services_for(tmp_path, tools_target, tiny_json_draft)
    store = services.store
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        # The dialog: tick the server, force the color tool.
        chat.action_chat_tools()
        dialog = await screen_with(pilot, ToolsScreen, "#tools-servers")
        dialog.query_one("#tools-servers", SelectionList).select("t")
        dialog.query_one("#tools-choice", Input).value = "color"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        assert chat.conversation.tools == ChatTools(("t",), (), "color")
        assert "tools: t" in topbar(chat)

        await send(pilot, chat, "paint it")
        first = await card(pilot, chat)
        assert first.call.name == "color" and first.server == "t"
        assert '"name": "' in str(first.query_one(".tool-args").render())  # pretty JSON
        assert calls_run(log) == []  # nothing runs before the answer
        assert chat.job is not None  # the reply waits for it
        # The question has the focus: Enter allows once.
        await wait_for(pilot, lambda: isinstance(chat.focused, Button)
                       and chat.focused.id == "tool-once")
        await pilot.press("enter")
        await turn_ended(pilot, chat)
        assert calls_run(log) == ["color"]
        assert first.turn is not None and first.turn.tool is not None
        assert first.turn.tool.status == "ok" and first.turn.text.startswith("painted ")
        # Collapsed; Enter (or a click) shows the result, and hides it again.
        result = first.query_one(".tool-result")
        assert not result.display
        first.focus()
        await pilot.press("enter")
        assert result.display and "painted" in str(result.render())
        await pilot.press("enter")
        assert not result.display

        # The tree: the call, its result, the reply that went on after it.
        turns = chat.conversation.turns
        assert [t.role for t in turns] == ["user", "assistant", "tool", "assistant"]
        assert turns[1].calls[0].name == "color" and turns[3].text
        replies = list(chat.query(AssistantMessage))
        assert len(replies) == 2 and replies[1].turn is turns[3]
        chat_id = chat.conversation.chat_id
        assert chat_id is not None
        rows = store.thread(chat_id)
        assert [m.role for m in rows] == ["user", "assistant", "tool", "assistant"]
        assert rows[2].tool is not None and rows[2].tool.call_id == rows[1].tool.calls[0].id  # type: ignore[union-attr]
        assert all(m.status == "done" for m in rows)
        stats = rows[3].stats
        assert stats is not None and stats.generation.generated_tokens > 24  # both rounds

        # Opened again from the store: the same card, with its result.
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: chat.conversation.chat_id is None)
        chat.open_chat(chat_id)
        await wait_for(pilot, lambda: len(chat.query(".tool-state")) == 1)
        again = chat.query_one(ToolCard)
        assert again.turn is not None and again.call.name == "color" and not again.asking
        assert "✓ ran" in str(again.query_one(".tool-state").render())


@app_test
async def test_deny_never_runs_and_always_stops_asking_in_this_chat(
        tmp_path: Path, tools_target: Path, tiny_json_draft: Path) -> None:
    services, log = services_for(tmp_path, tools_target, tiny_json_draft)
    store = services.store
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        chat.session.set_tools(ChatTools(("t",), (), "color"))
        await send(pilot, chat, "paint it")
        first = await card(pilot, chat)
        first.query_one("#tool-deny", Button).press()
        await turn_ended(pilot, chat)
        assert calls_run(log) == []  # the server never saw it
        assert first.turn is not None and first.turn.tool is not None
        assert first.turn.tool.status == "refused"
        assert "denied" in str(first.query_one(".tool-state").render())
        assert chat.conversation.turns[-1].role == "assistant"  # the reply went on

        await send(pilot, chat, "again")
        second = await card(pilot, chat, 2)
        second.query_one("#tool-always", Button).press()
        await turn_ended(pilot, chat)
        assert calls_run(log) == ["color"]
        chat_id = chat.conversation.chat_id
        assert chat_id is not None
        assert store.get_chat(chat_id).tools.always == ("color",)  # saved with the chat

        await send(pilot, chat, "once more")  # not asked: it runs
        third = await card(pilot, chat, 3, asking=False)
        await turn_ended(pilot, chat)
        assert not third.asking and third.turn is not None
        assert calls_run(log) == ["color", "color"]

        # Another chat asks again: "always" is per chat.
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: chat.conversation.chat_id is None)
        chat.session.set_tools(ChatTools(("t",), (), "color"))
        await send(pilot, chat, "paint")
        fourth = await card(pilot, chat, 1)
        assert fourth.asking
        await pilot.press("escape")
        await turn_ended(pilot, chat)
        assert calls_run(log) == ["color", "color"]
        assert fourth.turn is not None and fourth.turn.tool is not None
        assert fourth.turn.tool.status == "cancelled"


@app_test
async def test_esc_cancels_a_hanging_call_and_the_chat_carries_on(
        tmp_path: Path, tools_target: Path, tiny_json_draft: Path) -> None:
    import time

    services, _ = services_for(tmp_path, tools_target, tiny_json_draft, max_tool_rounds=1)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        chat.session.set_tools(ChatTools(("t",), ("hang", "quit", "color"), "hang"))
        await send(pilot, chat, "wait")
        hang = await card(pilot, chat, asking=False)
        await wait_for(pilot, lambda: "running" in str(hang.query_one(".tool-state").render()))
        await pilot.pause(0.5)
        t0 = time.monotonic()
        await pilot.press("escape")
        await turn_ended(pilot, chat)
        assert time.monotonic() - t0 < 10  # not the server's 20 s limit, nor its hour
        assert hang.turn is not None and hang.turn.tool is not None
        assert hang.turn.tool.status == "cancelled"
        assert "cancelled" in str(hang.query_one(".tool-state").render())
        assert chat.conversation.turns[1].status == "cancelled"

        # A server that dies mid-call: one line on the card, and the chat goes on.
        chat.session.set_tools(ChatTools(("t",), ("hang", "quit", "color"), "quit"))
        await send(pilot, chat, "stop")
        quit_card = await card(pilot, chat, 2, asking=False)
        await turn_ended(pilot, chat)
        state = str(quit_card.query_one(".tool-state").render())
        assert "✗ failed · error: MCP server 't' stopped during the call (quit)" in state
        assert "\n" not in state
        # max_tool_rounds 1: the transcript says the turn stopped there.
        notes = [str(n.render()) for n in chat.query(TranscriptNoteLine)]
        assert any("stopped after 1 rounds of tool calls (max_tool_rounds)" in n for n in notes)

        # The server starts again for the next call.
        chat.session.set_tools(ChatTools(("t",), ("color",), "color"))
        await send(pilot, chat, "paint")
        ok = await card(pilot, chat, 3, asking=False)
        await turn_ended(pilot, chat)
        assert ok.turn is not None and ok.turn.tool is not None and ok.turn.tool.status == "ok"

        # A tool the chat leaves out is not offered, even as its forced choice.
        chat.session.set_tools(ChatTools(("t",), ("boom",), "boom", ("t/boom",)))
        await send(pilot, chat, "boom")
        await turn_ended(pilot, chat)
        notes = [str(n.render()) for n in chat.query(TranscriptNoteLine)]
        assert any("the chat's tool choice 'boom' is not a tool offered now" in n for n in notes)
        assert not any(c.call.name == "boom" for c in chat.query(ToolCard))


@app_test
async def test_a_template_without_tools_says_so_when_tools_are_switched_on(
        tmp_path: Path, tiny_target: Path, tiny_draft: Path) -> None:
    services, log = services_for(tmp_path, tiny_target, tiny_draft)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        chat.action_chat_tools()
        dialog = await screen_with(pilot, ToolsScreen, "#tools-servers")
        assert "has no tool format" in "".join(str(s.render()) for s in dialog.query(".dialog-hint"))
        dialog.query_one("#tools-servers", SelectionList).select("t")
        # The servers' tools are listed (the server starts for it), each ticked: one left out.
        listed = dialog.query_one("#tools-list", SelectionList)
        await wait_for(pilot, lambda: listed.option_count == 8, timeout=30)
        assert set(listed.selected) == {f"t/{n}" for n in ("boom", "color", "echo", "hang", "huge",
                                                           "junk", "quit", "read")}
        listed.deselect("t/boom")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        assert chat.conversation.tools == ChatTools(("t",), (), "auto", ("t/boom",))
        await pilot.pause()
        notes = [n.message for n in list(app._notifications)]
        assert any("chat template does not take tools" in n and "qwen-coder" in n
                   for n in notes), notes
        # A message still gets a reply, without tools, and the transcript says why.
        await send(pilot, chat, "hello")
        await turn_ended(pilot, chat)
        assert chat.conversation.turns[-1].role == "assistant"
        assert any("does not take tools" in str(n.render())
                   for n in chat.query(TranscriptNoteLine))
        assert calls_run(log) == []
