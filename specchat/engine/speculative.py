"""Speculative decoding: a drafter proposes γ tokens, the target checks them in one forward pass.

Per step: the drafter (an n-gram lookup when it has a match, else the draft model) proposes up
to γ tokens, sampling from its own distribution q after the same sampler transform as the
target; the target evaluates ``[last, d1..dγ]`` in one batched decode with logits on every row;
``verify`` decides what to keep; the reply commits the kept tokens plus the target's own; and
the target's KV cache is rolled back to exactly the committed tokens. The draft's cache is
brought up to the committed sequence at the start of its next proposal (common prefix + decode
of what is missing), which also covers the step where every draft token was accepted.

Invariant between steps: the committed sequence is ``seq`` (prompt + reply); the target's cache
holds ``seq[:-1]``; the last token is evaluated by the next step's batch, whose first row is the
distribution of the next token.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from specchat.engine.decoding import Clock
from specchat.engine.events import (
    Event,
    GenerationStats,
    NoticeEvent,
    RejectedEvent,
    StepEvent,
    TokenOrigin,
)
from specchat.engine.gamma import FixedGamma, GammaPolicy
from specchat.engine.model import DecodeCancelled, LlamaContext
from specchat.engine.ngram import NgramDrafter
from specchat.engine.reply import Reply
from specchat.engine.sampling import (
    Distribution,
    SamplerSettings,
    distribution,
    greedy_token,
    greedy_tokens,
    make_rng,
)
from specchat.engine.spec_stats import SpecTally
from specchat.engine.verify import Verdict, one_hot, verify_greedy, verify_sampled
from specchat.errors import SpecchatError


class DraftFailed(Exception):
    """The draft model cannot go on (e.g. NaN logits); the reply continues without it."""


def sync(ctx: LlamaContext, tokens: Sequence[int]) -> int:
    """Bring the cache to exactly ``tokens`` (no logits); return how many were reused."""
    reuse = ctx.common_prefix(tokens)
    ctx.truncate(reuse)
    if reuse < len(tokens):
        ctx.decode(tokens[reuse:], logits="none")
    return reuse


class _TargetRows:
    """The target's distributions for a verify batch, computed only for the rows consulted."""

    def __init__(self, rows: npt.NDArray[np.float32], settings: SamplerSettings) -> None:
        self.rows = rows
        self.settings = settings
        self._done: dict[int, Distribution] = {}

    def __getitem__(self, i: int) -> Distribution:
        d = self._done.get(i)
        if d is None:
            d = self._done[i] = distribution(self.rows[i], self.settings)
        return d


class SpeculativeDecoder:
    """Draft-model and/or n-gram speculation, exact under the target's sampler settings."""

    def __init__(self, target: LlamaContext, draft: LlamaContext | None = None,
                 policy: GammaPolicy | None = None, ngram: NgramDrafter | None = None,
                 stepwise_draft: bool = False) -> None:
        if draft is None and ngram is None:
            raise ValueError("speculation needs a draft model or an n-gram drafter")
        self.target = target
        self.draft = draft
        self.policy: GammaPolicy = policy if policy is not None else FixedGamma(4)
        self.ngram = ngram
        # Catch the draft up one token at a time instead of in one batch: slower, but its cache
        # then does not depend on how steps fell (on a CPU a quantized model's logits differ
        # slightly between batch shapes), so a replay of the run can be exact.
        self.stepwise_draft = stepwise_draft
        self.name = "speculative" if draft is not None else "ngram"
        # The draft may only propose ids the target knows (vocabularies may differ by padding).
        self.n_shared = min(target.n_vocab, draft.n_vocab) if draft is not None else target.n_vocab
        self._draft_known = 0  # leading tokens of the draft's cache known to match ``seq``
        self._last_seq: list[int] = []  # the previous reply's committed sequence
        self._top_buf: npt.NDArray[np.float32] | None = None  # scratch for the draft's softmax

    # ----------------------------------------------------------------------------- drafting

    def _draft_row(self, seq: list[int]) -> npt.NDArray[np.float32]:
        """Bring the draft's cache to ``seq`` and return its logits for the next token."""
        dft = self.draft
        assert dft is not None
        cached = dft.tokens
        n = min(len(cached), len(seq))
        i = min(self._draft_known, n)
        while i < n and cached[i] == seq[i]:
            i += 1
        if i == len(seq):
            i -= 1  # the last token must be evaluated again for its logits
        dft.truncate(i)
        if self.stepwise_draft:
            for t in seq[i:-1]:
                dft.decode((t,), logits="none")
            i = len(seq) - 1
        row = dft.decode(seq[i:], logits="last")[0]
        self._draft_known = len(seq)
        return row

    def _draft_model(self, seq: list[int], gamma: int, settings: SamplerSettings,
                     rng: np.random.Generator) -> tuple[list[int], list[Distribution]]:
        dft = self.draft
        assert dft is not None
        model = dft.model
        greedy = settings.greedy
        row = self._draft_row(seq)[: self.n_shared]
        drafts: list[int] = []
        qs: list[Distribution] = []
        while True:
            if greedy:
                d = greedy_token(row)
                top: Callable[[], float] = self._softmax_top(row)
            else:
                q = distribution(row, settings)
                d = q.sample(rng)
                qs.append(q)
                top = _const(float(q.probs[0]))
            drafts.append(d)
            # The policy is asked even at γ (its answer then moot), to see every confidence.
            if (model.is_eog(d) or not self.policy.keep_drafting(len(drafts), top)
                    or len(drafts) >= gamma):
                return drafts, qs
            row = dft.decode((d,), logits="last")[0][: self.n_shared]

    def _propose(self, seq: list[int], gamma: int, settings: SamplerSettings,
                 rng: np.random.Generator, use_draft: bool
                 ) -> tuple[list[int], list[Distribution], str]:
        if gamma <= 0:
            return [], [], "none"
        if self.ngram is not None:
            drafts = self.ngram.propose(gamma)
            eog = self.target.model.is_eog
            cut = next((i + 1 for i, t in enumerate(drafts) if eog(t)), len(drafts))
            drafts = drafts[:cut]  # nothing after an end-of-generation token can be kept
            if drafts:
                return drafts, [one_hot(t) for t in drafts], "ngram"
        if use_draft and self.draft is not None:
            # The draft's cache must hold seq plus all but the last draft token.
            gamma = min(gamma, self.draft.n_ctx - len(seq) + 1)
            if gamma > 0:
                try:
                    drafts, qs = self._draft_model(seq, gamma, settings, rng)
                except DecodeCancelled:
                    raise
                except SpecchatError as e:  # NaN logits, a failed decode: the draft's own
                    raise DraftFailed(str(e)) from None
                return drafts, qs, "draft"
        return [], [], "none"

    def _softmax_top(self, row: npt.NDArray[np.float32]) -> Callable[[], float]:
        """The draft's top-1 probability at ``row``, computed on call while the view is valid
        (float32 into a scratch buffer: 7-14× cheaper than float64 on a 49k-262k vocabulary)."""
        def top() -> float:
            buf = self._top_buf
            if buf is None or buf.shape != row.shape:
                buf = self._top_buf = np.empty(row.shape, dtype=np.float32)
            np.subtract(row, row.max(), out=buf)
            np.exp(buf, out=buf)
            return float(1.0 / buf.sum(dtype=np.float64))
        return top

    def _new_prompt_text(self, prompt: Sequence[int], head: int = 160, tail: int = 96) -> str:
        """The text of what the prompt adds to the previous reply's sequence (in a chat, the
        user's new turn): its first ``head`` and last ``tail`` tokens, where a request's
        instruction and question usually are."""
        last = self._last_seq
        n = min(len(last), len(prompt))
        i = 0
        while i < n and last[i] == prompt[i]:
            i += 1
        return new_text(self.target.model.detokenize, prompt[i:], head, tail)

    # ---------------------------------------------------------------------------- the loop

    def _llama_s(self) -> float:
        return self.target.decode_s + (self.draft.decode_s if self.draft is not None else 0.0)

    def run(self, prompt: Sequence[int], settings: SamplerSettings,
            cancel: threading.Event) -> Iterator[Event]:
        if not prompt:
            raise ValueError("the prompt has no tokens")
        tgt, dft = self.target, self.draft
        clock = Clock()
        tgt.cancel = cancel
        if dft is not None:
            dft.cancel = cancel
        reply = Reply(tgt.model, settings.stop)
        seq = list(prompt)
        tally = SpecTally()
        self._draft_known = 0
        use_draft = dft is not None and max(seq) < dft.n_vocab and len(seq) <= dft.n_ctx
        try:
            reused = sync(tgt, seq[:-1])
            if dft is not None and use_draft:
                sync(dft, seq[:-1])
                self._draft_known = len(seq) - 1
        except DecodeCancelled:
            self._settle_draft(seq)
            yield GenerationStats(prompt_tokens=len(prompt), total_s=clock.now(),
                                  stop_reason="cancelled")
            return
        prompt_s = clock.now()
        self.policy.begin(self._new_prompt_text(prompt))
        if self.ngram is not None:
            self.ngram.reset(seq)
        rng = make_rng(settings.seed)
        greedy = settings.greedy
        t_first = t_last = prompt_s
        reason = "length"
        while True:
            if cancel.is_set():
                reason = "cancelled"
                break
            room = tgt.n_ctx - len(seq)  # the batch [last, d1..dγ] must fit
            if room < 0:
                reason = "context"
                yield NoticeEvent(f"the context window is full ({tgt.n_ctx} tokens): "
                                  "reply cut short")
                break
            gamma = max(0, min(self.policy.next_gamma(), room,
                               settings.max_tokens - reply.n_generated - 1))
            mode = self.policy.label
            t0 = time.perf_counter()
            llama0 = self._llama_s()
            try:
                try:
                    drafts, qs, drafter = self._propose(seq, gamma, settings, rng, use_draft)
                except DraftFailed as e:  # a broken draft must not end a healthy target's reply
                    use_draft = False
                    yield NoticeEvent(f"the draft stopped: {e}; the reply goes on without it")
                    drafts, qs, drafter = self._propose(seq, gamma, settings, rng, use_draft)
                t1 = time.perf_counter()
                rows = tgt.decode([seq[-1], *drafts], logits="all")
                t2 = time.perf_counter()
            except DecodeCancelled:
                reason = "cancelled"
                break
            if greedy:
                verdict = verify_greedy(greedy_tokens(rows), drafts)
            else:
                verdict = verify_sampled(_TargetRows(rows, settings), qs, drafts, rng)
            t3 = time.perf_counter()
            # Commit: the kept drafts, then the target's own token.
            out: list[Event] = []
            position = reply.n_generated
            text_at = len(reply.text)
            now = clock.now()
            origin = TokenOrigin.ACCEPTED
            commits = [*drafts[: verdict.accepted], verdict.token]
            for j, token in enumerate(commits):
                if j == verdict.accepted:
                    if verdict.rejected is not None:
                        out.extend(self._rejected_events(drafts, qs, verdict, position))
                        origin = TokenOrigin.CORRECTED
                    else:
                        origin = TokenOrigin.BONUS if drafts else TokenOrigin.PLAIN
                out.extend(reply.add(token, origin, now))
                seq.append(token)
                if dft is not None and token >= dft.n_vocab:
                    use_draft = False  # the draft cannot read this token: speculate no more
                if reply.done or reply.n_generated >= settings.max_tokens:
                    break
            if self.ngram is not None:
                self.ngram.extend(seq[len(seq) - (reply.n_generated - position):])
            tgt.truncate(len(seq) - 1)
            step = StepEvent(len(drafts), verdict.accepted, t1 - t0, t3 - t1, drafter, position,
                             reply.n_generated - position, verdict.overlap, mode)
            tally.add(step, verdict.match, t2 - t1, time.perf_counter() - t0,
                      self._llama_s() - llama0)
            self.policy.committed(reply.text[text_at:])
            self.policy.observe(step)
            out.append(step)
            if position == 0:
                t_first = now
            t_last = now
            yield from out
            if reply.done:
                reason = reply.stop_reason or "eos"
                break
            if reply.n_generated >= settings.max_tokens:
                break
        self._settle_draft(seq)
        self._last_seq = seq
        yield from reply.flush()
        yield GenerationStats(
            prompt_tokens=len(prompt), cached_tokens=reused, generated_tokens=reply.n_generated,
            prompt_s=prompt_s, ttft_s=t_first, decode_s=t_last - t_first, total_s=clock.now(),
            stop_reason=reason, **tally.fields(),
        )

    def _settle_draft(self, seq: list[int]) -> None:
        """Leave the draft's cache holding only tokens of the committed sequence."""
        dft = self.draft
        if dft is not None:
            dft.truncate(dft.common_prefix(seq))
        self.target.truncate(len(seq) - 1)

    def _rejected_events(self, drafts: list[int], qs: list[Distribution], verdict: Verdict,
                         position: int) -> list[Event]:
        rej = verdict.rejected
        assert rej is not None
        model = self.target.model
        out: list[Event] = []
        for i in range(rej.index, len(drafts)):
            d = drafts[i]
            if i == rej.index:
                p, q = rej.p, rej.q
            else:  # never judged by the target: its p is unknown
                p, q = 0.0, qs[i].prob(d) if qs else 1.0
            text = model.piece(d).decode("utf-8", errors="replace")
            out.append(RejectedEvent(d, text, position + i, p, q))
        return out


def new_text(detokenize: Callable[[Sequence[int]], str], tokens: Sequence[int], head: int = 160,
             tail: int = 96) -> str:
    """``tokens`` as text, the middle left out when there are more than ``head + tail``."""
    if len(tokens) <= head + tail:
        return detokenize(tokens)
    return detokenize(tokens[:head]) + " … " + detokenize(tokens[-tail:])


def _const(x: float) -> Callable[[], float]:
    return lambda: x
