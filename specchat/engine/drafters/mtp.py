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
- The chain goes to the one verifier (:mod:`specchat.engine.decode.verify`) like any other draft:
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

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from specchat.engine.decode import arms
from specchat.engine.decode.drafting import DrafterBase, DraftFailed, DraftRequest, Proposal
from specchat.engine.decode.grammar import masked
from specchat.engine.decode.registry import DrafterEnv, Need
from specchat.engine.decode.sampling import Distribution
from specchat.engine.drafters._pick import TokenPicker
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.mtp import MtpContext, MtpFailed, capture_for, hooks_available, n_mtp_layers
from specchat.engine.llama.prefix import common_prefix
from specchat.errors import SpecchatError

NAME = "mtp"
ARM = arms.chain()  # a chain priced by its own steps (the target's MTP layers), after a probe
# Why the target's file cannot draft with MTP layers, as its header says (which layers it ships,
# whether llama.cpp runs them for its architecture: :mod:`specchat.models.mtp` reads it, and
# :mod:`specchat.models.drafter_sources.mtp` provides it); not provided when the file can.
FILE_SAYS: Need[str] = Need("mtp file")

class MtpDrafter(DrafterBase):
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
        # Position 1 on: the MTP cache holds no entry for the first token.
        keep = min(common_prefix(m.fed, seq, 1), n - 1)  # the last entry is evaluated again for its logits
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
        try:
            return self._propose(req)
        except MtpFailed as e:
            raise DraftFailed(str(e), NAME) from e

    def _propose(self, req: DraftRequest) -> Proposal:
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
                d, q, top = self._picker.pick(masked(row, req.grammar, tokens), s, req.rng)
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
            self._ctx.truncate(common_prefix(self._ctx.fed, seq, 1))


def _why_not(env: DrafterEnv) -> str:
    """Why the loaded target cannot draft with its MTP layers (what its file says is
    ``FILE_SAYS``)."""
    model = env.target.model
    label = model.name
    if not hooks_available():
        return "this llama-cpp-python build lacks llama.cpp's MTP hooks (llama_cpp_ext)"
    if n_mtp_layers(model) > 0 and not model.settings.load_mtp:
        return f"{label} was loaded without its MTP layers"
    return f"{label} has no MTP layers that llama.cpp can run: --drafter mtp needs a model " \
        "that ships them"


def build(env: DrafterEnv) -> MtpDrafter:
    file_says = env.get(FILE_SAYS)  # the file's own reason first: it says the most
    if file_says is not None:
        raise SpecchatError(file_says)
    model = env.target.model
    if not hooks_available() or not model.settings.load_mtp \
            or n_mtp_layers(model) <= 0:
        raise SpecchatError(_why_not(env))
    return MtpDrafter(env.target)
