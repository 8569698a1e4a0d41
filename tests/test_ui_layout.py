"""The chat screen's layout: it follows a streaming reply through a resize and a change of
view, stays put when the user scrolled up, keeps a poem's lines in Markdown, and at 80×24
keeps every essential part (text snapshots at 80×24 and 160×48)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_ui_snapshots import settle, snapshot_app
from ui_helpers import (
    GREEDY,
    GatedDecoder,
    app_test,
    make_services,
    screen_text,
    tiny_runtime,
    wait_for,
)
from ui_helpers import ready as chat_ready

from specchat.config import UserConfig
from specchat.engine.decode.plain import PlainDecoder
from specchat.runtime.opening import Runtime
from specchat.ui.app import SpecchatApp
from specchat.ui.chat_settings import ChatSettings
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.services import AppServices
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.transcript import AssistantMessage, Transcript


async def ready(pilot) -> ChatScreen:  # type: ignore[no-untyped-def]
    chat = await chat_ready(pilot)
    await wait_for(pilot, lambda: isinstance(pilot.app.focused, ChatInput))
    return chat


def long_chat(services: AppServices) -> int:
    """A saved chat taller than the screen, to continue."""
    chat_id = services.store.create_chat("A long chat")
    for i in range(8):
        services.store.add_message(chat_id, "user", f"question {i}: " + "words " * 30)
        services.store.add_message(chat_id, "assistant", f"answer {i}\n\n" + "more words " * 20)
    return chat_id


def at_end(t: Transcript) -> bool:
    return t.max_scroll_y > 0 and t.scroll_y >= t.max_scroll_y


async def settles_at_end(pilot: Any, t: Transcript) -> None:
    """The view reaches the end once the layout settles. A finished reply's Markdown mounts its
    blocks over several refreshes and the view follows each one, so a busy machine (the full
    suite) can still be on its way after a fixed pause; a view that stopped following never
    gets there, and this fails."""
    try:
        await wait_for(pilot, lambda: at_end(t), timeout=10.0)
    except AssertionError:
        raise AssertionError(("not at the end", t.scroll_y, t.max_scroll_y)) from None


@app_test
async def test_the_view_follows_the_reply_through_a_resize_and_ctrl_t(
        tmp_path: Path, tiny_target: Path) -> None:
    gates: list[GatedDecoder] = []

    def gated(rt: Runtime, s: ChatSettings) -> GatedDecoder:
        gates.append(GatedDecoder(PlainDecoder(rt.target_ctx), after=80))
        return gates[-1]

    config = UserConfig(sampling=GREEDY.with_(max_tokens=200))
    services = make_services(tmp_path, tiny_runtime(tiny_target), config=config,
                             make_decoder=gated)
    chat_id = long_chat(services)
    app = SpecchatApp(services)
    async with app.run_test(size=(100, 30)) as pilot:
        chat = await ready(pilot)
        chat.open_chat(chat_id)
        await pilot.pause()
        transcript = chat.transcript
        await pilot.press(*"hello", "enter")
        await wait_for(pilot, lambda: bool(gates) and gates[0].paused.is_set())
        await pilot.pause(0.2)
        assert at_end(transcript), (transcript.scroll_y, transcript.max_scroll_y,
                                    chat.session.reply.text if chat.session.reply else None)
        await pilot.resize_terminal(60, 20)  # the reply rewraps: taller
        await pilot.pause()
        gates[0].gate.set()
        await wait_for(pilot, lambda: chat.job is None)
        await settles_at_end(pilot, transcript)
        await pilot.press("ctrl+t")  # the token colours instead of Markdown: another height
        await pilot.pause(0.2)
        await settles_at_end(pilot, transcript)
        await pilot.press("ctrl+t")
        await pilot.pause(0.2)
        await settles_at_end(pilot, transcript)


@app_test
async def test_scrolled_up_the_view_stays_put_while_the_reply_streams(
        tmp_path: Path, tiny_target: Path) -> None:
    gates: list[GatedDecoder] = []

    def gated(rt: Runtime, s: ChatSettings) -> GatedDecoder:
        gates.append(GatedDecoder(PlainDecoder(rt.target_ctx), after=80))
        return gates[-1]

    config = UserConfig(sampling=GREEDY.with_(max_tokens=200))
    services = make_services(tmp_path, tiny_runtime(tiny_target), config=config,
                             make_decoder=gated)
    chat_id = long_chat(services)
    app = SpecchatApp(services)
    async with app.run_test(size=(60, 20)) as pilot:
        chat = await ready(pilot)
        chat.open_chat(chat_id)
        await pilot.pause()
        transcript = chat.transcript
        await pilot.press(*"hello", "enter")
        await wait_for(pilot, lambda: bool(gates) and gates[0].paused.is_set())
        await pilot.pause(0.2)
        transcript.scroll_home(animate=False)  # as the mouse wheel up does: the anchor lets go
        await pilot.pause()
        assert transcript.scroll_y == 0
        gates[0].gate.set()
        await wait_for(pilot, lambda: chat.job is None)
        await pilot.pause(0.2)
        assert transcript.scroll_y == 0 and transcript.max_scroll_y > 0
        transcript.scroll_end(animate=False)  # back at the end: following again
        await pilot.pause()
        await pilot.resize_terminal(50, 20)
        await pilot.pause(0.2)
        await settles_at_end(pilot, transcript)


@app_test
async def test_markdown_keeps_single_line_breaks(tmp_path: Path, tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    chat_id = services.store.create_chat("A poem")
    services.store.add_message(chat_id, "user", "Write a poem.")
    poem = "Roses are red,\nviolets are blue;\nsugar is sweet.\n\nA second verse."
    services.store.add_message(chat_id, "assistant", poem)
    app = SpecchatApp(services)
    async with app.run_test(size=(100, 30)) as pilot:
        chat = await ready(pilot)
        chat.open_chat(chat_id)
        await pilot.pause()
        await wait_for(pilot, lambda: bool(chat.query(AssistantMessage)))
        await pilot.pause(0.2)
        lines = [line.strip(" █▎") for line in screen_text(app).split("\n")]
        for verse in ("Roses are red,", "violets are blue;", "sugar is sweet.",
                      "A second verse."):
            assert verse in lines, screen_text(app)  # each on a line of its own


def essentials(text: str) -> None:
    """What must be whole on the chat screen at any supported size."""
    lines = text.split("\n")
    assert "specchat · Primary colours" in lines[0]
    # The acceptance length's label and the draft/verify split as wide as the bar allows.
    assert any("61.2 tok/s decode  α 0.79  τ 2.50  acc" in ln and " 3.50  draft" in ln
               and "31%" in ln and "ctx 46/512" in ln for ln in lines), text
    assert any(ln.strip().startswith("γ fixed · 4.0 drafted per step") for ln in lines)
    assert "CPU · Tiny Target" in text
    footer = lines[-1]
    for key in ("esc Stop", "^n New", "^t Tokens/MD", "^l Chats", "^s Settings", "f1 Help",
                "^p palette"):
        assert key in footer, footer
    assert "Primary colours" in text and "Haiku about the" in text  # the chat list
    assert "Name the primary colours" in text and "15 tokens · 61.2 tok/s decode" in text
    assert "accepted corrected bonus plain rejected" in text


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_chat_screen_snapshot(snap_compare: Any, tmp_path: Path, tiny_target: Path,
                              size: tuple[int, int]) -> None:
    """The chat screen at the smallest supported terminal and a large one: nothing essential
    cut (checked as text), and the whole frame as an SVG snapshot (a fixed conversation)."""
    app, chat_id = snapshot_app(tmp_path, tiny_target)

    async def run_before(pilot: Any) -> None:
        screen = await settle(pilot)
        screen.open_chat(chat_id)
        await pilot.pause()
        await pilot.pause()
        essentials(screen_text(pilot.app))

    assert snap_compare(app, terminal_size=size, run_before=run_before)
