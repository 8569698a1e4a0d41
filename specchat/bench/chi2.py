"""Pearson's χ² tests, for the exactness tests and `specchat prove` (no scipy needed).

Cells whose expected count is under 5 are pooled into one, as the test's textbook condition asks.
Critical values and p-values are exact: the χ² survival function is the regularized upper
incomplete gamma function Q(df/2, x/2), computed by its power series below a + 1 and by its
continued fraction above (Numerical Recipes §6.2), and the quantile is found by bisection on it
(an approximation such as Wilson–Hilferty's is lenient at small df).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

_EPS = 1e-15
_TINY = 1e-300


def _lower_series(a: float, x: float) -> float:
    """P(a, x) by its series (converges fast for x < a + 1)."""
    term = total = 1.0 / a
    n = a
    for _ in range(10_000):
        n += 1.0
        term *= x / n
        total += term
        if abs(term) < abs(total) * _EPS:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _upper_fraction(a: float, x: float) -> float:
    """Q(a, x) by its continued fraction, modified Lentz (converges fast for x > a + 1)."""
    b = x + 1.0 - a
    c = 1.0 / _TINY
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = _TINY if abs(d) < _TINY else d
        c = b + an / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return h * math.exp(-x + a * math.log(x) - math.lgamma(a))


def gamma_q(a: float, x: float) -> float:
    """The regularized upper incomplete gamma function Q(a, x) = 1 − P(a, x)."""
    if a <= 0:
        raise ValueError("a must be > 0")
    if x <= 0:
        return 1.0
    if x < a + 1.0:
        return 1.0 - _lower_series(a, x)
    return _upper_fraction(a, x)


def survival(statistic: float, df: int) -> float:
    """P(χ²_df ≥ statistic): the p-value of a χ² statistic."""
    if math.isinf(statistic):
        return 0.0
    return gamma_q(df / 2.0, statistic / 2.0)


@dataclass(frozen=True)
class ChiSquare:
    statistic: float
    df: int
    critical: float

    @property
    def ok(self) -> bool:
        return self.statistic <= self.critical

    @property
    def p_value(self) -> float:
        return survival(self.statistic, self.df)

    def __str__(self) -> str:
        return f"χ² = {self.statistic:.1f} (df {self.df}, critical {self.critical:.1f})"


def critical_value(df: int, alpha: float = 1e-6) -> float:
    """The x with P(χ²_df ≥ x) = alpha, by bisection on the survival function."""
    if df < 1 or not 0 < alpha < 1:
        raise ValueError("need df ≥ 1 and 0 < alpha < 1")
    lo, hi = 0.0, max(1.0, float(df))
    while survival(hi, df) > alpha:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if survival(mid, df) > alpha:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return 0.5 * (lo + hi)


def chi_square(counts: Mapping[object, int], probs: Mapping[object, float],
               alpha: float = 1e-6) -> ChiSquare:
    """Test observed ``counts`` against the distribution ``probs`` (keys: outcomes).

    An outcome observed but absent from ``probs`` (probability 0) makes the statistic infinite.
    """
    n = sum(counts.values())
    if any(k not in probs or probs[k] <= 0 for k, c in counts.items() if c > 0):
        return ChiSquare(math.inf, 1, critical_value(1, alpha))
    cells: list[tuple[float, int]] = []
    pooled_e, pooled_o = 0.0, 0
    for k, p in probs.items():
        e, o = p * n, counts.get(k, 0)
        if e < 5:
            pooled_e += e
            pooled_o += o
        else:
            cells.append((e, o))
    if pooled_e > 0:
        cells.append((pooled_e, pooled_o))
    stat = sum((o - e) ** 2 / e for e, o in cells)
    df = max(1, len(cells) - 1)
    return ChiSquare(stat, df, critical_value(df, alpha))


def homogeneity(a: Mapping[object, int], b: Mapping[object, int]) -> ChiSquare:
    """Pearson's χ² test that two samples come from one distribution (a 2 × k table).

    Outcomes whose expected count is under 5 in either sample are pooled into one cell. With a
    single cell left there is nothing to tell apart: the statistic is 0.
    """
    na, nb = sum(a.values()), sum(b.values())
    if na == 0 or nb == 0:
        raise ValueError("both samples need outcomes")
    share = na / (na + nb)
    cells: list[tuple[int, int]] = []
    pooled = [0, 0]
    for k in set(a) | set(b):
        oa, ob = a.get(k, 0), b.get(k, 0)
        if min(share, 1 - share) * (oa + ob) < 5:
            pooled[0] += oa
            pooled[1] += ob
        else:
            cells.append((oa, ob))
    if sum(pooled):
        if min(share, 1 - share) * sum(pooled) >= 5 or not cells:
            cells.append((pooled[0], pooled[1]))
        else:  # too small to stand alone: join the smallest cell
            i = min(range(len(cells)), key=lambda j: sum(cells[j]))
            cells[i] = (cells[i][0] + pooled[0], cells[i][1] + pooled[1])
    stat = 0.0
    for oa, ob in cells:
        t = oa + ob
        ea, eb = t * share, t * (1 - share)
        stat += (oa - ea) ** 2 / ea + (ob - eb) ** 2 / eb
    df = max(1, len(cells) - 1)
    return ChiSquare(stat if len(cells) > 1 else 0.0, df, critical_value(df))


def noncentral_survival(statistic: float, df: int, lam: float) -> float:
    """P(χ'²_df(λ) ≥ statistic): the noncentral χ² as a Poisson(λ/2) mixture of central ones."""
    if lam <= 0:
        return survival(statistic, df)
    half = lam / 2.0
    # Sum outward from the Poisson mode, where the weights are largest, until they vanish.
    mode = int(half)
    total = 0.0
    for direction in (1, -1):
        j = mode if direction == 1 else mode - 1
        while j >= 0:
            w = math.exp(-half + j * math.log(half) - math.lgamma(j + 1.0))
            total += w * survival(statistic, df + 2 * j)
            if w < 1e-14 and abs(j - mode) > 3:
                break
            j += direction
    return min(1.0, total)


def detectable_tv(n_a: int, n_b: int, df: int, alpha: float, power: float = 0.9) -> float:
    """The smallest total-variation distance δ between two distributions that the homogeneity
    test on ``n_a`` and ``n_b`` draws (``df`` degrees of freedom, level ``alpha``) detects with
    probability ≥ ``power``, whatever its shape.

    Its noncentrality is λ = n·Σ(a_i − b_i)²/m_i with n = n_a·n_b/(n_a + n_b) and m the pooled
    proportions; by Cauchy–Schwarz Σ(a_i − b_i)²/m_i ≥ (Σ|a_i − b_i|)² = 4δ², so λ ≥ 4nδ²:
    δ = √(λ*/4n), λ* the noncentrality at which the test's power reaches ``power``.
    """
    if n_a <= 0 or n_b <= 0:
        raise ValueError("both samples need draws")
    critical = critical_value(df, alpha)
    lo, hi = 0.0, 1.0
    while noncentral_survival(critical, df, hi) < power:
        lo, hi = hi, hi * 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if noncentral_survival(critical, df, mid) < power:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-6 * hi:
            break
    n = n_a * n_b / (n_a + n_b)
    return min(1.0, math.sqrt(hi / (4.0 * n)))
