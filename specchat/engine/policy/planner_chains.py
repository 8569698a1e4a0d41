"""The best chain of one arm on the measured costs, and the longer checks worth timing
(:mod:`specchat.engine.policy.planner`).

Every chain length γ of an arm is scored in one pass, E(γ) = 1 + Σ_i Π_{j ≤ i} α_j grown term by
term, against γ drafted tokens at the arm's price per token plus the check T(γ + 1) and the
loop's overhead. A lookup's checks come in a few sizes only (see :meth:`ChainScorer.
lookup_sizes`). Past the sizes this machine has timed, a check's cost is a guess (a line through
those timed; a size timed once, its first decode held, at least that time over f), so a longer
check whose guessed rate still beats plain is tried now and then to time it
(:meth:`ChainScorer.longer_check`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from specchat.engine.decode.plan import chain
from specchat.engine.policy.cost_model import OnlineCostModel
from specchat.engine.policy.planner_settings import Candidate

# A chain whose check size was never timed is tried when its guessed rate is at least this × the
# best's, so many times: a size's first timing in a process is held, not counted (it pays
# llama.cpp's buffer set-up), and one counted timing moves its estimate only partly.
TRY_UNTIMED = 0.8
TIMINGS_TRIED = 2
LOOKUP_SIZES = frozenset((1, 3, 7, 15, 31))  # the chain lengths a lookup's check may have


class ChainRules(Protocol):
    """What an arm's record says of its chains (:mod:`specchat.engine.policy.planner_arms`)."""

    name: str
    sized_checks: bool  # a lookup's: its checks come in a few sizes

    def deepest(self, gamma_max: int, lookup_depth: int) -> int:
        """Its longest chain now."""
        ...

    def may_time_longer(self) -> bool:
        """Whether a check longer than its best may be timed now."""
        ...

    def departed_within(self, g: int) -> bool:
        """Whether a timing check of ``g`` or fewer departed from its passage lately."""
        ...

    def needed(self) -> float:
        """How many times plain's rate a step of it must promise now."""
        ...


class ChainScorer:
    """Chains scored on the costs, and the check sizes tried to time them."""

    def __init__(self, gamma_max: int, lookup_depth: int) -> None:
        self.gamma_max = gamma_max
        self.lookup_depth = lookup_depth
        self.timing: dict[int, int] = {}  # chain lengths tried to time their check (by count)

    def best(self, arm: ChainRules, alphas: Sequence[float], per_token: float,
             costs: OnlineCostModel, base: Candidate) -> Candidate | None:
        """The best chain of ``arm`` (α by depth ``alphas``, ``per_token`` seconds a drafted
        token), or a longer one to time; None when no chain is worth scoring."""
        table = costs.verify_table()
        o = costs.overhead
        deepest = arm.deepest(min(self.gamma_max, len(table) - 1),
                              min(self.lookup_depth, len(table) - 1))
        # Every chain length in one pass (this runs each step: plans are built for the winner).
        best_g, best_rate = 0, -1.0
        e, run = 1.0, 1.0
        steps = [(0.0, 0.0)]  # (expected tokens, seconds) by chain length
        sizes = self.lookup_sizes(costs.table.weight) if arm.sized_checks else None
        for g in range(1, min(deepest, len(alphas)) + 1):
            run *= alphas[g - 1]
            e += run
            sec = g * per_token + table[g] + o
            steps.append((e, sec))
            rate = e / sec if sec > 0 else 0.0
            if rate > best_rate * 1.0001 and (sizes is None or g in sizes):
                best_g, best_rate = g, rate
        if not best_g:
            return None
        g, explore = self.longer_check(arm, steps, best_g, best_rate, sizes, costs, base)
        return Candidate(chain(arm.name, g), *steps[g], explore)

    def lookup_sizes(self, weight: Sequence[float]) -> frozenset[int]:
        """The chain lengths a lookup's check may have: a few (2, 4, 8, 16, 32 rows), since
        each new batch shape's first decode in a process costs up to twice a later one and a
        lookup's runs vary, so 31 sizes learnt online would each pay it (and each be timed
        less often); and every size this machine has timed (``weight``: a calibration times
        them all). A CPU's curve has steps where a line has none, which only a timed size
        shows (figures: docs/performance.md)."""
        return LOOKUP_SIZES.union(g for g in range(1, len(weight)) if weight[g] > 0.0)

    def longer_check(self, arm: ChainRules, steps: Sequence[tuple[float, float]], best_g: int,
                     best_rate: float, sizes: frozenset[int] | None, costs: OnlineCostModel,
                     base: Candidate) -> tuple[int, bool]:
        """A chain longer than the best on the guessed costs, to time its check: (its length,
        True), else (``best_g``, False)."""
        weight = costs.table.weight
        # A guess is trusted at most twice past the largest check timed so far: a line
        # through small checks prices a long one far from what it costs, and a long check
        # that fails costs many plain steps; the curve is learnt by doubling instead.
        reach = 2 * (1 + max((i for i, w in enumerate(weight) if w > 0), default=0))
        if not arm.may_time_longer():
            reach = 0
        for g in range(min(len(steps) - 1, reach - 1), best_g, -1):
            # The best chain on the guesses can be far too short where a CPU's curve flattens
            # past the sizes timed: try the longest such check whose guessed rate costs little
            # and still beats plain (twice: the first timing is held, the second moves the
            # estimate a third of the way). A size tried once is priced at least its held
            # first time over f (FirstDecodes), so where even that rate misses the bar — an
            # optimistic one, f the most generous discount seen — no second try is made: its
            # timing would only confirm the size too dear.
            if not self.untimed(g, weight) or (sizes is not None and g not in sizes):
                continue
            if arm.departed_within(g):
                continue
            e_g, s_g = steps[g]
            if e_g / s_g >= max(TRY_UNTIMED * best_rate, arm.needed() * base.rate):
                return g, True
        return best_g, False

    def untimed(self, g: int, weight: Sequence[float]) -> bool:
        """Whether a chain of ``g`` (a check of g + 1 tokens) is one to time: never timed here
        (nor calibrated), or tried fewer than TIMINGS_TRIED times so far."""
        tried = self.timing.get(g, 0)
        return 0 < tried < TIMINGS_TRIED or (tried == 0 and weight[g] == 0.0)

    def timed(self, g: int) -> None:
        """A chain of ``g`` runs to time its check."""
        self.timing[g] = self.timing.get(g, 0) + 1
