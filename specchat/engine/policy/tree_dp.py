"""The token tree with the most expected tokens for each node budget: Sequoia's dynamic programme.

Sequoia (Chen et al. 2024, "Sequoia: Scalable, Robust, and Hardware-aware Speculative
Decoding", arXiv:2402.12374, §3.1 "tree construction") assumes *positional acceptance*: the
probability that a node's k-th ranked child is the one the verifier accepts depends only on k
(here also on the child's depth d, which the acceptance statistics give us: ``p[d][k]``). A
node v is then reached with probability f(v) = Π_{u ∈ Path(v)} p_u, and a tree T commits on
average

    F(T) = Σ_{v ∈ T} f(v)                      (the root — the step's own token — has f = 1)

tokens per verification. The best tree of n nodes (root included) satisfies the paper's
recursion, split over the root's children ranked 1..k with subtree sizes a_1..a_k:

    c(n) = max_{k, a_1 + … + a_k = n − 1}  1 + Σ_{i ≤ k} p_i · c(a_i),

which we solve per depth (c_d(n): a subtree whose root sits at depth d; children at d + 1 use
``p[d]``) with the inner maximisation as a knapsack over ranks, g_d(k, m) = max_a g_d(k − 1,
m − a) + p[d][k] · c_{d+1}(a). Depth is bounded by how far the estimates reach. The hardware
side — Sequoia's §3.3 choice of the budget n maximising F/(draft time + T(n)) — is the
planner's (:mod:`specchat.engine.policy.planner`).

Shapes come out in level order (all depth-1 nodes, then depth-2, …; siblings by rank) as the
parent indices of :class:`specchat.engine.decode.plan.Plan`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specchat.engine.decode.plan import depths

NEG = float("-inf")


@dataclass(frozen=True, slots=True)
class TreeChoice:
    nodes: int  # n: the verify batch, root included
    expected: float  # F(T): tokens committed on average
    parents: tuple[int, ...]  # the n − 1 draft nodes, level order (see the module docstring)

    @property
    def depth(self) -> int:
        return max(depths(self.parents), default=0)


def best_trees(p: Sequence[Sequence[float]], budget: int) -> list[TreeChoice]:
    """For n = 1..``budget`` the tree of n nodes with the most expected tokens.

    ``p[d][k]`` (0-based: depth d + 1, rank k + 1) is the probability that a node's (k + 1)-th
    child at that depth is accepted given the node was. Item n − 1 of the result is for n.
    """
    depth_max = len(p)
    sizes = np.arange(budget)  # m: nodes below a subtree's root, 0..budget − 1
    a_idx = np.arange(1, budget)  # a: one child's subtree size
    rest = sizes[:, None] - a_idx[None, :]  # m − a
    valid = rest >= 0
    rest = np.where(valid, rest, 0)
    # c[d][n]: best F of a subtree of n nodes whose root is at depth d (0 = the step's root).
    c = np.full((depth_max + 1, budget + 1), NEG)
    split: list[list[tuple[int, ...]]] = [[()] * (budget + 1) for _ in range(depth_max + 1)]
    for d in range(depth_max, -1, -1):
        c[d, 1] = 1.0
        if d == depth_max or budget < 2:
            continue
        below = c[d + 1, 1:budget]  # c_{d+1}(a) for a = 1..budget − 1
        g = np.full(budget, NEG)
        g[0] = 0.0  # no children yet: only m = 0
        best = g.copy()
        best_k = np.zeros(budget, dtype=int)
        args: list[np.ndarray] = []
        for k, pk in enumerate(p[d], 1):
            with np.errstate(invalid="ignore"):
                vals = np.where(valid, g[rest] + pk * below[None, :], NEG)
            arg = vals.argmax(axis=1)
            g = vals[sizes, arg]
            args.append(arg + 1)
            better = g > best + 1e-12
            best = np.where(better, g, best)
            best_k = np.where(better, k, best_k)
        for n in range(2, budget + 1):
            m = n - 1
            if best[m] == NEG:
                continue
            c[d, n] = 1.0 + best[m]
            parts = []
            for k in range(int(best_k[m]), 0, -1):
                a = int(args[k - 1][m])
                parts.append(a)
                m -= a
            split[d][n] = tuple(reversed(parts))
    out = []
    for n in range(1, budget + 1):
        if c[0, n] == NEG:
            break  # more nodes than depth × ranks allow
        out.append(TreeChoice(n, float(c[0, n]), _shape(split, n)))
    return out


def _shape(split: list[list[tuple[int, ...]]], n: int) -> tuple[int, ...]:
    """Level-order parent indices of the tree ``split`` describes (the root is −1)."""
    parents: list[int] = []
    level = [(-1, 0, n)]  # (node index, its depth, its subtree size)
    while level:
        nxt = []
        for node, d, size in level:
            for a in split[d][size]:
                parents.append(node)
                nxt.append((len(parents) - 1, d + 1, a))
        level = nxt
    return tuple(parents)


def expected_tokens(p: Sequence[Sequence[float]], parents: Sequence[int]) -> float:
    """F(T) of a given shape: Σ over nodes of the product of p along the path (root: 1)."""
    reach: list[float] = []
    depth: list[int] = []
    rank: dict[int, int] = {}
    total = 1.0
    for p_node in parents:
        k = rank.get(p_node, 0)
        rank[p_node] = k + 1
        d = 0 if p_node < 0 else depth[p_node]
        up = 1.0 if p_node < 0 else reach[p_node]
        prob = p[d][k] if d < len(p) and k < len(p[d]) else 0.0
        reach.append(up * prob)
        depth.append(d + 1)
        total += reach[-1]
    return total
