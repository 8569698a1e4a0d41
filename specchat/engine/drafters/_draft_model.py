"""The draft model's side of drafting, shared by the chain ("model") and tree ("tree") drafters.

The draft's KV cache is brought up to the committed sequence lazily, when a step first asks
the draft model (common prefix + a decode of what is missing), so a reply that never uses it
pays no draft prefill. A chain is drafted token by token; a tree level by level, one batch per
depth, each node carrying the sequence ids of the plan's paths through it (see
``LlamaContext.decode_tree``), so each node's logits see exactly its ancestors.

Children of a node are the draft's candidates there: its top k under greedy decoding, else k
draws *without replacement* from its distribution q (the i-th from q with the earlier ones
removed and renormalised), each stored with the distribution it was drawn from — what the
verification rule (:mod:`specchat.engine.decode.verify`) needs to be exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from specchat.engine.decode.drafting import DraftFailed, DraftRequest, Proposal, fit_shape, path_to
from specchat.engine.decode.grammar import masked
from specchat.engine.decode.plan import depths
from specchat.engine.decode.sampling import Distribution, distribution, greedy_token
from specchat.engine.decode.verify import Verdict, children_of, one_hot
from specchat.engine.drafters._pick import TokenPicker
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.prefix import common_prefix


def without(q: Distribution, token: int) -> Distribution | None:
    """q with ``token`` removed and renormalised (None when nothing is left)."""
    keep = q.ids != token
    rest = q.probs[keep]
    total = float(rest.sum())
    if total <= 0:
        return None
    return Distribution(q.ids[keep], rest / total)


def top_children(row: npt.NDArray[np.float32], k: int) -> list[tuple[int, Distribution]]:
    """Greedy decoding: a node's k children are the draft's k best tokens (ties by id) of its
    logits ``row`` (n_vocab,)."""
    first = greedy_token(row)  # checks the row (NaN logits are the draft's failure)
    if k == 1:
        best = [first]
    else:
        top = np.argpartition(-row, k - 1)[:k]
        # Not a token a grammar's mask forbids (−∞): the target would never keep it.
        best = [int(t) for t in sorted(top.tolist(), key=lambda t: (-row[t], t))
                if row[t] > -np.inf]
    return [(t, one_hot(t)) for t in best]


def draw_children(q: Distribution, k: int, rng: np.random.Generator
                  ) -> list[tuple[int, Distribution]]:
    """Sampled decoding: k draws from q without replacement, each with the distribution it was
    drawn from (q with the earlier draws removed); fewer when q runs out."""
    out: list[tuple[int, Distribution]] = []
    rest: Distribution | None = q
    while rest is not None and len(out) < k:
        t = rest.sample(rng)
        out.append((t, rest))
        rest = without(rest, t)
    return out


class DraftModel:
    def __init__(self, target: LlamaContext, ctx: LlamaContext, stepwise: bool = False) -> None:
        self.ctx = ctx
        # The draft may only propose ids the target knows (vocabularies may differ by padding).
        self.n_shared = min(target.n_vocab, ctx.n_vocab)
        # Catch the draft up one token at a time instead of in one batch: slower, but its cache
        # then does not depend on how steps fell (on a CPU a quantized model's logits differ
        # slightly between batch shapes), so a replay of the run can be exact.
        self.stepwise = stepwise
        self._known = 0  # leading tokens of the draft's cache known to match the sequence
        self._readable = 0  # leading tokens of the sequence checked to be in the draft's vocab
        self._picker = TokenPicker()
        self._tree: tuple[tuple[int, ...], dict[int, int]] | None = None  # shape, node → plan node
        # The last _row's catch-up: tokens read beyond the last one, and its seconds.
        self.read: tuple[int, float] = (0, 0.0)

    def reset(self, prompt: Sequence[int]) -> None:
        self.ctx.reuse_prefix(prompt)  # what it holds, or (a slot) what another slot holds
        self._known = 0
        self._readable = 0
        self._tree = None

    def settle(self, seq: Sequence[int]) -> None:
        self.ctx.drop_tree()
        self.ctx.truncate(self.ctx.common_prefix(seq))
        self._tree = None

    # ------------------------------------------------------------------ the committed part

    def _row(self, seq: Sequence[int]) -> npt.NDArray[np.float32]:
        """Bring the draft's cache to ``seq``; its logits for the next token (shared ids)."""
        dft = self.ctx
        bad = next((t for t in seq[self._readable:] if t >= dft.n_vocab), None)
        if bad is not None:
            raise DraftFailed(f"it cannot read token {bad}, which only the target knows")
        self._readable = len(seq)
        if len(seq) > dft.n_ctx:
            raise DraftFailed(f"its context window is full ({dft.n_ctx} tokens)")
        dft.drop_tree()
        cached = dft.tokens
        i = common_prefix(cached, seq, min(self._known, len(cached), len(seq)))
        if i == len(seq):
            i -= 1  # the last token must be evaluated again for its logits
        dft.truncate(i)
        behind = len(seq) - 1 - i
        t0 = self.ctx.clock()
        if self.stepwise and i < len(seq) - 1:
            if self._known:  # within a reply: as steps fell, one token at a time
                for t in seq[i:-1]:
                    dft.decode((t,), logits="none")
            else:  # the prompt (the first use in a reply): in one batch, then its last token
                dft.decode(seq[i:-1], logits="none")
            i = len(seq) - 1
        row = dft.decode(seq[i:], logits="last")[0]
        # A one-token read is a draft step's own (its cost is t_draft's): only a catch-up counts.
        self.read = (behind, self.ctx.clock() - t0) if behind > 0 else (0, 0.0)
        self._known = len(seq)
        return row[: self.n_shared]

    # ------------------------------------------------------------------------ drafting

    def chain(self, req: DraftRequest, gamma: int, name: str) -> Proposal:
        dft = self.ctx
        gamma = min(gamma, dft.n_ctx - len(req.seq) + 1)  # the cache holds all but the last
        if gamma <= 0:
            return Proposal(name)
        s = req.settings
        row = self._row(req.seq)
        tokens: list[int] = []
        qs: list[Distribution] = []
        eog = dft.model.is_eog
        while True:
            # Under a grammar, q is the masked row's: the draw and the q reported agree.
            d, q, top = self._picker.pick(masked(row, req.grammar, tokens), s, req.rng)
            tokens.append(d)
            qs.append(q)
            # The policy is asked even at γ (its answer then moot), to see every confidence.
            if (eog(d) or not req.keep_drafting(len(tokens), top) or len(tokens) >= gamma):
                return Proposal(name, tuple(tokens), tuple(range(-1, len(tokens) - 1)),
                                tuple(qs), read_tokens=self.read[0], read_s=self.read[1])
            row = dft.decode((d,), logits="last")[0][: self.n_shared]

    def tree(self, req: DraftRequest, shape: Sequence[int], name: str) -> Proposal:
        dft = self.ctx
        shape = fit_shape(shape, dft.n_batch, dft.n_ctx - len(req.seq) + 1, dft.n_seq_max)
        if not shape:
            return Proposal(name)
        kids = children_of(shape)
        s, rng = req.settings, req.rng
        eog = dft.model.is_eog
        tokens: list[int] = []
        parents: list[int] = []
        qs: list[Distribution] = []
        plan_of: list[int] = []  # proposal node → plan node
        node_of: dict[int, int] = {}  # plan node → proposal node

        def grow(plan_parent: int, row: npt.NDArray[np.float32]) -> None:
            want = kids.get(plan_parent, [])
            if req.grammar is not None:  # masked along the path to this node
                above = path_to(parents, node_of[plan_parent]) if plan_parent >= 0 else []
                row = req.grammar.mask(row, [tokens[n] for n in above])
            got = (top_children(row, len(want)) if s.greedy
                   else draw_children(distribution(row, s), len(want), rng))
            for plan_node, (t, q) in zip(want, got, strict=False):
                node_of[plan_node] = len(tokens)
                plan_of.append(plan_node)
                parents.append(node_of[plan_parent] if plan_parent >= 0 else -1)
                tokens.append(t)
                qs.append(q)

        self.read = (0, 0.0)
        grow(-1, self._row(req.seq))
        level = list(range(len(tokens)))
        while level:
            inner = [i for i in level if plan_of[i] in kids and not eog(tokens[i])]
            if not inner:
                break
            rows = dft.decode_tree(shape, [plan_of[i] for i in inner],
                                   [tokens[i] for i in inner])
            first = len(tokens)
            for j, i in enumerate(inner):
                grow(plan_of[i], rows[j][: self.n_shared])
            level = list(range(first, len(tokens)))
        self._tree = (tuple(shape), {i: p for i, p in enumerate(plan_of)})
        return Proposal(name, tuple(tokens), tuple(parents), tuple(qs),
                        read_tokens=self.read[0], read_s=self.read[1])

    def commit(self, proposal: Proposal, verdict: Verdict) -> None:
        """Keep in the draft's cache the accepted path's nodes it evaluated; drop the rest."""
        if self._tree is None or not proposal.tokens:
            return
        shape, plan_of = self._tree
        self._tree = None
        # A node was evaluated when the draft grew children under it.
        has_child = set(proposal.parents)
        evaluated = [n for n in verdict.path if n in has_child]
        if not evaluated:
            self.ctx.drop_tree()
            return
        last = evaluated[-1]
        self.ctx.keep_branch(shape, plan_of[last],
                             [proposal.tokens[n] for n in path_to(proposal.parents, last)])




__all__ = ["DraftModel", "depths", "draw_children", "top_children", "without"]
