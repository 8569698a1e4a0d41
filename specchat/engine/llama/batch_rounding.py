"""How much this build's logits move with batch shape, and how close a greedy choice was.

llama.cpp does not promise bit-identical logits across batch sizes: a position evaluated inside a
batch of tokens (as verification does) can come out a few hundredths of a logit away from the same
position evaluated one token at a time (as plain decoding does), on the CPU as on GPUs. Greedy
speculative decoding then matches plain decoding except where the target's two best tokens are
closer than that rounding. :func:`measure` bounds it for a model — the largest change, between the
two evaluations, of the gap between a position's best token and any of its top candidates — and
:func:`margin_at` tells how close the choice at one position was, so a divergence can be called a
near-tie within the measured rounding, or a bug.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from specchat.engine.llama.context import DecodeCancelled, LlamaContext

TOP_K = 8
CHUNKS = (2, 3, 4, 5, 6, 8)  # verification batch sizes (γ + 1) the chunked pass cycles through


@dataclass(frozen=True)
class RoundingBound:
    gap: float  # logits: the most the gap between the best token and a top candidate moved
    logit: float  # logits: the most one top candidate's logit moved
    positions: int
    flips: int  # positions whose best token differed between the evaluations

    def describe(self) -> str:
        return (f"gaps between top tokens move by up to {self.gap:.3f} logits with batch shape "
                f"({self.positions} positions, {self.flips} flipped)")


def _rows_single(ctx: LlamaContext, prompt: Sequence[int], tokens: Sequence[int],
                 cancel: threading.Event | None) -> npt.NDArray[np.float32]:
    """Logits after each of ``tokens``, fed one at a time (plain decoding's shape)."""
    ctx.clear()
    ctx.decode(prompt, logits="none")
    rows = []
    for t in tokens:
        if cancel is not None and cancel.is_set():
            raise DecodeCancelled("cancelled")
        rows.append(ctx.decode([t])[0].copy())
    return np.stack(rows)


def _rows_batched(ctx: LlamaContext, prompt: Sequence[int], tokens: Sequence[int],
                  chunks: Sequence[int]) -> npt.NDArray[np.float32]:
    """Logits after each of ``tokens``, fed in batches cycling through ``chunks`` sizes."""
    ctx.clear()
    ctx.decode(prompt, logits="none")
    rows: list[npt.NDArray[np.float32]] = []
    i = k = 0
    while i < len(tokens):
        size = chunks[k % len(chunks)]
        part = tokens[i:i + size]
        rows.extend(ctx.decode(part, logits="all").copy())
        i += len(part)
        k += 1
    return np.stack(rows)


def compare(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32],
            top_k: int = TOP_K) -> RoundingBound:
    """The bound between two evaluations of the same positions (rows)."""
    gap = logit = 0.0
    flips = 0
    for ra, rb in zip(a, b, strict=True):
        cand = np.union1d(np.argpartition(ra, -top_k)[-top_k:], np.argpartition(rb, -top_k)[-top_k:])
        d = ra[cand].astype(np.float64) - rb[cand].astype(np.float64)
        best = int(np.argmax(ra[cand]))  # the gaps that decide a greedy choice: to the best
        gap = max(gap, float(np.abs(d - d[best]).max()))
        logit = max(logit, float(np.abs(d).max()))
        flips += int(np.argmax(ra) != np.argmax(rb))
    return RoundingBound(gap, logit, len(a), flips)


def measure(ctx: LlamaContext, prompt: Sequence[int], tokens: Sequence[int],
            cancel: threading.Event | None = None, top_k: int = TOP_K) -> RoundingBound:
    """Evaluate ``prompt + tokens`` one token at a time, as one batch, and in verification-sized
    batches; the bound is the larger of the two comparisons with the one-at-a-time pass.

    Leaves the context empty. Costs about two plain passes over ``tokens``.
    """
    if not tokens:
        raise ValueError("measuring batch rounding needs at least one token")
    single = _rows_single(ctx, prompt, tokens, cancel)
    whole = _rows_batched(ctx, prompt, tokens, (len(tokens),))
    chunked = _rows_batched(ctx, prompt, tokens, CHUNKS)
    ctx.clear()
    one, two = compare(single, whole, top_k), compare(single, chunked, top_k)
    return RoundingBound(max(one.gap, two.gap), max(one.logit, two.logit), len(tokens),
                         max(one.flips, two.flips))


@dataclass(frozen=True)
class Margin:
    position: int  # reply position of the choice
    chosen: int  # the token plain decoding chose there
    other: int  # the token the other run chose
    margin: float  # logits: chosen minus other, as plain decoding saw them (≥ 0 when greedy)
    batched_margin: float  # the same gap with the position evaluated inside one batch


def margin_at(ctx: LlamaContext, prompt: Sequence[int], reply: Sequence[int], position: int,
              other: int) -> Margin:
    """How far apart ``reply[position]`` and ``other`` were for the target at that position,
    evaluated as plain decoding does (one token at a time) and inside one batch. Leaves the
    context empty."""
    chosen = reply[position]
    before = list(reply[:position])
    ctx.clear()
    if before:
        ctx.decode(prompt, logits="none")
        row = None
        for t in before:
            row = ctx.decode([t])[0]
        assert row is not None
        plain = float(row[chosen]) - float(row[other])
    else:
        row = ctx.decode(prompt)[0]
        plain = float(row[chosen]) - float(row[other])
    ctx.clear()
    if before:
        ctx.decode(prompt, logits="none")
        rows = ctx.decode(before, logits="all")
        batched = float(rows[-1][chosen]) - float(rows[-1][other])
    else:
        batched = plain
    ctx.clear()
    return Margin(position, chosen, other, plain, batched)


ROUNDING_TOKENS = 32  # reply tokens a bound measured on the spot evaluates


@dataclass(frozen=True)
class Parting:
    """Where a greedy reply parted from plain decoding's, and how close the choice was."""

    position: int
    chosen: str  # the token plain decoding chose there
    other: str  # the token the other run chose
    margin: float  # logits between the two, as plain decoding saw them
    bound: float | None  # this build's measured batch rounding (gap change), if known
    bound_source: str = ""  # "calibration" | "measured on this prompt"

    @property
    def near_tie(self) -> bool:
        return self.bound is not None and abs(self.margin) <= self.bound

    def verdict(self) -> str:
        tie = f"{self.chosen!r} vs {self.other!r}, margin {abs(self.margin):.3f} logits"
        if self.bound is None:
            return f"outputs differ at token {self.position} — a bug: {tie}"
        if self.near_tie:
            return (f"parted at a near-tie at token {self.position}: {tie}, within this build's "
                    f"batch rounding (measured: up to {self.bound:.3f}) — not a bug")
        return (f"outputs differ at token {self.position} — a bug: {tie}, beyond this build's "
                f"batch rounding (measured: up to {self.bound:.3f})")


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where two token sequences differ (a length counts), or None."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def examine(ctx: LlamaContext, prompt: Sequence[int], plain: Sequence[int],
            other: Sequence[int], bound: float | None = None) -> Parting | None:
    """How close the target's choice was where ``other`` parts from greedy ``plain``, against
    ``bound`` (else measured now on ``plain``). None when they do not part at a choice (equal,
    or one stops early). Leaves the context empty."""
    position = first_difference(plain, other)
    if position is None or position >= len(plain) or position >= len(other):
        return None
    if position + 1 > ctx.n_batch:
        return None  # the batched view of the prefix would not fit in one batch
    source = "calibration"
    if bound is None:
        bound = measure(ctx, prompt, list(plain[:ROUNDING_TOKENS])).gap
        source = "measured on this prompt"
    m = margin_at(ctx, prompt, plain, position, other[position])
    model = ctx.model
    return Parting(position, model.token_text(m.chosen), model.token_text(m.other), m.margin,
                   bound, source)
