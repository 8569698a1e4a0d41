"""A chat's reply format in the app (F10), driven with Pilot on tiny real models: a JSON schema
set for a chat makes its replies JSON that follows it, under the real speculative decoder; a
chat without one replies in free text; a schema or grammar that does not compile says why in
the dialog and nothing is saved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from textual.widgets import Select, Static, TextArea
from ui_helpers import (
    GREEDY,
    app_test,
    make_services,
    ready,
    reference_reply,
    screen_with,
    tiny_runtime,
    wait_for,
)

from specchat.config import UserConfig
from specchat.engine.decode.grammar import compile_grammar
from specchat.engine.decode.messages import Message
from specchat.store import ReplyFormat
from specchat.ui.app import SpecchatApp
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.screens.reply_format import ReplyFormatScreen
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.transcript import AssistantMessage

SIZE = (120, 36)
# Bounded (an enum and a one-digit integer) and compact (no free whitespace), so that even a
# random tiny model's reply ends, well inside max_tokens.
SCHEMA = json.dumps({
    "type": "object",
    "properties": {"answer": {"enum": ["yes", "no"]},
                   "n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["answer", "n"], "additionalProperties": False,
    "x-guidance": {"whitespace_flexible": False}})
SAMPLING = GREEDY.with_(max_tokens=60)


def follows_schema(text: str) -> bool:
    try:
        v = json.loads(text)
    except json.JSONDecodeError:
        return False
    return (isinstance(v, dict) and set(v) == {"answer", "n"} and v["answer"] in ("yes", "no")
            and type(v["n"]) is int and 0 <= v["n"] <= 9)


def topbar(chat: ChatScreen) -> str:
    return str(chat.query_one("#topbar", Static).render())


async def open_dialog(pilot: Any) -> ReplyFormatScreen:
    await pilot.press("f10")
    screen: ReplyFormatScreen = await screen_with(pilot, ReplyFormatScreen, "#format-source")
    return screen


async def fill(pilot: Any, dialog: ReplyFormatScreen, kind: str, text: str | None) -> None:
    dialog.query_one("#format-kind", Select).value = kind
    await pilot.pause()
    if text is not None:
        dialog.query_one("#format-source", TextArea).load_text(text)
    await pilot.pause()


async def say(pilot: Any, chat: ChatScreen, text: str) -> AssistantMessage:
    await pilot.click(ChatInput)
    await pilot.press(*text, "enter")
    await wait_for(pilot, lambda: chat.job is None and chat.job_widget is None, timeout=60)
    await pilot.pause()
    return list(chat.query(AssistantMessage))[-1]


@app_test
async def test_a_chat_set_to_a_json_schema_replies_in_json_under_speculation(
        tmp_path: Path, tiny_json_target: Path, tiny_json_draft: Path) -> None:
    runtime = tiny_runtime(tiny_json_target, tiny_json_draft)
    config = UserConfig(sampling=SAMPLING, gamma=3, drafter="model")
    services = make_services(tmp_path, runtime, config=config)
    store = services.store
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        assert "replies:" not in topbar(chat)
        dialog = await open_dialog(pilot)
        assert dialog.query_one("#format-kind", Select).value == "text"
        await fill(pilot, dialog, "json_schema", SCHEMA)
        await pilot.press("ctrl+s")  # compiled in the dialog's worker, then saved
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        assert chat.conversation.reply_format == ReplyFormat("json_schema", SCHEMA)
        assert "replies: JSON schema" in topbar(chat)
        assert store.list_chats() == []  # saved with the chat's first message

        reply = await say(pilot, chat, "hello there")
        assert reply.turn.status == "done"
        assert follows_schema(reply.turn.text), reply.turn.text
        # Greedy under speculation is the plain, masked target's reply, token for token.
        grammar = compile_grammar("json_schema", SCHEMA)
        history = [Message("system", config.system_prompt), Message("user", "hello there")]
        assert reply.turn.text == reference_reply(runtime, history,
                                                  SAMPLING.with_(grammar=grammar))
        chat_id = chat.conversation.chat_id
        assert chat_id is not None
        assert store.get_chat(chat_id).reply_format == ReplyFormat("json_schema", SCHEMA)
        stats = store.messages(chat_id)[1].stats
        assert stats is not None and stats.decoder == "speculative"  # drafts were made
        assert stats.generation.drafted > 0

        # A new chat replies in free text: the format is the chat's, not the app's.
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: chat.conversation.chat_id is None)
        assert "replies:" not in topbar(chat)
        free = await say(pilot, chat, "hello there")
        assert free.turn.text == reference_reply(runtime, history, SAMPLING)
        assert free.turn.text != reply.turn.text and not follows_schema(free.turn.text)
        other = chat.conversation.chat_id
        assert other is not None and store.get_chat(other).reply_format == ReplyFormat()

        # The first chat, opened again from the store, still replies in its schema.
        chat.open_chat(chat_id)
        await wait_for(pilot, lambda: chat.conversation.chat_id == chat_id)
        assert "replies: JSON schema" in topbar(chat)
        again = await say(pilot, chat, "and again")
        assert again.turn.status == "done" and follows_schema(again.turn.text), again.turn.text


@app_test
async def test_a_bad_schema_or_grammar_says_why_and_saves_nothing(tmp_path: Path,
                                                                 tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    store = services.store
    chat_id = store.create_chat("Records", reply_format=ReplyFormat("json_object"))
    store.add_message(chat_id, "user", "a record please")
    store.release(chat_id)
    schema_file = tmp_path / "record.json"
    schema_file.write_text(SCHEMA, encoding="utf-8")
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        chat.open_chat(chat_id)
        await wait_for(pilot, lambda: chat.conversation.chat_id == chat_id)
        assert "replies: JSON object" in topbar(chat)
        dialog = await open_dialog(pilot)
        assert dialog.query_one("#format-kind", Select).value == "json_object"
        error = dialog.query_one("#format-error", Static)
        editor = dialog.query_one("#format-source", TextArea)

        for kind, text, says in [
                ("json_schema", '{"type": "foo"}', "does not compile: Invalid type: foo"),
                ("json_schema", "{", "not valid JSON"),
                ("grammar", "start: foo", 'unknown name: "foo"'),
                ("json_schema", "   ", "paste a JSON schema first")]:
            await fill(pilot, dialog, kind, text)
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda s=says: s in str(error.render()))  # type: ignore[misc]
            assert str(error.render()).startswith("✗") and "\n" not in str(error.render())
            assert app.screen is dialog and not dialog.checking
            assert editor.text == text  # the user's text stays to be fixed
            assert store.get_chat(chat_id).reply_format == ReplyFormat("json_object")
            assert chat.conversation.reply_format == ReplyFormat("json_object")

        # A file that is not there says so; one that is fills the editor, and its kind.
        await fill(pilot, dialog, "text", None)
        dialog.query_one("#format-file").value = str(tmp_path / "nope.json")  # type: ignore[attr-defined]
        dialog.load_file()
        await wait_for(pilot, lambda: "no such file" in str(error.render()))
        assert editor.text == "   "
        dialog.query_one("#format-file").value = str(schema_file)  # type: ignore[attr-defined]
        dialog.load_file()
        await pilot.pause()
        assert editor.text == SCHEMA and dialog.kind == "json_schema"
        await pilot.press("escape")  # cancelled: nothing saved
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        assert store.get_chat(chat_id).reply_format == ReplyFormat("json_object")

        dialog = await open_dialog(pilot)
        dialog.query_one("#format-file").value = str(schema_file)  # type: ignore[attr-defined]
        dialog.load_file()
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        assert store.get_chat(chat_id).reply_format == ReplyFormat("json_schema", SCHEMA)
        assert "replies: JSON schema" in topbar(chat)

        # Back to free text: the schema's text is kept for later, the top bar says nothing.
        dialog = await open_dialog(pilot)
        assert dialog.query_one("#format-source", TextArea).text == SCHEMA
        await fill(pilot, dialog, "text", None)
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        assert store.get_chat(chat_id).reply_format == ReplyFormat("text", SCHEMA)
        assert "replies:" not in topbar(chat)
