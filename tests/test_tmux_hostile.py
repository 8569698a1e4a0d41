"""The app in a real terminal (tmux) with a model whose every token is an escape sequence:
the pane's title and tmux's paste buffers must stay as they were, and the sequences must be
on screen as visible text (␛]0;PWNED␇). tmux's ``set-clipboard on`` makes an OSC 52 from the
app a paste buffer, so a sequence that got through would show there; the control run checks
that the same bytes printed raw do change both.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmux_helpers import Tmux, tmux_session

from specchat.devtools.hostile_models import CLIPBOARD, TITLE, write_hostile_model

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    with tmux_session(110, 32, ("set-clipboard", "on"), ("allow-rename", "on")) as t:
        yield t


def test_the_control_raw_sequences_do_change_title_and_buffers(tmux: Tmux) -> None:
    before = tmux.title()
    raw = TITLE + CLIPBOARD  # printed as they are, through printf
    tmux("respawn-pane", "-k", "-t", "t", f"printf '{raw}'; sleep 300")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not tmux.buffers():
        time.sleep(0.2)
    assert tmux.title() == "PWNED" != before
    assert tmux("show-buffer") == "PWNED"


def test_the_app_shows_the_sequences_and_obeys_none(tmux: Tmux, tmp_path: Path) -> None:
    model = write_hostile_model(tmp_path / "hostile.gguf")
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.yaml").write_text(
        "sampling:\n  temperature: 0\n  max_tokens: 12\n")
    before = tmux.title()
    env = f"SPECCHAT_HOME={home} PYTHONPATH={REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    tmux("respawn-pane", "-k", "-t", "t",
         f"cd {tmp_path} && {env} {sys.executable} -m specchat --model {model} --threads 1; "
         "echo EXITED $?; sleep 300")
    tmux.wait_for("palette", 90)
    tmux("send-keys", "-t", "t", "hi")
    tmux("send-keys", "-t", "t", "Enter")
    tmux.wait_for(r"\d+ tokens · [\d.]+ tok/s", 90)  # the finished reply's summary
    # The finished reply is drawn again (Markdown) just after its summary shows: under load a
    # capture can fall between the two, so wait for the sequences themselves, shown as text.
    tmux.wait_for("␛\\]0;PWNED␇|␛\\]52;c;UFdORUQ=␇", 30)
    assert tmux.title() == before
    assert tmux.buffers() == ""
    tmux("send-keys", "-t", "t", "C-t")  # the other view (Markdown / token colours) too
    time.sleep(1.5)
    assert "␛]" in tmux.screen()
    assert tmux.title() == before
    assert tmux.buffers() == ""
    tmux("send-keys", "-t", "t", "C-q")
    tmux.wait_for("EXITED 0", 30)
    assert tmux.title() == before and tmux.buffers() == ""
