"""Auto-γ on synthetic streams: the cost model, the change test, topics, and the controller
replayed over agreement traces drawn with a known α (so the optimum is known analytically)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.stats import expected_tokens
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.policy.acceptance import AcceptanceModel, ConfidenceBins, step_outcomes
from specchat.engine.policy.auto_gamma import AutoGamma, AutoGammaSeed, AutoGammaSettings
from specchat.engine.policy.change_detect import PageHinkley
from specchat.engine.policy.cost_model import OnlineCostModel
from specchat.engine.policy.costs import CostCurve
from specchat.engine.policy.gamma import ConfidenceCutoff, HfHeuristic
from specchat.engine.policy.replay import (
    ReplayCosts,
    TurnTrace,
    VirtualClock,
    clairvoyant_seconds,
    replay_conversation,
    replay_turn,
    segment_oracle,
)
from specchat.engine.policy.topics import FenceTracker, guess_topic

# A CPU-like machine: a draft token costs 30% of a target pass, and each extra verified token
# 25% (seconds).
COSTS = ReplayCosts(0.003, tuple(0.0075 + 0.0025 * n for n in range(1, 13)), 0.0005)
CURVE = CostCurve(COSTS.draft_s, COSTS.verify_s[:11])


def rate(alpha: float, g: int, costs: ReplayCosts = COSTS) -> float:
    """Expected tokens per second of γ = g at acceptance rate α."""
    return expected_tokens(alpha, g) / (g * costs.draft_s + costs.t_verify(g + 1)
                                        + costs.overhead_s)


def optimum(alpha: float, gamma_max: int = 10) -> int:
    return max(range(gamma_max + 1), key=lambda g: rate(alpha, g))


def near_optimal(alpha: float, g: int, slack: float = 0.03) -> bool:
    """γ = g is the optimum or within ``slack`` of its rate (a near tie either way is fine)."""
    return rate(alpha, g) >= (1 - slack) * rate(alpha, optimum(alpha))


def trace(alphas: Sequence[tuple[float, int]], seed: int, request: str = "hello",
          informative: bool = False, pieces: Sequence[str] | None = None) -> TurnTrace:
    """Agreements drawn independently with probability α, in stretches of (α, length)."""
    rng = np.random.default_rng(seed)
    agree = np.concatenate([rng.random(n) < a for a, n in alphas])
    n = len(agree)
    if informative:  # the draft is surer where it is right
        top = np.where(agree, rng.uniform(0.55, 1.0, n), rng.uniform(0.05, 0.6, n))
    else:
        top = np.full(n, 0.5)
    return TurnTrace(request, tuple(bool(a) for a in agree), tuple(float(t) for t in top),
                     (False,) * n, tuple(pieces) if pieces else ("x",) * n, n + 1)


def auto(settings: AutoGammaSettings | None = None, seed: AutoGammaSeed | None = None
         ) -> Callable[[Callable[[], float]], AutoGamma]:
    return lambda clock: AutoGamma(settings or AutoGammaSettings(), seed, clock)


# ------------------------------------------------------------------------------ cost model


def test_cost_model_fits_the_line_through_noisy_steps() -> None:
    rng = np.random.default_rng(0)
    m = OnlineCostModel()
    for _ in range(300):
        n = int(rng.integers(1, 9))
        m.add_verify(n, (0.010 + 0.003 * n) * rng.uniform(0.95, 1.05))
        m.add_draft(n - 1, 0.004 * (n - 1) * rng.uniform(0.95, 1.05))
    a, b = m.line()
    assert a == pytest.approx(0.010, rel=0.08) and b == pytest.approx(0.003, rel=0.08)
    assert m.t_draft == pytest.approx(0.004, rel=0.03)


def test_cost_model_keeps_the_calibrated_shape_when_the_batch_never_varies() -> None:
    m = OnlineCostModel()
    m.seed(CostCurve(0.002, tuple(0.010 + 0.002 * n for n in range(1, 9))))
    for _ in range(200):  # the machine got twice as slow; only batches of 4 are seen
        m.add_verify(4, 2 * (0.010 + 0.002 * 4))
    a, b = m.line()
    assert a + 4 * b == pytest.approx(0.036, rel=0.02)  # the level follows the data
    assert b / a == pytest.approx(0.2, rel=0.1)  # the slope keeps the calibrated proportion


def test_cost_model_clips_a_burst_of_load() -> None:
    m = OnlineCostModel()
    for _ in range(20):
        m.add_verify(2, 0.010)
    m.add_verify(2, 1.0)  # one step 100× slower
    assert m.t_verify(2) < 0.012


@pytest.mark.parametrize(("first", "second", "counted"),
                         [(0.200, 0.100, 0.100),   # the first decode of a shape, dear
                          (0.100, 0.150, 0.100)])  # the second met a burst of other work
def test_a_sizes_first_counted_time_is_the_lesser_of_its_first_two(
        first: float, second: float, counted: float) -> None:
    """With ``skip_first`` a size's first time is held back, and its second counts as the
    lesser of the two: one slow step must not price every check the line through it reaches."""
    m = OnlineCostModel(skip_first=True)
    m.add_verify(1, 0.030)
    m.add_verify(1, 0.030)
    m.add_verify(4, first)
    assert m.table.weight[3] == 0.0  # held back
    m.add_verify(4, second)
    assert m.verify_table()[3] == pytest.approx(counted, rel=0.02)
    m.add_verify(4, 0.110)  # later times count as they come
    assert counted < m.verify_table()[3] < 0.110


def _steep() -> OnlineCostModel:
    """A cold process on a steep CPU curve: 1, 2 and 4 rows timed twice each (the first decode
    of each 1.2× its second), so f is learnt as 1.2; 8 rows (6.5× one) never timed."""
    m = OnlineCostModel(skip_first=True)
    for n, t in ((1, 0.030), (2, 0.052), (4, 0.080)):
        m.add_verify(n, 1.2 * t)
        m.add_verify(n, t)
    return m


def test_a_size_timed_once_is_priced_at_least_its_held_first_time_over_f() -> None:
    """A size's first time is held, not counted; until its second it still says the size costs
    at least H / f, f the most a first decode was seen to cost over a second (here 1.2). The
    line through 1, 2 and 4 rows prices 8 rows at about 5× one row, far below the 7.8× its first
    check cost; sizes above it are priced at least as high, sizes below as before."""
    m = _steep()
    assert m.first.factor == pytest.approx(1.2)
    before = m.verify_table()
    assert before[7] < 0.16  # the guess
    m.add_verify(8, 1.2 * 0.195)  # held: nothing counted, the table's version unchanged
    assert m.table.weight[7] == 0.0
    after = m.verify_table()  # (the cache keys on the held bounds too)
    assert after[7] == pytest.approx(0.195)
    assert all(t >= 0.195 - 1e-12 for t in after[7:])
    assert after[:7] == before[:7]
    m.add_verify(8, 0.195)  # its second: counted, and the bound goes
    assert not m.first.bounds() and m.first.factor == pytest.approx(1.2)
    assert m.verify_table()[7] == pytest.approx(0.195, rel=0.03)  # (what it counted: learnt)


def test_f_is_the_largest_first_over_second_seen_and_the_documented_twice_before_any() -> None:
    m = OnlineCostModel(skip_first=True)
    m.seed(CostCurve(0.010, tuple(0.030 + 0.010 * n for n in range(8))))  # 8 rows: 0.100
    m.add_verify(8, 0.400)  # a first decode, before any size was timed twice
    assert m.first.factor == 2.0  # the prior: "up to twice" (docs/performance.md)
    assert m.verify_table()[7] == pytest.approx(0.200)
    m.add_verify(1, 0.045)
    m.add_verify(1, 0.030)  # 1.5
    m.add_verify(2, 0.040)
    m.add_verify(2, 0.040)  # 1.0: a smaller ratio does not lower f
    assert m.first.factor == pytest.approx(1.5)
    assert m.verify_table()[7] == pytest.approx(0.400 / 1.5)
    m.add_verify(3, 0.050)
    m.add_verify(3, 0.080)  # the second met a burst: first / second below 1
    assert m.first.factor == pytest.approx(1.5)
    fresh = OnlineCostModel(skip_first=True)
    fresh.add_verify(4, 0.050)
    fresh.add_verify(4, 0.100)
    assert fresh.first.factor == 1.0  # at least 1: a first decode never costs less


def test_a_held_bound_lapses_after_the_cost_models_half_life() -> None:
    """One slow first decode (other work ran during it) must not price its size out for the
    rest of a long process: after a half-life of counted timings the bound lapses, and the
    size is priced on the table's estimate again (and so chosen, and timed, where it pays)."""
    m = _steep()
    m.add_verify(8, 1.0)
    assert m.verify_table()[7] == pytest.approx(1.0 / 1.2)
    for _ in range(47):
        m.add_verify(1, 0.030)
    assert m.verify_table()[7] == pytest.approx(1.0 / 1.2)
    m.add_verify(1, 0.030)
    assert m.verify_table()[7] < 0.2


def test_held_first_times_and_f_are_not_saved() -> None:
    """They are this process's first decodes: the state (and a model loaded from it) is the
    same as before they existed, and a new process learns its own."""
    m = _steep()
    m.add_verify(8, 0.300)
    state = m.state()
    assert json.loads(json.dumps(state)) == state
    again = OnlineCostModel(skip_first=True)
    again.load_state(state)
    assert not again.first.held and again.first.most is None
    assert again.verify_table()[7] < m.verify_table()[7]


def test_a_size_not_used_lately_keeps_its_relative_cost() -> None:
    """A CPU-like curve (16 rows 9× one row, the line through 1-8 rows says ~13×): after a copy
    timed its 16-row checks and 400 prose steps used 1 and 4 rows only, the 16-row estimate
    still follows what 16 rows cost, scaled to the level now (a machine 10 % slower), not the
    line through the sizes in use."""
    curve = {1: 0.032, 4: 0.100, 8: 0.215, 16: 0.294}
    m = OnlineCostModel()
    for _ in range(6):
        for n, t in curve.items():
            m.add_verify(n, t)
    for i in range(400):
        n = 4 if i % 3 == 0 else 1
        m.add_verify(n, curve[n] * 1.1)
    assert m.table.weight[15] < 0.05  # the level forgot it...
    assert m.t_verify(16) == pytest.approx(0.294 * 1.1, rel=0.05)  # ...its shape did not
    a, b = m.line()
    assert a + 16 * b > 1.25 * m.t_verify(16)  # what the line alone would have said


def test_a_verify_table_saved_before_sizes_kept_their_own_means_loads() -> None:
    m = OnlineCostModel()
    for _ in range(5):
        m.add_verify(1, 0.030)
        m.add_verify(16, 0.270)
    old = m.state()
    table = dict(old["table"])  # type: ignore[call-overload]
    del table["learnt"], table["count"]
    again = OnlineCostModel()
    again.load_state({**old, "table": table})
    assert again.table.learnt[15] == pytest.approx(9.0)  # in T(1)s
    assert again.t_verify(16) == pytest.approx(m.t_verify(16))
    rt = OnlineCostModel()
    rt.load_state(m.state())
    assert rt.table.state() == m.table.state()


# ---------------------------------------------------------------------- acceptance, change


def test_step_outcomes_count_verified_positions() -> None:
    assert step_outcomes(StepEvent(4, 2, 0, 0)) == [1.0, 1.0, 0.0]
    assert step_outcomes(StepEvent(3, 3, 0, 0)) == [1.0, 1.0, 1.0]
    assert step_outcomes(StepEvent(3, 1, 0, 0, overlap=(0.9, 0.2))) == [0.9, 0.2]


def test_acceptance_model_per_position_and_two_rates() -> None:
    m = AcceptanceModel(6, prior_alpha=0.5)
    for _ in range(200):  # bursty: the first token is hard, later ones follow
        m.observe([0.0] if m.steps % 2 else [1.0, 1.0, 1.0, 0.0])
    alphas = m.position_alphas()
    assert alphas[0] < 0.6 < alphas[1]
    for _ in range(15):
        m.observe([0.0])
    assert m.fast_alpha() < 0.35 < m.alpha()  # the fast one has (nearly) forgotten
    m.adopt_fast()
    assert m.alpha() < 0.35


def test_page_hinkley_detects_a_drop_within_a_bounded_number_of_events() -> None:
    delays = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        ph = PageHinkley()
        ph.reset(0.85, weight=10)
        assert not any(ph.update(float(x)) for x in rng.random(300) < 0.85), seed
        after = next(i for i, x in enumerate(rng.random(500) < 0.35) if ph.update(float(x)))
        assert ph.direction == -1
        delays.append(after)
    assert max(delays) <= 40 and float(np.median(delays)) <= 25


def test_page_hinkley_detects_a_rise_and_rarely_cries_wolf() -> None:
    rng = np.random.default_rng(1)
    ph = PageHinkley()
    false_alarms = sum(ph.update(float(x)) for x in rng.random(5000) < 0.5)
    assert false_alarms <= 2
    # against a reference (what a controller believes), a rise shows at once
    assert next(i for i, x in enumerate(rng.random(500) < 0.9) if ph.update(float(x), 0.3)) <= 20
    assert ph.direction == 1


def test_confidence_bins_learn_how_confidence_predicts_acceptance() -> None:
    bins = ConfidenceBins()
    rng = np.random.default_rng(0)
    for _ in range(2000):
        top = float(rng.random())
        bins.add(top, float(rng.random() < top))  # a calibrated draft
    assert bins.p_keep(0.95, 0.5) > 0.85 and bins.p_keep(0.1, 0.5) < 0.25


# -------------------------------------------------------------------------------- topics


@pytest.mark.parametrize(("request_text", "topic"), [
    ("Write a C++ program to find the nth Fibonacci number.", "code"),
    ("Develop a Python program that reads all the text files", "code"),
    ("Translate German to English: Pfandhäuser boomen", "translation"),
    ("Summarize: Hillary Clinton's security detail arrived", "summary"),
    ("Ali ordered 850 kilos of coal in 50 kg bags at $18 each. How much does it cost?", "math"),
    ("Compose an engaging travel blog post about Hawaii.", "chat"),
])
def test_guess_topic(request_text: str, topic: str) -> None:
    assert guess_topic(request_text) == topic


def test_fence_tracker_follows_fences_split_across_steps() -> None:
    f = FenceTracker()
    seen = []
    for piece in ["Here:\n`", "``py", "thon\nx = 1\n", "``", "`\nDone", " ````\n", "`"]:
        if f.feed(piece):
            seen.append(f.inside)
    assert seen == [True, False, True]


# ------------------------------------------------------------------------- the controller


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.8, 0.92])
@pytest.mark.parametrize("early_stop", [False, True], ids=["cap", "early-stop"])
def test_stationary_alpha_converges_to_the_analytic_optimum(alpha: float,
                                                            early_stop: bool) -> None:
    t = trace([(alpha, 2500)], seed=3)
    s = AutoGammaSettings(early_stop=early_stop)
    run = replay_conversation(auto(s), [t], COSTS)[0]
    # γ* ends at the optimum or at a γ whose rate is within 5% of it (a near tie)
    assert near_optimal(alpha, run.planned[-1], slack=0.05)
    assert sum(near_optimal(alpha, p, slack=0.05) for p in run.planned[-300:]) >= 270
    best = max(replay_turn(FixedGamma(g), t, COSTS).tok_s for g in range(11))
    assert run.tok_s >= 0.97 * best


def test_without_a_calibration_it_warms_up_then_converges() -> None:
    t = trace([(0.8, 1500)], seed=4)
    run = replay_conversation(auto(AutoGammaSettings(early_stop=False)), [t], COSTS)[0]
    assert run.labels[0] == "auto · warm-up" and run.drafted[:4] == [2, 5, 1, 3]
    assert near_optimal(0.8, run.planned[-1])


def test_a_step_change_in_alpha_re_converges() -> None:
    t = trace([(0.92, 600), (0.35, 600)], seed=5)
    s = AutoGammaSettings(early_stop=False, topics=False)
    policy = AutoGamma(s, AutoGammaSeed(CURVE), VirtualClock())
    run = replay_turn(policy, t, COSTS)
    switch = next(i for i, p in enumerate(np.cumsum([a + 1 for a in run.accepted])) if p >= 600)
    after = run.planned[switch:]
    assert near_optimal(0.92, run.planned[switch - 1])
    settled = next(i for i in range(len(after)) if all(p == optimum(0.35) for p in after[i:]))
    assert settled <= 20 and policy.changes >= 1
    # without the change test the slow estimate needs longer
    slow = replay_turn(AutoGamma(AutoGammaSettings(early_stop=False, topics=False,
                                                   detect_changes=False),
                                 AutoGammaSeed(CURVE), VirtualClock()), t, COSTS)
    after_slow = slow.planned[switch:]
    settled_slow = next(i for i in range(len(after_slow))
                        if all(p == optimum(0.35) for p in after_slow[i:]))
    assert settled < settled_slow


def test_returning_to_a_topic_restores_its_gamma_at_once() -> None:
    code, chat = "Write a Python function that sorts a list.", "Tell me about your day."
    turns = [trace([(0.93, 400)], 1, code), trace([(0.4, 400)], 2, chat),
             trace([(0.93, 200)], 3, code)]
    s = AutoGammaSettings(early_stop=False)
    runs = replay_conversation(auto(s, AutoGammaSeed(CURVE)), turns, COSTS)
    assert runs[2].labels[0] == "auto · code" and runs[1].labels[0] == "auto · chat"
    assert runs[1].planned[-1] <= 1
    assert abs(runs[2].planned[0] - optimum(0.93)) <= 1  # the first step of the return
    blind = replay_conversation(auto(AutoGammaSettings(early_stop=False, topics=False),
                                     AutoGammaSeed(CURVE)), turns, COSTS)
    assert blind[2].planned[0] <= 1  # one shared estimate remembers only the last topic
    assert runs[2].tok_s > blind[2].tok_s


def test_a_new_topic_starts_from_what_was_seen_not_from_the_first_guess() -> None:
    """The "chat" topic exists before the first step; met first after a long code turn, it
    must start from the α seen so far, not from the controller's uninformed start."""
    code, chat = "Write a Python function that sorts a list.", "Tell me about your day."
    turns = [trace([(0.95, 300)], 1, code), trace([(0.95, 60)], 2, chat)]
    runs = replay_conversation(auto(AutoGammaSettings(early_stop=False, explore=False),
                                    AutoGammaSeed(CURVE)), turns, COSTS)
    assert runs[1].labels[0] == "auto · chat"
    assert runs[1].planned[0] >= optimum(0.95) - 2  # not γ 1 while α is 0.95


def test_a_code_fence_switches_to_the_code_topic_and_back() -> None:
    pieces = ["Sure:\n"] + ["w "] * 99 + ["```python\n"] + ["x = 1\n"] * 99 + ["```\n"] + \
        ["w "] * 100
    t = trace([(0.4, 100), (0.95, 100), (0.4, 101)], 6, "Tell me", pieces=pieces)
    policy = AutoGamma(AutoGammaSettings(early_stop=False), AutoGammaSeed(CURVE), VirtualClock())
    run = replay_turn(policy, t, COSTS)
    labels = [lab for i, lab in enumerate(run.labels) if i == 0 or lab != run.labels[i - 1]]
    assert labels == ["auto · chat", "auto · code", "auto · chat"]
    assert policy.topics["code"].model.alpha() > 0.8 > 0.55 > policy.topics["chat"].model.alpha()


def test_plain_decoding_when_drafting_cannot_pay_with_periodic_probes() -> None:
    t = trace([(0.1, 800)], seed=7)
    run = replay_turn(AutoGamma(AutoGammaSettings(early_stop=False), AutoGammaSeed(CURVE),
                                VirtualClock()), t, COSTS)
    late = run.drafted[100:]
    assert sum(d == 0 for d in late) / len(late) > 0.85
    assert any(d > 0 for d in late)  # probes
    assert run.tok_s > 0.97 * replay_turn(FixedGamma(0), t, COSTS).tok_s


def test_early_stop_uses_an_informative_draft_confidence() -> None:
    t = trace([(0.75, 3000)], seed=8, informative=True)
    with_stop = replay_conversation(auto(), [t], COSTS)[0]
    capped = replay_conversation(auto(AutoGammaSettings(early_stop=False)), [t], COSTS)[0]
    best_fixed = max(replay_turn(FixedGamma(g), t, COSTS).tok_s for g in range(11))
    assert with_stop.tok_s > 1.05 * capped.tok_s and with_stop.tok_s > 1.05 * best_fixed
    assert max(with_stop.drafted) > optimum(0.75) + 2  # long drafts where the draft is sure


# ---------------------------------------------------------- baselines, replay yardsticks


def test_hf_heuristic_and_confidence_cutoff() -> None:
    hf = HfHeuristic()
    hf.observe(StepEvent(5, 5, 0, 0))
    assert hf.next_gamma() == 7
    hf.observe(StepEvent(7, 2, 0, 0))
    hf.observe(StepEvent(0, 0, 0, 0, drafter="none"))
    assert hf.next_gamma() == 6
    cut = ConfidenceCutoff(0.6, gamma_max=3)
    assert cut.keep_drafting(1, lambda: 0.7) and not cut.keep_drafting(1, lambda: 0.5)
    assert not cut.keep_drafting(3, lambda: 0.99)


def test_oracles_bound_every_fixed_gamma() -> None:
    turns = [trace([(0.9, 200)], 1), trace([(0.4, 200)], 2)]
    best = segment_oracle(turns, COSTS, range(11))
    assert [g for g, _ in best] == [optimum(0.9), optimum(0.4)] or \
        all(abs(g - optimum(a)) <= 1 for (g, _), a in zip(best, (0.9, 0.4), strict=True))
    oracle_s = sum(r.seconds for _, r in best)
    for g in range(11):
        assert sum(replay_turn(FixedGamma(g), t, COSTS).seconds for t in turns) >= oracle_s
    assert sum(clairvoyant_seconds(t, COSTS, 10) for t in turns) < oracle_s
