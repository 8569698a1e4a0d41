"""The target's final hidden state for every output row of a decode, beside its logits.

What llama.cpp 0.3.36 gives (measured on SmolLM2-135M F32, llama architecture, and on the tiny
generated models): with ``llama_set_embeddings(ctx, True)`` on a causal model (pooling type
NONE), ``llama_get_embeddings(ctx)`` is an ``n_outputs × n_embd`` float32 buffer, one row per
batch token whose logits were asked for, in the same order as the logits rows, and
``llama_get_embeddings_ith(ctx, i)`` is row ``i`` of it. Each row is the **post-norm** final
hidden state — the graph's ``result_norm`` tensor, after ``output_norm`` (its RMS divided by
the norm's gain is 1.0) and before the output matrix: ``hidden @ output.weightᵀ`` reproduces the
logits to 4e-5 (logits up to ±33; SmolLM2 ties ``output`` to ``token_embd``), argmax equal on
every row, for linear and tree batches alike. Turning embeddings on changes no logit (max
difference 0.0) and costs one ``n_outputs × n_embd`` copy per decode. Medusa's heads read
exactly this state, so no final norm needs to be applied again.

**But** while embeddings are on, llama.cpp outputs every row of a batch — logits included —
whatever the batch asked for: ``LlamaContext.decode(…, logits="last")`` would then read the
*first* row as the last one, and a prefill with ``logits="none"`` would pay the output matrix
on every token. So this module turns them on only around its own all-rows decodes and off again
(:func:`hidden_states_on`); the context's other decodes are untouched.

Nothing here holds an ``n_ctx × n_vocab`` buffer: a batch's hidden states are copied out
(``n × n_embd``), and :func:`states_over` walks a long text in chunks, keeping per position
only the hidden state and the target's top tokens.

The API, on a :class:`~specchat.engine.llama.model.LlamaContext` (all rows are in batch order, row i
beside logits row i; a tree's row i is node i):

- :func:`decode_with_hidden` ``(ctx, tokens) -> (logits, hidden)``: ``ctx.decode(tokens,
  logits="all")`` plus the hidden states, ``(n, n_embd)`` float32 (a copy).
- :func:`decode_tree_with_hidden` ``(ctx, shape, nodes, tokens) -> (logits, hidden)``: the same
  for ``ctx.decode_tree``.
- :func:`last_hidden` ``(ctx)``: the hidden states of the context's latest decode if it was one
  of those two, else None (a later decode made them stale).
- :func:`states_over` ``(ctx, tokens, chunk=, top=, cancel=, progress=)``: a text's positions
  from an empty cache, in chunks, each a :class:`StateChunk` (hidden states, the target's top-k
  next-token ids and probabilities).
- :class:`HiddenStateError` when llama.cpp returns none (or NaN/∞ ones).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import llama_cpp
import numpy as np
import numpy.typing as npt

from specchat.engine.llama.model import LlamaContext
from specchat.errors import Cancelled, SpecchatError


class HiddenStateError(SpecchatError):
    """llama.cpp returned no hidden states for a decode."""


def n_embd(ctx: LlamaContext) -> int:
    """The width of the target's hidden state."""
    own = getattr(ctx, "n_embd", None)  # a stand-in context (devtools.scripted) says its own
    if isinstance(own, int):
        return own
    return int(llama_cpp.llama_model_n_embd(ctx.model.ptr))


@contextlib.contextmanager
def hidden_states_on(ctx: LlamaContext) -> Iterator[None]:
    """llama.cpp's embeddings output on for the decodes inside the block (then as before).

    While it is on, llama.cpp outputs *every* row of a batch (logits too), so only decodes
    with ``logits="all"`` belong inside: :func:`decode_with_hidden` and friends.
    """
    was = bool(getattr(ctx, "_hidden_on", False))
    if not was:
        llama_cpp.llama_set_embeddings(ctx.ptr, True)
        ctx._hidden_on = True  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if not was:
            llama_cpp.llama_set_embeddings(ctx.ptr, False)
            ctx._hidden_on = False  # type: ignore[attr-defined]


def _read(ctx: LlamaContext, n: int) -> npt.NDArray[np.float32]:
    ptr = llama_cpp.llama_get_embeddings(ctx.ptr)
    if n <= 0 or not ptr:
        raise HiddenStateError(f"llama.cpp returned no hidden states for {ctx.model.path.name}")
    hidden = np.ctypeslib.as_array(ptr, shape=(n, n_embd(ctx))).copy()
    if not np.isfinite(hidden).all():
        raise HiddenStateError(f"{ctx.model.path.name} produced NaN or infinite hidden states")
    # Marked with the context's decode clock: any later decode makes it stale (last_hidden).
    ctx._last_hidden = (ctx.decode_s, hidden)  # type: ignore[attr-defined]
    return hidden


def decode_with_hidden(ctx: LlamaContext, tokens: Sequence[int]
                       ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Append ``tokens`` (one batch at most) to the cache: every row's logits (a view, as
    ``ctx.decode(tokens, logits="all")`` returns) and hidden state ``(n, n_embd)`` (a copy)."""
    own = getattr(ctx, "decode_with_hidden", None)
    if own is not None:  # a stand-in context computes its own (devtools.scripted)
        rows, hidden = own(tokens)
        ctx._last_hidden = (ctx.decode_s, hidden)  # type: ignore[attr-defined]
        return rows, hidden
    with hidden_states_on(ctx):
        rows = ctx.decode(tokens, logits="all")
        return rows, _read(ctx, rows.shape[0])


def decode_tree_with_hidden(ctx: LlamaContext, shape: Sequence[int], nodes: Sequence[int],
                            tokens: Sequence[int]
                            ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """``ctx.decode_tree(shape, nodes, tokens)`` and each node's hidden state (a copy)."""
    own = getattr(ctx, "decode_tree_with_hidden", None)
    if own is not None:
        rows, hidden = own(shape, nodes, tokens)
        ctx._last_hidden = (ctx.decode_s, hidden)  # type: ignore[attr-defined]
        return rows, hidden
    with hidden_states_on(ctx):
        rows = ctx.decode_tree(shape, nodes, tokens)
        return rows, _read(ctx, rows.shape[0])


def last_hidden(ctx: LlamaContext) -> npt.NDArray[np.float32] | None:
    """The hidden states of ``ctx``'s latest decode when it was one of the above, else None
    (another decode ran since, so they no longer describe its cache)."""
    mark = getattr(ctx, "_last_hidden", None)
    if mark is None or mark[0] != ctx.decode_s:
        return None
    hidden: npt.NDArray[np.float32] = mark[1]
    return hidden


@dataclass(frozen=True)
class StateChunk:
    """Positions ``start … start + n − 1`` of a text: what the target computed at each.

    Row i is position ``start + i`` (after reading ``tokens[start + i]``): its post-norm hidden
    state and the target's ``top`` most likely next tokens (the token at position
    ``start + i + 1``) with their probabilities at temperature 1, most likely first.
    """

    start: int
    hidden: npt.NDArray[np.float32]  # (n, n_embd), a copy
    top_ids: npt.NDArray[np.int32]  # (n, top)
    top_probs: npt.NDArray[np.float32]  # (n, top)


def top_of(rows: npt.NDArray[np.float32], k: int
           ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]:
    """Each row's k largest entries (ids, softmax probabilities over the whole row), best first."""
    k = min(k, rows.shape[1])
    idx = np.argpartition(-rows, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(rows, idx, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    idx, vals = np.take_along_axis(idx, order, axis=1), np.take_along_axis(vals, order, axis=1)
    m = rows.max(axis=1, keepdims=True)
    z = np.exp((rows - m).astype(np.float64)).sum(axis=1, keepdims=True)
    probs = np.exp((vals - m).astype(np.float64)) / z
    return idx.astype(np.int32), probs.astype(np.float32)


def states_over(ctx: LlamaContext, tokens: Sequence[int], *, chunk: int = 64, top: int = 8,
                cancel: threading.Event | None = None,
                progress: Callable[[int, int], None] | None = None) -> Iterator[StateChunk]:
    """Evaluate ``tokens`` from an empty cache, ``chunk`` at a time, yielding each chunk's
    hidden states and the target's top next tokens (see :class:`StateChunk`).

    Logits are asked for only ``chunk`` rows at a time, so memory stays chunk × n_vocab.
    ``progress(done, total)`` is called after each chunk; a set ``cancel`` raises
    :class:`~specchat.errors.Cancelled` between chunks. The cache is left empty.
    """
    if not tokens:
        return
    if len(tokens) > ctx.n_ctx:
        raise SpecchatError(f"a text of {len(tokens)} tokens does not fit the "
                            f"{ctx.n_ctx}-token context")
    chunk = max(1, min(chunk, ctx.n_batch))
    ctx.truncate(0)
    try:
        for start in range(0, len(tokens), chunk):
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled")
            part = tokens[start : start + chunk]
            rows, hidden = decode_with_hidden(ctx, part)
            ids, probs = top_of(rows, top)
            yield StateChunk(start, hidden, ids, probs)
            if progress is not None:
                progress(start + len(part), len(tokens))
    finally:
        ctx.truncate(0)
