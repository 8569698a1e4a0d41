"""The race screen on tiny real models (Pilot), its negative path, and a snapshot of a finished
race drawn from fixed timelines."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from race_helpers import ChangeOneToken, fixed_result
from ui_helpers import GREEDY, app_test, make_services, tiny_runtime, wait_for

from specchat.config import UserConfig
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.events import TokenEvent
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model_settings import ContextSettings
from specchat.race.runner import RaceSetup
from specchat.ui.app import SpecchatApp
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.screens.race import HEADER, RaceScreen
from specchat.ui.services import runtime_decoder
from specchat.ui.widgets.race_column import RaceColumn

SETUP = RaceSetup("Say something.", SamplerSettings(temperature=0, seed=1, max_tokens=24))
SIZE = (120, 36)


def plain_reference(runtime: Any, screen: RaceScreen) -> str:
    """What the target alone writes for the race's prompt, from a fresh context."""
    ctx = LlamaContext(runtime.target, ContextSettings(n_ctx=512, n_threads=1))
    try:
        engine = ChatEngine(PlainDecoder(ctx))
        tokens = engine.tokenize_chat([Message("user", screen.setup.prompt)])
        events = PlainDecoder(ctx).run(tokens, screen.setup.settings, threading.Event())
        return "".join(e.text for e in events if isinstance(e, TokenEvent))
    finally:
        ctx.close()


async def open_race(pilot: Any) -> RaceScreen:
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChatScreen))
    await pilot.press("f5")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, RaceScreen))
    screen = pilot.app.screen
    await wait_for(pilot, lambda: screen.state in ("done", "failed"), timeout=60)
    return screen


@app_test
async def test_race_screen_fills_both_columns_and_checks_identity(
        tmp_path: Path, tiny_target: Path, tiny_draft: Path) -> None:
    runtime = tiny_runtime(tiny_target, tiny_draft)
    # A fixed γ: this is about the race screen's fates, which the planner (the default) may
    # rightly decline to produce on two tiny models that seldom agree.
    config = UserConfig(sampling=GREEDY, gamma=3)
    app = SpecchatApp(make_services(tmp_path, runtime, config=config))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_race(pilot)
        assert screen.state == "done", str(screen.query_one("#race-summary").render())
        plain, spec = screen.query_one("#race-plain", RaceColumn), screen.query_one(
            "#race-spec", RaceColumn)
        result = screen.result
        assert result is not None and result.identical
        assert plain.trace.text == spec.trace.text == result.plain.text != ""
        assert plain.tokens == spec.tokens == len(result.plain.tokens) > 0
        assert "a" in {s.kind for s in spec.trace.segments}  # fates, not plain text
        assert {s.kind for s in plain.trace.segments} == {"p"}
        summary = str(screen.query_one("#race-summary").render())
        assert "outputs identical ✓" in summary and "decode " in summary and "α" in summary
        assert "median of 3 runs each" in summary and "why: on this CPU" in summary
        assert HEADER in str(screen.query_one("#race-header").render())
        assert not screen.query_one("#race-summary").has_class("bug")
        assert result.plain.text == plain_reference(runtime, screen)
        await pilot.press("x")  # the rejected drafts appear in the speculative column
        assert spec.fate_text.show_rejected
        await pilot.press("e")
        await pilot.pause()
        reports = list(tmp_path.glob("race-*/report.md"))
        assert len(reports) == 1 and (reports[0].parent / "race.svg").is_file()
        await pilot.press("r")  # run again: records and replays anew
        await wait_for(pilot, lambda: screen.state == "done", timeout=60)
        assert screen.job == 2 and screen.result is not result
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChatScreen))


@app_test
async def test_race_screen_reports_a_difference_as_a_bug(
        tmp_path: Path, tiny_target: Path, tiny_draft: Path) -> None:
    runtime = tiny_runtime(tiny_target, tiny_draft)
    services = make_services(tmp_path, runtime,
                             make_decoder=lambda rt, s: ChangeOneToken(runtime_decoder(rt, s), 3))
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_race(pilot)
        assert screen.result is not None and screen.result.difference == 3
        summary = screen.query_one("#race-summary")
        assert "outputs differ at token 3" in str(summary.render())
        assert summary.has_class("bug")


@app_test
async def test_race_screen_needs_a_pair(tmp_path: Path, tiny_target: Path) -> None:
    app = SpecchatApp(make_services(tmp_path, tiny_runtime(tiny_target)), race=SETUP)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, RaceScreen))
        screen = pilot.app.screen
        await wait_for(pilot, lambda: screen.state == "failed")
        assert "a race needs a draft model" in str(screen.query_one("#race-summary").render())


def test_finished_race_snapshot(snap_compare: Any, tmp_path: Path, tiny_target: Path,
                                tiny_draft: Path) -> None:
    runtime = tiny_runtime(tiny_target, tiny_draft)
    app = SpecchatApp(make_services(tmp_path, runtime))

    async def run_before(pilot: Any) -> None:
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChatScreen))
        result = fixed_result()
        pilot.app.push_screen(RaceScreen(pilot.app.services, runtime,
                                         RaceSetup(result.prompt, result.settings,
                                                   category=result.category), result=result))
        await wait_for(pilot, lambda: getattr(pilot.app.screen, "state", "") == "done")
        await pilot.press("x")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_help_and_palette_name_the_race() -> None:
    from rich.console import Console

    from specchat.ui.app import COMMANDS
    from specchat.ui.screens.help import help_table

    console = Console(width=120, record=True)
    console.print(help_table())
    text = console.export_text()
    assert "F5" in text and "Race screen (F5)" in text and "Skip the replay" in text
    assert any(action == "race" for _, _, action in COMMANDS)
    assert hasattr(ChatScreen, "action_race")


@app_test
async def test_race_screen_swaps_pair(tmp_path: Path, tiny_target: Path,
                                      tiny_draft: Path) -> None:
    opened: list[str] = []

    def open_race_pair(pair: str) -> Any:
        opened.append(pair)
        return tiny_runtime(tiny_target, tiny_draft)

    services = make_services(tmp_path, tiny_runtime(tiny_target, tiny_draft),
                             race_pairs=lambda: ["tiny", "other"], open_race_pair=open_race_pair)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_race(pilot)
        first = screen.runtime
        await pilot.press("s")
        await pilot.pause()
        picker = pilot.app.screen
        picker.query_one("#pair-list").highlighted = 1
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen.runtime is not first and screen.state == "done",
                       timeout=60)
        assert opened == ["other"] and screen.owns_runtime and screen.result is not None
        await pilot.press("escape")  # leaving frees the models opened for the race
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChatScreen))
        assert not screen.owns_runtime
