"""What the planner knows of token trees besides the chain's estimates: how often each rank of
child is the accepted one, per depth (:class:`RankStats`), and what drafting a tree level by
level costs (:func:`tree_draft_cost`)."""

from __future__ import annotations

from collections.abc import Sequence

from specchat.engine.decode.plan import Plan
from specchat.engine.policy.decay import decay_for


class RankStats:
    """Decayed counts per depth and rank: how often a node on the accepted path offered a rank-k
    child (``offered``), and how often that rank was the one accepted (``hits``)."""

    def __init__(self, depth: int, ranks: int, half_life: float = 200.0) -> None:
        self.offered = [[0.0] * ranks for _ in range(depth)]
        self.hits = [[0.0] * ranks for _ in range(depth)]
        self.lam = decay_for(half_life)

    def add(self, depth: int, children: int, accepted: int | None) -> None:
        if depth >= len(self.offered):
            return
        off, hit = self.offered[depth], self.hits[depth]
        for k in range(len(off)):
            off[k] *= self.lam
            hit[k] *= self.lam
        for k in range(min(children, len(off))):
            off[k] += 1.0
        if accepted is not None and accepted < len(hit):
            hit[accepted] += 1.0

    def p(self, depth: int, rank: int, prior: float, weight: float) -> float:
        off, hit = self.offered[depth][rank], self.hits[depth][rank]
        return (hit + weight * prior) / (off + weight)

    def state(self) -> dict[str, list[list[float]]]:
        return {"offered": self.offered, "hits": self.hits}

    def load_state(self, d: dict[str, list[list[float]]]) -> None:
        off = [[float(v) for v in row] for row in d["offered"]]
        hit = [[float(v) for v in row] for row in d["hits"]]
        shape = [len(r) for r in self.offered]
        if [len(r) for r in off] != shape or [len(r) for r in hit] != shape:
            raise ValueError("rank statistics of another shape")
        self.offered, self.hits = off, hit


def tree_draft_cost(plan: Plan, t_draft: float, table: Sequence[float]) -> float:
    """A draft-model tree drafted level by level: one draft decode of the root, then one
    batched decode per level that has children below it, each priced as t_d scaled by the
    target table's shape at the level's width (the draft runs on the same machine, so its
    batch curve bends where the target's does). A chain of γ costs γ·t_d, as drafted."""
    widths: dict[int, int] = {}
    depths: list[int] = []
    for p in plan.parents:
        d = 1 if p < 0 else depths[p] + 1
        depths.append(d)
        widths[d] = widths.get(d, 0) + 1
    t1 = table[0] if table and table[0] > 0 else 1.0
    deepest = max(widths, default=0)
    return t_draft * (1.0 + sum(table[min(w, len(table)) - 1] / t1
                                for d, w in widths.items() if d < deepest))
