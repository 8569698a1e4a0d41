"""How the planner treats a drafter — its *arm* — declared by the drafter's module beside
``build`` as ``ARM`` (read through :func:`specchat.engine.decode.registry.arm`).

The planner (:mod:`specchat.engine.policy.planner`) scores every arm against a plain step on
the measured costs, knowing no drafter by name; an arm's kind says which estimate of its
acceptance applies, how a step of it is priced, when it is probed or warmed up, and what of it
is saved. The policy plays each kind through a record made for it
(:mod:`specchat.engine.policy.planner_arms`), so a drafter that declares a kind here is planned
with no other edit:

- a lookup (``ArmKind.LOOKUP``, :func:`lookup`) proposes from text already there (the prompt,
  a predicted output, a bigram table): it reads nothing and costs a list slice, priced per
  drafted token from its own steps (its prior: ``cost_prior`` seconds when ``banded``, else
  ``cost_prior`` × a target step). Its chains are checked in a few sizes, as deep as
  ``PlannerSettings.lookup_depth``; it is scored from its first step on (no probe first), may
  time a check while the verify curve is unknown, and, when it has free guesses
  (``Drafter.free_guesses``), learns its acceptance from them on every step. A ``banded``
  lookup (the n-gram lookup) keeps its acceptance per band of how long its guesses have been
  right in a row (:mod:`specchat.engine.policy.lookup_estimate`): its chains are at most twice
  that run, it is warmed up and its longer checks timed only inside a repeated passage, and it
  needs a wider margin outside a long run. Every lookup's and chain's estimates are saved with
  the planner's state.
- a chain (``ArmKind.CHAIN``, :func:`chain`) has costs of its own (the layer-skip self-draft,
  Kangaroo, MTP): one short probe times it, then its acceptance per position and its seconds
  per drafted token are learnt from its own steps. A module that declares no ``ARM`` is
  planned as one (:data:`CHAIN`).
- the draft model's chain (``ArmKind.DRAFT_CHAIN``, :func:`draft_chain`): the draft model's
  per-position α, per topic (:mod:`specchat.engine.policy.learning`'s estimates), priced at
  the draft model's measured seconds per token plus, after steps it did not draft, the catch-up
  read of what they committed; warmed up and probed while that read is cheap; its steps may
  stop early on the draft's confidence.
- the draft model's tree (``ArmKind.DRAFT_TREE``, :func:`draft_tree`): the same α at rank 1,
  lower ranks learnt from its trees' accepted ranks, priced one batched draft pass per level.

- a drafter that plans its own step (``ArmKind.OWN_STEP``, :func:`own_step`: Lookahead's window,
  Medusa's tree): no prior predicts what such a step yields, so it is scored on what its steps
  did, decayed tokens and seconds per step
  (:class:`specchat.engine.policy.planner_own.MeasuredDrafter`), saved with the planner's state
  like the other arms' estimates. The drafter itself says it plans its step
  (``Drafter.plans_own_step`` and ``own_plan``), and the decoder registers it with the planner;
  one that declares no such arm is still measured and planned so, but afresh in each process.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class ArmKind(Enum):
    LOOKUP = "lookup"
    CHAIN = "chain"
    DRAFT_CHAIN = "draft_chain"
    DRAFT_TREE = "draft_tree"
    OWN_STEP = "own_step"


@dataclass(frozen=True)
class Arm:
    """A drafter's arm: its kind, and the priors its estimates start from before its steps
    are seen (each prior weighs a few steps: its own steps soon say otherwise where wrong)."""

    kind: ArmKind
    prior_alpha: float  # acceptance per position
    cost_prior: float  # seconds per drafted token, × one target step's T(1) (banded: seconds)
    banded: bool = False  # a lookup whose acceptance is kept per band of its run (see above)


def lookup(prior_alpha: float = 0.6, cost_prior: float = 0.01) -> Arm:
    """A lookup's arm (see the module's docstring)."""
    return Arm(ArmKind.LOOKUP, prior_alpha, cost_prior)


def banded_lookup(prior_alpha: float, cost_prior: float) -> Arm:
    """A lookup whose acceptance is kept per band of its run of right guesses, its cost prior
    in seconds per drafted token (see the module's docstring)."""
    return Arm(ArmKind.LOOKUP, prior_alpha, cost_prior, banded=True)


def chain(prior_alpha: float = 0.6, cost_prior: float = 0.5) -> Arm:
    """A chain drafter's arm (see :data:`CHAIN`): by default a cautious α, and a drafted token
    priced at half a target step until one is timed."""
    return Arm(ArmKind.CHAIN, prior_alpha, cost_prior)


def draft_chain() -> Arm:
    """The draft model's chain (its priors are the pair's calibration: see the docstring)."""
    return Arm(ArmKind.DRAFT_CHAIN, 0.0, 0.0)


def draft_tree() -> Arm:
    """The draft model's token tree (see the module's docstring)."""
    return Arm(ArmKind.DRAFT_TREE, 0.0, 0.0)


def own_step() -> Arm:
    """A drafter that plans its own step (see the module's docstring): measured, no priors."""
    return Arm(ArmKind.OWN_STEP, 0.0, 0.0)


LOOKUP = lookup()
CHAIN = chain()
