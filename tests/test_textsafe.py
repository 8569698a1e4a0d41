"""The terminal sanitiser: every control character but newline and tab shown, not obeyed."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from specchat.devtools.hostile_models import CLIPBOARD, TITLE
from specchat.textsafe import is_safe, safe_json, safe_text


def test_escape_sequences_become_visible() -> None:
    assert safe_text(TITLE) == "␛]0;PWNED␇"
    assert safe_text(CLIPBOARD) == "␛]52;c;UFdORUQ=␇"
    assert safe_text("a\x9b31mb") == "a\\x9b31mb"  # C1 CSI
    assert safe_text("\x00\x08\x7f\r") == "␀␈␡␍"


def test_newlines_tabs_and_ordinary_text_are_kept() -> None:
    text = "déjà vu\n\tindented — ✓ 中文 [bold]not markup[/bold]"
    assert safe_text(text) == text
    assert safe_text("line\r\nnext") == "line\nnext"  # a Windows line end is not an attack


@given(st.text())
def test_nothing_obeyable_survives(text: str) -> None:
    out = safe_text(text)
    assert is_safe(out)
    assert all(ord(c) >= 0x20 or c in "\n\t" for c in out)
    assert not any(0x7F <= ord(c) < 0xA0 for c in out)


@given(st.text())
def test_json_keeps_the_exact_text_escaped(text: str) -> None:
    line = safe_json(json.dumps({"text": text}, ensure_ascii=False))
    assert json.loads(line)["text"] == text
    assert all(ord(c) >= 0x20 and not 0x7F <= ord(c) < 0xA0 for c in line)


def test_every_textual_content_shows_control_codes() -> None:
    """The app's guard: text reaching any widget (ours or Textual's: Markdown, toasts, lists)
    is shown, not obeyed; Textual's own removals (CR, BEL, …) stay as they were."""
    import asyncio

    from rich.text import Text
    from textual.app import App, ComposeResult
    from textual.content import Content
    from textual.widgets import Label, Markdown

    from specchat.ui.safe_content import guard_textual_content

    guard_textual_content()
    guard_textual_content()  # idempotent
    assert Content(f"a{TITLE}b\x9b\r").plain == "a␛]0;PWNEDb\\x9b"
    assert Content.from_rich_text(Text(CLIPBOARD)).plain == "␛]52;c;UFdORUQ="

    class Show(App[None]):
        def compose(self) -> ComposeResult:
            yield Label(f"label {TITLE}", markup=False)
            yield Markdown(f"# md {CLIPBOARD}\n\n- item \x1b[2J")

        def on_mount(self) -> None:
            self.notify(f"toast {TITLE}", markup=False)

    async def run() -> str:
        app = Show()
        async with app.run_test(size=(60, 16)) as pilot:
            await pilot.pause(0.2)
            return app.export_screenshot()

    svg = asyncio.run(run())
    assert "\x1b" not in svg and "\x9b" not in svg
    assert "␛]0;PWNED" in svg and "␛]52;c;UFdORUQ=" in svg and "␛[2J" in svg
