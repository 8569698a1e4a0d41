"""The planner's records of its arms, by drafter: each made for the kind the drafter's module
declares (:mod:`specchat.engine.decode.arms`; a drafter that declares none is a chain, until the
decoder registers it as planning its own step: then it is a self-planning one,
:mod:`specchat.engine.policy.planner_arms`). What they learnt is saved with the planner's state,
each arm's under its name (:mod:`specchat.engine.policy.planner_state`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from specchat.engine.decode.arms import CHAIN, Arm, ArmKind
from specchat.engine.decode.plan import NONE, Plan
from specchat.engine.policy.guesses import GuessBook
from specchat.engine.policy.learning import AutoGammaSeed, AutoGammaSettings
from specchat.engine.policy.planner_arms import (
    ArmRecord,
    ChainRecord,
    LookupRecord,
)
from specchat.engine.policy.planner_banded import BandedLookup
from specchat.engine.policy.planner_draft import DraftChain, DraftTree
from specchat.engine.policy.planner_own import OwnRecord
from specchat.engine.policy.planner_settings import PlannerSettings

KINDS: dict[ArmKind, type[ArmRecord]] = {
    ArmKind.LOOKUP: LookupRecord, ArmKind.CHAIN: ChainRecord,
    ArmKind.DRAFT_CHAIN: DraftChain, ArmKind.DRAFT_TREE: DraftTree, ArmKind.OWN_STEP: OwnRecord}


class Records(dict[str, ArmRecord]):
    """Each drafter's record, by name; the declared arms' made at once (in their names' order,
    which is the order their estimates are drawn in), any other on first use."""

    def __init__(self, arms: Mapping[str, Arm], s: AutoGammaSettings, ps: PlannerSettings,
                 seed: AutoGammaSeed | None) -> None:
        super().__init__()
        self.arms, self.s, self.ps = dict(arms), s, ps
        self.plain = ArmRecord(NONE, CHAIN, s, ps)  # a plain step's: never planned
        self.book = GuessBook()  # the free guesses the records do not score themselves
        for name in sorted(self.arms):
            self.of(name)
        self.reseed(seed or AutoGammaSeed())

    def of(self, name: str) -> ArmRecord:
        got = self.get(name) if name != NONE else self.plain
        if got is None:
            arm = self.arms.get(name, CHAIN)
            kind = BandedLookup if arm.banded else KINDS[arm.kind]
            got = self[name] = kind(name, arm, self.s, self.ps)
        return got

    def own(self, plans: Mapping[str, Callable[[], Plan]]) -> None:
        """The drafters that plan their own step, with how to ask each for it (a drafter whose
        module declares no own-step arm gets its record now, with nothing learnt)."""
        for name, ask in plans.items():
            got = self.get(name)
            if not isinstance(got, OwnRecord):
                got = self[name] = OwnRecord(name, self.arms.get(name, CHAIN), self.s, self.ps)
            got.ask = ask

    def reseed(self, seed: AutoGammaSeed) -> None:
        for r in self.values():
            r.reseed(seed)

    def begin(self) -> None:
        """A reply starts."""
        self.book.clear()
        for r in self.values():
            r.begin()

    def score_guesses(self, committed: Sequence[int], ran: str,
                      guessers: Mapping[str, Callable[[int], Sequence[int]]], k: int) -> None:
        """After a step (see Planner.score_guesses): the open guesses scored against
        ``committed``, and each free drafter's next guess of ``k`` tokens offered."""
        for name, got in self.book.resolve(committed, ran).items():
            for _, start, outcome in got:
                self.of(name).guessed(outcome, start)
        for name, guesser in guessers.items():
            if not self.of(name).scores_guesses:
                self.book.offer(name, guesser(k))
        for name, r in self.items():
            r.score_guess(committed, ran, guessers.get(name), k)

    def hot(self) -> frozenset[str]:
        return frozenset(n for n, r in self.items() if r.hot)

    def bands(self) -> tuple[int, ...]:
        """Each banded lookup's band."""
        return tuple(b for b in (r.band for r in self.values()) if b is not None)
