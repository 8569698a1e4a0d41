"""How often a draft predicts what the target would: teacher forcing over a committed sequence.

Both models read the same tokens (a prompt, then a continuation); at every position of the
continuation we compare what each would emit next. The fraction of positions where the greedy
choices agree is the greedy acceptance rate α; with sampler settings, Σ min(p, q) at each
position is the probability that rejection sampling keeps the draft's token. No speculative
decoder is involved, so this measures the *pair*, not an implementation, and it can replay any
conversation (calibration uses a greedy reply of the target; auto-γ can replay chat history).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from specchat.engine.decode.decoding import prefill
from specchat.engine.decode.sampling import SamplerSettings, distribution
from specchat.engine.drafters._cross_vocab import CrossVocabDraft
from specchat.engine.llama.context import DecodeCancelled, LlamaContext


@dataclass(frozen=True)
class AgreementTrace:
    """Per position of the continuation: the target's and the draft's next-token choice."""

    target_tokens: list[int]
    draft_tokens: list[int]
    accept_probs: list[float] | None = None  # Σ min(p, q) under the settings, if asked
    draft_top: list[float] | None = None  # the draft's top-1 probability (greedy), if asked

    @property
    def agree(self) -> list[bool]:
        return [t == d for t, d in zip(self.target_tokens, self.draft_tokens, strict=True)]

    @property
    def positions(self) -> int:
        return len(self.target_tokens)

    @property
    def alpha(self) -> float:
        """Greedy acceptance rate: the fraction of positions where the argmaxes agree."""
        a = self.agree
        return sum(a) / len(a) if a else 0.0

    @property
    def alpha_sampled(self) -> float | None:
        if self.accept_probs is None:
            return None
        return float(np.mean(self.accept_probs)) if self.accept_probs else 0.0


def greedy_continuation(ctx: LlamaContext, prompt: Sequence[int], max_tokens: int,
                        cancel: threading.Event | None = None, include_eog: bool = False
                        ) -> list[int]:
    """The target's own greedy reply to ``prompt``: it ends before an end-of-generation token,
    or with it (``include_eog``, as a decoder commits it; it counts towards ``max_tokens``)."""
    if cancel is not None:
        ctx.cancel = cancel
    row, _ = prefill(ctx, prompt)
    out: list[int] = []
    while len(out) < max_tokens:
        token = int(np.argmax(row))
        if ctx.model.is_eog(token) or len(ctx.tokens) + 1 > ctx.n_ctx:
            if include_eog and ctx.model.is_eog(token):
                out.append(token)
            break
        out.append(token)
        if cancel is not None and cancel.is_set():
            raise DecodeCancelled("cancelled")
        row = ctx.decode((token,), logits="last")[0]
    return out


def agreement_trace(target: LlamaContext, draft: LlamaContext, prompt: Sequence[int],
                    continuation: Sequence[int], settings: SamplerSettings | None = None,
                    draft_top: bool = False, draft_stepwise: bool = False) -> AgreementTrace:
    """Teacher-force both models over ``prompt + continuation`` and compare, position by position,
    their predictions of each continuation token; with ``draft_top``, also record the draft's
    top-1 probability at each position (what a confidence-based early stop reads).

    ``draft_stepwise`` decodes the draft one token at a time, as a drafter does: on a CPU a
    quantized model's logits differ slightly between a batch and single tokens (other matmul
    kernels), enough to flip a near tie — a replay must see what the drafter saw.

    The draft only proposes ids both vocabularies share (as the decoder does). Leaves both caches
    holding ``prompt + continuation[:-1]``, so a replay of a growing chat reuses its prefix.
    """
    n_shared = min(target.n_vocab, draft.n_vocab)
    sampled = settings is not None and not settings.greedy
    t_out: list[int] = []
    d_out: list[int] = []
    probs: list[float] = []
    tops: list[float] | None = [] if draft_top else None
    if not continuation:
        return AgreementTrace([], [], [] if sampled else None, tops)
    t_row, _ = prefill(target, prompt)
    if draft_stepwise:  # as the decoder does: the prompt but its last token, then that one
        keep = min(draft.common_prefix(prompt), len(prompt) - 1)
        draft.truncate(keep)
        if keep < len(prompt) - 1:
            draft.decode(prompt[keep:-1], logits="none")
        d_row = draft.decode(prompt[-1:], logits="last")[0]
    else:
        d_row, _ = prefill(draft, prompt)
    _compare(t_row[None, :], d_row[None, :], n_shared, settings if sampled else None,
             t_out, d_out, probs)
    _tops(d_row[None, :n_shared], tops)
    rest = list(continuation[:-1])
    step = min(target.n_batch, draft.n_batch)
    for off in range(0, len(rest), step):
        chunk = rest[off : off + step]
        t_rows = target.decode(chunk, logits="all")
        if draft_stepwise:
            d_rows = np.stack([np.array(draft.decode((t,), logits="last")[0]) for t in chunk])
        else:
            d_rows = draft.decode(chunk, logits="all")  # each context keeps its own buffer
        _compare(t_rows, d_rows, n_shared, settings if sampled else None, t_out, d_out, probs)
        _tops(d_rows[:, :n_shared], tops)
    return AgreementTrace(t_out, d_out, probs if sampled else None, tops)


def cross_agreement_trace(target: LlamaContext, draft: LlamaContext, prompt: Sequence[int],
                          continuation: Sequence[int],
                          cancel: threading.Event | None = None) -> AgreementTrace:
    """:func:`agreement_trace` (greedy, with the draft's top-1 probability) for a draft whose
    vocabulary differs: at each position the draft reads its own tokenisation of the text so
    far (prefix reused) and proposes among the shared tokens, as the TLI drafter does. The
    target's choices are the continuation's own tokens (its greedy reply)."""
    cv = CrossVocabDraft(target, draft)
    d_out: list[int] = []
    tops: list[float] = []
    seq = list(prompt)
    for t in continuation:
        if cancel is not None and cancel.is_set():
            raise DecodeCancelled("cancelled")
        d, top = cv.greedy_next(seq)
        d_out.append(d)
        tops.append(top)
        seq.append(int(t))
    return AgreementTrace(list(continuation), d_out, None, tops)


def _tops(rows: npt.NDArray[np.float32], out: list[float] | None) -> None:
    """Append each row's top-1 softmax probability (row by row: a chunk at once would hold
    rows × vocabulary floats)."""
    if out is None:
        return
    for row in rows:
        z = np.exp(row - row.max())
        out.append(float(1.0 / z.sum(dtype=np.float64)))


def _compare(t_rows: npt.NDArray[np.float32], d_rows: npt.NDArray[np.float32], n_shared: int,
             settings: SamplerSettings | None, t_out: list[int], d_out: list[int],
             probs: list[float]) -> None:
    t_out.extend(int(i) for i in np.argmax(t_rows, axis=1))
    d_out.extend(int(i) for i in np.argmax(d_rows[:, :n_shared], axis=1))
    if settings is None:
        return
    for t_row, d_row in zip(t_rows, d_rows, strict=True):
        p = distribution(t_row, settings)
        q = distribution(d_row[:n_shared], settings)
        q_of = dict(zip(q.ids.tolist(), q.probs.tolist(), strict=True))
        probs.append(float(sum(min(pp, q_of.get(i, 0.0))
                               for i, pp in zip(p.ids.tolist(), p.probs.tolist(), strict=True))))
