"""What one speculative step will do: which drafter proposes, and the shape of its proposal.

The planner (a γ policy that also answers ``next_plan``) decides per step; the decoder asks the
named drafter for a proposal of that shape and verifies it. A shape is a tree given by parent
indices: node ``i`` (0-based) hangs under node ``parents[i]``, where ``-1`` is the root (the
last committed token, whose distribution the target's first verify row gives). Children of one
node are ranked in the order they appear: the first is the drafter's best (or first sampled)
candidate, the second its next, and so on. A chain of γ tokens is ``(-1, 0, 1, …, γ-2)``; the
empty shape is a plain step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# The drafters the core and the planner know by name (a plug-in's name is its module's).
NONE = "none"  # a plain step: nothing drafted
MODEL = "model"  # the draft model's chain
NGRAM = "ngram"  # prompt lookup
TREE = "tree"  # the draft model's token tree
# A step's kind (StepEvent.kind) besides NONE and TREE: a chain of drafts.
CHAIN = "chain"


def depths(parents: Sequence[int]) -> list[int]:
    """Each node's depth (1 = a child of the root), for a shape given by parent indices."""
    out: list[int] = []
    for p in parents:
        out.append(1 if p < 0 else out[p] + 1)
    return out


@dataclass(frozen=True, slots=True)
class Plan:
    drafter: str  # "none" for a plain step, else a drafter's name ("model", "ngram", "tree", …)
    parents: tuple[int, ...] = ()  # the tree shape; see the module docstring
    reason: str = ""  # a few words for the stats bar ("tree 12 · depth 4", "plain: …")

    def __post_init__(self) -> None:
        for i, p in enumerate(self.parents):
            if not -1 <= p < i:
                raise ValueError(f"node {i}'s parent {p} must come before it (or be -1)")

    @property
    def size(self) -> int:
        """Draft tokens the target checks besides the root."""
        return len(self.parents)

    @property
    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))

    @property
    def depth(self) -> int:
        return max(depths(self.parents), default=0)

    def children(self, node: int) -> list[int]:
        """The children of ``node`` (−1 = the root), best-ranked first."""
        return [i for i, p in enumerate(self.parents) if p == node]


def plain(reason: str = "") -> Plan:
    return Plan(NONE, (), reason)


def chain(drafter: str, gamma: int, reason: str = "") -> Plan:
    return Plan(drafter if gamma > 0 else NONE, tuple(range(-1, gamma - 1)), reason)
