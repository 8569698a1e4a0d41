"""The help screen's two pages, the palette's names, the focus ring and a theme that persists,
in the real app on a tiny real model."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from textual.widgets import TabbedContent
from ui_helpers import app_test, make_services, ready, screen_with, tiny_runtime, wait_for

from specchat.config import UserConfig, load_config
from specchat.errors import ConfigError
from specchat.ui.app import SpecchatApp
from specchat.ui.screens.explain import explain
from specchat.ui.screens.help import HelpScreen, help_table
from specchat.ui.widgets.chat_input import ChatInput

SIZE = (120, 36)


def rendered(renderable: object, width: int = 80) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_the_explain_page_names_every_number_and_fate() -> None:
    text = rendered(explain())
    for word in ("α", "τ", "acc.len", "γ", "tok/s", "draft/verify", "ctx", "accepted draft",
                 "corrected",
                 "bonus", "plain target", "rejected draft", "losing branches", "planner",
                 "fixed", "pair", "auto"):
        assert word in text, word


def test_help_section_titles_are_never_cut() -> None:
    text = " ".join(rendered(help_table(), width=76).split())  # undo the wrapping
    assert "Race screen (F5): plain vs speculative, recorded in turn, replayed together" in text
    assert "pla…" not in text


@app_test
async def test_f1_opens_on_the_numbers_and_flips_to_the_keys(tmp_path: Path,
                                                             tiny_target: Path) -> None:
    app = SpecchatApp(make_services(tmp_path, tiny_runtime(tiny_target)))
    async with app.run_test(size=(80, 24)) as pilot:
        chat = await ready(pilot)
        await pilot.press("f1")
        await screen_with(pilot, HelpScreen, TabbedContent)
        tabs = app.screen.query_one(TabbedContent)
        assert tabs.active == "help-explain"
        assert app.focused is not None and app.focused.id == "help-explain-scroll"
        await pilot.press("right")
        assert tabs.active == "help-keys" and app.focused.id == "help-keys-scroll"
        await pilot.press("left")
        assert tabs.active == "help-explain"
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is chat)


@app_test
async def test_palette_names_are_distinct_and_help_is_findable(tmp_path: Path,
                                                               tiny_target: Path) -> None:
    app = SpecchatApp(make_services(tmp_path, tiny_runtime(tiny_target)))
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        titles = [c.title for c in app.get_system_commands(chat)]
        assert len(titles) == len(set(titles)), titles
        assert "Keys" not in titles  # two entries were both called that
        assert any(t.startswith("Help:") for t in titles) and "Theme" in titles


@app_test
async def test_focus_ring_is_drawn_and_moves(tmp_path: Path, tiny_target: Path) -> None:
    app = SpecchatApp(make_services(tmp_path, tiny_runtime(tiny_target)))
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        transcript, chats = chat.query_one("#transcript"), chat.query_one("#chat-list")
        assert isinstance(app.focused, ChatInput)
        width = transcript.size.width
        assert transcript.styles.border_left[0] == "blank"  # room kept, nothing drawn
        transcript.focus()
        await pilot.pause()
        edge, colour = transcript.styles.border_left
        assert edge == "thick" and colour.a > 0 and colour != app.screen.styles.background
        assert transcript.size.width == width  # focus never shifts the layout
        chats.focus()
        await pilot.pause()
        assert chats.styles.border_left[0] == "thick"
        assert transcript.styles.border_left[0] == "blank"


@app_test
async def test_theme_is_remembered(tmp_path: Path, tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target),
                             config=UserConfig(theme="nord"))
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert app.theme == "nord"  # from the config
        app.theme = "gruvbox"  # what the palette's Theme picker does
        await pilot.pause()
    assert load_config(tmp_path / "config.yaml").theme == "gruvbox"


@app_test
async def test_an_unknown_theme_falls_back_with_a_notice(tmp_path: Path,
                                                         tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target),
                             config=UserConfig(theme="no-such-theme"))
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert app.theme == "textual-dark"
        assert any("unknown theme 'no-such-theme'" in str(n.message)
                   for n in app._notifications)


def test_theme_in_the_config_file_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"theme": "nord"}), encoding="utf-8")
    assert load_config(path).theme == "nord"
    path.write_text(yaml.safe_dump({"theme": 5}), encoding="utf-8")
    with pytest.raises(ConfigError, match="setting 'theme' must be text"):
        load_config(path)
