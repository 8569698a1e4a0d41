"""What a generation streams out: tokens with their fate, rejected drafts, steps, notices, stats.

Plain decoding emits ``TokenEvent(origin=PLAIN)``; speculative decoding emits ``ACCEPTED`` (a
draft token the target kept), ``CORRECTED`` (sampled by the target at a rejection), ``BONUS``
(the target's extra token after a fully accepted draft), plus ``RejectedEvent`` for each draft
token thrown away and a ``StepEvent`` per draft/verify round. The last event is always a
``GenerationStats``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class TokenOrigin(str, Enum):
    PLAIN = "plain"
    ACCEPTED = "accepted"
    CORRECTED = "corrected"
    BONUS = "bonus"


@dataclass(frozen=True, slots=True)
class TokenEvent:
    token_id: int
    text: str  # the characters this token completes ("" while a UTF-8 sequence is partial)
    origin: TokenOrigin
    position: int  # index of the token in the reply (0 = first generated token)
    t: float  # seconds since the request started


@dataclass(frozen=True, slots=True)
class RejectedEvent:
    token_id: int
    text: str
    position: int  # the reply position the draft proposed it for
    p: float  # the target's probability of this token (0 when unknown)
    q: float  # the drafter's probability of this token


@dataclass(frozen=True, slots=True)
class StepEvent:
    gamma: int  # draft tokens proposed this step
    accepted: int  # of which the target kept
    draft_s: float
    verify_s: float  # the target's batched forward pass plus the verification rule
    drafter: str = "draft"  # "draft" (model), "ngram", or "none" (a plain step)
    position: int = 0  # reply position of the step's first token
    committed: int = 0  # tokens the step added to the reply (accepted + the target's own)
    # Σ min(p, q) at each verified position (sampled decoding only): the probability that the
    # rule keeps a token there — a lower-variance view of acceptance than the 0/1 outcomes.
    overlap: tuple[float, ...] = ()
    mode: str = ""  # what chose γ: the policy's label ("fixed", "auto · code", ...)


@dataclass(frozen=True, slots=True)
class NoticeEvent:
    message: str


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
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def decode_tps(self) -> float:
        n = self.generated_tokens - 1
        return n / self.decode_s if n > 0 and self.decode_s > 0 else 0.0

    @property
    def e2e_tps(self) -> float:
        return self.generated_tokens / self.total_s if self.total_s > 0 else 0.0

    @property
    def alpha(self) -> float | None:
        """Acceptance rate: accepted / (accepted + rejections), the MLE for a cut geometric run."""
        n = self.accepted + self.rejections
        return self.accepted / n if n else None

    @property
    def tau(self) -> float | None:
        """Mean tokens committed per target forward pass during decoding."""
        return self.generated_tokens / self.target_forwards if self.target_forwards else None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(decode_tps=self.decode_tps, e2e_tps=self.e2e_tps, alpha=self.alpha, tau=self.tau)
        return d


Event = TokenEvent | RejectedEvent | StepEvent | NoticeEvent | GenerationStats
