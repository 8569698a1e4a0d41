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
