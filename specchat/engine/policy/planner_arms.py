"""The arms' kinds, as the planner plays them (:mod:`specchat.engine.policy.planner`): one record
per drafter, kept by its name, made for the kind its module declares
(:mod:`specchat.engine.decode.arms`). A record keeps what the planner learns of its arm (its
acceptance, its cost) and answers, for its kind, what the planner asks of every arm: its best
candidate this step, what a plan of it is expected to yield and cost, whether and how it is
warmed up, timed and probed, what its steps and guesses teach, and its saved state.

- :class:`ChainRecord` — a chain drafter with costs of its own (the layer-skip self-draft,
  Kangaroo, MTP, a module that declares no arm): its acceptance per position and its seconds
  per drafted token from its arm's priors, then from its own steps (decayed sums, catch-up
  included: cautious). One short probe times it before it is scored.
- :class:`LookupRecord` — a lookup (a predicted output): the same, but scored from its first
  step, its checks a lookup's sizes and depth, timing a check while the verify curve is
  unknown, and learning from its free guesses on every step.
- :class:`~specchat.engine.policy.planner_banded.BandedLookup` — a banded lookup; and the draft
  model's chain and tree (:mod:`specchat.engine.policy.planner_draft`).
- :class:`~specchat.engine.policy.planner_own.OwnRecord` — a drafter that plans its own shape
  (Lookahead, Medusa), scored on what its steps did.

The base :class:`ArmRecord` answers as an arm that is never planned (a plain step's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specchat.engine.decode.arms import Arm
from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import Plan, chain
from specchat.engine.policy.acceptance import AcceptanceModel, expected_tokens, step_outcomes
from specchat.engine.policy.cost_model import OnlineCostModel
from specchat.engine.policy.decay import decay_for
from specchat.engine.policy.draft_reads import DraftReads
from specchat.engine.policy.learning import AutoGammaSeed, AutoGammaSettings
from specchat.engine.policy.lookup_pauses import LookupPauses
from specchat.engine.policy.planner_chains import ChainScorer
from specchat.engine.policy.planner_settings import Candidate, PlannerSettings
from specchat.engine.policy.reply_length import ReplyLengths

# A reply's first step drafts only with a drafter that lacks at most this many of its tokens:
# reading more (a new prompt) would come before the first token.
FIRST_STEP_READ = 4


class Scene(Protocol):
    """What a record reads of the planner it serves."""

    costs: OnlineCostModel
    settings: AutoGammaSettings
    plan_settings: PlannerSettings
    reads: DraftReads  # what the draft model lacks and what reading it costs
    lengths: ReplyLengths  # earlier replies' lengths, and the reply in progress
    chains: ChainScorer
    pauses: LookupPauses
    guessed: set[str]  # the drafters whose guesses are scored in this reply
    seeded: bool
    last_plan: Plan

    @property
    def warming_up(self) -> bool: ...

    def lag(self, name: str) -> int: ...

    def confident(self) -> bool: ...

    def learn_step(self, step: StepEvent) -> None: ...

    def observe_outcomes(self, outcomes: Sequence[float]) -> None: ...


@dataclass
class Scoring:
    """One scoring's inputs: the draft model's α by depth, each other arm's (``arms``; an arm
    missing there uses its mean), plain's candidate, and the tree search's switches."""

    alphas: Sequence[float]
    arms: Mapping[str, Sequence[float]]
    base: Candidate  # plain's
    chains: bool = False  # the draft model's chain is scored too (a tree's chain is the same)
    reshape: bool = True  # search the tree shapes again (else score the last ones found)


class ArmRecord:
    """What the planner asks of every arm; the answers of one it never plans."""

    order = 3  # where its candidates come (ties go to the first): own, draft, banded, others, tree
    drafts_model = False  # its steps draft with the draft model (which first reads what it lacks)
    probe_by_tries = False  # probed in turn with the other such arms, the least tried first
    probed_unseen = False  # one short probe times it before it is scored
    warm_order: int | None = None  # its place among the chains the warm-up may run (None: none)
    probe_rank = 0  # of those chains, the one whose arm decides a probe comes first
    decoder_gamma = False  # its chain's length is what next_gamma() answers
    gamma_chain = False  # the draft model's chain (auto-γ's γ, the confidence rule)
    sized_checks = False  # a lookup's checks: a few sizes, as deep as lookup_depth
    scores_guesses = False  # it scores its free guesses itself (else the planner's book does)
    backs_off = True  # a probe of it that found nothing doubles the wait for the next

    def __init__(self, name: str, arm: Arm, s: AutoGammaSettings, ps: PlannerSettings) -> None:
        self.name, self.arm, self.s, self.ps = name, arm, s, ps
        self.tried = 0  # steps planned on it (a step may find nothing to propose)

    @property
    def measuring(self) -> bool:
        """Its first steps measure it (a self-planning drafter's)."""
        return False

    @property
    def hot(self) -> bool:
        """Its estimate moves with every guess now: a plain answer is not held."""
        return False

    @property
    def band(self) -> int | None:
        """Its band of right guesses in a row (a banded lookup's; None: it has none)."""
        return None

    # estimates and prices
    def alphas(self, model: Sequence[float], rng: np.random.Generator | None) -> Sequence[float]:
        """Its α by depth for a scoring (``model``: the draft model's; ``rng``: a sampled
        draw, for exploration)."""
        return ()

    def candidate(self, p: Scene, sc: Scoring) -> Candidate | None:
        return None

    def expected(self, plan: Plan, sc: Scoring) -> float:
        """Tokens a step of ``plan`` is expected to commit on the estimates of ``sc``."""
        return expected_tokens(sc.arms.get(self.name, self.alphas(sc.alphas, None)), plan.size)

    def draft_seconds(self, p: Scene, plan: Plan, n: int) -> float | None:
        """Seconds ``plan`` takes to draft (its verify of ``n`` rows aside); None: unpriced."""
        return None

    def predict(self, p: Scene, plan: Plan, sc: Scoring) -> tuple[float, float] | None:
        table = p.costs.verify_table()
        n = min(plan.size, len(table) - 1)
        sec = self.draft_seconds(p, plan, n)
        return None if sec is None else (self.expected(plan, sc), sec + table[n] + p.costs.overhead)

    def needed(self) -> float:
        """How many times plain's rate a step of it must promise now."""
        return self.ps.margin

    def explore_floor(self) -> float:
        """How far below plain (on the mean estimates) exploration may try it."""
        return self.ps.explore_floor

    # warm-up, timing and probes
    def may_warm(self, p: Scene) -> bool:
        return False

    warms_early = False  # its warm-up need not wait for warmup_after tokens

    def warm_gamma(self, gamma: int) -> int:
        return gamma

    def check_rank(self) -> int | None:
        """Its place among the arms that may time a check while the curve is unknown."""
        return None

    def lags_behind(self, p: Scene) -> bool:
        """Drafting with it now would first read tokens it has not seen (a new prompt)."""
        return p.lag(self.name) > FIRST_STEP_READ

    def may_probe(self, p: Scene) -> bool:
        return True

    def probe(self, p: Scene, base: Candidate) -> str | None:
        """As the first of the chains when nothing pays (``base``: plain's candidate): the arm
        to probe ("" none), or None to probe the least tried other arm instead."""
        return None

    def holds_back(self, p: Scene, base: Candidate, chosen: Candidate) -> str | None:
        """Why a plain step instead of ``chosen``, its best step, though it beats plain (its
        step would first pay what the rest of the reply cannot repay); None: it runs."""
        return None

    def probe_plan(self, why: str) -> Plan:
        return chain(self.name, min(self.s.probe_gamma, self.s.gamma_max), why)

    def speculate(self, p: Scene, chosen: Candidate, base: Candidate) -> tuple[Plan, Plan | None]:
        """The plan to run for ``chosen``, labelled; and the plan to predict, if another."""
        plan = chosen.plan
        reason = f"{self.word()} {plan.size}"
        if chosen.explore:
            p.chains.timed(plan.size)
            self.timing(plan.size)
            reason += " · timing a longer check"
        return Plan(plan.drafter, plan.parents, reason), None

    def word(self) -> str:
        """What its steps are called in a plan's reason."""
        return self.name

    def timing(self, g: int) -> None:
        """A check of ``g`` of it runs to time it."""

    # chain rules (planner_chains.ChainRules)
    def deepest(self, gamma_max: int, lookup_depth: int) -> int:
        return lookup_depth if self.sized_checks else gamma_max

    def may_time_longer(self) -> bool:
        return True

    def departed_within(self, g: int) -> bool:
        return False

    # learning
    def learn(self, p: Scene, step: StepEvent) -> None:
        """A step of it that drafted."""

    def observe_planned(self, step: StepEvent) -> None:
        """A step planned on it, whatever drafted it."""

    def step_done(self) -> None:
        """After any step's learning."""

    def guessed(self, outcome: Sequence[float], start: int) -> None:
        """One of its guesses scored (by the planner's book)."""

    def score_guess(self, committed: Sequence[int], ran: str,
                    guess: Callable[[int], Sequence[int]] | None, k: int) -> None:
        """Its guesses scored by itself (``scores_guesses``)."""

    def begin(self) -> None:
        """A reply starts."""

    def reseed(self, seed: AutoGammaSeed) -> None:
        """A calibration arrived."""

    # saved state (the planner's state holds each arm's under its name: planner_state)
    def state(self) -> object | None:
        """What it learnt, JSON-able; None: nothing to keep."""
        return None

    def read(self, saved: object) -> object:
        """What :meth:`state` saved, parsed and checked (raises ValueError, TypeError,
        KeyError), nothing taken yet (see :meth:`take`)."""
        raise ValueError(f"no saved state for the {self.name} arm")

    def take(self, got: object) -> None:
        """What :meth:`read` returned, once the whole state has been read."""

    def old_state(self, d: Mapping[str, object]) -> object | None:
        """Its state as a version-1 planner state held it (see
        :func:`specchat.engine.policy.planner_state.migrate`); None: none."""
        return None

    def learnt(self) -> int:
        return 0

    def describe(self) -> str:
        return ""


class ChainRecord(ArmRecord):
    """A chain drafter's record (see the module's docstring)."""

    probe_by_tries = True
    probed_unseen = True

    def __init__(self, name: str, arm: Arm, s: AutoGammaSettings, ps: PlannerSettings) -> None:
        super().__init__(name, arm, s, ps)
        size = ps.lookup_depth if self.sized_checks else s.gamma_max
        self.model = AcceptanceModel(size, arm.prior_alpha, prior_weight=6.0,
                                     slow_half_life=s.slow_half_life)
        self.cost = [0.0, 0.0]  # decayed Σ seconds, Σ drafted tokens
        self.lam = decay_for(s.slow_half_life)

    def t(self, t1: float) -> float:
        """Seconds per drafted token (its prior: ``cost_prior`` × a target step, ``t1``)."""
        s, n = self.cost
        return s / n if n > 0 else self.arm.cost_prior * t1

    def alphas(self, model: Sequence[float], rng: np.random.Generator | None) -> Sequence[float]:
        return self.model.position_alphas()

    def candidate(self, p: Scene, sc: Scoring) -> Candidate | None:
        if self.tried == 0 and p.lag(self.name) > self.ps.warmup_max_lag:
            return None  # never timed, and it would first read a long prompt
        per_token = self.t(p.costs.verify_table()[0])
        return p.chains.best(self, self.alphas(sc.alphas, None), per_token, p.costs, sc.base)

    def draft_seconds(self, p: Scene, plan: Plan, n: int) -> float | None:
        return n * self.t(p.costs.verify_table()[0]) if plan.is_chain else None

    def learn(self, p: Scene, step: StepEvent) -> None:
        self.cost = [self.lam * self.cost[0] + step.draft_s, self.lam * self.cost[1] + step.gamma]
        self.model.observe(step_outcomes(step))

    def guessed(self, outcome: Sequence[float], start: int) -> None:
        self.model.observe(outcome, start)

    def state(self) -> object | None:
        if not self.learnt() and self.cost[1] <= 0:
            return None
        return {"alpha": self.model.state(), "cost": list(self.cost)}

    def read(self, saved: object) -> object:
        model = AcceptanceModel(self.model.size, self.arm.prior_alpha, prior_weight=6.0,
                                slow_half_life=self.s.slow_half_life)
        model.load_state(saved["alpha"])  # type: ignore[index]
        cost = [float(v) for v in saved["cost"]]  # type: ignore[index]
        if len(cost) != 2 or min(cost) < 0:
            raise ValueError(f"{self.name} cost of another shape")
        return model, cost

    def take(self, got: object) -> None:
        self.model, self.cost = got  # type: ignore[misc]
        if self.cost[1] > 0:
            self.tried = max(self.tried, 1)  # timed in an earlier process: no probe to time it

    def learnt(self) -> int:
        return self.model.steps


class LookupRecord(ChainRecord):
    """A lookup's record (see the module's docstring)."""

    probed_unseen = False
    sized_checks = True

    def check_rank(self) -> int | None:
        return 0

    def learn(self, p: Scene, step: StepEvent) -> None:
        p.pauses.outcome(self.name, step.accepted > 0)
        super().learn(p, step)
