"""How the planner treats a drafter — its *arm* — declared by the drafter's module beside
``build`` as ``ARM`` (read through :func:`specchat.engine.decode.registry.arm`).

The planner (:mod:`specchat.engine.policy.planner`) scores every arm against a plain step on
the measured costs; an arm says which estimates and prices apply to the drafter's steps:

- a lookup (``ArmKind.LOOKUP``, :func:`lookup`) proposes from text already there (a predicted
  output, a bigram table): it reads nothing and costs a list slice. Its chains are checked as
  deeply, and in the same few sizes, as the n-gram lookup's; it is scored from its first step
  on (no probe first), may time a check while the verify curve is unknown, and, when it has
  free guesses (``Drafter.free_guesses``), learns its acceptance from them on every step.
- a chain (``ArmKind.CHAIN``, :func:`chain`) has costs of its own (the layer-skip self-draft,
  Kangaroo, MTP): one short probe times it, then its acceptance per position and its seconds
  per drafted token are learnt from its own steps. A module that declares no ``ARM`` is
  planned as one (:data:`CHAIN`).

The draft model's chain and tree, the n-gram lookup and the drafters that plan their own step
(``Drafter.plans_own_step``) are planned by estimates of the planner's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class ArmKind(Enum):
    LOOKUP = "lookup"
    CHAIN = "chain"


@dataclass(frozen=True)
class Arm:
    """A drafter's arm: its kind, and the priors its estimates start from before its steps
    are seen (each prior weighs a few steps: its own steps soon say otherwise where wrong)."""

    kind: ArmKind
    prior_alpha: float  # acceptance per position
    cost_prior: float  # seconds per drafted token, × one target step's T(1)


def lookup(prior_alpha: float = 0.6, cost_prior: float = 0.01) -> Arm:
    """A lookup's arm (see :data:`LOOKUP`)."""
    return Arm(ArmKind.LOOKUP, prior_alpha, cost_prior)


def chain(prior_alpha: float = 0.6, cost_prior: float = 0.5) -> Arm:
    """A chain drafter's arm (see :data:`CHAIN`): by default a cautious α, and a drafted token
    priced at half a target step until one is timed."""
    return Arm(ArmKind.CHAIN, prior_alpha, cost_prior)


LOOKUP = lookup()
CHAIN = chain()
