"""How often prompt lookup is right: what the planner knows of the n-gram drafter's acceptance.

Learnt from the lookup's own steps and from its guesses on every other step (scored by
:class:`~specchat.engine.policy.guesses.GuessBook`). Three things make it follow the reply:

- Two estimates: inside a passage the reply repeats (the last ``HOT_STREAK`` guesses right) and
  outside one. Right guesses come in runs, so one estimate over all positions is too high where a
  step starts after a miss (a summary quotes phrases between words of its own: 0.84× plain with
  one estimate on the Qwen pair).
- Change detection (Page-Hinkley on each step's or guess's first token) restarts an estimate
  from its recent outcomes when the hit rate changes: a stale high α would plan long checks that
  fail, each costing several plain steps on a steep curve.
- A new reply inherits at most ``CARRY`` observations: how often the lookup is right depends on
  the reply (a copy or not), so its own guesses soon decide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specchat.engine.decode.plan import NGRAM
from specchat.engine.policy.acceptance import AcceptanceModel
from specchat.engine.policy.change_detect import PageHinkley
from specchat.engine.policy.guesses import GuessBook

HOT_STREAK = 2  # right lookups in a row that mark a repeated passage (one is often a word pair)
CARRY = 4.0  # observations a reply inherits from earlier ones, at most
NAME = NGRAM


class LookupEstimate:
    def __init__(self, size: int, prior_alpha: float, slow_half_life: float,
                 fast_half_life: float, detect_changes: bool = True) -> None:
        self.size = size
        self.models = {hot: AcceptanceModel(size, prior_alpha, prior_weight=6.0,
                                            slow_half_life=slow_half_life,
                                            fast_half_life=fast_half_life)
                       for hot in (True, False)}
        # Lookups are nearly all right or all wrong (a copy, then prose): a lower threshold
        # than the draft model's detector catches the change within a few steps.
        self._detectors = {hot: PageHinkley(threshold=4.0) for hot in (True, False)}
        self.detect_changes = detect_changes
        self.guesses = GuessBook()
        self.streak = 0  # the lookup's last guesses (or its steps' tokens) right in a row

    @property
    def hot(self) -> bool:
        """Inside a passage the reply repeats."""
        return self.streak >= HOT_STREAK

    @property
    def current(self) -> AcceptanceModel:
        """The estimates in the state the next step starts in."""
        return self.models[self.hot]

    def begin(self) -> None:
        self.guesses.clear()  # a new prompt: an open guess was for the last reply's next token
        for hot in (True, False):
            self.models[hot].keep_at_most(CARRY)
            self._detectors[hot].reset()
        self.streak = 0

    def step(self, outcomes: Sequence[float]) -> None:
        """One of the lookup's own steps (its outcomes, as ``step_outcomes`` gives them)."""
        self._learn(outcomes, self.hot)
        kept = next((i for i, x in enumerate(outcomes) if x < 0.5), len(outcomes))
        self.streak = self.streak + kept if kept else 0

    def score(self, committed: Sequence[int], ran: str, guess: Sequence[int] | None) -> None:
        """After each step: score the open guesses against the ``committed`` tokens (``ran``:
        the drafter that proposed them), then open ``guess`` (what the lookup would propose
        now; None when it is not running)."""
        for hot, start, outcome in self.guesses.resolve(committed, ran).get(NAME, ()):
            self._learn(outcome, hot, start)
        if ran != NAME and NAME in self.guesses.last_hit:  # (after its own step: see step)
            self.streak = self.streak + 1 if self.guesses.last_hit[NAME] else 0
        if guess is not None:
            self.guesses.offer(NAME, guess, self.hot)

    def _learn(self, outcomes: Sequence[float], hot: bool, start: int = 0) -> None:
        """Outcomes of depths ``start`` on (a guess's later depths come in later steps)."""
        model = self.models[hot]
        # The detector reads each first token only: the guesses open at a changed word all
        # miss there, at their several depths — one event, not several.
        first = self.detect_changes and bool(outcomes) and start == 0
        expected = model.position_alphas()[0] if first else 0.0
        model.observe(outcomes, start)
        if first and self._detectors[hot].update(outcomes[0], expected):
            model.adopt_fast()

    def state(self) -> dict[str, object]:
        return {"ngram": self.models[True].state(), "ngram_cold": self.models[False].state()}

    def load_state(self, d: Mapping[str, object]) -> None:
        """Restore :meth:`state` (raises ValueError/TypeError/KeyError on a malformed record;
        a state saved before the two were kept apart gives its one estimate to both)."""
        loaded = {}
        for hot, key in ((True, "ngram"), (False, "ngram_cold")):
            m = loaded[hot] = AcceptanceModel(self.size, self.models[hot].prior_alpha)
            m.load_state(d.get(key, d["ngram"]))  # type: ignore[arg-type]
        for hot, m in loaded.items():
            self.models[hot].reset_to(m)
            self.models[hot].prior_alpha, self.models[hot].steps = m.prior_alpha, m.steps
