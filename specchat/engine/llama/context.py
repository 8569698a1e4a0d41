"""A KV cache over a loaded model, on llama.cpp's low-level batch API.

``LlamaContext.decode`` evaluates tokens at the end of the cached sequence and returns a
zero-copy view of the logits rows it asked for; ``truncate`` rolls the KV cache back. These two
are all that plain and speculative decoding need. The context tracks which tokens its KV cache
holds, so a new prompt only evaluates what differs from the last one.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence

import llama_cpp
import numpy as np
import numpy.typing as npt

from specchat.engine.llama.hidden_output import HiddenOutput
from specchat.engine.llama.llama_lib import (
    capture_log,
    clear_log,
    last_error,
)
from specchat.engine.llama.load_report import LoadReport
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import (
    FLASH_TYPES,
    KV_CACHE_TYPES,
    ContextSettings,
    default_threads,
    flash_attention,
)
from specchat.engine.llama.prefix import common_prefix
from specchat.engine.llama.token_tree import TokenTree
from specchat.errors import ContextFullError, ModelFileError, SpecchatError

# Batches longer than this (prompt prefill) run with llama.cpp's abort callback installed, so
# ``cancel`` stops them mid-way. Shorter ones (generation steps) run without it: the callback is
# a Python call per graph node (~500 per forward pass for a 30-layer model, ~0.5 ms in all),
# and cancel is checked between steps anyway.
ABORTABLE_BATCH = 16
_NO_ABORT = llama_cpp.ggml_abort_callback(0)


class DecodeCancelled(SpecchatError):
    """A decode was aborted through the context's cancel event."""


class LlamaContext(HiddenOutput, TokenTree):
    """A KV cache (one sequence, and a token tree's) over a model, and a reusable batch;
    hidden states beside the logits on request (:class:`HiddenOutput`). Several requests share
    one through its slots (:mod:`.slots`)."""

    def __init__(self, model: LlamaModel, settings: ContextSettings = ContextSettings()) -> None:
        self.model = model
        self.settings = settings
        n_ctx = settings.n_ctx or model.n_ctx_train
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = min(settings.n_batch, n_ctx)
        params.n_seq_max = max(1, settings.n_seq_max)
        params.kv_unified = True  # else each sequence gets only n_ctx / n_seq_max cells
        # Never more threads than CPUs: it only slows decoding, and llama.cpp asked for
        # 100,000 crashes the process (the CLI says so when it caps a setting).
        cpus = os.cpu_count() or 1
        params.n_threads = min(settings.n_threads or default_threads(), cpus)
        params.n_threads_batch = min(settings.n_threads_batch or params.n_threads, cpus)
        for name, value, known in (("flash attention", settings.flash_attn, FLASH_TYPES),
                                   ("K cache type", settings.type_k, KV_CACHE_TYPES),
                                   ("V cache type", settings.type_v, KV_CACHE_TYPES)):
            if value not in known:
                raise SpecchatError(f"unknown {name} '{value}' (choose from {', '.join(known)})")
        params.flash_attn_type = FLASH_TYPES[flash_attention(settings.flash_attn, settings.type_v)]
        params.type_k = KV_CACHE_TYPES[settings.type_k]
        params.type_v = KV_CACHE_TYPES[settings.type_v]
        params.swa_full = True  # sliding-window models (Gemma 3) must be able to roll back
        params.no_perf = True
        clear_log()
        with capture_log() as lines:
            ctx = llama_cpp.llama_init_from_model(model.ptr, params)
        if not ctx:
            why = last_error() or "out of memory?"
            raise ModelFileError(f"could not create a {n_ctx}-token context for "
                                 f"{model.path.name}: {why}")
        self.ptr = ctx
        # Flash attention as resolved ("auto" becomes on or off per device), KV/compute buffers.
        self.load_report = LoadReport.parse(lines)
        self.n_ctx: int = llama_cpp.llama_n_ctx(ctx)
        self.n_batch: int = llama_cpp.llama_n_batch(ctx)
        self.n_threads: int = llama_cpp.llama_n_threads(ctx)
        self.n_threads_batch: int = llama_cpp.llama_n_threads_batch(ctx)
        self.mem = llama_cpp.llama_get_memory(ctx)
        self.n_seq_max: int = max(1, settings.n_seq_max)
        self.seq_base = 0
        self._sequence_state()
        self.cancel = threading.Event()  # set from any thread to abort a long decode
        me = weakref.ref(self)  # no reference cycle: the context is freed as soon as it is dropped
        self._abort_cb = llama_cpp.ggml_abort_callback(
            lambda _data: (ctx := me()) is not None and ctx.cancel.is_set())
        self._abortable = False
        # Told after each batch this context evaluates: (first position, its tokens), or
        # (first position, None) for a token tree (the positions from there on are not a
        # linear sequence). A drafter that reads the target's hidden states keeps up this way.
        self.on_decode: Callable[[int, Sequence[int] | None], None] | None = None
        # Called before the context is freed: what was built on it (an MTP context) goes first.
        self.on_close: list[Callable[[], None]] = []

    def _sequence_state(self) -> None:
        """The batch and the bookkeeping of this context's sequences: sequence ``seq_base`` holds
        ``tokens``, and a tree's other paths take ``seq_base + 1`` … (the plain context's base
        is 0; a slot of a shared context, :mod:`.slots`, has a base of its own)."""
        self.batch = llama_cpp.llama_batch_init(self.n_batch, 0, self.n_seq_max)
        b = self.batch
        self._tok = np.ctypeslib.as_array(b.token, shape=(self.n_batch,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(self.n_batch,))
        self._out = np.ctypeslib.as_array(b.logits, shape=(self.n_batch,))
        self._n_seq = np.ctypeslib.as_array(b.n_seq_id, shape=(self.n_batch,))
        self._linear_batch()
        self.tokens: list[int] = []  # what the KV cache holds, in order (sequence seq_base)
        # A token tree beyond ``tokens`` (see decode_tree): its shape, and the sequences
        # 1..n that its paths other than the first occupy.
        self._tree_shape: tuple[int, ...] | None = None
        self._tree_seqs = 0
        self._tree_paths: list[tuple[int, ...]] = []  # tree_paths(_tree_shape), once per tree
        self.decode_s = 0.0  # total seconds spent inside llama_decode (for overhead figures)

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    def clock(self) -> float:
        """Seconds on the clock a decoder times its steps with: wall time here; a slot of a
        shared context (:mod:`.slots`) leaves out what it waited for other slots' work."""
        return time.perf_counter()

    def decode(self, tokens: Sequence[int], *, logits: str = "last") -> npt.NDArray[np.float32]:
        """Append ``tokens`` to the cache; return logits rows: ``last`` (1 row), ``all``, or
        ``none`` (0 rows: the tokens only fill the cache).

        The returned array is a view into llama.cpp's buffer, valid until the next decode.
        """
        n = len(tokens)
        if n == 0:
            raise ValueError("decode needs at least one token")
        self.drop_tree()
        start = len(self.tokens)
        if start + n > self.n_ctx:
            raise ContextFullError(f"the context is full ({self.n_ctx} tokens)")
        rows = 0
        for off in range(0, n, self.n_batch):
            chunk = tokens[off : off + self.n_batch]
            m = len(chunk)
            last_chunk = off + m == n
            self._tok[:m] = chunk
            self._pos[:m] = np.arange(start + off, start + off + m)
            self._out[:m] = 1 if (logits == "all" and last_chunk) else 0
            if last_chunk and logits == "last":
                self._out[m - 1] = 1
            rows = m if logits == "all" else 1 if logits == "last" else 0
            self.batch.n_tokens = m
            self._run_batch(m, start + off)
            self.tokens.extend(chunk)
            if self.on_decode is not None:
                self.on_decode(start + off, chunk)
        if logits == "all" and n > self.n_batch:
            raise ValueError("logits for every row need the tokens to fit in one batch")
        if rows == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        return self._logits(rows)

    def _logits(self, rows: int) -> npt.NDArray[np.float32]:
        """The latest batch's first ``rows`` logits rows: a view into llama.cpp's buffer."""
        ptr = llama_cpp.llama_get_logits(self.ptr)
        return np.ctypeslib.as_array(ptr, shape=(rows, self.n_vocab))

    def _linear_batch(self, rows: int | None = None) -> None:
        """Put the batch's first ``rows`` rows (default: all) back in the base sequence alone,
        the layout ``decode`` assumes: after a tree batch only the rows it wrote (a loop over
        every row of a 512-row batch is a measurable share of a small model's step)."""
        n = self.n_batch if rows is None else rows
        self._n_seq[:n] = 1
        seq_id, base = self.batch.seq_id, self.seq_base
        for i in range(n):
            seq_id[i][0] = base

    def _run_batch(self, m: int, start: int) -> None:
        rc = self.llama_decode(self.batch, m)
        if rc != 0:
            self.failed_decode(rc, start)

    def llama_decode(self, batch: llama_cpp.llama_batch, m: int) -> int:
        """llama.cpp's decode of ``batch`` (``m`` rows) on this context, abortable through
        ``cancel`` when it is long; its return code (0: done)."""
        abortable = m > ABORTABLE_BATCH
        if abortable != self._abortable:
            cb = self._abort_cb if abortable else _NO_ABORT
            llama_cpp.llama_set_abort_callback(self.ptr, cb, None)
            self._abortable = abortable
        t0 = time.perf_counter()
        rc: int = llama_cpp.llama_decode(self.ptr, batch)
        self.decode_s += time.perf_counter() - t0
        return rc

    def failed_decode(self, rc: int, start: int) -> None:
        """After llama.cpp's decode returned ``rc`` (not 0) for a batch from ``start``: the
        cache cleaned up, and the error that says why."""
        self._after_failed_decode(start)
        if rc == 2:
            raise DecodeCancelled("cancelled")
        if rc == 1:
            raise ContextFullError(f"no room in the KV cache ({self.n_ctx} tokens)")
        raise SpecchatError(f"llama.cpp decode failed ({rc}): {last_error()}")

    def _after_failed_decode(self, committed: int) -> None:
        # A fatal error or abort can leave part of the batch in the cache: drop it.
        del self.tokens[committed:]
        self.drop_tree()
        llama_cpp.llama_memory_seq_rm(self.mem, self.seq_base, committed, -1)

    def truncate(self, n: int) -> None:
        """Roll the cache back so it holds exactly its first ``n`` tokens."""
        self.drop_tree()
        if n < len(self.tokens):
            llama_cpp.llama_memory_seq_rm(self.mem, self.seq_base, n, -1)
            del self.tokens[n:]

    def common_prefix(self, tokens: Sequence[int]) -> int:
        """How many of the cache's tokens ``tokens`` starts with."""
        return common_prefix(self.tokens, tokens)

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        """Roll the cache back to the longest start of ``tokens`` it can hold without
        evaluating anything, and return its length: here, what it holds already. A slot of a
        shared cache (:mod:`.slots`) also takes a longer start another slot holds."""
        n = self.common_prefix(tokens)
        self.truncate(n)
        return n

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.mem, True)
        self.tokens.clear()
        self._tree_seqs, self._tree_shape = 0, None

    def close(self) -> None:
        if getattr(self, "ptr", None):  # FFI: none when __init__ failed before llama.cpp made one
            for hook in self.on_close:
                hook()
            self.on_close.clear()
            llama_cpp.llama_batch_free(self.batch)
            llama_cpp.llama_free(self.ptr)
            self.ptr = None

    def __del__(self) -> None:
        self.close()
