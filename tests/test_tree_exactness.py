"""Exactness of chain and tree verification, with power.

- A harness on synthetic Markov "models" (a target and a draft table of logits rows, the next
  row chosen by the last token) drives the real pieces — the tree drafter's draws without
  replacement (``draw_children``), the verification rule (``verify_tree``) and its residual
  (``next_residual``) — 10⁵ times per case: the first two committed tokens must follow the
  target's joint distribution. χ² at a tail probability of 1e-6 with an exact quantile, fixed
  seeds. Controls: a residual that is not updated after a rejected child, and accepting the
  draft unchecked, must fail the same test.
- An algebraic check: for hypothesis-generated p and q (after top-k / top-p / min-p /
  temperature) and any number of children, the exact probability of each committed token,
  summed over every way the children can be drawn, equals p to 1e-9.
- The whole decoder (plan → drafter → verify → commit) on scripted-logits contexts: the
  transition counts of long replies match the target's conditional distributions.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import cast

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specchat.bench.chi2 import chi_square, critical_value, survival
from specchat.devtools.scripted import ScriptedContext
from specchat.engine.decode import verify
from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.sampling import Distribution, SamplerSettings, distribution
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.decode.verify import children_of, node_output, verify_tree
from specchat.engine.drafters._draft_model import draw_children, without
from specchat.engine.drafters.tree import best_shape
from specchat.engine.llama.context import LlamaContext

N = 100_000
V = 5
T1 = SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
FILTERED = SamplerSettings(temperature=0.8, top_k=4, top_p=0.95, min_p=0.02)


def tables(seed: int, noise: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    target = (rng.normal(size=(V, V)) * 1.4).astype(np.float32)
    draft = (target + rng.normal(size=target.shape) * noise).astype(np.float32)
    return target, draft


class Markov:
    """Distributions "after token t" for a target and a draft, computed once."""

    def __init__(self, seed: int, s: SamplerSettings) -> None:
        t, d = tables(seed)
        self.p = [distribution(t[i], s) for i in range(V)]
        self.q = [distribution(d[i], s) for i in range(V)]

    def joint2(self, first: int) -> dict[object, float]:
        """P(the two tokens after ``first``) under plain sampling from the target."""
        return {(a, b): pa * pb for a, pa in zip(self.p[first].ids.tolist(),
                                                 self.p[first].probs.tolist(), strict=True)
                for b, pb in zip(self.p[a].ids.tolist(), self.p[a].probs.tolist(), strict=True)}


def tree_step(m: Markov, last: int, shape: tuple[int, ...], rng: np.random.Generator
              ) -> list[int]:
    """One speculative step as the decoder takes it: the draft fills ``shape`` level by level
    (children drawn without replacement), the rule keeps a path, the target adds its token."""
    kids = children_of(shape)
    tokens: list[int] = []
    parents: list[int] = []
    qs: list[Distribution] = []
    index: dict[int, int] = {}
    frontier = [(-1, last)]
    while frontier:
        nxt = []
        for plan_node, tok in frontier:
            want = kids.get(plan_node, [])
            for node, (t, q) in zip(want, draw_children(m.q[tok], len(want), rng), strict=False):
                index[node] = len(tokens)
                parents.append(index[plan_node] if plan_node >= 0 else -1)
                tokens.append(t)
                qs.append(q)
                nxt.append((node, t))
        frontier = nxt
    rows = [m.p[last], *(m.p[t] for t in tokens)]
    v = verify_tree(rows, tokens, parents, qs, rng)
    return [*(tokens[i] for i in v.path), v.token]


def first_two(m: Markov, shape: tuple[int, ...], n: int, seed: int, first: int = 0
              ) -> Counter[object]:
    rng = np.random.default_rng(seed)
    counts: Counter[object] = Counter()
    for _ in range(n):
        out = tree_step(m, first, shape, rng)
        if len(out) < 2:
            out += tree_step(m, out[0], shape, rng)
        counts[(out[0], out[1])] += 1
    return counts


SHAPES = {
    "chain 3": (-1, 0, 1),
    "3 children": (-1, -1, -1),
    "tree 6": (-1, -1, -1, 0, 0, 1),
    "best tree 8": best_shape(8),
}
# 10⁵ draws each: a few seconds per case on an idle core.
CASES = [("chain 3", T1), ("tree 6", T1), ("best tree 8", FILTERED)]


@pytest.mark.parametrize(("shape", "s"), CASES, ids=[f"{c}, {'T=1' if s is T1 else 'filtered'}"
                                                     for c, s in CASES])
def test_first_two_tokens_follow_the_target(shape: str, s: SamplerSettings) -> None:
    m = Markov(seed=4, s=s)
    result = chi_square(first_two(m, SHAPES[shape], N, seed=1), m.joint2(0))
    assert result.ok, f"{shape}: {result}"


def stale_residual(p: Distribution, q: Distribution) -> Distribution:
    """A wrong rule: the residual is not updated after a rejected child."""
    return p


def test_control_a_residual_not_updated_after_a_rejected_child_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "next_residual", stale_residual)
    m = Markov(seed=4, s=T1)
    result = chi_square(first_two(m, SHAPES["tree 6"], N, seed=1), m.joint2(0))
    assert not result.ok, f"the wrong residual passed: {result}"


def test_control_the_residual_of_the_first_child_only_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Another wrong rule: each child judged against p − q₁ (SpecInfer's i.i.d. rule applied to
    children drawn without replacement, whose q changes from child to child)."""
    real = verify.next_residual
    last: dict[str, Distribution | None] = {"residual": None, "q1": None}

    def first_q_only(p: Distribution, q: Distribution) -> Distribution:
        # A p that is the residual just returned belongs to the same node: keep its first q.
        q1 = last["q1"] if p is last["residual"] and last["q1"] is not None else q
        r = real(p, q1)
        last["residual"], last["q1"] = r, q1
        return r

    monkeypatch.setattr(verify, "next_residual", first_q_only)
    m = Markov(seed=4, s=T1)
    result = chi_square(first_two(m, SHAPES["3 children"], N, seed=1), m.joint2(0))
    assert not result.ok, f"the wrong residual passed: {result}"


def test_control_accepting_drafts_unchecked_fails() -> None:
    m = Markov(seed=4, s=T1)
    rng = np.random.default_rng(2)
    counts: Counter[object] = Counter()
    for _ in range(N):
        a = m.q[0].sample(rng)
        counts[(a, m.q[a].sample(rng))] += 1
    assert not chi_square(counts, m.joint2(0)).ok


# ------------------------------------------------------------------------- algebraic


def exact_node(p: Distribution, q: Distribution, k: int) -> dict[int, float]:
    """P(the node commits x), over every ordered draw of its k children without replacement."""
    out: dict[int, float] = {}

    def walk(rest: Distribution | None, children: list[tuple[int, Distribution]],
             mass: float) -> None:
        if rest is None or len(children) == k:
            for t, pr in node_output(p, children).items():
                out[t] = out.get(t, 0.0) + mass * pr
            return
        for t, qt in zip(rest.ids.tolist(), rest.probs.tolist(), strict=True):
            walk(without(rest, t), [*children, (t, rest)], mass * qt)

    walk(q, [], 1.0)
    return out


def sampler_settings() -> st.SearchStrategy[SamplerSettings]:
    return st.builds(SamplerSettings, temperature=st.floats(0.3, 2.0),
                     top_k=st.integers(0, 6), top_p=st.floats(0.5, 1.0),
                     min_p=st.floats(0.0, 0.3))


logit_rows = st.lists(st.floats(-6.0, 6.0), min_size=6, max_size=6).map(
    lambda xs: np.array(xs, dtype=np.float32))


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(lp=logit_rows, lq=logit_rows, sp=sampler_settings(), sq=sampler_settings(),
       k=st.integers(1, 4))
def test_the_rule_commits_exactly_p(lp: np.ndarray, lq: np.ndarray, sp: SamplerSettings,
                                    sq: SamplerSettings, k: int) -> None:
    p, q = distribution(lp, sp), distribution(lq, sq)
    got = exact_node(p, q, k)
    want = dict(zip(p.ids.tolist(), p.probs.tolist(), strict=True))
    assert set(got) <= set(want) | {t for t, v in got.items() if v < 1e-12}
    for t in set(got) | set(want):
        assert got.get(t, 0.0) == pytest.approx(want.get(t, 0.0), abs=1e-9), t


def test_the_algebraic_check_catches_a_stale_residual(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "next_residual", stale_residual)
    p = distribution(np.array([2.0, 1.0, 0.5, 0.0], dtype=np.float32), T1)
    q = distribution(np.array([0.0, 2.0, 1.0, 0.5], dtype=np.float32), T1)
    got = exact_node(p, q, 2)
    assert max(abs(got.get(int(t), 0.0) - pr) for t, pr in zip(p.ids, p.probs,
                                                               strict=True)) > 1e-3


# -------------------------------------------------------------------------- χ² itself


@pytest.mark.parametrize(("df", "alpha", "table"), [
    (1, 0.05, 3.841459), (1, 1e-3, 10.827566), (1, 1e-6, 23.928127), (2, 0.01, 9.210340),
    (3, 1e-3, 16.266236), (10, 1e-3, 29.588298), (30, 0.05, 43.772972), (100, 0.05, 124.342113),
])
def test_critical_values_match_tables(df: int, alpha: float, table: float) -> None:
    assert critical_value(df, alpha) == pytest.approx(table, rel=1e-6)
    assert survival(table, df) == pytest.approx(alpha, rel=1e-5)


# ------------------------------------------------------------- the whole decoder, scripted


def scripted_pair(seed: int) -> tuple[LlamaContext, LlamaContext]:
    t, d = tables(seed)
    return (cast(LlamaContext, ScriptedContext(t)), cast(LlamaContext, ScriptedContext(d)))


def transitions(make: Callable[[], SpeculativeDecoder], s: SamplerSettings, replies: int,
                length: int) -> Iterator[tuple[int, int]]:
    """(the row the next token was drawn from, that token) along each reply: the scripted
    row after token a at position j is (a + j) mod V, so positions inside a tree count too."""
    dec = make()
    for seed in range(replies):
        run = run_to_end(dec, [0], s.with_(seed=seed, max_tokens=length))
        seq = [0, *run.tokens]
        yield from (((a + j) % V, b) for j, (a, b) in enumerate(pairwise(seq)))


def transition_test(pairs: Iterator[tuple[int, int]], s: SamplerSettings, seed: int
                    ) -> tuple[float, float]:
    """Anderson–Goodman χ² of transition counts against the target's rows: (statistic,
    critical value at 1e-6)."""
    t, _ = tables(seed)
    by_row: dict[int, Counter[int]] = {}
    for a, b in pairs:
        by_row.setdefault(a, Counter())[b] += 1
    stat, df = 0.0, 0
    for a, counts in by_row.items():
        p = distribution(t[a], s)
        r = chi_square(counts, dict(zip(p.ids.tolist(), p.probs.tolist(), strict=True)))
        stat += r.statistic
        df += r.df
    return stat, critical_value(df)


@pytest.mark.parametrize("drafter", ["model", "tree"])
def test_the_decoder_commits_the_target_chain(drafter: str) -> None:
    tc, dc = scripted_pair(7)
    stat, crit = transition_test(transitions(
        lambda: SpeculativeDecoder(tc, dc, FixedGamma(5), [drafter]), FILTERED, 40, 500),
        FILTERED, 7)
    assert stat <= crit, (stat, crit)


def test_the_decoder_with_a_stale_residual_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "next_residual", stale_residual)
    tc, dc = scripted_pair(7)
    stat, crit = transition_test(transitions(
        lambda: SpeculativeDecoder(tc, dc, FixedGamma(5), ["tree"]), FILTERED, 40, 500),
        FILTERED, 7)
    assert stat > crit, (stat, crit)


def test_greedy_tree_is_the_target_argmax_chain() -> None:
    tc, dc = scripted_pair(9)
    t, _ = tables(9)
    run = run_to_end(SpeculativeDecoder(tc, dc, FixedGamma(8), ["tree"]), [0],
                     SamplerSettings(temperature=0, max_tokens=300), threading.Event())
    seq = [0, *run.tokens]
    assert all(b == int(np.argmax(t[(a + j) % V]))
               for j, (a, b) in enumerate(pairwise(seq)))
    assert any(s.kind == "tree" for s in run.steps)
