"""Scoring a free drafter's guesses on steps that did not run it.

A drafter whose proposal costs nothing to make (the n-gram lookup: a few dictionary reads)
defines ``guess(seq, k)``: the chain it would propose now. The planner asks for one after a
step and scores it against the tokens the following steps commit, whoever drafted them — so
it learns that drafter's acceptance on every step, plain ones included, instead of only on its
occasional probes (on a copy, prompt lookup was right nearly every time while the planner, from
a probe every few dozen steps, still rated it below what pays).

The scores have the distribution of the drafter's own steps. A guess's tokens are point
masses, so the modified rejection rule keeps guessed token d with probability p(d); a committed
token is a sample of p (exactness is what speculation guarantees), equal to d with that same
probability. Greedy: both are "d is the argmax". Depth i is scored only when the committed
tokens matched the guess up to it, as a real step reaches depth i only when it kept the
tokens before.
"""

from __future__ import annotations

from collections.abc import Sequence


class GuessBook:
    """Each drafter's open guesses (one offered after every step), each resolved by the tokens
    committed after it. A guess is offered at every step rather than one at a time: a guess of
    k tokens that comes true takes k plain steps to resolve, and the planner should not wait
    that long for each piece of evidence (on a copy, prompt lookup pays from the first lines).

    A guess carries a tag, the state it was made in (the planner's: how long the lookup has
    been right in a row), and its outcome is returned with it; ``last_hit`` says whether the guess
    made just before the latest step got that step's first token right."""

    def __init__(self) -> None:
        # name → [(guess, tokens matched so far, tag)]
        self._open: dict[str, list[tuple[tuple[int, ...], int, int]]] = {}
        self.last_hit: dict[str, bool] = {}

    def open(self, name: str) -> int:
        """How many of ``name``'s guesses are still open."""
        return len(self._open.get(name, ()))

    def offer(self, name: str, guess: Sequence[int], tag: int = 0) -> None:
        """``name``'s guess for the tokens after the sequence as it stands ([] adds a mark
        that holds this position, so that a step of ``name`` drops the right one)."""
        self._open.setdefault(name, []).append((tuple(int(t) for t in guess), 0, tag))

    def clear(self) -> None:
        self._open.clear()
        self.last_hit.clear()

    def resolve(self, committed: Sequence[int], ran: str
                ) -> dict[str, list[tuple[int, int, list[float]]]]:
        """Score open guesses against ``committed``: per guess that this decided anything of,
        (tag, first depth decided now, outcomes from there) — 1 per guessed token kept, then 0
        at the first miss, as a step of that drafter reports them. Depths are reported as soon
        as they are decided, not when the guess is: a long guess on a copy comes true over as
        many steps as it has tokens, and holding its score back until then would let only the
        misses speak early. A step run by the guessing drafter drops the guess offered just
        before it: it proposed the same tokens, and its own outcome is counted already."""
        mine = self._open.get(ran)
        if mine:
            mine.pop()
        done: dict[str, list[tuple[int, int, list[float]]]] = {}
        for name, guesses in self._open.items():
            if guesses and committed and name != ran:
                newest = guesses[-1][0]
                self.last_hit[name] = bool(newest) and newest[0] == committed[0]
            still: list[tuple[tuple[int, ...], int, int]] = []
            for guess, matched, tag in guesses:
                start, outcome, closed = matched, [], not guess
                for t in committed:
                    if closed:
                        break
                    hit = guess[matched] == t
                    outcome.append(1.0 if hit else 0.0)
                    matched += 1
                    closed = not hit or matched == len(guess)
                if not closed:
                    still.append((guess, matched, tag))
                if outcome:
                    done.setdefault(name, []).append((tag, start, outcome))
            guesses[:] = still
        return done
