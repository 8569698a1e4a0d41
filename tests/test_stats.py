"""One statistics module (issue 55): each figure of speculation defined once, in
engine/decode/stats.py, and one event fold that every reader of a reply's events uses."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from specchat.cli.prove_cmd import Tally
from specchat.engine.decode.events import (
    Event,
    GenerationStats,
    NoticeEvent,
    RejectedEvent,
    StepEvent,
    TokenEvent,
    TokenOrigin,
)
from specchat.engine.decode.fold import EventFold, missing_stats
from specchat.engine.decode.spec_stats import SpecTally
from specchat.engine.decode.stats import (
    acceptance,
    acceptance_length,
    decode_rate,
    expected_tokens,
    overall_rate,
    predicted_speedup,
    speedup,
    step_seconds,
    tokens_per_pass,
)
from specchat.engine.policy.costs import CostCurve
from specchat.engine.policy.speedup import predicted_speedup as curve_speedup
from specchat.race.why import Costs
from specchat.race.why import speedup as race_speedup
from specchat.store.fates import FateFold, FateTrace, merge_segments

A, C, B = TokenOrigin.ACCEPTED, TokenOrigin.CORRECTED, TokenOrigin.BONUS


def test_alpha_tau_and_the_acceptance_length_on_known_counts() -> None:
    assert acceptance(7, 1) == pytest.approx(7 / 8)
    assert acceptance(0, 0) is None  # nothing judged yet
    assert tokens_per_pass(9, 2) == 4.5 and tokens_per_pass(5, 0) is None
    # vLLM's mean acceptance length: 1 + accepted / steps
    assert acceptance_length(7, 2) == 4.5 and acceptance_length(0, 3) == 1.0
    assert acceptance_length(5, 0) is None  # no steps: plain decoding


def test_expected_tokens_one_alpha_and_per_position() -> None:
    assert expected_tokens(0.0, 4) == 1.0 and expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)
    assert expected_tokens(0.8, 0) == 1.0 and expected_tokens(0.8, -2) == 1.0
    # the closed form and the per-position sum are the same quantity
    for a in (0.1, 0.5, 0.9):
        assert expected_tokens([a] * 6, 6) == pytest.approx(expected_tokens(a, 6), rel=1e-12)
    assert expected_tokens([0.9, 0.5, 0.2], 3) == pytest.approx(1 + 0.9 + 0.45 + 0.09)
    assert expected_tokens([0.9, 0.5], 5) == pytest.approx(1 + 0.9 + 0.45)  # only what is known


def test_speedup_on_known_costs() -> None:
    assert step_seconds(3, 0.01, 0.05) == pytest.approx(0.08)
    assert speedup(2.0, 0.1, 0.1) == pytest.approx(2.0)
    assert speedup(2.0, 0.0, 0.1) is None  # a step that costs nothing cannot be compared
    # every draft kept and free: γ + 1 tokens for one pass as dear as a plain token
    assert predicted_speedup(1.0, 4, 0.0, 0.1, 0.1) == pytest.approx(5.0)
    assert predicted_speedup(0.8, 0, 0.01, 0.1, 0.1) == 1.0  # γ 0 is plain
    e = expected_tokens(0.7, 3)
    assert predicted_speedup(0.7, 3, 0.01, 0.05, 0.04) == pytest.approx(e / 0.08 * 0.04)


def test_both_cost_types_give_the_one_speedup() -> None:
    verify = (0.040, 0.045, 0.050, 0.060, 0.070)
    curve = CostCurve(0.012, verify)
    race = Costs(verify[0], {i + 1: v for i, v in enumerate(verify)}, 0.012, "calibration")
    for alpha in (0.3, 0.7, 0.95):
        for gamma in (1, 2, 4):
            want = expected_tokens(alpha, gamma) / (gamma * 0.012 + verify[gamma]) * verify[0]
            assert curve_speedup(alpha, gamma, curve) == pytest.approx(want, rel=1e-12)
            assert race_speedup(race, alpha, gamma, 0.012) == pytest.approx(want, rel=1e-12)
    assert race_speedup(race, 0.7, 9, 0.012) is None  # that check was not measured


def test_tokens_per_second_leaves_the_first_token_out() -> None:
    assert decode_rate(11, 0.5) == pytest.approx(20.0)  # 10 tokens after the first in 0.5 s
    assert decode_rate(1, 0.5) == 0.0 and decode_rate(0, 0.0) == 0.0 and decode_rate(5, 0.0) == 0.0
    assert overall_rate(10, 0.5) == 20.0 and overall_rate(3, 0.0) == 0.0
    s = GenerationStats(generated_tokens=11, decode_s=0.5, total_s=1.0)
    assert s.decode_tps == decode_rate(11, 0.5) and s.e2e_tps == 11.0


def _reply() -> list[Event]:
    """Two steps: 3 of 4 drafts kept then a correction; all 4 kept and a bonus."""
    out: list[Event] = []
    t = 0.0
    for pos, origin in enumerate([A, A, A, C]):
        t += 0.01
        out.append(TokenEvent(pos, "ab"[pos % 2], origin, pos, t))
    out.append(RejectedEvent(99, "y", 3, 0.1, 0.5))
    out.append(StepEvent(4, 3, 0.01, 0.03, position=0, committed=4, rejected=1))
    out.append(NoticeEvent("dropped 2 messages"))
    for pos, origin in enumerate([A, A, A, A, B], start=4):
        t += 0.01
        out.append(TokenEvent(pos, "c", origin, pos, t))
    out.append(StepEvent(4, 4, 0.01, 0.03, position=4, committed=5))
    out.append(GenerationStats(generated_tokens=9, decode_s=t - 0.01, steps=2, accepted=7,
                               rejections=1, target_forwards=2, draft_s=0.02, verify_s=0.06))
    return out


def test_the_fold_reads_a_reply_once_for_every_reader() -> None:
    events = _reply()
    fold = EventFold()
    stats = fold.run(iter(events), "speculative")
    assert stats is events[-1] and fold.stats is stats
    assert fold.token_ids == [0, 1, 2, 3, 4, 5, 6, 7, 8] and fold.tokens == 9
    assert fold.origins[A] == 7 and fold.origins[C] == 1 and fold.origins[B] == 1
    assert [s.accepted for s in fold.steps] == [3, 4] and fold.generated == 9
    assert fold.notices == ["dropped 2 messages"] and fold.rejected == 1
    t = fold.tally
    assert (t.steps, t.drafted, t.accepted, t.rejections, t.rejected_tokens) == (2, 8, 7, 1, 1)
    # the live figures are the saved reply's: one tally, one definition
    assert t.alpha == stats.alpha and t.tau(fold.generated) == stats.tau
    assert t.acceptance_length == stats.acceptance_length == pytest.approx(4.5)
    assert stats.as_dict()["acceptance_length"] == pytest.approx(4.5)


def test_the_fold_stops_at_the_stats_and_says_when_there_are_none() -> None:
    def stream() -> Iterator[Event]:
        yield from _reply()
        raise AssertionError("read past the stats")

    fold = EventFold()
    seen = list(fold.through(stream(), "speculative"))
    assert isinstance(seen[-1], GenerationStats) and len(seen) == len(_reply())
    with pytest.raises(RuntimeError, match="^the plain decoder ended without its stats$"):
        EventFold().run(iter(_reply()[:-1]), "plain")
    assert str(missing_stats("x")) == "the x decoder ended without its stats"
    other = EventFold()
    other.add("a tool's event")  # not an engine event: passed over
    assert other.tokens == 0 and other.stats is None


def test_the_fate_fold_builds_the_trace_a_hand_fed_one_did() -> None:
    events = _reply()
    by_hand = FateTrace()
    for ev in events:
        if isinstance(ev, TokenEvent):
            by_hand.add_token(ev)
        elif isinstance(ev, RejectedEvent):
            by_hand.add_rejected(ev)
        elif isinstance(ev, GenerationStats):
            by_hand.finish()
    fold = FateFold()
    for ev in events:
        fold.add(ev)
    assert fold.trace.segments == by_hand.segments
    assert [s.kind for s in merge_segments(fold.take_shown())] == ["a", "c", "x", "a", "b"]
    assert fold.take_shown() == []


def test_prove_counts_a_continuation_as_it_did() -> None:
    events = _reply()
    fold = EventFold()
    fold.run(iter(events), "speculative")
    tally = Tally()
    tally.add(fold)
    tally.add(fold)
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert tally == Tally(continuations=2, steps=4, drafting_steps=4,
                          drafted=2 * sum(s.gamma for s in steps),
                          accepted=2 * sum(s.accepted for s in steps),
                          rejected=2 * sum(s.rejected for s in steps), residual=2,
                          through_rejection=2)


def test_spec_tally_counts_drafting_steps_and_rejected_tokens() -> None:
    t = SpecTally()
    t.count(StepEvent(0, 0, 0.0, 0.01, drafter="none"))
    t.count(StepEvent(3, 1, 0.01, 0.02, rejected=1))
    assert (t.steps, t.drafting_steps, t.rejected_tokens) == (2, 1, 1)
    assert t.acceptance_length == pytest.approx(1.5)
