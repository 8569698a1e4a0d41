"""Agreement traces, cost curves and the speed-up model; calibration on tiny and demo models."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.stats import expected_tokens
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.engine.policy.agreement import agreement_trace, greedy_continuation
from specchat.engine.policy.costs import CostCurve, draft_step_cost, non_decreasing, verify_costs
from specchat.engine.policy.speedup import (
    PAYS,
    best_gamma,
    predicted_speedup,
    speedup_table,
    verdict,
)
from specchat.errors import Cancelled
from specchat.models.calibration import (
    CalibrationOptions,
    CalibrationPrompt,
    CalibrationResult,
    CalibrationState,
    builtin_prompts,
    calibrate,
    calibrate_loaded,
    format_result,
    ngram_replay,
    recommend,
)
from specchat.models.calibration_store import (
    load_calibration,
    load_target_curve,
    save_calibration,
)
from specchat.models.progress import Progress
from specchat.paths import AppPaths

PROMPT = [1, 20, 7, 14, 14, 17, 2, 1]  # any tokens will do for teacher forcing


def ctx(path: Path) -> LlamaContext:
    # one thread: tiny models gain nothing from two, and lose a lot when the cores are shared
    return LlamaContext(LlamaModel(path), ContextSettings(n_ctx=256, n_batch=16, n_threads=1))


def test_a_model_agrees_with_itself_everywhere(tiny_target: Path) -> None:
    t, d = ctx(tiny_target), ctx(tiny_target)
    reply = greedy_continuation(t, PROMPT, 40)
    trace = agreement_trace(t, d, PROMPT, reply, SamplerSettings(temperature=0.8, seed=1))
    assert trace.positions == len(reply) and trace.alpha == 1.0
    assert trace.accept_probs is not None
    assert np.allclose(trace.accept_probs, 1.0)
    assert trace.target_tokens == reply  # teacher forcing reproduces the greedy reply
    assert t.tokens == d.tokens == PROMPT + reply[:-1]


def test_a_noisy_draft_agrees_partly(tiny_target: Path, tiny_draft: Path) -> None:
    t, d = ctx(tiny_target), ctx(tiny_draft)
    reply = greedy_continuation(t, PROMPT, 60)  # > n_batch: several chunks
    trace = agreement_trace(t, d, PROMPT, reply, SamplerSettings(temperature=1.0, top_k=0,
                                                                 top_p=1, min_p=0))
    assert 0.0 < trace.alpha < 1.0
    assert trace.alpha_sampled is not None and 0.0 < trace.alpha_sampled < 1.0
    # every draft prediction is the argmax of the draft reading the same tokens
    fresh = ctx(tiny_draft)
    seq = list(PROMPT)
    for i, tok in enumerate(reply[:10]):
        row = fresh.decode(seq[len(fresh.tokens):])[0]
        assert int(np.argmax(row)) == trace.draft_tokens[i]
        seq.append(tok)


def test_a_draft_with_extra_padding_ids_only_proposes_shared_ones(tiny_target: Path,
                                                                  tiny_other_vocab: Path) -> None:
    t, d = ctx(tiny_target), ctx(tiny_other_vocab)
    reply = greedy_continuation(t, PROMPT, 20)
    trace = agreement_trace(t, d, PROMPT, reply)
    assert all(tok < 52 for tok in trace.draft_tokens) and trace.accept_probs is None


def test_cost_curve_is_measured_and_the_cache_rolled_back(tiny_target: Path) -> None:
    t = ctx(tiny_target)
    reply = greedy_continuation(t, PROMPT, 12)
    costs = verify_costs(t, PROMPT, reply, 5, repeats=2)
    assert len(costs) == 5 and all(c > 0 for c in costs)
    assert t.tokens == PROMPT
    assert draft_step_cost(t, PROMPT, reply[:4]) > 0 and t.tokens == PROMPT


def test_cost_curves_are_made_non_decreasing() -> None:
    assert non_decreasing([1.0, 3.0, 2.0, 4.0]) == (1.0, 2.5, 2.5, 4.0)
    assert non_decreasing([5.0, 1.0, 1.0]) == (7 / 3,) * 3
    assert non_decreasing([1.0, 2.0]) == (1.0, 2.0)


def test_speedup_model() -> None:
    assert expected_tokens(0.0, 4) == 1.0 and expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)
    free = CostCurve(0.0, (1.0,) * 9)  # free draft, flat verification: speedup = E(γ)
    assert predicted_speedup(0.8, 3, free) == pytest.approx(expected_tokens(0.8, 3))
    gpu = CostCurve(0.05, tuple(1.0 + 0.02 * n for n in range(9)))
    table = speedup_table(0.8, gpu)
    g, s = best_gamma(table)
    assert len(table) == 8 and 3 <= g <= 8 and s > 2
    assert verdict(0.8, gpu, g, s).startswith(f"expect about {s:.1f}×")
    cpu = CostCurve(0.6, tuple(1.0 + 0.9 * n for n in range(9)))  # costly draft, costly batches
    g, s = best_gamma(speedup_table(0.7, cpu))
    v = verdict(0.7, cpu, g, s)
    assert s < 1 and v.startswith("speculation will not pay on this hardware")
    assert "the draft costs 60% of the target" in v


def test_builtin_prompts_cover_several_kinds() -> None:
    cats = {p.category for p in builtin_prompts()}
    assert {"coding", "writing", "translation", "qa"} <= cats


def test_calibration_on_tiny_models_and_its_record(tiny_target: Path, tiny_draft: Path,
                                                   home: AppPaths) -> None:
    opts = CalibrationOptions(max_tokens=16, gamma_max=3, n_ctx=512, repeats=1, n_threads=1,
                              prompts=(CalibrationPrompt("a", "hello there"),
                                       CalibrationPrompt("b", "the cat sat on the mat")))
    r = calibrate(tiny_target, tiny_draft, opts)
    assert 0 < r.alpha < 1 and r.positions > 0 and len(r.per_prompt) == 2
    assert [g for g, _ in r.speedups] == [1, 2, 3]
    best = max(s for _, s in r.speedups)
    # the draft model's γ only where it pays; else 0, and plain or the n-gram drafter it is
    assert (1 <= r.gamma <= 3) == (best >= PAYS) and (r.gamma == 0) == (best < PAYS)
    assert r.drafter == recommend(r.speedup, r.ngram_speedup)
    assert len(r.verify_s) == 16  # T(n) as far as the 16-token replies reach (≤ 32)
    assert r.ngram_alpha is not None and r.ngram_gamma >= 1
    assert save_calibration(home, r).exists()
    again = load_calibration(home, tiny_target, tiny_draft)
    assert again == r
    assert load_calibration(home, tiny_draft, tiny_target) is None
    # The target's own curve serves it alone (no pair): any pair's record with this target.
    assert load_target_curve(home, tiny_target) == r.costs
    assert load_target_curve(home, tiny_draft) is None
    assert "recommended: " in format_result(r)
    assert CalibrationResult.from_json(r.to_json()) == r
    # how the draft's confidence predicts acceptance, for auto-γ; records without it still load
    assert sum(n for _, n in r.confidence) == r.positions
    old = json.loads(r.to_json())
    del old["confidence"]
    assert CalibrationResult.from_json(json.dumps(old)).confidence == ()
    # this build's batch rounding, measured for the target; old records say "not measured"
    assert r.batch_rounding is not None and r.batch_rounding >= 0
    assert "batch rounding: gaps between the target's top tokens move by up to" in format_result(r)
    del old["batch_rounding"]
    assert CalibrationResult.from_json(json.dumps(old)).batch_rounding is None


def test_calibration_can_be_cancelled(tiny_target: Path, tiny_draft: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        calibrate(tiny_target, tiny_draft, CalibrationOptions(max_tokens=8, gamma_max=2),
                  cancel=cancel)


def test_a_cancelled_calibration_goes_on_at_the_prompt_it_reached(tiny_target: Path,
                                                                  tiny_draft: Path) -> None:
    """The app pauses a background calibration for a reply: run again with its state, it
    measures only the prompts left, on the same loaded models, and ends as a whole run does."""
    opts = CalibrationOptions(max_tokens=12, gamma_max=3, n_ctx=512, n_batch=64, repeats=1,
                              n_threads=1, cost_points=8,
                              prompts=(CalibrationPrompt("a", "hello there"),
                                       CalibrationPrompt("b", "the cat sat on the mat"),
                                       CalibrationPrompt("c", "def add(a, b):")))
    target, draft = LlamaModel(tiny_target), LlamaModel(tiny_draft)
    cancel = threading.Event()
    seen: list[float] = []

    def report(p: Progress) -> None:
        seen.append(p.done)
        if p.done > 0 and not cancel.is_set():
            cancel.set()  # after the first prompt

    state = CalibrationState()
    with pytest.raises(Cancelled):
        calibrate_loaded(target, draft, opts, report, cancel, state)
    assert len(state.measured) == 1
    seen.clear()
    resumed = calibrate_loaded(target, draft, opts, report, threading.Event(), state)
    assert seen[0] == opts.max_tokens  # it went on where it was, not from 0
    whole = calibrate_loaded(target, draft, opts)
    assert resumed.per_prompt == whole.per_prompt and resumed.alpha == whole.alpha
    assert resumed.target == str(tiny_target) and len(resumed.verify_s) == opts.cost_points
    for m in (draft, target):
        m.close()


def test_calibration_on_the_demo_pair_is_sane(demo_files: tuple[Path, Path]) -> None:
    target, draft = demo_files
    prompts = tuple(p for p in builtin_prompts() if p.category == "coding")
    r = calibrate(target, draft, CalibrationOptions(max_tokens=20, gamma_max=3, n_ctx=512,
                                                    prompts=prompts, repeats=1, n_threads=1))
    # Same weights at two precisions: they agree most of the time (measured 0.6-0.8 greedy).
    assert 0.3 < r.alpha <= 1.0 and r.positions >= 16
    assert 0 < r.draft_s < r.verify_s[0]  # Q3_K_S is cheaper per step than F32
    # T(n) as far as the replies reach (20 tokens here; 32 at most), non-decreasing
    assert 4 <= len(r.verify_s) <= 20 and list(r.verify_s) == sorted(r.verify_s)
    assert 0 <= r.gamma <= 3 and (r.gamma == 0) == (r.speedup < PAYS)
    assert 0.1 < r.speedup < 6 and r.verdict


def test_the_recommendation_is_plain_when_nothing_pays_and_ngram_when_it_pays_best() -> None:
    assert recommend(0.80, 0.95) == "none"  # e.g. the Qwen pair on 2 CPU cores
    assert recommend(0.80, 1.20) == "ngram"
    assert recommend(1.30, 1.20) == "model"


def test_ngram_replay_on_a_reply_that_quotes_its_prompt() -> None:
    flat = tuple(0.01 for _ in range(9))  # a GPU-like curve: checking 9 tokens costs one
    prompt = list(range(100, 120))
    quoted = prompt[5:15]  # the reply repeats part of the prompt: lookups find it
    alpha, gamma, speedup = ngram_replay([(prompt, quoted)], flat, 8)
    assert alpha is not None and alpha > 0.5 and gamma > 1 and speedup > 2
    novel = list(range(200, 210))  # nothing to look up: every step is plain
    alpha, _, speedup = ngram_replay([(prompt, novel)], flat, 8)
    assert alpha is None and speedup == pytest.approx(1.0)
