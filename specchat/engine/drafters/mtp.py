"""The target's own MTP ("NextN") layers as its draft ("mtp"; DeepSeek-V3, GLM-4.5, Qwen3.5).

A model trained with multi-token prediction ships extra blocks that read the trunk's final
hidden state h at position p−1 together with the embedding of token p, and predict token p+1
(see :mod:`specchat.models.mtp` for how a GGUF stores them). llama.cpp 0.3.36 runs them in a
second context of the same model (``ctx_type = LLAMA_CONTEXT_TYPE_MTP``, ``ctx_other`` = the
target's context), fed batches that carry a token *and* an embedding row per position;
``llama_cpp_ext`` binds the hooks (``llama_set_embeddings_nextn`` makes a context publish the
hidden states, ``llama_get_embeddings_nextn[_ith]`` reads them).

How it runs here:

- The target publishes the post-norm hidden state of every token it evaluates (unmasked,
  prompt chunks included) and this module copies them per position as each batch ends
  (``LlamaContext.on_decode``), so nothing is lost between a decode and the next step. With
  this on, the target's logits rows are still the ones asked for; they move by ~1e-6 (its graph
  then keeps every row to the end), which cannot matter to exactness but can flip a near-tie.
- The MTP context has its own KV cache, holding for positions p ≥ 1 the entry
  (token p, h of p−1) of the committed sequence. Before drafting it is brought up to the
  sequence's last token (common prefix kept, the rest fed from the captured states); the logits
  of that last entry give the first draft token. Each further token is fed back with the MTP
  layer's own output hidden state in place of the target's (which does not exist yet), as
  llama.cpp's own ``draft-mtp`` does. Draft entries are dropped after the step.
- The chain goes to the one verifier (:mod:`specchat.engine.verify`) like any other draft:
  exact whatever the heads propose. Under sampling the tokens are drawn from q, the MTP logits
  after the target's sampler transform.

What was tested, and what was not: the whole path above ran through llama.cpp on a generated
tiny ``glm4moe`` model with one MTP block (``devtools.tiny_models.write_tiny_mtp_model``):
context creation, the unmasked capture (equal to ``llama_get_embeddings_nextn_ith`` and
post-norm: ``h @ output.weightᵀ`` = the target's logits), catch-up after a prompt, a reused
prefix and rejected drafts, greedy output equal to plain greedy, and sampling exact by a
transition χ². The tiny model's MTP block has random weights, so it says nothing about
acceptance. Untested: any real MTP model (none can be downloaded here), the architectures other
than glm4moe, models with more than one MTP block (llama.cpp 0.3.36 runs only one for most
architectures; this drafter uses the first), GPU offload of the MTP context, and speed. A
malformed MTP block makes llama.cpp abort the process (GGML_ASSERT) when the MTP context is
built, so it is built on the first step that asks for it, never when the drafter is only named.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt

from specchat.engine.drafters import ChainDefault, DrafterEnv, DraftFailed, DraftRequest, Proposal
from specchat.engine.drafters._pick import TokenPicker
from specchat.engine.model import LlamaContext, LlamaModel
from specchat.engine.model_settings import flash_attention
from specchat.engine.sampling import Distribution

NAME = "mtp"

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
        self.target = target
        self.n_embd = int(llama_cpp.llama_model_n_embd(target.model.ptr))
        self.rows: dict[int, tuple[int, npt.NDArray[np.float32]]] = {}
        _ext.llama_set_embeddings_nextn(target.ptr, True, False)  # every token, not just logits
        target.on_decode = self._decoded

    def _decoded(self, start: int, tokens: Sequence[int] | None) -> None:
        for p in [p for p in self.rows if p >= start]:
            del self.rows[p]
        if tokens is None:  # a token tree: its rows are not positions of one sequence
            return
        assert _ext is not None
        ptr = _ext.llama_get_embeddings_nextn(self.target.ptr)
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


def capture_for(target: LlamaContext) -> HiddenCapture:
    cap = getattr(target, "_mtp_capture", None)
    if not isinstance(cap, HiddenCapture):
        cap = HiddenCapture(target)
        setattr(target, "_mtp_capture", cap)  # noqa: B010 - one capture per context
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
            raise DraftFailed("llama.cpp could not create the MTP context", NAME)
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
                raise DraftFailed(f"the MTP layers' decode failed ({rc})", NAME)
            self.fed.extend(int(t) for t in tokens[off : off + m])
        assert _ext is not None
        logits = llama_cpp.llama_get_logits_ith(self.ptr, -1)
        h = _ext.llama_get_embeddings_nextn_ith(self.ptr, m - 1)  # unmasked: by batch index
        if not logits or not h:
            raise DraftFailed("llama.cpp returned nothing from the MTP layers", NAME)
        return (np.ctypeslib.as_array(logits, shape=(self.n_vocab,)),
                np.ctypeslib.as_array(h, shape=(self.n_embd,)))

    def close(self) -> None:
        if getattr(self, "ptr", None):
            self.batch.token = None  # ours, not llama.cpp's to free
            llama_cpp.llama_batch_free(self.batch)
            llama_cpp.llama_free(self.ptr)
            self.ptr = None

    def __del__(self) -> None:
        self.close()


class MtpDrafter(ChainDefault):
    name = NAME

    def __init__(self, target: LlamaContext) -> None:
        self.target = target
        self.cap = capture_for(target)  # before the first prefill, so no state is missed
        self._ctx: MtpContext | None = None
        self._h: npt.NDArray[np.float32] = np.zeros(0, dtype=np.float32)  # the last entry's
        self._picker = TokenPicker()

    @property
    def ctx(self) -> MtpContext:
        if self._ctx is None:
            self._ctx = MtpContext(self.target)
            self.target.on_close.append(self._ctx.close)  # freed before the model it uses
        return self._ctx

    def _sync(self, seq: Sequence[int]) -> npt.NDArray[np.float32]:
        """Bring the MTP cache to the entries of ``seq`` (positions 1 … len − 1); the logits
        for the token after ``seq``."""
        m = self.ctx
        n = len(seq)
        keep = 1
        fed = m.fed
        while keep < min(len(fed), n) and fed[keep] == seq[keep]:
            keep += 1
        keep = min(keep, n - 1)  # the last entry is evaluated again for its logits
        m.truncate(keep)
        missing = next((p - 1 for p in range(keep, n) if self.cap.row(p - 1, seq[p - 1]) is None),
                       None)
        if missing is not None:
            self._recompute(seq, missing)
        rows = []
        for p in range(keep, n):
            h = self.cap.row(p - 1, seq[p - 1])
            if h is None:
                raise DraftFailed(f"the target kept no hidden state at position {p - 1}", NAME)
            rows.append(h)
        logits, self._h = m.feed(seq[keep:], np.stack(rows))
        self.cap.forget_before(n - 2)  # older rows are in the MTP cache for good
        return logits

    def _recompute(self, seq: Sequence[int], start: int) -> None:
        """Evaluate the target's cached tokens from ``start`` again, for their hidden states:
        they were cached before this drafter was there (a plain reply on the same context, or
        a token tree checked by another drafter). The cache ends as it was: ``seq[:-1]``."""
        tgt = self.target
        held = len(tgt.tokens)
        if held != len(seq) - 1 or start >= held:
            raise DraftFailed(f"the target kept no hidden state at position {start}", NAME)
        tgt.truncate(start)
        tgt.decode(seq[start:held], logits="none")

    def propose(self, req: DraftRequest) -> Proposal:
        seq, s = req.seq, req.settings
        if len(seq) < 2:
            return Proposal(self.name)
        m = self.ctx
        gamma = min(req.plan.depth, m.n_batch, self.target.n_ctx - len(seq) + 1)
        if gamma <= 0:
            return Proposal(self.name)
        row = self._sync(seq)
        tokens: list[int] = []
        qs: list[Distribution] = []
        eog = self.target.model.is_eog
        try:
            while True:
                d, q, top = self._picker.pick(row, s, req.rng)
                tokens.append(d)
                qs.append(q)
                if eog(d) or not req.keep_drafting(len(tokens), top) or len(tokens) >= gamma:
                    break
                # The target's hidden state after d does not exist yet: the MTP layer's own
                # output stands in for it (what llama.cpp's draft-mtp feeds back too).
                row, self._h = m.feed((d,), self._h.copy()[None, :])
        finally:
            m.truncate(len(seq))  # draft entries go; the committed ones stay
        return Proposal(self.name, tuple(tokens), tuple(range(-1, len(tokens) - 1)), tuple(qs))

    def settle(self, seq: Sequence[int]) -> None:
        if self._ctx is not None:
            fed = self._ctx.fed
            keep = 1
            while keep < min(len(fed), len(seq)) and fed[keep] == seq[keep]:
                keep += 1
            self._ctx.truncate(keep)




def why_not(env: DrafterEnv) -> str:
    """Why the target cannot draft with its MTP layers (the runtime says more, from the file's
    header: see :mod:`specchat.models.mtp`)."""
    model = env.target.model
    label = model.name if isinstance(model, LlamaModel) else "the model"
    if _ext is None:
        return "this llama-cpp-python build lacks llama.cpp's MTP hooks (llama_cpp_ext)"
    if isinstance(model, LlamaModel) and n_mtp_layers(model) > 0 and not model.settings.load_mtp:
        return f"{label} was loaded without its MTP layers"
    return f"{label} has no MTP layers that llama.cpp can run: --drafter mtp needs a model " \
        "that ships them"


def build(env: DrafterEnv) -> MtpDrafter | None:
    model = env.target.model
    if _ext is None or not isinstance(model, LlamaModel) or not model.settings.load_mtp:
        return None
    if n_mtp_layers(model) <= 0:
        return None
    return MtpDrafter(env.target)
