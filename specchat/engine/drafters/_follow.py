"""Walking a passage a lookup drafter follows (the n-gram drafter's copied passage, the
prediction): the tokens its ``next`` says, one after another.

A state is (the passage's index of its next token, the tokens of an edit still to be written
before it); ``next`` gives the token the state says and the state after it, or None where the
passage ends.
"""

from __future__ import annotations

from collections.abc import Callable

State = tuple[int, tuple[int, ...]]
Next = Callable[[State], "tuple[int, State] | None"]


def walk(next_: Next, state: State | None, k: int,
         stop: Callable[[int], bool] | None = None) -> list[int]:
    """Up to ``k`` tokens from ``state`` on; after a token ``stop`` says ends the reply, none."""
    out: list[int] = []
    while state is not None and len(out) < k:
        nxt = next_(state)
        if nxt is None:
            break
        out.append(nxt[0])
        state = nxt[1]
        if stop is not None and stop(nxt[0]):
            break
    return out
