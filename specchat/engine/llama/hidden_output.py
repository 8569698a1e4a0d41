"""The target's final hidden state for every output row of a decode, beside its logits: a
capability every context declares (:class:`HiddenOutput`, a base of ``LlamaContext``).

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
whatever the batch asked for: ``decode(…, logits="last")`` would then read the *first* row as
the last one, and a prefill with ``logits="none"`` would pay the output matrix on every token.
So embeddings are on only around these all-rows decodes and off again; the context's other
decodes are untouched.

The capability (all rows in batch order, row i beside logits row i; a tree's row i is node i):

- ``n_embd``: the width of the hidden state;
- ``decode_with_hidden(tokens) -> (logits, hidden)``: ``decode(tokens, logits="all")`` plus the
  hidden states, ``(n, n_embd)`` float32 (a copy);
- ``decode_tree_with_hidden(shape, nodes, tokens) -> (logits, hidden)``: the same for
  ``decode_tree``;
- ``last_hidden()``: the hidden states of the context's latest decode if it was one of those
  two, else None (a later decode made them stale);
- :class:`HiddenStateError` when llama.cpp returns none (or NaN/∞ ones).

A test's scripted context (``specchat.devtools.scripted``) declares the same four members.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import llama_cpp
import numpy as np
import numpy.typing as npt

from specchat.errors import SpecchatError

if TYPE_CHECKING:
    from specchat.engine.llama.side_branch import SideBranch


class HiddenStateError(SpecchatError):
    """llama.cpp returned no hidden states for a decode."""


class HiddenOutput:
    """The hidden-state capability of a llama.cpp context (see the module's docstring)."""

    # The decode clock (``decode_s``) and the states of the latest decode that read them: any
    # later decode moves the clock, which makes them stale.
    _last_hidden: tuple[float, npt.NDArray[np.float32]] | None = None
    _embeddings_on = False

    if TYPE_CHECKING:  # what the context this is a base of provides
        ptr: Any
        model: Any
        decode_s: float

        def decode(self, tokens: Sequence[int], *, logits: str = "last"
                   ) -> npt.NDArray[np.float32]: ...

        def decode_tree(self, shape: Sequence[int], nodes: Sequence[int],
                        tokens: Sequence[int], side: SideBranch | None = None
                        ) -> npt.NDArray[np.float32]: ...

    @property
    def n_embd(self) -> int:
        """The width of the model's hidden state."""
        return int(llama_cpp.llama_model_n_embd(self.model.ptr))

    @contextlib.contextmanager
    def _hidden_states_on(self) -> Iterator[None]:
        """llama.cpp's embeddings output on for the decodes inside the block (then as before)."""
        was = self._embeddings_on
        if not was:
            llama_cpp.llama_set_embeddings(self.ptr, True)
            self._embeddings_on = True
        try:
            yield
        finally:
            if not was:
                llama_cpp.llama_set_embeddings(self.ptr, False)
                self._embeddings_on = False

    def _read_hidden(self, n: int) -> npt.NDArray[np.float32]:
        ptr = llama_cpp.llama_get_embeddings(self.ptr)
        if n <= 0 or not ptr:
            raise HiddenStateError(
                f"llama.cpp returned no hidden states for {self.model.path.name}")
        hidden = np.ctypeslib.as_array(ptr, shape=(n, self.n_embd)).copy()
        if not np.isfinite(hidden).all():
            raise HiddenStateError(
                f"{self.model.path.name} produced NaN or infinite hidden states")
        self._last_hidden = (self.decode_s, hidden)
        return hidden

    def decode_with_hidden(self, tokens: Sequence[int]
                           ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """Append ``tokens`` (one batch at most) to the cache: every row's logits (a view, as
        ``decode(tokens, logits="all")`` returns) and hidden state ``(n, n_embd)`` (a copy)."""
        with self._hidden_states_on():
            rows = self.decode(tokens, logits="all")
            return rows, self._read_hidden(rows.shape[0])

    def decode_tree_with_hidden(self, shape: Sequence[int], nodes: Sequence[int],
                                tokens: Sequence[int]
                                ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """``decode_tree(shape, nodes, tokens)`` and each node's hidden state (a copy)."""
        with self._hidden_states_on():
            rows = self.decode_tree(shape, nodes, tokens)
            return rows, self._read_hidden(rows.shape[0])

    def last_hidden(self) -> npt.NDArray[np.float32] | None:
        """The hidden states of the latest decode when it was one of the two above, else None
        (another decode ran since, so they no longer describe the cache)."""
        mark = self._last_hidden
        if mark is None or mark[0] != self.decode_s:
            return None
        return mark[1]
