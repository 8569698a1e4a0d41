"""Measuring how logits move with batch shape, and how close a greedy choice was, on a real
(tiny) model: the two evaluations agree on the best token and the bound is a true maximum."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specchat.engine.llama import batch_rounding
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings


@pytest.fixture
def ctx(tiny_target: Path) -> LlamaContext:
    return LlamaContext(LlamaModel(tiny_target), ContextSettings(n_ctx=256, n_threads=1))


def greedy(ctx: LlamaContext, prompt: list[int], n: int) -> list[int]:
    ctx.clear()
    row = ctx.decode(prompt)[0]
    out = []
    for _ in range(n):
        t = int(np.argmax(row))
        out.append(t)
        row = ctx.decode([t])[0]
    ctx.clear()
    return out


def test_measure_bounds_the_gap_change_and_leaves_the_cache_empty(ctx: LlamaContext) -> None:
    prompt = ctx.model.tokenize("hello there", add_special=True)
    reply = greedy(ctx, prompt, 20)
    b = batch_rounding.measure(ctx, prompt, reply)
    assert b.positions == 20 and b.gap >= 0 and b.logit >= 0
    assert b.gap <= 2 * b.logit + 1e-9  # a gap moves by at most both ends' moves
    assert b.gap < 0.05  # F32 weights: rounding noise, not a different model
    assert ctx.tokens == []
    assert "gaps between top tokens move by up to" in b.describe()
    with pytest.raises(ValueError):
        batch_rounding.measure(ctx, prompt, [])


def test_compare_is_the_largest_gap_change() -> None:
    a = np.array([[3.0, 1.0, 0.0, -5.0]], dtype=np.float32)
    b = np.array([[2.9, 1.2, 0.0, -5.0]], dtype=np.float32)
    got = batch_rounding.compare(a, b, top_k=3)
    assert got.gap == pytest.approx(0.3, abs=1e-6) and got.logit == pytest.approx(0.2, abs=1e-6)
    assert got.flips == 0
    flipped = batch_rounding.compare(a, np.array([[1.0, 3.0, 0.0, -5.0]], np.float32), top_k=2)
    assert flipped.flips == 1


def test_margin_at_is_the_plain_decoding_gap(ctx: LlamaContext) -> None:
    prompt = ctx.model.tokenize("the cat sat", add_special=True)
    reply = greedy(ctx, prompt, 8)
    ctx.clear()
    ctx.decode(prompt, logits="none")
    for t in reply[:5]:
        row = ctx.decode([t])[0].copy()
    runner_up = int(np.argsort(row)[-2])
    m = batch_rounding.margin_at(ctx, prompt, reply, 5, runner_up)
    assert m.chosen == reply[5] and m.other == runner_up
    assert m.margin == pytest.approx(float(row[reply[5]] - row[runner_up]), abs=1e-6)
    assert m.margin >= 0  # greedy chose the best
    assert abs(m.batched_margin - m.margin) < 0.05
    first = batch_rounding.margin_at(ctx, prompt, reply, 0, runner_up)
    assert first.position == 0 and first.margin == first.batched_margin
    assert ctx.tokens == []


def test_examine_tells_a_changed_token_from_a_tie(ctx: LlamaContext) -> None:
    prompt = ctx.model.tokenize("hello there", add_special=True)
    plain = greedy(ctx, prompt, 12)
    assert batch_rounding.examine(ctx, prompt, plain, list(plain)) is None
    assert batch_rounding.examine(ctx, prompt, plain, plain[:5]) is None  # stopped early
    ctx.clear()
    ctx.decode(prompt, logits="none")
    for t in plain[:4]:
        row = ctx.decode([t])[0].copy()
    worst = int(np.argmin(row))  # the least likely token: far from any tie
    bad = [*plain[:4], worst, *plain[5:]]
    parting = batch_rounding.examine(ctx, prompt, plain, bad)
    assert parting is not None and parting.position == 4 and not parting.near_tie
    assert parting.bound_source == "measured on this prompt" and parting.margin > 1
    assert parting.verdict().startswith("outputs differ at token 4 — a bug: ")
    tie = batch_rounding.Parting(4, " a", " b", 0.01, 0.05, "calibration")
    assert tie.near_tie and "near-tie" in tie.verdict()
    assert "a bug" in batch_rounding.Parting(4, " a", " b", 0.01, None).verdict()
