"""What the planner learns of each arm (:mod:`specchat.engine.decode.arms`), one record per
drafter, kept by its name (:mod:`specchat.engine.policy.planner`):

- :class:`BandedLookup` — a banded lookup (the n-gram lookup): its acceptance per band of its
  run of right guesses (:class:`~specchat.engine.policy.lookup_estimate.LookupEstimate`), its
  seconds per drafted token, the tokens its steps kept in a row and its timing checks this
  reply; saved with the planner's state under keys named after it.

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

from collections.abc import Callable, Mapping, Sequence

from specchat.engine.decode.arms import Arm
from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import NONE, Plan
from specchat.engine.policy.acceptance import AcceptanceModel, step_outcomes
from specchat.engine.policy.decay import decay_for
from specchat.engine.policy.lookup_estimate import HOT, HOT_STREAK, LONG, LookupEstimate

LOOKUP_FIRST = 3  # a banded lookup's longest chain before it has been right twice in a row
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



def _no_plan() -> Plan:
    return Plan(NONE)


class OwnStep(MeasuredDrafter):
    """A self-planning drafter: what its steps did (:class:`MeasuredDrafter`), and how to ask
    it for its next step (its ``own_plan``, registered by the decoder)."""

    def __init__(self) -> None:
        super().__init__()
        self.ask: Callable[[], Plan] = _no_plan

    def plan(self, why: str = "") -> Plan:
        """Its next step, ``why`` added to its reason (a plain plan: it has nothing to try)."""
        plan = self.ask()
        if plan.drafter == NONE:
            return plan
        return Plan(plan.drafter, plan.parents, f"{plan.reason} · {why}" if why else plan.reason)

    def can_pay(self, table: Sequence[float], overhead: float, margin: float) -> bool:
        """Whether its step could beat plain by ``margin`` at all on the verify ``table``:
        every node of its deepest path accepted (1 + depth tokens) for a pass over its nodes."""
        plan = self.ask()
        if plan.drafter == NONE:
            return False
        n = min(plan.size, len(table) - 1)
        return (1 + plan.depth) / (table[n] + overhead) >= margin / (table[0] + overhead)


class BandedLookup:
    """What the planner learns of a banded lookup (see the module's docstring)."""

    def __init__(self, name: str, arm: Arm, depth: int, prior_alpha: float,
                 slow_half_life: float, fast_half_life: float, detect_changes: bool) -> None:
        self.name = name
        self.estimate = LookupEstimate(depth, prior_alpha, slow_half_life, fast_half_life,
                                       detect_changes, name=name)
        self.cost = [arm.cost_prior, 1.0]  # decayed Σ seconds, Σ tokens (the prior: one token)
        # Tokens its steps kept in a row (their own, not guesses): above 0, the last one kept
        # every token it checked.
        self.run = 0
        # The shortest timing check of it this reply that did not keep all it drafted: the
        # passages here may be shorter than it (see Planner._longer_check). None: none so far.
        self.timed_short: int | None = None
        self.timing_plan = 0  # the size of its check being timed now (0: none)

    @property
    def t(self) -> float:
        """Seconds per drafted token."""
        return self.cost[0] / self.cost[1]

    @property
    def hot(self) -> bool:
        return self.estimate.hot

    @hot.setter
    def hot(self, hot: bool) -> None:
        self.estimate.streak = HOT_STREAK if hot else 0

    @property
    def alpha(self) -> AcceptanceModel:
        """Its acceptance estimates in the band the next step starts in."""
        return self.estimate.current

    @property
    def long_run(self) -> bool:
        return self.estimate.band == LONG

    def timed(self, streak: int) -> bool:
        """Right ``streak`` times in a row at least: an unscored step of it may run."""
        return self.estimate.streak >= streak

    def deepest(self, depth: int) -> int:
        """Its longest chain now, of ``depth`` at most: at most twice as long as it has been
        right in a row. A run that has lasted is likely to go on about as long again, one
        just begun is not, whatever the estimates carried from a copy say (figures:
        docs/performance.md)."""
        return min(depth, max(LOOKUP_FIRST, 2 * self.estimate.streak))

    def may_time_longer(self, streak: int) -> bool:
        """Whether a check longer than its best may be timed now: only inside a passage the
        reply repeats (right ``streak`` times in a row), right after a step of it kept all it
        checked. Elsewhere (past a copy's edits) a long check of a guess is mostly rows that
        fail (figures: docs/performance.md)."""
        return self.timed(streak) and self.run > 0

    def departed_within(self, g: int) -> bool:
        """A timing check of ``g`` or fewer already departed from its passage in this reply,
        and its steps have not kept ``g`` in a row since: not timed again yet (a summary's
        phrases run a few tokens: its second 8-row timing check, on a CPU's dear 8-row step,
        cost two plain steps again)."""
        return self.timed_short is not None and g >= self.timed_short and self.run < g

    def outcome(self, step: StepEvent) -> None:
        """Any step of it: its run, and whether the check being timed kept all it drafted."""
        full = step.accepted == step.gamma
        self.run = self.run + step.accepted if full else 0
        if self.timing_plan and not full:
            g = self.timing_plan
            self.timed_short = min(self.timed_short or g, g)

    def learn(self, step: StepEvent, lam: float) -> None:
        """A step of it that drafted: its cost per token and its acceptance."""
        self.cost = [lam * self.cost[0] + step.draft_s, lam * self.cost[1] + step.gamma]
        self.estimate.step(step_outcomes(step))

    def steps(self) -> int:
        return sum(m.steps for m in self.estimate.models.values())

    def begin(self) -> None:
        self.estimate.begin()
        self.run, self.timed_short, self.timing_plan = 0, None, 0

    def reseed(self, prior_alpha: float, slow_half_life: float, fast_half_life: float,
               detect_changes: bool) -> None:
        """A calibrated α, while none of its steps or guesses was seen."""
        if not self.steps():
            self.estimate = LookupEstimate(self.estimate.size, prior_alpha, slow_half_life,
                                           fast_half_life, detect_changes, name=self.name)

    def state(self) -> dict[str, object]:
        return {**self.estimate.state(), f"{self.name}_cost": list(self.cost)}

    def read_state(self, d: Mapping[str, object], slow_half_life: float,
                   fast_half_life: float) -> list[float] | None:
        """Its cost in what :meth:`state` saved, its estimates checked (raises ValueError,
        TypeError, KeyError on a malformed record), nothing taken yet (see :meth:`take`); None
        when ``d`` has nothing of it (saved before this drafter was there: it keeps its
        priors)."""
        if self.name not in d:
            return None
        LookupEstimate(self.estimate.size, self.estimate.models[HOT].prior_alpha,
                       slow_half_life, fast_half_life, name=self.name).load_state(d)
        cost = [float(v) for v in d[f"{self.name}_cost"]]  # type: ignore[attr-defined]
        if len(cost) != 2 or cost[1] <= 0 or cost[0] < 0:
            raise ValueError(f"{self.name} cost of another shape")
        return cost

    def take(self, d: Mapping[str, object], cost: list[float]) -> None:
        self.estimate.load_state(d)
        self.cost = cost
