"""One message in the app, driven with Pilot on a tiny real model: regenerate (alternatives
‹ 2/2 › to flip), edit and resend (a branch), copy a message or a code block (the clipboard,
a toast, no control codes), delete a message (asks first); the message cursor; and what a
reopened chat shows."""

from __future__ import annotations

from pathlib import Path

from test_ui_app import SIZE, finished, ready, send
from textual.widgets import OptionList
from ui_helpers import GREEDY, app_test, make_services, screen_with, tiny_runtime, wait_for

from specchat.config import UserConfig
from specchat.session.clipboard import clipboard_text, code_blocks
from specchat.session.live import live_from_record
from specchat.ui.app import SpecchatApp
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.screens.dialogs import ConfirmDialog
from specchat.ui.screens.message_dialogs import CodePicker, EditDialog, MessageMenu
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.chat_list import ChatList
from specchat.ui.widgets.transcript import AssistantMessage, UserMessage

SAMPLED = GREEDY.with_(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=3, max_tokens=12)


def record_notes(app: SpecchatApp) -> list[str]:
    """Every notice the app shows, kept (a toast expires after seconds: on a loaded machine
    before the test looks)."""
    seen: list[str] = []
    original = app.notify

    def notify(message: str, *args: object, **kwargs: object) -> None:
        seen.append(str(message))
        original(message, *args, **kwargs)  # type: ignore[arg-type]

    app.notify = notify  # type: ignore[method-assign]
    return seen


def header(widget: AssistantMessage) -> str:
    return str(widget.query_one(".who").render())


def shown(chat: ChatScreen) -> list[tuple[str, str]]:
    return [(t.role, t.text) for t in chat.conversation.turns]


@app_test
async def test_regenerate_keeps_the_old_reply_to_flip_back_to(tmp_path: Path,
                                                              tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target),
                             config=UserConfig(sampling=SAMPLED))
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        first = await send(pilot, "hello")
        await finished(pilot)
        old = first.turn.text
        await pilot.press("ctrl+g")  # from the message box, which keeps the focus
        await finished(pilot)
        assert isinstance(app.focused, ChatInput)
        (reply,) = chat.query(AssistantMessage)  # the old one is not drawn: an alternative
        assert "‹ 2/2 ›" in header(reply) and reply.turn is not first.turn
        new, new_stats = reply.turn.text, reply.turn.stats
        await pilot.press("alt+left")
        await pilot.pause()
        (reply,) = chat.query(AssistantMessage)
        assert "‹ 1/2 ›" in header(reply) and reply.turn.text == old
        # The stats bar follows the flip: the shown reply's figures, not the last one's.
        assert reply.turn.stats is not None and new_stats is not None
        assert chat.stats_bar.stats == live_from_record(reply.turn.stats)
        assert chat.stats_bar.stats != live_from_record(new_stats)
        assert "‹ 1/2 ›" in app.export_screenshot().replace("&#160;", " ")
        await pilot.press("alt+right")
        await pilot.pause()
        assert chat.conversation.turns[-1].text == new
        await pilot.press("alt+left")  # back to the first: what a reopened chat shows
        await pilot.pause()
        chat_id = chat.conversation.chat_id
        rows = services.store.messages(chat_id or 0)
        assert [(m.role, m.active) for m in rows] == [
            ("user", True), ("assistant", True), ("assistant", False)]
    services.store.close()
    services2 = make_services(tmp_path, tiny_runtime(tiny_target),
                              config=UserConfig(sampling=SAMPLED))
    app = SpecchatApp(services2)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        listing = chat.query_one(ChatList)
        # The list fills from the store in a worker: Enter on it before then opens nothing
        # (what timed out here in full runs, where the worker starts later).
        await wait_for(pilot, lambda: listing.highlighted_child is not None, timeout=60.0)
        listing.focus()
        await pilot.press("enter")
        # Opening it loads the chat and draws it: slow on a loaded machine, never wrong.
        await wait_for(pilot, lambda: bool(list(chat.query(AssistantMessage))), timeout=60.0)
        (reply,) = chat.query(AssistantMessage)
        assert reply.turn.text == old and "‹ 1/2 ›" in header(reply)
        await pilot.click(reply, offset=(header(reply).index("›") + 2, 0))  # the › arrow
        await pilot.pause()
        assert chat.conversation.turns[-1].text == new


@app_test
async def test_the_palette_and_the_menu_reach_every_message_action(tmp_path: Path,
                                                                   tiny_target: Path) -> None:
    app = SpecchatApp(make_services(tmp_path, tiny_runtime(tiny_target)))
    notes = record_notes(app)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        titles = {c.title for c in app.get_system_commands(chat)}
        assert {"Regenerate the reply", "Copy the message", "Copy a code block",
                "Edit and resend a message", "Delete a message", "Message actions",
                "Previous alternative", "Next alternative"} <= titles
        await send(pilot, "hello")
        await finished(pilot)
        await pilot.press("f4")
        await screen_with(pilot, MessageMenu, OptionList)
        ids = [o.id for o in app.screen.query_one(OptionList).options]
        assert ids == ["copy", "regenerate", "delete"]  # a reply, no code, no alternatives
        await pilot.press("r")
        await wait_for(pilot, lambda: app.screen is chat)
        await finished(pilot)
        assert chat.conversation.position(chat.conversation.turns[-1]) == (2, 2)
        assert any("Temperature is 0" in n for n in notes)  # greedy: the same text


@app_test
async def test_the_message_cursor_selects_and_esc_lets_go(tmp_path: Path,
                                                          tiny_target: Path) -> None:
    app = SpecchatApp(make_services(tmp_path, tiny_runtime(tiny_target)))
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await send(pilot, "one")
        await finished(pilot)
        await pilot.press(*"draft")  # typed, not sent: the cursor must not lose it
        await pilot.press("ctrl+up")
        await pilot.pause()
        assert chat.messages.selected is chat.conversation.turns[-1]
        await pilot.press("ctrl+up", "ctrl+up")  # stops at the first
        await pilot.pause()
        assert chat.messages.selected is chat.conversation.turns[0]
        (user,) = chat.query(UserMessage)
        assert user.has_class("-selected")
        assert "F4 actions" in str(chat.query_one("#legend").render())
        await pilot.press("escape")
        await pilot.pause()
        assert chat.messages.selected is None and not user.has_class("-selected")
        assert "F4 actions" not in str(chat.query_one("#legend").render())
        await pilot.click(user)
        await pilot.pause()
        assert chat.messages.selected is user.turn
        chat.query_one(ChatInput).focus()
        await pilot.press("!")
        assert chat.query_one(ChatInput).text == "draft!"


@app_test
async def test_copy_a_message_and_a_code_block_without_control_codes(tmp_path: Path,
                                                                     tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    store = services.store
    reply = ("Two ways \x1b]52;c;UFdORUQ=\x07:\n```python\nprint(1)\n```\nor\n"
             "~~~sh\necho \x1b[31mhi\x9b\n~~~\n")
    chat_id = store.create_chat("code")
    store.add_message(chat_id, "user", "show me")
    store.add_message(chat_id, "assistant", reply)
    store.release(chat_id)
    app = SpecchatApp(services)
    notes = record_notes(app)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        chat.query_one(ChatList).focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: bool(list(chat.query(AssistantMessage))))
        chat.query_one(ChatInput).focus()
        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(app.screen, MessageMenu))
        await pilot.press("c")
        await wait_for(pilot, lambda: app.screen is chat)
        assert app.clipboard == clipboard_text(reply)
        assert "\x1b" not in app.clipboard and "\x9b" not in app.clipboard
        assert app.clipboard.startswith("Two ways ]52;c;UFdORUQ=:\n```python")
        assert any(n.startswith("Copied the reply") for n in notes)
        assert isinstance(app.focused, ChatInput)  # the menu gave the focus back
        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(app.screen, MessageMenu))
        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, CodePicker))
        await pilot.press("2")
        await wait_for(pilot, lambda: app.screen is chat)
        assert app.clipboard == "echo [31mhi"
        assert any(n.startswith("Copied code block 2 of 2") for n in notes)
        # The user's message has no code block: said, and the clipboard is left alone.
        await pilot.press("ctrl+up", "ctrl+up")
        chat.action_copy_code()
        await pilot.pause()
        assert app.clipboard == "echo [31mhi"
        assert any("no code block" in n for n in notes)


def test_code_blocks_are_the_fenced_ones_as_commonmark_reads_them() -> None:
    text = ("a\n```py title\nx = 1\n\n  y\n```\n````\n```\ninner\n````\n"
            "   ~~~\n   indented\n    more\n   ~~~\n```\nleft open")
    blocks = code_blocks(text)
    assert [(b.language, b.code) for b in blocks] == [
        ("py", "x = 1\n\n  y"), ("", "```\ninner"), ("", "indented\n more"), ("", "left open")]
    assert blocks[0].label() == "py · x = 1  (3 lines)"
    assert code_blocks("no fences `here`") == []
    assert clipboard_text("a\r\nb\x1b[2Jc\x07\x7f\x85\td") == "a\nb[2Jc\td"


@app_test
async def test_edit_and_resend_makes_a_branch(tmp_path: Path, tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await send(pilot, "one")
        await finished(pilot)
        await send(pilot, "two")
        await finished(pilot)
        old = shown(chat)
        await pilot.press("ctrl+up", "ctrl+up", "ctrl+up", "ctrl+up")  # "one"
        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(app.screen, MessageMenu))
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, EditDialog))
        await pilot.press("ctrl+u", *"uno", "enter")
        await wait_for(pilot, lambda: app.screen is chat)
        await finished(pilot)
        assert [r for r, _ in shown(chat)] == ["user", "assistant"]
        assert shown(chat)[0] == ("user", "uno")
        (user,) = chat.query(UserMessage)
        assert "‹ 2/2 ›" in str(user.render())
        assert isinstance(app.focused, ChatInput)
        # No selection: Alt+← flips the nearest message with alternatives, the edited one.
        await pilot.press("alt+left")
        await pilot.pause()
        assert shown(chat) == old  # the old branch, whole
        assert len(list(chat.query(UserMessage))) == 2
        first = chat.query(UserMessage).first()
        text = str(first.render())
        assert text.startswith("You  ‹ 1/2 ›")
        await pilot.click(first, offset=(text.index("›") + 2, 0))  # its › arrow (edge, padding)
        await pilot.pause()
        assert shown(chat)[0] == ("user", "uno")
        await pilot.click(chat.query(UserMessage).first(), offset=(text.index("‹") + 2, 0))
        await pilot.pause()
        assert shown(chat) == old
        rows = services.store.messages(chat.conversation.chat_id or 0)
        assert len(rows) == 6 and sum(not m.active for m in rows) == 1
        # Esc in the edit box changes nothing.
        await pilot.press("ctrl+up", "ctrl+up", "ctrl+up", "ctrl+up", "f4", "e")
        await wait_for(pilot, lambda: isinstance(app.screen, EditDialog))
        await pilot.press("x", "escape")
        await wait_for(pilot, lambda: app.screen is chat)
        assert shown(chat) == old and chat.job is None


@app_test
async def test_delete_a_message_asks_and_takes_its_reply(tmp_path: Path,
                                                         tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        for text in ("one", "two"):
            await send(pilot, text)
            await finished(pilot)
        before = shown(chat)
        await pilot.press("ctrl+up", "ctrl+up", "ctrl+up", "ctrl+up")  # "one"
        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(app.screen, MessageMenu))
        await pilot.press("d")
        await screen_with(pilot, ConfirmDialog, ".dialog-body")
        question = str(app.screen.query_one(".dialog-body").render())
        assert "Delete this message and its reply? The messages after it stay." in question
        assert "“one”" in question
        await pilot.press("n")  # no: nothing changes
        await wait_for(pilot, lambda: app.screen is chat)
        assert shown(chat) == before
        chat.action_delete_message()  # the palette's way, on the still selected message
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await wait_for(pilot, lambda: app.screen is chat)
        assert shown(chat) == before[2:]
        assert len(list(chat.query(".message"))) == 2
        rows = services.store.messages(chat.conversation.chat_id or 0)
        assert [(m.role, m.content) for m in rows] == before[2:] and rows[0].parent_id is None
        assert isinstance(app.focused, ChatInput)
