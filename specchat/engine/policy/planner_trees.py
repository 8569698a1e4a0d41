"""The planner's token trees: the acceptance of each rank of child at each depth, the shapes
Sequoia's dynamic programme finds best for them (:mod:`specchat.engine.policy.tree_dp`), and each
shape's score on this machine's costs (Chen et al. 2024, arXiv:2402.12374, §3.3).

Rank 1's acceptance at depth d is the chain's α_d (the planner's per-topic estimate); lower
ranks' P(rank k accepted | parent accepted) are counted from tree steps' ``accepted_ranks`` per
depth (:class:`~specchat.engine.policy.tree_stats.RankStats`), shrunk toward a geometric prior on what
rank 1 leaves.
"""

from __future__ import annotations

from collections.abc import Sequence

from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import Plan
from specchat.engine.policy.planner_settings import Candidate, PlannerSettings
from specchat.engine.policy.tree_dp import best_trees
from specchat.engine.policy.tree_dp import expected_tokens as tree_expected
from specchat.engine.policy.tree_stats import RankStats, tree_draft_cost

TREE_EVERY = 16  # steps between two tree searches, at most (while the estimates move)


class TreePlans:
    def __init__(self, settings: PlannerSettings) -> None:
        self.settings = settings
        self.ranks = RankStats(settings.tree_depth, settings.tree_ranks, settings.rank_half_life)
        self._key: tuple[tuple[int, ...], ...] | None = None
        self._shapes: list[Plan] = []
        self._age = 0  # tree searches skipped since the last
        self._top: list[Plan] = []  # the best-scoring shapes of the last full scoring

    def rank_table(self, alphas: Sequence[float]) -> list[list[float]]:
        """p[d][k]: P(the (k+1)-th child at depth d + 1 is accepted | its parent was)."""
        ps = self.settings
        out = []
        for d in range(min(ps.tree_depth, len(alphas))):
            a = alphas[d]
            row = [a]
            left = 1.0 - a  # what rank 1 leaves to the others
            for k in range(1, ps.tree_ranks):
                prior = left * ps.rank_prior * (1 - ps.rank_prior) ** (k - 1)
                row.append(min(self.ranks.p(d, k, prior, ps.rank_prior_weight), left))
                left = max(left - row[-1], 0.0)
            out.append(row)
        return out

    def best(self, name: str, alphas: Sequence[float], table: Sequence[float], t_d: float,
             o: float, chains_elsewhere: bool, reshape: bool = True) -> Candidate | None:
        """The best tree of drafter ``name`` over budgets n and depth bounds L (Sequoia's
        depth-bounded search: a deeper tree costs a draft pass per level). Shapes come from
        the DP on the rank table rounded to 0.05 and searched again at most every
        ``TREE_EVERY`` steps (the search is dear in Python); each shape is then scored on the
        exact estimates and costs."""
        p = self.rank_table(alphas)
        key = tuple(tuple(round(x * 20) for x in row) for row in p)
        self._age += 1 if reshape else 0
        stale = key != self._key and self._age >= TREE_EVERY
        if not self._shapes or (reshape and stale):
            self._age = 0
            budget = min(self.settings.tree_budget, len(table))
            shapes: dict[tuple[int, ...], None] = {}
            for depth in range(1, len(p) + 1):
                for t in best_trees(p[:depth], budget)[1:]:
                    shapes[t.parents] = None
            self._key, self._shapes = key, [Plan(name, s) for s in shapes]
        scored = []
        # Between searches (and for exploration's sampled α) only the shapes that scored best
        # at the last search are scored again.
        full = reshape and self._age == 0
        for plan in self._shapes if full or not self._top else self._top:
            if chains_elsewhere and plan.is_chain:
                continue  # the model chain is the same step
            scored.append(Candidate(plan, tree_expected(p, plan.parents),
                                    tree_draft_cost(plan, t_d, table) + table[plan.size] + o))
        scored.sort(key=lambda c: -c.rate)
        if full:
            self._top = [c.plan for c in scored[:8]]
        return scored[0] if scored else None

    def expected(self, alphas: Sequence[float], plan: Plan) -> float:
        """Expected tokens of ``plan``'s tree on the chain's α (rank 1) and the ranks' counts."""
        return tree_expected(self.rank_table(alphas), plan.parents)

    def learn(self, plan: Plan, step: StepEvent) -> list[float]:
        """Walk the accepted path of the plan the step ran: per depth, what was offered and
        which rank (if any) the target took. Returns rank 1's outcomes, for the depth α."""
        ranks = step.accepted_ranks
        node, outcomes = -1, []
        for d in range(plan.depth):
            kids = plan.children(node)
            if not kids:
                break
            r = ranks[d] if d < len(ranks) and ranks[d] < len(kids) else None
            self.ranks.add(d, len(kids), r)
            outcomes.append(1.0 if r == 0 else 0.0)
            if r is None:
                break
            node = kids[r]
        return outcomes

    def read_ranks(self, state: dict[str, list[list[float]]]) -> RankStats:
        """The rank counts of a saved state, checked (raises on one of another shape); the
        caller puts them in ``ranks`` once the rest of its state has loaded too."""
        ps = self.settings
        ranks = RankStats(ps.tree_depth, ps.tree_ranks, ps.rank_half_life)
        ranks.load_state(state)
        return ranks
