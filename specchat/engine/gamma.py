"""How many tokens to draft per step: the policy interface, and the fixed policy.

The speculative decoder asks ``next_gamma()`` before each step, may ask ``keep_drafting`` after
each drafted token (an early stop when the drafter is unsure), and reports every finished step
to ``observe``. An adaptive controller (auto-γ) implements the same three methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from specchat.engine.events import StepEvent


class GammaPolicy(Protocol):
    def next_gamma(self) -> int:
        """Draft length for the next step (0 = a plain step)."""
        ...

    def keep_drafting(self, drafted: int, top_prob: Callable[[], float]) -> bool:
        """After ``drafted`` tokens of this step (draft model only): draft another one?

        ``top_prob()`` is the draft model's probability of its most likely token at the position
        just drafted (after the sampler transform) — a confidence signal for stopping early. It
        is computed only when called: under greedy decoding it costs a softmax over the
        vocabulary.
        """
        ...

    def observe(self, step: StepEvent) -> None:
        """The outcome of a finished step."""
        ...


class FixedGamma:
    """Always the same draft length."""

    def __init__(self, gamma: int) -> None:
        if not 0 <= gamma <= 64:
            raise ValueError("γ must be between 0 and 64")
        self.gamma = gamma

    def next_gamma(self) -> int:
        return self.gamma

    def keep_drafting(self, drafted: int, top_prob: Callable[[], float]) -> bool:
        return True

    def observe(self, step: StepEvent) -> None:
        return None

    def __repr__(self) -> str:
        return f"FixedGamma({self.gamma})"
