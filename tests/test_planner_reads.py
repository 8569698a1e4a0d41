"""The planner pays for a draft model's catch-up only where the rest of the reply can repay it,
prices that read from what it measured (or the target's own read of the prompt), and pauses a
lookup that keeps being rejected."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import Plan
from specchat.engine.decode.step_policy import ReplyStart
from specchat.engine.policy.auto_gamma import AutoGammaSeed, AutoGammaSettings
from specchat.engine.policy.costs import CostCurve
from specchat.engine.policy.lookup_estimate import HOT, HOT_STREAK, LONG, LONG_STREAK
from specchat.engine.policy.lookup_pauses import LOOKUP_PAUSE_MAX
from specchat.engine.policy.planner import Planner
from specchat.engine.policy.planner_banded import BandedLookup
from specchat.engine.policy.planner_draft import catch_up_cost
from specchat.engine.policy.planner_settings import PlannerSettings
from specchat.engine.policy.reply_length import MIN_PRIOR, ReplyLengths


def ngram(p: Planner) -> BandedLookup:
    """The n-gram lookup's record in planner ``p`` (policy.planner_arms)."""
    return p.records["ngram"]

CALM = PlannerSettings(AutoGammaSettings(explore=False, early_stop=False, warmup=(1, 1)))
FLAT = CostCurve(0.0015, tuple(0.010 + 0.00005 * n for n in range(1, 33)))


def test_expected_remaining_follows_earlier_replies_and_the_budget() -> None:
    lengths = ReplyLengths()
    assert lengths.expected_remaining(0) == MIN_PRIOR  # nothing known: the prior
    assert lengths.expected_remaining(100) == 100  # a long reply goes on about as long again
    assert lengths.expected_remaining(100, budget=128) == 28  # never past the budget
    for n in (40, 40, 40, 300):
        lengths.add(n)
    # Of the replies longer than 64 tokens only the 300-token one counts.
    assert lengths.expected_remaining(64) == pytest.approx(236)
    # At token 10 the three short replies weigh in: far fewer tokens to come than 290.
    assert 30 < lengths.expected_remaining(10) < 120
    again = ReplyLengths()
    again.load_state(lengths.state())
    assert again.lengths == lengths.lengths
    with pytest.raises(ValueError):
        again.load_state({"reply_lengths": ["x"]})


def cold_planner(target_read: float, max_tokens: int) -> Planner:
    """Uncalibrated; the draft lags the prompt by 150 tokens."""
    p = Planner(CALM, clock=lambda: 0.0)
    p.begin("copy this list")
    p.draft_lag(150)
    p.start_reply(ReplyStart(max_tokens, target_read, 0.44))
    return p


def steps_to_warmup(p: Planner, verify_s: float = 0.042) -> list[str]:
    drafters = []
    for _ in range(p.plan_settings.warmup_after + 4):
        plan = p.next_plan(("model",))
        drafters.append(plan.drafter)
        if plan.drafter == "none":
            p.observe(StepEvent(0, 0, 0.0, verify_s, "none", committed=1))
        else:
            p.observe(StepEvent(plan.size, plan.size, 0.5, 0.06, "model", committed=2,
                                read_tokens=214, read_s=0.5))
    return drafters


def test_a_warm_up_whose_read_the_reply_cannot_repay_is_not_taken() -> None:
    """A CPU (reading a token costs 7 ms, the draft 44 % of that), the reply's budget nearly
    spent at token 64: the draft reading 214 tokens would cost about a quarter of what the rest
    of the reply takes plainly. On a GPU-fast read the same warm-up runs."""
    slow = steps_to_warmup(cold_planner(0.007, 128))
    assert set(slow) == {"none"}
    fast = steps_to_warmup(cold_planner(0.0002, 128))
    assert "model" in fast


def test_a_cold_read_is_priced_at_the_targets_not_scaled_by_the_weights() -> None:
    """A small model reads a batch far less efficiently than its weights say (2 cores: Qwen
    0.5B at 0.66 of the 1.5B's time a token, its weights 0.44). Here a read priced by the
    weights (0.002 × 0.44 s a token, 214 tokens: 0.19 s) fits in a tenth of the 64 plain steps
    left (0.27 s) and the warm-up would read; priced at the target's own read (0.43 s), not."""
    assert set(steps_to_warmup(cold_planner(0.002, 128))) == {"none"}


def test_a_measured_read_replaces_the_prior() -> None:
    p = cold_planner(0.007, 4096)
    assert p.reads.per_token() == pytest.approx(0.007)
    assert catch_up_cost(p, 101) == pytest.approx(100 * 0.007)
    p.observe(StepEvent(2, 2, 0.30, 0.06, "model", committed=3, read_tokens=100, read_s=0.25))
    assert p.reads.per_token() == pytest.approx(0.0025)
    # a catch-up of a few tokens is a draft step's own cost, not a read to learn from
    p.observe(StepEvent(2, 2, 0.30, 0.06, "model", committed=3, read_tokens=3, read_s=0.2))
    assert p.reads.per_token() == pytest.approx(0.0025)


def test_switching_back_to_the_draft_is_priced_against_the_tokens_still_to_come() -> None:
    """Calibrated on a flat curve, the draft pays per step; behind by 500 tokens (a long run of
    lookups), whether it may catch up depends on how much reply is left."""
    def second_step(max_tokens: int) -> str:
        p = Planner(CALM, AutoGammaSeed(FLAT, 0.8), clock=lambda: 0.0)
        for _ in range(3):
            p.lengths.add(2000)  # earlier replies ran long
        p.begin("go on")
        p.start_reply(ReplyStart(max_tokens, 0.004, 0.3))
        p.draft_lag(500)
        first = p.next_plan(("model",))  # the first token is plain's (see next_plan)
        assert first.drafter == "none"
        p.observe(StepEvent(0, 0, 0.0, FLAT.verify_s[0], "none", committed=1))
        plan = p.next_plan(("model",))
        return plan.drafter if plan.drafter != "none" else plan.reason

    assert second_step(4096) == "model"
    assert "re-read 500 tokens" in second_step(8)


def test_a_lookup_rejected_in_a_row_pauses_then_comes_back() -> None:
    # A curve where a one-token lookup still pays after three misses (its α near 0.4): what
    # brings it back is the pause ending, not a probe.
    curve = CostCurve(0.025, tuple(x / 1000 for x in (43, 49, 67, 95, 104, 119, 150, 188)))
    p = Planner(CALM, AutoGammaSeed(curve, 0.5, ngram_alpha=0.9), clock=lambda: 0.0)
    p.begin("rename a variable")
    paused = []
    for _ in range(3):  # three lookups in a row that keep nothing
        plan = p.next_plan(("ngram",))
        assert plan.drafter == "ngram"
        p.observe(StepEvent(plan.size, 0, 0.0002, curve.verify_s[plan.size], "ngram",
                            committed=1))
        skipped = 0
        while p.next_plan(("ngram",)).drafter == "none":
            p.observe(StepEvent(0, 0, 0.0, curve.verify_s[0], "none", committed=1))
            skipped += 1
        paused.append(skipped)
        p.observe(StepEvent(0, 0, 0.0, curve.verify_s[0], "none", committed=1))
    assert paused[0] >= 1 and paused[1] > paused[0] and paused[2] > paused[1]
    assert max(paused) <= LOOKUP_PAUSE_MAX
    # Right guesses (scored on every step) end a pause at once.
    ngram(p).hot = True
    p.pauses.left["ngram"] = 5
    assert p.next_plan(("ngram",)).drafter == "ngram"


def test_state_keeps_reads_and_reply_lengths() -> None:
    p = Planner(CALM, AutoGammaSeed(FLAT, 0.8), clock=lambda: 0.0)
    p.begin("first")
    p.observe(StepEvent(2, 2, 0.30, 0.06, "model", committed=3, read_tokens=100, read_s=0.25))
    p.begin("next")
    q = Planner(replace(CALM), clock=lambda: 0.0)
    q.load_state(p.state())
    assert q.reads.per_token() == pytest.approx(0.0025)
    assert q.lengths.lengths == [3]


def test_a_lookup_outside_a_long_run_must_promise_more() -> None:
    """Where its α varies most (just after a miss, or early in a repeated passage) a lookup
    must promise ``lookup_margin`` × plain; the same promise deep in a run is taken."""
    curve = CostCurve(0.025, tuple(x / 1000 for x in (43, 64, 80, 95, 110, 125, 140, 160)))

    def plan_at(streak: int) -> Plan:
        p = Planner(CALM, AutoGammaSeed(curve, 0.5, ngram_alpha=0.65), clock=lambda: 0.0)
        p.begin("summarise this")
        ngram(p).estimate.streak = streak
        for band in (HOT, LONG):
            ngram(p).estimate.models[band].prior_alpha = 0.65
        return p.next_plan(("ngram",))

    long_run, early = plan_at(LONG_STREAK), plan_at(HOT_STREAK)
    assert long_run.drafter == "ngram", long_run.reason
    assert early.drafter == "none", early.reason
