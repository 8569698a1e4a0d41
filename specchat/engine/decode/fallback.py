"""Several drafters in turn: the first that proposes something drafts the step.

What ``--drafter ngram,model`` means: the n-gram lookup when the conversation repeats itself
(nearly free), else the draft model. Not a drafter of its own name: built from a list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from specchat.engine.decode.drafting import (
    Drafter,
    DrafterBase,
    DraftFailed,
    DraftRequest,
    Proposal,
)
from specchat.engine.decode.grammar_drafts import allowed_part
from specchat.engine.decode.plan import Plan, plain
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.verify import Verdict
from specchat.engine.llama.context import DecodeCancelled
from specchat.errors import SpecchatError


class Fallback(DrafterBase):
    def __init__(self, drafters: Sequence[Drafter]) -> None:
        self.drafters = list(drafters)
        self.name = ",".join(d.name for d in self.drafters)

    def default_plan(self, gamma: int) -> Plan:
        return replace(self.drafters[0].default_plan(gamma), drafter=self.name) if gamma > 0 \
            else plain()

    def reset(self, prompt: Sequence[int]) -> None:
        for d in self.drafters:
            d.reset(prompt)

    def configure(self, settings: SamplerSettings) -> None:
        for d in self.drafters:
            d.configure(settings)

    def propose(self, req: DraftRequest) -> Proposal:
        for d in self.drafters:
            plan = d.default_plan(req.plan.size) if req.plan.is_chain else req.plan
            try:
                # A proposal the grammar forbids outright is no proposal: the next one drafts.
                got = allowed_part(d.propose(replace(req, plan=replace(plan, drafter=d.name))),
                                   req.grammar)
            except DecodeCancelled:
                raise
            except SpecchatError as e:  # say which one failed, so only it drops out
                failed = e.drafter if isinstance(e, DraftFailed) else None
                raise DraftFailed(str(e), failed or d.name) from e
            if got.tokens:
                return got
        return Proposal(self.name)

    def can_propose(self, seq: Sequence[int]) -> bool:
        return any(d.can_propose(seq) for d in self.drafters)

    def commit(self, seq: Sequence[int], proposal: Proposal, verdict: Verdict) -> None:
        for d in self.drafters:  # each hears what was committed; the proposal names its owner
            d.commit(seq, proposal, verdict)

    def settle(self, seq: Sequence[int]) -> None:
        for d in self.drafters:
            d.settle(seq)
