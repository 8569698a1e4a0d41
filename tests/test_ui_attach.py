"""Files attached to a message in the app (F2), driven with Pilot on the tiny real models: the
chip and its tokens, the ctx figure before sending, the refusals (too long for the context, a
binary file, a file gone by send time), and what is sent, stored and predicted."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from textual.widgets import Button, DirectoryTree, Input
from ui_helpers import (
    GREEDY,
    app_test,
    make_services,
    ready,
    screen_with,
    tiny_runtime,
    wait_for,
)

from specchat.config import UserConfig
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.events import Event
from specchat.engine.decode.messages import Message
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.tools.files import Attachment, files_in, read_attachment, split_files, with_files
from specchat.ui.app import SpecchatApp
from specchat.ui.chat_settings import ChatSettings
from specchat.ui.screens.attach import AttachScreen
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.screens.race import SETTINGS_CHOICE, race_settings
from specchat.ui.services import runtime_decoder
from specchat.ui.widgets.attachments import AttachmentBar
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.transcript import UserMessage

SIZE = (120, 36)
ORDERS = "def total(items):\n    total = 0\n    for x in items:\n        total += x\n    return total\n"


class Recording:
    """The app's own decoder, noting each reply's predicted output."""

    def __init__(self, inner: Decoder, seen: list[tuple[int, ...]]) -> None:
        self.inner, self.seen = inner, seen
        self.name = inner.name
        self.target = inner.target

    def run(self, prompt: Sequence[int], settings: SamplerSettings,
            cancel: threading.Event) -> Iterator[Event]:
        self.seen.append(settings.prediction)
        yield from self.inner.run(prompt, settings, cancel)


def notices(app: Any) -> list[str]:
    return [n.message for n in list(app._notifications)]


async def attach(pilot: Any, path: Path | str) -> None:
    await pilot.press("f2")
    picker = await screen_with(pilot, AttachScreen, "#attach-path")
    picker.query_one("#attach-path", Input).value = str(path)
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChatScreen))


def chips(chat: ChatScreen) -> list[str]:
    return [str(b.label) for b in chat.query_one(AttachmentBar).query(Button)]


def test_the_chats_decoder_drafts_from_attached_files_and_a_races_does_not(
        tiny_target: Path, tiny_draft: Path) -> None:
    runtime = tiny_runtime(tiny_target, tiny_draft)
    try:
        chat = runtime_decoder(runtime, ChatSettings())
        assert isinstance(chat, SpeculativeDecoder)
        assert chat.drafters[0].name == "prediction"
        race = runtime_decoder(runtime, race_settings(ChatSettings(), SETTINGS_CHOICE, runtime))
        assert isinstance(race, SpeculativeDecoder)
        assert "prediction" not in [d.name for d in race.drafters]
    finally:
        runtime.close()


@app_test
async def test_an_attached_file_is_a_chip_counted_in_ctx_and_sent_fenced(
        tmp_path: Path, tiny_target: Path, tiny_draft: Path) -> None:
    src = tmp_path / "orders.py"
    src.write_text(ORDERS, encoding="utf-8")
    runtime = tiny_runtime(tiny_target, tiny_draft)
    seen: list[tuple[int, ...]] = []
    services = make_services(tmp_path, runtime,
                             make_decoder=lambda rt, s: Recording(runtime_decoder(rt, s), seen))
    async with SpecchatApp(services).run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await attach(pilot, src)
        await wait_for(pilot, lambda: bool(chips(chat)))
        tokens = len(runtime.target.tokenize(ORDERS, add_special=False, parse_special=False))
        (label,) = chips(chat)
        assert label == f"orders.py · {len(ORDERS)} bytes · {tokens} tokens ✕"
        # The ctx figure counts the file before anything is sent: the prompt it would make.
        engine = ChatEngine(chat.engine.decoder)
        system = services.config.system_prompt
        with_file = with_files("", [read_attachment(str(src), 1 << 20)])
        expected = len(engine.tokenize_chat([Message("system", system),
                                             Message("user", with_file)]))
        assert chat.stats_bar.pending == expected
        assert f"ctx {expected}/512 with files" in str(chat.stats_bar.query_one("#stats-line")
                                                         .render())
        chat.query_one(ChatInput).focus()
        await pilot.press(*"rename total")
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(chat.conversation.turns) == 2 and chat.job is None)
        user = chat.conversation.turns[0]
        sent = with_files("rename total", [read_attachment(str(src), 1 << 20)])
        assert user.text == sent
        assert user.text.startswith(f"{src}\n```python\n{ORDERS}```\n\nrename total")
        assert chat.conversation.title == "rename total"  # the words, not the file
        # The transcript shows the file as one line; the chat keeps its whole text.
        shown = str(chat.query_one(UserMessage).render())
        assert shown == f"You\n▣ {src} · 5 lines · {len(ORDERS)} bytes\nrename total"
        (saved,) = services.store.list_chats()
        assert services.store.messages(saved.id)[0].content == sent  # export, regenerate
        # The file went to the prediction drafter as the reply's predicted output.
        assert seen[-1] == tuple(runtime.target.tokenize(ORDERS, add_special=False,
                                                         parse_special=False))
        assert chips(chat) == [] and chat.stats_bar.pending is None
        assert chat.query_one(ChatInput).text == ""
        # A regenerated reply is offered the file again: the session finds it in the message.
        await pilot.press("ctrl+g")
        await wait_for(pilot, lambda: len(seen) == 2 and chat.job is None)
        assert seen[-1] == seen[0]


def test_the_files_a_message_carries_are_found_in_its_text() -> None:
    files = [Attachment("a.py", "x = 1\n", 6), Attachment("b.md", "has ``` inside\n", 15),
             Attachment("empty.txt", "", 0)]
    assert files_in(with_files("do it", files)) == ["x = 1\n", "has ``` inside\n", ""]
    assert files_in(with_files("do it", [Attachment("c.txt", "no newline", 10)])) == ["no newline\n"]
    assert files_in("just words") == [] and files_in("a.py\n```python\nnever closed") == []
    assert split_files(with_files("do it", files[:1])) == ([("a.py", "x = 1\n")], "do it")
    pasted = "Fix this:\n```python\nx = 1\n```\n\nplease"  # typed words, not a file
    assert split_files(pasted) == ([], pasted)


@app_test
async def test_a_file_that_overflows_the_context_is_refused_with_the_numbers(
        tmp_path: Path, tiny_target: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text("hello there\n" * 100, encoding="utf-8")
    services = make_services(tmp_path, tiny_runtime(tiny_target, n_ctx=256),
                             config=UserConfig(sampling=GREEDY.with_(max_tokens=64)))
    async with SpecchatApp(services).run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await attach(pilot, big)
        await wait_for(pilot, lambda: any("the context holds" in n
                                          for n in notices(pilot.app)))
        (note,) = [n for n in notices(pilot.app) if "the context holds" in n]
        assert note.startswith("the message is ")
        assert "tokens with its files (big.txt " in note
        assert "the context holds 256 with 64 kept for the reply: remove a file" in note
        assert chips(chat) == [] and chat.stats_bar.pending is None


@app_test
async def test_what_cannot_be_attached_is_refused_and_a_vanished_file_is_not_sent(
        tmp_path: Path, tiny_target: Path) -> None:
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x7fELF\0\0\1")
    notes = tmp_path / "notes.md"
    notes.write_text("# notes\n", encoding="utf-8")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("café".encode("latin-1"))
    big = tmp_path / "big.txt"
    big.write_text("x" * 2048, encoding="utf-8")
    services = make_services(tmp_path, tiny_runtime(tiny_target),
                             config=UserConfig(sampling=GREEDY, file_limit_kb=1))
    async with SpecchatApp(services).run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await attach(pilot, binary)
        await wait_for(pilot, lambda: any("looks binary" in n for n in notices(pilot.app)))
        assert chips(chat) == []
        for path, sentence in ((tmp_path / "no-such-file.txt", "no such file"),
                               (fifo, "is a FIFO (a pipe), not a file"),
                               (latin, "is not UTF-8 text (byte 3)"),
                               (big, "is 2 KB, over the 1 KB limit for an attached file"),
                               (Path("/dev/null"), "is a device, not a file")):
            await attach(pilot, path)
            await wait_for(pilot, lambda s=sentence: any(s in n for n in notices(pilot.app)))
            assert chips(chat) == []
        # A file that goes between attaching and sending: nothing is sent, nothing is lost.
        await attach(pilot, notes)
        await wait_for(pilot, lambda: bool(chips(chat)))
        notes.unlink()
        chat.query_one(ChatInput).focus()
        await pilot.press(*"sum it up")
        await pilot.press("enter")
        await wait_for(pilot, lambda: any("it was attached" in n for n in notices(pilot.app)))
        (note,) = [n for n in notices(pilot.app) if "it was attached" in n]
        assert note.startswith(f"{notes}: no such file")
        assert note.endswith("The message and its files are kept.")
        assert chat.conversation.turns == () and services.store.list_chats() == []
        assert chat.query_one(ChatInput).text == "sum it up" and len(chips(chat)) == 1
        # Another chat shown: the figure is measured again, for that chat.
        chat.stats_bar.pending = -1
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: (chat.stats_bar.pending or -1) > 0)
        # The chip is removable: pressing it takes the file off the message.
        await pilot.click(".chip")
        await wait_for(pilot, lambda: chips(chat) == [])
        assert chat.stats_bar.pending is None



@app_test
async def test_at_and_tab_complete_a_path_and_attach_the_file(
        tmp_path: Path, tiny_target: Path, monkeypatch: Any) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "orders.py").write_text(ORDERS, encoding="utf-8")
    (tmp_path / "src" / "other.txt").write_text("x\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    services = make_services(tmp_path / "home", tiny_runtime(tiny_target))
    async with SpecchatApp(services).run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        box = chat.query_one(ChatInput)
        await pilot.press(*"look at @sr", "tab")
        assert box.text == "look at @src/" and box.has_focus
        await pilot.press("tab")  # two names match: their common start, then their list
        assert box.text == "look at @src/o"
        await pilot.press("tab")
        await wait_for(pilot, lambda: any("orders.py, other.txt" in n
                                          for n in notices(pilot.app)))
        assert box.text == "look at @src/o"
        await pilot.press("r", "tab")
        await wait_for(pilot, lambda: bool(chips(chat)))
        assert box.text == "look at "
        assert chips(chat)[0].startswith("orders.py · ")
        assert chat.files.files[0].path == "src/orders.py"
        await pilot.press("tab")  # no @ before the cursor: Tab moves the focus, as before
        assert not box.has_focus


@app_test
async def test_the_picker_attaches_a_file_chosen_in_the_folder_tree(
        tmp_path: Path, tiny_target: Path, monkeypatch: Any) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "orders.py").write_text(ORDERS, encoding="utf-8")
    monkeypatch.chdir(work)
    services = make_services(tmp_path / "home", tiny_runtime(tiny_target))
    async with SpecchatApp(services).run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await pilot.press("f2")
        picker = await screen_with(pilot, AttachScreen, DirectoryTree)
        tree = picker.query_one(DirectoryTree)
        await wait_for(pilot, lambda: len(tree.root.children) == 1)
        await pilot.press("down")  # from the path field to the tree
        assert tree.has_focus
        await pilot.press("down", "enter")  # the folder's first entry: orders.py
        await wait_for(pilot, lambda: bool(chips(chat)))
        assert chat.files.files[0].path == "orders.py"  # relative to the folder it started in
