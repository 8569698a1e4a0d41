"""The draft model as a chain drafter ("model"): γ tokens, one after another.

Under greedy decoding each token is the draft's argmax; otherwise a sample from the draft's
distribution after the same sampler transform as the target's. The γ policy may stop the chain
early (``keep_drafting``, told the draft's confidence in each token).
"""

from __future__ import annotations

from collections.abc import Sequence

from specchat.engine.decode import arms
from specchat.engine.decode.drafting import DrafterBase, DraftRequest, Proposal
from specchat.engine.decode.plan import MODEL
from specchat.engine.decode.registry import DrafterEnv
from specchat.engine.decode.verify import Verdict
from specchat.engine.drafters._draft_model import DraftModel
from specchat.engine.drafters._shared import shared_draft

NAME = MODEL
ARM = arms.draft_chain()


class ModelDrafter(DrafterBase):
    name = NAME

    def __init__(self, dm: DraftModel) -> None:
        self.dm = dm

    def reset(self, prompt: Sequence[int]) -> None:
        self.dm.reset(prompt)

    def propose(self, req: DraftRequest) -> Proposal:
        # A tree plan asks more than a chain can give: its deepest path is the chain.
        return self.dm.chain(req, req.plan.depth, self.name)

    def commit(self, seq: Sequence[int], proposal: Proposal, verdict: Verdict) -> None:
        if proposal.drafter == self.name:
            self.dm.commit(proposal, verdict)

    def settle(self, seq: Sequence[int]) -> None:
        self.dm.settle(seq)


def build(env: DrafterEnv) -> ModelDrafter | None:
    dm = shared_draft(env)
    return ModelDrafter(dm) if dm is not None else None
