"""A text's hidden states, position by position (:func:`states_over`), for training heads.

The per-decode capability — ``decode_with_hidden``, ``decode_tree_with_hidden``,
``last_hidden``, ``n_embd`` — is declared by the context itself
(:mod:`specchat.engine.llama.hidden_output` says what llama.cpp gives and its catch). Nothing
here holds an ``n_ctx × n_vocab`` buffer: a batch's hidden states are copied out
(``n × n_embd``), and :func:`states_over` walks a long text in chunks, keeping per position
only the hidden state and the target's top tokens.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from specchat.engine.llama.context import LlamaContext
from specchat.errors import Cancelled, SpecchatError


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
            rows, hidden = ctx.decode_with_hidden(part)
            ids, probs = top_of(rows, top)
            yield StateChunk(start, hidden, ids, probs)
            if progress is not None:
                progress(start + len(part), len(tokens))
    finally:
        ctx.truncate(0)
