"""What a speculative step costs on this machine right now, learned from the steps themselves.

A step that drafts γ tokens costs γ·t_d (the draft model, one token at a time), plus
T_v(γ + 1) = a + b·(γ + 1) (one target pass over the last token and the drafts, plus the
verification rule), plus o (the rest of the loop: committing tokens, events). Each is a
decayed estimate — recent steps weigh more, so the model follows the machine when other work
starts or stops — and the line a + b·n is a decayed least-squares fit.

When the draft length barely varies the slope b is not identified by the data, so the fit is
anchored to the *shape* of a prior curve (the pair's calibration, or the controller's warm-up):
a penalty on b − r₀·a, with r₀ = b₀/a₀, keeps the prior's slope-to-intercept ratio without
tying the level, which the data sets. Outliers (a step slowed by a burst of load) are clipped
to a few times the prediction before they enter the sums.
"""

from __future__ import annotations

from collections.abc import Sequence

from specchat.engine.costs import CostCurve

CLIP = 3.0  # an observation above CLIP × the prediction counts as CLIP × the prediction
N_REF = 5.0  # batch size at which the shape penalty is expressed in seconds


def decay_for(half_life: float) -> float:
    """The per-observation factor that halves an observation's weight after ``half_life``."""
    return 0.5 ** (1.0 / half_life)


def fit_line(ns: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Ordinary least squares y ≈ a + b·n (b = 0 for a single n)."""
    k = len(ns)
    mn, my = sum(ns) / k, sum(ys) / k
    var = sum((n - mn) ** 2 for n in ns)
    b = sum((n - mn) * (y - my) for n, y in zip(ns, ys, strict=True)) / var if var > 0 else 0.0
    return my - b * mn, b


class OnlineCostModel:
    def __init__(self, half_life: float = 48.0, shape_weight: float = 2.0) -> None:
        self.lam = decay_for(half_life)
        self.shape_weight = shape_weight
        self.ratio: float | None = None  # r₀ = b₀ / a₀ of the prior curve
        # Decayed sums for T_v: Σw, Σw·n, Σw·n², Σw·y, Σw·n·y
        self._s = [0.0] * 5
        self._n_verify = 0
        self._draft = [0.0, 0.0]  # Σw·seconds, Σw·tokens
        self._over = [0.0, 0.0]  # Σw·seconds, Σw
        self._fit: tuple[float, float] | None = None

    # ----------------------------------------------------------------------------- priors

    def seed(self, curve: CostCurve, weight: float = 4.0) -> None:
        """Start from a measured curve (calibration): its points as ``weight`` observations in
        all, and its shape as the anchor for the slope."""
        ns = [float(n) for n in range(1, len(curve.verify_s) + 1)]
        a0, b0 = fit_line(ns, curve.verify_s)
        self.set_shape(a0, b0)
        for n, y in zip(ns, curve.verify_s, strict=True):
            self._add_verify(n, y, weight / len(ns))
        self._draft = [curve.draft_s * weight, weight]
        self._fit = None

    def set_shape(self, a0: float, b0: float) -> None:
        if a0 > 0 and b0 >= 0:
            self.ratio = b0 / a0

    # ----------------------------------------------------------------------- observations

    def add_draft(self, tokens: int, seconds: float) -> None:
        if tokens <= 0 or seconds <= 0:
            return
        if self._draft[1] >= 3:
            seconds = min(seconds, CLIP * self.t_draft * tokens)
        lam = self.lam
        self._draft = [lam * self._draft[0] + seconds, lam * self._draft[1] + tokens]

    def add_verify(self, n: int, seconds: float) -> None:
        if n <= 0 or seconds <= 0:
            return
        if self._n_verify >= 3:
            seconds = min(seconds, CLIP * self.t_verify(n))
        lam = self.lam
        self._s = [lam * v for v in self._s]
        self._add_verify(float(n), seconds, 1.0)
        self._n_verify += 1

    def _add_verify(self, n: float, y: float, w: float) -> None:
        s = self._s
        s[0] += w
        s[1] += w * n
        s[2] += w * n * n
        s[3] += w * y
        s[4] += w * n * y
        self._fit = None

    def add_overhead(self, seconds: float) -> None:
        """Step time spent outside the draft and the verification (clipped like the rest)."""
        if seconds < 0:
            return
        if self._over[1] >= 3:
            seconds = min(seconds, CLIP * self.overhead + 1e-4)
        lam = self.lam
        self._over = [lam * self._over[0] + seconds, lam * self._over[1] + 1.0]

    # -------------------------------------------------------------------------- estimates

    @property
    def ready(self) -> bool:
        return self._s[0] > 0 and self._draft[1] > 0

    @property
    def t_draft(self) -> float:
        return self._draft[0] / self._draft[1] if self._draft[1] > 0 else 0.0

    @property
    def overhead(self) -> float:
        return self._over[0] / self._over[1] if self._over[1] > 0 else 0.0

    def line(self) -> tuple[float, float]:
        """(a, b) of T_v(n) ≈ a + b·n."""
        if self._fit is None:
            self._fit = self._solve()
        return self._fit

    def _solve(self) -> tuple[float, float]:
        s0, s1, s2, sy, sny = self._s
        if s0 <= 0:
            return 0.0, 0.0
        # Normal equations of Σw(y − a − b·n)² + κ·N_REF²·(b − r₀·a)².
        r = self.ratio if self.ratio is not None else 0.3  # CPU-like guess, barely weighted
        k = (self.shape_weight if self.ratio is not None else 1e-3) * N_REF * N_REF
        m00, m01, m11 = s0 + k * r * r, s1 - k * r, s2 + k
        det = m00 * m11 - m01 * m01
        if det <= 1e-18 * max(1.0, m00 * m11):
            return sy / s0, 0.0
        a = (sy * m11 - sny * m01) / det
        b = (sny * m00 - sy * m01) / det
        if b < 0:  # a bigger batch never costs less: a flat line through the mean
            return sy / s0, 0.0
        if a < 0:  # keep T_v(1) positive: a line through the origin
            return 0.0, sny / s2 if s2 > 0 else 0.0
        return a, b

    def t_verify(self, n: int) -> float:
        a, b = self.line()
        return a + b * n

    def step_cost(self, gamma: int) -> float:
        """Seconds of a step that drafts ``gamma`` tokens (0: a plain step)."""
        return gamma * self.t_draft + self.t_verify(gamma + 1) + self.overhead

    def describe(self) -> str:
        a, b = self.line()
        return (f"t_d {self.t_draft * 1000:.2f} ms, T_v(n) {a * 1000:.2f} + {b * 1000:.2f}·n ms, "
                f"overhead {self.overhead * 1000:.2f} ms")
