"""A banded lookup's record (:mod:`specchat.engine.decode.arms`), as the planner plays it
(:mod:`specchat.engine.policy.planner_arms`).

Its acceptance is kept per band of its run of right guesses
(:class:`~specchat.engine.policy.lookup_estimate.LookupEstimate`), learnt from its steps and
from its free guesses on every step; with it, its seconds per drafted token, the tokens its
steps kept in a row and its timing checks this reply. Its chains are at most twice its run; it
is warmed up, times checks and times longer ones only inside a passage the reply repeats; it
needs a wider margin outside a long run; a probe of it that found nothing does not stretch the
wait for the next. Saved with the planner's state under keys named after it (the keys states
have always had).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from specchat.engine.decode.arms import Arm
from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import Plan
from specchat.engine.policy.acceptance import AcceptanceModel, step_outcomes
from specchat.engine.policy.decay import decay_for
from specchat.engine.policy.learning import AutoGammaSeed, AutoGammaSettings
from specchat.engine.policy.lookup_estimate import COLD, HOT, HOT_STREAK, LONG, LookupEstimate
from specchat.engine.policy.planner_arms import ArmRecord, Scene, Scoring
from specchat.engine.policy.planner_settings import Candidate, PlannerSettings

LOOKUP_FIRST = 3  # its longest chain before it has been right twice in a row


class BandedLookup(ArmRecord):
    """What the planner learns of a banded lookup (see the module's docstring)."""

    order = 2
    warm_order = 1
    warms_early = True
    decoder_gamma = True
    sized_checks = True
    scores_guesses = True
    backs_off = False  # one token checked costs little; a copy must not lose its lookups

    def __init__(self, name: str, arm: Arm, s: AutoGammaSettings, ps: PlannerSettings) -> None:
        super().__init__(name, arm, s, ps)
        self.estimate = LookupEstimate(ps.lookup_depth, arm.prior_alpha, s.slow_half_life,
                                       s.fast_half_life, s.detect_changes, name=name)
        self.cost = [arm.cost_prior, 1.0]  # decayed Σ seconds, Σ tokens (the prior: one token)
        self.lam = decay_for(s.slow_half_life)
        # Tokens its steps kept in a row (their own, not guesses): above 0, the last one kept
        # every token it checked.
        self.run = 0
        # The shortest timing check of it this reply that did not keep all it drafted: the
        # passages here may be shorter than it (see departed_within). None: none so far.
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
    def band(self) -> int | None:
        return self.estimate.band

    @property
    def alpha(self) -> AcceptanceModel:
        """Its acceptance estimates in the band the next step starts in."""
        return self.estimate.current

    @property
    def long_run(self) -> bool:
        return self.estimate.band == LONG

    def timed(self, streak: int | None = None) -> bool:
        """Right ``streak`` (PlannerSettings.lookup_timing_streak) times in a row at least: an
        unscored step of it (a warm-up, a timing check, a longer check) may run."""
        return self.estimate.streak >= (self.ps.lookup_timing_streak if streak is None
                                        else streak)

    def alphas(self, model: Sequence[float], rng: np.random.Generator | None) -> Sequence[float]:
        a = self.alpha
        return a.position_alphas() if rng is None else a.position_alphas(a.sample_alpha(rng))

    def candidate(self, p: Scene, sc: Scoring) -> Candidate | None:
        alphas = sc.arms.get(self.name) or self.alphas(sc.alphas, None)
        return p.chains.best(self, alphas, self.t, p.costs, sc.base)

    def draft_seconds(self, p: Scene, plan: Plan, n: int) -> float | None:
        return n * self.t

    def needed(self) -> float:
        return self.ps.margin if self.long_run else self.ps.lookup_margin

    def explore_floor(self) -> float:
        # Exploration, outside a long run: not below its own margin.
        return self.ps.explore_floor if self.long_run else self.ps.lookup_margin

    def may_warm(self, p: Scene) -> bool:
        return self.timed()

    def warm_gamma(self, gamma: int) -> int:
        return max(gamma, self.ps.lookup_warmup)

    def check_rank(self) -> int | None:
        return 1 if self.timed() else None

    def probe(self, p: Scene, base: Candidate) -> str | None:
        # Not while its guesses are scored: its estimate already holds what a probe would
        # learn, so a probe is a bet the scoring turned down (figures: docs/performance.md).
        return "" if self.name in p.guessed else self.name

    def timing(self, g: int) -> None:
        self.timing_plan = g

    def deepest(self, gamma_max: int, lookup_depth: int) -> int:
        """Its longest chain now: at most twice as long as it has been right in a row. A run
        that has lasted is likely to go on about as long again, one just begun is not,
        whatever the estimates carried from a copy say (figures: docs/performance.md)."""
        return min(lookup_depth, max(LOOKUP_FIRST, 2 * self.estimate.streak))

    def may_time_longer(self) -> bool:
        """Only inside a passage the reply repeats, right after a step of it kept all it
        checked. Elsewhere (past a copy's edits) a long check of a guess is mostly rows that
        fail (figures: docs/performance.md)."""
        return self.timed() and self.run > 0

    def departed_within(self, g: int) -> bool:
        """A timing check of ``g`` or fewer already departed from its passage in this reply,
        and its steps have not kept ``g`` in a row since: not timed again yet (a summary's
        phrases run a few tokens: its second 8-row timing check, on a CPU's dear 8-row step,
        cost two plain steps again)."""
        return self.timed_short is not None and g >= self.timed_short and self.run < g

    def learn(self, p: Scene, step: StepEvent) -> None:
        p.pauses.outcome(self.name, step.accepted > 0)
        full = step.accepted == step.gamma
        self.run = self.run + step.accepted if full else 0
        if self.timing_plan and not full:
            g = self.timing_plan
            self.timed_short = min(self.timed_short or g, g)
        self.cost = [self.lam * self.cost[0] + step.draft_s, self.lam * self.cost[1] + step.gamma]
        self.estimate.step(step_outcomes(step))

    def step_done(self) -> None:
        self.timing_plan = 0

    def score_guess(self, committed: Sequence[int], ran: str,
                    guess: Callable[[int], Sequence[int]] | None, k: int) -> None:
        self.estimate.score(committed, ran, guess(k) if guess else None)

    def steps(self) -> int:
        return sum(m.steps for m in self.estimate.models.values())

    def learnt(self) -> int:
        return self.steps()

    def begin(self) -> None:
        self.estimate.begin()
        self.run, self.timed_short, self.timing_plan = 0, None, 0

    def reseed(self, seed: AutoGammaSeed) -> None:
        """A calibrated α (the calibration measures a banded lookup's), while none of its steps
        or guesses was seen."""
        s = self.s
        if seed.ngram_alpha is not None and not self.steps():
            self.estimate = LookupEstimate(self.estimate.size, seed.ngram_alpha,
                                           s.slow_half_life, s.fast_half_life,
                                           s.detect_changes, name=self.name)

    def state(self) -> object | None:
        """Its estimate per band, and its cost."""
        flat = self.estimate.state()
        return {**{b: flat[key] for b, key in self._keys().items()}, "cost": list(self.cost)}

    def _keys(self) -> dict[str, str]:
        """Each band's name in its saved state, and its key in LookupEstimate's."""
        keys = self.estimate.keys()
        return {"hot": keys[HOT], "cold": keys[COLD], "long": keys[LONG]}

    def read(self, saved: object) -> object:
        mine: Mapping[str, object] = saved  # type: ignore[assignment]
        # (A state without "cold" or "long" gives "hot" to them: LookupEstimate.load_state.)
        flat = {key: mine[b] for b, key in self._keys().items() if b in mine}
        s = self.s
        estimate = LookupEstimate(self.estimate.size, self.estimate.models[HOT].prior_alpha,
                                  s.slow_half_life, s.fast_half_life, name=self.name)
        estimate.load_state(flat)
        cost = [float(v) for v in mine["cost"]]  # type: ignore[attr-defined]
        if len(cost) != 2 or cost[1] <= 0 or cost[0] < 0:
            raise ValueError(f"{self.name} cost of another shape")
        return flat, cost

    def take(self, got: object) -> None:
        flat: Mapping[str, object]
        flat, self.cost = got  # type: ignore[misc]
        self.estimate.load_state(flat)

    def old_state(self, d: Mapping[str, object]) -> object | None:
        keys = self._keys()
        if keys["hot"] not in d:
            return None
        return {**{b: d[key] for b, key in keys.items() if key in d},
                "cost": d[f"{self.name}_cost"]}

    def describe(self) -> str:
        return f"; {self.name} α {self.alpha.alpha():.2f}"
