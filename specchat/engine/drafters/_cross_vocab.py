"""A draft model with another vocabulary, lossless (TLI: Timor et al., ICML 2025, 2502.05202).

The two vocabularies are matched by what a token *is*: its bytes (a control token by its text).
The draft proposes only tokens both have: its distribution q restricted to the shared tokens and
renormalised, mapped to the target's ids. Any q is allowed by the verification rule as long as
it is the distribution the token was drawn from, so the target's own distribution is kept
exactly; sharing fewer tokens only lowers acceptance.

The draft reads the committed text in its own tokenisation: the target's committed tokens are
turned back into bytes (control tokens as their text, so a chat template's markers stay
markers), retokenised by the draft's tokenizer, and the draft's cache is brought to that with
prefix reuse. A trailing incomplete UTF-8 character waits for the next step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from specchat.engine.decode.drafting import DraftFailed, DraftRequest, Proposal, fit_shape
from specchat.engine.decode.sampling import Distribution, distribution, greedy_token
from specchat.engine.decode.verify import Verdict, children_of, one_hot
from specchat.engine.drafters._draft_model import DraftModel
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.prefix import common_prefix
from specchat.engine.llama.vocab import is_special, piece, tokenize_bytes

Key = tuple[bool, bytes]  # (special, bytes)


def token_keys(model: LlamaModel) -> list[Key | None]:
    """What each id of a loaded model's vocabulary is (None: an empty or unusable token)."""
    out: list[Key | None] = []
    for t in range(model.n_vocab):
        special = is_special(model, t)
        b = piece(model, t, special)
        out.append((special, b) if b else None)
    return out


@dataclass(frozen=True)
class VocabMap:
    """Ids of the same tokens in both vocabularies (−1: the other has no such token)."""

    t2d: npt.NDArray[np.int64]  # target id → draft id
    d2t: npt.NDArray[np.int64]  # draft id → target id
    shared_draft: npt.NDArray[np.int64]  # draft ids that have a target id

    @property
    def n_shared(self) -> int:
        return len(self.shared_draft)

    @classmethod
    def from_keys(cls, target: Sequence[Key | None], draft: Sequence[Key | None]) -> VocabMap:
        first: dict[Key, int] = {}
        for i, k in enumerate(draft):
            if k is not None and k not in first:
                first[k] = i  # a token spelled twice: its first id drafts
        t2d = np.full(len(target), -1, dtype=np.int64)
        d2t = np.full(len(draft), -1, dtype=np.int64)
        for t, k in enumerate(target):
            d = first.get(k) if k is not None else None
            if d is not None and d2t[d] < 0:
                t2d[t], d2t[d] = d, t
        return cls(t2d, d2t, np.flatnonzero(d2t >= 0).astype(np.int64))

    @classmethod
    def of(cls, target: LlamaModel, draft: LlamaModel) -> VocabMap:
        return cls.from_keys(token_keys(target), token_keys(draft))

    def same(self) -> bool:
        """Every id means the same token in both (the ordinary same-vocabulary case)."""
        n = min(len(self.t2d), len(self.d2t))
        return bool(np.array_equal(self.t2d[:n], np.arange(n)))

    def restrict(self, q: Distribution) -> Distribution | None:
        """q (over draft ids) on the shared tokens, renormalised, as target ids."""
        t = self.d2t[q.ids]
        keep = t >= 0
        total = float(q.probs[keep].sum())
        if total <= 0:
            return None
        return Distribution(t[keep], q.probs[keep] / total)


_MAPS: dict[tuple[str, str], VocabMap | None] = {}  # by file pair: None = the same vocabulary


def cross_map(target: LlamaModel, draft: LlamaModel) -> VocabMap | None:
    """The map between two loaded models' vocabularies, or None when they are the same (ids
    agree up to the shorter one's end: padding). Computed once per pair of files."""
    key = (str(target.path), str(draft.path))
    if key not in _MAPS:
        n = min(target.n_vocab, draft.n_vocab)
        same = all(target.token_bytes(i) == draft.token_bytes(i) for i in range(n))
        _MAPS[key] = None if same else VocabMap.of(target, draft)
    return _MAPS[key]


def valid_utf8_prefix(data: bytes | bytearray) -> int:
    """Length of ``data`` without a trailing incomplete UTF-8 character."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        b = data[n - back]
        if b < 0x80:
            return n  # ASCII: complete
        if b >= 0xC0:  # a lead byte: is its character complete?
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return n if back >= need else n - back
    return n


class CrossVocabDraft(DraftModel):
    """The draft side of TLI drafting, with the interface of ``_draft_model.DraftModel``.

    ``target_piece`` and ``tokenize`` default to the loaded models' (target token → bytes,
    control tokens as text; draft tokenizer over bytes, markers parsed as control tokens);
    tests pass their own for scripted contexts.
    """

    def __init__(self, target: LlamaContext, ctx: LlamaContext, vmap: VocabMap | None = None,
                 *, target_piece: Callable[[int], bytes] | None = None,
                 tokenize: Callable[[bytes], list[int]] | None = None,
                 bos: int | None = None) -> None:
        super().__init__(target, ctx)
        self.target = target
        self.vmap = vmap if vmap is not None else VocabMap.of(target.model, ctx.model)
        self.n_shared = self.vmap.n_shared
        tm, dm = target.model, ctx.model
        if target_piece is None:
            specials = {t for t in range(tm.n_vocab)
                        if is_special(tm, t)}
            cache: dict[int, bytes] = {}

            def target_piece(t: int) -> bytes:
                b = cache.get(t)
                if b is None:
                    b = cache[t] = piece(tm, t, t in specials)
                return b
        self._target_piece = target_piece
        self._tokenize = tokenize or (lambda data: tokenize_bytes(dm, data))
        if bos is None and dm.add_bos and dm.bos >= 0:
            bos = dm.bos
        self._bos = bos
        self._tseq: list[int] = []  # target tokens whose bytes are in _text
        self._ends: list[int] = []  # _text length after each of them
        self._text = bytearray()

    # ------------------------------------------------------------------ the committed part

    def reset(self, prompt: Sequence[int]) -> None:
        return None

    def settle(self, seq: Sequence[int]) -> None:
        d = self._draft_seq(seq)
        self.ctx.truncate(self.ctx.common_prefix(d))

    def _draft_seq(self, seq: Sequence[int]) -> list[int]:
        """The draft's tokenisation of the committed text."""
        i = common_prefix(seq, self._tseq)
        del self._tseq[i:], self._ends[i:]
        del self._text[self._ends[-1] if self._ends else 0:]
        for t in seq[i:]:
            self._text += self._target_piece(int(t))
            self._tseq.append(int(t))
            self._ends.append(len(self._text))
        data = bytes(self._text[: valid_utf8_prefix(self._text)])
        out = [self._bos] if self._bos is not None else []
        out += self._tokenize(data) if data else []
        return out

    def _row(self, seq: Sequence[int]) -> npt.NDArray[np.float32]:
        dft = self.ctx
        dseq = self._draft_seq(seq)
        if not dseq:
            raise DraftFailed("the draft model has nothing to read yet")
        if len(dseq) + 1 > dft.n_ctx:
            raise DraftFailed(f"the draft model's context window is full ({dft.n_ctx} "
                              "tokens): it drafts no more in this reply")
        i = dft.common_prefix(dseq)
        if i == len(dseq):
            i -= 1  # the last token must be evaluated again for its logits
        dft.truncate(i)
        return dft.decode(dseq[i:], logits="last")[0]

    def greedy_next(self, seq: Sequence[int]) -> tuple[int, float]:
        """The draft's greedy next token after the committed ``seq`` (a target id, among the
        shared tokens) and its top-1 probability there: what a greedy γ = 1 step proposes."""
        vm = self.vmap
        row = self._row(seq)
        d = int(vm.shared_draft[greedy_token(row[vm.shared_draft])])  # checks NaN
        return int(vm.d2t[d]), _softmax_top(row, vm.shared_draft)()

    # ------------------------------------------------------------------------ drafting

    def chain(self, req: DraftRequest, gamma: int, name: str) -> Proposal:
        dft, vm = self.ctx, self.vmap
        s = req.settings
        row = self._row(req.seq)
        gamma = min(gamma, dft.n_ctx - len(dft.tokens))
        tokens: list[int] = []
        qs: list[Distribution] = []
        eog = self.target.model.is_eog
        while len(tokens) < gamma:
            if s.greedy:
                d = int(vm.shared_draft[greedy_token(row[vm.shared_draft])])  # checks NaN
                t = int(vm.d2t[d])
                q = one_hot(t)
                top = _softmax_top(row, vm.shared_draft)
            else:
                restricted = vm.restrict(distribution(row, s))
                if restricted is None:  # the draft's plausible tokens are all unshared
                    break
                q = restricted
                t = q.sample(req.rng)
                d = int(vm.t2d[t])
                top = _const(float(q.probs[0]))
            tokens.append(t)
            qs.append(q)
            if eog(t) or not req.keep_drafting(len(tokens), top) or len(tokens) >= gamma:
                break
            row = dft.decode((d,), logits="last")[0]
        return Proposal(name, tuple(tokens), tuple(range(-1, len(tokens) - 1)), tuple(qs))

    def tree(self, req: DraftRequest, shape: Sequence[int], name: str) -> Proposal:
        """A tree plan gets its first-child path as a chain (a sub-tree of the plan)."""
        shape = fit_shape(shape, self.ctx.n_batch, self.ctx.n_ctx, 1)
        kids = children_of(shape)
        depth, node = 0, -1
        while kids.get(node):
            node = kids[node][0]
            depth += 1
        return self.chain(req, depth, name)

    def commit(self, proposal: Proposal, verdict: Verdict) -> None:
        return None  # the next step re-syncs the cache to the committed text


def in_draft_vocab(target: LlamaModel, draft: LlamaModel, tokens: Sequence[int]) -> list[int]:
    """``tokens`` of the target as the draft reads them: the same ids when the vocabularies
    agree, else the draft's own tokenisation of their text (for timing the draft on the same
    text; a drafting step re-syncs through :class:`CrossVocabDraft`)."""
    if cross_map(target, draft) is None:
        return list(tokens)
    return tokenize_bytes(draft, b"".join(target.piece(int(t)) for t in tokens))


def _softmax_top(row: npt.NDArray[np.float32], ids: npt.NDArray[np.int64]
                 ) -> Callable[[], float]:
    def top() -> float:
        r = row[ids]
        z = np.exp(r - r.max(), dtype=np.float64)
        return float(1.0 / z.sum())
    return top


def _const(x: float) -> Callable[[], float]:
    return lambda: x
