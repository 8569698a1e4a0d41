"""What the planner learns of drafters it has no cost model for (:mod:`specchat.engine.policy.planner`).

Two kinds:

- :class:`OtherDrafter` — a drafter whose arm (:mod:`specchat.engine.decode.arms`, declared by
  its module) is a lookup or a chain (a predicted output; the layer-skip self-draft, Kangaroo,
  MTP): its acceptance per position and its seconds per drafted token, from its arm's priors,
  then learnt from its own steps, so the planner can score every chain length of it like the
  draft model's.
- :class:`MeasuredDrafter` — a drafter that plans its own shape (Lookahead's window and
  candidate trie, Medusa's heads' tree: ``own_plan()``, see :mod:`specchat.engine.drafters`).
  No prior predicts what such a step yields (Lookahead's depends on its n-gram pool) and its
  batch is its own, so the planner scores it on what its steps *did*: decayed tokens committed
  per step over decayed seconds per step (draft and verify), against plain's modelled rate.
  Its first few steps measure it; afterwards it runs only while it beats plain by the
  planner's margin, and is probed again now and then while it loses.
"""

from __future__ import annotations

from specchat.engine.decode.arms import Arm
from specchat.engine.decode.events import StepEvent
from specchat.engine.policy.acceptance import AcceptanceModel, step_outcomes
from specchat.engine.policy.decay import decay_for

MEASURE_STEPS = 3  # steps of a self-planning drafter before it is judged (the first not counted)
MEASURED_HALF_LIFE = 32.0  # steps


class OtherDrafter:
    """What the planner learns of a chain drafter it has no cost model for: its acceptance per
    position and its seconds per drafted token (decayed sums, catch-up included: cautious)."""

    def __init__(self, size: int, half_life: float, arm: Arm) -> None:
        self.model = AcceptanceModel(size, arm.prior_alpha, prior_weight=6.0,
                                     slow_half_life=half_life)
        self.cost_prior = arm.cost_prior
        self.cost = [0.0, 0.0]  # decayed Σ seconds, Σ drafted tokens
        self.lam = decay_for(half_life)
        self.tried = 0  # steps planned on it (a step may find nothing to propose)

    def t(self, t1: float) -> float:
        s, n = self.cost
        return s / n if n > 0 else self.cost_prior * t1

    def observe(self, step: StepEvent) -> None:
        self.cost = [self.lam * self.cost[0] + step.draft_s, self.lam * self.cost[1] + step.gamma]
        self.model.observe(step_outcomes(step))


class MeasuredDrafter:
    """Decayed tokens committed, seconds taken and steps of a self-planning drafter."""

    def __init__(self, half_life: float = MEASURED_HALF_LIFE) -> None:
        self.lam = decay_for(half_life)
        self.tokens = 0.0
        self.seconds = 0.0
        self.count = 0.0  # decayed number of counted steps
        self.steps = 0  # steps observed
        self.tried = 0  # steps planned on it

    def observe(self, step: StepEvent) -> None:
        self.steps += 1
        if self.steps == 1:  # a first step pays one-off costs (a graph for a new batch size)
            return
        lam = self.lam
        self.tokens = lam * self.tokens + step.committed
        self.seconds = lam * self.seconds + max(step.draft_s + step.verify_s, 1e-9)
        self.count = lam * self.count + 1.0

    @property
    def measuring(self) -> bool:
        """Still in its first steps: not judged yet."""
        return self.tried < MEASURE_STEPS or self.count == 0

    def per_step(self) -> tuple[float, float] | None:
        """(tokens, seconds) of a typical recent step; None before a counted one."""
        if self.count == 0:
            return None
        return self.tokens / self.count, self.seconds / self.count
