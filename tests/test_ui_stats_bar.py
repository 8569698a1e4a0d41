"""The stats bar's γ: what chooses it and what it is, each labelled, never one bare number
beside one word ("γ 0 fixed" for a fixed γ 4, "γ 1 pair" read as "one pair")."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static
from ui_helpers import GREEDY, app_test, make_services, screen_text, tiny_runtime, wait_for

from specchat.config import UserConfig
from specchat.engine.decode.events import GenerationStats
from specchat.session.live import LiveStats
from specchat.store import ReplyStats
from specchat.ui.app import SpecchatApp
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.stats_bar import gamma_line, mode_words, stats_line
from specchat.ui.widgets.transcript import reply_summary


def test_mode_words_never_read_as_a_count() -> None:
    assert mode_words("fixed", "fixed 4") == "fixed at 4"
    assert mode_words("pair", "pair 1") == "the pair's 1"
    assert mode_words("pair 3", "pair 3") == "the pair's 3"  # the setting alone, before a reply
    assert mode_words("plan · chain 3", "plan") == "planner · chain 3"
    assert mode_words("auto · code", "auto") == "auto · code"
    assert mode_words("fixed", "plan") == "fixed"  # a saved reply's label: no number to add


def test_a_fixed_gamma_ending_on_a_short_step_shows_the_setting_and_the_value_apart() -> None:
    done = LiveStats(gamma=0, mode="fixed", final=True, drafted_per_step=3.6)
    assert gamma_line(done, "fixed 4", True, False).plain == \
        "γ fixed at 4 · 3.6 drafted per step (last step 0)"
    live = LiveStats(gamma=2, mode="fixed")
    assert gamma_line(live, "fixed 4", True, True).plain == "γ fixed at 4 · this step 2"
    assert gamma_line(LiveStats(gamma=1, mode="pair"), "pair 1", True, True).plain == \
        "γ the pair's 1 · this step 1"


def test_a_reply_that_drafted_nothing_says_plain_throughout() -> None:
    s = LiveStats(gamma=0, mode="plan · plain: drafting does not pay", final=True,
                  drafted_per_step=0.0)
    text = gamma_line(s, "plan", True, False).plain
    assert text.startswith("γ planner · plain: drafting does not pay")
    assert text.endswith("0 drafted per step: plain throughout")
    assert gamma_line(LiveStats(), "plan", False, False).plain == "γ off · plain decoding, no draft"


def test_the_figures_line_fits_80_columns() -> None:
    s = LiveStats(tokens=900, tps=123.4, alpha=0.79, tau=2.5, draft_share=0.31, ctx_used=12345,
                  ctx_size=131072)
    assert len(stats_line(s, busy=True).plain) <= 78  # the bar's padding: 1 each side


def test_tok_s_says_decode_and_the_acceptance_length_sits_beside_tau() -> None:
    """tok/s is decode speed (the first token left out), labelled so; the acceptance length
    (1 + accepted / steps, vLLM's) is shown beside τ, its label shortened where the bar is
    narrow, then the draft/verify split shortened and dropped, never the figures before it."""
    g = GenerationStats(generated_tokens=15, decode_s=14 / 61.2, accepted=15, rejections=4,
                        steps=6, target_forwards=6, draft_s=0.05, verify_s=0.11)
    live = LiveStats.from_stats(g, 46, 512)
    assert live.acceptance_length == 3.5 and live.tau == 2.5
    wide = stats_line(live, busy=False, width=None).plain
    assert wide == (" 61.2 tok/s decode  α 0.79  τ 2.50  acceptance length 3.50  "
                    "draft/verify 31%/69%  ctx 46/512")
    assert stats_line(live, busy=False, width=78).plain == \
        " 61.2 tok/s decode  α 0.79  τ 2.50  acc.len 3.50  draft 31%  ctx 46/512"
    assert stats_line(live, busy=True, width=60).plain == \
        " 61.2 tok/s decode (live)  α 0.79  τ 2.50  acc.len 3.50  ctx 46/512"
    assert "acceptance length —" in stats_line(LiveStats(), busy=False).plain  # no steps
    summary = reply_summary(ReplyStats(g), "done")
    assert summary == "15 tokens · 61.2 tok/s decode · α 0.79 · τ 2.50 · acc.len 3.50"


@app_test
async def test_a_real_fixed_gamma_4_reply_in_the_app(tmp_path: Path, tiny_target: Path,
                                                    tiny_draft: Path) -> None:
    """The pair's speculative decoder at a fixed γ 4: the bar names the setting with its
    number, and the value it shows is labelled (its last step may be shorter)."""
    runtime = tiny_runtime(tiny_target, tiny_draft)
    config = UserConfig(sampling=GREEDY.with_(max_tokens=10), gamma=4)
    app = SpecchatApp(make_services(tmp_path, runtime, config=config))
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen)
                       and isinstance(app.focused, ChatInput))
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        line = chat.stats_bar.query_one("#stats-gamma", Static)
        assert "fixed at 4" in str(line.render())  # before any reply: the setting
        await pilot.press(*"the cat sat on", "enter")
        await wait_for(pilot, lambda: chat.job is None and bool(chat.session.conversation.turns))
        await pilot.pause()
        text = str(line.render())
        assert text.startswith("γ fixed at 4 · ") and "drafted per step" in text, text
        assert "γ 0" not in text and "0 fixed" not in text


@app_test
async def test_a_long_gamma_line_wraps_whole_at_80_columns(tmp_path: Path,
                                                          tiny_target: Path) -> None:
    app = SpecchatApp(make_services(tmp_path, tiny_runtime(tiny_target)))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen)
                       and isinstance(app.focused, ChatInput))
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        chat.stats_bar.speculative = True
        reason = "plan · plain: a 5-token check costs 2.8× one token here"
        chat.stats_bar.show(LiveStats(gamma=0, mode=reason, final=True,
                                      drafted_per_step=0.03), busy=False)
        await pilot.pause()
        text = " ".join(screen_text(app).split())
        assert "γ planner · plain: a 5-token check costs 2.8× one token here · 0.03 " \
               "drafted per step (last step 0)" in text, screen_text(app)
