"""The step plan's tree shape: parent indices, chains, depth, children."""

from __future__ import annotations

import pytest

from specchat.engine.decode.plan import Plan, chain, plain


def test_chain_shape() -> None:
    c = chain("model", 4, "γ 4")
    assert c.parents == (-1, 0, 1, 2) and c.is_chain and c.depth == 4 and c.size == 4
    assert chain("model", 0).drafter == "none" and plain().size == 0


def test_tree_shape() -> None:
    t = Plan("tree", (-1, -1, 0, 0, 1, 2))
    assert not t.is_chain and t.depth == 3
    assert t.children(-1) == [0, 1] and t.children(0) == [2, 3] and t.children(5) == []


@pytest.mark.parametrize("parents", [(0,), (-1, 1), (-2,)])
def test_parent_must_come_first(parents: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        Plan("tree", parents)
