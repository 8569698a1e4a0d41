"""What a generation streams out: tokens with their fate, rejected drafts, steps, notices, stats.

Plain decoding emits ``TokenEvent(origin=PLAIN)``; speculative decoding emits ``ACCEPTED`` (a
draft token the target kept), ``CORRECTED`` (sampled by the target at a rejection), ``BONUS``
(the target's extra token after a fully accepted draft), plus ``RejectedEvent`` for each draft
token thrown away and a ``StepEvent`` per draft/verify round. The last event is always a
``GenerationStats``, whose ``detail`` (a ``SpecDetail``) holds what tuning and benchmarking need.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from specchat.engine.decode.plan import CHAIN, MODEL
from specchat.engine.decode.stats import (
    acceptance,
    acceptance_length,
    decode_rate,
    overall_rate,
    tokens_per_pass,
)


class TokenOrigin(str, Enum):
    PLAIN = "plain"
    ACCEPTED = "accepted"
    CORRECTED = "corrected"
    BONUS = "bonus"


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """The target's log-probability of a committed token, and of the likeliest tokens at its
    position (see ``sampling.token_logprobs`` for which distribution)."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token id, log-probability), likeliest first


@dataclass(frozen=True, slots=True)
class TokenEvent:
    token_id: int
    text: str  # the characters this token completes ("" while a UTF-8 sequence is partial)
    origin: TokenOrigin
    position: int  # index of the token in the reply (0 = first generated token)
    t: float  # seconds since the request started
    logprob: TokenLogprob | None = None  # only when the settings ask for it (``logprobs``)


@dataclass(frozen=True, slots=True)
class RejectedEvent:
    token_id: int
    text: str
    position: int  # the reply position the draft proposed it for
    p: float  # the target's probability of this token (0 when unknown)
    q: float  # the drafter's probability of this token
    # 0: the step's main rejected run (the token the target replaced and the drafts after it);
    # k ≥ 1: the k-th losing branch of a token tree (tokens of one branch share k).
    branch: int = 0


@dataclass(frozen=True, slots=True)
class StepEvent:
    gamma: int  # draft tokens proposed this step
    accepted: int  # of which the target kept
    draft_s: float
    verify_s: float  # the target's batched forward pass plus the verification rule
    drafter: str = MODEL  # the drafter's name ("model", "ngram", "tree", …) or "none" (plain)
    position: int = 0  # reply position of the step's first token
    committed: int = 0  # tokens the step added to the reply (accepted + the target's own)
    # Σ min(p, q) at each verified position (sampled decoding only): the probability that the
    # rule keeps a token there — a lower-variance view of acceptance than the 0/1 outcomes.
    overlap: tuple[float, ...] = ()
    mode: str = ""  # what chose γ: the policy's label ("fixed", "auto · code", ...)
    # What a planner needs from a step (see engine/decode/plan.py):
    plan_size: int = -1  # draft tokens the plan asked for (−1: not told; then gamma)
    accepted_ranks: tuple[int, ...] = ()  # the kept path's rank per depth (0 = best child)
    kind: str = CHAIN  # "chain", "tree", or "none" (nothing proposed)
    reason: str = ""  # the plan's few words for the stats bar ("tree 12 · depth 4")
    depth: int = -1  # draft tokens on the proposal's longest path (−1: not told; then gamma)
    # Rows of the target's verify batch (−1: not told; then gamma + 1). More than gamma + 1
    # when the drafter adds rows of its own (Lookahead's window): what a cost table must key on.
    # 0: no pass of its own (a first step that took the row the prompt's read left).
    batch: int = -1
    rejected: int = 0  # draft tokens the rule judged and rejected (each leaving a residual)
    # Of draft_s, what the drafter spent reading tokens it had not seen (see Proposal).
    read_tokens: int = 0
    read_s: float = 0.0

    def __post_init__(self) -> None:
        if self.plan_size < 0:
            object.__setattr__(self, "plan_size", self.gamma)
        if self.depth < 0:
            object.__setattr__(self, "depth", self.gamma)
        if self.batch < 0:
            object.__setattr__(self, "batch", self.gamma + 1)


@dataclass(frozen=True, slots=True)
class NoticeEvent:
    message: str


@dataclass(frozen=True)
class BatchTiming:
    """The target's verify passes of one batch size."""

    size: int  # tokens in the batch: the draft plus one
    count: int
    ms: float  # mean milliseconds per pass


@dataclass(frozen=True)
class SpecDetail:
    """A speculative generation's figures beyond the counts every UI shows (see spec_stats)."""

    position_drafted: tuple[int, ...] = ()  # draft tokens proposed at each draft position
    position_accepted: tuple[int, ...] = ()  # of which kept
    overlap_mean: float | None = None  # mean Σ min(p, q): our rule's acceptance probability
    exact_match_alpha: float | None = None  # mean Σ p·q: the exact-match rule's
    overlap_n: int = 0  # positions those means are over
    verify_batches: tuple[BatchTiming, ...] = ()  # by batch size, ascending
    draft_ms_per_token: float | None = None  # the draft model's, when it drafted
    steps_by_drafter: Mapping[str, int] = field(default_factory=dict)
    # Draft tokens each drafter proposed, and of those the ones kept (a predicted output's
    # accepted and rejected tokens, as OpenAI's usage reports them, come from these).
    drafted_by_drafter: Mapping[str, int] = field(default_factory=dict)
    accepted_by_drafter: Mapping[str, int] = field(default_factory=dict)
    step_s: float = 0.0  # wall time of the steps, events excluded
    llama_s: float = 0.0  # of which inside llama_decode (both models)

    @property
    def acceptance_by_position(self) -> tuple[float | None, ...]:
        return tuple(a / d if d else None for a, d in
                     zip(self.position_accepted, self.position_drafted, strict=True))

    @property
    def drafters_used(self) -> tuple[str, ...]:
        """The drafters that proposed tokens, in the decoder's order ("ngram", "model")."""
        return tuple(n for n, k in self.drafted_by_drafter.items() if k > 0)

    @property
    def overhead_share(self) -> float | None:
        """The share of step time spent outside llama_decode (Python, sampling, bookkeeping)."""
        return 1 - self.llama_s / self.step_s if self.step_s > 0 else None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["steps_by_drafter"] = dict(self.steps_by_drafter)
        d["drafted_by_drafter"] = dict(self.drafted_by_drafter)
        d["accepted_by_drafter"] = dict(self.accepted_by_drafter)
        d.update(acceptance_by_position=list(self.acceptance_by_position),
                 overhead_share=self.overhead_share)
        return d


@dataclass(frozen=True)
class GenerationStats:
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens reused from the KV cache
    generated_tokens: int = 0
    prompt_s: float = 0.0
    ttft_s: float = 0.0
    decode_s: float = 0.0  # first token to last token
    total_s: float = 0.0
    stop_reason: str = "eos"  # eos | stop | length | cancelled | context
    # Speculative decoding (zero for plain decoding):
    steps: int = 0  # draft/verify rounds
    drafted: int = 0
    accepted: int = 0
    rejections: int = 0  # steps that ended in a rejection
    draft_s: float = 0.0
    verify_s: float = 0.0
    target_forwards: int = 0
    detail: SpecDetail = field(default_factory=SpecDetail)

    # The derived figures are engine.decode.stats' definitions, so the stats bar, the saved
    # reply, the race, the server and ``ask`` agree by construction.

    @property
    def decode_tps(self) -> float:
        """Decode tokens/s: the tokens after the first, from the first token to the last."""
        return decode_rate(self.generated_tokens, self.decode_s)

    @property
    def e2e_tps(self) -> float:
        """Tokens over the whole request, the prompt's processing included."""
        return overall_rate(self.generated_tokens, self.total_s)

    @property
    def alpha(self) -> float | None:
        return acceptance(self.accepted, self.rejections)

    @property
    def tau(self) -> float | None:
        return tokens_per_pass(self.generated_tokens, self.target_forwards)

    @property
    def acceptance_length(self) -> float | None:
        """1 + accepted / steps, vLLM's mean acceptance length (None for plain decoding)."""
        return acceptance_length(self.accepted, self.steps)

    def as_dict(self) -> dict[str, Any]:
        """The figures as JSON-ready values, derived rates included."""
        d = asdict(self)
        d.update(detail=self.detail.as_dict(), decode_tps=self.decode_tps, e2e_tps=self.e2e_tps,
                 alpha=self.alpha, tau=self.tau, acceptance_length=self.acceptance_length)
        return d


Event = TokenEvent | RejectedEvent | StepEvent | NoticeEvent | GenerationStats

