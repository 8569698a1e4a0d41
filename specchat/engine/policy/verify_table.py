"""The target's verify cost per batch size, learnt from the steps: :class:`VerifyTable`.

On a CPU the curve has kinks (docs/performance.md shows one) that a line smooths into wrong
choices. Each batch size keeps its own
decayed mean; a size seen rarely or never borrows the curve's *shape* (the calibration's table,
else what each size cost when last used, else a line), scaled to the level the observed sizes
show now. :class:`~specchat.engine.policy.cost_model.OnlineCostModel` keeps one.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from specchat.engine.policy.costs import non_decreasing
from specchat.engine.policy.decay import decay_for

TABLE_SIZE = 32  # batch sizes the verify table covers (γ up to 31 plus the last token)
SHRINK = 2.0  # observations' worth of the scaled shape in each batch size's estimate
TABLE_CLIP = 1.5  # a table entry's observation above this × its mean counts as this × its mean
LEARNT_MEMORY = 16.0  # a size's learnt cost follows about its last this many observations


def extend_curve(values: Sequence[float], size: int) -> tuple[float, ...]:
    """``values`` (T(1)..T(k)) continued to ``size`` points along the line through its last
    two points (flat if only one): a shape for batch sizes never measured."""
    vals = list(values)[:size]
    if not vals:
        return ()
    step = max(vals[-1] - vals[-2], 0.0) if len(vals) >= 2 else 0.0
    while len(vals) < size:
        vals.append(vals[-1] + step)
    return tuple(vals)


class VerifyTable:
    """T_v(n) for n = 1..size: per batch size a decayed mean, shrunk toward a scaled shape.

    The decay follows the machine's level (other work starting or stopping), so a size not
    used lately has almost no weight. Its *relative* cost is still known: each size also keeps
    a running mean of its observations over T(1)'s decayed mean at the time, decayed only by
    its own steps, which is the shape when no calibration gave one. (Without it, a home that
    answered prose for a while forgot what its 16- and 32-row checks cost, priced them on the
    line through 1-8 rows — far too dear on a CPU whose curve flattens — and cut a copy's
    checks to a third.)

    With m(n) the decayed mean and w(n) its weight, the shape S(n) and the level
    L = Σ w(n)·m(n)/S(n) / Σ w(n) (how much slower or faster than the shape the machine runs
    now), the estimate is (w(n)·m(n) + κ·L·S(n)) / (w(n) + κ), made non-decreasing in n (a
    bigger batch never costs less, so a dip is noise).
    """

    def __init__(self, size: int = TABLE_SIZE, half_life: float = 48.0) -> None:
        self.size = size
        self.lam = decay_for(half_life)
        self.sum = [0.0] * size  # Σ w·seconds per batch size (index n − 1)
        self.weight = [0.0] * size
        self.shape: tuple[float, ...] | None = None
        self.learnt = [0.0] * size  # per size: its own observations' running mean, in T(1)s
        self.count = [0.0] * size  # how many it averages (at most LEARNT_MEMORY)
        self._est: tuple[float, ...] | None = None
        self.version = 0  # bumped by every change (a cache of the estimates keys on it)

    def seed(self, curve: Sequence[float], weight: float = 1.0) -> None:
        """Start from a measured curve: its shape, and each point as ``weight`` observations."""
        if not curve or min(curve) <= 0:
            return
        self.shape = extend_curve(curve, self.size)
        for n, y in enumerate(curve[: self.size], 1):
            self.sum[n - 1] += weight * y
            self.weight[n - 1] += weight
        self._est = None
        self.version += 1

    def add(self, n: int, seconds: float) -> None:
        """One step's measured verify time for a batch of ``n`` (decays every size's weight, so
        a size not used lately follows the level of the ones in use)."""
        if not 1 <= n <= self.size or seconds <= 0:
            return
        w = self.weight[n - 1]
        if w >= 1.0:  # a burst of other work: count it as at most TABLE_CLIP × this size's mean
            seconds = min(seconds, TABLE_CLIP * self.sum[n - 1] / w)
        lam = self.lam
        self.sum = [lam * v for v in self.sum]
        self.weight = [lam * v for v in self.weight]
        self.sum[n - 1] += seconds
        self.weight[n - 1] += 1.0
        if self.weight[0] >= 1.0:  # (T(1) is what a plain step costs: known first)
            c = self.count[n - 1] = min(self.count[n - 1] + 1.0, LEARNT_MEMORY)
            self.learnt[n - 1] += (seconds * self.weight[0] / self.sum[0] - self.learnt[n - 1]) / c
        self._est = None
        self.version += 1

    @property
    def observed(self) -> bool:
        return sum(self.weight) > 0

    def estimates(self, fallback: Sequence[float] | None = None) -> tuple[float, ...]:
        """T_v(1..size); ``fallback`` is the shape when no curve was seeded (e.g. the line)."""
        if self._est is not None and (self.shape is not None or fallback is None):
            return self._est
        shape = self.shape or self._learnt_shape(fallback)
        means = [s / w if w > 1e-9 else 0.0 for s, w in zip(self.sum, self.weight, strict=True)]
        if shape is None or min(shape) <= 0:
            # No shape: only what was seen, flat beyond it (and 0 before anything is seen).
            seen = [m for m in means if m > 0]
            out = []
            last = seen[0] if seen else 0.0
            for m in means:
                last = m if m > 0 else last
                out.append(last)
            est = non_decreasing(out)
        else:
            tw = sum(self.weight)
            level = (sum(w * m / s for w, m, s in zip(self.weight, means, shape, strict=True))
                     / tw) if tw > 0 else 1.0
            est = non_decreasing([(w * m + SHRINK * level * s) / (w + SHRINK)
                                  for w, m, s in zip(self.weight, means, shape, strict=True)])
        if self.shape is not None or fallback is None:
            self._est = est
        return est

    def _learnt_shape(self, fallback: Sequence[float] | None) -> tuple[float, ...] | None:
        """Each size's learnt cost (in T(1)s); between two learnt sizes the line joining them,
        past the largest the ``fallback``'s slope (flat without one), below the smallest its
        ratio."""
        fb = tuple(fallback) if fallback is not None and min(fallback, default=0) > 0 else None
        known = [n for n in range(self.size) if self.count[n] > 0]
        if not known:
            return fb
        lr, first, last = self.learnt, known[0], known[-1]
        out = [lr[first] * (fb[i] / fb[first] if fb else 1.0) for i in range(first)]
        for lo, hi in pairwise(known):
            slope = (lr[hi] - lr[lo]) / (hi - lo)
            out.extend(lr[lo] + slope * (i - lo) for i in range(lo, hi))
        out.extend(lr[last] + ((fb[i] - fb[last]) / fb[0] if fb else 0.0)
                   for i in range(last, self.size))
        return tuple(out)

    def state(self) -> dict[str, list[float]]:
        return {"sum": list(self.sum), "weight": list(self.weight),
                "shape": list(self.shape or ()), "learnt": list(self.learnt),
                "count": list(self.count)}

    def load_state(self, d: dict[str, list[float]]) -> None:
        sums, weights = list(map(float, d["sum"])), list(map(float, d["weight"]))
        if len(sums) != self.size or len(weights) != self.size:
            raise ValueError("verify table of another size")
        self.sum, self.weight = sums, weights
        learnt, count = list(map(float, d.get("learnt") or ())), list(map(float, d.get("count") or ()))
        if len(learnt) != self.size or len(count) != self.size:
            # A state saved before sizes kept their own means: start them from the decayed means
            # (each as one observation: tiny weights still hold the size's mean exactly).
            t1 = sums[0] / weights[0] if weights[0] > 0 else 0.0
            learnt = [s / w / t1 if w > 0 and t1 > 0 else 0.0
                      for s, w in zip(sums, weights, strict=True)]
            count = [1.0 if v > 0 else 0.0 for v in learnt]
        self.learnt, self.count = learnt, count
        shape = tuple(map(float, d.get("shape") or ()))
        self.version += 1
        self.shape = shape if len(shape) == self.size and min(shape) > 0 else None
        self._est = None
