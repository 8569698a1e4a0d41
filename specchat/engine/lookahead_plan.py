"""Plain or a Lookahead step: the planning hook for ``--drafter lookahead`` (γ mode ``plan``).

A Lookahead step's value depends on the n-gram pool, which no prior predicts, and its cost on
its batch — the window's W·(N − 1) − 1 rows plus the candidates — which on a CPU grows about
linearly (Qwen2.5-Coder-1.5B on 2 cores: a batch of 8 costs ~4.4 × one token; a W 2, N 3 step
with 4 candidates is a batch of up to 12). So the two arms are *measured*, not predicted: each
keeps a decayed count of the tokens its steps committed and the seconds they took (draft plus
verify), and the step goes to the arm with the higher rate — Lookahead only when it beats
plain by ``margin``. The losing arm is tried again every ``probe_every`` steps (its estimate
goes stale, and the pool only learns from the window while Lookahead runs), doubling the wait
up to ``probe_max`` while it keeps losing. On this CPU that means mostly plain steps, with a
probe now and then; on a machine with a flat cost curve the window runs.

The general planner (:mod:`specchat.engine.planner`) does not score Lookahead; the runtime uses
this gate when Lookahead is the only drafter and γ is ``plan``. ``observe`` keys on the step's
``reason`` (every Lookahead plan's starts with "lookahead") and its ``batch`` (the real rows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specchat.engine.cost_model import decay_for
from specchat.engine.events import StepEvent
from specchat.engine.gamma import PolicyBase
from specchat.engine.plan import Plan, plain


@dataclass(frozen=True)
class GateSettings:
    warmup: int = 3  # steps of each arm before choosing (the first of each is not counted)
    margin: float = 1.03  # Lookahead must promise this × plain's rate
    probe_every: int = 16
    probe_max: int = 128
    half_life: float = 32.0  # steps of an arm


class _Rate:
    """Decayed tokens and seconds of one arm's steps."""

    def __init__(self, half_life: float) -> None:
        self.lam = decay_for(half_life)
        self.tokens = 0.0
        self.seconds = 0.0
        self.steps = 0

    def add(self, tokens: int, seconds: float) -> None:
        self.steps += 1
        if self.steps == 1:  # a first step pays one-off costs (a graph for a new batch size)
            return
        self.tokens = self.lam * self.tokens + tokens
        self.seconds = self.lam * self.seconds + max(seconds, 1e-9)

    @property
    def rate(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None


class LookaheadGate(PolicyBase):
    """Plain or Lookahead per step, whichever has been faster lately (see the module)."""

    def __init__(self, lookahead_plan: Callable[[int], Plan], budget: int,
                 settings: GateSettings = GateSettings()) -> None:
        self._plan = lookahead_plan  # the drafter's default_plan
        self.budget = budget  # candidate tokens a Lookahead step may check
        self.settings = settings
        self.arms = {"lookahead": _Rate(settings.half_life), "plain": _Rate(settings.half_life)}
        self._since_probe = 0
        self._wait = settings.probe_every
        self._probing = False
        self.label = "plan"

    def next_gamma(self) -> int:
        return self.next_plan(("lookahead",)).size

    def next_plan(self, available: tuple[str, ...]) -> Plan:
        s, la, pl = self.settings, self.arms["lookahead"], self.arms["plain"]
        if "lookahead" not in available:
            return plain("plain: no drafter can propose here")
        self._probing = False
        for arm in (la, pl):  # warm-up: Lookahead first, then plain
            if arm.steps < s.warmup:
                return self._arm(arm is la, "warm-up")
        r_la, r_pl = la.rate or 0.0, pl.rate or 0.0
        best_la = r_la > r_pl * s.margin
        self._since_probe += 1
        if self._since_probe >= self._wait:
            self._since_probe, self._probing = 0, True
            return self._arm(not best_la, "probe")
        ratio = r_la / r_pl if r_pl > 0 else 0.0
        return self._arm(best_la, f"{ratio:.2f}× plain")

    def _arm(self, lookahead: bool, why: str) -> Plan:
        if lookahead:
            plan = self._plan(self.budget)
            if plan.drafter != "none":
                return Plan(plan.drafter, plan.parents, f"{plan.reason} · {why}")
        return plain(f"plain: lookahead measured slower ({why})" if why not in
                     ("warm-up", "probe") else f"plain · {why}")

    def observe(self, step: StepEvent) -> None:
        arm = "lookahead" if step.reason.startswith("lookahead") else "plain"
        self.arms[arm].add(step.committed, step.draft_s + step.verify_s)
        if self._probing:  # a probe that lost: wait longer before the next one
            r_la, r_pl = self.arms["lookahead"].rate or 0.0, self.arms["plain"].rate or 0.0
            lost = (r_la > r_pl) != (arm == "lookahead")
            s = self.settings
            self._wait = min(self._wait * 2, s.probe_max) if lost else s.probe_every
