"""Finding and switching in the chat app, driven with Pilot on tiny real models: search across
chats (Ctrl+F), a chat's pair, the quick pair switcher (F4), system-prompt presets (Ctrl+G), and
the loading screen's percentage and memory estimate."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Input, OptionList, Static
from ui_helpers import app_test, make_services, tiny_runtime, wait_for

from specchat.store import ChatStore
from specchat.ui.app import SpecchatApp
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.screens.search import SearchScreen
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.chat_list import ChatList

SIZE = (120, 36)


async def ready(pilot) -> ChatScreen:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChatScreen)
                   and bool(pilot.app.screen.query(ChatInput))
                   and bool(pilot.app.screen.query(ChatList)))
    return pilot.app.screen


def seed(store: ChatStore, pair: str = "tiny-target") -> tuple[int, int]:
    """Two chats; the second has a long history whose 3rd message holds the word 'walrus'."""
    a = store.create_chat("Breakfast", pair=pair)
    store.add_message(a, "user", "What goes with toast?")
    store.add_message(a, "assistant", "Butter, mostly.")
    b = store.create_chat("Sea animals", pair=pair)
    target = 0
    for i in range(30):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"Message {i} about fish and the tides."
        if i == 2:
            text = "The walrus uses its tusks to climb onto the ice."
        mid = store.add_message(b, role, text)
        if i == 2:
            target = mid
    for c in (a, b):
        store.release(c)  # as a closed specchat leaves them
    return b, target


@app_test
async def test_search_finds_a_message_in_another_chat_and_opens_it_there(
        tmp_path: Path, tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    chat_id, message_id = seed(services.store)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
        search = app.screen
        assert isinstance(search, SearchScreen)
        await pilot.press(*"walr")  # a prefix is enough
        await wait_for(pilot, lambda: len(search.hits) == 1)
        results = search.query_one(OptionList)
        shown = str(results.get_option_at_index(0).prompt)
        assert "Sea animals" in shown and "walrus uses its tusks" in shown
        assert "1 message" in str(search.query_one("#search-status", Static).render())
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is chat and chat.conversation.chat_id == chat_id)
        await wait_for(pilot, lambda: bool(chat.transcript.query(".-found")))
        (found,) = chat.transcript.query(".-found")
        assert found.turn.message_id == message_id  # type: ignore[attr-defined]
        # It is on screen although it is the 3rd of 30 messages (the view follows the end).
        await wait_for(pilot, lambda: found.region.y >= chat.transcript.region.y
                       and found.region.bottom <= chat.transcript.region.bottom
                       and found.region.height > 0)
        assert chat.query_one(ChatInput).has_focus  # ready to type on
        # Ctrl+F again offers the last search; nothing found says so; Esc changes nothing.
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
        search = app.screen
        assert search.query_one(Input).value == "walr"
        await pilot.press("ctrl+u", *"narwhal")
        await wait_for(pilot, lambda: "No message matches" in str(
            search.query_one("#search-status", Static).render()))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is chat)
        assert chat.conversation.chat_id == chat_id


@app_test
async def test_search_results_are_picked_with_the_arrows(tmp_path: Path,
                                                        tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    chat_id, _ = seed(services.store)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
        search = app.screen
        await pilot.press(*"toast OR butter")  # OR is a word here, not the FTS operator
        await wait_for(pilot, lambda: "No message matches" in str(
            search.query_one("#search-status", Static).render()))
        await pilot.press("ctrl+u", *"tides")
        await wait_for(pilot, lambda: len(search.hits) > 5)
        await pilot.press("down")  # from the box into the results
        results = search.query_one(OptionList)
        assert results.has_focus
        await pilot.press("down", "down", "enter")
        picked = search.hits[2]
        await wait_for(pilot, lambda: app.screen is chat and chat.conversation.chat_id == chat_id)
        await wait_for(pilot, lambda: bool(chat.transcript.query(".-found")))
        (found,) = chat.transcript.query(".-found")
        assert found.turn.message_id == picked.message_id  # type: ignore[attr-defined]
