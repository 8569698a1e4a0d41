"""Lookahead decoding (``--drafter lookahead``): the pool and the Jacobi window, the window's
rows in the target's verify batch (each sees exactly its column; the tree's rows are untouched;
nothing stays in the cache), greedy output identical to plain, batches that do not fit shrink,
and exactness with power: χ² over 10⁵ transitions at T = 0.9 on the scripted-logits context,
with a control that a wrong rule fails."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import cast

import llama_cpp
import numpy as np
import numpy.typing as npt
import pytest
from test_speculative import EXACT_KV, prompt_of
from test_tree_exactness import scripted_pair, stale_residual, transition_test, transitions

from specchat.engine.decode import verify
from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.registry import DrafterEnv, build
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.drafters._lookahead_pool import JacobiWindow, NgramPool, candidate_tree
from specchat.engine.drafters.lookahead import LookaheadDrafter, LookaheadSettings
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.engine.llama.side_branch import SideBranch
from specchat.engine.policy.planner import Planner
from specchat.errors import SpecchatError
from specchat.paths import AppPaths

GREEDY = SamplerSettings(temperature=0, max_tokens=60)
T09 = SamplerSettings(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)


@pytest.fixture(scope="module")
def target(tiny_target: Path) -> LlamaModel:
    return LlamaModel(tiny_target)


def ctx(model: LlamaModel, n_ctx: int = 512, **settings: object) -> LlamaContext:
    return LlamaContext(model, ContextSettings(n_ctx=n_ctx, n_threads=1, **settings))  # type: ignore[arg-type]


def decoder(tc: LlamaContext, settings: LookaheadSettings | None = None,
            gamma: int = 8) -> tuple[SpeculativeDecoder, LookaheadDrafter]:
    d = LookaheadDrafter(tc, settings or LookaheadSettings(), tc.model.is_eog)
    return SpeculativeDecoder(tc, None, FixedGamma(gamma), [d]), d


# ------------------------------------------------------------------ pool, window, trie


def test_the_pool_keeps_the_most_recent_distinct_ngrams_per_token() -> None:
    pool = NgramPool(cap=2)
    pool.add(5, [1, 2])
    pool.add(5, [3, 4])
    pool.add(5, [1, 2])  # a repeat moves up, not in twice
    assert pool.get(5) == [(1, 2), (3, 4)]
    pool.add(5, [6, 7])
    assert pool.get(5) == [(6, 7), (1, 2)] and pool.get(9) == [] and len(pool) == 2


def test_candidates_merge_into_a_trie_within_the_limits() -> None:
    grams = [(1, 2, 3), (1, 2, 4), (1, 5, 6), (7, 8, 9)]
    tokens, parents = candidate_tree(grams, 10, 3, 8, lambda t: False)
    assert tokens == (1, 2, 3, 4, 5, 6, 7, 8, 9)
    assert parents == (-1, 0, 1, 1, 0, 4, -1, 6, 7)
    # Fewer nodes, a shallower depth, fewer leaves: cut, never refused.
    assert candidate_tree(grams, 4, 3, 8, lambda t: False) == ((1, 2, 3, 4), (-1, 0, 1, 1))
    assert candidate_tree(grams, 10, 1, 8, lambda t: False) == ((1, 7), (-1, -1))
    assert candidate_tree(grams, 10, 3, 1, lambda t: False) == ((1, 2, 3), (-1, 0, 1))
    # Nothing after an end-of-generation token could be kept.
    assert candidate_tree([(1, 0, 3)], 10, 3, 8, lambda t: t == 0) == ((1, 0), (-1, 0))


def test_the_window_lays_out_one_sequence_per_column() -> None:
    win = JacobiWindow(3, 4)
    win.levels = [[90, 11, 12], [20, 21, 22], [30, 31, 32]]
    rows = win.rows(3)
    # Level 0 (column 0's is the root), then levels 1 and 2 of every column.
    assert rows.tokens == (11, 12, 20, 21, 22, 30, 31, 32)
    assert rows.offsets == (1, 2, 1, 2, 3, 2, 3, 4)
    assert rows.seqs == ((1, 2), (2,), (0,), (1,), (2,), (0,), (1,), (2,))
    assert rows.logits == (5, 6, 7)
    assert JacobiWindow.n_rows(3, 4) == len(rows.tokens)
    grams = win.advance(root=7, new=[40, 41, 42])
    assert grams == [(7, 20, 30, 40), (11, 21, 31, 41), (12, 22, 32, 42)]
    assert win.levels == [[20, 21, 22], [30, 31, 32], [40, 41, 42]]


def test_bad_sizes_are_refused_in_one_line() -> None:
    with pytest.raises(SpecchatError, match="at least 3"):
        LookaheadSettings(window=2, ngram=2)
    with pytest.raises(SpecchatError, match="negative"):
        LookaheadSettings(window=-1)


def test_it_is_a_registered_drafter(target: LlamaModel) -> None:
    d = build("lookahead", DrafterEnv(ctx(target)))
    assert isinstance(d, LookaheadDrafter) and d.name == "lookahead"
    assert d.default_plan(0).drafter == "none"
    plan = d.default_plan(5)  # two chains of N − 1 = 2, then one node: 5 nodes in all
    assert plan.drafter == "lookahead" and plan.parents == (-1, 0, -1, 2, -1)


# --------------------------------------------------------------- the batch, on a model


def test_window_rows_see_exactly_their_column_and_leave_nothing(target: LlamaModel) -> None:
    """One batch: a candidate tree plus a 3 × 3 window. Each window row's logits equal a fresh
    prefill of its column's sequence, the tree's rows equal the tree decoded alone, and the
    kept path leaves the cache as a fresh prefill of the committed tokens would."""
    prompt = prompt_of(target)
    head, root = prompt[:-1], prompt[-1]
    win = JacobiWindow(3, 4)
    win.levels = [[0, 11, 12], [20, 21, 22], [30, 31, 32]]
    layout = win.rows(3)
    got: list[npt.NDArray[np.float32]] = []
    side = SideBranch(layout.tokens, layout.offsets, layout.seqs, 3, layout.logits,
                      lambda rows: got.append(rows.copy()))
    shape, tokens = (-1, 0, 0, 1), [root, 5, 6, 7]
    c = ctx(target, **EXACT_KV)
    c.decode(head, logits="none")
    rows = c.decode_tree(shape, range(4), tokens, side).copy()
    alone = ctx(target, **EXACT_KV)
    alone.decode(head, logits="none")
    np.testing.assert_allclose(rows, alone.decode_tree(shape, range(4), tokens), atol=1e-4)
    assert len(got) == 1 and got[0].shape == (3, target.n_vocab)
    for col in range(3):
        column = [root, *win.levels[0][1 : col + 1], win.levels[1][col], win.levels[2][col]]
        fresh = ctx(target, **EXACT_KV)
        np.testing.assert_allclose(got[0][col], fresh.decode([*head, *column])[0], atol=1e-4)
    c.keep_branch(shape, 1, [root, 5])
    assert c.tokens == [*head, root, 5]
    assert all(llama_cpp.llama_memory_seq_pos_max(c.mem, s) == -1 for s in range(1, 16))
    fresh = ctx(target, **EXACT_KV)
    np.testing.assert_allclose(c.decode([9])[0].copy(), fresh.decode([*head, root, 5, 9])[0],
                               atol=1e-4)


@pytest.mark.parametrize("settings", [LookaheadSettings(), LookaheadSettings(4, 4, 4),
                                      LookaheadSettings(0, 3, 2)],
                         ids=["W2 N3 G4", "W4 N4 G4", "no window"])
def test_greedy_lookahead_is_token_identical_to_plain(target: LlamaModel,
                                                      settings: LookaheadSettings) -> None:
    accepted = 0
    for text in ("hello there", "the cat sat", "0123 abc"):
        prompt = prompt_of(target, text)
        plain = run_to_end(PlainDecoder(ctx(target)), prompt, GREEDY)
        dec, d = decoder(ctx(target), settings)
        run = run_to_end(dec, prompt, GREEDY)
        assert run.tokens == plain.tokens, text
        accepted += sum(s.accepted for s in run.steps)
        rows = JacobiWindow.n_rows(settings.window, settings.ngram)
        # Every step carries the window, but a last one planned plain (max_tokens reached).
        assert all(s.batch == 1 + s.gamma + rows for s in run.steps[:-1])
    assert accepted > 20  # the pool's candidates were kept: the test exercised acceptance
    assert settings.window == 0 or d.window_rows > 0


def test_the_cache_holds_only_the_committed_path(target: LlamaModel) -> None:
    tc = ctx(target, **EXACT_KV)
    prompt = prompt_of(target)
    dec, d = decoder(tc, LookaheadSettings(3, 4, 4))
    run = run_to_end(dec, prompt, T09.with_(seed=21, max_tokens=80))
    assert sum(s.accepted for s in run.steps) > 5 and sum(s.accepted < s.depth
                                                           for s in run.steps) > 3
    assert d.window_rows > 100
    seq = prompt + run.tokens
    assert tc.tokens == seq[:-1]
    assert all(llama_cpp.llama_memory_seq_pos_max(tc.mem, s) == -1 for s in range(1, 16))
    assert llama_cpp.llama_memory_seq_pos_max(tc.mem, 0) == len(tc.tokens) - 1
    got = tc.decode(seq[-1:])[0].copy()
    fresh = ctx(target, **EXACT_KV)
    np.testing.assert_allclose(got, fresh.decode(seq)[0], atol=1e-4)


@pytest.mark.parametrize("limits", [{"n_ctx": 256}, {"n_seq_max": 2}, {"n_batch": 16},
                                    {"n_seq_max": 1}],
                         ids=["context", "sequences", "batch", "one sequence"])
def test_a_batch_that_does_not_fit_shrinks(target: LlamaModel, limits: dict[str, int]) -> None:
    tc = ctx(target, **limits)
    # Near a full context (llama.cpp rounds n_ctx up, so read it back) the last steps have
    # room for fewer rows than the window wants; the reply then runs into the full context.
    prompt = prompt_of(target, "the cat sat")
    if "n_ctx" in limits:
        prompt = (prompt * tc.n_ctx)[-(tc.n_ctx - 20):]
    s = GREEDY.with_(max_tokens=tc.n_ctx - len(prompt) + 5 if "n_ctx" in limits else 60)
    assert s.max_tokens < 70
    plain = run_to_end(PlainDecoder(ctx(target, tc.n_ctx)), prompt, s)
    dec, d = decoder(tc, LookaheadSettings(6, 4, 4), gamma=12)
    run = run_to_end(dec, prompt, s)
    assert run.tokens == plain.tokens and run.stats.stop_reason == plain.stats.stop_reason
    assert d.window_rows < JacobiWindow.n_rows(6, 4) * len(run.steps)  # the window shrank
    assert max(st.batch for st in run.steps) <= tc.n_batch


# ------------------------------------------------------------------ exactness, with power


def lookahead_transitions(settings: LookaheadSettings, replies: int, length: int, seed: int
                          ) -> list[tuple[int, int]]:
    tc, _ = scripted_pair(seed)
    d = LookaheadDrafter(tc, settings)
    pairs = list(transitions(lambda: SpeculativeDecoder(tc, None, FixedGamma(6), [d]), T09,
                             replies, length))
    assert d.window_rows > 0 or settings.window == 0
    return pairs


def test_sampled_lookahead_commits_the_target_chain() -> None:
    """10⁵ transitions at T = 0.9 through the whole decoder: each row's counts against the
    target's distribution (χ², tail 1e-6, exact quantile). The scripted rows depend on the
    position too, so the window's guesses are often wrong and the candidates often rejected."""
    pairs = lookahead_transitions(LookaheadSettings(3, 3, 4), 200, 500, 7)
    assert len(pairs) >= 100_000
    stat, crit = transition_test(iter(pairs), T09, 7)
    assert stat <= crit, (stat, crit)


def test_control_a_stale_residual_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "next_residual", stale_residual)
    stat, crit = transition_test(iter(lookahead_transitions(LookaheadSettings(3, 3, 4), 200,
                                                            500, 7)), T09, 7)
    assert stat > crit, (stat, crit)


def test_greedy_on_the_scripted_context_is_its_argmax_chain() -> None:
    tc, _ = scripted_pair(9)
    table = tc.table  # type: ignore[attr-defined]
    dec, _ = decoder(tc, LookaheadSettings(3, 4, 4))
    run = run_to_end(dec, [0], GREEDY.with_(max_tokens=300))
    seq = [0, *run.tokens]
    v = len(table)
    assert all(b == int(np.argmax(table[(a + j) % v])) for j, (a, b) in enumerate(pairwise(seq)))
    assert sum(s.accepted for s in run.steps) > 100


# ------------------------------------------------------------------ planning, and the CLI


def step(lookahead: bool, committed: int, seconds: float) -> StepEvent:
    return StepEvent(2 if lookahead else 0, committed - 1, 0.0, seconds,
                     "lookahead" if lookahead else "none", committed=committed,
                     reason="lookahead W2 N3 G4" if lookahead else "plain")


@pytest.mark.parametrize(("la_rate", "want"), [(0.5, "plain"), (2.0, "lookahead")])
def test_the_planner_runs_lookahead_where_it_measured_faster_and_probes_it_otherwise(
        la_rate: float, want: str) -> None:
    from specchat.engine.policy.auto_gamma import AutoGammaSeed
    from specchat.engine.policy.costs import CostCurve

    d = LookaheadDrafter(cast(LlamaContext, scripted_pair(7)[0]))
    # Calibrated costs, a flat curve (a GPU's): plain is 10 ms a token.
    planner = Planner(seed=AutoGammaSeed(
        CostCurve(0.005, tuple(0.0095 + 0.0005 * n for n in range(1, 17))), 0.5))
    planner.own_plans({"lookahead": d.own_plan})
    chosen: list[str] = []
    for _ in range(300):
        plan = planner.next_plan(("lookahead",))
        la = plan.drafter == "lookahead"
        chosen.append(plan.drafter)
        # plain: 1 token in 10 ms; lookahead: 2 tokens in 20 ms / la_rate
        planner.observe(step(la, 2, 0.02 / la_rate) if la else step(False, 1, 0.01))
    tail = chosen[30:]
    share = tail.count("lookahead" if want == "lookahead" else "none") / len(tail)
    assert share > 0.9, share
    if want == "plain":
        assert share < 1.0  # Lookahead is still probed now and then
        assert "measured" not in planner.reason
    else:
        assert "× plain" in planner.reason  # the step says how much faster it measured
    assert planner.next_plan(()).drafter == "none"
    tokens, seconds = planner.predict(d.own_plan()) or (0.0, 0.0)  # forecast from its steps
    assert tokens == pytest.approx(2.0) and seconds > 0.02 / la_rate


def test_on_a_steep_curve_lookahead_is_not_even_measured() -> None:
    """3 tokens at best (2 candidates deep and the target's own) for a pass over 9 rows that
    costs 9× one token: it cannot pay, whatever its pool would find."""
    from specchat.engine.policy.auto_gamma import AutoGammaSeed
    from specchat.engine.policy.costs import CostCurve

    d = LookaheadDrafter(cast(LlamaContext, scripted_pair(7)[0]))
    planner = Planner(seed=AutoGammaSeed(CostCurve(0.005, tuple(0.01 * n for n in range(1, 17))),
                                         0.5))
    planner.own_plans({"lookahead": d.own_plan})
    plans = []
    for _ in range(200):
        plans.append(planner.next_plan(("lookahead",)))
        planner.observe(step(False, 1, 0.01))
    assert all(p.drafter == "none" for p in plans)


def test_the_runtime_plans_lookahead_with_the_planner(home: AppPaths, tiny_target: Path) -> None:
    from specchat.loading import select
    from specchat.models.catalog import load_catalog
    from specchat.models.resolver import ModelResolver
    from specchat.runtime.opening import Runtime
    from specchat.ui.chat_settings import DRAFTER_CHOICES, ChatSettings
    from specchat.ui.services import runtime_decoder

    assert "lookahead" in DRAFTER_CHOICES
    cat = load_catalog()
    rt = Runtime.open(select(cat, model=str(tiny_target)), ModelResolver(cat, home))
    try:
        dec = runtime_decoder(rt, ChatSettings(drafter="lookahead"))  # the app's path
        assert isinstance(dec, SpeculativeDecoder) and isinstance(dec.policy, Planner)
        fixed = rt.decoder(gamma=3, drafters=("lookahead",))
        assert isinstance(fixed, SpeculativeDecoder) and isinstance(fixed.policy, FixedGamma)
        prompt = prompt_of(rt.target_ctx.model)
        plain = run_to_end(rt.decoder(plain=True), prompt, GREEDY)
        rt.clear_caches()
        run = run_to_end(dec, prompt, GREEDY)
        assert run.tokens == plain.tokens
        assert any(s.reason.startswith("lookahead") for s in run.steps)
    finally:
        rt.close()


def test_ask_race_bench_and_prove_run_the_lookahead_drafter(home: AppPaths, tiny_target: Path,
                                                            tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    from specchat.cli.main import main

    common = ["--model", str(tiny_target), "--drafter", "lookahead", "--threads", "1"]
    assert main(["ask", "the cat sat", *common, "--max-tokens", "16", "--temperature", "0",
                 "--json"]) == 0
    assert '"lookahead"' in capsys.readouterr().out
    rc = main(["race", "the cat sat", *common, "--max-tokens", "16", "--gamma", "4",
               "--no-replay"])
    out = capsys.readouterr().out
    assert rc == 0 and "outputs identical ✓" in out, out
    prompts = tmp_path / "q.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "alpha",
                                   "turns": ["the cat sat"]}) + "\n", encoding="utf-8")
    rc = main(["bench", *common, "--prompts", str(prompts), "--per-category", "1",
               "--max-tokens", "12", "--gamma", "4", "--temperature", "0",
               "--out", str(tmp_path / "b")])
    assert rc == 0, capsys.readouterr()
    assert "lookahead" in (tmp_path / "b" / "results.json").read_text()
    rc = main(["prove", "--prompt", "the cat sat", *common, "--samples", "40", "--tokens", "2",
               "--gamma", "4", "--seed", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "PASS" in out, out
