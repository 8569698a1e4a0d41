"""Drafts under a grammar: a chain's tokens proposed with certainty that the grammar forbids are
cut before the target sees them.

A drafter that runs a model masks its own rows (:mod:`.grammar`); one that proposes text it
found (the n-gram lookup, a predicted output) does not know the grammar, and its proposal
would cost a target row per forbidden token and, in a fallback list, take the step from a
drafter that could have drafted. Cutting is exact: a child proposed with q one-hot whose token
the target's masked p gives 0 is kept with probability p(x)/q(x) = 0 and leaves the residual
norm(max(0, p − δx)) = p, so the node's output is p with or without it (:mod:`.verify`'s
proof); the nodes after it are never reached. A token drawn at random (q not one-hot) is never
cut: whether it stays would depend on the draw, which the rule's q does not account for.
"""

from __future__ import annotations

from dataclasses import replace

from specchat.engine.decode.drafting import Proposal
from specchat.engine.decode.grammar import Constraint
from specchat.engine.decode.plan import CHAIN


def allowed_part(proposal: Proposal, grammar: Constraint | None) -> Proposal:
    """``proposal`` cut before the first token the grammar forbids (after it, when that token
    was drawn at random); the same object when nothing is cut. Chains only: a tree's nodes and
    a drafter's side rows are indexed by the drafter, and its forbidden nodes are rejected."""
    if (grammar is None or not proposal.tokens or proposal.side is not None
            or proposal.kind != CHAIN):
        return proposal
    tokens = proposal.tokens
    for k in range(len(tokens)):
        if not grammar.allows_path(tokens[: k + 1]):
            certain = k < len(proposal.q) and proposal.q[k].ids.size == 1
            keep = k if certain else k + 1
            break
    else:
        return proposal
    if keep == len(tokens):
        return proposal
    return replace(proposal, tokens=tokens[:keep], parents=proposal.parents[:keep],
                   q=proposal.q[:keep])
