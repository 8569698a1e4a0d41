"""The planner: plain on a steep CPU curve with a costly draft, trees on a flat (GPU-like) one,
the verify-cost table's fit, n-gram and tree learning, and its state's round trip."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import specchat.engine.policy.planner_chains as planner_module
from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import Plan
from specchat.engine.policy.auto_gamma import AutoGamma, AutoGammaSeed, AutoGammaSettings
from specchat.engine.policy.cost_model import OnlineCostModel
from specchat.engine.policy.costs import CostCurve
from specchat.engine.policy.lookup_estimate import LONG_STREAK
from specchat.engine.policy.lookup_pauses import LOOKUP_PAUSE_MAX
from specchat.engine.policy.planner import Planner
from specchat.engine.policy.planner_banded import BandedLookup
from specchat.engine.policy.planner_draft import catch_up_cost
from specchat.engine.policy.planner_settings import PlannerSettings
from specchat.engine.policy.tree_stats import tree_draft_cost
from specchat.engine.policy.verify_table import TABLE_SIZE, VerifyTable, extend_curve


def ngram(p: Planner) -> BandedLookup:
    """The n-gram lookup's record in planner ``p`` (policy.planner_arms)."""
    return p.records["ngram"]


def ngram_alphas(p: Planner) -> dict[str, list[float]]:
    """The n-gram lookup's α by depth, as ``Planner.candidates`` takes them."""
    return {"ngram": ngram(p).alpha.position_alphas()}

# llama-bench on 2 CPU cores, Qwen2.5-Coder 1.5B Q4_K_M target (issue 14): n = 1..6, 8; the
# 0.5B draft costs 25 ms a token. n = 7 is between its neighbours.
QWEN_CPU = CostCurve(0.025, tuple(x / 1000 for x in (43, 55, 67, 95, 104, 119, 150, 188)))
# A GPU-like curve: nearly flat to dozens of tokens, a cheap draft.
FLAT = CostCurve(0.0015, tuple(0.010 + 0.00005 * n for n in range(1, 33)))

CALM = PlannerSettings(AutoGammaSettings(explore=False, early_stop=False, warmup=(1, 1)))


def planner(curve: CostCurve, alpha: float, settings: PlannerSettings = CALM,
            ngram_alpha: float | None = None) -> Planner:
    p = Planner(settings, AutoGammaSeed(curve, alpha, ngram_alpha=ngram_alpha),
                clock=lambda: 0.0)
    p.begin("hello")
    return p


def test_plain_on_the_qwen_cpu_curve_with_its_costly_draft() -> None:
    p = planner(QWEN_CPU, 0.85)
    plan = p.next_plan(("model", "tree"))
    assert plan.drafter == "none" and plan.size == 0
    assert plan.reason == "plain: a draft token costs 58% of a target step"
    assert p.label.startswith("plan · plain:")
    assert p.next_gamma() == 0  # today's decoder: a plain step


def test_a_nearly_free_ngram_chain_can_pay_where_the_draft_model_cannot() -> None:
    p = planner(QWEN_CPU, 0.85, ngram_alpha=0.6)
    plan = p.next_plan(("model", "ngram", "tree"))
    assert plan.drafter == "ngram" and plan.is_chain and plan.size >= 1
    assert plan.reason == f"ngram {plan.size}"


def test_a_tree_on_a_flat_curve() -> None:
    p = planner(FLAT, 0.7)
    plan = p.next_plan(("model", "ngram", "tree"))
    assert plan.drafter == "tree" and not plan.is_chain
    assert plan.size > 8
    assert plan.reason == f"tree {plan.size} · depth {plan.depth}"
    # only chains available: a long chain, and next_gamma says its length
    chain = p.next_plan(("model",))
    assert chain.drafter == "model" and chain.is_chain and chain.size >= 3
    assert p.next_gamma() == chain.size


def test_the_plan_maximises_rate_over_every_chain_length() -> None:
    p = planner(FLAT, 0.8)
    plan = p.next_plan(("model",))
    base, cands = p.candidates(("model",), p._alphas, ngram_alphas(p))
    best = cands[0]
    assert plan.size == best.plan.size
    t = p.costs.verify_table()
    o = p.costs.overhead
    for g in range(1, p.settings.gamma_max + 1):
        e = sum(0.8 ** i for i in range(g + 1))
        assert e / (g * p.costs.t_draft + t[g] + o) <= best.rate * 1.001 + 1e-9
    assert best.rate > base.rate


def test_no_drafter_means_a_plain_step() -> None:
    assert planner(FLAT, 0.9).next_plan(()).drafter == "none"


def test_a_probe_after_a_run_of_plain_steps() -> None:
    p = planner(QWEN_CPU, 0.85)
    plans = [p.next_plan(("model",)) for _ in range(p.settings.probe_every)]
    assert all(x.drafter == "none" for x in plans[:-1])
    assert plans[-1].drafter == "model" and plans[-1].size == p.settings.probe_gamma


def test_tree_draft_cost_of_a_chain_is_gamma_draft_steps() -> None:
    table = FLAT.verify_s
    assert tree_draft_cost(Plan("tree", (-1, 0, 1)), 0.002, table) == pytest.approx(0.006)
    # two root children and one grandchild: root decode + one batched level of 2
    wide = tree_draft_cost(Plan("tree", (-1, -1, 0)), 0.002, table)
    assert wide == pytest.approx(0.002 * (1 + table[1] / table[0]))


# ------------------------------------------------------------------------- the cost table

def test_the_table_follows_measurements_and_scales_the_shape_elsewhere() -> None:
    t = VerifyTable(8, half_life=1e9)
    shape = [0.01 * n for n in range(1, 5)]  # seeded to n = 4, extended along its last step
    t.seed(shape, weight=1.0)
    assert t.shape == pytest.approx(extend_curve(shape, 8))
    for _ in range(50):  # the machine is twice as slow as calibrated, seen at n = 2
        t.add(2, 0.04)
    est = t.estimates()
    assert est[1] == pytest.approx(0.04, rel=0.05)  # measured: the measurement
    assert est[7] == pytest.approx(2 * 0.08, rel=0.1)  # never measured: the shape × level
    assert list(est) == sorted(est)


def test_the_table_is_non_decreasing_and_keeps_a_kink() -> None:
    t = VerifyTable(8, half_life=1e9)
    for _ in range(30):
        for n, y in enumerate(QWEN_CPU.verify_s, 1):
            t.add(n, y)
        t.add(5, 0.090)  # noise below n = 4's cost: pooled, not a bargain
    est = t.estimates()
    assert list(est) == sorted(est)
    assert est[3] - est[2] > 2 * (est[2] - est[1]) * 0.9  # the jump at 4 stays a jump


def test_online_model_uses_the_table_not_a_line() -> None:
    m = OnlineCostModel()
    m.seed(QWEN_CPU)
    assert m.t_verify(4) == pytest.approx(0.095, rel=0.02)
    a, b = m.line()
    assert abs(a + 4 * b - 0.095) > 0.002  # the line would have smoothed the kink away
    assert len(m.verify_table()) == TABLE_SIZE


def test_steps_update_the_table_by_batch_size() -> None:
    p = planner(QWEN_CPU, 0.85)
    before = p.costs.verify_table()[2]
    for _ in range(40):
        p.next_plan(("model",))
        p.observe(StepEvent(2, 2, 0.05, 0.134, "model", committed=3))  # n = 3 twice as slow
    after = p.costs.verify_table()
    assert after[2] == pytest.approx(2 * before, rel=0.1)
    assert after[0] > QWEN_CPU.verify_s[0] * 1.3  # the level moved the unobserved sizes too


# --------------------------------------------------------------------------- learning

def test_tree_steps_teach_the_rank_statistics() -> None:
    p = planner(FLAT, 0.7)
    prior = p.records["tree"].plans.rank_table(p.current.model.position_alphas())[0][1]
    shape = Plan("tree", (-1, -1, 0, 1))
    for _ in range(60):
        p.next_plan(("tree",))
        p.last_plan = shape  # the decoder ran this shape
        # the root's second child was accepted, then its only child
        p.observe(StepEvent(4, 2, 0.003, 0.011, "tree", committed=3, accepted_ranks=(1, 0)))
    table = p.records["tree"].plans.rank_table(p.current.model.position_alphas())
    assert table[0][1] > prior + 0.2  # rank 2 at depth 1: often the one
    assert p.current.model.position_alphas()[0] < 0.4  # rank 1 at depth 1: never


def test_ngram_steps_teach_the_ngram_model_and_its_cost() -> None:
    p = planner(QWEN_CPU, 0.85)
    for _ in range(30):
        p.next_plan(("ngram",))
        p.observe(StepEvent(3, 3, 0.0003, 0.067, "ngram", committed=4))
    assert ngram(p).alpha.alpha() > 0.8
    assert ngram(p).t == pytest.approx(0.0001, rel=0.3)
    assert p.next_plan(("model", "ngram")).drafter == "ngram"


def test_state_round_trip_through_json() -> None:
    p = planner(FLAT, 0.6, settings=PlannerSettings())
    p.begin("def f(x): return x")
    for i in range(30):
        plan = p.next_plan(("model", "ngram"))
        kept = min(plan.size, i % 4)
        p.observe(StepEvent(plan.size, kept, 0.001 * plan.size, 0.0105, plan.drafter
                            if plan.drafter != "none" else "none", committed=kept + 1))
    d = json.loads(json.dumps(p.state()))
    q = Planner(PlannerSettings(), clock=lambda: 0.0)
    assert q.label == "plan · warm-up"
    q.load_state(d)
    assert q.state() == d
    q.begin("def f(x): return x")
    p.costs.first.held.clear()  # sizes timed once: this process's first decodes, not saved
    assert q.costs.verify_table() == pytest.approx(p.costs.verify_table())
    assert q.next_plan(("model",)).reason != "warm-up"  # warm from the saved state


@pytest.mark.parametrize("damage", [
    lambda d: d.update(version=99),
    lambda d: d.pop("costs"),
    lambda d: d["costs"].update(sums=[1, 2]),
    lambda d: d["arms"].update(tree={"offered": [[1.0]], "hits": [[0.0]]}),
    lambda d: d["arms"]["ngram"].update(cost=[1.0]),
    lambda d: d.update(topics="nonsense"),
])
def test_a_damaged_state_is_refused_whole(damage) -> None:  # type: ignore[no-untyped-def]
    p = planner(FLAT, 0.6)
    d = json.loads(json.dumps(p.state()))
    damage(d)
    q = Planner(PlannerSettings(), clock=lambda: 0.0)
    before = q.state()
    with pytest.raises((ValueError, TypeError, KeyError, AttributeError)):
        q.load_state(d)
    assert q.state() == before


def test_exploration_never_tries_what_the_mean_rates_far_below_plain() -> None:
    explore = PlannerSettings(AutoGammaSettings(explore=True, early_stop=False, seed=3))
    p = planner(QWEN_CPU, 0.5, settings=explore)  # a draft that clearly cannot pay here
    plans = [p.next_plan(("model",)) for _ in range(200)]
    spec = [x for x in plans if x.drafter != "none"]
    assert all(x.reason == "probe" for x in spec)  # only the rare, cheap probes
    assert len(spec) <= 200 // p.settings.probe_every


def test_probes_that_find_nothing_come_less_often() -> None:
    p = planner(FLAT, 0.05)  # a cheap draft that the target almost never agrees with
    gaps, run = [], 0
    for _ in range(1500):
        plan = p.next_plan(("model",))
        run += 1
        if plan.reason == "probe":
            gaps.append(run)
            run = 0
            p.observe(StepEvent(1, 0, 0.0015, 0.0101, "model", committed=1))
        else:
            p.observe(StepEvent(0, 0, 0.0, 0.0100, "none", committed=1))
    assert gaps[0] == p.settings.probe_every
    assert gaps[-1] == p.settings.probe_every * p.plan_settings.probe_backoff
    assert gaps == sorted(gaps)


def test_no_draft_model_probe_where_re_reading_the_skipped_tokens_costs_too_much() -> None:
    p = planner(QWEN_CPU, 0.85)  # re-reading 24 tokens: ~25 ms × (T(24)/T(1) − 1), > 5 %
    reasons = set()
    for _ in range(200):
        plan = p.next_plan(("model",))
        reasons.add(plan.reason)
        p.observe(StepEvent(0, 0, 0.0, 0.043, "none", committed=1))
    assert "probe" not in reasons
    tried = []  # the free drafter may still try (probed, as its cold estimate does not pay)
    for _ in range(p.settings.probe_every):
        tried.append(p.next_plan(("model", "ngram")).drafter)
        p.observe(StepEvent(0, 0, 0.0, 0.043, "none", committed=1))
    assert "ngram" in tried


def test_switching_back_to_the_draft_must_repay_its_catch_up() -> None:
    p = planner(FLAT, 0.7)
    p.reads.behind = 2  # the usual: the draft missed the last step's tokens
    assert p.next_plan(("model",)).drafter == "model"
    p.observe(StepEvent(0, 0, 0.0, 0.010, "none", committed=1))
    p.reads.behind = 20000  # a long plain stretch: re-reading it costs more than 64 tokens gain
    plan = p.next_plan(("model",))
    assert plan.drafter == "none" and plan.reason == "plain: the draft would first re-read " \
        "20000 tokens"
    assert catch_up_cost(p, 1) == 0.0 < catch_up_cost(p, 10) < catch_up_cost(p, 100)


def long_reply(p: Planner, verify_s: float = 0.0100) -> None:
    """Plain steps until the reply is long enough for a warm-up (they time T(1))."""
    for _ in range(p.plan_settings.warmup_after):
        plan = p.next_plan(("model",))
        assert plan.drafter == "none"
        p.observe(StepEvent(0, 0, 0.0, verify_s, "none", committed=1))


def test_without_calibration_plain_steps_then_a_short_warm_up_then_the_measured_line() -> None:
    p = Planner(CALM, clock=lambda: 0.0)
    p.begin("hi")
    assert p.next_plan(("model",)).reason == "plain: drafting tried from token 64"
    long_reply(p)  # a short reply never pays for a warm-up
    for draft_s, verify_s in ((0.003, 0.0157), (0.001, 0.0101)):  # the first: new shapes, slow
        plan = p.next_plan(("model",))
        assert (plan.drafter, plan.size, plan.reason) == ("model", 1, "warm-up")
        p.observe(StepEvent(1, 1, draft_s, verify_s, "model", committed=2))
    assert p.costs.t_draft == pytest.approx(0.001)  # the first, slow observations left out
    assert p.costs.t_verify(2) == pytest.approx(0.0101, rel=0.02)  # not 15.7 ms
    plan = p.next_plan(("model",))  # a flat curve and a cheap draft: now a chain pays
    assert plan.drafter == "model" and plan.size >= 2


def test_plain_says_when_the_check_is_what_costs() -> None:
    cheap_draft = CostCurve(0.005, QWEN_CPU.verify_s)
    p = planner(cheap_draft, 0.3)
    plan = p.next_plan(("model",))
    assert plan.drafter == "none"
    assert plan.reason == "plain: a 5-token check costs 2.4× one token here"


def test_a_draft_step_after_plain_ones_does_not_count_its_catch_up_as_draft_cost() -> None:
    p = planner(FLAT, 0.7)
    t0 = p.costs.t_draft
    p.observe(StepEvent(0, 0, 0.0, 0.010, "none", committed=1))
    p.observe(StepEvent(2, 2, 0.050, 0.011, "model", committed=3))  # caught up, then drafted
    assert p.costs.t_draft == pytest.approx(t0)
    for _ in range(3):
        p.observe(StepEvent(2, 2, 0.004, 0.011, "model", committed=3))  # drafting in a row
    assert p.costs.t_draft > t0


def test_the_planner_keeps_its_forecast_for_the_reply() -> None:
    p = planner(QWEN_CPU, 0.85, ngram_alpha=0.9)
    plans = [p.next_plan(("model", "ngram")) for _ in range(3)]
    table, o = p.costs.verify_table(), p.costs.overhead
    assert all(pl.drafter == "ngram" for pl in plans)
    g = plans[0].size
    expected = sum(0.9 ** i for i in range(g + 1))  # 1 + Σ α^i at a flat α of 0.9
    assert p.prediction.steps == 3 and p.prediction.unscored == 0
    assert p.prediction.tokens == pytest.approx(3 * expected, rel=0.05)
    assert p.prediction.seconds == pytest.approx(3 * (g * ngram(p).t + table[g] + o))
    p.next_plan(())  # a plain step: one token in T(1) + o
    assert p.prediction.steps == 4
    assert p.forecast() == p.prediction.tok_s == p.prediction.tokens / p.prediction.seconds
    p.begin("next turn")
    assert p.prediction.steps == 0 and p.prediction.tok_s is None and p.forecast() is None
    assert AutoGamma().forecast() is None  # auto-γ forecasts nothing


def test_warm_up_steps_are_not_forecasts() -> None:
    p = Planner(CALM, AutoGammaSeed(), clock=lambda: 0.0)
    p.begin("hello")
    long_reply(p)
    unscored = p.prediction.unscored
    assert p.next_plan(("model",)).reason == "warm-up"
    assert p.prediction.steps == 0 and p.prediction.unscored == unscored + 1


def test_another_chain_drafter_is_timed_by_a_probe_then_judged_on_what_it_showed() -> None:
    """A drafter the planner has no cost model for (the layer-skip self-draft): one probe
    first, then its own α and cost per token decide, as for the draft model."""
    p = planner(FLAT, 0.5)
    first = p.next_plan(("layerskip",))
    assert first.drafter == "layerskip" and first.reason == "probe"
    # It drafts fast and well here: the planner keeps using it.
    for _ in range(30):
        plan = p.next_plan(("layerskip",))
        if plan.drafter == "layerskip":
            g = plan.size
            p.observe(StepEvent(g, g, 0.001 * g, 0.0105, "layerskip", committed=g + 1))
        else:
            p.observe(StepEvent(0, 0, 0.0, 0.010, "none", committed=1))
    assert p.records["layerskip"].model.alpha() > 0.8
    assert p.records["layerskip"].t(0.01) == pytest.approx(0.001, rel=0.05)
    plan = p.next_plan(("layerskip",))
    assert plan.drafter == "layerskip" and plan.size >= 2 and plan.reason.startswith("layerskip")

    # One that drafts slowly and badly on the steep CPU curve: plain after the probe.
    q = planner(QWEN_CPU, 0.5)
    assert q.next_plan(("layerskip",)).reason == "probe"
    q.observe(StepEvent(2, 0, 0.060, 0.067, "layerskip", committed=1))
    plans = [q.next_plan(("layerskip",)) for _ in range(3)]
    assert all(pl.drafter == "none" for pl in plans)


def test_a_drafter_that_would_first_read_a_long_prompt_is_not_probed() -> None:
    """A layer-skip cut reads a prompt nearly as slowly as the target: after a long document
    its probe would cost more than a short reply gains."""
    p = planner(FLAT, 0.5)
    p.begin("a long document")
    p.drafter_lags({"layerskip": 1500})
    plans = [p.next_plan(("layerskip",)) for _ in range(40)]
    assert all(pl.drafter == "none" for pl in plans)
    p.begin("a short question")  # the next reply: its cache is close enough
    p.drafter_lags({"layerskip": 40})
    first = p.next_plan(("layerskip",))  # the first token before it reads the prompt
    assert first.reason == "plain: the first token before the draft reads the prompt"
    p.observe(StepEvent(0, 0, 0.0, 0.010, "none", committed=1))
    assert p.next_plan(("layerskip",)).reason == "probe"


def test_a_probe_that_found_nothing_to_propose_is_not_repeated_at_once() -> None:
    p = planner(QWEN_CPU, 0.5)  # (a chain drafter: Lookahead, which this named, plans its own)
    assert p.next_plan(("layerskip",)).reason == "probe"
    p.observe(StepEvent(0, 0, 0.0, 0.043, "none", committed=1))  # it had nothing to offer
    assert p.next_plan(("layerskip",)).reason != "probe"


def test_ngram_probes_that_keep_missing_slow_down_but_never_stop() -> None:
    """Lookups rejected in a row pause the lookup, longer each time, up to a bound (a right
    guess ends a pause at once: tests/test_planner_reads.py), and it is always tried again."""
    p = planner(QWEN_CPU, 0.5, ngram_alpha=0.05)
    gaps, run = [], 0
    for _ in range(400):
        plan = p.next_plan(("ngram",))
        run += 1
        if plan.drafter == "ngram":
            gaps.append(run)
            run = 0
            p.observe(StepEvent(1, 0, 0.0002, 0.055, "ngram", committed=1))
        else:
            p.observe(StepEvent(0, 0, 0.0, 0.043, "none", committed=1))
    assert len(gaps) > 5 and gaps[1:] == sorted(gaps[1:]) and gaps[-1] > gaps[1]
    assert max(gaps) <= p.settings.probe_every + LOOKUP_PAUSE_MAX + 1


@pytest.mark.parametrize("scored", [True, False])
def test_a_lookup_whose_guesses_are_scored_is_not_probed(scored: bool) -> None:
    """A probe would buy, at a check's price, what the lookup's scored guesses already say: a
    reply its guesses miss three times in four (not enough to pay on this curve) gets no
    lookup step. Control: the same reply without guesses scored is probed every so often."""
    p = planner(QWEN_CPU, 0.5, ngram_alpha=0.3)
    lookups, seq = 0, [1, 2]
    for i in range(200):
        plan = p.next_plan(("ngram",))
        n = plan.size if plan.drafter == "ngram" else 0
        lookups += n > 0
        p.observe(StepEvent(n, 0, 0.0002 * n, 0.055 if n else 0.043,
                            plan.drafter if n else "none", committed=1))
        seq.append(i % 7)
        if scored:  # right one step in four
            p.score_guesses([seq[-1]], plan.drafter if n else "none",
                            {"ngram": lambda k, i=i: [(i + 1) % 7 if i % 4 == 3 else 99][:k]})
    assert (lookups == 0) if scored else (lookups >= 5), lookups


def test_a_long_prompt_the_draft_has_not_read_is_paid_for_before_drafting() -> None:
    """After a long pasted document the draft model must first read it all: on a flat curve
    with a good draft that still pays; on the CPU curve with a 0.85 draft it does not."""
    flat = planner(FLAT, 0.8)
    flat.draft_lag(2000)
    assert flat.next_plan(("model",)).drafter == "none"  # the first token comes first
    flat.observe(StepEvent(0, 0, 0.0, 0.010, "none", committed=1))
    assert flat.next_plan(("model",)).drafter == "model"
    cpu = planner(CostCurve(0.010, QWEN_CPU.verify_s), 0.85)  # a cheap draft: drafting pays
    assert cpu.next_plan(("model",)).drafter == "model"
    cpu.begin("a long document")
    cpu.draft_lag(2000)
    assert cpu.next_plan(("model",)).drafter == "none"
    cpu.observe(StepEvent(0, 0, 0.0, 0.043, "none", committed=1))
    plan = cpu.next_plan(("model",))
    assert plan.drafter == "none" and plan.reason == "plain: the draft would first re-read 2000 tokens"


def test_no_warm_up_with_a_draft_that_would_first_read_a_long_prompt() -> None:
    p = Planner(CALM, AutoGammaSeed(), clock=lambda: 0.0)
    p.begin("a long document")
    p.draft_lag(1500)
    assert p.next_plan(("model",)).drafter == "none"
    # Not a lookup that has not been right yet: its warm-up steps wait for a repeated passage.
    assert p.next_plan(("model", "ngram")).drafter == "none"
    ngram(p).hot = True  # its last two guesses were right: a word pair as often as a copy
    assert p.next_plan(("model", "ngram")).drafter == "none"
    ngram(p).estimate.streak = LONG_STREAK  # four right in a row: a passage the reply repeats
    plan = p.next_plan(("model", "ngram"))
    assert plan.reason == "warm-up"  # n-gram lookups can warm up
    # ... with checks of 4 rows: a line through T(1) and T(2), the dearest tokens of a
    # concave curve, would price every longer check too dear to try.
    assert (plan.drafter, plan.size) == ("ngram", 3)


@pytest.mark.parametrize(("alpha", "scorings"), [(0.75, 2), (0.5, 1)])
def test_a_plain_answer_is_kept_for_a_few_steps_without_scoring_again(
        monkeypatch: pytest.MonkeyPatch, alpha: float, scorings: int) -> None:
    """Held for 4 steps while the best draft step rates near plain (α 0.75: 0.94× plain), for
    16 when it is far below (α 0.5: 0.81×)."""
    p = planner(QWEN_CPU, alpha)
    calls = []
    real = p.candidates
    monkeypatch.setattr(p, "candidates", lambda *a, **k: calls.append(1) or real(*a, **k))
    tables = []  # the verify table worked out anew (a few dozen Python operations each time)
    work = p.costs.table.estimates
    monkeypatch.setattr(p.costs.table, "estimates", lambda *a: tables.append(1) or work(*a))
    plans = []
    for _ in range(8):
        plans.append(p.next_plan(("model",)))
        p.observe(StepEvent(0, 0, 0.0, 0.043, "none", committed=1))
    assert all(pl.drafter == "none" for pl in plans)
    assert len({pl.reason for pl in plans}) == 1  # the held steps say why, as the scored one
    # Near: scored at steps 1 and 5; far: at step 1 only (exploration would add one per scoring).
    assert len(calls) == scorings
    assert len(tables) == scorings  # only for the scorings, not after every plain step's timing
    # Each held step is forecast as the scoring that chose it forecast a plain step.
    assert p.prediction.steps == 8 and p.prediction.tokens == 8
    base = real(("model",), p._alphas, ngram_alphas(p))[0]
    assert p.prediction.seconds == pytest.approx(8 * base.seconds, rel=0.05)
    p.next_plan(("model", "ngram"))  # other drafters offered: scored at once
    assert len(calls) == scorings + 1


# Qwen 1.5B's verify table to 32 tokens (logits on every row, 2 CPU cores): past 8 tokens a
# check costs ~15 ms a token more, against 31 ms for one token alone.
CPU32 = CostCurve(0.025, tuple(x / 1000 for x in (
    31, 60, 84, 99, 128, 146, 167, 222, 234, 252, 267, 279, 298, 305, 305, 305, 321, 331, 354,
    354, 375, 388, 388, 388, 393, 426, 439, 444, 444, 456, 476, 476)))


@pytest.mark.parametrize("depth", [10, 31])
def test_a_copy_gets_lookup_chains_longer_than_the_draft_models(depth: int) -> None:
    """A lookup costs nothing to draft: on a copy it is worth checking far more tokens than a
    draft model's chain (γ ≤ 10), as long as each check costs less per token."""
    p = planner(CPU32, 0.85, settings=replace(CALM, lookup_depth=depth), ngram_alpha=0.98)
    for _ in range(20):
        plan = p.next_plan(("ngram",))
        n = max(plan.size, 1)
        p.observe(StepEvent(n, n, 0.0002, CPU32.verify_s[n], "ngram", committed=n + 1))
    plan = p.next_plan(("ngram",))
    assert plan.drafter == "ngram"
    assert plan.size > 10 if depth == 31 else plan.size <= 10
    model = planner(FLAT, 0.97, settings=replace(CALM, lookup_depth=depth)).next_plan(("model",))
    assert model.drafter == "model" and model.size <= 10


def test_the_burst_clip_never_reads_a_table_worked_out_before_anything_was_timed() -> None:
    """The clip reads the verify table as last worked out; one worked out while nothing was
    timed (all zeros) must not clip every later observation to nothing."""
    c = OnlineCostModel()
    assert c.verify_table()[0] == 0.0  # nothing timed yet
    for _ in range(6):
        c.add_verify(1, 0.04)
    assert c.t_verify(1) == pytest.approx(0.04)
    a, b = c.line()  # the line's sums took every observation whole, not clipped to nothing
    assert a + b == pytest.approx(0.04, rel=0.05)
    c.add_verify(1, 1.0)  # a burst: clipped to 3× the estimate, not to 0 and not kept whole
    assert 0.04 < c.verify_table()[0] < 0.2


def _lookup_sizes(p: Planner, steps: int = 30) -> tuple[list[int], list[str]]:
    """Steps on a copy (every lookup token accepted), timed on CPU32: sizes and reasons."""
    sizes, reasons = [], []
    for _ in range(steps):
        plan = p.next_plan(("ngram",))
        n = max(plan.size, 1)
        sizes.append(plan.size)
        reasons.append(plan.reason)
        p.observe(StepEvent(n, n, 0.0002, CPU32.verify_s[n], "ngram", committed=n + 1))
    return sizes, reasons


def test_check_sizes_never_timed_are_tried_where_the_line_through_the_timed_ones_overprices_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Only 1- and 2-token checks timed (a pair never calibrated): the line through them prices a
    16-token check at 16× one token, where CPU32 costs 10×. Trying the longer checks shows the
    curve's flat part, and then the planner keeps to long lookups; without trying, it stays
    with short ones, and with the whole curve calibrated there is nothing to try."""
    settings = replace(CALM, lookup_depth=31)
    two = CostCurve(0.025, CPU32.verify_s[:2])
    sizes, reasons = _lookup_sizes(planner(two, 0.85, settings, ngram_alpha=0.98))
    tried = [s for s, r in zip(sizes, reasons, strict=True) if r.endswith("timing a longer check")]
    assert tried and max(tried) > 10
    assert min(sizes[-10:]) > 10
    calibrated, why = _lookup_sizes(planner(CPU32, 0.85, settings, ngram_alpha=0.98))
    assert not any("timing" in r for r in why) and min(calibrated[-10:]) > 10
    monkeypatch.setattr(planner_module, "TRY_UNTIMED", 99.0)
    short, _ = _lookup_sizes(planner(two, 0.85, settings, ngram_alpha=0.98))
    assert max(short[-10:]) <= 6


def test_a_check_size_never_timed_is_tried_only_where_its_guess_beats_plain() -> None:
    """Trying costs at most a guessed step that still beats plain by the margin: over starts
    of several slopes and lookups of several accuracies, every longer check tried is one."""
    tried = 0
    for t2 in (0.050, 0.060, 0.070, 0.076):
        for alpha in (0.6, 0.7, 0.8, 0.9, 0.98):
            p = planner(CostCurve(0.025, (0.040, t2)), 0.85, replace(CALM, lookup_depth=31),
                        ngram_alpha=alpha)
            for _ in range(12):
                p.next_plan(("ngram",))
                base, cands = p.candidates(("ngram",), p._alphas, ngram_alphas(p))
                for c in cands:
                    if c.explore:
                        tried += 1
                        assert c.rate >= p.plan_settings.margin * base.rate
                n = max(p.last_plan.size, 1)
                p.observe(StepEvent(n, n, 0.0002, CPU32.verify_s[n], "ngram", committed=n + 1))
    assert tried > 0


@pytest.mark.parametrize(("lag", "model_steps"), [(2000, False), (100, True)])
def test_a_draft_never_timed_is_not_priced_free_after_a_long_prompt(lag: int,
                                                                     model_steps: bool) -> None:
    """No calibration, and the warm-up left the draft model out (it would first read a 2,000-token
    prompt): its cost is unknown, not 0, so it is neither scored nor probed. After a short
    prompt the warm-up times it, as before."""
    p = Planner(replace(CALM, auto=replace(CALM.auto, probe_every=4)), clock=lambda: 0.0)
    p.begin("a long document, then a question about it")
    p.draft_lag(lag)
    drafters = []
    for i in range(40):
        available = ("model", "ngram") if i % 3 else ("model",)  # the lookup matches now and then
        ngram(p).estimate.streak = LONG_STREAK  # ... and is right when it does
        plan = p.next_plan(available)
        drafters.append(plan.drafter)
        n = plan.size
        if plan.drafter == "ngram":
            p.observe(StepEvent(n, 1, 0.0002, QWEN_CPU.verify_s[n], "ngram", committed=2))
        elif plan.drafter in ("model", "tree"):
            p.observe(StepEvent(n, 1, 0.025 * n, QWEN_CPU.verify_s[n], "model", committed=2))
        else:
            p.observe(StepEvent(0, 0, 0.0, QWEN_CPU.verify_s[0], "none", committed=1))
    assert ("model" in drafters) is model_steps
    assert "ngram" in drafters


def test_a_calibration_ending_mid_session_seeds_the_running_planner() -> None:
    """The app calibrates in the background: the chat's planner takes the result in (its costs
    join the measured ones, the warm-up ends, priors fill what was not seen) and keeps what its
    steps taught it."""
    p = Planner(CALM, clock=lambda: 0.0)
    p.begin("hi")
    long_reply(p)
    assert p.next_plan(("model",)).reason == "warm-up"
    p.observe(StepEvent(1, 1, 0.003, 0.0157, "model", committed=2))  # a new shape: left out
    p.next_plan(("model",))
    p.observe(StepEvent(1, 0, 0.002, 0.0150, "model", committed=1))
    steps = p.overall.steps
    assert steps and not p.seeded
    p.reseed(AutoGammaSeed(QWEN_CPU, 0.3, {"code": 0.9}, ngram_alpha=0.95))
    assert p.seeded and "warm-up" not in p.label
    assert p.overall.steps == steps  # what the steps taught stays
    assert 0.002 < p.costs.t_draft < QWEN_CPU.draft_s  # the measured draft cost, and the seed's
    assert ngram(p).alpha.alpha() == pytest.approx(0.95, abs=0.01)  # the lookup was never tried
    assert p.topic_priors["code"] == 0.9
    assert p.next_plan(("model",)).reason != "warm-up"


def test_a_lookup_uses_every_check_size_a_calibration_timed() -> None:
    """A CPU curve with a step at 8 rows (2 cores, Qwen 1.5B: 7 rows cost 4.6× one, 8 rows
    6.3–7.6×): calibrated, every size is timed, and a lookup deep in a copy checks 7 rows,
    which pays more than any of the few sizes it uses where only those were timed."""
    ms = [34, 63, 85, 112, 128, 145, 160, 220, 235, 245, 258, 275, 280, 290, 295, 300]
    ms += [300 + 12 * k for k in range(1, 17)]
    curve = CostCurve(0.025, tuple(x / 1000 for x in ms))

    def plan(sizes: frozenset[int] | None) -> tuple[Plan, float, float]:
        p = Planner(replace(CALM, lookup_depth=31), AutoGammaSeed(curve, 0.5, ngram_alpha=0.9),
                    clock=lambda: 0.0)
        p.begin("copy this")
        ngram(p).estimate.streak = LONG_STREAK
        if sizes is not None:
            p.chains.lookup_sizes = lambda weight: sizes  # type: ignore[method-assign]
        chosen = p.next_plan(("ngram",))
        base, cands = p.candidates(("ngram",), p._alphas, ngram_alphas(p))
        return chosen, cands[0].rate, base.rate

    every, every_rate, base = plan(None)
    few, few_rate, _ = plan(planner_module.LOOKUP_SIZES)
    assert every.drafter == few.drafter == "ngram"
    assert every.size not in planner_module.LOOKUP_SIZES, every.reason
    assert few.size in planner_module.LOOKUP_SIZES
    assert every_rate > few_rate > base


@pytest.mark.parametrize("warm", [1, 3])
def test_a_cold_lookup_warms_up_on_checks_of_four_rows(warm: int) -> None:
    """Nothing calibrated, a copy on a concave CPU curve whose T(2) came out at 2.07× T(1) (a
    cold qwen-coder run here): warmed up on 2-row checks, the line through T(1) and T(2) prices
    every longer check at more than plain, and the whole copy runs plain; warmed up on 4-row
    checks (the default), the lookup climbs to 32-row checks."""
    ratios = [1.0, 2.07, 2.4, 2.9, 3.6, 4.05, 4.69, 6.5, 6.9, 7.35, 7.9, 8.1, 8.4, 8.55, 8.55,
              8.6, 9.1, 9.3, 10.4, 10.5, 10.6, 11.7, 11.8, 11.9, 13.0, 13.1, 13.2, 13.7, 13.8,
              14.8, 14.9, 15.0]
    t = [0.030 * r for r in ratios]
    p = Planner(replace(CALM, lookup_warmup=warm), clock=lambda: 0.0)
    p.begin("copy this list")
    for _ in range(3):  # the reply's first tokens, before the lookup's guesses come right
        assert p.next_plan(("ngram",)).size == 0
        p.observe(StepEvent(0, 0, 0.0, t[0], "none", committed=1))
    ngram(p).estimate.streak = LONG_STREAK
    tokens = seconds = 0.0
    sizes = []
    for _ in range(40):  # every lookup token right (plain steps' guesses too)
        n = p.next_plan(("ngram",)).size
        sizes.append(n)
        if n == 0:
            ngram(p).estimate.streak += 1
        p.observe(StepEvent(n, n, 0.0002 if n else 0.0, t[n], "ngram" if n else "none",
                            committed=n + 1))
        tokens, seconds = tokens + n + 1, seconds + t[n]
    speed = tokens / seconds * t[0]  # × plain
    if warm == 3:
        assert sizes[:2] == [3, 3] and max(sizes) == 31 and speed > 1.8
    else:
        assert sizes[:2] == [1, 1] and max(sizes) <= 1 and speed < 1.05


def test_a_lookup_check_that_departed_is_timed_again_only_after_as_long_a_run() -> None:
    """Nothing calibrated, the kinked CPU curve (8 rows 6.5× one): a summary's lookups keep a
    few tokens and depart (a phrase quoted, then words of its own). Its first 8-row timing
    check kept 5 of 7; a second, the same size, would cost ~2 plain steps again on the same
    phrases, so it waits until the lookup's own steps have kept 7 in a row — which a copy that
    follows does at once."""
    ratios = [1.0, 2.07, 2.4, 2.9, 3.6, 4.05, 4.69, 6.5, 6.9, 7.35, 7.9, 8.1, 8.4, 8.55, 8.55,
              8.6, 9.1, 9.3, 10.4, 10.5, 10.6, 11.7, 11.8, 11.9, 13.0, 13.1, 13.2, 13.7, 13.8,
              14.8, 14.9, 15.0]
    t = [0.030 * r for r in ratios]
    p = Planner(CALM, clock=lambda: 0.0)
    p.begin("summarise this")
    for _ in range(3):
        p.next_plan(("ngram",))
        p.observe(StepEvent(0, 0, 0.0, t[0], "none", committed=1))

    def run(steps: int, first: list[int], then: list[int]) -> list[tuple[int, bool]]:
        """Lookup steps that keep at most first[k], then then[k % len(then)] tokens: (size,
        timed) of each step."""
        out, k = [], 0
        for _ in range(steps):
            ngram(p).estimate.streak = max(ngram(p).estimate.streak, LONG_STREAK)  # right between steps too
            plan = p.next_plan(("ngram",))
            n = plan.size
            out.append((n, "timing a longer check" in plan.reason))
            most = first[k] if k < len(first) else then[(k - len(first)) % len(then)]
            kept = min(n, most) if n else 0
            k += 1 if n else 0
            p.observe(StepEvent(n, kept, 0.0002 if n else 0.0, t[n], "ngram" if n else "none",
                                committed=kept + 1))
        return out

    summary = run(40, [3, 3, 5], [2, 3])  # after the warm-up, never 7 in a row of its own
    first = [i for i, (n, timed) in enumerate(summary) if timed and n >= 7]
    assert len(first) == 1, [x for x in summary if x[0]]  # timed once, not on the same phrases
    copy = run(60, [], [99])  # then a passage it copies whole
    assert any(timed and n >= 7 for n, timed in copy), copy
    assert max(n for n, _ in copy) >= 15


@pytest.mark.parametrize(("curve", "most"), [("steep", 1), ("flat", 30)])
def test_a_check_size_timed_once_is_not_tried_again_where_its_first_time_prices_it_out(
        curve: str, most: int) -> None:
    """1-4 rows calibrated; a lookup that keeps all or 3 of its guesses; each size's first
    decode 1.15× a later one. On the steep CPU curve (8 rows 6.5× one) the 8-row check timed
    once cost 7.5 T(1): held, not counted, it still prices 8 rows at least 7.5 T(1) / 1.15, so
    neither a plan nor a second timing try chooses it again on the line through 1-4 rows
    (which says ~4.5). On a nearly flat curve the same bound prices nothing out."""
    ratios = [1.0, 2.07, 2.4, 2.9, 3.6, 4.05, 4.69, 6.5, 6.9, 7.35, 7.9, 8.1, 8.4, 8.55, 8.55,
              8.6, 9.1, 9.3, 10.4, 10.5, 10.6, 11.7, 11.8, 11.9, 13.0, 13.1, 13.2, 13.7, 13.8,
              14.8, 14.9, 15.0]
    t = [0.030 * (r if curve == "steep" else 1 + 0.02 * i) for i, r in enumerate(ratios)]
    p = planner(CostCurve(0.025, tuple(t[:4])), 0.85, replace(CALM, lookup_depth=31),
                ngram_alpha=0.9)
    seen, sizes = set(), []
    for i in range(30):
        ngram(p).estimate.streak = max(ngram(p).estimate.streak, LONG_STREAK)
        n = p.next_plan(("ngram",)).size
        sizes.append(n)
        kept = min(n, 3) if i % 2 else n
        first = n not in seen
        seen.add(n)
        p.observe(StepEvent(n, kept, 0.0002 if n else 0.0, t[n] * (1.15 if first else 1.0),
                            "ngram" if n else "none", committed=kept + 1))
    assert 1 <= sizes.count(7) <= most, sizes


@pytest.mark.parametrize(("streak", "longest"), [(2, 4), (4, 8), (8, 16), (16, 31)])
def test_a_lookup_checks_at_most_twice_the_run_it_is_in(streak: int, longest: int) -> None:
    """Estimates carried from copies (α 0.98) on a flattening curve would check 32 rows at
    once; a run of ``streak`` right guesses earns a chain of at most twice that."""
    p = planner(CPU32, 0.85, replace(CALM, lookup_depth=31), ngram_alpha=0.98)
    ngram(p).estimate.streak = streak
    plan = p.next_plan(("ngram",))
    assert plan.drafter == "ngram"
    assert plan.size <= longest
    assert plan.size > longest // 2  # (the longest allowed is what pays here)


def test_a_prediction_the_reply_follows_is_learnt_from_its_guesses() -> None:
    """On a steep CPU curve the prediction's prior does not pay, so it would never be tried;
    its free guesses, scored on plain steps, show the reply following it and bring it in."""
    p = planner(CPU32, 0.85)
    first = p.next_plan(("prediction",))
    assert first.drafter == "none"  # the prior alone: plain (the control)
    t1 = CPU32.verify_s[0]
    chosen = []
    for i in range(12):
        plan = first if i == 0 else p.next_plan(("prediction",))
        chosen.append(plan.drafter)
        if plan.drafter != "none":
            break
        p.observe(StepEvent(0, 0, 0.0, t1, "none", committed=1))
        p.score_guesses([i], "none", {"prediction": lambda k, i=i: list(range(i + 1, i + 1 + k))})
    assert chosen[-1] == "prediction" and len(chosen) <= 8, chosen


def test_a_prediction_the_reply_leaves_is_not_brought_in_by_its_guesses() -> None:
    p = planner(CPU32, 0.85)
    t1 = CPU32.verify_s[0]
    for i in range(12):
        assert p.next_plan(("prediction",)).drafter == "none"
        p.observe(StepEvent(0, 0, 0.0, t1, "none", committed=1))
        p.score_guesses([i], "none", {"prediction": lambda k: [10_000] * k})
