"""The γ policies a chained benchmark compares, by name, each made fresh for a conversation.

A factory takes the clock the policy should read (the wall clock live, a virtual one in
replay). Names: ``auto``, ``plan`` (the planner), ``γ=N`` (fixed), ``hf`` (transformers'
heuristic), ``p_min=P`` (draft while the draft's top-1 probability ≥ P, up to γ_max), and
``plain`` (live only: plain decoding, the reference for speed-ups).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specchat.engine.decode.step_policy import FixedGamma, GammaPolicy
from specchat.engine.policy.gamma import ConfidenceCutoff, HfHeuristic

Clock = Callable[[], float]
PolicyFactory = Callable[[Clock], GammaPolicy]

AUTO = "auto"
PLAN = "plan"
HF = "hf"


def fixed_name(gamma: int) -> str:
    return f"γ={gamma}"


def p_min_name(p: float) -> str:
    return f"p_min={p:g}"


def roster(auto: PolicyFactory, gammas: Sequence[int], p_mins: Sequence[float],
           gamma_max: int = 10) -> dict[str, PolicyFactory]:
    out: dict[str, PolicyFactory] = {AUTO: auto}
    for g in gammas:
        out[fixed_name(g)] = lambda _c, g=g: FixedGamma(g)  # type: ignore[misc]
    out[HF] = lambda _c: HfHeuristic(5, gamma_max=max(gamma_max, 5))
    for p in p_mins:
        out[p_min_name(p)] = lambda _c, p=p: ConfidenceCutoff(p, gamma_max)  # type: ignore[misc]
    return out


def fixed_gamma_of(name: str) -> int | None:
    """The γ of a fixed policy's name, else None."""
    return int(name[2:]) if name.startswith("γ=") else None
