"""Slots of a shared llama.cpp context (engine.llama.slots): each slot's sequences stay its
own — a tree kept, a cache cut or cleared in one slot leaves the other's whole — and slots
decoding at once ride in shared passes yet produce what each produces alone."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama.model import LlamaContext, LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.engine.llama.slots import share


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
