"""llama.cpp's MTP ("NextN") hooks: the target's published hidden states, and the MTP context.

The bindings behind the ``mtp`` drafter (:mod:`specchat.engine.drafters.mtp`, which says how
the drafting runs). ``llama_cpp_ext`` binds the hooks: ``llama_set_embeddings_nextn`` makes a
context publish the hidden states, ``llama_get_embeddings_nextn[_ith]`` reads them; the MTP
context is a second context of the same model (``ctx_type = LLAMA_CONTEXT_TYPE_MTP``).
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt

from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import flash_attention
from specchat.errors import SpecchatError


class MtpFailed(SpecchatError):
    """llama.cpp could not build or run the MTP layers (the drafter drops out for the reply)."""


_ext: Any
try:  # the hooks are C++ symbols of llama.cpp's staging API: a build may lack them
    from llama_cpp import llama_cpp_ext as _ext
except (ImportError, AttributeError):  # pragma: no cover - depends on the installed build
    _ext = None


def hooks_available() -> bool:
    return _ext is not None


def n_mtp_layers(model: LlamaModel) -> int:
    """MTP layers llama.cpp found in the loaded model (0 without them)."""
    return int(llama_cpp.llama_model_n_layer_nextn(model.ptr))


class HiddenCapture:
    """The target's post-norm hidden state per position, copied as each of its batches ends.

    One per target context (it owns the context's ``on_decode``), shared by every MTP drafter
    built on it. A row is kept with the token it was computed after, so a row of a position
    that was decoded again with another token is never taken for the new one.
    """

    def __init__(self, target: LlamaContext) -> None:
        assert _ext is not None
        self._target = weakref.ref(target)  # the context keeps its capture, not the reverse
        self.n_embd = int(llama_cpp.llama_model_n_embd(target.model.ptr))
        self.rows: dict[int, tuple[int, npt.NDArray[np.float32]]] = {}
        _ext.llama_set_embeddings_nextn(target.ptr, True, False)  # every token, not just logits
        target.on_decode = self._decoded

    def _decoded(self, start: int, tokens: Sequence[int] | None) -> None:
        for p in [p for p in self.rows if p >= start]:
            del self.rows[p]
        if tokens is None:  # a token tree: its rows are not positions of one sequence
            return
        target = self._target()
        assert _ext is not None and target is not None  # the context calls this, so it lives
        ptr = _ext.llama_get_embeddings_nextn(target.ptr)
        if not ptr:
            return  # read as missing when needed (the drafter says so)
        block = np.ctypeslib.as_array(ptr, shape=(len(tokens), self.n_embd))
        for i, t in enumerate(tokens):
            self.rows[start + i] = (int(t), block[i].copy())

    def row(self, position: int, token: int) -> npt.NDArray[np.float32] | None:
        got = self.rows.get(position)
        return got[1] if got is not None and got[0] == token else None

    def forget_before(self, position: int) -> None:
        for p in [p for p in self.rows if p < position]:
            del self.rows[p]


# One capture per target context, shared by the MTP drafters built on it; keyed weakly, so a
# context's lifetime stays its own.
_CAPTURES: weakref.WeakKeyDictionary[LlamaContext, HiddenCapture] = weakref.WeakKeyDictionary()


def capture_for(target: LlamaContext) -> HiddenCapture:
    cap = _CAPTURES.get(target)
    if cap is None:
        cap = _CAPTURES[target] = HiddenCapture(target)
    return cap


class MtpContext:
    """llama.cpp's MTP context over the target's model, and its batch of token + embedding.

    ``fed[p]`` is the token of the entry at position p (position 0 has none: no hidden state
    precedes it), so ``len(fed)`` is where the next entry goes.
    """

    def __init__(self, target: LlamaContext) -> None:
        s = target.settings
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = target.n_ctx
        params.n_batch = params.n_ubatch = target.n_batch
        params.n_seq_max = 1
        params.n_rs_seq = 0
        params.n_threads = target.n_threads
        params.n_threads_batch = target.n_threads_batch
        params.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        params.ctx_other = target.ptr
        params.flash_attn_type = {"on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                                  "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED}.get(
            flash_attention(s.flash_attn, s.type_v), llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO)
        params.no_perf = True
        ptr = llama_cpp.llama_init_from_model(target.model.ptr, params)
        if not ptr:
            raise MtpFailed("llama.cpp could not create the MTP context")
        assert _ext is not None
        self.ptr = ptr
        self.mem = llama_cpp.llama_get_memory(ptr)
        self.n_vocab = target.n_vocab
        self.n_batch = target.n_batch
        self.n_embd = int(llama_cpp.llama_model_n_embd(target.model.ptr))
        # Its own hidden states, unmasked: masked (one row per output) holds the row of the
        # batch's *first* token in 0.3.36, not the output's (measured on the tiny model); a
        # one-token batch, as llama.cpp's draft-mtp feeds, cannot tell the two apart.
        _ext.llama_set_embeddings_nextn(ptr, True, False)
        # llama_batch_init allocates the embedding rows only; the token ids live here (and the
        # pointer is cleared before llama_batch_free, which would free it).
        self.batch = llama_cpp.llama_batch_init(self.n_batch, self.n_embd, 1)
        self._tok_buf = (llama_cpp.llama_token * self.n_batch)()
        self.batch.token = ctypes.cast(self._tok_buf, ctypes.POINTER(llama_cpp.llama_token))
        b = self.batch
        self._tok = np.ctypeslib.as_array(self._tok_buf)
        self._pos = np.ctypeslib.as_array(b.pos, shape=(self.n_batch,))
        self._out = np.ctypeslib.as_array(b.logits, shape=(self.n_batch,))
        self._emb = np.ctypeslib.as_array(b.embd, shape=(self.n_batch, self.n_embd))
        np.ctypeslib.as_array(b.n_seq_id, shape=(self.n_batch,))[:] = 1
        for i in range(self.n_batch):
            b.seq_id[i][0] = 0
        self.fed: list[int] = [-1]
        self.decode_s = 0.0

    def truncate(self, n: int) -> None:
        """Keep the entries of positions < n."""
        n = max(n, 1)
        if n < len(self.fed):
            llama_cpp.llama_memory_seq_rm(self.mem, 0, n, -1)
            del self.fed[n:]

    def feed(self, tokens: Sequence[int], hidden: npt.NDArray[np.float32]
             ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """Append entries (token, hidden row) at the next positions; the logits and the MTP
        layer's output hidden state of the last one (views, valid until the next feed)."""
        n = len(tokens)
        m = 0
        for off in range(0, n, self.n_batch):
            m = min(self.n_batch, n - off)
            start = len(self.fed)
            self._tok[:m] = tokens[off : off + m]
            self._pos[:m] = np.arange(start, start + m)
            self._out[:m] = 0
            self._out[m - 1] = 1 if off + m == n else 0
            self._emb[:m] = hidden[off : off + m]
            self.batch.n_tokens = m
            rc = llama_cpp.llama_decode(self.ptr, self.batch)
            if rc != 0:
                llama_cpp.llama_memory_seq_rm(self.mem, 0, start, -1)
                raise MtpFailed(f"the MTP layers' decode failed ({rc})")
            self.fed.extend(int(t) for t in tokens[off : off + m])
        assert _ext is not None
        logits = llama_cpp.llama_get_logits_ith(self.ptr, -1)
        h = _ext.llama_get_embeddings_nextn_ith(self.ptr, m - 1)  # unmasked: by batch index
        if not logits or not h:
            raise MtpFailed("llama.cpp returned nothing from the MTP layers")
        return (np.ctypeslib.as_array(logits, shape=(self.n_vocab,)),
                np.ctypeslib.as_array(h, shape=(self.n_embd,)))

    def close(self) -> None:
        if getattr(self, "ptr", None):  # FFI: none when __init__ failed before llama.cpp made one
            self.batch.token = None  # ours, not llama.cpp's to free
            llama_cpp.llama_batch_free(self.batch)
            llama_cpp.llama_free(self.ptr)
            self.ptr = None

    def __del__(self) -> None:
        self.close()
