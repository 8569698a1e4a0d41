"""γ controllers on a real (tiny) pair: one per chat session and per race, never shared; their
learnt state kept per pair between processes (a damaged file is ignored)."""

from __future__ import annotations

import json
from pathlib import Path

from ui_helpers import tiny_runtime

from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.policy.planner import Planner
from specchat.loading import select
from specchat.models.catalog import load_catalog
from specchat.models.controller_store import controller_file, load_states
from specchat.models.resolver import ModelResolver
from specchat.paths import AppPaths
from specchat.race.runner import RaceSetup, run_race
from specchat.runtime.opening import Runtime
from specchat.ui.chat_settings import ChatSettings
from specchat.ui.services import runtime_decoder

# Long enough for an uncalibrated planner's warm-up (it waits for the reply's 64th token).
GREEDY = SamplerSettings(temperature=0.0, max_tokens=80)


def _planner(dec: object) -> Planner:
    assert isinstance(dec, SpeculativeDecoder) and isinstance(dec.policy, Planner)
    return dec.policy


def test_a_race_does_not_train_the_chats_controller(tiny_target: Path, tiny_draft: Path) -> None:
    runtime = tiny_runtime(tiny_target, tiny_draft)
    try:
        settings = ChatSettings()  # the app's default γ mode: the planner
        chat = runtime_decoder(runtime, settings)
        run_to_end(chat, runtime.target.tokenize("hello there"), GREEDY)
        before = json.dumps(_planner(chat).state())
        race_dec = runtime_decoder(runtime, settings)  # the race screen's, from the same setting
        assert _planner(race_dec) is not _planner(chat)
        result = run_race(runtime, RaceSetup("the cat sat", GREEDY), race_dec)
        assert result.spec.steps and _planner(race_dec).overall.steps + \
            _planner(race_dec).costs._n_verify > 0  # the race's controller did learn
        assert json.dumps(_planner(chat).state()) == before  # the chat's did not move
        # Each run is set beside what its planner forecast for it (read through the runtime).
        forecast = _planner(race_dec).forecast()
        assert forecast is not None and result.spec_runs[-1].predicted_tok_s == forecast
        other = runtime.decoder(gamma="plan")  # and the CLI's path gives a fresh one too
        assert _planner(other) is not _planner(chat)
        # Each decoder's controller, as the runtime handed it out (the race reads its forecast).
        for dec in (chat, race_dec, other):
            assert runtime.controller(dec) is _planner(dec)
        assert runtime.controller(runtime.decoder(gamma=3)) is None  # a fixed γ learns nothing
        assert runtime.controller(runtime.decoder(plain=True)) is None
    finally:
        runtime.close()


def _open(home: AppPaths, target: Path, draft: Path) -> Runtime:
    cat = load_catalog()
    return Runtime.open(select(cat, model=str(target), draft=str(draft)),
                        ModelResolver(cat, home))


def test_a_fresh_process_starts_warm_from_the_saved_state(tiny_target: Path, tiny_draft: Path,
                                                          home: AppPaths) -> None:
    rt = _open(home, tiny_target, tiny_draft)
    try:
        cold = _planner(rt.decoder())
        assert cold.label == "plan · warm-up"  # nothing calibrated, nothing saved
        prompt = rt.target.tokenize("once upon a time")
        for _ in range(2):
            run_to_end(SpeculativeDecoder(rt.target_ctx, rt.draft_ctx, cold), prompt, GREEDY)
        learnt = json.loads(json.dumps(cold.state()))
        path = controller_file(home, rt.target.path, tiny_draft)
    finally:
        rt.close()  # saves what the controllers learnt
    assert load_states(path)["Planner"] == learnt
    rt = _open(home, tiny_target, tiny_draft)
    try:
        warm = _planner(rt.decoder())
        assert warm.seeded and warm.label == "plan"  # no warm-up to pay again
        assert warm.costs.verify_table() == cold.costs.verify_table()
        assert rt.new_auto_gamma().label == "auto · warm-up"  # auto keeps its own (none yet)
    finally:
        rt.close()


def test_a_damaged_state_file_is_ignored(tiny_target: Path, tiny_draft: Path,
                                         home: AppPaths) -> None:
    rt = _open(home, tiny_target, tiny_draft)
    path = controller_file(home, rt.target.path, tiny_draft)
    try:
        for text in ("{not json", json.dumps({"version": 99, "states": {}}),
                     json.dumps({"version": 1, "states": {"Planner": {"version": 1}}}),
                     "\x00\xff"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", errors="surrogateescape")
            assert _planner(rt.decoder()).label == "plan · warm-up"  # a cold start, no crash
        p = _planner(rt.decoder())
        run_to_end(SpeculativeDecoder(rt.target_ctx, rt.draft_ctx, p),
                   rt.target.tokenize("hi"), GREEDY)
    finally:
        rt.close()
    assert "Planner" in load_states(path)  # the next save replaced the damaged file
