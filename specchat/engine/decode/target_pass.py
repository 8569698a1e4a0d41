"""A speculative step's check: the target's one pass over ``[last, proposal…]``, the rule.

:func:`verify_pass` evaluates the last committed token and the drafted tokens in one batched
decode with logits on every row (a tree with one sequence id per root-to-leaf path, see
``LlamaContext.decode_tree``), lets ``verify`` decide what to keep, and leaves the target's
cache holding only the kept path. Under a grammar each row is the target's distribution
masked as the matcher stands at that node, so what is kept is distributed as the masked
target's. A step with nothing drafted is one row, taken as plain decoding takes it (or the
row the prompt's read left, on a reply's first step: see ``SpeculativeDecoder``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from specchat.engine.decode.drafting import Proposal, path_to
from specchat.engine.decode.events import TokenLogprob
from specchat.engine.decode.grammar import Constraint, masked
from specchat.engine.decode.plan import TREE
from specchat.engine.decode.sampling import (
    Distribution,
    SamplerSettings,
    distribution,
    greedy_token,
    greedy_tokens,
    token_logprobs,
)
from specchat.engine.decode.verify import Verdict, verify_tree, verify_tree_greedy
from specchat.engine.llama.context import LlamaContext


class _TargetRows:
    """The target's distributions for a verify batch, computed only for the rows consulted:
    ``rows`` (1 + drafted tokens, n_vocab), row 0 the root's (the last committed token); under
    a grammar each row masked by the matcher advanced along the path to it (row i + 1 follows
    node i of ``proposal``)."""

    def __init__(self, rows: npt.NDArray[np.float32], settings: SamplerSettings,
                 grammar: Constraint | None = None, proposal: Proposal | None = None) -> None:
        self.rows = rows
        self.settings = settings
        self.grammar = grammar
        self.proposal = proposal
        self._done: dict[int, Distribution] = {}

    def row(self, i: int) -> npt.NDArray[np.float32]:
        g, prop = self.grammar, self.proposal
        if g is None or prop is None:
            return self.rows[i]
        path = [prop.tokens[n] for n in path_to(prop.parents, i - 1)]
        # A kept token has p > 0, so the grammar allowed it; the matcher cannot go past one
        # only at an end-of-generation token, after which the reply has ended: that row's
        # token is never committed, so it needs no mask.
        return g.mask(self.rows[i], path) if g.reachable(path) else self.rows[i]

    def __getitem__(self, i: int) -> Distribution:
        d = self._done.get(i)
        if d is None:
            d = self._done[i] = distribution(self.row(i), self.settings)
        return d

    def argmax(self) -> list[int] | npt.NDArray[np.int64]:
        """Greedy: each row's best allowed token. A row after a token the grammar forbids is
        never read (the rule stops at that token, which is no masked row's argmax)."""
        g, prop = self.grammar, self.proposal
        if g is None or prop is None:
            return greedy_tokens(self.rows)
        return [greedy_token(self.row(i)) for i in range(len(prop.tokens) + 1)]


def _path_logprobs(rows: _TargetRows, p: _TargetRows | None,
                   tokens: Sequence[int], v: Verdict,
                   settings: SamplerSettings) -> tuple[TokenLogprob, ...]:
    """The target's log-probabilities of what a step commits: each kept draft token from its
    parent's row of ``rows`` (1 + drafted tokens, n_vocab; the root's is row 0, node i's row
    i + 1), then the target's own token from
    the last kept node's — for a corrected token p, not the residual it was drawn from."""
    at = (-1, *v.path)
    committed = (*(tokens[i] for i in v.path), v.token)
    return tuple(token_logprobs(rows.row(a + 1), t, settings,
                                p[a + 1] if p is not None else None)
                 for a, t in zip(at, committed, strict=True))


def verify_pass(tgt: LlamaContext, seq: Sequence[int], proposal: Proposal,
                settings: SamplerSettings, rng: np.random.Generator,
                grammar: Constraint | None, hidden: bool,
                held: npt.NDArray[np.float32] | None = None) -> tuple[Verdict, float]:
    """One target pass over ``[last, proposal…]``, the rule, and the cache cut to the path;
    with the pass's seconds. ``hidden``: the pass also computes the target's hidden states
    (a drafter that drafts from them ran this step). ``held``: the last token's row, already
    read with the prompt (the cache holds all of ``seq``): a plain step takes it and makes
    no pass (0 seconds); only a plain step may be given one."""
    plain = not proposal.tokens and proposal.side is None and not hidden
    if held is not None and not plain:
        raise ValueError("a held row is a plain step's: a drafted step reads the last token "
                         "in its own batch")
    if plain:
        # A plain step, as plain decoding takes it (one row, no shapes, no tree): on a small
        # model the general path's Python was a measurable share of the step.
        t0 = tgt.clock()
        row = masked(tgt.decode((seq[-1],), logits="last")[0] if held is None else held,
                     grammar)
        forward_s = tgt.clock() - t0 if held is None else 0.0
        token = greedy_token(row) if settings.greedy else \
            distribution(row, settings).sample(rng)
        lp = () if settings.logprobs is None else (token_logprobs(row, token, settings),)
        return Verdict(0, token, None, logprobs=lp), forward_s
    tokens = [seq[-1], *proposal.tokens]
    # A drafter's side rows need sequences of their own: the tree layout, even for a chain.
    tree = proposal.kind == TREE or proposal.side is not None
    shape = (-1, *(p + 1 for p in proposal.parents))  # the root is node 0
    t0 = tgt.clock()
    if proposal.side is not None:
        rows = tgt.decode_tree(shape, range(len(tokens)), tokens, proposal.side)
    elif hidden:
        rows, _ = (tgt.decode_tree_with_hidden(shape, range(len(tokens)), tokens) if tree
                   else tgt.decode_with_hidden(tokens))
    else:
        rows = (tgt.decode_tree(shape, range(len(tokens)), tokens) if tree
                else tgt.decode(tokens, logits="all"))
    forward_s = tgt.clock() - t0
    p = None
    target = _TargetRows(rows, settings, grammar, proposal)
    if settings.greedy:
        v = verify_tree_greedy(target.argmax(), proposal.tokens, proposal.parents)
    else:
        p = target
        v = verify_tree(p, proposal.tokens, proposal.parents, proposal.q, rng)
    if settings.logprobs is not None:  # before keep_branch: rows view llama.cpp's buffer
        v = replace(v, logprobs=_path_logprobs(target, p, proposal.tokens, v, settings))
    if tree:
        tgt.keep_branch(shape, v.path[-1] + 1 if v.path else 0,
                        [seq[-1], *(proposal.tokens[i] for i in v.path)])
    return v, forward_s
