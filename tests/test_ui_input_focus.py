"""What the user types is never lost: with the chat list or the transcript focused (Ctrl+L, a
click in the transcript), a character goes to the message box, which takes the focus; the
list's own keys (arrows, Enter, F2, Delete) keep their meaning."""

from __future__ import annotations

from pathlib import Path

from textual import events
from ui_helpers import app_test, make_services, tiny_runtime, wait_for
from ui_helpers import ready as chat_ready

from specchat.ui.app import SpecchatApp
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.chat_list import ChatList
from specchat.ui.widgets.transcript import Transcript, UserMessage

SIZE = (120, 36)


async def ready(pilot) -> ChatScreen:  # type: ignore[no-untyped-def]
    chat = await chat_ready(pilot)
    await wait_for(pilot, lambda: isinstance(pilot.app.focused, ChatInput))
    return chat


def app_with_chats(tmp_path: Path, tiny_target: Path) -> SpecchatApp:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    for title in ("Older chat", "Newer chat"):
        chat = services.store.create_chat(title)
        services.store.add_message(chat, "user", f"a question in {title}")
    return SpecchatApp(services)


@app_test
async def test_typing_after_ctrl_l_goes_to_the_message_box_and_enter_sends_it(
        tmp_path: Path, tiny_target: Path) -> None:
    app = app_with_chats(tmp_path, tiny_target)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await pilot.press("ctrl+l", "ctrl+l")  # hidden, then shown again: the list has focus
        await wait_for(pilot, lambda: isinstance(app.focused, ChatList))
        await pilot.press(*"hi there")
        await pilot.pause()
        box = chat.query_one(ChatInput)
        assert box.text == "hi there" and app.focused is box
        await pilot.press("enter")  # sends the message: no chat is opened
        await wait_for(pilot, lambda: bool(chat.query(UserMessage)))
        assert [w.turn.text for w in chat.query(UserMessage)] == ["hi there"]
        assert chat.conversation.title not in ("Older chat", "Newer chat")


@app_test
async def test_the_lists_own_keys_still_work(tmp_path: Path, tiny_target: Path) -> None:
    app = app_with_chats(tmp_path, tiny_target)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await pilot.press("ctrl+l", "ctrl+l")
        await wait_for(pilot, lambda: isinstance(app.focused, ChatList))
        await pilot.press("down", "enter")  # the second chat, opened
        await wait_for(pilot, lambda: chat.conversation.title == "Older chat")
        assert chat.query_one(ChatInput).text == ""


@app_test
async def test_typing_after_a_click_in_the_transcript_goes_to_the_message_box(
        tmp_path: Path, tiny_target: Path) -> None:
    app = app_with_chats(tmp_path, tiny_target)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        chat.open_chat(chat.services.store.list_chats()[0].id)
        await pilot.pause()
        await pilot.click(Transcript)
        await wait_for(pilot, lambda: isinstance(app.focused, Transcript))
        await pilot.press(*"typed after a click")
        await pilot.pause()
        box = chat.query_one(ChatInput)
        assert box.text == "typed after a click" and app.focused is box


@app_test
async def test_a_paste_into_the_list_goes_to_the_message_box(tmp_path: Path,
                                                              tiny_target: Path) -> None:
    app = app_with_chats(tmp_path, tiny_target)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await pilot.press("ctrl+l", "ctrl+l")
        await wait_for(pilot, lambda: isinstance(app.focused, ChatList))
        app.post_message(events.Paste("pasted\ntext"))  # as the terminal's driver does
        await pilot.pause()
        await pilot.pause()
        assert chat.query_one(ChatInput).text == "pasted\ntext"
