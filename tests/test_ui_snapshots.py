"""Snapshots of the chat screen (a fixed, finished conversation), the help and settings screens.

Everything in the frame is fixed: the conversation, its fates and stats come from the store,
the backend is given, and no live timing is drawn. Update with
``python -m pytest tests/test_ui_snapshots.py --snapshot-update`` and review the SVG diff.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ui_helpers import make_services, screen_with, tiny_runtime

from specchat.engine.decode.events import GenerationStats, RejectedEvent, TokenEvent, TokenOrigin
from specchat.store import FateTrace, ReplyStats
from specchat.ui.app import SpecchatApp
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.widgets.chat_input import ChatInput

SIZE = (120, 36)


@pytest.fixture(autouse=True)
def _collect_cycles() -> Iterator[None]:
    yield
    gc.collect()  # see ui_helpers.app_test: finalizers run here, not inside pytest's imports
A, C, B = TokenOrigin.ACCEPTED, TokenOrigin.CORRECTED, TokenOrigin.BONUS

REPLY = [  # (text, origin, rejected drafts after it)
    ("Primary", A, []), (" colours", A, []), (" are", A, []), (" red", B, []),
    (",", A, []), (" yellow", C, [" green", " and"]), (" and", A, []), (" blue", A, []),
    (".", B, []), ("\n\n", A, []), ("```", A, []), ("python", C, ["text"]),
    ("\nprint", A, []), ('("red")', A, []), ("\n```", B, []),
]
# 61.2 tok/s, α 0.79, τ 2.5, acceptance length 3.5 (1 + 15 accepted / 6 steps)
STATS = ReplyStats(GenerationStats(prompt_tokens=31, generated_tokens=15, decode_s=14 / 61.2,
                                   accepted=15, rejections=4, steps=6, drafted=24,
                                   target_forwards=6,
                                   draft_s=0.05, verify_s=0.11),
                   decoder="speculative", gamma=4, gamma_mode="fixed", ctx_size=512)


def fixed_trace() -> FateTrace:
    trace = FateTrace()
    for pos, (text, origin, rejected) in enumerate(REPLY):
        trace.add_token(TokenEvent(pos, text, origin, pos, 0.0))
        for k, r in enumerate(rejected):
            trace.add_rejected(RejectedEvent(900 + k, r, pos + k, 0.1, 0.7))
    trace.finish()
    return trace


def snapshot_app(tmp_path: Path, tiny_target: Path) -> tuple[SpecchatApp, int]:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    store = services.store
    store.create_chat("Haiku about the sea")
    chat = store.create_chat("Primary colours")
    store.add_message(chat, "user", "Name the primary colours, then print one in Python.")
    trace = fixed_trace()
    store.add_message(chat, "assistant", trace.text, fates=trace.encode(), stats=STATS)
    return SpecchatApp(services), chat


async def settle(pilot: Any) -> ChatScreen:
    screen = await screen_with(pilot, ChatScreen, ChatInput)
    screen.query_one(ChatInput).cursor_blink = False
    await pilot.pause()
    return screen


def test_chat_screen_token_view(snap_compare: Any, tmp_path: Path, tiny_target: Path) -> None:
    app, chat_id = snapshot_app(tmp_path, tiny_target)

    async def run_before(pilot: Any) -> None:
        screen = await settle(pilot)
        screen.open_chat(chat_id)
        await pilot.pause()
        await pilot.press("ctrl+r")  # rejected drafts shown, token view
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_chat_screen_markdown_view(snap_compare: Any, tmp_path: Path, tiny_target: Path) -> None:
    app, chat_id = snapshot_app(tmp_path, tiny_target)

    async def run_before(pilot: Any) -> None:
        screen = await settle(pilot)
        screen.open_chat(chat_id)
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_help_screen(snap_compare: Any, tmp_path: Path, tiny_target: Path) -> None:
    app, _ = snapshot_app(tmp_path, tiny_target)

    async def run_before(pilot: Any) -> None:
        await settle(pilot)
        await pilot.press("f1")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_settings_screen(snap_compare: Any, tmp_path: Path, tiny_target: Path) -> None:
    app, _ = snapshot_app(tmp_path, tiny_target)

    async def run_before(pilot: Any) -> None:
        await settle(pilot)
        await pilot.press("ctrl+s")
        await pilot.pause()
        pilot.app.screen.query_one("#system-prompt").cursor_blink = False
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_help_keys_page_at_80x24(snap_compare: Any, tmp_path: Path, tiny_target: Path) -> None:
    """The smallest supported terminal: the box fits and section titles wrap, never cut."""
    app, _ = snapshot_app(tmp_path, tiny_target)

    async def run_before(pilot: Any) -> None:
        await settle(pilot)
        await pilot.press("f1")
        await pilot.pause()
        await pilot.press("right")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
