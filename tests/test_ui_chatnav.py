"""Finding and switching in the chat app, driven with Pilot on tiny real models: search across
chats (Ctrl+F), a chat's pair, the quick pair switcher (F8), system-prompt presets (F9), and
the loading screen's percentage and memory estimate."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from textual.widgets import Input, OptionList, ProgressBar, Static
from ui_helpers import GREEDY, app_test, make_services, ready, screen_with, tiny_runtime
from ui_helpers import wait_for as wait_briefly

from specchat.cli.app import opener
from specchat.config import UserConfig
from specchat.engine.decode.events import Event
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.loading import RuntimeOptions, select
from specchat.models.catalog import Catalog, ModelEntry, PairEntry, PathSource
from specchat.models.choices import Choice
from specchat.models.progress import Progress, ProgressFn
from specchat.models.resolver import ModelResolver
from specchat.paths import AppPaths
from specchat.runtime.opening import Runtime
from specchat.store import ChatStore
from specchat.ui.app import SpecchatApp
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.screens.dialogs import ConfirmDialog
from specchat.ui.screens.loading import LOADING_TASK, LoadingScreen
from specchat.ui.screens.presets import PresetPicker
from specchat.ui.screens.race_pickers import PairPicker
from specchat.ui.screens.search import SearchScreen
from specchat.ui.services import AppServices, PairOpener
from specchat.ui.widgets.chat_input import ChatInput

SIZE = (120, 36)


async def wait_for(pilot, check: Callable[[], bool], timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    """As ui_helpers' wait_for, with room for a machine shared by several test runs."""
    await wait_briefly(pilot, check, timeout)


def seed(store: ChatStore, pair: str = "tiny-target") -> tuple[int, int]:
    """Two chats; the second has a long history whose 3rd message holds the word 'walrus'."""
    a = store.create_chat("Breakfast", pair=pair)
    store.add_message(a, "user", "What goes with toast?")
    store.add_message(a, "assistant", "Butter, mostly.")
    b = store.create_chat("Sea animals", pair=pair)
    target = 0
    for i in range(30):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"Message {i} about fish and the tides."
        if i == 2:
            text = "The walrus uses its tusks to climb onto the ice."
        mid = store.add_message(b, role, text)
        if i == 2:
            target = mid
    for c in (a, b):
        store.release(c)  # as a closed specchat leaves them
    return b, target


@app_test
async def test_search_finds_a_message_in_another_chat_and_opens_it_there(
        tmp_path: Path, tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    chat_id, message_id = seed(services.store)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await pilot.press("ctrl+f")
        search = await screen_with(pilot, SearchScreen, Input)
        assert isinstance(search, SearchScreen)
        await pilot.press(*"walr")  # a prefix is enough
        await wait_for(pilot, lambda: len(search.hits) == 1)
        results = search.query_one(OptionList)
        shown = str(results.get_option_at_index(0).prompt)
        assert "Sea animals" in shown and "walrus uses its tusks" in shown
        assert "1 message" in str(search.query_one("#search-status", Static).render())
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is chat and chat.conversation.chat_id == chat_id)
        await wait_for(pilot, lambda: bool(chat.transcript.query(".-found")))
        (found,) = chat.transcript.query(".-found")
        assert found.turn.message_id == message_id  # type: ignore[attr-defined]
        # It is on screen although it is the 3rd of 30 messages (the view follows the end).
        await wait_for(pilot, lambda: found.region.y >= chat.transcript.region.y
                       and found.region.bottom <= chat.transcript.region.bottom
                       and found.region.height > 0)
        assert chat.query_one(ChatInput).has_focus  # ready to type on
        # Ctrl+F again offers the last search; nothing found says so; Esc changes nothing.
        await pilot.press("ctrl+f")
        search = await screen_with(pilot, SearchScreen, Input)
        assert search.query_one(Input).value == "walr"
        await pilot.press("ctrl+u", *"narwhal")
        await wait_for(pilot, lambda: "No message matches" in str(
            search.query_one("#search-status", Static).render()))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is chat)
        assert chat.conversation.chat_id == chat_id


@app_test
async def test_search_results_are_picked_with_the_arrows(tmp_path: Path,
                                                        tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    chat_id, _ = seed(services.store)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await pilot.press("ctrl+f")
        search = await screen_with(pilot, SearchScreen, Input)
        await pilot.press(*"toast OR butter")  # OR is a word here, not the FTS operator
        await wait_for(pilot, lambda: "No message matches" in str(
            search.query_one("#search-status", Static).render()))
        await pilot.press("ctrl+u", *"tides")
        await wait_for(pilot, lambda: len(search.hits) > 5)
        await pilot.press("down")  # from the box into the results
        results = search.query_one(OptionList)
        assert results.has_focus
        await pilot.press("down", "down", "enter")
        picked = search.hits[2]
        await wait_for(pilot, lambda: app.screen is chat and chat.conversation.chat_id == chat_id)
        await wait_for(pilot, lambda: bool(chat.transcript.query(".-found")))
        (found,) = chat.transcript.query(".-found")
        assert found.turn.message_id == picked.message_id  # type: ignore[attr-defined]


# --- a pair per chat, and the quick switcher (F8) -------------------------------------------------


def switching_services(tmp_path: Path, target: Path, draft: Path) -> tuple[AppServices, list[str]]:
    """Services that can load the tiny model alone ("tiny-target") or the tiny pair ("tiny"),
    and know a pair that is not on disk ("big"); ``opened`` records each load."""
    opened: list[str] = []

    def runtime_for(label: str) -> Callable[[ProgressFn], Runtime]:
        def open_runtime(_report: ProgressFn) -> Runtime:
            opened.append(label)
            return tiny_runtime(target, draft if label == "tiny" else None)
        return open_runtime

    choices = [Choice("tiny", "pair", True, detail="Tiny Target F32 + Tiny Target Q2"),
               Choice("tiny-target", "model", True, detail="Tiny Target F32"),
               Choice("big", "pair", False, detail="Big + Small")]

    def choice_for(label: str) -> Choice:
        return next((c for c in choices if c.label == label),
                    Choice(label, "pair", False, known=False))

    def open_label(label: str) -> PairOpener:
        return PairOpener(label, 4 if label == "tiny" else None, runtime_for(label))

    services = make_services(tmp_path, runtime_for("tiny-target"), pair_choices=lambda: choices,
                             choice_for=choice_for, open_label=open_label)
    return services, opened


async def open_from_list(pilot, chat: ChatScreen, chat_id: int) -> None:  # type: ignore[no-untyped-def]
    chat.open_chat(chat_id)
    await wait_for(pilot, lambda: chat.conversation.chat_id == chat_id)


@app_test
async def test_f8_switches_the_pair_and_the_chat_goes_on_with_it(
        tmp_path: Path, tiny_target: Path, tiny_draft: Path) -> None:
    services, opened = switching_services(tmp_path, tiny_target, tiny_draft)
    chat_id, _ = seed(services.store, pair="tiny-target")
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await open_from_list(pilot, chat, chat_id)
        assert not isinstance(app.screen, ConfirmDialog)  # its own pair is loaded: no offer
        await pilot.press("f8")
        await screen_with(pilot, PairPicker, OptionList)
        options = app.screen.query_one(OptionList)
        shown = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert [s.split()[0] for s in shown] == ["tiny", "tiny-target", "big"]
        assert "model · loaded" in shown[1] and "pair · not on disk" in shown[2]
        assert options.get_option_at_index(2).disabled  # not on disk: shown, not offered
        options.focus()
        await pilot.press("home", "enter")  # the first: the tiny pair
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen)
                       and app.screen is not chat)
        new = await ready(pilot)
        assert opened == ["tiny-target", "tiny"] and new.pair_label == "tiny"
        assert new.runtime.draft is not None
        await wait_for(pilot, lambda: new.conversation.chat_id == chat_id)  # the same chat
        assert len(new.conversation.turns) == 30
        assert services.store.get_chat(chat_id).pair == "tiny-target"  # until it goes on
        await pilot.click(ChatInput)
        await pilot.press(*"and now?", "enter")
        await wait_for(pilot, lambda: new.job is None and len(new.conversation.turns) == 32)
        await wait_for(pilot, lambda: services.store.get_chat(chat_id).pair == "tiny")
        assert services.config.default_pair is None  # a switch is not a new default


@app_test
async def test_an_old_chat_offers_its_own_pair_or_says_it_is_not_on_disk(
        tmp_path: Path, tiny_target: Path, tiny_draft: Path) -> None:
    services, opened = switching_services(tmp_path, tiny_target, tiny_draft)
    store = services.store
    on_pair, _ = seed(store, pair="tiny")
    missing = store.create_chat("On a big pair", pair="big")
    store.add_message(missing, "user", "hi")
    gone = store.create_chat("On a removed pair", pair="gone")
    store.add_message(gone, "user", "hi")
    for c in (missing, gone):
        store.release(c)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        chat = await ready(pilot)
        await open_from_list(pilot, chat, missing)
        await wait_for(pilot, lambda: any("which is not on disk" in n.message
                                          for n in app._notifications))
        await open_from_list(pilot, chat, gone)
        await wait_for(pilot, lambda: any("which is not in the catalog" in n.message
                                          for n in app._notifications))
        assert app.screen is chat and opened == ["tiny-target"]
        await open_from_list(pilot, chat, on_pair)
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog)
                       and bool(app.screen.query(".dialog-body")))
        body = str(app.screen.query_one(".dialog-body", Static).render())
        assert "This chat was with tiny; tiny-target is loaded now" in body
        await pilot.press("n")  # stay: the chat goes on with the loaded model
        await wait_for(pilot, lambda: app.screen is chat)
        assert opened == ["tiny-target"]
        await open_from_list(pilot, chat, missing)
        await open_from_list(pilot, chat, on_pair)
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen)
                       and app.screen is not chat)
        new = await ready(pilot)
        await wait_for(pilot, lambda: new.conversation.chat_id == on_pair)
        assert opened == ["tiny-target", "tiny"] and new.pair_label == "tiny"
        assert not isinstance(app.screen, ConfirmDialog)  # on its pair now: no second offer


# --- load progress: a percentage and the memory estimate ------------------------------------------


def test_llama_cpp_reports_how_far_a_model_load_is(tiny_target: Path) -> None:
    shares: list[float] = []
    model = LlamaModel(tiny_target, progress=shares.append)
    model.close()
    assert shares and shares == sorted(shares) and shares[-1] == 1.0
    assert all(0.0 <= s <= 1.0 for s in shares)


@app_test
async def test_the_loading_screen_shows_a_percentage_and_the_memory_it_will_take(
        tmp_path: Path, home: AppPaths, tiny_target: Path, tiny_draft: Path) -> None:
    """The real opener of the CLI (resolver, memory plan, llama.cpp's callback) on the tiny
    pair; the load is held at its end so the screen can be read before the chat replaces it."""
    catalog = Catalog()
    catalog.models["t"] = ModelEntry("t", "Tiny T", PathSource(tiny_target))
    catalog.models["d"] = ModelEntry("d", "Tiny D", PathSource(tiny_draft))
    catalog.pairs["tp"] = PairEntry("tp", "t", "d")
    first = opener(select(catalog, "tp"), ModelResolver(catalog, home),
                   RuntimeOptions(context=ContextSettings(n_ctx=256, n_threads=1)))
    reports: list[Progress] = []
    hold = threading.Event()

    def open_runtime(report: ProgressFn) -> Runtime:
        def seen(p: Progress) -> None:
            reports.append(p)
            report(p)
        runtime = first.open_runtime(seen)
        hold.wait(20)
        return runtime

    app = SpecchatApp(make_services(tmp_path, open_runtime))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: any(p.finished and p.task == LOADING_TASK
                                          for p in reports))
        screen = app.screen
        assert isinstance(screen, LoadingScreen)
        bar = screen.query_one(ProgressBar)
        await wait_for(pilot, lambda: bar.percentage == 1.0)
        memory = str(screen.query_one("#loading-memory", Static).render())
        assert memory.startswith("Memory: needs ") and "RAM ~" in memory
        assert "100%" in str(bar.query_one("#percentage").render())
        hold.set()
        await ready(pilot)
    loads = [p for p in reports if p.task == LOADING_TASK and p.total]
    done = [p.done for p in loads]
    assert done == sorted(done) and done[-1] == loads[-1].total
    steps = loads[:-1]  # the last one says it finished, at 100% again
    assert len({int(100 * p.done / (p.total or 1)) for p in steps}) == len(steps)  # ≤ 1 per %
    assert loads[-1].finished
    assert {p.detail for p in loads} == {"target t", "draft d"}  # the draft's share after
    assert all(p.note == loads[0].note for p in loads)


# --- system-prompt presets (F9) ---------------------------------------------------------------


class RecordingDecoder:
    """Plain decoding that keeps the text of each prompt it was given (the rendered chat)."""

    name = "plain"

    def __init__(self, runtime: Runtime, prompts: list[str]) -> None:
        self.inner = PlainDecoder(runtime.target_ctx)
        self.target = runtime.target_ctx
        self.prompts = prompts

    def run(self, prompt: Sequence[int], settings: SamplerSettings,
            cancel: threading.Event) -> Iterator[Event]:
        self.prompts.append(self.target.model.detokenize(prompt))
        yield from self.inner.run(prompt, settings, cancel)


async def pick_prompt(pilot, app: SpecchatApp, label: str) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("f9")
    await wait_for(pilot, lambda: isinstance(app.screen, PresetPicker)
                   and bool(app.screen.query(OptionList)))
    options = app.screen.query_one(OptionList)
    for i in range(options.option_count):
        if str(options.get_option_at_index(i).prompt).startswith(label):
            options.highlighted = i
            break
    else:
        raise AssertionError(f"no option {label!r}")
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))


@app_test
async def test_a_chat_keeps_the_system_prompt_picked_for_it(tmp_path: Path,
                                                           tiny_target: Path) -> None:
    prompts: list[str] = []
    config = UserConfig(sampling=GREEDY, system_prompt="quiet default words",
                        presets={"pirate": "arr matey ahoy"})

    def services() -> AppServices:
        return make_services(tmp_path, tiny_runtime(tiny_target), config=config,
                             make_decoder=lambda rt, _s: RecordingDecoder(rt, prompts))

    first = services()
    app = SpecchatApp(first)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await pick_prompt(pilot, app, "pirate")  # before the chat's first message
        assert "prompt: pirate" in str(chat.query_one("#topbar", Static).render())
        await pilot.click(ChatInput)
        await pilot.press(*"ahoy", "enter")
        await wait_for(pilot, lambda: chat.job is None and len(prompts) == 1)
        assert "arr matey ahoy" in prompts[0] and "quiet default words" not in prompts[0]
        chat_id = chat.conversation.chat_id
        assert chat_id is not None
        saved = first.store.get_chat(chat_id)
        assert (saved.preset, saved.system_prompt) == ("pirate", "arr matey ahoy")
        await pilot.press("ctrl+n")  # a new chat starts on the default
        await pilot.click(ChatInput)
        await pilot.press(*"hello", "enter")
        await wait_for(pilot, lambda: chat.job is None and len(prompts) == 2)
        assert "quiet default words" in prompts[1]
        other = chat.conversation.chat_id
        await pick_prompt(pilot, app, "coder")  # a built-in, on a chat already saved
        assert first.store.get_chat(other).preset == "coder"  # type: ignore[arg-type]
    first.store.close()
    # Another start: the chat comes back with its own prompt.
    second = services()
    app = SpecchatApp(second)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        chat.open_chat(chat_id)
        await wait_for(pilot, lambda: chat.conversation.chat_id == chat_id)
        assert "prompt: pirate" in str(chat.query_one("#topbar", Static).render())
        await pilot.click(ChatInput)
        await pilot.press(*"more", "enter")
        await wait_for(pilot, lambda: chat.job is None and len(prompts) == 3)
        assert "arr matey ahoy" in prompts[2]
        # One of its own, typed in the picker; then back to the default.
        await pilot.press("f9")
        await wait_for(pilot, lambda: isinstance(app.screen, PresetPicker)
                       and bool(app.screen.query(Input)))
        app.screen.query_one(Input).focus()
        await pilot.press(*"my own little words", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        saved = second.store.get_chat(chat_id)
        assert (saved.preset, saved.system_prompt) == (None, "my own little words")
        assert "prompt: its own" in str(chat.query_one("#topbar", Static).render())
        await pick_prompt(pilot, app, "default")
        saved = second.store.get_chat(chat_id)
        assert (saved.preset, saved.system_prompt) == (None, None)
        assert "prompt:" not in str(chat.query_one("#topbar", Static).render())
        await pilot.click(ChatInput)
        await pilot.press(*"again", "enter")
        await wait_for(pilot, lambda: chat.job is None and len(prompts) == 4)
        assert "quiet default words" in prompts[3]
    second.store.close()
