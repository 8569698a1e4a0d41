"""A free drafter's guesses, scored on steps that did not run it (engine.policy.guesses).

- The book: a guess is resolved over as many steps as its tokens take, and a step of the
  guessing drafter itself drops it.
- The claim the planner relies on: at T > 0 the scores of a guess against plainly sampled
  tokens have the distribution of that drafter's own steps under the verification rule. χ²
  with an exact quantile at 10⁵ draws per side, against the exact probabilities; controls that
  score against the target's argmax, or one token early, fail the same test.
- The decoder and the planner: on plain steps the n-gram model learns from guesses alone, high
  where the target repeats the prompt and low where it does not; and a planner that sees its
  lookups come true turns to n-gram chains within a few steps.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import cast

import numpy as np
import pytest

from specchat.bench.chi2 import chi_square, critical_value
from specchat.devtools.scripted import ScriptedContext
from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import Plan, plain
from specchat.engine.decode.sampling import SamplerSettings, distribution
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.verify import one_hot, verify_tree
from specchat.engine.llama.context import LlamaContext
from specchat.engine.policy.auto_gamma import AutoGammaSeed, AutoGammaSettings
from specchat.engine.policy.costs import CostCurve
from specchat.engine.policy.guesses import GuessBook
from specchat.engine.policy.lookup_estimate import COLD, HOT, HOT_STREAK, LONG, LookupEstimate
from specchat.engine.policy.planner import Planner
from specchat.engine.policy.planner_banded import BandedLookup
from specchat.engine.policy.planner_settings import PlannerSettings


def ngram(p: Planner) -> BandedLookup:
    """The n-gram lookup's record in planner ``p`` (policy.planner_arms)."""
    return p.records["ngram"]

N = 100_000
V = 5
T1 = SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
QWEN_CPU = CostCurve(0.025, tuple(x / 1000 for x in (43, 55, 67, 95, 104, 119, 150, 188)))
# Qwen 1.5B's verify curve with logits on every row, measured on 2 CPU cores: a chain of
# n-gram tokens pays only when nearly all of them are kept (α ≳ 0.9 at γ 3).
STEEP = CostCurve(0.025, tuple(x / 1000 for x in (37, 72, 92, 109, 138, 162, 200, 259)))
CALM = PlannerSettings(AutoGammaSettings(explore=False, early_stop=False, warmup=(1, 1)))


def test_a_guess_is_scored_over_the_steps_that_commit_its_tokens() -> None:
    book = GuessBook()
    book.offer("ngram", [4, 5, 6])
    # One plain step: depth 1 decided (kept), reported now; the guess stays open.
    assert book.resolve([4], "none") == {"ngram": [(False, 0, [1.0])]}
    assert book.open("ngram") == 1
    book.offer("ngram", [5, 7])  # the next step's guess, open alongside
    assert book.resolve([5], "none") == {"ngram": [(False, 1, [1.0]), (False, 0, [1.0])]}
    assert book.open("ngram") == 2
    assert book.resolve([6, 9], "model") == {"ngram": [(False, 2, [1.0]),
                                                        (False, 1, [0.0])]}
    assert book.open("ngram") == 0
    book.offer("ngram", [4], tag=True)  # made after a right guess: its outcome says so
    assert book.resolve([3], "none") == {"ngram": [(True, 0, [0.0])]}
    assert book.last_hit["ngram"] is False
    book.offer("ngram", [])  # no match: nothing to score
    assert book.resolve([3], "none") == {}
    assert book.open("ngram") == 0


def test_a_long_guess_that_comes_true_speaks_at_every_step() -> None:
    """Its depths are counted as they are decided: held back until the whole guess was, a copy's
    right guesses of 31 tokens would say nothing for 31 steps while every miss spoke at once."""
    book = GuessBook()
    book.offer("ngram", list(range(31)))
    for t in range(30):
        assert book.resolve([t], "none") == {"ngram": [(False, t, [1.0])]}
    assert book.open("ngram") == 1
    assert book.resolve([30, 99], "none") == {"ngram": [(False, 30, [1.0])]}
    assert book.open("ngram") == 0


def test_the_guessing_drafters_own_step_drops_the_guess_it_made() -> None:
    book = GuessBook()
    book.offer("ngram", [4, 5, 6])
    book.resolve([4], "none")
    book.offer("ngram", [5, 6])  # made where the n-gram step below starts: the same proposal
    # The step's own outcome is counted already; the older guess is still scored.
    assert book.resolve([5, 6, 1], "ngram") == {"ngram": [(False, 1, [1.0, 1.0])]}
    assert book.open("ngram") == 0
    book.offer("ngram", [])  # a lookup without a match still holds its place
    book.offer("ngram", [4, 5])
    book.clear()
    assert book.open("ngram") == 0


# ------------------------------------------------------------------ the scores' distribution

def markov(seed: int) -> list:
    rng = np.random.default_rng(seed)
    table = (rng.normal(size=(V, V)) * 1.2).astype(np.float32)
    return [distribution(table[i], T1) for i in range(V)]


def exact(p: list, last: int, guess: Sequence[int]) -> dict[int, float]:
    """P(the first miss is at depth k) for k = 0..len(guess)−1, and P(all kept) at len(guess)."""
    out, reach, prev = {}, 1.0, last
    for k, d in enumerate(guess):
        keep = p[prev].prob(d)
        out[k] = reach * (1 - keep)
        reach *= keep
        prev = d
    out[len(guess)] = reach
    return out


def plain_samples(p: list, last: int, n: int, depth: int, rng: np.random.Generator
                  ) -> np.ndarray:
    """``n`` plain continuations of ``depth`` tokens after ``last``, sampled from p."""
    out = np.empty((n, depth), dtype=np.int64)
    prev = np.full(n, last)
    for j in range(depth):
        u = rng.random(n)
        cum = np.stack([np.cumsum(p[a].probs) for a in range(V)])
        ids = np.stack([p[a].ids for a in range(V)])
        k = (u[:, None] > cum[prev]).sum(axis=1)
        out[:, j] = ids[prev, np.minimum(k, V - 1)]
        prev = out[:, j]
    return out


def scored(samples: np.ndarray, guess: Sequence[int]) -> Counter[int]:
    """Where each sample's score of ``guess`` stopped (a step per token, as plain steps go)."""
    counts: Counter[int] = Counter()
    book = GuessBook()
    for row in samples.tolist():
        book.offer("ngram", guess)
        outcome: list[float] = []
        for t in row:
            for _, start, part in book.resolve([t], "none").get("ngram", ()):
                assert start == len(outcome)
                outcome += part
            if book.open("ngram") == 0:
                break
        counts[int(sum(outcome))] += 1
    return counts


@pytest.mark.parametrize("seed", [3, 11])
def test_guess_scores_and_the_rule_give_the_same_outcomes_at_t1(seed: int) -> None:
    p = markov(seed)
    last = 0
    # A guess of three tokens, each likely but not certain under the target.
    guess, prev = [], last
    for _ in range(3):
        d = int(p[prev].ids[np.argsort(p[prev].probs)[-2]])  # the second most likely token
        guess.append(d)
        prev = d
    probs = exact(p, last, guess)
    rng = np.random.default_rng(seed)
    shadow = scored(plain_samples(p, last, N, len(guess), rng), guess)
    rows = [p[last], *(p[d] for d in guess)]
    q = [one_hot(d) for d in guess]
    rule = Counter(verify_tree(rows, guess, (-1, 0, 1), q, rng).accepted for _ in range(N))
    crit = critical_value(len(probs) - 1)
    assert chi_square(shadow, probs).statistic <= crit
    assert chi_square(rule, probs).statistic <= crit


def test_scoring_against_the_argmax_or_a_token_early_fails() -> None:
    p = markov(3)
    last = 0
    guess = [int(p[last].ids[np.argsort(p[last].probs)[-2]])]
    guess.append(int(p[guess[0]].ids[np.argsort(p[guess[0]].probs)[-1]]))
    probs = exact(p, last, guess)
    rng = np.random.default_rng(5)
    samples = plain_samples(p, last, N, len(guess), rng)
    crit = critical_value(len(probs) - 1)
    # Wrong 1: "kept" means the target's most likely token (greedy thinking at T > 0).
    top = np.array([p[a].top for a in range(V)])
    argmax_rows = np.stack([np.full(N, top[last]), top[samples[:, 0]]], axis=1)
    assert chi_square(scored(argmax_rows, guess), probs).statistic > crit
    # Wrong 2: resolved against the step's input token and onward (one token early).
    early = np.concatenate([np.full((N, 1), last), samples[:, :1]], axis=1)
    assert chi_square(scored(early, guess), probs).statistic > crit


# ---------------------------------------------------------------- the decoder and the planner

class PlainPlanner(Planner):
    """A planner whose every step is plain: whatever it learns of the n-gram lookup comes
    from the lookup's guesses."""

    def next_plan(self, available: tuple[str, ...]) -> Plan:
        return self._chosen(plain("plain: test"), scored=False)


def cycle_target(shift: int = 1) -> LlamaContext:
    """Greedy: after token t comes (t + shift) mod V, whatever the position."""
    table = np.zeros((V, V), dtype=np.float32)
    for t in range(V):
        table[t, (t + shift) % V] = 5.0
    return cast(LlamaContext, ScriptedContext(table, stride=0))


def planner(cls: type[Planner] = Planner) -> Planner:
    return cls(CALM, AutoGammaSeed(QWEN_CPU, 0.85), clock=lambda: 0.0)


GREEDY = SamplerSettings(temperature=0, max_tokens=60)


def test_plain_steps_teach_the_ngram_model_through_its_guesses() -> None:
    prompt = [0, 1, 2, 3, 4, 0, 1]  # the target continues the cycle: the lookups come true
    p = planner(PlainPlanner)
    run = run_to_end(SpeculativeDecoder(cycle_target(), policy=p, drafters=["ngram"]), prompt,
                     GREEDY, threading.Event())
    assert all(s.gamma == 0 for s in run.steps)
    assert ngram(p).alpha.steps >= 5
    assert ngram(p).alpha.alpha() > 0.9
    # A target that samples uniformly: a guessed token is kept one time in V.
    p = planner(PlainPlanner)
    uniform = cast(LlamaContext, ScriptedContext(np.zeros((V, V), dtype=np.float32)))
    run_to_end(SpeculativeDecoder(uniform, policy=p, drafters=["ngram"]), prompt,
               T1.with_(max_tokens=300, seed=1), threading.Event())
    assert ngram(p).alpha.steps >= 200
    assert 0.1 < ngram(p).alpha.alpha() < 0.3


def test_a_planner_whose_lookups_come_true_turns_to_ngram_chains() -> None:
    p = Planner(CALM, AutoGammaSeed(STEEP, 0.85), clock=lambda: 0.0)
    p.begin("hello")
    seq = [0, 1, 2, 3, 4] * 4
    chosen = None
    for i in range(40):
        plan = p.next_plan(("model", "ngram"))
        if plan.reason == f"ngram {plan.size}":  # chosen on its score, not a probe
            chosen = i
            break
        n = plan.size if plan.drafter == "ngram" else 0  # a probe: its drafts come true
        p.observe(StepEvent(n, n, 0.0001 * n, 0.043 if n == 0 else 0.072, plan.drafter
                            if n else "none", committed=n + 1))
        new = [(seq[-1] + 1 + j) % V for j in range(n + 1)]
        seq.extend(new)
        p.score_guesses(new, plan.drafter if n else "none",
                        {"ngram": lambda k: [(seq[-1] + 1 + j) % V for j in range(k)]})
    assert chosen is not None and chosen <= 16, chosen
    assert plan.size >= 2


@pytest.mark.parametrize("detect", [True, False])
def test_a_stale_high_lookup_estimate_falls_within_a_few_misses(detect: bool) -> None:
    settings = PlannerSettings(AutoGammaSettings(explore=False, early_stop=False,
                                                 warmup=(1, 1), detect_changes=detect))
    p = Planner(settings, AutoGammaSeed(QWEN_CPU, 0.85), clock=lambda: 0.0)
    p.begin("repeat this passage")
    hit, miss = (StepEvent(6, 6, 0.0006, 0.15, "ngram", committed=7),
                 StepEvent(6, 0, 0.0006, 0.15, "ngram", committed=1))
    for _ in range(60):  # a copy: every lookup right
        p.observe(hit)
    # (a copy well under way: both learn)
    hot, long = ngram(p).estimate.models[HOT], ngram(p).estimate.models[LONG]
    assert ngram(p).hot and hot.alpha() > 0.9 and long.alpha() > 0.9
    for _ in range(6):  # prose now: a lucky 6-token lookup, then the next one after it wrong
        p.observe(miss)
        p.observe(hit)
    if detect:  # (the long streak's estimate shrinks toward the repeated passage's)
        assert hot.alpha() < 0.8 and long.alpha() < 0.85, (hot.alpha(), long.alpha())
    else:  # the control: the slow estimate alone still believes in the copy
        assert hot.alpha() > 0.93 and long.alpha() > 0.93, (hot.alpha(), long.alpha())


def test_a_new_reply_inherits_little_of_what_the_lookup_did_before() -> None:
    p = Planner(CALM, AutoGammaSeed(STEEP, 0.85), clock=lambda: 0.0)
    p.begin("repeat this passage")
    for _ in range(60):  # a copy: every lookup right
        p.observe(StepEvent(6, 6, 0.0006, 0.15, "ngram", committed=7))
    hot = ngram(p).estimate.models[LONG]
    high = hot.alpha()
    p.begin("write a poem")  # the next reply
    assert not ngram(p).hot
    assert hot.slow.reached[0] <= 4.0 + 1e-9 and 0.5 < hot.alpha() < high
    assert p.next_plan(("model", "ngram")).drafter == "none"  # not on the old estimate alone


# Qwen 1.5B's verify curve on a slower 2-core box: flatter, a 4-row check 2.35× one row.
FLATTER = CostCurve(0.033, tuple(x / 1000 for x in (93, 138, 177, 219, 259, 293, 323, 351)))


@pytest.mark.parametrize("streak", [0, HOT_STREAK, 4])
def test_a_reply_after_code_edits_checks_lookups_on_their_estimates_only_in_a_long_run(
        streak: int) -> None:
    """Code edits: after each edit the copy resumes, so every estimate learns a high α. The
    next reply may be prose, where a lookup two right in a row is a common phrase: outside a
    long run it does not check on the edits' estimates (warm, a prose reply after a code edit
    lost 2.6 % to 3-token checks that kept nothing); inside one (a copy in any reply) it
    does."""
    p = Planner(CALM, AutoGammaSeed(FLATTER, 0.85), clock=lambda: 0.0)
    p.begin("rename x to y in this function")
    for _ in range(10):  # an edit, the copy resuming, then going on
        for n, kept in [(3, 0), (3, 3), (3, 3), *[(6, 6)] * 5]:
            p.observe(StepEvent(n, kept, 0.0001 * n, 0.1, "ngram", committed=kept + 1))
    assert min(ngram(p).estimate.models[b].position_alphas()[0] for b in (COLD, HOT, LONG)) > 0.8
    p.begin("write a poem")
    ngram(p).estimate.streak = streak
    plan = p.next_plan(("ngram",))
    assert (plan.drafter == "ngram") == (streak >= 4), plan


def test_the_lookup_is_judged_apart_after_a_right_and_after_a_wrong_guess() -> None:
    """Guesses right in runs (a summary quoting phrases between words of its own): after a
    right guess the next is likely right, after a wrong one likely wrong. One estimate over all
    positions (≈ 0.5 here) would be wrong in both states."""
    p = planner()
    p.begin("summarize this")
    seq = [0, 1, 2, 3, 4] * 4
    for i in range(96):
        quoting = (i // 12) % 2 == 0
        new = [(seq[-1] + 1) % V]
        seq.extend(new)
        nxt = (seq[-1] + 1) % V
        p.observe(StepEvent(0, 0, 0.0, 0.043, "none", committed=1))
        # The lookup's guess: the true continuation while quoting, else a wrong token.
        first = nxt if quoting else (nxt + 2) % V
        p.score_guesses(new, "none", {"ngram": lambda k, f=first: [f, *(
            (f + 1 + j) % V for j in range(k - 1))]})
    models = ngram(p).estimate.models
    hot, cold = models[HOT].position_alphas()[0], models[COLD].position_alphas()[0]
    assert hot > 0.8 and cold < 0.3, (hot, cold)
    ngram(p).hot = True
    assert p.next_plan(("model", "ngram")).drafter == "ngram"
    ngram(p).hot = False
    assert p.next_plan(("model", "ngram")).drafter == "none"


def test_one_right_guess_is_not_yet_a_repeated_passage() -> None:
    p = planner()
    p.begin("summarize this")
    seq = [0, 1, 2]

    def step() -> None:  # a plain step, then the lookup's guess: right about the next token
        new = [(seq[-1] + 1) % V]
        seq.extend(new)
        p.observe(StepEvent(0, 0, 0.0, 0.043, "none", committed=1))
        p.score_guesses(new, "none", {"ngram": lambda k: [(seq[-1] + 1) % V] * k})

    step()  # offers the first guess
    step()  # that guess came true: one right
    assert not ngram(p).hot
    step()  # two in a row
    assert ngram(p).hot


def test_a_long_run_of_right_guesses_is_judged_apart_from_one_just_begun() -> None:
    """Right after a miss, then two right, the lookup is often wrong again (a summary's quoted
    phrase ends); deep in a copy it is nearly always right. The long streak's estimate learns
    what the deep states saw, the repeated passage's learns both."""
    est = LookupEstimate(16, 0.4, 40.0, 5.0, name="ngram")
    assert est.band == COLD
    for _ in range(20):  # a copy: the lookup's own steps keep all six
        est.step([1.0] * 6)
    assert est.band == LONG
    for _ in range(20):  # quoted phrases ending: wrong after only two right
        est.streak = HOT_STREAK
        est.step([0.0])
    long, hot = est.models[LONG].position_alphas(), est.models[HOT].position_alphas()
    assert long[0] > 0.9 and hot[0] < long[0] - 0.2, (long[0], hot[0])
    est.streak = 10
    est.step([1.0, 1.0, 0.0])  # kept two, then departed: in the passage, no longer deep
    assert est.band == HOT
    est.step([0.0])
    assert est.band == COLD


def test_a_first_token_outside_a_passage_is_judged_on_first_tokens_alone() -> None:
    """A reply that restates its question: the lookup, starting outside a repeated passage, is
    right for eight tokens, then its next three starts miss. Outside a passage what matters is
    how often a first token is right (1 in 4 here); the eight-token run's later tokens, right
    because the first was, must not lift that (pooled over all depths, a cold estimate of 0.82
    checked three tokens at the 21st token of a humanities reply and kept one)."""
    est = LookupEstimate(16, 0.4, 40.0, 5.0, name="ngram")
    est.step([1.0] * 8)  # (a step from the cold band: its outcomes teach that band)
    for _ in range(3):
        est.streak = 0
        est.step([0.0])
    cold = est.models[COLD].position_alphas()
    assert cold[0] < 0.4, cold[:3]
    # Deep in a passage the later tokens still count: the long run's estimate pools them all.
    est.streak = 10
    for _ in range(4):
        est.step([1.0] * 8)
    assert est.models[LONG].position_alphas()[0] > 0.8


def test_a_state_saved_before_the_long_streak_loads() -> None:
    est = LookupEstimate(16, 0.4, 40.0, 5.0, name="ngram")
    for _ in range(10):
        est.step([1.0] * 4)
    old = {k: v for k, v in est.state().items() if k != "ngram_long"}
    again = LookupEstimate(16, 0.4, 40.0, 5.0, name="ngram")
    again.load_state(old)
    assert again.models[LONG].alpha() == pytest.approx(again.models[HOT].alpha())


def test_a_copy_is_drafted_within_a_few_tokens_of_its_guesses_coming_right() -> None:
    """A plain answer is held for some steps without scoring; a lookup whose guesses come right
    ends the hold (a cold copy waited 16 plain steps for its first lookup before)."""
    p = Planner(PlannerSettings(), AutoGammaSeed(STEEP, 0.85), clock=lambda: 0.0)
    p.begin("copy this")
    seq, first = [0], None
    for i in range(40):
        plan = p.next_plan(("ngram", "model"))
        n = plan.size if plan.drafter == "ngram" else 0
        if n and first is None:
            first = i
        p.observe(StepEvent(n, n, 0.0001 * n, STEEP.t_verify(n + 1),
                            plan.drafter if n else "none", committed=n + 1))
        new = [(seq[-1] + 1 + j) % 1000 for j in range(n + 1)]
        seq.extend(new)
        p.score_guesses(new, plan.drafter if n else "none",
                        {"ngram": lambda k: [(seq[-1] + 1 + j) % 1000 for j in range(k)]})
    assert first is not None and first <= 12, first
