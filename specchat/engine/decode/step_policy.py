"""The seam between the decoder and its γ policy: what the decoder asks before and after each step.

The speculative decoder tells the policy when a reply starts (``begin``, with the text of the
new part of the prompt — in a chat, the user's new turn), asks ``next_gamma()`` before each
step, asks ``keep_drafting`` after each drafted token (an early stop when the drafter is
unsure), and reports every finished step to ``committed`` (the text it added) and ``observe``.
``label`` names what the policy is doing, for status lines ("fixed", "auto · code").

A policy that chooses the drafter and the tree shape per step (the planner,
:mod:`specchat.engine.policy.planner`) declares ``plans_steps`` and answers ``next_plan``; it is
also told which drafters plan their own steps (``own_plans``), what the draft model's and the
other drafters' caches lack as a reply starts (``draft_lag``, ``drafter_lags``) and, after each
step, what the drafters with free guesses would have proposed (``score_guesses``). Every hook is
declared here and :class:`PolicyBase` gives each a default, so a policy writes only what it
uses. The policies live in :mod:`specchat.engine.policy`; the decoder knows only this interface
and the fixed length.

:class:`GammaPolicy` is what the speculative decoder calls, and the decoder calls every member
of it. What the rest of the app asks of a learning controller (its saved state, a calibration
taken in, its forecast) is another protocol, :class:`specchat.engine.policy.controller.Controller`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import Plan

GAMMA_CAP = 32  # the longest draft any setting may ask for (the planner's cost table's reach)


@dataclass(frozen=True)
class ReplyStart:
    """What the decoder knows as a reply starts, for a policy that prices drafting against
    what the reply can still gain (``GammaPolicy.start_reply``)."""

    max_tokens: int  # the reply's token budget
    # Seconds per token the target took to read this prompt's new part in one batch (None:
    # too few new tokens to time): with ``draft_size_ratio`` a prior for what the draft model
    # pays to read what it has not seen, before one of its own reads is timed.
    target_read_s: float | None = None
    draft_size_ratio: float | None = None  # the draft model's weights over the target's


class GammaPolicy(Protocol):
    """What the speculative decoder calls on its γ policy (see the module's docstring)."""

    # Declared (PolicyBase: False): ``next_plan`` chooses each step. The decoder then works
    # out which drafters can propose (``Drafter.can_propose``) for it, which a policy that
    # gives only a length does not need.
    plans_steps: bool

    @property
    def label(self) -> str:
        """What the policy is doing, in a few words ("fixed", "auto · code")."""
        ...

    def begin(self, prompt_text: str) -> None:
        """A reply starts; ``prompt_text`` is the new part of its prompt (the user's turn)."""
        ...

    def start_reply(self, info: ReplyStart) -> None:
        """Right after ``begin``: the reply's budget and the read costs the decoder measured."""
        ...

    def next_gamma(self) -> int:
        """Draft length for the next step (0 = a plain step)."""
        ...

    def keep_drafting(self, drafted: int, top_prob: Callable[[], float]) -> bool:
        """After ``drafted`` tokens of this step (draft model only): draft another one?

        Asked after every drafted token, even at the step's γ (where the answer is ignored), so
        a policy sees the confidence of every token it drafted. ``top_prob()`` is the draft
        model's probability of its most likely token at the position just drafted (after the
        sampler transform). It is computed only when called: under greedy decoding it costs a
        softmax over the vocabulary.
        """
        ...

    def committed(self, text: str) -> None:
        """The text a step added to the reply (before ``observe`` of that step)."""
        ...

    def observe(self, step: StepEvent) -> None:
        """The outcome of a finished step."""
        ...

    def next_plan(self, available: tuple[str, ...]) -> Plan | None:
        """The next step, drafter and shape, from the drafters of ``available`` (asked only
        when ``plans_steps``). None: the default drafter's step for ``next_gamma()``."""
        ...

    def own_plans(self, plans: Mapping[str, Callable[[], Plan]]) -> None:
        """Once, as the decoder is built: the drafters that plan their own step, by name, with
        how to ask each for it (``Drafter.own_plan``)."""
        ...

    def draft_lag(self, tokens: int) -> None:
        """After ``start_reply``, with a draft model: the tokens of the prompt its cache lacks
        (its cache is brought up only when a step first asks it)."""
        ...

    def drafter_lags(self, lags: dict[str, int]) -> None:
        """After ``start_reply``: the tokens each drafter's own cache lacks (``Drafter.lag``;
        0 for a drafter without one)."""
        ...

    def score_guesses(self, committed: Sequence[int], ran: str,
                      guessers: Mapping[str, Callable[[int], Sequence[int]]]) -> None:
        """After ``observe``: ``committed`` are the tokens the step added, ``ran`` the drafter
        that proposed them ("none": a plain step), ``guessers`` what each drafter with free
        guesses would propose now (up to ``k`` tokens)."""
        ...


class PolicyBase:
    """The defaults of every ``GammaPolicy`` hook but ``next_gamma``: no-ops (nothing to learn
    from), always keep drafting, no plans of its own."""

    label = "fixed"
    plans_steps = False

    def begin(self, prompt_text: str) -> None:
        return None

    def start_reply(self, info: ReplyStart) -> None:
        return None

    def keep_drafting(self, drafted: int, top_prob: Callable[[], float]) -> bool:
        return True

    def committed(self, text: str) -> None:
        return None

    def observe(self, step: StepEvent) -> None:
        return None

    def next_plan(self, available: tuple[str, ...]) -> Plan | None:
        return None

    def own_plans(self, plans: Mapping[str, Callable[[], Plan]]) -> None:
        return None

    def draft_lag(self, tokens: int) -> None:
        return None

    def drafter_lags(self, lags: dict[str, int]) -> None:
        return None

    def score_guesses(self, committed: Sequence[int], ran: str,
                      guessers: Mapping[str, Callable[[int], Sequence[int]]]) -> None:
        return None


def check_gamma(gamma: int) -> int:
    if not 0 <= gamma <= GAMMA_CAP:
        raise ValueError(f"γ must be between 0 and {GAMMA_CAP}")
    return gamma


class FixedGamma(PolicyBase):
    """Always the same draft length."""

    def __init__(self, gamma: int, label: str = "fixed") -> None:
        self.gamma = check_gamma(gamma)
        self.label = label  # "pair" when it is the pair's recommended γ

    def next_gamma(self) -> int:
        return self.gamma

    def __repr__(self) -> str:
        return f"FixedGamma({self.gamma})"
