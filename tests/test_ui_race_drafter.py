"""The race screen's drafter key (d): the speculative side drafts with what the user picks
among the drafters that can run on this pair; the chat's own settings stay as they were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import OptionList
from ui_helpers import GREEDY, app_test, make_services, screen_with, tiny_runtime, wait_for

from specchat.config import UserConfig
from specchat.ui.app import SpecchatApp
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.screens.race import RaceScreen
from specchat.ui.screens.race_pickers import DrafterPicker
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.race_column import RaceColumn


async def pick(pilot: Any, screen: RaceScreen, key: str) -> list[str]:
    """Press d, choose ``key``; return the keys the picker offered."""
    await pilot.press("d")
    picker = await screen_with(pilot, DrafterPicker, "#drafter-list")
    options = picker.query_one("#drafter-list", OptionList)
    offered = [options.get_option_at_index(i).id for i in range(options.option_count)]
    options.highlighted = offered.index(key)
    await pilot.press("enter")
    await wait_for(pilot, lambda: pilot.app.screen is screen)
    return [str(k) for k in offered]


@app_test
async def test_the_race_drafter_key_picks_what_drafts(tmp_path: Path, tiny_target: Path,
                                                     tiny_draft: Path) -> None:
    runtime = tiny_runtime(tiny_target, tiny_draft)
    services = make_services(tmp_path, runtime, config=UserConfig(sampling=GREEDY, gamma=3))
    app = SpecchatApp(services)
    async with app.run_test(size=(120, 36)) as pilot:
        await screen_with(pilot, ChatScreen, ChatInput)
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, RaceScreen))
        screen = app.screen
        assert isinstance(screen, RaceScreen)
        await wait_for(pilot, lambda: screen.state == "done", timeout=60)
        assert screen.result is not None and screen.result.drafters == ("ngram", "model")
        first = screen.result

        offered = await pick(pilot, screen, "ngram")
        # every drafter that runs on a pair, as the settings name them; no layer-skip file,
        # no trained heads (Lookahead needs nothing)
        assert offered == ["settings", "planner", "model", "model,ngram", "ngram,model", "tree",
                           "ngram", "lookahead"]
        await wait_for(pilot, lambda: screen.state == "done" and screen.result is not first,
                       timeout=60)
        result = screen.result
        assert result is not None
        assert (result.drafters, result.gamma_mode) == (("ngram",), "fixed 3")
        assert result.identical  # greedy: still the target's own reply
        title = str(screen.query_one("#race-spec", RaceColumn).query_one(".race-title").render())
        assert "n-gram lookup only" in title
        assert "speculative side: drafter ngram · γ mode fixed 3" in \
            str(screen.query_one("#race-summary").render())

        await pick(pilot, screen, "planner")
        await wait_for(pilot, lambda: screen.state == "done" and screen.result is not result,
                       timeout=60)
        assert screen.result is not None
        assert (screen.result.drafters, screen.result.gamma_mode) == (("ngram", "model"), "plan")
        assert services.settings().drafter == "ngram,model"  # the chat's settings did not change
        assert services.settings().gamma_mode == "fixed"
