"""Slots of a shared llama.cpp context (engine.llama.slots): each slot's sequences stay its
own — a tree kept, a cache cut or cleared in one slot leaves the other's whole — and slots
decoding at once ride in shared passes yet produce what each produces alone: greedy replies
token for token, sampled ones from the target's own distribution (χ², with controls that a
wrong rule and a slot given another's logits fail). A cancelled prompt read stops at once,
mid-pass included, and leaves the other slot's reply and cache whole."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
import pytest

from specchat.bench.chi2 import chi_square
from specchat.engine.decode import target_pass, verify
from specchat.engine.decode.decoding import FinishedRun, prefill, run_to_end
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.engine.llama.rendezvous import PassLog, Rendezvous, SlotDecode
from specchat.engine.llama.slots import SlotContext, Slots, share
from tests.test_prove import sqrt_rule
from tests.test_speculative import exact_joint, prompt_of


@pytest.fixture(scope="module")
def model(tiny_target: Path) -> Iterator[LlamaModel]:
    m = LlamaModel(tiny_target)
    yield m
    m.close()


def _next_row(model: LlamaModel, tokens: list[int]) -> np.ndarray:
    """The logits after ``tokens`` in a context of their own, read as a slot reads them (all
    but the last token in one batch, then the last)."""
    ctx = LlamaContext(model, ContextSettings(n_ctx=256))
    try:
        ctx.decode(tokens[:-1], logits="none")
        return np.array(ctx.decode(tokens[-1:], logits="last")[0])
    finally:
        ctx.close()


def test_one_slots_tree_cut_and_clear_leave_the_others_cache_whole(model: LlamaModel) -> None:
    base = LlamaContext(model, ContextSettings(n_ctx=512, n_seq_max=32))
    slots = share(base, None, 2)
    (a, _), (b, _) = slots.contexts
    try:
        assert (a.n_ctx, b.n_ctx, a.seq_base, b.seq_base, b.n_seq_max) == (256, 256, 0, 16, 16)
        p, q = [5, 6, 7, 8, 9, 10], [20, 21, 22]
        a.decode(p[:-1], logits="none")
        b.decode(q, logits="none")
        # In b: a token tree of two paths, one kept (llama.cpp's seq_keep would have emptied
        # every other sequence of the cache, a's included).
        shape = (-1, 0, 0)
        b.decode_tree(shape, [0, 1, 2], [30, 31, 32])
        b.keep_branch(shape, 2, [30, 32])
        assert b.tokens == [*q, 30, 32]
        row_b = np.array(b.decode([33], logits="last")[0])
        ref_b = _next_row(model, [*q, 30, 32, 33])
        assert np.allclose(row_b, ref_b, atol=1e-4) and row_b.argmax() == ref_b.argmax()
        b.truncate(1)
        row_a = np.array(a.decode(p[-1:], logits="last")[0])
        ref_a = _next_row(model, p)
        assert np.allclose(row_a, ref_a, atol=1e-4) and row_a.argmax() == ref_a.argmax()
        b.clear()
        assert b.tokens == [] and a.tokens == p
        row_a2 = np.array(a.decode([11], logits="last")[0])
        ref_a2 = _next_row(model, [*p, 11])
        assert np.allclose(row_a2, ref_a2, atol=1e-4)
    finally:
        slots.close()
        base.close()


def test_slots_generating_at_once_share_passes_and_match_lone_runs(model: LlamaModel) -> None:
    prompts = [[5, 6, 7, 8], [40, 41, 42, 43, 44, 45, 46], [12, 13]]
    settings = SamplerSettings(temperature=0.0, max_tokens=40)
    alone = []
    for p in prompts:
        ctx = LlamaContext(model, ContextSettings(n_ctx=256))
        alone.append(run_to_end(PlainDecoder(ctx), p, settings).tokens)
        ctx.close()
    base = LlamaContext(model, ContextSettings(n_ctx=768, n_seq_max=48))
    slots = share(base, None, 3)
    got: dict[int, list[int]] = {}
    start = threading.Barrier(3)

    def serve(k: int) -> None:
        start.wait()
        with slots.rendezvous.member():
            got[k] = run_to_end(PlainDecoder(slots.contexts[k][0]), prompts[k], settings).tokens

    threads = [threading.Thread(target=serve, args=(k,)) for k in range(3)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [got[k] for k in range(3)] == alone
        log = slots.rendezvous.log
        # Steps of several slots went into one llama_decode, all three at once at least once.
        assert log.shared > 0 and log.most == 3, log
        # Fewer passes than the three runs alone took (each: its prompt, then a pass a token).
        assert log.passes < 0.6 * sum(len(t) + 1 for t in alone), log
    finally:
        slots.close()
        base.close()


@pytest.fixture
def two_slots(model: LlamaModel) -> Iterator[tuple[LlamaContext, Slots]]:
    """Two slots of a 512-cell context (256 each), closed after the test."""
    base = LlamaContext(model, ContextSettings(n_ctx=512, n_seq_max=32))
    slots = share(base, None, 2)
    yield base, slots
    slots.close()
    base.close()


# Two prompts with a 40-token start in common (a system prompt, a file).
SHARED = [*range(10, 40), *range(12, 22)]
P, Q = [*SHARED, 5, 6, 7], [*SHARED, 50, 51]


def test_a_slot_takes_a_start_another_slot_holds_and_keeps_it_past_that_slots_cuts(
        model: LlamaModel, two_slots: tuple[LlamaContext, Slots]) -> None:
    """A request whose start (a system prompt, a file) another slot holds reads only the rest:
    the other slot's cells join its sequence untouched, the next row is the one a lone read
    gives, and the other slot's later clear leaves them."""
    _, slots = two_slots
    (a, _), (b, _) = slots.contexts
    _, reused_a = prefill(a, P)
    row_b, reused_b = prefill(b, Q)
    assert (reused_a, a.borrowed) == (0, 0)
    assert (reused_b, b.borrowed) == (40, 40) and b.tokens == Q
    ref = _next_row(model, Q)
    assert np.allclose(row_b, ref, atol=1e-4) and row_b.argmax() == ref.argmax()
    a.clear()
    row = np.array(b.decode([45], logits="last")[0])
    ref = _next_row(model, [*Q, 45])
    assert np.allclose(row, ref, atol=1e-4) and row.argmax() == ref.argmax()
    # Its own cache first: b holds all of q, a holds nothing, so nothing moves.
    assert b.reuse_prefix(Q) == len(Q) and b.borrowed == 40
    # And back: the emptied slot takes the start from b.
    _, again = prefill(a, P)
    assert (again, a.borrowed) == (40, 40)


def test_a_parked_slot_leaves_the_shared_cache_and_comes_back_whole(
        model: LlamaModel, two_slots: tuple[LlamaContext, Slots]) -> None:
    """An idle slot parked: its cells are out of the shared cache (no other slot's pass
    attends over them), its tokens still say what it holds; another slot takes a start from
    it (copied into that slot's sequence; the parked copy stays), and its own next request
    puts them back, with the rows a lone read gives, reading only what is new."""
    base, slots = two_slots
    (a, _), (b, _) = slots.contexts
    assert not b.park()  # nothing to park
    prefill(a, P)
    slots.park(0)
    assert a.parked is not None and a.tokens == P
    assert llama_cpp.llama_memory_seq_pos_max(base.mem, a.seq_base) == -1
    assert not a.park()  # parked already
    row_b, reused_b = prefill(b, Q)
    assert (reused_b, b.borrowed) == (len(SHARED), len(SHARED)) and a.parked is not None
    ref = _next_row(model, Q)
    assert np.allclose(row_b, ref, atol=1e-4) and row_b.argmax() == ref.argmax()
    b.park()
    row_a, reused_a = prefill(a, [*P, 8])
    assert reused_a == len(P) and a.parked is None and b.parked is not None
    assert llama_cpp.llama_memory_seq_pos_max(base.mem, a.seq_base) == len(P)
    ref = _next_row(model, [*P, 8])
    assert np.allclose(row_a, ref, atol=1e-4) and row_a.argmax() == ref.argmax()
    # A parked slot cut without a request's start (a drafter's truncate) is put back too.
    b.truncate(len(SHARED))
    assert b.parked is None and b.tokens == SHARED
    row = np.array(b.decode([33], logits="last")[0])
    ref = _next_row(model, [*SHARED, 33])
    assert np.allclose(row, ref, atol=1e-4) and row.argmax() == ref.argmax()


def test_a_speculative_reply_on_a_borrowed_start_matches_a_lone_run(
        model: LlamaModel, draft: LlamaModel) -> None:
    """Both the target's and the draft model's slot take the start another request left, and
    the greedy reply is the lone run's, token for token."""
    shared = [*range(10, 40), *range(20, 40)]
    p, q = [*shared, 5, 6, 7], [*shared, 50, 51]
    settings = SamplerSettings(temperature=0.0, max_tokens=30)
    lone_t = LlamaContext(model, ContextSettings(n_ctx=256))
    lone_d = LlamaContext(draft, ContextSettings(n_ctx=256))
    try:
        alone = run_to_end(SpeculativeDecoder(lone_t, lone_d, FixedGamma(3)), q, settings)
    finally:
        lone_t.close()
        lone_d.close()
    base_t = LlamaContext(model, ContextSettings(n_ctx=512, n_seq_max=32))
    base_d = LlamaContext(draft, ContextSettings(n_ctx=512, n_seq_max=32))
    slots = share(base_t, base_d, 2)
    (a_t, a_d), (b_t, b_d) = slots.contexts
    try:
        run_to_end(SpeculativeDecoder(a_t, a_d, FixedGamma(3)), p, settings)
        got = run_to_end(SpeculativeDecoder(b_t, b_d, FixedGamma(3)), q, settings)
        assert got.tokens == alone.tokens
        assert got.stats.drafted > 0
        assert b_t.borrowed == len(shared) and b_d.borrowed == len(shared)
    finally:
        slots.close()
        base_t.close()
        base_d.close()


# ------------------------------------------------------------------- sampled exactness


def _sample_beside_a_busy_slot(target: LlamaModel, draft: LlamaModel, prompt: list[int],
                               busy: list[int], settings: SamplerSettings, depth: int,
                               n: int, known: dict[object, float]
                               ) -> tuple[Counter[object], dict[str, int], PassLog]:
    """``n`` continuations of ``depth`` tokens (seeds 0…n−1) sampled speculatively on slot 0
    while slot 1 samples long speculative replies to ``busy`` the whole time; the first
    continuation starts only once slot 1 runs. Returns the continuations (outside ``known``:
    "other"), what slot 0's rule did, and the shared passes."""
    base_t = LlamaContext(target, ContextSettings(n_ctx=1024, n_seq_max=32, n_threads=1))
    base_d = LlamaContext(draft, ContextSettings(n_ctx=1024, n_seq_max=32, n_threads=1))
    slots = share(base_t, base_d, 2)
    (a_t, a_d), (b_t, b_d) = slots.contexts
    counts: Counter[object] = Counter()
    tally = {"drafted": 0, "accepted": 0, "rejections": 0, "through_rejection": 0,
             "busy_tokens": 0}
    running, done = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def busy_slot() -> None:
        dec = SpeculativeDecoder(b_t, b_d, FixedGamma(3))
        try:
            with slots.rendezvous.member():
                running.set()
                seed = 10_000
                while not done.is_set():  # cancelled by ``done`` at its next step
                    r = run_to_end(dec, busy, settings.with_(seed=seed, max_tokens=200), done)
                    tally["busy_tokens"] += len(r.tokens)
                    seed += 1
        except BaseException as e:
            failed.append(e)
            running.set()

    def sampling_slot() -> None:
        dec = SpeculativeDecoder(a_t, a_d, FixedGamma(2))
        try:
            with slots.rendezvous.member():
                for seed in range(n):
                    r = run_to_end(dec, prompt, settings.with_(seed=seed, max_tokens=depth))
                    path = tuple(r.tokens)
                    counts[path if path in known else "other"] += 1
                    s = r.stats
                    tally["drafted"] += s.drafted
                    tally["accepted"] += s.accepted
                    tally["rejections"] += s.rejections
                    tally["through_rejection"] += s.rejections > 0
        except BaseException as e:
            failed.append(e)
        finally:
            done.set()

    b = threading.Thread(target=busy_slot)
    a = threading.Thread(target=sampling_slot)
    try:
        b.start()
        assert running.wait(60)
        a.start()
        a.join(300)
        done.set()
        b.join(60)
        assert not a.is_alive() and not b.is_alive()
        if failed:
            raise failed[0]
        return counts, tally, slots.rendezvous.log
    finally:
        slots.close()
        base_t.close()
        base_d.close()


@pytest.fixture(scope="module")
def draft(tiny_draft: Path) -> Iterator[LlamaModel]:
    m = LlamaModel(tiny_draft)
    yield m
    m.close()


SAMPLED = SamplerSettings(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)
# 3,000 continuations: the test catches a total variation of 0.08 from the target's
# distribution 9 times in 10 at level 1e-6 (chi2.detectable_tv). What slots could get wrong —
# another slot's rows, a cache not cut back — biases far more (the controls: χ² in the
# hundreds and beyond at 500); the rule's own exactness to a point or less is verify.py's
# test on 10⁵ draws.
DEPTH, DRAWS = 3, 3000


def _crossed_rows(monkeypatch: pytest.MonkeyPatch, model: LlamaModel) -> None:
    """A wrong engine: in a pass of the target shared with another slot, slot 0 gets that
    slot's logits rows instead of its own (as many as it asked for, repeated if fewer). (The
    draft model's rows crossed would not be a fault: drafts are kept by comparing the target
    with the very distribution they were drawn from, whatever it is.)"""
    real = Rendezvous._run

    def crossed(self: Rendezvous, group: list[SlotDecode]) -> None:
        real(self, group)
        mine = [j for j in group if j.view.index == 0 and j.logits is not None]
        theirs = [j for j in group if j.view.index != 0 and j.logits is not None]
        if group[0].view.model is model and mine and theirs:
            mine[0].logits = np.resize(theirs[0].logits, mine[0].logits.shape)

    monkeypatch.setattr(Rendezvous, "_run", crossed)


@pytest.fixture(scope="module")
def exact(model: LlamaModel) -> dict[object, float]:
    """P(the first DEPTH tokens) of a reply to "hello there", from the target's logits."""
    return exact_joint(model, prompt_of(model, "hello there"), SAMPLED, depth=DEPTH)


@pytest.mark.parametrize("rule", ["exact", "sqrt rule", "crossed rows"])
def test_sampling_beside_a_busy_slot_is_the_targets_distribution(
        model: LlamaModel, draft: LlamaModel, exact: dict[object, float], rule: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Speculative sampling on one slot while another slot samples its own reply the whole
    time — their draft steps, verifications and prompt reads riding in shared passes — draws
    the first tokens of a reply from the target's own distribution (χ² against the exact joint
    distribution from the target's logits, level 1e-6). Controls, run the same way, fail: a
    wrong acceptance rule (min(1, p/q)^0.5), and a slot given the other slot's logits rows."""
    prompt = prompt_of(model, "hello there")
    busy = prompt_of(model, "the cat sat on the mat, the dog sat on the log")
    if rule == "sqrt rule":
        monkeypatch.setattr(target_pass, "verify_tree",
                            partial(verify.verify_tree, keep=sqrt_rule))
    elif rule == "crossed rows":
        _crossed_rows(monkeypatch, model)
    draws = DRAWS if rule == "exact" else DRAWS // 6
    counts, tally, log = _sample_beside_a_busy_slot(model, draft, prompt, busy, SAMPLED, DEPTH,
                                                    draws, exact)
    result = chi_square(counts, exact)
    # The rule was exercised: drafts made, kept and rejected, most continuations through a
    # rejection; the other slot kept sampling, sharing passes with this one throughout. Checked
    # against the other slot's rows, few drafts are kept (the fault itself: 48 of 1,486 in one
    # run), so that control asks for fewer.
    kept = draws // 50 if rule == "crossed rows" else draws // 10
    assert tally["drafted"] > draws and tally["accepted"] > kept, tally
    assert tally["rejections"] > draws // 2 and tally["through_rejection"] > draws // 3, tally
    assert tally["busy_tokens"] > draws // 2 and log.shared > draws, (tally, log)
    if rule == "exact":
        assert result.ok, f"{result}, p = {result.p_value:.3g}; {tally}"
    else:
        assert not result.ok, f"{result}, p = {result.p_value:.3g}; {tally}"


# ------------------------------------------------------------------------ cancellation

# F32 KV cache without flash attention: a slot's row then matches a lone context's to ~1e-6,
# so a cache left wrong by a stopped pass (an O(1e-2) difference) cannot pass for rounding.
EXACT_KV = {"flash_attn": "off", "type_k": "f32", "type_v": "f32"}
LONG = [5 + (i * 7) % 40 for i in range(1000)]  # four chunks of a 2-slot context's 256


WRITER = SamplerSettings(temperature=0.0, max_tokens=40)


def _lone_row(model: LlamaModel, tokens: list[int]) -> np.ndarray:
    """The logits after ``tokens`` in a lone context with an exact cache."""
    ctx = LlamaContext(model, ContextSettings(n_ctx=512, n_threads=1, **EXACT_KV))
    try:
        ctx.decode(tokens[:-1], logits="none")
        return np.array(ctx.decode(tokens[-1:], logits="last")[0])
    finally:
        ctx.close()


def _read_beside_a_busy_slot(model: LlamaModel, arm: Callable[[LlamaContext, SlotContext,
                                                              threading.Event], None]
                             ) -> tuple[FinishedRun, list[int], PassLog]:
    """Slot 0 writes a greedy reply while slot 1 reads LONG, whose cancel ``arm`` sets up.
    Slot 0's reply must be its lone reply and its cache what a lone context holds. Returns
    slot 1's run and what its cache kept, and the passes."""
    base = LlamaContext(model, ContextSettings(n_ctx=4096, n_seq_max=32, n_threads=1,
                                               **EXACT_KV))
    slots = share(base, None, 2)
    (a, _), (b, _) = slots.contexts
    stop, running, started = threading.Event(), threading.Event(), threading.Event()
    out: dict[str, Any] = {}

    def writer() -> None:  # replies, one after another, until the reader is done
        with slots.rendezvous.member():
            running.set()
            started.wait(60)  # its steps begin with the reader on its way in
            out["a"] = []
            while not out["a"] or "b" not in out:
                out["a"].append(run_to_end(PlainDecoder(a), [5, 6, 7, 8], WRITER).tokens)

    def reader() -> None:
        started.set()
        with slots.rendezvous.member():
            out["kept"] = []
            out["b"] = run_to_end(PlainDecoder(b), LONG, WRITER, stop)
            out["kept"] = list(b.tokens)

    arm(base, b, stop)
    ta, tb = threading.Thread(target=writer), threading.Thread(target=reader)
    try:
        ta.start()
        assert running.wait(60)
        tb.start()
        ta.join(120)
        tb.join(120)
        assert "a" in out and "b" in out, out
        lone_ctx = LlamaContext(model, ContextSettings(n_ctx=512, n_threads=1))
        lone = run_to_end(PlainDecoder(lone_ctx), [5, 6, 7, 8], WRITER).tokens
        lone_ctx.close()
        assert out["a"] and all(r == lone for r in out["a"]), (out["a"], lone)
        row = np.array(a.decode([11], logits="last")[0])
        want = _lone_row(model, [*a.tokens])
        assert np.allclose(row, want, atol=1e-4), np.abs(row - want).max()
        return out["b"], out["kept"], slots.rendezvous.log
    finally:
        slots.close()
        base.close()


def test_a_cancelled_prompt_read_queues_no_further_chunk(model: LlamaModel) -> None:
    """Cancelled after its first chunk (its client went away), a long prompt read beside a
    busy slot stops there: the next chunks are not read, and the other slot goes on whole."""
    def after_the_first_chunk(base: LlamaContext, b: SlotContext,
                              stop: threading.Event) -> None:
        b.on_decode = lambda start, chunk: stop.set()

    run, kept, log = _read_beside_a_busy_slot(model, after_the_first_chunk)
    assert run.stats.stop_reason == "cancelled" and run.tokens == []
    assert len(kept) <= 256, len(kept)  # one chunk of four, not the whole prompt
    assert log.shared > 0 and log.stopped == 0, log


def test_a_cancel_stops_a_shared_pass_holding_the_prompt_read(model: LlamaModel) -> None:
    """Cancelled while its first chunk rides in a pass with the other slot's step, the read
    stops mid-pass: that pass is stopped and the other slot's rows run again without it,
    so its reply and its cache are what they are alone, and nothing of the read is kept."""
    def during_the_first_chunk(base: LlamaContext, b: SlotContext,
                               stop: threading.Event) -> None:
        real = base.llama_decode

        def cancel_as_it_runs(batch: Any, m: int) -> int:
            if m > 200:  # the read's chunk, with the other slot's row
                stop.set()
            return real(batch, m)

        base.llama_decode = cancel_as_it_runs  # type: ignore[method-assign]

    run, kept, log = _read_beside_a_busy_slot(model, during_the_first_chunk)
    assert run.stats.stop_reason == "cancelled" and run.tokens == [] and kept == []
    assert log.stopped == 1, log


def test_a_stopped_pass_is_cut_back_in_each_sequence_it_wrote(model: LlamaModel) -> None:
    """What a stopped pass wrote is taken out of every sequence it wrote, from where the pass
    began in it (llama.cpp itself takes out only the micro-batch it stopped in): a slot that
    then reads on sees no stale cell, and the other slot's cache is untouched."""
    base = LlamaContext(model, ContextSettings(n_ctx=512, n_seq_max=32, n_threads=1,
                                               **EXACT_KV))
    slots = share(base, None, 2)
    (a, _), (b, _) = slots.contexts
    try:
        a.decode([5, 6, 7, 8, 9], logits="none")
        b.decode([20, 21, 22], logits="none")
        # As if a stopped pass had written 8 and 9 at positions 3 and 4 of a's sequence:
        a._pos[:2] = [3, 4]
        Rendezvous._forget([SlotDecode(a, a.base, a.slot, 2)])
        del a.tokens[3:]
        row = np.array(a.decode([8], logits="last")[0])
        assert np.allclose(row, _lone_row(model, [5, 6, 7, 8]), atol=1e-4)
        row_b = np.array(b.decode([23], logits="last")[0])
        assert np.allclose(row_b, _lone_row(model, [20, 21, 22, 23]), atol=1e-4)
    finally:
        slots.close()
        base.close()
