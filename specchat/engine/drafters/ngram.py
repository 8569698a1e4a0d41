"""Prompt-lookup drafting: propose what followed the last time the conversation said this.

The drafter indexes every n-gram (n_min ≤ n ≤ n_max) of the conversation's token sequence with
the position right after its most recent occurrence. To draft, it looks up the sequence's last
n tokens, longest n first, and proposes the tokens that followed that earlier occurrence. It
shines when the reply quotes the prompt (summaries, code edits, extraction) and costs a few
dictionary look-ups per step. The index grows incrementally as tokens are committed, so a step
costs O(new tokens), not O(conversation).

While the reply copies a passage, the drafter follows it token by token. Where the reply departs
from it (a renamed variable, an inserted word), it waits for the reply's last few tokens to occur
again just after the point of departure, re-joins the passage there, and learns what the reply
wrote in place of the passage's tokens as an edit, made in every later proposal from that
passage: a variable renamed to a longer name is proposed renamed from its second use on, and the
copy goes on after it.

It also learns one-token edits from the sequence itself: where the reply wrote ``y`` where a
match of two tokens or more said ``x``, and then went on as the matched text did, later
proposals say ``y`` for ``x`` (a copy with "every 'river' becomes 'canal'" misses at its first
changed word only), and a tail holding ``y`` is matched as if it held ``x``. An edit is
forgotten when the reply keeps ``x`` where a match said it. All of it follows from the tokens,
so an index built token by token equals one built at once.

It also remembers earlier requests (:mod:`._ngram_memory`): each reply, as it ends, is kept
with its conversation (its next turn replaces it), and where the last 16 tokens repeat one of
them, it proposes what followed there, before any match of the request's own: a regenerated
reply, or an agent sending its context again, is drafted from what was written the last time;
a reply that departs from the remembered text re-joins it where four tokens repeat near where
it left.
Not for a request with a seed (:meth:`._ngram_memory.Recall.allow`).

A proposal is a chain whose tokens are point masses (q one-hot), cut after an
end-of-generation token of the target's (nothing after it could be kept).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from specchat.engine.decode import arms
from specchat.engine.decode.drafting import DrafterBase, DraftRequest, Proposal
from specchat.engine.decode.plan import NGRAM
from specchat.engine.decode.registry import DrafterEnv, Need
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.verify import Verdict, one_hot
from specchat.engine.drafters._follow import State, walk
from specchat.engine.drafters._ngram_memory import NgramMemory, Recall

NAME = NGRAM
# The planner keeps its acceptance by how long its guesses have been right in a row (a copy is
# right for long runs, prose for a word or two); a look-up costs about 0.2 ms a token.
ARM = arms.banded_lookup(prior_alpha=0.4, cost_prior=2e-4)
# Tokens after a changed one that must repeat the matched text before the change counts as an
# edit: one is often chance (" the", a newline), as "floods the water" and "to the port" are.
CONFIRM = 2
# A copy that departed from its source re-joins it where the reply's last REJOIN_MIN tokens or
# more occur again, within MAX_EDIT tokens after the point it departed; what it wrote in between
# is learnt as an edit of up to MAX_EDIT tokens (a variable renamed to a name of two tokens).
REJOIN_MIN = 2
REJOIN_MAX = 4
MAX_EDIT = 8
# Earlier requests' sequences, kept by the runtime for all its decoders (DrafterEnv.kept).
MEMORY: Need[NgramMemory] = Need("ngram memory")


class _Source(NamedTuple):
    """Where the text the sequence's tail repeats goes on (see NgramDrafter._source)."""

    at: int  # the index of the token that follows
    exact: bool  # an exact match of two tokens or more (or the copy's place) says so
    edit_read: bool  # read past a one-token edit: kept for the copy's place, never proposed


def _never(token: int) -> bool:
    return False


class NgramDrafter(DrafterBase):
    name = NAME
    free_guesses = True  # a guess is a dictionary look-up

    def __init__(self, n_max: int = 3, n_min: int = 1,
                 is_eog: Callable[[int], bool] = _never,
                 memory: NgramMemory | None = None) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError("need 1 ≤ n_min ≤ n_max")
        self.n_max = n_max
        self.n_min = n_min
        self.is_eog = is_eog
        # Earlier requests' sequences (None: this request's own only).
        self.recall = Recall(memory) if memory is not None else None
        self.tokens: list[int] = []
        # n → {n-gram: index of the token after its most recent occurrence}
        self._index: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(n_min, n_max + 1)}
        # The same for the occurrence before the most recent (a one-token edit looks up the
        # tokens just before the sequence's last, whose most recent occurrence is its own).
        self._before: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self._index}
        self._edits: dict[int, int] = {}  # x → y: the reply writes y where the text it copies has x
        self._unedit: dict[int, int] = {}  # y → x
        # (x, y, index of x, tokens after x seen since) when a token differed from an exact
        # match's: an edit once the next CONFIRM tokens are the ones after x.
        self._pending: tuple[int, int, int, int] | None = None
        # Where the text the sequence has been repeating goes on: of several earlier
        # occurrences of the tail, a copy goes on from the one it was copying, not the latest
        # (", and the" in a passage that says it twice).
        self._cursor: int | None = None
        # The passage the reply is copying: the index of its next token, and the tokens of an
        # edit being written before it (None: not following one).
        self._follow: State | None = None
        # (passage index, sequence index) where the copy departed, until it re-joins.
        self._lost: tuple[int, int] | None = None
        # Edits of several tokens the reply made to the passages it copies: their tokens → the
        # reply's (see _rejoin).
        self._spans: dict[tuple[int, ...], tuple[int, ...]] = {}

    @property
    def memory(self) -> NgramMemory | None:
        """The earlier requests this drafter drafts from (None: its request's own only)."""
        return self.recall.memory if self.recall is not None else None

    def reset(self, tokens: Sequence[int]) -> None:
        """Index ``tokens`` as the conversation so far (keeps the index if they extend it)."""
        n = len(self.tokens)
        if len(tokens) >= n and list(tokens[:n]) == self.tokens:
            self.extend(tokens[n:])
            return
        if self.recall is not None:
            self.recall.let_go(self.tokens)
        self.tokens = []
        for tables in (self._index, self._before):
            for table in tables.values():
                table.clear()
        self._edits.clear()
        self._unedit.clear()
        self._pending = None
        self._cursor = None
        self._follow = None
        self._lost = None
        self._spans.clear()
        self.extend(tokens)

    def extend(self, new: Sequence[int]) -> None:
        """Append committed tokens to the sequence and index the n-grams they complete."""
        toks = self.tokens
        for t in new:
            t = int(t)
            self._learn_edit(t)
            self._step_follow(t)
            # The n-grams ending just before t now have a continuation (t): index them.
            j = len(toks)
            for n, table in self._index.items():
                if j >= n:
                    key = tuple(toks[j - n : j])
                    was = table.get(key)
                    if was is not None:
                        self._before[n][key] = was
                    table[key] = j
            toks.append(t)
            if self._follow is None:
                self._follow = self._rejoin()

    def settle(self, seq: Sequence[int]) -> None:
        if self.recall is not None:
            self.recall.ended(seq)

    def configure(self, settings: SamplerSettings) -> None:
        if self.recall is not None:
            self.recall.allow(settings.seed)

    def propose(self, req: DraftRequest) -> Proposal:
        drafts = self._chain(req.plan.depth)
        return Proposal(self.name, tuple(drafts), tuple(range(-1, len(drafts) - 1)),
                        tuple(one_hot(t) for t in drafts))

    def commit(self, seq: Sequence[int], proposal: Proposal, verdict: Verdict) -> None:
        """Index what the step committed: O(new tokens). Within a reply ``seq`` extends what the
        index holds (the decoder only appends; rejected drafts were never indexed), so the
        last indexed token is checked, not the whole sequence; anything else re-indexes."""
        n = len(self.tokens)
        if len(seq) >= n and (n == 0 or seq[n - 1] == self.tokens[-1]):
            self.extend(seq[n:])
        else:
            self.reset(seq)

    def can_propose(self, seq: Sequence[int]) -> bool:
        """A match for the sequence's tail (the index follows ``seq`` after each commit)."""
        if len(seq) != len(self.tokens):
            self.reset(seq)
        return bool(self.lookup(1))

    def guess(self, seq: Sequence[int], k: int) -> list[int]:
        """The chain of up to ``k`` tokens a step would propose now: it costs a look-up, so the
        planner scores it on steps that did not run this drafter
        (:mod:`specchat.engine.policy.guesses`)."""
        if len(seq) != len(self.tokens):
            self.reset(seq)
        return self._chain(k)

    def _chain(self, k: int) -> list[int]:
        drafts = self.lookup(k)
        cut = next((i + 1 for i, t in enumerate(drafts) if self.is_eog(t)), len(drafts))
        return drafts[:cut]

    def lookup(self, k: int) -> list[int]:
        """Up to ``k`` tokens continuing the sequence, or [] when its tail was never seen before
        (with the edits learnt so far made in them)."""
        if k <= 0:
            return []
        if self.recall is not None and (said := self.recall.said(self.tokens, k)):
            return said  # an earlier request's text: no edits in it
        if self._follow is not None:
            return walk(self._next, self._follow, k)
        found = self._source()
        if found is None or found.edit_read:
            # Not after a one-token edit read: a guess that the copy skipped one word is rarely
            # right (docs/performance.md), a failed check on a CPU costs most of a plain step,
            # and a copy that did change one word re-joins its passage two tokens later (see
            # _rejoin).
            return []
        j = found.at
        edits = self._edits
        return [edits.get(t, t) for t in self.tokens[j : j + k]]

    def _source(self) -> _Source | None:
        """Where the text the sequence's tail repeats goes on (None: nowhere).

        Longest match first (a tail holding an edit's new token is also tried as it was
        before the edit); before a one-token match, a match (of two tokens or more) of the
        tokens before the last one, read as an edit of one token: a reply that copies a passage
        with a word changed ("every 'river' becomes 'canal'") goes on from after the replaced
        word, where a match of the new word alone points elsewhere (at the instruction that
        named it). That read keeps the copy's place while an edit is confirmed; it is not
        proposed (see lookup)."""
        toks = self.tokens
        end = len(toks)
        c, m = self._cursor, self.n_max
        if c is not None and m <= c < end and all(
                self._unedit.get(a, a) == self._unedit.get(b, b)
                for a, b in zip(toks[c - m : c], toks[end - m : end], strict=True)):
            return _Source(c, True, False)
        for n in range(self.n_max, max(self.n_min, 2) - 1, -1):
            if end < n:
                continue
            key = tuple(toks[end - n : end])
            j = self._index[n].get(key)
            if j is None and self._unedit:
                j = self._index[n].get(tuple(self._unedit.get(t, t) for t in key))
            if j is not None:
                return _Source(j, True, False)
        last = end - 1
        for c in range(min(self.n_max, last), max(self.n_min, 2) - 1, -1):  # an edit after c
            # The index points these c tokens at the last token; the time before, at what the
            # last token replaced.
            j = self._before[c].get(tuple(toks[last - c : last]))
            if j is not None:
                return _Source(j + 1, False, True)
        if self.n_min == 1:
            j = self._at(toks, 1, end)
            if j is not None:
                return _Source(j, False, False)
        return None

    def _next(self, state: State) -> tuple[int, State] | None:
        """The token the followed passage says next (its edits made), and the state after it
        (None: the passage ends at the sequence's end)."""
        i, pending = state
        if pending:
            return pending[0], (i, pending[1:])
        toks = self.tokens
        if i >= len(toks):
            return None
        for src, dst in self._spans.items():
            if toks[i] == src[0] and tuple(toks[i : i + len(src)]) == src:
                return dst[0], (i + len(src), dst[1:])
        return self._edits.get(toks[i], toks[i]), (i + 1, ())

    def _step_follow(self, t: int) -> None:
        """Before ``t`` joins the sequence: the followed passage goes on with it, or the copy
        departed from it here. A reply that keeps a passage's token where an edit changed it
        forgets the edit."""
        state = self._follow
        if state is None:
            return
        nxt = self._next(state)
        if nxt is not None and nxt[0] == t:
            self._follow = nxt[1]
            return
        i, pending = state
        toks = self.tokens
        if not pending and i < len(toks) and toks[i] == t:  # the passage as it was: no edit
            for src in [s for s in self._spans if tuple(toks[i : i + len(s)]) == s]:
                del self._spans[src]
            self._forget_edit(t)
            self._follow = (i + 1, ())
            return
        self._follow = None
        lost = self._lost
        if lost is None or len(toks) - lost[1] > MAX_EDIT + REJOIN_MAX:
            # (A passage followed while the reply was still away from the one it left — the
            # instruction that names the new word — does not replace the point it left.)
            self._lost = (i, len(toks))

    def _rejoin(self) -> State | None:
        """The passage to follow after the last token: where a copy that departed re-joins its
        passage (learning the edit it made), else where an exact match says the text goes on."""
        toks = self.tokens
        end = len(toks)
        if self._lost is not None:
            lost_i, lost_at = self._lost
            if end - lost_at > MAX_EDIT + REJOIN_MAX:
                self._lost = None  # too far from the passage: not an edit of it
            else:
                for n in range(min(REJOIN_MAX, end - lost_at), REJOIN_MIN - 1, -1):
                    key = toks[end - n : end]
                    # the nearest occurrence just after the departure, inside the passage
                    last = min(lost_i + MAX_EDIT + n, lost_at)
                    for j in range(lost_i + 1, last + 1):
                        if j >= n and toks[j - n : j] == key:
                            src = tuple(toks[lost_i : j - n])
                            dst = tuple(toks[lost_at : end - n])
                            if 0 < len(src) <= MAX_EDIT and len(dst) <= MAX_EDIT and dst:
                                self._spans[src] = dst
                            self._lost = None
                            return j, ()
        found = self._source()
        return (found.at, ()) if found is not None and found.exact else None

    def _learn_edit(self, t: int) -> None:
        """Before ``t`` joins the sequence: confirm or start an edit, or forget one."""
        toks = self.tokens
        pending, self._pending = self._pending, None
        if pending is not None:
            x, y, at, seen = pending
            if t != toks[at + 1 + seen]:
                pass  # not a copy going on: no edit
            elif seen + 1 < CONFIRM:
                self._pending = (x, y, at, seen + 1)
            elif self._edits.get(x) != y:
                self._forget_edit(x)
                self._edits[x] = y
                self._unedit[y] = x
        found = self._source()
        j = found.at if found is not None else -1
        self._cursor = j + 1 if j >= 0 and self._edits.get(toks[j], toks[j]) == t else None
        if found is None or not found.exact:
            return
        x = toks[j]
        if t == x:  # kept as the copied text has it: an edit of x no longer holds
            self._forget_edit(x)
        elif self._pending is None and t != self._edits.get(x) and j + CONFIRM < len(toks):
            self._pending = (x, t, j, 0)

    def _forget_edit(self, x: int) -> None:
        y = self._edits.pop(x, -1)
        if self._unedit.get(y) == x:
            del self._unedit[y]

    def _at(self, toks: Sequence[int], n: int, end: int) -> int | None:
        """Where the token after the most recent earlier ``toks[end − n : end]`` is."""
        if end < n:
            return None
        return self._index[n].get(tuple(toks[end - n : end]))


def build(env: DrafterEnv) -> NgramDrafter:
    # Matches of two tokens or more, with or without a draft model: a one-token match is
    # rarely right, a loss on any curve where a second row costs more than a tenth of a step,
    # for few more tokens kept where it is free (figures: docs/performance.md).
    n_min = env.ngram_n_min or 2
    return NgramDrafter(n_min=n_min, is_eog=env.target.model.is_eog,
                        memory=env.kept(MEMORY, NgramMemory))
