"""Medusa-1 heads on the target's last hidden state ("medusa", Cai et al. 2024).

Head k (k = 1 … K) is a residual SiLU block on the target's post-norm final hidden state h
followed by the target's own output matrix: ``logits_k = W_out · (h + SiLU(A_k h + b_k))``
(:mod:`specchat.engine.llama.hidden_output` says why no final norm is applied again). Trained by
``specchat models train-heads TARGET --kind medusa`` (:mod:`specchat.models.heads`) to predict
the target's token k + 1 positions after h's.

Which h: the verify batch's row whose distribution gave the last committed token (the last
accepted node's row, or the root's). That row is at the position of ``seq[-2]``; ``seq[-1]`` is
the target's own token from it, so head k proposes depth k of the tree — the token k positions
after ``seq[-1]``. The decoder runs its verify pass with hidden states on when a drafter says
``reads_hidden`` and the drafter reads that row in ``commit``; on a reply's first step (or after
any decode in between) it evaluates ``seq[-2]`` once more to get h.

A step's tree follows the plan's shape down to depth K: a node's children at depth j are head
j's top candidates under greedy decoding, else draws without replacement from head j's
distribution after the sampler transform (the q each is verified against). The heads' softmax
covers a subset of the vocabulary (the tokens the target produced on the training text), so q is
zero elsewhere: still exact, since q is what the tokens were drawn from, and the one tree
verifier (:func:`specchat.engine.decode.verify.verify_tree`) decides.

Whoever loads models provides a loader for the target's heads for ``LOADER`` (a
zero-argument callable returning :class:`MedusaHeads`; the runtime's comes from
:mod:`specchat.models.drafter_sources.medusa`). Without one, ``build`` says how to train them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from specchat.engine.decode import arms
from specchat.engine.decode.drafting import (
    DrafterBase,
    DraftFailed,
    DraftRequest,
    Proposal,
    fit_shape,
)
from specchat.engine.decode.plan import Plan, depths, plain
from specchat.engine.decode.registry import DrafterEnv, Need
from specchat.engine.decode.sampling import Distribution, distribution
from specchat.engine.decode.verify import Verdict, children_of, one_hot
from specchat.engine.drafters._draft_model import draw_children
from specchat.engine.drafters.tree import best_shape
from specchat.engine.llama.blas import blas_threads
from specchat.engine.llama.context import LlamaContext
from specchat.errors import SpecchatError

NAME = "medusa"
ARM = arms.own_step()  # measured by its steps; the figures saved with the planner's state
LOADER: Need[Callable[[], MedusaHeads]] = Need(NAME)  # the target's heads, on first use

# P(a head's k-th best candidate is the target's token | its parent was): a prior for the
# default shape (deeper heads are worse, which the per-depth decay below says).
RANK_ACCEPT = (0.55, 0.15, 0.07, 0.04)
# Nodes of the tree the planner runs when it picks the heads: small, since on a CPU each node
# costs a target row; the planner keeps the heads only while their steps beat plain.
OWN_NODES = 6


def _silu(u: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    out: npt.NDArray[np.float32] = (u / (1.0 + np.exp(-u))).astype(np.float32)
    return out


@dataclass(frozen=True)
class MedusaHeads:
    """K trained heads: ``a`` (K, d, d) and ``b`` (K, d) such that head k's input to the output
    matrix is ``h + SiLU(h @ a[k] + b[k])``; ``out`` (V, d) the output matrix's rows for the
    token ids ``vocab`` (V,)."""

    a: npt.NDArray[np.float32]
    b: npt.NDArray[np.float32]
    vocab: npt.NDArray[np.int64]
    out: npt.NDArray[np.float32]
    target_sha256: str = ""

    @property
    def k(self) -> int:
        return int(self.a.shape[0])

    @property
    def n_embd(self) -> int:
        return int(self.a.shape[1])

    def features(self, h: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """(K, d): each head's residual block on h (d,) or (n, d) → (K, n, d)."""
        u = np.einsum("...i,kij->k...j", h, self.a) + (
            self.b if h.ndim == 1 else self.b[:, None, :])
        out: npt.NDArray[np.float32] = (h + _silu(u)).astype(np.float32)
        return out

    def logits(self, h: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """(K, V) logits over ``vocab`` of each head for one hidden state (d,)."""
        out: npt.NDArray[np.float32] = self.features(h) @ self.out.T
        return out


def default_shape(n: int, k: int) -> tuple[int, ...]:
    """The n-node tree (or fewer) of depth ≤ k with the most expected accepted tokens under
    the prior (see tree.best_shape)."""
    return fit_shape(best_shape(4 * n, RANK_ACCEPT), n, k, 1 << 30)


class MedusaDrafter(DrafterBase):
    name = NAME
    reads_hidden = True  # the decoder's verify pass keeps hidden states (see the docstring)
    plans_own_step = True
    # Auto-γ sizes chains only: drafting alone, the heads' own tree instead (the planner
    # scores it).
    fixed_gamma = (OWN_NODES, "medusa tree")

    def __init__(self, target: LlamaContext, load: Callable[[], MedusaHeads]) -> None:
        self.target = target
        self._load = load
        self._heads: MedusaHeads | None = None
        self._h: npt.NDArray[np.float32] | None = None
        self._h_len = -1  # len(seq) that self._h serves

    @property
    def heads(self) -> MedusaHeads:
        if self._heads is None:
            heads = self._load()
            d = self.target.n_embd
            if heads.n_embd != d:
                raise DraftFailed(f"the Medusa heads are {heads.n_embd} wide, the target's "
                                  f"hidden state {d}", NAME)
            self._heads = heads
        return self._heads

    def default_plan(self, gamma: int) -> Plan:
        if gamma <= 0:
            return plain()
        shape = default_shape(gamma, self.heads.k)
        return Plan(self.name, shape, f"medusa tree {len(shape)} · depth {max(depths(shape))}")

    def own_plan(self) -> Plan:
        """The step the planner runs when it picks the heads: their best tree of OWN_NODES."""
        return self.default_plan(OWN_NODES)

    def reset(self, prompt: Sequence[int]) -> None:
        self._h, self._h_len = None, -1

    def settle(self, seq: Sequence[int]) -> None:
        self._h, self._h_len = None, -1

    def _hidden(self, seq: Sequence[int]) -> npt.NDArray[np.float32] | None:
        """h at the position of seq[-2] (see the module docstring)."""
        if self._h is not None and self._h_len == len(seq):
            return self._h
        if len(seq) < 2:
            return None
        tgt = self.target
        # The cache holds seq[:-1] between steps: evaluate its last token again, with states.
        tgt.truncate(len(seq) - 2)
        _, hidden = tgt.decode_with_hidden([seq[-2]])
        self._h, self._h_len = hidden[0].copy(), len(seq)
        return self._h

    def propose(self, req: DraftRequest) -> Proposal:
        heads = self.heads
        h = self._hidden(req.seq)
        if h is None:
            return Proposal(self.name)
        with blas_threads(1):
            logits = heads.logits(h)
        if not np.isfinite(logits).all():
            raise DraftFailed("the Medusa heads produced NaN or infinite logits", NAME)
        s, rng = req.settings, req.rng
        shape = fit_shape(req.plan.parents, len(req.plan.parents), heads.k, 1 << 30)
        kids = children_of(shape)
        q_of: dict[int, Distribution] = {}  # per depth: the head's distribution (sampled)
        top_of: dict[int, list[int]] = {}  # per depth: the head's ranking (greedy)
        tokens: list[int] = []
        parents: list[int] = []
        qs: list[Distribution] = []
        depth = depths(shape)

        def grow(plan_parent: int, new_parent: int, d: int) -> None:
            want = kids.get(plan_parent, [])
            if not want:
                return
            row = logits[d - 1]
            if s.greedy:
                if d not in top_of:
                    n = min(max(len(c) for c in kids.values()), row.size)
                    top = np.argpartition(-row, n - 1)[:n]
                    top_of[d] = sorted(top.tolist(), key=lambda t: (-row[t], int(heads.vocab[t])))
                got = [(int(heads.vocab[t]), one_hot(int(heads.vocab[t])))
                       for t in top_of[d][: len(want)]]
            else:
                if d not in q_of:
                    sub = distribution(row, s)
                    q_of[d] = Distribution(heads.vocab[sub.ids], sub.probs)
                got = draw_children(q_of[d], len(want), rng)
            for plan_node, (t, q) in zip(want, got, strict=False):
                me = len(tokens)
                tokens.append(t)
                parents.append(new_parent)
                qs.append(q)
                grow(plan_node, me, depth[plan_node] + 1)

        grow(-1, -1, 1)
        # Numbered depth first: parents come before their children and siblings keep their
        # rank order, which is all a proposal's shape needs.
        return Proposal(self.name, tuple(tokens), tuple(parents), tuple(qs))

    def commit(self, seq: Sequence[int], proposal: Proposal, verdict: Verdict) -> None:
        hidden = self.target.last_hidden()
        row = verdict.path[-1] + 1 if verdict.path else 0
        if hidden is None or row >= hidden.shape[0]:
            self._h, self._h_len = None, -1
            return
        self._h, self._h_len = hidden[row].copy(), len(seq)


def build(env: DrafterEnv) -> MedusaDrafter:
    load = env.get(LOADER)
    if load is None:
        t = env.target_label()
        raise SpecchatError(f"{t} has no Medusa heads yet: train them with "
                            f"`specchat models train-heads {t} --kind medusa` (a few minutes)")
    return MedusaDrafter(env.target, load)
