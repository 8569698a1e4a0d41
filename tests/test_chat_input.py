"""The message box under hostile typing: a paste the terminal types out key by key, and Esc
read as Alt by Textual when the next key follows within ESCDELAY."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import ClassVar

from textual import events, on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import TextArea

from specchat.ui.widgets.chat_input import ChatInput


class Host(App[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "stop", priority=True)]

    def __init__(self) -> None:
        super().__init__()
        self.stops = 0
        self.changes = 0
        self.sent: list[str] = []

    def compose(self) -> ComposeResult:
        yield ChatInput()

    def action_stop(self) -> None:
        self.stops += 1

    @on(TextArea.Changed)
    def changed(self) -> None:
        self.changes += 1

    @on(ChatInput.Submitted)
    def submitted(self, event: ChatInput.Submitted) -> None:
        self.sent.append(event.text)


def type_keys(app: App[None], text: str) -> None:
    """What the driver does for a typed (not bracketed) paste: one Key per character."""
    for ch in text:
        key = {" ": "space", ".": "full_stop", "\r": "enter"}.get(ch, ch)
        app.post_message(events.Key(key, ch))


def test_a_typed_paste_is_inserted_in_a_few_edits_not_one_per_key() -> None:
    async def run() -> None:
        app = Host()
        async with app.run_test(size=(80, 20)) as pilot:
            box = app.query_one(ChatInput)
            box.focus()
            await pilot.pause()
            text = "lorem ipsum dolor sit amet. " * 200
            type_keys(app, text)
            for _ in range(200):
                await pilot.pause(0.02)
                if box.text == text:
                    break
            assert box.text == text
            # One edit per key re-wraps the growing line each time (minutes for 100k keys).
            assert app.changes <= 20, app.changes
            type_keys(app, "!\r")  # keys after the paste still act on all of it
            await pilot.pause(0.1)
            assert app.sent == [(text + "!").strip()]

    asyncio.run(run())


def test_esc_then_a_letter_read_as_alt_letter_still_stops() -> None:
    async def run() -> None:
        app = Host()
        async with app.run_test(size=(80, 20)) as pilot:
            box = app.query_one(ChatInput)
            box.focus()
            await pilot.pause()
            app.post_message(events.Key("alt+h", "h"))  # Esc then h within 100 ms
            app.post_message(events.Key("i", "i"))
            await pilot.pause(0.1)
            assert app.stops == 1
            assert box.text == "hi"
            await pilot.press("escape")
            assert app.stops == 2 and box.text == "hi"

    asyncio.run(run())


def test_esc_read_as_alt_stops_a_reply_from_the_box_and_from_the_transcript(
        tmp_path: Path, tiny_target: Path) -> None:
    from ui_helpers import (
        GREEDY,
        GatedDecoder,
        make_services,
        screen_with,
        tiny_runtime,
        wait_for,
    )

    from specchat.engine.decode.plain import PlainDecoder
    from specchat.runtime.opening import Runtime
    from specchat.ui.app import SpecchatApp
    from specchat.ui.chat_settings import ChatSettings
    from specchat.ui.screens.chat import ChatScreen
    from specchat.ui.widgets.transcript import Transcript

    runtime = tiny_runtime(tiny_target)
    gated: list[GatedDecoder] = []

    def decoder(rt: Runtime, _s: ChatSettings) -> GatedDecoder:
        gated.append(GatedDecoder(PlainDecoder(rt.target_ctx), after=3))
        return gated[-1]

    config = make_services(tmp_path, runtime).config.with_(sampling=GREEDY.with_(max_tokens=30))
    services = make_services(tmp_path / "s", runtime, config=config, make_decoder=decoder)

    async def run() -> None:
        app = SpecchatApp(services)
        async with app.run_test(size=(100, 30)) as pilot:
            chat = await screen_with(pilot, ChatScreen, ChatInput)
            assert isinstance(chat, ChatScreen)
            for focus in ("box", "transcript"):
                chat.query_one(ChatInput).focus()
                type_keys(app, "hi\r")
                await wait_for(pilot, lambda: chat.job is not None and gated[-1].paused.is_set())
                if focus == "transcript":
                    chat.query_one(Transcript).focus()
                    await pilot.pause()
                app.post_message(events.Key("alt+n", "n"))  # Esc, then n within 100 ms
                await wait_for(pilot, lambda: chat.job is None)
                assert chat.conversation.turns[-1].status == "cancelled", focus

    asyncio.run(run())
