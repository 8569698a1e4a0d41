"""The draft model's token tree ("tree", SpecInfer: Miao et al. 2024).

The plan's shape says how many children each node gets; the draft model fills it level by level
with its candidates there (top k under greedy decoding, k draws without replacement otherwise;
see ``_draft_model``), and the target checks the whole tree in one batch. Verification is
recursive rejection sampling over each node's children (:mod:`specchat.engine.decode.verify`).

Without a planner (a γ policy that gives only a length), the tree of γ nodes is the one with
the most expected accepted tokens under a fixed guess of how often a node's k-th best child is
accepted: SpecInfer's and Sequoia's "best n nodes" rule with a prior instead of measurements.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from specchat.engine.decode import arms
from specchat.engine.decode.drafting import DrafterBase, DraftRequest, Proposal
from specchat.engine.decode.plan import TREE, Plan, plain
from specchat.engine.decode.registry import DrafterEnv
from specchat.engine.decode.verify import Verdict
from specchat.engine.drafters._draft_model import DraftModel
from specchat.engine.drafters._shared import shared_draft

NAME = TREE
ARM = arms.draft_tree()

# P(the k-th best child of a node is accepted | its parent was): a prior for the default shape.
RANK_ACCEPT = (0.6, 0.2, 0.08, 0.04)


def best_shape(n: int, accept: Sequence[float] = RANK_ACCEPT) -> tuple[int, ...]:
    """The n-node tree maximising Σ P(node on the accepted path) when a rank-r child is
    accepted with ``accept[r]`` independently: greedily add the best open slot (a node's next
    child), which is optimal because a node's value never exceeds its parent's."""
    parents: list[int] = []
    value: list[float] = []
    heap: list[tuple[float, int, int, int]] = [(-accept[0], 0, -1, 0)]  # (−value, tie, parent, rank)
    tie = 1
    while heap and len(parents) < n:
        neg, _, parent, rank = heapq.heappop(heap)
        node = len(parents)
        parents.append(parent)
        value.append(-neg)
        base = value[parent] if parent >= 0 else 1.0
        if rank + 1 < len(accept):  # the next sibling
            heapq.heappush(heap, (-base * accept[rank + 1], tie, parent, rank + 1))
            tie += 1
        heapq.heappush(heap, (-value[node] * accept[0], tie, node, 0))  # the first child
        tie += 1
    return tuple(parents)


class TreeDrafter(DrafterBase):
    name = NAME

    def __init__(self, dm: DraftModel) -> None:
        self.dm = dm

    def default_plan(self, gamma: int) -> Plan:
        if gamma <= 0:
            return plain()
        shape = best_shape(gamma)
        plan = Plan(self.name, shape)
        return Plan(self.name, shape, f"tree {plan.size} · depth {plan.depth}")

    def reset(self, prompt: Sequence[int]) -> None:
        self.dm.reset(prompt)

    def propose(self, req: DraftRequest) -> Proposal:
        if req.plan.is_chain:  # the policy's early stop applies to chains
            return self.dm.chain(req, req.plan.size, self.name)
        return self.dm.tree(req, req.plan.parents, self.name)

    def commit(self, seq: Sequence[int], proposal: Proposal, verdict: Verdict) -> None:
        if proposal.drafter == self.name:
            self.dm.commit(proposal, verdict)

    def settle(self, seq: Sequence[int]) -> None:
        self.dm.settle(seq)


def build(env: DrafterEnv) -> TreeDrafter | None:
    dm = shared_draft(env)
    return TreeDrafter(dm) if dm is not None else None
