"""The speed-up model of speculative decoding (Leviathan et al. 2023, §3.4), on measured costs.

With acceptance rate α and draft length γ, one step commits on average
E(γ) = (1 - α^(γ+1)) / (1 - α) tokens, and costs γ draft steps plus one target pass over γ + 1
tokens. Against plain decoding (one target pass per token):

    speedup(γ) = E(γ) / (γ·t_d + T_v(γ+1)) × T_v(1)

It assumes agreements are independent from position to position; real text is burstier, so
this is a guide for choosing γ, and calibration reports it as a prediction. E(γ) and the
speed-up are engine.decode.stats' definitions; this module applies them to a calibration's
cost curve.
"""

from __future__ import annotations

from collections.abc import Sequence

from specchat.engine.decode import stats
from specchat.engine.policy.costs import CostCurve

PAYS = 1.05  # below this predicted speed-up, speculation is not worth its memory and setup


def predicted_speedup(alpha: float, gamma: int, costs: CostCurve) -> float:
    """engine.decode.stats' speed-up on a calibration's cost curve."""
    if gamma <= 0:
        return 1.0
    s = stats.predicted_speedup(alpha, gamma, costs.draft_s, costs.t_verify(gamma + 1),
                                costs.t_verify(1))
    if s is None:
        raise ValueError("a cost curve whose step costs nothing")
    return s


def speedup_table(alpha: float, costs: CostCurve, gamma_max: int | None = None
                  ) -> list[tuple[int, float]]:
    """(γ, predicted speed-up) for γ = 1..gamma_max (default: as far as costs were measured)."""
    top = len(costs.verify_s) - 1 if gamma_max is None else gamma_max
    return [(g, predicted_speedup(alpha, g, costs)) for g in range(1, top + 1)]


def best_gamma(table: Sequence[tuple[int, float]]) -> tuple[int, float]:
    """The γ with the highest predicted speed-up (the smaller γ on a near tie: less waste)."""
    best = table[0]
    for g, s in table[1:]:
        if s > best[1] * 1.01:
            best = (g, s)
    return best


def verdict(alpha: float, costs: CostCurve, gamma: int, speedup: float) -> str:
    """One plain-words sentence a user can act on."""
    ratio = costs.draft_ratio
    if speedup >= PAYS:
        return (f"expect about {speedup:.1f}× the target's speed at γ={gamma} (the draft agrees "
                f"on {alpha:.0%} of tokens and costs {ratio:.0%} of a target step)")
    reasons = []
    if ratio >= 0.25:
        reasons.append(f"the draft costs {ratio:.0%} of the target per token")
    if alpha < 0.5:
        reasons.append(f"the draft agrees with the target on only {alpha:.0%} of tokens")
    n = min(len(costs.verify_s), 5)
    growth = costs.t_verify(n) / costs.t_verify(1)
    if n > 1 and growth > 0.6 * n:
        reasons.append(f"checking {n} tokens at once costs {growth:.1f}× one token here, so "
                       "verification is not nearly free as it is on a GPU")
    if not reasons:
        reasons.append(f"at best {speedup:.2f}× (γ={gamma})")
    return "speculation will not pay on this hardware: " + "; ".join(reasons)
