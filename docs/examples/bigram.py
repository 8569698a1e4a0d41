"""A bigram lookup drafter: after token t, propose what followed t's last earlier occurrence.

The worked example of ARCHITECTURE.md's "Add a drafter". A drafter is one module in
``specchat/engine/drafters/`` that defines ``NAME`` and ``build(env)``; copied there, this file
is found by ``--drafter bigram``, listed in ``--drafter``'s help, scored by the planner as a
chain drafter, and verified by the one rule. ``tests/test_dropin_drafter.py`` drops this very
file into the package's search path and checks all of that.
"""

from __future__ import annotations

from specchat.engine.decode.drafting import DrafterBase, DraftRequest, Proposal
from specchat.engine.decode.registry import DrafterEnv
from specchat.engine.decode.verify import one_hot

NAME = "bigram"


class BigramDrafter(DrafterBase):  # DrafterBase gives every hook but propose its default
    name = NAME

    def propose(self, req: DraftRequest) -> Proposal:
        seq, out = list(req.seq), []
        for _ in range(req.plan.depth):  # the chain length the planner asked for
            last = seq[-1]
            at = next((i for i in range(len(seq) - 2, -1, -1) if seq[i] == last), None)
            if at is None:
                break  # fewer tokens (or none) is a valid proposal
            out.append(seq[at + 1])
            seq.append(seq[at + 1])
        # parents: a chain (each token's parent is the one before it); q: the distribution
        # each token was drawn from — a lookup is certain, so one-hot.
        return Proposal(NAME, tuple(out), tuple(range(-1, len(out) - 1)),
                        tuple(one_hot(t) for t in out))


def build(env: DrafterEnv) -> BigramDrafter:
    """The drafter for one environment (it needs nothing loaded: no draft model, no weights)."""
    return BigramDrafter()
