"""How likely the target is to keep draft tokens: decayed, per-position acceptance estimates.

A step that drafts γ tokens and keeps k verifies positions 1..k (kept) and, if k < γ, position
k + 1 (rejected); later positions are never judged. Counting, per draft position i, how often it
was *reached* (verified) and *kept* estimates α_i = P(keep i | kept 1..i−1) — the conditional
acceptance that real, bursty text has (a run of agreement tends to continue), which a single α
misses. The pooled α = Σkept / Σreached is the maximum-likelihood rate of a cut geometric run.

Estimates shrink toward a prior: per position toward the pooled α, pooled toward the prior α
(the topic's remembered value, or the pair's). Two decay rates: the slow one drives decisions;
the fast one follows the last few steps and replaces the slow one when a change is detected.
Under sampling, Σ min(p, q) at a verified position (the probability the rule keeps its token)
replaces the 0/1 outcome: the same expectation, less noise.

Also here: how the draft's own confidence (its top-1 probability) predicts acceptance, in bins.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.stats import expected_tokens as expected_tokens  # the planner's name
from specchat.engine.policy.decay import decay_for


def step_outcomes(step: StepEvent) -> list[float]:
    """The kept-weight of each verified position of a step, in order (1/0, or Σ min(p, q))."""
    verified = step.accepted + (1 if step.accepted < step.gamma else 0)
    if len(step.overlap) >= verified:
        return [float(x) for x in step.overlap[:verified]]
    return [1.0] * step.accepted + [0.0] * (verified - step.accepted)


class PositionStats:
    """Decayed counts of reached / kept per draft position (1-based positions at index i − 1)."""

    def __init__(self, size: int) -> None:
        self.reached = [0.0] * size
        self.kept = [0.0] * size

    def decay(self, lam: float) -> None:
        self.reached = [lam * v for v in self.reached]
        self.kept = [lam * v for v in self.kept]

    def add(self, outcomes: Sequence[float], start: int = 0) -> None:
        for i, x in enumerate(outcomes[: max(0, len(self.reached) - start)], start):
            self.reached[i] += 1.0
            self.kept[i] += x

    def copy_from(self, other: PositionStats) -> None:
        self.reached = list(other.reached)
        self.kept = list(other.kept)

    @property
    def totals(self) -> tuple[float, float]:
        return sum(self.kept), sum(self.reached)


class AcceptanceModel:
    def __init__(self, size: int, prior_alpha: float, prior_weight: float = 6.0,
                 position_weight: float = 6.0, slow_half_life: float = 40.0,
                 fast_half_life: float = 5.0, pool_first: bool = False) -> None:
        self.size = size
        # The pooled α from the first position alone: where a first token being right is the
        # rare event and the later ones follow from it (a lookup outside a repeated passage),
        # the later positions' many right outcomes would lift the first's estimate.
        self.pool_first = pool_first
        self.prior_alpha = prior_alpha
        self.prior_weight = prior_weight
        self.position_weight = position_weight
        self.slow = PositionStats(size)
        self.fast = PositionStats(size)
        self._lam_slow = decay_for(slow_half_life)
        self._lam_fast = decay_for(fast_half_life)
        self.steps = 0

    @property
    def lam_slow(self) -> float:
        """The slow estimate's decay per step (what other decayed sums kept beside it use)."""
        return self._lam_slow

    def observe(self, outcomes: Sequence[float], start: int = 0) -> None:
        """A step's outcomes; ``start`` > 0: the later depths of one already counted (a
        guess scored as its tokens come, engine.policy.guesses), which adds to it without decaying
        or counting a step."""
        if start == 0:
            self.slow.decay(self._lam_slow)
            self.fast.decay(self._lam_fast)
            self.steps += 1
        self.slow.add(outcomes, start)
        self.fast.add(outcomes, start)

    def adopt_fast(self) -> None:
        """After a detected change: forget the slow history, keep what the fast one saw."""
        self.slow.copy_from(self.fast)

    def _pooled(self, stats: PositionStats) -> tuple[float, float]:
        """Beta posterior (successes, failures) of the pooled α, prior included."""
        kept, reached = (stats.kept[0], stats.reached[0]) if self.pool_first and stats.reached \
            else stats.totals
        m = self.prior_weight
        return kept + m * self.prior_alpha, reached - kept + m * (1 - self.prior_alpha)

    def alpha(self) -> float:
        s, f = self._pooled(self.slow)
        return s / (s + f)

    def fast_alpha(self) -> float:
        s, f = self._pooled(self.fast)
        return s / (s + f)

    def sample_alpha(self, rng: np.random.Generator) -> float:
        """A draw from the pooled α's posterior (Thompson sampling)."""
        s, f = self._pooled(self.slow)
        return float(rng.beta(max(s, 1e-3), max(f, 1e-3)))

    def position_alphas(self, pooled: float | None = None) -> list[float]:
        """α_i for i = 1..size, each shrunk toward ``pooled`` (default: the posterior mean)."""
        base = self.alpha() if pooled is None else pooled
        m = self.position_weight
        st = self.slow
        return [min((k + m * base) / (r + m), 0.999) for k, r in
                zip(st.kept, st.reached, strict=True)]

    def keep_at_most(self, weight: float) -> None:
        """Scale what was observed down to at most ``weight`` observations at the first
        position (the other positions in proportion): earlier evidence kept as a prior that
        new observations soon outweigh (0: forgotten, the prior alone)."""
        for st in (self.slow, self.fast):
            first = st.reached[0] if st.reached else 0.0
            if first > weight >= 0:
                st.decay(weight / first)

    def reset_to(self, other: AcceptanceModel) -> None:
        self.slow.copy_from(other.slow)
        self.fast.copy_from(other.fast)

    def state(self) -> dict[str, object]:
        """What was observed (the settings are the owner's), as JSON-able values."""
        return {"prior_alpha": self.prior_alpha, "steps": self.steps,
                "slow": [self.slow.kept, self.slow.reached],
                "fast": [self.fast.kept, self.fast.reached]}

    def load_state(self, d: dict[str, object]) -> None:
        """Restore :meth:`state` (positions beyond this model's size are dropped, missing ones
        start empty); raises ValueError/TypeError/KeyError on a malformed record."""
        for name, st in (("slow", self.slow), ("fast", self.fast)):
            pair: list[list[float]] = d[name]  # type: ignore[assignment]
            k = [float(v) for v in pair[0]][: self.size]
            r = [float(v) for v in pair[1]][: self.size]
            if len(k) != len(r):
                raise ValueError("acceptance counts of different lengths")
            st.kept = k + [0.0] * (self.size - len(k))
            st.reached = r + [0.0] * (self.size - len(r))
        alpha = float(d["prior_alpha"])  # type: ignore[arg-type]
        if not 0.0 <= alpha <= 1.0:
            raise ValueError("prior α out of range")
        self.prior_alpha = alpha
        self.steps = int(d["steps"])  # type: ignore[call-overload]


# Bin edges of the draft's top-1 probability.
CONF_EDGES = (0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.97)


def confidence_counts(tops: Sequence[float], kept: Sequence[bool | float]
                      ) -> tuple[tuple[float, float], ...]:
    """(kept, seen) per bin of the draft's top-1 probability."""
    counts = [[0.0, 0.0] for _ in range(len(CONF_EDGES) + 1)]
    for top, k in zip(tops, kept, strict=True):
        c = counts[bisect.bisect_right(CONF_EDGES, top)]
        c[0] += float(k)
        c[1] += 1.0
    return tuple((k, n) for k, n in counts)


class ConfidenceBins:
    """P(a drafted token is kept | the draft's top-1 probability), decayed, per bin."""

    def __init__(self, half_life: float = 400.0, prior_weight: float = 3.0) -> None:
        self.kept = [0.0] * (len(CONF_EDGES) + 1)
        self.seen = [0.0] * (len(CONF_EDGES) + 1)
        self._lam = decay_for(half_life)
        self.prior_weight = prior_weight

    def seed(self, counts: Sequence[tuple[float, float]], weight: float = 100.0) -> None:
        """Start from measured (kept, seen) counts, worth ``weight`` observations at most."""
        total = sum(n for _, n in counts)
        if len(counts) != len(self.seen) or total <= 0:
            return
        scale = min(1.0, weight / total)
        self.kept = [k * scale for k, _ in counts]
        self.seen = [n * scale for _, n in counts]

    def add(self, top: float, kept: float) -> None:
        b = bisect.bisect_right(CONF_EDGES, top)
        lam = self._lam
        self.kept = [lam * v for v in self.kept]
        self.seen = [lam * v for v in self.seen]
        self.kept[b] += kept
        self.seen[b] += 1.0

    @property
    def total(self) -> float:
        return sum(self.seen)

    def state(self) -> list[list[float]]:
        return [list(self.kept), list(self.seen)]

    def load_state(self, d: list[list[float]]) -> None:
        kept, seen = ([float(v) for v in d[0]], [float(v) for v in d[1]])
        if len(kept) != len(self.kept) or len(seen) != len(self.seen):
            raise ValueError("confidence bins of another size")
        self.kept, self.seen = kept, seen

    def p_keep(self, top: float, prior: float) -> float:
        """Shrunk toward ``prior`` (and toward the bin's own confidence, which a calibrated
        draft would match) where the bin has few observations."""
        b = bisect.bisect_right(CONF_EDGES, top)
        m = self.prior_weight
        centre = 0.5 * (prior + top)
        return (self.kept[b] + m * centre) / (self.seen[b] + m)
