"""The planner's record of a drafter that plans its own step (:mod:`specchat.engine.policy.planner_arms`
has the other kinds).

:class:`OwnRecord` — a drafter that plans its own shape (Lookahead's window, Medusa's tree:
``own_plan()``, registered by the decoder). No prior predicts what such a step yields and its
batch is its own, so it is scored on what its steps *did*: decayed tokens committed per step
over decayed seconds per step. Its first few steps measure it (unless a saved state holds
those figures: they are saved like the other arms' estimates); afterwards it runs only while
it beats plain by the margin, and is probed again now and then while it loses.
"""

from __future__ import annotations

from collections.abc import Callable

from specchat.engine.decode.arms import Arm
from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import NONE, Plan
from specchat.engine.policy.decay import decay_for
from specchat.engine.policy.learning import AutoGammaSettings
from specchat.engine.policy.planner_arms import ArmRecord, Scene, Scoring
from specchat.engine.policy.planner_settings import Candidate, PlannerSettings

MEASURE_STEPS = 3  # steps of a self-planning drafter before it is judged (the first not counted)
MEASURED_HALF_LIFE = 32.0  # steps


class MeasuredDrafter:
    """Decayed tokens committed, seconds taken and steps of a self-planning drafter."""

    def __init__(self, half_life: float = MEASURED_HALF_LIFE) -> None:
        self.lam = decay_for(half_life)
        self.tokens = 0.0
        self.seconds = 0.0
        self.count = 0.0  # decayed number of counted steps
        self.steps = 0  # steps observed

    def observe(self, step: StepEvent) -> None:
        self.steps += 1
        if self.steps == 1:  # a first step pays one-off costs (a graph for a new batch size)
            return
        lam = self.lam
        self.tokens = lam * self.tokens + step.committed
        self.seconds = lam * self.seconds + max(step.draft_s + step.verify_s, 1e-9)
        self.count = lam * self.count + 1.0

    def per_step(self) -> tuple[float, float] | None:
        """(tokens, seconds) of a typical recent step; None before a counted one."""
        if self.count == 0:
            return None
        return self.tokens / self.count, self.seconds / self.count

    def state(self) -> dict[str, float]:
        return {"tokens": self.tokens, "seconds": self.seconds, "count": self.count}

    @classmethod
    def read(cls, saved: object) -> MeasuredDrafter:
        """A saved :meth:`state`, checked (ValueError: another shape). Its steps start at 0:
        the first step of a process pays its one-off costs again and is not counted."""
        got = cls()
        sums = {k: float(saved[k]) for k in ("tokens", "seconds", "count")}  # type: ignore[index]
        if min(sums.values()) < 0 or (sums["count"] > 0) != (sums["seconds"] > 0):
            raise ValueError("measured steps of another shape")
        got.tokens, got.seconds, got.count = sums["tokens"], sums["seconds"], sums["count"]
        return got


def _no_plan() -> Plan:
    return Plan(NONE)


class OwnRecord(ArmRecord):
    """A self-planning drafter's record: what its steps did, and how to ask it for its next
    step (its ``own_plan``, registered by the decoder)."""

    order = 0
    probe_by_tries = True

    def __init__(self, name: str, arm: Arm, s: AutoGammaSettings, ps: PlannerSettings) -> None:
        super().__init__(name, arm, s, ps)
        self.measured = MeasuredDrafter()
        self.ask: Callable[[], Plan] = _no_plan

    @property
    def measuring(self) -> bool:
        """Still in its first steps: not judged yet."""
        return self.tried < MEASURE_STEPS or self.measured.count == 0

    def plan(self, why: str = "") -> Plan:
        """Its next step, ``why`` added to its reason (a plain plan: it has nothing to try)."""
        plan = self.ask()
        if plan.drafter == NONE:
            return plan
        return Plan(plan.drafter, plan.parents, f"{plan.reason} · {why}" if why else plan.reason)

    def may_probe(self, p: Scene) -> bool:
        """Whether its step could beat plain by the margin at all: every node of its deepest
        path accepted (1 + depth tokens) for a pass over its nodes, on the verify table. On a
        steep CPU curve Lookahead's and Medusa's batches cannot, so they are not even
        measured; with the costs unknown yet, they are."""
        if not p.seeded and p.costs.ratio is None:
            return True
        plan = self.ask()
        if plan.drafter == NONE:
            return False
        table, o = p.costs.verify_table(), p.costs.overhead
        n = min(plan.size, len(table) - 1)
        return (1 + plan.depth) / (table[n] + o) >= self.ps.margin / (table[0] + o)

    def candidate(self, p: Scene, sc: Scoring) -> Candidate | None:
        got = self.measured.per_step()
        plan = self.ask() if got is not None else Plan(NONE)
        if got is None or plan.drafter == NONE:
            return None
        return Candidate(plan, got[0], got[1] + p.costs.overhead)

    def expected(self, plan: Plan, sc: Scoring) -> float:
        got = self.measured.per_step()
        return got[0] if got is not None else 0.0

    def predict(self, p: Scene, plan: Plan, sc: Scoring) -> tuple[float, float] | None:
        got = self.measured.per_step()
        return (got[0], got[1] + p.costs.overhead) if got is not None else None

    def probe_plan(self, why: str) -> Plan:
        return self.plan(why)

    def speculate(self, p: Scene, chosen: Candidate, base: Candidate) -> tuple[Plan, Plan | None]:
        plan = chosen.plan
        return Plan(plan.drafter, plan.parents,
                    f"{plan.reason} · {chosen.rate / base.rate:.2f}× plain"), None

    def observe_planned(self, step: StepEvent) -> None:
        # By the plan, not the step's drafter: a Lookahead step whose pool had nothing still
        # paid for its window (its drafter then reads "none").
        self.measured.observe(step)

    def state(self) -> object | None:
        return self.measured.state() if self.measured.count > 0 else None

    def read(self, saved: object) -> object:
        return MeasuredDrafter.read(saved)

    def take(self, got: object) -> None:
        self.measured = got  # type: ignore[assignment]
        if self.measured.count > 0:
            self.tried = max(self.tried, MEASURE_STEPS)  # measured in an earlier process

    def learnt(self) -> int:
        return self.measured.steps
