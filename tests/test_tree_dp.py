"""Sequoia's tree DP against hand-computed cases and brute-force enumeration of every tree."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cache

import numpy as np
import pytest

from specchat.engine.decode.plan import Plan
from specchat.engine.policy.tree_dp import best_trees, expected_tokens


def _forests(n: int, d: int, depth_max: int, ranks: int) -> Iterator[tuple]:
    """Every ordered list of child subtrees (at most ``ranks``) with ``n`` nodes in all."""
    if n == 0:
        yield ()
        return
    if d >= depth_max:
        return
    for first in range(1, n + 1):
        for head in _trees(first, d + 1, depth_max, ranks):
            for rest in _forests(n - first, d, depth_max, ranks):
                if len(rest) + 1 <= ranks:
                    yield (head, *rest)


@cache
def _trees_cached(n: int, d: int, depth_max: int, ranks: int) -> tuple:
    return tuple(_forests(n - 1, d, depth_max, ranks))


def _trees(n: int, d: int, depth_max: int, ranks: int) -> tuple:
    return _trees_cached(n, d, depth_max, ranks)


def _value(tree: tuple, p: Sequence[Sequence[float]], d: int = 0) -> float:
    return 1.0 + sum(p[d][k] * _value(child, p, d + 1) for k, child in enumerate(tree))


def test_a_chain_is_best_when_only_first_ranks_are_ever_accepted() -> None:
    p = [[0.8, 0.0], [0.5, 0.0], [0.9, 0.0]]
    trees = best_trees(p, 4)
    assert [t.parents for t in trees] == [(), (-1,), (-1, 0), (-1, 0, 1)]
    # by hand: 1 + 0.8 + 0.8·0.5 + 0.8·0.5·0.9
    assert trees[3].expected == pytest.approx(1 + 0.8 + 0.4 + 0.36)


def test_a_wide_tree_when_depth_two_is_hopeless() -> None:
    p = [[0.5, 0.3, 0.1], [0.01, 0.0, 0.0]]
    t = best_trees(p, 4)[3]
    assert t.parents == (-1, -1, -1)  # three siblings: 1 + 0.5 + 0.3 + 0.1
    assert t.expected == pytest.approx(1.9)


def test_hand_case_of_a_branch() -> None:
    # Two draft nodes: chain 1 + .6 + .6·.7 = 2.02 vs siblings 1 + .6 + .3 = 1.9 → chain;
    # three: chain + rank-2 root child 2.02 + .3 = 2.32 beats chain 3 (2.02 + .6·.7·.7 = 2.314).
    p = [[0.6, 0.3], [0.7, 0.1], [0.7, 0.1]]
    trees = best_trees(p, 4)
    assert trees[2].parents == (-1, 0)
    assert trees[3].expected == pytest.approx(2.32)
    assert Plan("tree", trees[3].parents).depth == 2


@pytest.mark.parametrize("seed", range(6))
def test_dp_matches_brute_force_enumeration(seed: int) -> None:
    rng = np.random.default_rng(seed)
    depth_max, ranks, budget = 3, 3, 7
    p = []
    for _ in range(depth_max):
        first = rng.uniform(0.2, 0.95)
        rest = rng.dirichlet(np.ones(ranks)) * (1 - first)
        p.append([float(first), *map(float, sorted(rest, reverse=True)[: ranks - 1])])
    trees = best_trees(p, budget)
    for n in range(1, budget + 1):
        brute = max(_value(t, p) for t in _trees(n, 0, depth_max, ranks))
        assert trees[n - 1].expected == pytest.approx(brute, abs=1e-12)
        # the returned shape is a valid plan whose own value is the optimum
        plan = Plan("tree", trees[n - 1].parents)
        assert plan.size == n - 1
        assert expected_tokens(p, plan.parents) == pytest.approx(brute, abs=1e-12)


def test_more_nodes_than_depth_and_ranks_allow_are_left_out() -> None:
    trees = best_trees([[0.5]], 5)  # depth 1, one rank: at most the root and one child
    assert len(trees) == 2


def test_expected_tokens_of_a_chain_is_the_chain_formula() -> None:
    p = [[0.9, 0.05]] * 4
    assert expected_tokens(p, (-1, 0, 1)) == pytest.approx(1 + 0.9 + 0.81 + 0.729)
