"""What the app asks of a learning γ controller (the planner, auto-γ) beyond the decoder's seam.

The speculative decoder knows a policy only as a
:class:`~specchat.engine.decode.step_policy.GammaPolicy`: the hooks it calls around each step.
Whoever hands a learning controller out keeps it by this protocol instead: the runtime, which
loads a pair's saved state into each new one and saves the state of the one that learnt the most
(``state``, ``load_state``, ``learnt``); the background calibration, whose result a running
controller takes in (``reseed``); and the race, which sets the reply's measured speed beside
the speed the controller expected of it (``forecast``). Every member is declared here, and
:class:`~specchat.engine.policy.learning.LearningPolicy` implements each, so no caller probes a
controller for what it might have.
"""

from __future__ import annotations

from typing import Protocol

from specchat.engine.policy.learning import AutoGammaSeed


class Controller(Protocol):
    def state(self) -> dict[str, object]:
        """What it learnt, JSON-able, for :meth:`load_state` in a later process."""
        ...

    def load_state(self, d: dict[str, object]) -> None:
        """Start from a saved :meth:`state`; all or nothing (raises ValueError, TypeError or
        KeyError and changes nothing when the state does not parse)."""
        ...

    def learnt(self) -> int:
        """How much it learnt: what a saved state of it is worth against another's."""
        ...

    def reseed(self, seed: AutoGammaSeed) -> None:
        """Take a calibration that ended while it was in use; what its steps taught stays."""
        ...

    def forecast(self) -> float | None:
        """The tokens per second it expected of the reply it last planned (None: it makes no
        such forecast, or has none yet)."""
        ...
