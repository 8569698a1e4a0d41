"""The chat app driven with Pilot on tiny real models: send, stream, cancel, settings, history.

Tests that need speculative fates (accepted / corrected / bonus / rejected) use
``SpeculativeStandIn`` from ui_helpers (every fate, in a scripted pattern); one test runs the
real speculative decoder with auto γ.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from textual.widgets import Button, Static
from ui_helpers import (
    GREEDY,
    GatedDecoder,
    SpeculativeStandIn,
    app_test,
    make_services,
    ready,
    reference_reply,
    screen_with,
    tiny_runtime,
    wait_for,
)

from specchat.config import UserConfig, load_config
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.errors import FetchError
from specchat.models.catalog import PairEntry
from specchat.models.progress import Progress
from specchat.paths import AppPaths
from specchat.runtime.opening import Runtime
from specchat.ui.app import SpecchatApp
from specchat.ui.chat_settings import ChatSettings
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.screens.dialogs import ErrorDialog
from specchat.ui.screens.help import HelpScreen
from specchat.ui.screens.loading import LoadFailedScreen, LoadingScreen
from specchat.ui.screens.settings import SettingsScreen
from specchat.ui.services import AppServices, PairOpener
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.chat_list import ChatList
from specchat.ui.widgets.transcript import AssistantMessage
from specchat.ui.wizard.screen import WizardScreen

SIZE = (120, 36)


def standin(runtime: Runtime, settings: ChatSettings) -> SpeculativeStandIn:
    return SpeculativeStandIn(runtime.target_ctx)


async def send(pilot, text: str) -> AssistantMessage:  # type: ignore[no-untyped-def]
    chat = pilot.app.screen
    await pilot.click(ChatInput)
    await pilot.press(*text)
    await pilot.press("enter")
    await wait_for(pilot, lambda: chat.job_widget is not None or chat.job is None)
    replies = list(chat.query(AssistantMessage))
    return replies[-1]


async def finished(pilot) -> None:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: pilot.app.screen.job is None)
    await pilot.pause()


@app_test
async def test_a_reply_streams_in_with_every_fate_styled(tmp_path: Path, tiny_target: Path) -> None:
    """Speculative fates come from SpeculativeStandIn (real plain decoding, relabelled, so every
    fate shows); the text, the engine and the app are real."""
    runtime = tiny_runtime(tiny_target)
    services = make_services(tmp_path, runtime, make_decoder=standin)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        reply = await send(pilot, "hello there")
        await finished(pilot)
        kinds = {s.kind for s in reply.turn.trace.segments}
        assert kinds == {"a", "c", "b", "x"}
        expected = reference_reply(runtime, [Message("system", services.config.system_prompt),
                                             Message("user", "hello there")])
        assert reply.turn.text == expected  # the real model's greedy reply, whole
        assert reply.turn.status == "done"
        await pilot.press("ctrl+r")  # rejected drafts on: switches to the token view
        await pilot.pause()
        svg = app.export_screenshot().lower()
        for colour in ("#009e73", "#d55e00", "#56b4e9"):  # Okabe-Ito (rejected is dimmed)
            assert colour in svg
        assert "underline" in svg and "line-through" in svg  # cues beyond colour
        app.save_screenshot("fates.svg", path=str(tmp_path))
        bar = chat.stats_bar.stats
        assert bar.alpha is not None and bar.tau is not None and bar.gamma == 4
        assert chat.stats_bar.tps_history  # the sparkline got points while streaming
        (saved,) = services.store.list_chats()
        msgs = services.store.messages(saved.id)
        assert [m.role for m in msgs] == ["user", "assistant"]
        assert msgs[1].content == expected and '"x":"' in (msgs[1].fates or "")
        assert msgs[1].stats and msgs[1].stats.decoder == "speculative"
    assert runtime.target_ctx.ptr is None  # the app freed the models on exit


@app_test
async def test_the_real_speculative_decoder_with_auto_gamma_in_the_app(
        tmp_path: Path, tiny_target: Path, tiny_draft: Path) -> None:
    """No stand-in: the pair's speculative decoder with auto γ, from the config file's setting,
    through the app's own decoder factory; greedy, so the reply is the target's plain one."""
    runtime = tiny_runtime(tiny_target, tiny_draft)
    config = UserConfig(sampling=GREEDY.with_(max_tokens=40), gamma="auto")
    services = make_services(tmp_path, runtime, config=config)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        reply = await send(pilot, "the cat sat on")
        await finished(pilot)
        expected = reference_reply(runtime, [Message("system", config.system_prompt),
                                             Message("user", "the cat sat on")],
                                   GREEDY.with_(max_tokens=40))
        assert reply.turn.text == expected and reply.turn.status == "done"
        # (whether drafts were kept depends on auto-γ's timings: on two tiny models of one size
        # drafting seldom pays, and γ = 0 is a valid choice; the fates are tested elsewhere)
        bar = chat.stats_bar
        assert bar.stats.mode is not None and bar.stats.mode.startswith("auto · ")
        assert bar.gamma_history and bar.stats.alpha is not None
        assert "auto · " in str(bar.query_one("#stats-gamma", Static).render())
        (saved,) = services.store.list_chats()
        stats = services.store.messages(saved.id)[1].stats
        assert stats and stats.decoder == "speculative" and stats.gamma_mode.startswith("auto")


@app_test
async def test_the_planner_is_the_apps_default_and_says_what_it_chose(
        tmp_path: Path, tiny_target: Path, tiny_draft: Path) -> None:
    runtime = tiny_runtime(tiny_target, tiny_draft)
    config = UserConfig(sampling=GREEDY.with_(max_tokens=24))  # γ not set: the default
    services = make_services(tmp_path, runtime, config=config)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        assert chat.settings.gamma_mode == "plan"
        reply = await send(pilot, "the cat sat on")
        await finished(pilot)
        assert reply.turn.status == "done"
        bar = chat.stats_bar
        assert bar.stats.mode is not None and bar.stats.mode.startswith("plan")
        assert "planner" in str(bar.query_one("#stats-gamma", Static).render())


@app_test
async def test_a_reply_at_gamma_0_throughout_is_labelled_plain(
        tmp_path: Path, tiny_target: Path, tiny_draft: Path) -> None:
    """The label says what ran: the pair's speculative decoder taking only plain steps is plain."""
    runtime = tiny_runtime(tiny_target, tiny_draft)
    config = UserConfig(sampling=GREEDY.with_(max_tokens=12), gamma=0)
    services = make_services(tmp_path, runtime, config=config)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        reply = await send(pilot, "the cat sat on")
        await finished(pilot)
        assert "plain" in str(reply._header.render())
        assert "speculative" not in str(reply._header.render())
        (saved,) = services.store.list_chats()
        stats = services.store.messages(saved.id)[1].stats
        assert stats and stats.decoder == "plain"
        assert stats.generation.steps and not stats.generation.drafted


@app_test
async def test_plain_replies_render_markdown_and_flip_to_tokens(tmp_path: Path,
                                                                tiny_target: Path) -> None:
    app = SpecchatApp(make_services(tmp_path, tiny_runtime(tiny_target)))
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        reply = await send(pilot, "the cat")
        await finished(pilot)
        assert {s.kind for s in reply.turn.trace.segments} == {"p"}
        assert reply._markdown is not None and reply._markdown.display
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert chat.view == "tokens" and reply._fates.display and not reply._markdown.display
        assert "plain" in str(reply._header.render())


@app_test
async def test_cancel_keeps_the_partial_reply_and_the_next_message_works(
        tmp_path: Path, tiny_target: Path) -> None:
    runtime = tiny_runtime(tiny_target)
    gated: list[GatedDecoder] = []

    def decoder(rt: Runtime, _s: ChatSettings) -> GatedDecoder:
        gated.append(GatedDecoder(PlainDecoder(rt.target_ctx), after=6))
        return gated[-1]

    config = make_services(tmp_path, runtime).config.with_(sampling=GREEDY.with_(max_tokens=40))
    services = make_services(tmp_path / "s", runtime, config=config, make_decoder=decoder)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        reply = await send(pilot, "a b c")
        await wait_for(pilot, lambda: gated[0].paused.is_set() and bool(reply.turn.text))
        assert chat.job is not None  # still generating
        await pilot.press("escape")
        await finished(pilot)
        partial = reply.turn.text
        assert reply.turn.status == "cancelled" and partial
        assert "stopped by you" in str(reply._meta.render())
        gated[0].gate.set()  # later replies run through
        second = await send(pilot, "and then?")
        await finished(pilot)
        assert second.turn.status == "done"
        history = [Message("system", services.config.system_prompt), Message("user", "a b c"),
                   Message("assistant", partial), Message("user", "and then?")]
        # The KV cache the cancelled reply left behind gave the same answer a fresh one does.
        assert second.turn.text == reference_reply(runtime, history, config.sampling)
        (saved,) = services.store.list_chats()
        statuses = [(m.role, m.status) for m in services.store.messages(saved.id)]
        assert statuses == [("user", "done"), ("assistant", "cancelled"), ("user", "done"),
                            ("assistant", "done")]


@app_test
async def test_quitting_mid_reply_stops_it_and_frees_the_models(tmp_path: Path,
                                                               tiny_target: Path) -> None:
    runtime = tiny_runtime(tiny_target)
    gated: list[GatedDecoder] = []

    def decoder(rt: Runtime, _s: ChatSettings) -> GatedDecoder:
        gated.append(GatedDecoder(PlainDecoder(rt.target_ctx), after=3))
        return gated[-1]

    services = make_services(tmp_path, runtime, make_decoder=decoder)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        reply = await send(pilot, "hello")
        await wait_for(pilot, lambda: gated[0].paused.is_set() and bool(reply.turn.text))
        await pilot.press("ctrl+q")  # the gate never opens: only the cancel event ends it
    assert chat.idle.is_set() and runtime.target_ctx.ptr is None
    (saved,) = services.store.list_chats()
    _user, partial = services.store.messages(saved.id)
    assert (partial.role, partial.status) == ("assistant", "cancelled") and partial.content


@app_test
async def test_settings_change_the_engine_and_are_saved(tmp_path: Path, tiny_target: Path) -> None:
    seen: list[ChatSettings] = []

    def decoder(rt: Runtime, s: ChatSettings) -> PlainDecoder:
        seen.append(s)
        return PlainDecoder(rt.target_ctx)

    services = make_services(tmp_path, tiny_runtime(tiny_target), make_decoder=decoder)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await pilot.press("ctrl+s")
        form = await screen_with(pilot, SettingsScreen, "#top-p")
        form.query_one("#top-p").value = "2"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, SettingsScreen)  # a bad value keeps the form open
        assert "top-p" in str(form.query_one("#settings-error").render())
        for widget_id, value in (("top-p", "0.9"), ("max-tokens", "7"), ("temperature", "0"),
                                 ("seed", "11"), ("gamma", "3")):
            form.query_one(f"#{widget_id}").value = value
        form.query_one("#gamma-mode").value = "fixed"
        form.query_one("#drafter").value = "ngram,model"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.screen is chat)
        reply = await send(pilot, "hello")
        await finished(pilot)
        assert reply.turn.stats and reply.turn.stats.generation.generated_tokens == 7
        assert reply.turn.stats.generation.stop_reason == "length"
        assert "max tokens reached" in str(reply._meta.render())
        assert (seen[-1].gamma_mode, seen[-1].gamma, seen[-1].drafter) == ("fixed", 3,
                                                                         "ngram,model")
        assert chat.stats_bar.gamma_mode == "fixed 3"
    saved = yaml.safe_load(services.config_path.read_text())  # type: ignore[union-attr]
    assert saved["gamma"] == 3 and saved["drafter"] == "ngram,model" and saved["ngram"] is False
    assert saved["sampling"]["max_tokens"] == 7 and saved["sampling"]["seed"] == 11
    assert saved["sampling"]["top_p"] == 0.9


@app_test
async def test_a_past_chat_reloads_with_its_colours(tmp_path: Path, tiny_target: Path) -> None:
    """Fates from SpeculativeStandIn (see ui_helpers): every fate, in a fixed pattern."""
    services = make_services(tmp_path, tiny_runtime(tiny_target), make_decoder=standin)
    async with SpecchatApp(services).run_test(size=SIZE) as pilot:
        await ready(pilot)
        original = (await send(pilot, "hello there"))
        await finished(pilot)
        segments = list(original.turn.trace.segments)
    # A new app on the same database: the chat is in the list and opens with its fates.
    store_path = services.store.path
    services.store.close()
    services2 = make_services(tmp_path, tiny_runtime(tiny_target), make_decoder=standin)
    assert services2.store.path == store_path
    app = SpecchatApp(services2)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        assert not list(chat.query(AssistantMessage))  # a new chat to start with
        chat.query_one(ChatList).focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: bool(list(chat.query(AssistantMessage))))
        (reloaded,) = chat.query(AssistantMessage)
        assert reloaded.turn.trace.segments == segments
        await pilot.press("ctrl+r")
        await pilot.pause()
        svg = app.export_screenshot().lower()
        assert "#d55e00" in svg and "line-through" in svg
        assert chat.stats_bar.stats.alpha is not None  # the stats bar shows the saved figures
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert not list(chat.query(AssistantMessage)) and chat.conversation.chat_id is None


@app_test
async def test_rename_delete_and_export_a_chat(tmp_path: Path, tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await send(pilot, "first chat")
        await finished(pilot)
        await pilot.press("ctrl+o")
        (exported,) = tmp_path.glob("specchat-*.md")
        assert exported.read_text().startswith("# first chat\n")
        await pilot.press("ctrl+o")  # again: a second file, the first one is never overwritten
        assert len(list(tmp_path.glob("specchat-*.md"))) == 2
        chat.query_one(ChatList).focus()
        await pilot.press("f2")
        await pilot.pause()
        await pilot.press("ctrl+u", *"renamed", "enter")
        await wait_for(pilot, lambda: app.screen is chat)
        assert services.store.list_chats()[0].title == "renamed"
        assert "renamed" in str(chat.query_one("#topbar").render())
        chat.query_one(ChatList).focus()
        await pilot.press("delete")
        await pilot.pause()
        await pilot.press("y")
        await wait_for(pilot, lambda: not services.store.list_chats())
        assert chat.conversation.chat_id is None


@app_test
async def test_brackets_in_text_are_shown_as_written(tmp_path: Path, tiny_target: Path) -> None:
    app = SpecchatApp(make_services(tmp_path, tiny_runtime(tiny_target)))
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await send(pilot, "[b]x[/b] and [/]")  # Rich markup, and a broken tag
        await finished(pilot)
        assert "[b]x[/b] and [/]" in str(chat.query_one("#topbar").render())
        assert "[b]x[/b] and [/]" in app.export_screenshot().replace("&#160;", " ")


@app_test
async def test_keys_help_and_newline(tmp_path: Path, tiny_target: Path) -> None:
    app = SpecchatApp(make_services(tmp_path, tiny_runtime(tiny_target)))
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await pilot.click(ChatInput)
        await pilot.press("a", "ctrl+j", "b", "shift+enter", "c")
        assert chat.query_one(ChatInput).text == "a\nb\nc"
        assert chat.job is None  # a newline is not a send
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        console = Console(width=100, record=True, file=io.StringIO())
        console.print(app.screen.table)
        body = console.export_text()
        assert "Ctrl+N" in body and "Esc" in body and "rejected draft" in body
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is chat)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Show / hide past")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: not chat.query_one("#sidebar").display)


@app_test
async def test_engine_errors_show_a_dialog_and_the_app_goes_on(tmp_path: Path,
                                                               tiny_target: Path) -> None:
    app = SpecchatApp(make_services(tmp_path, tiny_runtime(tiny_target, n_ctx=64)))
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        assert chat.engine.n_ctx == 256  # llama.cpp rounds the context up to 256
        chat.query_one(ChatInput).load_text("the cat sat on the mat " * 40)
        await pilot.click(ChatInput)
        await pilot.press("enter")
        await screen_with(pilot, ErrorDialog, ".dialog-body")
        assert "context" in str(app.screen.query_one(".dialog-body").render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is chat)
        reply = await send(pilot, "hi")
        await finished(pilot)
        assert reply.turn.status == "done"


@app_test
async def test_loading_shows_progress_and_a_failure_can_be_retried(tmp_path: Path,
                                                                  tiny_target: Path) -> None:
    attempts: list[int] = []

    def opener(report):  # type: ignore[no-untyped-def]
        attempts.append(1)
        report(Progress("Fetching tiny", 40, 100))
        if len(attempts) == 1:
            raise FetchError("no network: cannot reach pypi.org")
        return tiny_runtime(tiny_target)

    app = SpecchatApp(make_services(tmp_path, opener))
    async with app.run_test(size=SIZE) as pilot:
        await screen_with(pilot, LoadFailedScreen, "#failed-message")
        assert "no network" in str(app.screen.query_one("#failed-message").render())
        await pilot.press("r")
        await ready(pilot)
        assert len(attempts) == 2


@app_test
async def test_the_loading_screen_draws_progress_records(tmp_path: Path) -> None:
    screen = LoadingScreen("demo")

    class Host(SpecchatApp):
        def on_mount(self) -> None:
            self.push_screen(screen)

    app = Host(make_services(tmp_path, lambda _r: pytest.fail("not opened")))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen.show_progress(Progress("Fetching smollm2 from PyPI", 25_000_000, 100_000_000))
        await pilot.pause()
        bar = screen.query_one("#loading-bar")
        assert bar.total == 100_000_000 and bar.progress == 25_000_000
        detail = str(screen.query_one("#loading-detail").render())
        assert detail.startswith("25.0 MB / 100.0 MB")


# --- the pairing wizard inside the app ------------------------------------------------------


def pair_services(tmp_path: Path, home: AppPaths, tiny_target: Path, tiny_draft: Path,
                  first_run: bool) -> AppServices:
    opened: list[str] = []

    def open_pair(pair_id: str) -> PairOpener:
        opened.append(pair_id)
        return PairOpener(pair_id, 3, lambda _report: tiny_runtime(tiny_target, tiny_draft))

    return make_services(tmp_path, tiny_runtime(tiny_target), open_pair=open_pair, paths=home,
                         first_run=first_run, config_path=home.config_file)


@app_test
async def test_first_run_opens_the_wizard_and_esc_starts_the_default(
        tmp_path: Path, home: AppPaths, tiny_target: Path, tiny_draft: Path) -> None:
    services = pair_services(tmp_path, home, tiny_target, tiny_draft, first_run=True)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        wizard = await screen_with(pilot, WizardScreen, "#welcome-advice")
        assert wizard.step == "step-welcome"
        await wait_for(pilot, lambda: "Recommended here:" in str(
            wizard.query_one("#welcome-advice", Static).render()))
        qwen = str(wizard.query_one("#welcome-qwen", Button).label)
        demo = str(wizard.query_one("#welcome-demo", Button).label)
        assert qwen == "qwen-coder: real answers (Qwen2.5 Coder 1.5B) · 1.6 GB download"
        assert demo.startswith("demo: a toy for trying the interface (SmolLM2 135M) · 98.4 MB "
                               "download, ~") and demo.endswith(" MB on disk")
        assert app.runtime is None  # nothing loads behind the wizard
        await pilot.press("escape")
        chat = await ready(pilot)
        assert chat.runtime.draft_ctx is None  # the default it was given: one tiny model
    assert home.config_file.exists()  # the next start goes straight to the chat
    assert load_config(home.config_file).default_pair is None


@app_test
async def test_the_welcome_starts_qwen_coder_or_goes_on_to_the_wizard(
        tmp_path: Path, home: AppPaths, tiny_target: Path, tiny_draft: Path) -> None:
    services = pair_services(tmp_path, home, tiny_target, tiny_draft, first_run=True)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        wizard = await screen_with(pilot, WizardScreen, "#welcome-advice")
        # The recommendation fills in from a worker: click once the step has settled.
        await wait_for(pilot, lambda: "Recommended" in str(
            wizard.query_one("#welcome-advice", Static).render()))
        await pilot.click("#welcome-pair")
        await wait_for(pilot, lambda: wizard.step == "step-target")
        await pilot.click("#back")
        await wait_for(pilot, lambda: wizard.step == "step-welcome")
        await pilot.click("#welcome-qwen")
        chat = await ready(pilot)
        assert chat.runtime.draft_ctx is not None  # what open_pair("qwen-coder") gave
        assert services.label == "qwen-coder"
    assert load_config(home.config_file).default_pair == "qwen-coder"


@app_test
async def test_a_pair_saved_in_the_wizard_becomes_the_default_and_the_app_reopens_on_it(
        tmp_path: Path, home: AppPaths, tiny_target: Path, tiny_draft: Path) -> None:
    services = pair_services(tmp_path, home, tiny_target, tiny_draft, first_run=False)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        first = await ready(pilot)
        old_runtime = first.runtime
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, WizardScreen))
        app.screen.dismiss(PairEntry("mine", "tiny-target", "tiny-draft", gamma=3))
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen)
                       and app.screen is not first and bool(app.screen.query(ChatInput)))
        await pilot.pause()
        chat = app.screen
        assert isinstance(chat, ChatScreen) and chat.runtime.draft_ctx is not None
        assert old_runtime.target_ctx.ptr is None  # the old models were freed
        assert services.label == "mine" and services.pair_gamma == 3
        reply = await send(pilot, "hello")
        await finished(pilot)
        assert reply.turn.text and chat.engine.decoder.name == "speculative"
    saved = load_config(home.config_file)
    assert saved.default_pair == "mine"


@app_test
async def test_the_wizard_is_in_the_command_palette_and_cancelling_changes_nothing(
        tmp_path: Path, home: AppPaths, tiny_target: Path, tiny_draft: Path) -> None:
    services = pair_services(tmp_path, home, tiny_target, tiny_draft, first_run=False)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        titles = [c.title for c in app.get_system_commands(chat)]
        assert "Pair models (wizard)" in titles
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, WizardScreen))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is chat)
        assert services.label == "tiny" and not home.config_file.exists()
