"""Sampler settings and the transform from a logits row to a (sparse) distribution.

The order follows llama.cpp's default chain: top-k, top-p and min-p filter the T = 1
distribution, then temperature reshapes what is left. One more filter comes first: tokens whose
probability is below ``FLOOR`` × the top token's (after temperature) are dropped. It keeps the
per-token work to the few plausible candidates instead of a full-vocabulary sort (262k entries
for Gemma), and it is part of the transform's definition, applied identically to plain and
speculative decoding, so "exactly the target's distribution" means exactly this transform.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from specchat.engine.decode.events import TokenLogprob
from specchat.errors import BadLogitsError

FLOOR = 1e-10
_LOG_FLOOR = -math.log(FLOOR)
_TOP_K_WINDOW = 10.0  # logits; see distribution()
MAX_TOP_LOGPROBS = 20  # alternatives per token, as OpenAI's top_logprobs allows
# What a log-probability of −∞ is written as (JSON has no infinity): OpenAI's own stand-in.
LOGPROB_FLOOR = -9999.0


@dataclass(frozen=True)
class SamplerSettings:
    temperature: float = 0.7  # 0 = greedy
    top_k: int = 40  # 0 = off
    top_p: float = 0.95  # 1 = off
    min_p: float = 0.05  # 0 = off
    seed: int | None = None
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    # The reply's expected text as target tokens (OpenAI's Predicted Outputs): the prediction
    # drafter proposes from it. The reply's distribution is the target's all the same.
    prediction: tuple[int, ...] = ()
    # Log-probabilities on each committed token (``token_logprobs``): None = none (no numpy
    # work at all); n = the chosen token's and the n likeliest at its position.
    logprobs: int | None = None
    # An llguidance grammar (``grammar.compile_grammar``: a JSON schema, Lark, GBNF): the
    # reply is drawn from the target's distribution masked to what it allows. None = free text.
    grammar: str | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def with_(self, **changes: object) -> SamplerSettings:
        return replace(self, **changes)  # type: ignore[arg-type]

    def validate(self) -> SamplerSettings:
        if self.temperature < 0 or not math.isfinite(self.temperature):
            raise ValueError("temperature must be ≥ 0")
        if self.top_k < 0:
            raise ValueError("top-k must be ≥ 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top-p must be in (0, 1]")
        if not 0 <= self.min_p < 1:
            raise ValueError("min-p must be in [0, 1)")
        if self.max_tokens < 1:
            raise ValueError("max tokens must be ≥ 1")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top log-probabilities must be 0 to {MAX_TOP_LOGPROBS}")
        return self


@dataclass(frozen=True)
class Distribution:
    """A distribution over a few token ids: ``ids`` (k,) and ``probs`` (k,), which sums to 1,
    sorted by falling probability."""

    ids: npt.NDArray[np.int64]
    probs: npt.NDArray[np.float64]

    def prob(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def sample(self, rng: np.random.Generator) -> int:
        if self.ids.size == 1:
            return int(self.ids[0])
        cum = np.cumsum(self.probs)
        i = int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))
        return int(self.ids[min(i, self.ids.size - 1)])

    @property
    def top(self) -> int:
        return int(self.ids[0])


def _bad_logits(top: float) -> BadLogitsError:
    what = "NaN" if math.isnan(top) else "infinite" if top > 0 else "only −∞"
    return BadLogitsError(f"the model produced {what} logits, so no token can be chosen (its "
                          "weights, or their quantization, are broken)")


def check_top(top: float) -> None:
    """Raise :class:`BadLogitsError` unless a row's largest logit is finite.

    One comparison per row: NaN propagates into the max (and argmax picks the first NaN), +∞ is
    the max, and a row that is −∞ everywhere has a −∞ max; −∞ alone (a banned token) is fine.
    """
    if not math.isfinite(top):
        raise _bad_logits(top)


def greedy_token(row: npt.NDArray[np.float32]) -> int:
    """The argmax of one logits row (n_vocab,), checked for NaN and +∞."""
    i = int(np.argmax(row))
    check_top(float(row[i]))
    return i


def greedy_tokens(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.int64]:
    """The argmax of each logits row of ``rows`` (n, n_vocab): (n,), checked as
    :func:`greedy_token` does."""
    if rows.shape[0] == 1:  # a plain step's one row: half the numpy calls
        return np.array([greedy_token(rows[0])])
    best = np.argmax(rows, axis=1)
    tops = rows[np.arange(best.size), best]
    if not np.isfinite(tops).all():
        check_top(float(tops[~np.isfinite(tops)][0]))
    return best


def distribution(row: npt.NDArray[np.float32], s: SamplerSettings) -> Distribution:
    """The sampling distribution for one logits row (n_vocab,) under settings ``s``
    (temperature > 0).

    Raises :class:`BadLogitsError` when the row holds NaN or +∞ (or nothing above −∞).
    """
    m = float(row.max())
    check_top(m)
    # The floor, on the tempered distribution: exp((l - m) / T) ≥ FLOOR.
    cut = m - _LOG_FLOOR * max(s.temperature, 1.0)
    ids = None
    if s.top_k > 0 and m - cut > _TOP_K_WINDOW:
        # Top-k keeps the k largest logits, so when a narrower window below the max already
        # holds k ids, they are all in it: the same result without gathering the thousands of
        # ids the floor lets through (faster per row on a large vocabulary).
        near = np.flatnonzero(row >= m - _TOP_K_WINDOW)
        if near.size >= s.top_k:
            ids = near
    if ids is None:
        ids = np.flatnonzero(row >= cut)
    logits = row[ids].astype(np.float64)
    if 0 < s.top_k < ids.size:
        keep = np.argpartition(-logits, s.top_k - 1)[: s.top_k]
        ids, logits = ids[keep], logits[keep]
    order = np.lexsort((ids, -logits))  # by logit, ties by id: deterministic
    ids, logits = ids[order], logits[order]
    if s.top_p < 1.0 or s.min_p > 0.0:
        p1 = np.exp(logits - logits[0])
        p1 /= p1.sum()
        n = ids.size
        if s.top_p < 1.0:
            n = min(n, int(np.searchsorted(np.cumsum(p1), s.top_p)) + 1)
        if s.min_p > 0.0:
            n = min(n, int(np.count_nonzero(p1 >= s.min_p * p1[0])))
        n = max(n, 1)
        ids, logits = ids[:n], logits[:n]
    z = np.exp((logits - logits[0]) / s.temperature)
    return Distribution(ids.astype(np.int64), z / z.sum())


def make_rng(seed: int | None) -> np.random.Generator:
    return np.random.default_rng(seed)


def _log(p: float) -> float:
    return math.log(p) if p > 0 else LOGPROB_FLOOR


def token_logprobs(row: npt.NDArray[np.float32], token: int, s: SamplerSettings,
                   dist: Distribution | None = None) -> TokenLogprob:
    """The target's log-probability of ``token`` at a position whose logits are ``row``, and
    the ``s.logprobs`` likeliest tokens there.

    Sampled (temperature > 0): of the distribution the token was drawn from — this module's
    transform (top-k, top-p, min-p, temperature, the floor), ``dist`` when the caller has it;
    a token it filtered out has none (:data:`LOGPROB_FLOOR`), and fewer than n alternatives
    may be listed. Greedy: that distribution is one point, so it is the log-softmax of the
    raw logits at temperature 1, over the whole vocabulary, as llama-server and OpenAI report.
    Plain and speculative decoding call this on the same row for the same token, so they
    report the same figures (up to the float rounding of a batched evaluation).
    """
    n = s.logprobs or 0
    if not s.greedy:
        d = dist if dist is not None else distribution(row, s)
        k = min(n, d.ids.size)
        top = tuple((int(i), _log(float(p))) for i, p in zip(d.ids[:k], d.probs[:k],
                                                            strict=True))
        return TokenLogprob(_log(d.prob(token)), top)
    m = float(row.max())
    check_top(m)
    lse = m + math.log(float(np.exp(row - m).sum(dtype=np.float64)))
    out: tuple[tuple[int, float], ...] = ()
    if n:
        k = min(n, row.size)
        # The k largest are within a window below the max when it holds k ids: a comparison
        # instead of a partition of the whole vocabulary (half the cost at 49k ids).
        ids = np.flatnonzero(row >= m - _TOP_K_WINDOW)
        if ids.size < k:
            ids = np.argpartition(-row, k - 1)[:k]
        elif ids.size > k:
            ids = ids[np.argpartition(-row[ids], k - 1)[:k]]
        ids = ids[np.lexsort((ids, -row[ids]))]  # by logit, ties by id, as distribution()
        out = tuple((int(i), max(float(row[i]) - lse, LOGPROB_FLOOR)) for i in ids)
    return TokenLogprob(max(float(row[token]) - lse, LOGPROB_FLOOR), out)
