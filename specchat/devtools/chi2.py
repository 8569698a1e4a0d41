"""Pearson's χ² goodness of fit, for the exactness tests (no scipy needed).

Cells whose expected count is under 5 are pooled into one, as the test's textbook condition asks;
the critical value comes from the Wilson–Hilferty approximation, which is accurate to a few
percent for any df ≥ 1 at the tail probabilities the tests use.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

# Upper-tail standard normal quantiles.
_Z = {1e-3: 3.0902, 1e-4: 3.7190, 1e-5: 4.2649, 1e-6: 4.7534}


@dataclass(frozen=True)
class ChiSquare:
    statistic: float
    df: int
    critical: float

    @property
    def ok(self) -> bool:
        return self.statistic <= self.critical

    def __str__(self) -> str:
        return f"χ² = {self.statistic:.1f} (df {self.df}, critical {self.critical:.1f})"


def critical_value(df: int, alpha: float = 1e-6) -> float:
    z = _Z[alpha]
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


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
