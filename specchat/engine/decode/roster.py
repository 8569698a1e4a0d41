"""A reply's drafters: which are alive, which guess for free, the default, and a failure's drop.

The speculative decoder (:mod:`.speculative`) keeps one :class:`Roster` over the drafters it was
built with. Each reply starts with all of them (:meth:`Roster.start`); a drafter whose own error
ends its proposal (NaN logits, a failed decode, a token it cannot read) drops out for the rest
of that reply with a notice, and the step is the target's alone: a broken draft must not end a
healthy target's reply. With several alive, the default is a :class:`Fallback` that tries them
in turn (``ngram,model``: the lookup when it has a match, else the draft model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from specchat.engine.decode.drafting import Drafter, DraftFailed, DraftRequest, Proposal
from specchat.engine.decode.events import NoticeEvent
from specchat.engine.decode.fallback import Fallback
from specchat.engine.decode.grammar_drafts import allowed_part
from specchat.engine.decode.plan import MODEL, NONE, TREE
from specchat.engine.decode.verify import Verdict
from specchat.engine.llama.context import DecodeCancelled
from specchat.errors import SpecchatError


class Roster:
    """The drafters of one decoder (``every``) and, for the reply under way, those alive."""

    def __init__(self, every: Sequence[Drafter]) -> None:
        self.every = list(every)
        self.alive: list[Drafter] = []  # this reply's drafters (a failed one drops out)
        self.guessers: list[Drafter] = []  # of those, the ones whose proposal costs nothing
        self.default: Drafter | None = None  # what proposes when no plan names a drafter

    def start(self, seq: Sequence[int]) -> None:
        """A reply begins: every drafter alive again, each reset to the committed ``seq``."""
        self._set(self.every)
        for d in self.alive:
            d.reset(seq)

    def _set(self, drafters: Sequence[Drafter]) -> None:
        self.alive = list(drafters)
        self.guessers = [d for d in self.alive if d.free_guesses]
        n = len(self.alive)
        self.default = None if n == 0 else self.alive[0] if n == 1 else Fallback(self.alive)

    def available(self, seq: Sequence[int]) -> tuple[str, ...]:
        """The names of the alive drafters that can propose after ``seq``."""
        return tuple(d.name for d in self.alive if d.can_propose(seq))

    def propose(self, req: DraftRequest) -> tuple[Proposal, list[NoticeEvent]]:
        """The proposal of the drafter ``req.plan`` names (else the default), cut to what the
        reply's grammar allows; nothing, with a notice, when that drafter fails (it drops
        out)."""
        if req.plan.drafter == NONE or self.default is None:
            return Proposal(NONE), []
        drafter = next((d for d in self.alive if d.name == req.plan.drafter), self.default)
        try:
            return allowed_part(drafter.propose(req), req.grammar), []
        except DecodeCancelled:
            raise
        except SpecchatError as e:
            failed = (e.drafter if isinstance(e, DraftFailed) else None) or drafter.name
            for d in self.alive:
                d.settle(req.seq)
            self._set([d for d in self.alive if d.name != failed])
            who = "the draft" if failed in (MODEL, TREE) else f"the {failed} drafter"
            return Proposal(NONE), [NoticeEvent(f"{who} stopped: {e}; the reply goes on "
                                                  "without it")]

    def reads_hidden(self, proposal: Proposal) -> bool:
        """Whether this step's target pass computes hidden states: a drafter that drafts from
        them (medusa) reads this pass's when it ran this step, even with nothing to propose:
        it is likely to draft the next (else it re-reads a token first). Not on other steps:
        hidden states cost every pass they are on, and a plain step must be plain."""
        return proposal.drafter != NONE and any(
            d.reads_hidden for d in self.alive if d.name == proposal.drafter)

    def commit(self, seq: Sequence[int], proposal: Proposal, verdict: Verdict) -> None:
        for d in self.alive:
            d.commit(seq, proposal, verdict)

    def settle(self, seq: Sequence[int]) -> None:
        """Every drafter's cache (alive or dropped) holding only committed tokens."""
        for d in self.every:
            d.settle(seq)

    def guesses(self, seq: Sequence[int]) -> dict[str, Callable[[int], Sequence[int]]]:
        """The free drafters' next guesses after ``seq``, by name (empty when none guess)."""
        return {d.name: partial(d.guess, seq) for d in self.guessers}
