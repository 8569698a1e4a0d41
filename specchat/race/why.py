"""Why speculation pays here or not, in one line, from measured costs.

Inputs are seconds measured on this machine: one target token (``t1``), a target pass over
``n`` tokens (``verify[n]``, a verification of n-1 drafts), and a draft-model token. They come
from the pair's calibration when there is one, else from the race's own steps. The line says
what a check of several tokens costs against one token, what the draft costs against the
target, and from that whether the draft model can pay — even if every draft were accepted —
and whether prompt lookup (a nearly free draft) can.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specchat.engine.decode import stats
from specchat.engine.decode.events import StepEvent


@dataclass(frozen=True)
class Costs:
    t1: float  # seconds per target token, decoding alone
    verify: Mapping[int, float]  # n tokens → seconds for one target pass over them
    draft: float | None  # seconds per draft-model token (None: no draft model measured)
    source: str  # "calibration" | "this race"


def speedup(costs: Costs, alpha: float, gamma: int, draft: float | None) -> float | None:
    """engine.decode.stats' speed-up on these costs (None where the check of γ + 1 tokens was
    not measured); ``draft``: seconds per draft token (None: a free one, prompt lookup)."""
    n = gamma + 1
    if n not in costs.verify or costs.t1 <= 0:
        return None
    return stats.predicted_speedup(alpha, gamma, draft or 0.0, costs.verify[n], costs.t1)


def best(costs: Costs, alpha: float, draft: float | None) -> float:
    found = [s for g in range(1, 33) if (s := speedup(costs, alpha, g, draft)) is not None]
    return max(found, default=0.0)


def alpha_needed(costs: Costs, draft: float | None) -> float | None:
    """The least acceptance rate at which some γ breaks even; None if none can."""
    if best(costs, 1.0, draft) <= 1.0:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        if best(costs, mid, draft) > 1.0:
            hi = mid
        else:
            lo = mid
    return hi


def explain(costs: Costs, device: str = "CPU", check: int | None = None) -> str:
    """One sentence from the measured costs: what a check of ``check`` tokens costs against one
    token, what the draft costs against the target, and which drafters can pay, e.g. ``on this
    CPU a N-token check costs X× one token and the draft costs Y % of the target: the draft
    model cannot pay; prompt lookup can on text that repeats the conversation``."""
    sizes = sorted(n for n in costs.verify if n > 1)
    if not sizes or costs.t1 <= 0:
        return ""
    n = check if check is not None and check in costs.verify else min(
        sizes, key=lambda k: abs(k - 5))
    head = f"on this {device} a {n}-token check costs {costs.verify[n] / costs.t1:.1f}× one token"
    parts = [head]
    if costs.draft is not None:
        parts.append(f"the draft costs {costs.draft / costs.t1:.0%} of the target")
    head = " and ".join(parts)
    verdicts = []
    if costs.draft is not None:
        need = alpha_needed(costs, costs.draft)
        if need is None:
            verdicts.append("the draft model cannot pay, even when every draft is accepted")
        elif need > 0.97:
            verdicts.append("the draft model pays only when nearly every draft is accepted")
        elif need < 0.05:  # a check cheaper than a token: timings disturbed, or a GPU
            verdicts.append("the draft model pays even when few drafts are accepted")
        else:
            verdicts.append(f"the draft model pays when over {need:.0%} of drafts are accepted")
    lookup = alpha_needed(costs, 0.0)
    if lookup is None:
        verdicts.append("nor can prompt lookup: checking a token costs as much as making it")
    else:
        verdicts.append("prompt lookup can, on text that repeats the conversation"
                        + (f" (over {lookup:.0%} of its guesses right)" if lookup > 0.3 else ""))
        top = lookup_limit(costs)
        if top is not None:
            verdicts.append(f"its limit here, every guess right, is {top[1]:.2f}× plain "
                            f"(a {top[0]}-token check)")
    return f"{head}: " + "; ".join(verdicts) + f" [{costs.source}]"


def lookup_limit(costs: Costs) -> tuple[int, float] | None:
    """The check size where tokens per cost peak, and its speed-up over plain, when every
    guess is right (a nearly free draft: n tokens for one pass over n). The most any prompt
    lookup can reach on this curve; None when no measured check beats one token."""
    found = [(n, n * costs.t1 / t) for n, t in costs.verify.items() if n > 1 and t > 0]
    n, x = max(found, key=lambda f: f[1], default=(0, 0.0))
    return (n, x) if x > 1.0 else None


def costs_from_race(plain_t1: float, steps: Sequence[StepEvent]) -> Costs | None:
    """The race's own figures: verification time per batch size, draft time per token."""
    by_n: dict[int, list[float]] = defaultdict(list)
    draft: list[float] = []
    for s in steps:
        if s.gamma > 0 and s.verify_s > 0:
            by_n[s.batch].append(s.verify_s)
        if s.drafter in ("draft", "model") and s.gamma > 0 and s.draft_s > 0:
            draft.append(s.draft_s / s.gamma)
    if not by_n or plain_t1 <= 0:
        return None
    verify = {n: sorted(v)[len(v) // 2] for n, v in by_n.items()}  # medians: robust to a stall
    verify[1] = plain_t1
    d = sorted(draft)[len(draft) // 2] if draft else None
    return Costs(plain_t1, verify, d, "this race")


def costs_from_calibration(draft_s: float, verify_s: Sequence[float]) -> Costs | None:
    if not verify_s or verify_s[0] <= 0:
        return None
    return Costs(verify_s[0], {i + 1: v for i, v in enumerate(verify_s)}, draft_s, "calibration")
