"""Lookahead decoding ("lookahead", Fu et al. 2024, arXiv:2402.02057): no draft model — the
target guesses ahead by Jacobi iteration and keeps the n-grams its guesses make in a pool.

What runs per step, in ONE target decode (``LlamaContext.decode_tree`` with a side branch):

- the root (the last committed token) and the *candidate tree*: up to G n-grams of N − 1
  tokens from the pool whose key is the root token, merged into a trie (shared prefixes become
  one node; children rank most recent first). Each root-to-leaf path is a sequence of its own,
  as for any token tree. The candidates are point-mass drafts (q one-hot): the one tree
  verifier (``verify.verify_tree``; greedy: ``verify_tree_greedy``) decides what is kept, so
  the output is exactly the target's distribution (greedy: token-identical to plain greedy);
- the *lookahead branch*: the Jacobi window of W columns × (N − 1) levels
  (:class:`~specchat.engine.drafters._lookahead_pool.JacobiWindow`), one more sequence per column, laid
  out with sequence ids as in llama.cpp's examples/lookahead (level 0 of column c is seen by
  columns c…W − 1; level j of column c only by its column). The root belongs to every
  sequence, tree and window alike, so each row attends to the cached prefix, the root and its
  own sequence's earlier rows only.

The rule's rows are the tree's; the window's last-level rows (their argmax, also when
sampling: the guesses only feed the pool, so how they are made cannot bias the output) give one
new guess per column, the window moves one Jacobi step, and its columns' n-grams go into the
pool, with the committed text's own n-grams (prompt lookup). After the step the target's cache
holds only the committed path (``keep_branch`` drops the window's sequences with the losing
branches); nothing of the window is ever committed.

Sizes: W, N, G come from :class:`LookaheadSettings` (``SETTINGS`` when provided, else the
defaults below). They are fixed, not planned per step: on a CPU every extra row costs
(docs/performance.md), so the defaults keep the batch small — a
window of 2 × 2 adds 3 rows, 4 candidates of 2 tokens at most 8 more — and what is decided per
step is whether to run Lookahead at all: under γ ``plan`` the planner runs ``own_plan()`` (every
candidate at full depth) while its measured rate beats plain's
(:mod:`specchat.engine.policy.planner_arms`). ``--gamma K`` runs it every step with at most K
candidate tokens. A step whose batch would not fit the context, ``n_batch`` or the sequences
shrinks the window (to none if need be); the candidates were already fitted by the decoder.

Combined with other drafters (``--drafter lookahead,ngram``) a step whose pool has no candidate
is handed to the next drafter, so the window runs only on steps Lookahead proposes tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from specchat.engine.decode import arms
from specchat.engine.decode.drafting import DrafterBase, DraftRequest, Proposal
from specchat.engine.decode.plan import Plan, plain
from specchat.engine.decode.registry import DrafterEnv, Need
from specchat.engine.decode.verify import Verdict, one_hot
from specchat.engine.drafters._lookahead_pool import JacobiWindow, NgramPool, candidate_tree
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.side_branch import SideBranch
from specchat.errors import SpecchatError

NAME = "lookahead"
ARM = arms.own_step()  # measured by its steps; the figures saved with the planner's state
SETTINGS: Need[LookaheadSettings] = Need(NAME)


@dataclass(frozen=True)
class LookaheadSettings:
    window: int = 2  # W: Jacobi columns (0: the pool is fed by the committed text only)
    ngram: int = 3  # N: n-gram length, so N − 1 draft tokens per candidate and N − 1 levels
    candidates: int = 4  # G: n-grams checked per step, at most
    prompt_ngrams: bool = True  # the committed text's n-grams join the pool too

    def __post_init__(self) -> None:
        if self.window < 0 or self.candidates < 0:
            raise SpecchatError("lookahead: the window and the candidate count cannot be "
                                "negative")
        if self.ngram < 3 and (self.window > 0 or self.ngram < 2):
            raise SpecchatError("lookahead: the n-gram length N must be at least 3 (2 with no "
                                "window)")

    @property
    def label(self) -> str:
        return f"lookahead W{self.window} N{self.ngram} G{self.candidates}"


def _never(token: int) -> bool:
    return False


def n_leaves(parents: Sequence[int]) -> int:
    inner = {p for p in parents if p >= 0}
    return sum(1 for i in range(len(parents)) if i not in inner)


class LookaheadDrafter(DrafterBase):
    name = NAME
    plans_own_step = True

    def __init__(self, target: LlamaContext, settings: LookaheadSettings = LookaheadSettings(),
                 is_eog: Callable[[int], bool] = _never) -> None:
        self.target = target
        self.settings = settings
        self.is_eog = is_eog
        self.pool = NgramPool(max(settings.candidates, 1))
        self.window = JacobiWindow(settings.window, settings.ngram)
        self._indexed: list[int] = []  # the committed text whose n-grams the pool holds
        self._pending: tuple[int, list[int]] | None = None  # (root, new guesses) of this step
        self.window_rows = 0  # rows the window added to target batches (for reports)

    # ------------------------------------------------------------------ the protocol

    def default_plan(self, gamma: int) -> Plan:
        """Up to G chains of N − 1 tokens, no more than ``gamma`` nodes: the most the pool's
        candidates may take (a trie of them is a sub-tree of it)."""
        s = self.settings
        depth = s.ngram - 1
        parents: list[int] = []
        for _ in range(s.candidates):
            for d in range(depth):
                if len(parents) >= gamma:
                    break
                parents.append(-1 if d == 0 else len(parents) - 1)
        if gamma <= 0 or (not parents and s.window == 0):
            return plain()
        return Plan(self.name, tuple(parents), s.label)

    def own_plan(self) -> Plan:
        """The step the planner runs when it picks Lookahead: every candidate at full depth."""
        s = self.settings
        return self.default_plan(s.candidates * (s.ngram - 1))

    def reset(self, prompt: Sequence[int]) -> None:
        done = self._indexed
        common = 0
        for a, b in zip(done, prompt, strict=False):
            if a != b:
                break
            common += 1
        if common < len(prompt) // 2:
            self.pool.clear()  # another conversation: its n-grams would only mislead
            common = 0
        # The next turn, or the same prompt again (a regenerated reply): keep what was learnt.
        del done[common:]
        self._index(prompt)
        self.window.seed(prompt)
        self._pending = None

    def propose(self, req: DraftRequest) -> Proposal:
        seq, plan = req.seq, req.plan
        grams = self.pool.get(seq[-1])[: self.settings.candidates]
        tokens, parents = candidate_tree(grams, plan.size, plan.depth, n_leaves(plan.parents),
                                         self.is_eog)
        side = self._side(seq, len(tokens), max(1, n_leaves(parents)), int(seq[-1]))
        return Proposal(self.name, tokens, parents, tuple(one_hot(t) for t in tokens), side)

    def commit(self, seq: Sequence[int], proposal: Proposal, verdict: Verdict) -> None:
        pending, self._pending = self._pending, None
        if proposal.drafter == self.name and pending is not None:
            root, new = pending
            for gram in self.window.advance(root, new):
                self.pool.add(gram[0], gram[1:])
        self._index(seq)

    def settle(self, seq: Sequence[int]) -> None:
        self._pending = None

    # ------------------------------------------------------------------ the parts

    def _side(self, seq: Sequence[int], n_tree: int, n_paths: int, root: int
              ) -> SideBranch | None:
        """The window's rows for this step, as many columns as fit."""
        tgt, n = self.target, self.settings.ngram
        room = tgt.n_ctx - len(seq)  # cells left after the root
        w = min(self.settings.window, tgt.n_seq_max - n_paths)
        while w > 0:
            rows = JacobiWindow.n_rows(w, n)
            reach = w - 1 + n - 2
            if 1 + n_tree + rows <= tgt.n_batch and n_tree + rows <= room and reach <= room:
                break
            w -= 1
        if w <= 0:
            return None
        layout = self.window.rows(w)

        def receive(rows: npt.NDArray[np.float32]) -> None:
            self._pending = (root, np.argmax(rows, axis=1).tolist())

        self.window_rows += len(layout.tokens)
        return SideBranch(layout.tokens, layout.offsets, layout.seqs, w, layout.logits, receive)

    def _index(self, seq: Sequence[int]) -> None:
        """Put the n-grams that the newly committed tokens complete into the pool."""
        done = self._indexed
        if not self.settings.prompt_ngrams:
            done.extend(int(t) for t in seq[len(done):])
            return
        k = self.settings.ngram
        for t in seq[len(done):]:
            done.append(int(t))
            if len(done) >= k:
                self.pool.add(done[-k], done[-k + 1 :])


def build(env: DrafterEnv) -> LookaheadDrafter:
    settings = env.get(SETTINGS) or LookaheadSettings()
    return LookaheadDrafter(env.target, settings, env.target.model.is_eog)
