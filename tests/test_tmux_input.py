"""In a real terminal (tmux): what the user types right after Ctrl+L, or right after a click in
the transcript, arrives in the message box (it used to vanish into the chat list, and Enter
then opened the highlighted chat). The click is a real SGR mouse report, as a terminal sends.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmux_helpers import Tmux, tmux_session

from specchat.store import ChatStore

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    with tmux_session(110, 32) as t:
        yield t


def input_box(screen: str) -> str:
    """The message box's lines: the three lines above the stats bar (its border and text)."""
    lines = screen.rstrip("\n").split("\n")
    return "\n".join(lines[-7:-3])


def test_typing_right_after_ctrl_l_or_a_click_reaches_the_message_box(
        tmux: Tmux, tmp_path: Path, tiny_target: Path) -> None:
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.yaml").write_text(
        "sampling:\n  temperature: 0\n  max_tokens: 8\n")
    (home / "data").mkdir()
    store = ChatStore.open(home / "data" / "chats.sqlite3")
    old = store.create_chat("An old chat")
    store.add_message(old, "user", "an old question")
    store.close()
    env = f"SPECCHAT_HOME={home} PYTHONPATH={REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    tmux("respawn-pane", "-k", "-t", "t",
         f"cd {tmp_path} && {env} {sys.executable} -m specchat --model {tiny_target} "
         "--threads 1; echo EXITED $?; sleep 300")
    tmux.wait_for("palette", 90)
    tmux.wait_for("An old chat", 20)
    # Ctrl+L twice (hide, show: the list takes the focus), the text at once after it.
    tmux("send-keys", "-t", "t", "C-l", "C-l", "after ctrl l")
    screen = tmux.wait_for("after ctrl l", 10)
    assert "after ctrl l" in input_box(screen), screen
    tmux("send-keys", "-t", "t", "Enter")  # sent, not "open the highlighted chat"
    screen = tmux.wait_for(r"\d+ tokens · [\d.]+ tok/s", 60)
    assert re.search(r"You\s*\n\s*▊?\s*after ctrl l", screen) or "after ctrl l" in screen
    assert "an old question" not in screen
    # A left click in the middle of the transcript (SGR mouse report: press, release), then text.
    x, y = 70, 8
    tmux("send-keys", "-t", "t", "-l", f"\x1b[<0;{x};{y}M\x1b[<0;{x};{y}m")
    tmux("send-keys", "-t", "t", "after a click")
    screen = tmux.wait_for("after a click", 10)
    assert "after a click" in input_box(screen), screen
    tmux("send-keys", "-t", "t", "C-q")
    tmux.wait_for("EXITED 0", 30)
