"""The verification rule on synthetic distributions: committed tokens are distributed as p.

Every χ² test draws 20k+ outcomes with a fixed seed and compares them with p at a tail
probability of 1e-6, so a correct rule never fails and a wrong one (see the controls) always
does.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specchat.bench.chi2 import chi_square, critical_value
from specchat.engine.decode.sampling import Distribution
from specchat.engine.decode.verify import one_hot, probs_at, verify_greedy, verify_sampled

N = 20_000


def dist(probs: dict[int, float]) -> Distribution:
    items = sorted(((p, t) for t, p in probs.items() if p > 0), reverse=True)
    ps = np.array([p for p, _ in items], dtype=np.float64)
    return Distribution(np.array([t for _, t in items], dtype=np.int64), ps / ps.sum())


def as_dict(d: Distribution) -> dict[int, float]:
    return {int(t): float(p) for t, p in zip(d.ids, d.probs, strict=True)}


def first_token_counts(p: Distribution, q: Distribution, seed: int, n: int = N,
                       draft_from_q: bool = True) -> Counter[int]:
    """Draw d ~ q (or always q's top for a deterministic proposal), verify, count what commits."""
    rng = np.random.default_rng(seed)
    bonus = dist({99: 1.0})
    out: Counter[int] = Counter()
    for _ in range(n):
        d = q.sample(rng) if draft_from_q else q.top
        v = verify_sampled([p, bonus], [q], [d], rng)
        out[d if v.accepted == 1 else v.token] += 1
    return out


CASES = {
    "q equals p": ({0: 0.5, 1: 0.3, 2: 0.2}, {0: 0.5, 1: 0.3, 2: 0.2}),
    "disjoint supports": ({0: 0.6, 1: 0.4}, {2: 0.7, 3: 0.3}),
    "q has mass where p has none": ({0: 0.2, 1: 0.5, 2: 0.3}, {1: 0.1, 2: 0.2, 3: 0.4, 4: 0.3}),
    "p has mass where q has none": ({0: 0.4, 1: 0.3, 5: 0.3}, {0: 0.9, 1: 0.1}),
    "peaked p, flat q": ({0: 0.97, 1: 0.02, 2: 0.01}, {0: 0.25, 1: 0.25, 2: 0.25, 3: 0.25}),
    "p one point": ({3: 1.0}, {1: 0.5, 3: 0.5}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_first_token_is_distributed_as_p(name: str) -> None:
    pp, qq = CASES[name]
    p, q = dist(pp), dist(qq)
    result = chi_square(first_token_counts(p, q, seed=7), as_dict(p))
    assert result.ok, f"{name}: {result}"


def test_one_hot_q_is_the_ngram_rule() -> None:
    """A fixed proposal d: keep it with p(d), else sample p without d — still exactly p."""
    p = dist({0: 0.1, 1: 0.6, 2: 0.3})
    for d in (0, 1, 2, 7):
        counts = first_token_counts(p, one_hot(d), seed=11 + d, draft_from_q=False)
        result = chi_square(counts, as_dict(p))
        assert result.ok, f"proposal {d}: {result}"


def test_one_hot_rejection_never_repeats_the_proposal() -> None:
    p = dist({0: 0.5, 1: 0.5})
    rng = np.random.default_rng(0)
    for _ in range(2000):
        v = verify_sampled([p, p], [one_hot(1)], [1], rng)
        if v.rejected is not None:
            assert v.token == 0
            assert v.rejected.p == pytest.approx(0.5) and v.rejected.q == 1.0


def test_three_positions_joint_distribution() -> None:
    """γ = 2 with position-independent rows: the first two committed tokens are p1 × p2."""
    p1, p2, p3 = dist({0: 0.5, 1: 0.3, 2: 0.2}), dist({0: 0.1, 1: 0.2, 2: 0.7}), dist({0: 1.0})
    q1, q2 = dist({0: 0.2, 1: 0.2, 2: 0.6}), dist({1: 0.5, 2: 0.5})
    rng = np.random.default_rng(3)
    pairs: Counter[tuple[int, int]] = Counter()
    for _ in range(N):
        # The second committed token comes from a new step when the first was a rejection.
        drafts = [q1.sample(rng), q2.sample(rng)]
        v = verify_sampled([p1, p2, p3], [q1, q2], drafts, rng)
        committed = [*drafts[: v.accepted], v.token]
        if len(committed) < 2:
            d = q2.sample(rng)
            v2 = verify_sampled([p2, p3], [q2], [d], rng)
            committed += [d] if v2.accepted else [v2.token]
        pairs[(committed[0], committed[1])] += 1
    expected = {(a, b): pa * pb for a, pa in as_dict(p1).items() for b, pb in as_dict(p2).items()}
    result = chi_square(pairs, expected)
    assert result.ok, str(result)


def test_control_accepting_every_draft_is_caught() -> None:
    """The χ² test has power: committing q's draws unchecked is flagged."""
    p, q = dist({0: 0.5, 1: 0.3, 2: 0.2}), dist({0: 0.4, 1: 0.35, 2: 0.25})
    rng = np.random.default_rng(5)
    counts = Counter(q.sample(rng) for _ in range(N))
    assert not chi_square(counts, as_dict(p)).ok


def test_control_exact_match_residual_is_caught() -> None:
    """Sampling the correction from p instead of the residual p − q biases the output."""
    p, q = dist({0: 0.5, 1: 0.3, 2: 0.2}), dist({0: 0.8, 1: 0.1, 2: 0.1})
    rng = np.random.default_rng(6)
    counts: Counter[int] = Counter()
    for _ in range(N):
        d = q.sample(rng)
        keep = rng.random() * q.prob(d) < p.prob(d)
        counts[d if keep else p.sample(rng)] += 1
    assert not chi_square(counts, as_dict(p)).ok


def test_statistics_overlap_and_match() -> None:
    p, q = dist({0: 0.5, 1: 0.5}), dist({0: 0.25, 1: 0.25, 2: 0.5})
    v = verify_sampled([p, p], [q], [2], np.random.default_rng(0))
    assert v.accepted == 0 and v.rejected is not None and v.rejected.p == 0.0
    assert v.overlap == pytest.approx((0.5,))  # Σ min(p, q)
    assert v.match == pytest.approx((0.25,))  # Σ p·q


def test_probs_at_handles_absent_ids() -> None:
    q = dist({4: 0.5, 9: 0.3, 2: 0.2})
    got = probs_at(q, np.array([9, 3, 2, 100, 4], dtype=np.int64))
    np.testing.assert_allclose(got, [0.3, 0.0, 0.2, 0.0, 0.5])
    np.testing.assert_allclose(probs_at(one_hot(3), np.array([1, 3])), [0.0, 1.0])


def test_no_nan_when_p_equals_q_exactly() -> None:
    p = dist({0: 0.5, 1: 0.5})
    rng = np.random.default_rng(1)
    for _ in range(500):
        v = verify_sampled([p, p], [p], [int(p.sample(rng))], rng)
        assert v.accepted == 1 and v.token in (0, 1)


def test_greedy_rule() -> None:
    argmax = np.array([5, 7, 9, 11])
    v = verify_greedy(argmax, [5, 7, 9])
    assert (v.accepted, v.token, v.rejected) == (3, 11, None)  # all kept + the bonus
    v = verify_greedy(argmax, [5, 8, 9])
    assert (v.accepted, v.token) == (1, 7)
    assert v.rejected is not None and (v.rejected.index, v.rejected.token) == (1, 8)
    assert (v.rejected.p, v.rejected.q) == (0.0, 1.0)
    v = verify_greedy(argmax[:1], [])
    assert (v.accepted, v.token) == (0, 5)  # γ = 0: a plain step


def test_critical_values_are_close_to_tables() -> None:
    assert critical_value(3, 1e-3) == pytest.approx(16.266, rel=1e-4)
    assert critical_value(10, 1e-3) == pytest.approx(29.588, rel=1e-4)
    assert critical_value(1, 1e-3) == pytest.approx(10.828, rel=1e-4)


@st.composite
def distributions(draw: st.DrawFn, vocab: int = 6) -> Distribution:
    """Random sparse distributions over a small vocabulary, zeros and near-zeros included."""
    weights = draw(st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1.0)),
                            min_size=vocab, max_size=vocab))
    if sum(weights) == 0:
        weights[draw(st.integers(0, vocab - 1))] = 1.0
    return dist(dict(enumerate(weights)))


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(p=distributions(), q=distributions())
def test_any_p_q_first_token_is_p(p: Distribution, q: Distribution) -> None:
    result = chi_square(first_token_counts(p, q, seed=13), as_dict(p))
    assert result.ok, f"p={as_dict(p)} q={as_dict(q)}: {result}"
