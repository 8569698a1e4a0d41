"""Kangaroo: the target's first blocks plus a trained adapter as its draft ("kangaroo"; Liu et
al. 2024, "Kangaroo: Lossless Self-Speculative Decoding via Double Early Exiting").

The shallow model is a GGUF holding the target's first L blocks (a layer-skip cut,
:mod:`specchat.models.layer_cut`), so it shares the target's embeddings, final norm and output
matrix W. Its post-norm hidden state h at a position is far from the target's last one; a small
adapter trained on this machine (:mod:`specchat.models.heads.kangaroo`) maps it closer:

    x = h + B · SiLU(A · h + a)        (A: r × d, B: d × r, a low-rank residual block)

and the draft's logits are ``W · x = W · h + (W · B) · SiLU(A · h + a)``. ``W · h`` is exactly
what the shallow model's own head computes, so a draft token costs the shallow model plus
``V × r`` multiply-adds for the precomputed ``W · B`` (kept in the adapter file).

It drafts autoregressively on the shallow model and stops early, as Kangaroo does, at the first
token whose top-1 probability under the adapter's distribution is below ``eta`` (that token is
not proposed): a draft the target will likely reject is not worth its verification row, which
on a CPU costs real time. The chain goes to the one verifier (:mod:`specchat.engine.decode.verify`),
so the output is exact whatever the adapter predicts: under sampling each token is drawn from
q (the adapter's logits after the target's sampler transform) and q is what the rule reads.

Whoever loads models provides a loader for ``LOADER`` (``env.provide``): a zero-argument callable
returning ``(shallow context, adapter)``, called on the first step that asks (the runtime's comes
from :mod:`specchat.models.drafter_sources.kangaroo`). Without one, ``build`` says how to train
an adapter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import numpy.typing as npt

from specchat.engine.decode import arms
from specchat.engine.decode.drafting import DrafterBase, DraftFailed, DraftRequest, Proposal
from specchat.engine.decode.registry import DrafterEnv, Need
from specchat.engine.decode.sampling import Distribution, distribution, greedy_token
from specchat.engine.decode.verify import Verdict, one_hot
from specchat.engine.llama.context import LlamaContext
from specchat.errors import SpecchatError

NAME = "kangaroo"
ARM = arms.chain()  # a chain priced by its own steps (Kangaroo's shallow pass and adapter), after a probe
# Loads the shallow model's context and the adapter when the drafter first drafts.
LOADER: Need[Callable[[], tuple[LlamaContext, KangarooAdapter]]] = Need(NAME)
ETA = 0.6  # the early-stop threshold on the draft's top-1 probability (Kangaroo's η)

F32 = np.float32
# (shallow context, tokens) → logits rows and hidden states of those tokens (one row each).
DecodeHidden = Callable[[LlamaContext, Sequence[int]],
                        tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]]


@dataclass(frozen=True)
class KangarooAdapter:
    """The trained adapter, as the drafter uses it (see the module docstring)."""

    a: npt.NDArray[np.float32]  # (r, d)
    bias: npt.NDArray[np.float32]  # (r,)
    wb: npt.NDArray[np.float32]  # (V, r): the output matrix times B
    n_layers: int  # the target blocks the shallow model keeps (0 … n_layers − 1)
    sha256: str = ""  # the target file it was trained for
    eta: float = ETA

    @property
    def rank(self) -> int:
        return int(self.a.shape[0])

    def logits(self, base: npt.NDArray[np.float32], h: npt.NDArray[np.float32]
               ) -> npt.NDArray[np.float32]:
        """The draft's logits (n_vocab,) from the shallow model's (``base`` = W · h, (n_vocab,))
        and its hidden state ``h`` (n_embd,)."""
        u = self.a @ h + self.bias
        s = u / (1.0 + np.exp(-u))
        out = base[: self.wb.shape[0]].astype(F32, copy=True)
        out += self.wb @ s.astype(F32)
        return out


def _const(x: float) -> Callable[[], float]:
    return lambda: x


def _top_prob(row: npt.NDArray[np.float32]) -> float:
    """The top-1 probability of the softmax of logits ``row`` (n_vocab,)."""
    z = row - row.max()
    return float(1.0 / np.exp(z, dtype=np.float64).sum())


def _once(f: Callable[[], float]) -> Callable[[], float]:
    """``f``, computed on the first call only (a greedy token's confidence: a softmax over the
    vocabulary, paid only when the early stop or the policy reads it)."""
    got: list[float] = []

    def once() -> float:
        if not got:
            got.append(f())
        return got[0]
    return once


class KangarooDrafter(DrafterBase):
    name = NAME

    def __init__(self, target: LlamaContext,
                 load: Callable[[], tuple[LlamaContext, KangarooAdapter]],
                 decode: DecodeHidden = LlamaContext.decode_with_hidden) -> None:
        self.target = target
        self._load = load
        self._decode = decode
        self._loaded: tuple[LlamaContext, KangarooAdapter] | None = None

    @property
    def parts(self) -> tuple[LlamaContext, KangarooAdapter]:
        if self._loaded is None:
            self._loaded = self._load()
        return self._loaded

    def lag(self, seq: Sequence[int]) -> int:
        """Tokens of ``seq`` the shallow model's cache lacks: what its first step reads first."""
        ctx = self._loaded[0] if self._loaded is not None else None
        return len(seq) - (ctx.common_prefix(seq) if ctx is not None else 0)

    def _first(self, ctx: LlamaContext, seq: Sequence[int]
               ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """The shallow cache brought to ``seq`` (common prefix kept); the logits and hidden
        state after its last token."""
        if len(seq) > ctx.n_ctx:
            raise DraftFailed(f"its context window is full ({ctx.n_ctx} tokens)", NAME)
        ctx.drop_tree()
        i = min(ctx.common_prefix(seq), len(seq) - 1)  # the last one again, for its rows
        ctx.truncate(i)
        if i < len(seq) - 1:
            ctx.decode(seq[i:-1], logits="none")
        rows, hidden = self._decode(ctx, seq[-1:])
        return rows[-1], hidden[-1]

    def propose(self, req: DraftRequest) -> Proposal:
        ctx, adapter = self.parts
        ctx.cancel = self.target.cancel
        seq, s = req.seq, req.settings
        gamma = min(req.plan.depth, ctx.n_ctx - len(seq) + 1)
        if gamma <= 0:
            return Proposal(self.name)
        base, h = self._first(ctx, seq)
        tokens: list[int] = []
        qs: list[Distribution] = []
        eog = self.target.model.is_eog
        while True:
            row = adapter.logits(base, h)
            if s.greedy:
                d = greedy_token(row)
                q = one_hot(d)
                conf = _once(partial(_top_prob, row))  # row stays valid until the next decode
            else:
                q = distribution(row, s)
                d = q.sample(req.rng)
                conf = _const(float(q.probs.max()))
            # Kangaroo's early stop: this token is not worth a verification row. The
            # probability is never below 0: an eta of 0 reads no confidence.
            if adapter.eta > 0 and conf() < adapter.eta:
                break
            tokens.append(d)
            qs.append(q)
            if eog(d) or not req.keep_drafting(len(tokens), conf) or len(tokens) >= gamma:
                break
            rows, hidden = self._decode(ctx, (d,))
            base, h = rows[-1], hidden[-1]
        return Proposal(self.name, tuple(tokens), tuple(range(-1, len(tokens) - 1)), tuple(qs))

    def commit(self, seq: Sequence[int], proposal: Proposal, verdict: Verdict) -> None:
        return None  # the next step keeps the shallow cache's common prefix with the sequence

    def settle(self, seq: Sequence[int]) -> None:
        if self._loaded is not None:
            ctx = self._loaded[0]
            ctx.drop_tree()
            ctx.truncate(ctx.common_prefix(seq))


def build(env: DrafterEnv) -> KangarooDrafter:
    load = env.get(LOADER)
    if load is None:
        raise SpecchatError(_why_not(env))
    return KangarooDrafter(env.target, load)


def _why_not(env: DrafterEnv) -> str:
    path = env.target.model.path
    return (f"{path.name} has no Kangaroo adapter yet: train one with "
            f"`specchat models train-heads {path} --kind kangaroo`")
