"""Speculative decoding: drafters propose, the target checks everything in one forward pass.

Per step: a plan (the γ policy's ``next_plan`` when it plans steps, else the default drafter's
step for ``next_gamma()``) names the drafter and the shape — a chain or a token tree; the
drafter proposes tokens with the distribution q each was drawn from (:mod:`.drafters`); the
target evaluates ``[last, proposal…]`` in one batched decode with logits on every row (a tree
with one sequence id per root-to-leaf path, see ``LlamaContext.decode_tree``) and ``verify``
decides what to keep (both in :mod:`.target_pass`); the reply commits the kept tokens plus the
target's own; both caches keep only the committed path; and the events are emitted.

Invariant between steps (``decoding.hold_prefix``): the committed sequence is ``seq`` (prompt +
reply); the target's cache holds ``seq[:-1]``; the last token is evaluated by the next step's
batch, whose first row is the distribution of the next token. A draft model's cache is brought
up to ``seq`` only when a step first asks it.

The prompt is read whole, as llama-server and plain decoding read it (``decoding.read_prompt``),
and its last row is held for the first step: a plain first step takes it and makes no pass of
its own (on a CPU a 1-row pass is a whole token's time, a share of a short reply); a first step
that drafts cuts the cache back by the last token, which its batch reads again (one row more in
a batch of several costs next to nothing), and the invariant holds from there.

A drafter that fails (say, the draft model cannot read a token the target produced) drops out
for the rest of the reply with a notice; the reply goes on with the others, or plainly (the
reply's drafters: :mod:`.roster`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from specchat.engine.decode.decoding import Clock, hold_prefix, new_text, read_prompt
from specchat.engine.decode.drafting import Drafter, DraftRequest, Proposal, fit_shape
from specchat.engine.decode.events import (
    Event,
    GenerationStats,
    NoticeEvent,
    StepEvent,
    TokenOrigin,
)
from specchat.engine.decode.grammar import Constraint, start
from specchat.engine.decode.plan import MODEL, NONE, Plan, plain
from specchat.engine.decode.registry import DrafterEnv, build
from specchat.engine.decode.rejected import rejected_events
from specchat.engine.decode.reply import Reply
from specchat.engine.decode.roster import Roster
from specchat.engine.decode.sampling import SamplerSettings, make_rng
from specchat.engine.decode.spec_stats import SpecTally
from specchat.engine.decode.step_policy import FixedGamma, GammaPolicy, ReplyStart
from specchat.engine.decode.target_pass import verify_pass
from specchat.engine.decode.verify import Verdict
from specchat.engine.llama.context import DecodeCancelled, LlamaContext
from specchat.engine.llama.prefix import common_prefix

# A prompt read of at least this many new tokens is timed for the policy (ReplyStart): fewer
# are dominated by the step's fixed costs, not the per-token cost a catch-up pays.
READ_TIMED = 16


class SpeculativeDecoder:
    """Speculation with any drafters, exact under the target's sampler settings.

    ``drafters``: names ("model", "ngram", "tree", …) or drafter objects; several are tried in
    turn when the policy does not choose (``ngram,model``: the n-gram lookup when it has a
    match, else the draft model). Default: the draft model.
    """

    def __init__(self, target: LlamaContext, draft: LlamaContext | None = None,
                 policy: GammaPolicy | None = None,
                 drafters: Sequence[str | Drafter] | None = None, *,
                 stepwise_draft: bool = False) -> None:
        if drafters is None:
            drafters = (MODEL,) if draft is not None else ()
        if not drafters:
            raise ValueError("speculation needs a draft model or an n-gram drafter")
        self.target = target
        self.draft = draft
        self.policy: GammaPolicy = policy if policy is not None else FixedGamma(4)
        env = DrafterEnv(target, draft, stepwise_draft)
        self.drafters: list[Drafter] = [build(d, env) if isinstance(d, str) else d
                                        for d in drafters]
        # A planner scores self-planning drafters on what they do.
        self.policy.own_plans({d.name: d.own_plan for d in self.drafters if d.plans_own_step})
        # The decoder's kind: what drafted each token is in the reply's stats
        # (SpecDetail.drafted_by_drafter), never in this name.
        self.name = "speculative"
        self.roster = Roster(self.drafters)  # this reply's drafters (a failed one drops out)
        self._last_seq: list[int] = []  # the previous reply's committed sequence
        self._grammar: Constraint | None = None  # this reply's matcher, under a grammar

    @property
    def n_shared(self) -> int:
        """Token ids both models know: the only ones a draft model may propose."""
        d = self.draft
        return min(self.target.n_vocab, d.n_vocab) if d is not None else self.target.n_vocab

    # ---------------------------------------------------------------------------- the loop

    def run(self, prompt: Sequence[int], settings: SamplerSettings,
            cancel: threading.Event) -> Iterator[Event]:
        if not prompt:
            raise ValueError("the prompt has no tokens")
        tgt, clock = self.target, Clock()
        reply, seq = Reply(tgt.model, settings.stop), list(prompt)
        tally = SpecTally(tuple(d.name for d in self.drafters))
        self._grammar = start(tgt.model, settings.grammar)
        started = self._start(seq, cancel, settings)
        if started is None:
            yield GenerationStats(prompt_tokens=len(prompt), total_s=clock.now(),
                                  stop_reason="cancelled")
            return
        reused = started[0]
        held: npt.NDArray[np.float32] | None = started[1]
        prompt_s = t_first = t_last = clock.now()
        rng = make_rng(settings.seed)
        reason = "length"
        while reason == "length":
            if cancel.is_set() or len(seq) > tgt.n_ctx:
                reason = "cancelled" if cancel.is_set() else "context"
                break
            t0, llama0, n0 = self.target.clock(), self._llama_s(), len(seq)
            try:  # propose → verify
                plan = self._plan(seq, settings, reply.n_generated)
                if held is not None and plan.drafter != NONE:
                    tgt.truncate(len(seq) - 1)  # the invariant: this step's batch reads it
                    held = None
                proposal, notices = self._propose(seq, plan, settings, rng)
                t1 = self.target.clock()
                verdict, forward_s = verify_pass(tgt, seq, proposal, settings, rng,
                                                 self._grammar,
                                                 self.roster.reads_hidden(proposal), held)
            except DecodeCancelled:
                reason = "cancelled"
                break
            t3 = self.target.clock()
            position, text_at, now = reply.n_generated, len(reply.text), clock.now()
            out = [*notices, *self._commit(seq, reply, proposal, verdict, settings, now)]
            step = self._step_event(plan, proposal, verdict, t1 - t0, t3 - t1, position,
                                    reply.n_generated - position, held is not None)
            held = None
            tally.add(step, verdict.match, forward_s, self.target.clock() - t0,
                      self._llama_s() - llama0)
            self.policy.committed(reply.text[text_at:])
            self.policy.observe(step)
            self._score_guesses(seq, n0, step.drafter)
            t_first, t_last = (now if position == 0 else t_first), now
            yield from out  # emit
            yield step
            if reply.done:
                reason = reply.stop_reason or "eos"
            elif reply.n_generated >= settings.max_tokens:
                break
        if reason == "context":
            yield NoticeEvent(f"the context window is full ({tgt.n_ctx} tokens): reply cut short")
        self._settle(seq)
        yield from reply.flush()
        yield GenerationStats(
            prompt_tokens=len(prompt), cached_tokens=reused, generated_tokens=reply.n_generated,
            prompt_s=prompt_s, ttft_s=t_first, decode_s=t_last - t_first, total_s=clock.now(),
            stop_reason=reason, **tally.fields(),
        )

    # ------------------------------------------------------------------------ the parts

    def _start(self, seq: list[int], cancel: threading.Event, settings: SamplerSettings
               ) -> tuple[int, npt.NDArray[np.float32]] | None:
        """The prompt read (the draft's cache follows when first asked) and the policy and the
        drafters told: the tokens reused, and the last token's row, held for the first step.
        None when cancelled."""
        for c in (self.target, self.draft):
            if c is not None:
                c.cancel = cancel
        t0 = self.target.clock()
        try:
            row, reused = read_prompt(self.target, seq)
        except DecodeCancelled:
            self._settle(seq)
            return None
        held = np.array(row, copy=True)  # a view of llama.cpp's buffer, which a decode reuses
        read = len(seq) - reused
        self.policy.begin(self._new_prompt_text(seq))
        self.roster.start(seq)
        for dr in self.roster.alive:
            dr.configure(settings)
        d = self.draft
        t_size = self.target.model.size_bytes
        d_size = d.model.size_bytes if d is not None else 0
        self.policy.start_reply(ReplyStart(
            settings.max_tokens,
            (self.target.clock() - t0) / read if read >= READ_TIMED else None,
            d_size / t_size if d_size > 0 and t_size > 0 else None))
        if self.draft is not None:
            # What the draft model must read before it can draft (its cache is brought up
            # only when a step first asks it): a planner weighs that against what drafting
            # would gain — after a long pasted document it can outweigh the whole reply.
            self.policy.draft_lag(len(seq) - self.draft.common_prefix(seq))
        # Drafters with a cache of their own (layer-skip, Kangaroo); the others lack nothing.
        self.policy.drafter_lags({d.name: d.lag(seq) for d in self.roster.alive})
        return reused, held

    def _step_event(self, plan: Plan, proposal: Proposal, verdict: Verdict, draft_s: float,
                    verify_s: float, position: int, committed: int, held: bool) -> StepEvent:
        """``held``: the step took the prompt read's row and made no pass (batch 0: no
        verify time for a cost table to learn)."""
        return StepEvent(
            len(proposal.tokens), verdict.accepted, draft_s, verify_s,
            proposal.drafter if proposal.tokens else NONE, position, committed,
            verdict.overlap, self.policy.label, plan_size=plan.size,
            accepted_ranks=verdict.ranks, kind=proposal.kind, reason=plan.reason,
            depth=proposal.depth,
            batch=0 if held else
            1 + len(proposal.tokens) + (proposal.side.size if proposal.side else 0),
            rejected=verdict.judged, read_tokens=proposal.read_tokens, read_s=proposal.read_s)

    def _plan(self, seq: Sequence[int], settings: SamplerSettings, generated: int) -> Plan:
        """The step to take, shrunk to what fits the context, the batch and the sequences."""
        default = self.roster.default
        if default is None:
            return plain()
        plan: Plan | None = None
        if self.policy.plans_steps:
            plan = self.policy.next_plan(self.roster.available(seq))
        if plan is None:
            plan = default.default_plan(self.policy.next_gamma())
        if plan.drafter == NONE:
            return plan if not plan.parents else plain(plan.reason)
        tgt = self.target
        shape = fit_shape(plan.parents, min(tgt.n_ctx - len(seq), tgt.n_batch - 1),
                          settings.max_tokens - generated - 1, tgt.n_seq_max)
        if not shape:
            return plain(plan.reason)
        return Plan(plan.drafter, shape, plan.reason)

    def _propose(self, seq: Sequence[int], plan: Plan, settings: SamplerSettings,
                 rng: np.random.Generator) -> tuple[Proposal, list[NoticeEvent]]:
        return self.roster.propose(DraftRequest(seq, plan, settings, rng,
                                                self.policy.keep_drafting, self._grammar))

    def _commit(self, seq: list[int], reply: Reply, proposal: Proposal, verdict: Verdict,
                settings: SamplerSettings, now: float) -> list[Event]:
        """The kept drafts, then the target's own token; the caches follow."""
        if not proposal.tokens:  # a plain step: the cache already holds seq[:-1] once appended
            out: list[Event] = [*reply.add(verdict.token, TokenOrigin.PLAIN, now,
                                           verdict.logprobs[0] if verdict.logprobs else None)]
            seq.append(verdict.token)
            self._advance((verdict.token,), reply)
            self.roster.commit(seq, proposal, verdict)
            return out
        out = []
        position = reply.n_generated
        kept = [proposal.tokens[i] for i in verdict.path]
        main, branches = rejected_events(proposal, verdict, position, self.target.model.piece)
        for j, token in enumerate([*kept, verdict.token]):
            origin = TokenOrigin.ACCEPTED
            if j == len(kept):
                out.extend(main)
                origin = (TokenOrigin.CORRECTED if verdict.rejected is not None else
                          TokenOrigin.BONUS if proposal.tokens else TokenOrigin.PLAIN)
            out.extend(reply.add(token, origin, now,
                                 verdict.logprobs[j] if verdict.logprobs else None))
            seq.append(token)
            if reply.done or reply.n_generated >= settings.max_tokens:
                break
        out.extend(branches)
        self._advance((*kept, verdict.token), reply)
        hold_prefix(self.target, seq, known=len(seq) - 1)
        self.roster.commit(seq, proposal, verdict)
        return out

    def _advance(self, tokens: Sequence[int], reply: Reply) -> None:
        """The grammar's matcher past a step's committed tokens (moot once the reply ends)."""
        if self._grammar is not None and not reply.done:
            self._grammar.advance(tokens)

    def _settle(self, seq: list[int]) -> None:
        """Leave every cache holding only tokens of the committed sequence."""
        self.roster.settle(seq)
        self.target.drop_tree()
        self.target.truncate(min(len(self.target.tokens), len(seq) - 1))
        self._last_seq = seq

    def _score_guesses(self, seq: Sequence[int], start: int, ran: str) -> None:
        """Let a planner score the guesses of drafters whose proposals cost nothing (the
        n-gram lookup) against what this step committed, and take their next ones: it learns
        their acceptance on steps that did not run them (:mod:`specchat.engine.policy.guesses`)."""
        if self.roster.guessers:
            self.policy.score_guesses(seq[start:], ran, self.roster.guesses(seq))

    def _llama_s(self) -> float:
        return self.target.decode_s + (self.draft.decode_s if self.draft is not None else 0.0)

    def _new_prompt_text(self, prompt: Sequence[int], head: int = 160, tail: int = 96) -> str:
        """The text of what the prompt adds to the previous reply's sequence (in a chat, the
        user's new turn): its first ``head`` and last ``tail`` tokens, where a request's
        instruction and question usually are."""
        i = common_prefix(self._last_seq, prompt)
        return new_text(self.target.model.detokenize, prompt[i:], head, tail)
