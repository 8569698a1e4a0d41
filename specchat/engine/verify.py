"""The verification rule of speculative decoding: which draft tokens the target keeps.

Sampled (Leviathan et al. 2023, Chen et al. 2023): draft token d_i, drawn from the drafter's
distribution q_i, is kept with probability min(1, p_i(d_i) / q_i(d_i)). At the first rejection
the target's token is drawn from the residual norm(max(0, p_i − q_i)) and the rest of the draft
is discarded; if every draft token is kept, a bonus token is drawn from p_{γ+1}. Each committed
token is then distributed exactly as if it had been sampled from p directly.

The residual is positive only where p_i > q_i, so it lives on p's support: tokens that only q
proposes never come out of it. p and q are the distributions *after* the sampler transform, so
the guarantee is "the same distribution as plain sampling with these settings".

An n-gram proposal is the same rule with q one-hot on d: keep d with probability p(d); on
rejection, max(0, p − onehot(d)) is p with d removed, renormalised.

Greedy: keep d_i while it equals the target's argmax; the target's argmax follows.

Pure numpy, float64 throughout; no llama.cpp calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from specchat.engine.sampling import Distribution

# Below this residual mass p and q are equal up to rounding; a rejection then had probability
# ~0 and any fallback is exact to that order, so sample from p itself.
RESIDUAL_EPS = 1e-12


class Rows(Protocol):
    """Target distributions by draft position (a list, or rows computed on first access)."""

    def __getitem__(self, i: int, /) -> Distribution: ...


@dataclass(frozen=True)
class Rejection:
    index: int  # 0-based index of the rejected token in the draft
    token: int
    p: float  # target probability of the rejected token
    q: float  # drafter probability of the rejected token


@dataclass(frozen=True)
class Verdict:
    accepted: int  # leading draft tokens kept
    token: int  # the target's own token after them: corrected (at a rejection) or bonus
    rejected: Rejection | None
    # Per verified position (the kept ones and the rejected one), when p and q are at hand:
    overlap: tuple[float, ...] = ()  # Σ min(p, q): the probability this rule keeps the token
    match: tuple[float, ...] = ()  # Σ p·q: the same for "keep it if the target's sample equals it"


def one_hot(token: int) -> Distribution:
    """The drafter distribution of a deterministic proposal (n-gram lookup)."""
    return Distribution(np.array([token], dtype=np.int64), np.array([1.0]))


def probs_at(d: Distribution, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """d's probability of each id in ``ids`` (0 where d has none)."""
    if d.ids.size == 1:
        return np.where(ids == d.ids[0], d.probs[0], 0.0)
    order = np.argsort(d.ids)
    at = order[np.minimum(np.searchsorted(d.ids, ids, sorter=order), order.size - 1)]
    return np.where(d.ids[at] == ids, d.probs[at], 0.0)


def _sample(ids: npt.NDArray[np.int64], weights: npt.NDArray[np.float64],
            rng: np.random.Generator) -> int:
    cum = np.cumsum(weights)
    i = int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))
    return int(ids[min(i, ids.size - 1)])


def verify_sampled(p: Rows, q: Sequence[Distribution], drafts: Sequence[int],
                   rng: np.random.Generator) -> Verdict:
    """Modified rejection sampling over one draft.

    ``p`` has len(drafts) + 1 target distributions (row i follows draft token i − 1; the last
    gives the bonus); it is indexed lazily, in order, so the caller may compute rows on demand.
    ``q[i]`` is the distribution ``drafts[i]`` was drawn from (``one_hot`` for n-gram drafts).
    """
    overlap: list[float] = []
    match: list[float] = []
    for i, d in enumerate(drafts):
        pi, qi = p[i], q[i]
        q_on_p = probs_at(qi, pi.ids)
        both = np.minimum(pi.probs, q_on_p)
        overlap.append(float(both.sum()))
        match.append(float(pi.probs @ q_on_p))
        pd, qd = pi.prob(d), qi.prob(d)
        if rng.random() * qd < pd:  # probability min(1, pd / qd); never when pd = 0
            continue
        residual = pi.probs - both  # = max(0, p − q), on p's support
        # p == q up to rounding: a rejection had probability ~0; p itself is then exact.
        exact = residual.sum() > RESIDUAL_EPS
        token = _sample(pi.ids, residual, rng) if exact else pi.sample(rng)
        return Verdict(i, token, Rejection(i, int(d), pd, qd), tuple(overlap), tuple(match))
    bonus = p[len(drafts)].sample(rng)
    return Verdict(len(drafts), bonus, None, tuple(overlap), tuple(match))


def verify_greedy(target_argmax: Sequence[int] | npt.NDArray[np.int64],
                  drafts: Sequence[int]) -> Verdict:
    """Keep draft tokens while they equal the target's argmax (``np.argmax(rows, axis=1)``).

    Under greedy decoding p and q are point masses, so a rejected token has p = 0 and q = 1.
    """
    for i, d in enumerate(drafts):
        best = int(target_argmax[i])
        if d != best:
            return Verdict(i, best, Rejection(i, int(d), 0.0, 1.0))
    return Verdict(len(drafts), int(target_argmax[len(drafts)]), None)
