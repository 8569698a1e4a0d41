"""The verification rule of speculative decoding: which draft tokens the target keeps.

One rule for chains and token trees (a chain is a tree whose nodes have one child each).

Sampled, one child per node (Leviathan et al. 2023, Alg. 1; Chen et al. 2023, Alg. 2): draft
token d, drawn from the drafter's distribution q, is kept with probability min(1, p(d) / q(d));
at a rejection the target's token is drawn from the residual norm(max(0, p − q)).

Sampled, several children per node: recursive rejection sampling — SpecInfer's multi-step
speculative sampling for i.i.d. children (Miao et al., ASPLOS 2024, arXiv:2305.09781) and its
without-replacement form (Jeon et al. 2024, "Recursive Speculative Decoding", arXiv:2402.14160;
see also SpecTr, Sun et al. 2023). The rule, as implemented: the children x₁…x_k of a node
are tried in order against a target distribution that starts at p₁ = p:

    keep x_i with probability min(1, p_i(x_i) / q_i(x_i));
    else p_{i+1} = norm(max(0, p_i − q_i))        (the residual, updated after each child)

and when every child is rejected the token is drawn from p_{k+1}. Here q_i is the distribution
child i was drawn from given the children before it: q itself for i.i.d. children, q with
x₁…x_{i−1} removed and renormalised for children drawn without replacement (what the tree
drafter does). Proof, by induction from the last child: given the children before it, x_i ~ q_i,
so the output of step i is min(p_i, q_i) + (1 − Σ min(p_i, q_i)) · p_{i+1} = p_i (p_{i+1}
depends only on p_i and q_i, not on x_i); hence the node outputs p₁ = p. A kept child moves on
to its own children against the target's distribution there. Every proposal carries its q_i
per node, so the rule needs no knowledge of how the drafter drew.

The residual is positive only where p_i > q_i: it lives on p's support, and a rejected child
(rejection needs p_i(x) < q_i(x)) has residual 0, so it never comes out later. p and q are the
distributions *after* the sampler transform: the guarantee is "the same distribution as plain
sampling with these settings". An n-gram proposal is q one-hot on d: keep d with probability
p(d); on rejection p with d removed.

Greedy: follow the child that equals the target's argmax; the first node with none gives the
target's argmax. The output is token-identical to plain greedy decoding.

Pure numpy, float64 throughout; no llama.cpp calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from specchat.engine.decode.events import TokenLogprob
from specchat.engine.decode.sampling import Distribution

# Below this residual mass p and q are equal up to rounding; a rejection then had probability
# ~0 and any fallback is exact to that order, so sample from p itself.
RESIDUAL_EPS = 1e-12


class Rows(Protocol):
    """Target distributions by node (row 0: the root; row i + 1: node i), computed on access."""

    def __getitem__(self, i: int, /) -> Distribution: ...


@dataclass(frozen=True)
class Rejection:
    index: int  # the rejected node (for a chain: its position in the draft)
    token: int
    p: float  # the target's probability of the token when it was judged (the residual's)
    q: float  # the drafter's probability of it


@dataclass(frozen=True)
class Verdict:
    accepted: int  # draft tokens kept (the accepted path's length)
    token: int  # the target's own token after them: corrected (at a rejection) or bonus
    rejected: Rejection | None  # the first child rejected at the node where the path stopped
    # Per verified depth, for the best-ranked child, when p and q are at hand:
    overlap: tuple[float, ...] = ()  # Σ min(p, q): the probability this rule keeps the token
    match: tuple[float, ...] = ()  # Σ p·q: the same for "keep it if the target's sample equals it"
    path: tuple[int, ...] = ()  # the kept nodes, root to deepest
    ranks: tuple[int, ...] = ()  # each kept node's rank among its siblings (0 = the best)
    rejections: tuple[Rejection, ...] = ()  # every child rejected where the path stopped
    judged: int = 0  # children the rule rejected on the whole path (each left a residual)
    # The target's log-probabilities of the committed tokens (the path's, then ``token``),
    # when the settings ask for them; the decoder adds them (see sampling.token_logprobs).
    logprobs: tuple[TokenLogprob, ...] = ()


def one_hot(token: int) -> Distribution:
    """The drafter distribution of a deterministic proposal (n-gram lookup, greedy drafts)."""
    return Distribution(np.array([token], dtype=np.int64), np.array([1.0]))


def probs_at(d: Distribution, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """d's probability of each id in ``ids`` (0 where d has none)."""
    if d.ids.size == 1:
        return np.where(ids == d.ids[0], d.probs[0], 0.0)
    order = np.argsort(d.ids)
    at = order[np.minimum(np.searchsorted(d.ids, ids, sorter=order), order.size - 1)]
    return np.where(d.ids[at] == ids, d.probs[at], 0.0)


def accept_probability(p: Distribution, q: Distribution, token: int) -> float:
    """min(1, p(token) / q(token)); 0 where p has none."""
    pd, qd = p.prob(token), q.prob(token)
    return 1.0 if pd >= qd else pd / qd


def next_residual(p: Distribution, q: Distribution) -> Distribution:
    """norm(max(0, p − q)): the target distribution after a child drawn from q was rejected."""
    r = p.probs - np.minimum(p.probs, probs_at(q, p.ids))
    total = float(r.sum())
    if total <= RESIDUAL_EPS:  # p == q up to rounding: a rejection had probability ~0
        return p
    keep = r > 0
    return Distribution(p.ids[keep], r[keep] / total)


def children_of(parents: Sequence[int]) -> dict[int, list[int]]:
    """Each node's children (−1 = the root), in rank order."""
    out: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        out.setdefault(p, []).append(i)
    return out


def node_output(p: Distribution, children: Sequence[tuple[int, Distribution]]
                ) -> dict[int, float]:
    """The exact distribution of what a node commits, given its drafted children
    ``(token, q_i)`` in order: "this child is kept" counts as its token. Used to check the rule
    algebraically; it composes the same two steps the sampler takes."""
    out: dict[int, float] = {}
    reach = 1.0
    for token, q in children:
        a = accept_probability(p, q, token)
        out[token] = out.get(token, 0.0) + reach * a
        reach *= 1.0 - a
        p = next_residual(p, q)
    for t, pr in zip(p.ids.tolist(), p.probs.tolist(), strict=True):
        out[t] = out.get(t, 0.0) + reach * pr
    return out


# The probability of keeping a draft token, given the target's and the drafter's probability
# of it. Only ``specchat prove``'s controls pass another (a biased rule it must catch).
KeepRule = Callable[[float, float], float]


def verify_tree(p: Rows, tokens: Sequence[int], parents: Sequence[int],
                q: Sequence[Distribution], rng: np.random.Generator,
                keep: KeepRule | None = None) -> Verdict:
    """Recursive rejection sampling over a token tree (see the module docstring).

    ``p[0]`` is the target's distribution at the root, ``p[i + 1]`` after node i; rows are
    read lazily, only along the path taken. ``q[i]`` is the distribution node i was drawn from.
    ``keep`` None is the exact rule, min(1, p/q).
    """
    kids = children_of(parents)
    node = -1
    path: list[int] = []
    ranks: list[int] = []
    overlap: list[float] = []
    match: list[float] = []
    judged = 0
    while True:
        pi = p[node + 1]
        rejected: list[Rejection] = []
        for rank, c in enumerate(kids.get(node, ())):
            qc, d = q[c], int(tokens[c])
            if rank == 0:
                q_on_p = probs_at(qc, pi.ids)
                overlap.append(float(np.minimum(pi.probs, q_on_p).sum()))
                match.append(float(pi.probs @ q_on_p))
            pd, qd = pi.prob(d), qc.prob(d)
            # probability min(1, pd / qd); never when pd = 0
            kept = (rng.random() * qd < pd) if keep is None else (rng.random() < keep(pd, qd))
            if kept:
                path.append(c)
                ranks.append(rank)
                node = c
                break
            rejected.append(Rejection(c, d, pd, qd))
            judged += 1
            pi = next_residual(pi, qc)
        else:
            return Verdict(len(path), pi.sample(rng), rejected[0] if rejected else None,
                           tuple(overlap), tuple(match), tuple(path), tuple(ranks),
                           tuple(rejected), judged)


def verify_tree_greedy(target_argmax: Sequence[int] | npt.NDArray[np.int64],
                       tokens: Sequence[int], parents: Sequence[int]) -> Verdict:
    """Follow the children that equal the target's argmax (row i + 1 follows node i).

    Under greedy decoding p and q are point masses, so a rejected token has p = 0 and q = 1.
    """
    kids = children_of(parents)
    node = -1
    path: list[int] = []
    ranks: list[int] = []
    judged = 0
    while True:
        best = int(target_argmax[node + 1])
        children = kids.get(node, [])
        hit = next((r for r, c in enumerate(children) if int(tokens[c]) == best), None)
        if hit is None:
            rejected = tuple(Rejection(c, int(tokens[c]), 0.0, 1.0) for c in children)
            return Verdict(len(path), best, rejected[0] if rejected else None, path=tuple(path),
                           ranks=tuple(ranks), rejections=rejected, judged=judged + len(rejected))
        judged += hit
        node = children[hit]
        path.append(node)
        ranks.append(hit)


def chain_parents(n: int) -> tuple[int, ...]:
    return tuple(range(-1, n - 1))


def verify_sampled(p: Rows, q: Sequence[Distribution], drafts: Sequence[int],
                   rng: np.random.Generator, keep: KeepRule | None = None) -> Verdict:
    """Modified rejection sampling over one chain of drafts (``p`` has len(drafts) + 1 rows)."""
    return verify_tree(p, drafts, chain_parents(len(drafts)), q, rng, keep)


def verify_greedy(target_argmax: Sequence[int] | npt.NDArray[np.int64],
                  drafts: Sequence[int]) -> Verdict:
    """Keep draft tokens while they equal the target's argmax (``np.argmax(rows, axis=1)``)."""
    return verify_tree_greedy(target_argmax, drafts, chain_parents(len(drafts)))
