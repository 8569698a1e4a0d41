"""Running totals of a speculative generation, turned into ``GenerationStats`` at the end.

Besides the counts every UI shows (α, τ), it keeps what tuning and benchmarking need:
acceptance at each draft position, Σ min(p, q) (our rule's acceptance probability) next to
Σ p·q (the acceptance probability of the exact-match rule other engines use at T > 0), the
target's verify time per batch size, and how much of a step is spent outside llama_decode.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from specchat.engine.decode.events import BatchTiming, SpecDetail, StepEvent
from specchat.engine.decode.plan import MODEL, TREE
from specchat.engine.decode.stats import acceptance, acceptance_length, tokens_per_pass


class SpecTally:
    def __init__(self, order: tuple[str, ...] = ()) -> None:
        # The decoder's drafters, in the order it tries them: the per-drafter figures are
        # listed in it (then any other name, as first seen), so a reply's drafters read the
        # same way wherever they are shown ("ngram", "model").
        self.order = order
        self.steps = 0
        self.drafting_steps = 0  # steps that proposed at least one token
        self.drafted = 0
        self.accepted = 0
        self.rejections = 0  # steps that ended in a rejection
        self.rejected_tokens = 0  # draft tokens the rule judged and rejected (StepEvent.rejected)
        self.draft_s = 0.0
        self.verify_s = 0.0
        self.target_forwards = 0
        self.position_drafted: list[int] = []
        self.position_accepted: list[int] = []
        self.overlap_sum = 0.0
        self.match_sum = 0.0
        self.overlap_n = 0
        self.by_drafter: Counter[str] = Counter()
        self.drafted_by: Counter[str] = Counter()
        self.accepted_by: Counter[str] = Counter()
        self.model_drafted = 0  # tokens proposed by the draft model (for ms/token)
        self.model_draft_s = 0.0
        self.verify_batches: dict[int, list[float]] = {}  # batch size -> [count, seconds]
        self.step_s = 0.0  # wall time of the steps, events excluded
        self.llama_s = 0.0  # of which inside llama_decode (both models)

    @property
    def alpha(self) -> float | None:
        return acceptance(self.accepted, self.rejections)

    def tau(self, generated: int) -> float | None:
        """τ with the reply at ``generated`` tokens."""
        return tokens_per_pass(generated, self.target_forwards)

    @property
    def acceptance_length(self) -> float | None:
        """1 + accepted / steps (vLLM's mean acceptance length), beside τ."""
        return acceptance_length(self.accepted, self.steps)

    def add(self, step: StepEvent, match: tuple[float, ...], forward_s: float, step_s: float,
            llama_s: float) -> None:
        """A step the decoder took, with what only the decoder measures (Σ p·q, the verify
        pass's own time, the step's wall time and its time inside llama.cpp)."""
        self.count(step)
        self.match_sum += sum(match)
        if step.batch > 0:  # a step without a pass of its own has no batch to time
            entry = self.verify_batches.setdefault(step.batch, [0, 0.0])
            entry[0] += 1
            entry[1] += forward_s
        self.step_s += step_s
        self.llama_s += llama_s

    def count(self, step: StepEvent) -> None:
        """What a step tells anyone who reads the events: the stats bar counts a reply with
        this as the decoder does, so the two show the same α and τ."""
        self.steps += 1
        self.drafting_steps += step.gamma > 0
        self.drafted += step.gamma
        self.accepted += step.accepted
        self.rejections += step.accepted < step.depth
        self.rejected_tokens += step.rejected
        self.draft_s += step.draft_s
        self.verify_s += step.verify_s
        self.target_forwards += 1  # a first step that took the prompt read's row: that pass
        self.by_drafter[step.drafter] += 1
        if step.gamma:
            self.drafted_by[step.drafter] += step.gamma
            self.accepted_by[step.drafter] += step.accepted
        if step.drafter in (MODEL, TREE):
            self.model_drafted += step.gamma
            self.model_draft_s += step.draft_s
        # Per depth: a tree drafts at each depth once per step, like a chain at each position.
        grow = step.depth - len(self.position_drafted)
        if grow > 0:
            self.position_drafted += [0] * grow
            self.position_accepted += [0] * grow
        for i in range(step.depth):
            self.position_drafted[i] += 1
        for i in range(step.accepted):
            self.position_accepted[i] += 1
        self.overlap_sum += sum(step.overlap)
        self.overlap_n += len(step.overlap)

    def fields(self) -> dict[str, Any]:
        """Keyword arguments for ``GenerationStats``."""
        return dict(steps=self.steps, drafted=self.drafted, accepted=self.accepted,
                    rejections=self.rejections, draft_s=self.draft_s, verify_s=self.verify_s,
                    target_forwards=self.target_forwards, detail=self.detail())

    def detail(self) -> SpecDetail:
        n = self.overlap_n
        return SpecDetail(
            position_drafted=tuple(self.position_drafted),
            position_accepted=tuple(self.position_accepted),
            overlap_mean=self.overlap_sum / n if n else None,
            exact_match_alpha=self.match_sum / n if n else None,
            overlap_n=n,
            verify_batches=tuple(BatchTiming(b, int(c), 1000 * s / c)
                                 for b, (c, s) in sorted(self.verify_batches.items())),
            draft_ms_per_token=(1000 * self.model_draft_s / self.model_drafted
                                if self.model_drafted else None),
            steps_by_drafter=self._ordered(self.by_drafter),
            drafted_by_drafter=self._ordered(self.drafted_by),
            accepted_by_drafter=self._ordered(self.accepted_by),
            step_s=self.step_s,
            llama_s=self.llama_s,
        )

    def _ordered(self, counts: Counter[str]) -> dict[str, int]:
        rank = {n: i for i, n in enumerate(self.order)}
        return {n: counts[n] for n in sorted(counts, key=lambda n: rank.get(n, len(rank)))}
