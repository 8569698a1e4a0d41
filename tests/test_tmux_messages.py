"""The message actions in a real terminal (tmux, a tiny real model): Ctrl+G regenerates and
the reply shows its alternative counter ‹ 2/2 ›; copying goes out as OSC 52, which tmux's
``set-clipboard on`` turns into a paste buffer holding exactly the message; typing right
after still lands in the message box."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmux_helpers import Tmux, tmux_session

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    with tmux_session(120, 36, ("set-clipboard", "on")) as t:
        yield t


def wait_buffer(tmux: Tmux, seconds: float = 10) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if tmux.buffers():
            return tmux("show-buffer")
        time.sleep(0.2)
    raise AssertionError(f"no paste buffer; the screen was:\n{tmux.screen()}")


def test_regenerate_shows_the_counter_and_copy_reaches_the_clipboard(
        tmux: Tmux, tmp_path: Path, tiny_target: Path) -> None:
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.yaml").write_text(
        "sampling:\n  temperature: 1.0\n  seed: 7\n  max_tokens: 10\n")
    env = f"SPECCHAT_HOME={home} PYTHONPATH={REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    tmux("respawn-pane", "-k", "-t", "t",
         f"cd {tmp_path} && {env} {sys.executable} -m specchat --model {tiny_target} "
         "--threads 1; echo EXITED $?; sleep 300")
    tmux.wait_for("palette", 90)
    tmux("send-keys", "-t", "t", "-l", "hello there")
    tmux("send-keys", "-t", "t", "Enter")
    tmux.wait_for(r"\d+ tokens · [\d.]+ tok/s", 90)
    assert tmux.buffers() == ""
    tmux("send-keys", "-t", "t", "C-g")
    tmux.wait_for("‹ 2/2 ›", 60)
    tmux.wait_for(r"\d+ tokens · [\d.]+ tok/s", 60)
    tmux("send-keys", "-t", "t", "M-Left")
    tmux.wait_for("‹ 1/2 ›", 10)
    # Select your message (the cursor moves from the message box) and copy it.
    tmux("send-keys", "-t", "t", "C-Up")
    tmux("send-keys", "-t", "t", "C-Up")
    tmux.wait_for("Message selected", 10)
    tmux("send-keys", "-t", "t", "F4")
    tmux.wait_for("Copy the message", 10)
    tmux("send-keys", "-t", "t", "c")
    assert wait_buffer(tmux) == "hello there"
    tmux.wait_for("Copied your message", 10)
    tmux("send-keys", "-t", "t", "Escape")  # leaves the cursor; then type: the box gets it
    time.sleep(0.5)
    tmux("send-keys", "-t", "t", "-l", "still here")
    tmux.wait_for("still here", 10)
    tmux("send-keys", "-t", "t", "C-q")
    tmux.wait_for("EXITED 0", 30)
