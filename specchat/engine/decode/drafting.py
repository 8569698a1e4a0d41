"""The seam between the decoder and its drafters: what a drafter is asked and answers.

Every drafter is a plug-in behind the ``Drafter`` protocol: asked with a ``DraftRequest`` (the
committed sequence, the step's ``Plan`` — drafter name and tree shape —, the sampler settings
and the step's random generator), it returns a ``Proposal``: tokens as a chain or a tree whose
parent indices are a sub-tree of the plan's shape, with the distribution q each token was drawn
from (a point mass for deterministic proposals). It is told what the target committed
(``commit``), when a reply starts (``reset``) and ends or is cancelled (``settle``).

Every hook the decoder calls is declared on ``Drafter``, and :class:`DrafterBase` gives each a
default, so a drafter writes only what it does (llama.cpp's ``common_speculative_impl`` and
transformers' ``CandidateGenerator`` are built the same way). Besides the core above:

- ``can_propose(seq)``: whether it may have something to propose now (default True). The n-gram
  lookup without a match says no, so the planner scores only the drafters that can draft now
  (an n-gram chain planned without a match is a plain step that kept the draft model idle).
- ``plans_own_step`` / ``own_plan()``: a drafter whose step has a shape of its own (Lookahead's
  window and candidate trie, Medusa's heads' tree) says so and returns that step; the planner
  runs it and keeps it only while its measured rate beats plain's
  (:mod:`specchat.engine.policy.planner_arms`). Chain drafters are sized by the planner.
- ``lag(seq)``: the tokens a cache of its own lacks (the layer-skip cut, Kangaroo's shallow
  model; default 0): the planner does not probe it when its first step would read a long prompt.
- ``free_guesses`` / ``guess(seq, k)``: a drafter whose proposal costs nothing (the n-gram
  lookup, a predicted output) says what it would propose now, so a planner scores it on steps
  that did not run it (:mod:`specchat.engine.policy.guesses`).
- ``reads_hidden``: it drafts from the target's hidden states (Medusa): the verify pass of its
  steps keeps them.
- ``fixed_gamma``: the fixed γ (and its label) to draft with when it drafts alone and the policy
  would be auto-γ, which sizes chains only (Medusa: its heads' tree; the planner scores such a
  step itself, so it is left alone).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specchat.engine.decode.grammar import Constraint
from specchat.engine.decode.plan import CHAIN, NONE, TREE, Plan, chain, depths, plain
from specchat.engine.decode.sampling import Distribution, SamplerSettings
from specchat.engine.decode.verify import Verdict
from specchat.engine.llama.side_branch import SideBranch
from specchat.errors import SpecchatError


class DraftFailed(SpecchatError):
    """A drafter cannot go on for this reply (its message says why, for a notice)."""

    def __init__(self, message: str, drafter: str | None = None) -> None:
        super().__init__(message)
        self.drafter = drafter  # which drafter failed, when a combination reports it


def _always(drafted: int, top_prob: Callable[[], float]) -> bool:
    return True


@dataclass(frozen=True)
class DraftRequest:
    seq: Sequence[int]  # the committed sequence (prompt + reply so far)
    plan: Plan
    settings: SamplerSettings
    rng: np.random.Generator
    # The γ policy's early stop, asked after each drafted token of a chain (see GammaPolicy).
    keep_drafting: Callable[[int, Callable[[], float]], bool] = _always
    # The reply's grammar, when it has one: a drafter that runs a model masks its rows with
    # it along its draft path (``grammar.mask(row, path)``), so it drafts only allowed tokens.
    grammar: Constraint | None = None


@dataclass(frozen=True)
class Proposal:
    drafter: str  # the name of the drafter that proposed it
    tokens: tuple[int, ...] = ()
    parents: tuple[int, ...] = ()  # node i hangs under parents[i] (−1: the root), parents first
    q: tuple[Distribution, ...] = ()  # the distribution each token was drawn from
    # Rows the drafter wants evaluated in the same target batch, apart from the tree (its
    # own work, e.g. Lookahead's Jacobi window); their logits go back to it, never to the rule.
    side: SideBranch | None = None
    # What the drafter read before it could draft (its own cache catching up on tokens it had
    # not seen, beyond the last one every step reads): a planner prices such reads from these.
    read_tokens: int = 0
    read_s: float = 0.0

    @property
    def kind(self) -> str:
        if not self.tokens:
            return NONE
        return CHAIN if all(p == i - 1 for i, p in enumerate(self.parents)) else TREE

    @property
    def depth(self) -> int:
        return max(depths(self.parents), default=0)


def path_to(parents: Sequence[int], node: int) -> list[int]:
    """The nodes from the root's child down to ``node`` (empty for −1)."""
    out: list[int] = []
    while node >= 0:
        out.append(node)
        node = parents[node]
    out.reverse()
    return out


class Drafter(Protocol):
    name: str
    # Capabilities, declared (DrafterBase: all False); see the module docstring.
    reads_hidden: bool  # its steps' verify pass keeps the target's hidden states
    plans_own_step: bool  # own_plan() is its step; else the planner sizes a chain
    free_guesses: bool  # guess() costs nothing: a planner may ask it every step
    fixed_gamma: tuple[int, str] | None  # (γ, label) in place of auto-γ when it drafts alone

    def default_plan(self, gamma: int) -> Plan:
        """The step to take when the γ policy gives only a length (no ``next_plan``)."""
        ...

    def reset(self, prompt: Sequence[int]) -> None:
        """A reply starts on ``prompt``."""
        ...

    def configure(self, settings: SamplerSettings) -> None:
        """Right after ``reset``: the reply's settings (a drafter that drafts from a request's
        field, such as a predicted output, reads it here)."""
        ...

    def propose(self, req: DraftRequest) -> Proposal:
        """Tokens for the target to check (none is a valid answer); may raise DraftFailed."""
        ...

    def commit(self, seq: Sequence[int], proposal: Proposal, verdict: Verdict) -> None:
        """The step's outcome: ``seq`` is the committed sequence now."""
        ...

    def settle(self, seq: Sequence[int]) -> None:
        """The reply ended (or was cancelled): leave any cache holding a prefix of ``seq``."""
        ...

    def can_propose(self, seq: Sequence[int]) -> bool:
        """Whether it may propose something after the committed ``seq`` (asked before a
        planner's step; False only when it knows it has nothing, cheaply)."""
        ...

    def own_plan(self) -> Plan:
        """Its own step (asked only when ``plans_own_step``)."""
        ...

    def lag(self, seq: Sequence[int]) -> int:
        """Tokens of the committed ``seq`` its own cache lacks: what its first step reads."""
        ...

    def guess(self, seq: Sequence[int], k: int) -> list[int]:
        """The chain of up to ``k`` tokens it would propose after ``seq`` now (asked only when
        ``free_guesses``)."""
        ...


class DrafterBase:
    """The defaults of every ``Drafter`` hook: a chain of γ tokens is the default step; no
    state to reset, configure, commit or settle; always able to propose; no step of its own,
    no cache of its own, no free guesses, no hidden states, sized by auto-γ."""

    name: str
    reads_hidden = False
    plans_own_step = False
    free_guesses = False
    fixed_gamma: tuple[int, str] | None = None

    def default_plan(self, gamma: int) -> Plan:
        return chain(self.name, gamma)

    def can_propose(self, seq: Sequence[int]) -> bool:
        return True

    def own_plan(self) -> Plan:
        return plain()  # no step of its own: a plain step, were it asked

    def lag(self, seq: Sequence[int]) -> int:
        return 0

    def guess(self, seq: Sequence[int], k: int) -> list[int]:
        return []

    def reset(self, prompt: Sequence[int]) -> None:
        return None

    def configure(self, settings: SamplerSettings) -> None:
        return None

    def commit(self, seq: Sequence[int], proposal: Proposal, verdict: Verdict) -> None:
        return None

    def settle(self, seq: Sequence[int]) -> None:
        return None


def fit_shape(parents: Sequence[int], max_nodes: int, max_depth: int,
              max_leaves: int) -> tuple[int, ...]:
    """The shape within the limits: nodes too deep, past the node budget or adding a leaf past
    ``max_leaves`` are left out with their subtrees (so a tree that does not fit the batch, the
    context or the sequences is shrunk, never refused). Node order is kept."""
    new_index: dict[int, int] = {}
    out: list[int] = []
    depth: list[int] = []
    has_child: set[int] = set()
    leaves = 0
    for i, p in enumerate(parents):
        if p >= 0 and p not in new_index:
            continue
        d = 1 if p < 0 else depth[new_index[p]] + 1
        np_ = new_index[p] if p >= 0 else -1
        grows = np_ < 0 or np_ in has_child  # a new leaf, unless it extends one
        if len(out) >= max_nodes or d > max_depth or leaves + grows > max_leaves:
            continue
        new_index[i] = len(out)
        out.append(np_)
        depth.append(d)
        leaves += grows
        if np_ >= 0:
            has_child.add(np_)
    return tuple(out)
