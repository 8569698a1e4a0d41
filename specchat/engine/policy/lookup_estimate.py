"""How often a banded lookup is right (:mod:`specchat.engine.decode.arms`; the n-gram lookup is
one): what the planner knows of its acceptance, kept per lookup under the lookup's ``name``.

Learnt from the lookup's own steps and from its guesses on every other step (scored by
:class:`~specchat.engine.policy.guesses.GuessBook`). Three things make it follow the reply:

- Three estimates, by how long the lookup has been right in a row: outside a passage the reply
  repeats, just inside one (the last ``HOT_STREAK`` guesses right), and deep inside one
  (``LONG_STREAK``). Right guesses come in runs, so one estimate over all positions is too high
  where a step starts after a miss (a summary quotes phrases between words of its own); and a
  run that has lasted is likelier to go on than one just begun, so the checks a long copy
  earns are not held back by the misses at the start of runs.
  Outside a passage, its estimate shrinks toward first tokens' rate alone: the later tokens
  of a run that started there are right because the first was (a reply restating its question
  would otherwise price its prose's lookups as a copy's).
- Change detection (Page-Hinkley on each step's or guess's first token) restarts an estimate
  from its recent outcomes when the hit rate changes: a stale high α would plan long checks that
  fail, each costing several plain steps on a steep curve.
- A new reply inherits at most ``CARRY`` observations of the long streak's estimate, and none of
  the others: how often the lookup is right depends on the reply (a copy or not), so its own
  guesses decide. A run of four right is a copy in any reply, but two right in prose is a
  common phrase (after a code edit, a prose reply's first lookups priced at the edit's α lose).

The figures behind each of these: docs/performance.md, "Figures behind the defaults".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specchat.engine.policy.acceptance import AcceptanceModel
from specchat.engine.policy.change_detect import PageHinkley
from specchat.engine.policy.guesses import GuessBook

HOT_STREAK = 2  # right lookups in a row that mark a repeated passage (one is often a word pair)
LONG_STREAK = 4  # ... and that mark a copy well under way
COLD, HOT, LONG = 0, 1, 2  # the estimates, by streak
BANDS = (HOT, COLD, LONG)
CARRY = {COLD: 0.0, HOT: 0.0, LONG: 4.0}  # observations a reply inherits, at most


class LookupEstimate:
    def __init__(self, size: int, prior_alpha: float, slow_half_life: float,
                 fast_half_life: float, detect_changes: bool = True, *, name: str) -> None:
        self.name = name  # the lookup's drafter, as its guesses and steps are named
        self.size = size
        self.models = {band: AcceptanceModel(size, prior_alpha, prior_weight=6.0,
                                             slow_half_life=slow_half_life,
                                             fast_half_life=fast_half_life,
                                             pool_first=band == COLD)
                       for band in BANDS}
        # Lookups are nearly all right or all wrong (a copy, then prose): a lower threshold
        # than the draft model's detector catches the change within a few steps.
        self._detectors = {band: PageHinkley(threshold=4.0) for band in BANDS}
        self.detect_changes = detect_changes
        self.guesses = GuessBook()
        self.streak = 0  # the lookup's last guesses (or its steps' tokens) right in a row

    @property
    def hot(self) -> bool:
        """Inside a passage the reply repeats."""
        return self.streak >= HOT_STREAK

    @property
    def band(self) -> int:
        """Which estimate the next step starts in: COLD, HOT or LONG (by the streak)."""
        return LONG if self.streak >= LONG_STREAK else HOT if self.hot else COLD

    @property
    def current(self) -> AcceptanceModel:
        """The estimates in the state the next step starts in."""
        band = self.band
        if band == LONG:
            # A long streak's estimate shrinks toward the repeated passage's (which counts its
            # outcomes too), not toward the cold prior: a reply's first long copy then earns
            # longer checks within a few tokens instead of relearning from nothing.
            self.models[LONG].prior_alpha = self.models[HOT].alpha()
        return self.models[band]

    def begin(self) -> None:
        self.guesses.clear()  # a new prompt: an open guess was for the last reply's next token
        for band in BANDS:
            self.models[band].keep_at_most(CARRY[band])
            self._detectors[band].reset()
        self.streak = 0

    def step(self, outcomes: Sequence[float]) -> None:
        """One of the lookup's own steps (its outcomes, as ``step_outcomes`` gives them)."""
        self._learn(outcomes, self.band)
        kept = next((i for i, x in enumerate(outcomes) if x < 0.5), len(outcomes))
        if kept == len(outcomes):
            self.streak += kept
        else:
            # It departed from its source: still in a repeated passage if it kept some (the
            # copy goes on after an edit), but no longer deep in a run.
            self.streak = min(self.streak + kept, HOT_STREAK) if kept else 0

    def score(self, committed: Sequence[int], ran: str, guess: Sequence[int] | None) -> None:
        """After each step: score the open guesses against the ``committed`` tokens (``ran``:
        the drafter that proposed them), then open ``guess`` (what the lookup would propose
        now; None when it is not running)."""
        for band, start, outcome in self.guesses.resolve(committed, ran).get(self.name, ()):
            self._learn(outcome, band, start)
        if ran != self.name and self.name in self.guesses.last_hit:  # (after its own step: see step)
            self.streak = self.streak + 1 if self.guesses.last_hit[self.name] else 0
        if guess is not None:
            self.guesses.offer(self.name, guess, self.band)

    def _learn(self, outcomes: Sequence[float], band: int, start: int = 0) -> None:
        """Outcomes of depths ``start`` on (a guess's later depths come in later steps). A long
        streak is a repeated passage too: its outcomes count for both estimates."""
        for b in (HOT, LONG) if band == LONG else (band,):
            model = self.models[b]
            if b == LONG:
                model.prior_alpha = self.models[HOT].alpha()
            # The detector reads each first token only: the guesses open at a changed word all
            # miss there, at their several depths — one event, not several.
            first = self.detect_changes and bool(outcomes) and start == 0
            expected = model.position_alphas()[0] if first else 0.0
            model.observe(outcomes, start)
            if first and self._detectors[b].update(outcomes[0], expected):
                model.adopt_fast()

    def keys(self) -> dict[int, str]:
        """Each band's key in a saved state: the lookup's name, and its name with ``_cold`` or
        ``_long`` (for the n-gram lookup, the keys states have always had)."""
        n = self.name
        return {HOT: n, COLD: f"{n}_cold", LONG: f"{n}_long"}

    def state(self) -> dict[str, object]:
        return {key: self.models[band].state() for band, key in self.keys().items()}

    def load_state(self, d: Mapping[str, object]) -> None:
        """Restore :meth:`state` (raises ValueError/TypeError/KeyError on a malformed record;
        a state saved before the estimates were kept apart gives its one estimate to all, and
        one saved before the long streak's gives the repeated passage's to it)."""
        loaded = {}
        for band, key in self.keys().items():
            m = loaded[band] = AcceptanceModel(self.size, self.models[band].prior_alpha)
            m.load_state(d.get(key, d[self.name]))  # type: ignore[arg-type]
        for band, m in loaded.items():
            self.models[band].reset_to(m)
            self.models[band].prior_alpha, self.models[band].steps = m.prior_alpha, m.steps
