"""Search across chats (Ctrl+F) and the quick pair switcher (F8) in a real terminal (tmux), on
the tiny models saved as a pair in a fresh SPECCHAT_HOME: the keys arrive through a terminal,
the results and the switcher's list are drawn in it, and what happened is in the database."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmux_helpers import Tmux, tmux_session

from specchat.models.catalog import ModelEntry, PathSource, load_catalog
from specchat.models.pairing import save_pair
from specchat.paths import AppPaths
from specchat.store import ChatStore

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    with tmux_session(160, 40) as t:
        yield t


def test_search_then_switch_pair_in_a_real_terminal(tmux: Tmux, tmp_path: Path,
                                                    tiny_target: Path, tiny_draft: Path) -> None:
    root = tmp_path / "home"
    paths = AppPaths(root / "config", root / "data", root / "cache")
    paths.ensure()
    (root / "config" / "config.yaml").write_text(
        "sampling:\n  temperature: 0\n  max_tokens: 8\n")
    save_pair(paths, load_catalog(paths.user_catalog), "mine",
              ModelEntry("tinyt", "Tinytarget", PathSource(tiny_target)),
              ModelEntry("tinyd", "Tinydraft", PathSource(tiny_draft)))
    store = ChatStore.open(paths.chats_db)
    other = store.create_chat("Breakfast", pair="mine")
    store.add_message(other, "user", "What goes with toast?")
    sea = store.create_chat("Sea animals", pair="mine")
    for i in range(20):
        text = "The walrus climbs onto the ice." if i == 1 else f"Line {i} about the tides."
        store.add_message(sea, "user" if i % 2 == 0 else "assistant", text)
    store.close()

    env = (f"SPECCHAT_HOME={root} PYTHONPATH={REPO}{os.pathsep}"
           f"{os.environ.get('PYTHONPATH', '')}")
    tmux("respawn-pane", "-k", "-t", "t",
         # tmux's own environment says COLUMNS=80 LINES=24, which Textual would believe
         f"unset COLUMNS LINES; cd {tmp_path} && {env} {sys.executable} -m specchat --pair mine "
         "--threads 1; "
         "echo EXITED $?; sleep 300")
    tmux.wait_for("palette", 90)
    assert "mine: Tinytarget ← Tinydraft" in tmux.screen()

    # Ctrl+F, a word typed into the box: the chat's title over the text around the hit.
    tmux.keys("C-f")
    tmux.wait_for("Search all chats", 20)
    tmux.keys(*"walrus")
    screen = tmux.wait_for("1 message", 20)
    assert "Sea animals" in screen and "The walrus climbs onto the ice." in screen
    tmux.keys("Enter")
    tmux.wait_for(r"specchat · Sea animals", 20)
    # Scrolled up to it (the 2nd message of 20: the view starts at the end).
    tmux.wait_for("The walrus climbs onto the ice.", 40)  # Markdown draws late on a busy box

    # F8: every pair and model with its status; the draft model alone is the 3rd entry.
    tmux.keys("F8")
    screen = tmux.wait_for("Switch pair or model", 20)
    assert re.search(r"mine\s+pair · loaded", screen)
    assert re.search(r"tinyt\s+model · on disk", screen)
    assert re.search(r"demo\s+pair · not on disk", screen)
    entries = re.findall(r"(\S+)  (?:pair|model) · ", screen)
    assert entries[:3] == ["mine", "tinyt", "tinyd"], screen
    tmux.keys("Down", "Enter")  # from the first entry to the second: the target alone
    screen = tmux.wait_for(r"(?m)CPU · Tinytarget\s*$", 60)  # the stats bar: the model alone
    assert "specchat · Sea animals" in screen  # and the same chat, open again on it
    tmux.keys(*"hello")
    tmux.keys("Enter")
    tmux.wait_for(r"\d+ tokens · [\d.]+ tok/s", 60)
    tmux.keys("C-q")
    tmux.wait_for("EXITED 0", 30)
    store = ChatStore.open(paths.chats_db)
    try:
        chat = store.get_chat(sea)
        assert chat.pair == "tinyt" and chat.n_messages == 22  # went on there, with the model
        assert store.get_chat(other).pair == "mine"
    finally:
        store.close()
