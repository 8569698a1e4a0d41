"""The app's parts that need no screen: batching, settings, conversation, CLI entry points."""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

import pytest
import yaml
from ui_helpers import GREEDY, SpeculativeStandIn, tiny_runtime

from specchat.cli.common import make_env
from specchat.cli.main import main
from specchat.config import UserConfig
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.events import (
    GenerationStats,
    NoticeEvent,
    RejectedEvent,
    StepEvent,
    TokenEvent,
    TokenOrigin,
)
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.llama.llama_lib import backend_name
from specchat.paths import AppPaths
from specchat.session.controller import ChatSession
from specchat.session.conversation import Conversation, Turn
from specchat.session.live import EventBatcher, Pace, live_from_record
from specchat.session.worker import ReplyChunk, ReplyDone, ReplyFigures, ReplyJob, run_reply
from specchat.store import ChatStore, FateTrace, ReplyStats
from specchat.ui.chat_settings import ChatSettings, parse_settings
from specchat.ui.keys import CHAT_KEYS, display
from specchat.ui.messages import LoadProgress, ReplyProgress
from specchat.ui.services import AppServices
from specchat.ui.widgets.stats_bar import sparkline

A, C, B = TokenOrigin.ACCEPTED, TokenOrigin.CORRECTED, TokenOrigin.BONUS


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


# --- live stats ----------------------------------------------------------------------------


def test_batcher_rolls_tokens_per_second_alpha_tau_and_time_share() -> None:
    clock = FakeClock()
    b = EventBatcher(interval=0.1, ctx_used=lambda: 42, ctx_size=512, clock=clock)
    # step 1: 3 of 4 drafts accepted, then a correction; step 2: all 4 accepted + bonus
    t = 0.0
    for pos, origin in enumerate([A, A, A, C]):
        t += 0.01
        b.add(TokenEvent(pos, "x", origin, pos, t))
    b.add(RejectedEvent(99, "y", 3, 0.1, 0.5))
    b.add(StepEvent(4, 3, 0.01, 0.03, position=0, committed=4))
    for pos, origin in enumerate([A, A, A, A, B], start=4):
        t += 0.01
        b.add(TokenEvent(pos, "x", origin, pos, t))
    b.add(StepEvent(4, 4, 0.01, 0.03, position=4, committed=5))
    assert not b.due()
    clock.t = 0.2
    assert b.due() and b.dirty
    batch = b.take()
    s = batch.stats
    assert [seg.kind for seg in batch.segments] == ["a", "c", "x", "a", "b"]
    assert s.tokens == 9 and s.alpha == pytest.approx(7 / 8) and s.tau == pytest.approx(4.5)
    assert s.tps == pytest.approx(8 / 0.08) and s.gamma == 4
    assert s.draft_share == pytest.approx(0.25) and (s.ctx_used, s.ctx_size) == (42, 512)
    assert not b.dirty and b.take().segments == []
    b.add(NoticeEvent("dropped 2 messages"))
    b.add(GenerationStats(generated_tokens=9, decode_s=0.08, steps=2, accepted=7, rejections=1,
                          target_forwards=2, draft_s=0.02, verify_s=0.06))
    final = b.take()
    assert final.notices == ["dropped 2 messages"] and final.final is not None
    assert final.stats.final and final.stats.tau == pytest.approx(4.5)


def test_batcher_keeps_each_steps_gamma_and_mode_until_the_stats_reach_the_screen() -> None:
    b = EventBatcher(clock=FakeClock())
    for g, mode in [(2, "auto · warm-up"), (5, "auto · code"), (6, "auto · code")]:
        b.add(StepEvent(g, 1, 0.01, 0.02, mode=mode))
    first = b.take().stats
    assert first.gammas == (2, 5, 6) and first.mode == "auto · code" and first.gamma == 6
    b.add(StepEvent(3, 3, 0.01, 0.02, mode="auto · chat"))
    assert b.take().stats.gammas == (2, 5, 6, 3)  # not posted yet: nothing is lost
    b.gammas_posted()
    b.add(StepEvent(1, 0, 0.01, 0.02, mode="auto · chat"))
    b.add(GenerationStats(generated_tokens=9, decode_s=0.1, steps=5))
    final = b.take().stats
    assert final.final and final.gammas == (1,) and final.mode == "auto · chat"


def test_rolling_rate_forgets_tokens_older_than_its_window() -> None:
    b = EventBatcher(clock=FakeClock())
    for i in range(10):  # 10 tok/s for a second...
        b.add(TokenEvent(i, "x", TokenOrigin.PLAIN, i, i * 0.1))
    for i in range(10, 160):  # ...then 100 tok/s for 1.5 s
        b.add(TokenEvent(i, "x", TokenOrigin.PLAIN, i, 0.9 + (i - 9) * 0.01))
    assert b.snapshot().tps == pytest.approx(100, rel=0.05)
    assert b.snapshot().alpha is None  # plain decoding has no α


def test_saved_stats_become_a_stats_bar_snapshot() -> None:
    s = live_from_record(ReplyStats(
        GenerationStats(generated_tokens=12, prompt_tokens=28, decode_s=11 / 50, accepted=8,
                        rejections=2, steps=4, target_forwards=4, draft_s=1.0, verify_s=3.0),
        gamma=4, gamma_mode="auto", ctx_size=512))
    assert (s.tps, s.alpha, s.tau, s.gamma, s.ctx_used, s.ctx_size) == (50.0, 0.8, 3.0, 4, 40, 512)
    assert s.draft_share == 0.25 and s.gamma_mode == "auto"
    plain = live_from_record(ReplyStats(GenerationStats(generated_tokens=3, decode_s=2 / 9),
                                        gamma_mode="pair"))
    assert plain.tps == pytest.approx(9.0)
    assert plain.alpha is None and plain.tau is None and plain.gamma_mode is None


def test_pace_slows_drawing_to_its_cpu_budget_and_recovers() -> None:
    pace = Pace(fastest=0.1, slowest=0.5, budget=0.05)
    for _ in range(40):  # each redraw costs 15 ms: 15% of a core at 10 a second
        pace.observe(0.015, pace.interval)
    assert pace.interval == pytest.approx(0.3)  # a third as often: back to 5%
    for _ in range(3):
        pace.observe(0.5, 1.0)
    assert pace.interval == 0.5  # never slower than slowest
    for _ in range(30):
        pace.observe(0.001, 1.0)  # a fast machine
    assert pace.interval == 0.1
    pace.observe(1.0, 0.0)  # no time passed: ignored
    assert pace.interval == 0.1


def test_text_splits_into_blocks_at_line_breaks() -> None:
    from specchat.store.fates import Segment
    from specchat.ui.widgets.fate_text import BLOCK_CHARS, split_blocks

    para = "word " * (BLOCK_CHARS // 5 + 10)
    segs = [Segment(para + "\nnext line\n", "a"), Segment("tail", "c"), Segment("gone", "x")]
    blocks = split_blocks(segs, show_rejected=False)
    assert [b.plain for b in blocks] == [para, "next line\ntail"]
    assert "\n".join(b.plain for b in blocks) == para + "\nnext line\ntail"
    assert split_blocks([Segment("short\ntext", "p")], False)[0].plain == "short\ntext"


def test_sparkline_scale_is_fixed() -> None:
    assert sparkline([], 4, 0, 1) == "    "
    assert sparkline([0.9, 0.9], 4, 0, 1) == "▇▇  "  # high, not flat
    assert sparkline([0.0, 1.0], 2, 0, 1) == "▁█"
    assert len(sparkline(list(range(1000)), 24, 0, None)) == 24


def test_stats_updates_coalesce_and_load_progress_keeps_finished_steps() -> None:
    def stats(job: int) -> ReplyProgress:
        return ReplyProgress(ReplyFigures(job, live_from_record(ReplyStats())))

    older, newer = stats(1), stats(1)
    assert older.can_replace(newer) and not older.can_replace(stats(2))
    chunk = ReplyProgress(ReplyChunk(1, [], []))
    assert not chunk.can_replace(newer) and not older.can_replace(chunk)
    from specchat.models.progress import Progress

    going, done = LoadProgress(Progress("fetch", 1, 10)), LoadProgress(Progress("fetch", 10, 10,
                                                                               finished=True))
    assert going.can_replace(LoadProgress(Progress("fetch", 2, 10)))
    assert not done.can_replace(going)


def test_a_fast_reply_posts_a_bounded_number_of_ui_messages(tiny_target: Path) -> None:
    runtime = tiny_runtime(tiny_target)
    try:
        engine = ChatEngine(SpeculativeStandIn(runtime.target_ctx))
        posted: list[object] = []
        job = ReplyJob(1, [Message("user", "hello")], GREEDY.with_(max_tokens=200),
                       pace=Pace(fastest=60.0, slowest=60.0))
        stats = run_reply(job, engine, posted.append, stats_interval=60.0)
        # One batch for the whole reply, however many events: the UI is never flooded.
        assert [type(m) for m in posted] == [ReplyChunk, ReplyDone]
        chunk = posted[0]
        assert isinstance(chunk, ReplyChunk)
        trace = FateTrace()
        trace.extend(chunk.segments)
        assert stats.generated_tokens == 200 and len(trace.text) > 0
        assert {s.kind for s in chunk.segments} == {"a", "c", "b", "x"}
    finally:
        runtime.close()


def test_a_stalled_decoder_still_shows_its_tokens(tiny_target: Path) -> None:
    """Tokens that arrive just before a long pause (a verification step) are posted by the
    ticker, not held until the next event."""
    runtime = tiny_runtime(tiny_target)
    release = threading.Event()
    posted: list[object] = []

    class Stalling(PlainDecoder):
        def run(self, prompt, settings, cancel):  # type: ignore[no-untyped-def]
            for i, ev in enumerate(super().run(prompt, settings, cancel)):
                yield ev
                if i == 2:
                    release.wait(5)

    try:
        engine = ChatEngine(Stalling(runtime.target_ctx))
        job = ReplyJob(1, [Message("user", "hi")], GREEDY.with_(max_tokens=6),
                       pace=Pace(fastest=0.05, slowest=0.05))
        worker = threading.Thread(target=run_reply, args=(job, engine, posted.append))
        worker.start()
        deadline = threading.Event()
        for _ in range(100):
            if any(isinstance(m, ReplyChunk) for m in posted):
                break
            deadline.wait(0.02)
        assert any(isinstance(m, ReplyChunk) for m in posted), "tokens held back while stalled"
        release.set()
        worker.join(10)
        assert isinstance(posted[-1], ReplyDone)
    finally:
        release.set()
        runtime.close()


# --- settings -------------------------------------------------------------------------------


def test_settings_map_to_the_config_file_and_back() -> None:
    base = UserConfig()
    assert ChatSettings.from_config(base).gamma_mode == "plan"  # the default everywhere
    pair = ChatSettings.from_config(base.with_(gamma="pair"), pair_gamma=5)
    assert (pair.gamma_mode, pair.gamma) == ("pair", 5)
    auto = ChatSettings.from_config(base.with_(gamma="auto"))
    assert auto.gamma_mode == "auto" and auto.to_config(base).gamma.to_config() == "auto"
    fixed = ChatSettings.from_config(base.with_(gamma=6, ngram=True))  # the old key is read
    assert (fixed.gamma_mode, fixed.gamma, fixed.drafter) == ("fixed", 6, "ngram,model")
    assert fixed.to_config(base).gamma.to_config() == 6
    assert fixed.to_config(base).drafter == "ngram,model"
    tree = ChatSettings.from_config(base.with_(drafter="tree"))
    assert tree.drafter == "tree" and tree.to_config(base).drafter == "tree"
    assert ChatSettings.from_config(base).drafter == "ngram,model"  # lookup is free to try


def test_parse_settings_says_what_is_wrong() -> None:
    def parse(**kw: object) -> ChatSettings:
        fields = {"system_prompt": "", "temperature": "0.7", "top_p": "0.9", "top_k": "40",
                  "min_p": "0.05", "max_tokens": "256", "seed": "", "gamma_mode": "auto",
                  "gamma": "4", "drafter": "model", **kw}
        return parse_settings(**fields, base=GREEDY)  # type: ignore[arg-type]

    ok = parse(seed=" 7 ")
    assert ok.sampling.seed == 7 and ok.sampling.top_p == 0.9 and ok.gamma_mode == "auto"
    assert parse().sampling.seed is None
    assert parse(drafter="tree,ngram").drafter == "tree,ngram"
    for kw, why in (({"temperature": "hot"}, "temperature: 'hot' is not a number"),
                    ({"top_k": "1.5"}, "top-k: '1.5' is not a whole number"),
                    ({"top_p": "0"}, "top-p must be in"), ({"max_tokens": "0"}, "max tokens"),
                    ({"gamma": "99"}, "γ must be between 0 and 32"),
                    ({"drafter": "eagle"}, "drafter: unknown drafter 'eagle'")):
        with pytest.raises(ValueError, match=why):
            parse(**kw)


def test_saving_over_a_broken_config_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("sampling: [oops\n")
    services = AppServices(store=ChatStore.open(tmp_path / "c.db"), config=UserConfig(),
                           open_runtime=lambda _r: pytest.fail("not opened"), label="x",
                           config_path=path, config_problem="config.yaml:1: not valid YAML")
    note = services.save_settings(services.settings().with_(gamma_mode="auto"))
    assert note and "config.yaml.broken" in note
    assert (tmp_path / "config.yaml.broken").read_text() == "sampling: [oops\n"
    assert yaml.safe_load(path.read_text())["gamma"] == "auto"
    assert services.save_settings(services.settings()) is None  # no second backup


# --- conversation ---------------------------------------------------------------------------


def test_conversation_messages_and_saving(tmp_path: Path) -> None:
    store = ChatStore.open(tmp_path / "c.db")
    session = ChatSession(store, "demo")
    conv = session.conversation
    conv.add(Turn.user("What is 2+2?"))
    conv.title = "What is 2+2?"
    conv.add(Turn("assistant", FateTrace(), status="error"))  # failed, no text
    stats = ReplyStats(GenerationStats(generated_tokens=1, accepted=1, stop_reason="cancelled"))
    conv.add(Turn("assistant", FateTrace.plain("Four", "a"), stats, "cancelled"))
    session.flush()
    assert conv.chat_id is not None and store.get_chat(conv.chat_id).title == "What is 2+2?"
    assert conv.engine_messages("Be brief.") == [
        Message("system", "Be brief."), Message("user", "What is 2+2?"),
        Message("assistant", "Four")]
    assert conv.engine_messages("  ")[0] == Message("user", "What is 2+2?")
    again = Conversation.load(store, conv.chat_id)
    assert [(t.role, t.text, t.status) for t in again.turns] == [
        ("user", "What is 2+2?", "done"), ("assistant", "Four", "cancelled")]
    assert again.turns[1].trace.segments[0].kind == "a" and again.turns[1].stats == stats


# --- keys, backend, CLI -----------------------------------------------------------------------


def test_chat_keys_do_not_fight_the_message_box() -> None:
    from textual.widgets import TextArea

    taken = {k for b in TextArea.BINDINGS for k in b.key.split(",")}  # type: ignore[union-attr]
    ours = [k for key in CHAT_KEYS for k in key.keys.split(",")]
    assert len(ours) == len(set(ours))
    assert not (set(ours) & taken)
    assert display("ctrl+n,f1") == "Ctrl+N / F1" and display("escape") == "Esc"


def test_backend_name_reads_llama_cpp_system_info() -> None:
    assert backend_name("CPU : SSE3 = 1 |", gpu_offload=False) == "CPU"
    assert backend_name("CUDA : ARCHS = 890 | USE_GRAPHS = 1 | CPU : AVX = 1 |", True) == "CUDA"
    assert backend_name("Metal : EMBED_LIBRARY = 1 | CPU : NEON = 1 |", True) == "Metal"
    assert backend_name() in ("CPU", "CUDA", "Metal", "Vulkan", "ROCm", "HIP", "MUSA", "SYCL",
                              "OpenCL", "CANN", "Kompute", "GPU")


def test_the_app_needs_a_terminal(home: AppPaths, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 1  # pytest's stdin is not a terminal
    assert "the chat app needs a terminal" in capsys.readouterr().err


def test_services_open_the_configured_pair_without_loading_it(home: AppPaths) -> None:
    from specchat.cli.app import build_services

    home.config_dir.mkdir(parents=True)
    home.config_file.write_text("gamma: [broken\n")
    args = argparse.Namespace(pair=None, model=None, ctx_size=None, threads=None, gpu_layers=None)
    services = build_services(make_env(), args)
    try:
        assert services.label == "demo" and services.config_problem
        assert "not valid YAML" in services.config_problem
        assert home.chats_db.exists()
    finally:
        services.store.close()
    with pytest.raises(Exception, match="unknown pair 'nope'"):
        build_services(make_env(), argparse.Namespace(**{**vars(args), "pair": "nope"}))


def test_first_run_and_switching_to_a_pair_the_wizard_saved(home: AppPaths, tiny_target: Path,
                                                           tiny_draft: Path) -> None:
    from specchat.cli.app import build_services
    from specchat.models.catalog import ModelEntry, PathSource, load_catalog
    from specchat.models.pairing import save_pair

    args = argparse.Namespace(pair=None, model=None, ctx_size=None, threads=None, gpu_layers=None)
    services = build_services(make_env(), args)
    try:
        assert services.first_run and services.label == "demo"  # nothing configured yet
        # what the wizard does when it saves a pair: write it to the user catalog
        save_pair(home, load_catalog(home.user_catalog), "mine",
                  ModelEntry("t", "T", PathSource(tiny_target)),
                  ModelEntry("d", "D", PathSource(tiny_draft)), gamma=3)
        opener = services.use_pair("mine")  # the catalog is read again: the new pair is there
        assert (opener.label, services.label, services.pair_gamma) == ("mine", "mine", 3)
        runtime = opener.open_runtime(lambda _p: None)
        try:
            assert runtime.draft_ctx is not None
        finally:
            runtime.close()
    finally:
        services.store.close()
    again = build_services(make_env(), args)
    try:
        assert not again.first_run and again.label == "mine"  # saved as the default
    finally:
        again.store.close()
    with pytest.raises(Exception, match="unknown pair"):
        services.use_pair("gone")


def test_chats_and_export_commands(home: AppPaths, capsys: pytest.CaptureFixture[str],
                                   tmp_path: Path) -> None:
    assert main(["chats"]) == 0
    assert "no saved chats yet" in capsys.readouterr().out
    assert not home.chats_db.exists()  # listing does not create a database
    store = ChatStore.open(home.chats_db)
    chat = store.create_chat("Colours", pair="demo")
    store.add_message(chat, "user", "Name a colour.")
    store.add_message(chat, "assistant", "Red.")
    store.close()
    assert main(["chats"]) == 0
    out = capsys.readouterr().out
    assert "Colours" in out and f"{chat:>5}" in out
    assert main(["export", str(chat)]) == 0
    assert capsys.readouterr().out.startswith("# Colours\n")
    target = tmp_path / "out.md"
    assert main(["export", str(chat), "-o", str(target)]) == 0
    assert "## Assistant\n\nRed.\n" in target.read_text()
    assert main(["export", "999"]) == 1
    assert "no chat with id 999" in capsys.readouterr().err
