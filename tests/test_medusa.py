"""The Medusa drafter: its trees are verified by the one rule, so output is exact.

- χ² at T = 0.9 over ≥ 10⁵ committed tokens of the whole decoder on the scripted-logits context
  (whose hidden state is its row's one-hot), with heads whose support is a vocabulary subset;
  controls: children whose q is not renormalised after the earlier draws, and a residual left
  stale after a rejected child, must fail the same test.
- Greedy: the Medusa decoder's tokens are the target's argmax chain (scripted), and equal plain
  greedy decoding on the demo target (slow).
"""

from __future__ import annotations

import threading
from itertools import pairwise
from typing import cast

import numpy as np
import pytest
from test_tree_exactness import V, tables, transition_test, transitions

from specchat.devtools.scripted import ScriptedContext
from specchat.engine.decode import verify
from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.sampling import Distribution, SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.drafters import medusa
from specchat.engine.drafters.medusa import MedusaDrafter, MedusaHeads, default_shape
from specchat.engine.llama.context import LlamaContext

T09 = SamplerSettings(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)
SEED = 7


def scripted_heads(k: int = 3, vocab: tuple[int, ...] = (0, 1, 2, 3)) -> MedusaHeads:
    rng = np.random.default_rng(3)
    return MedusaHeads(
        (rng.normal(size=(k, V, V)) * 0.8).astype(np.float32),
        (rng.normal(size=(k, V)) * 0.3).astype(np.float32),
        np.array(vocab, dtype=np.int64),
        (rng.normal(size=(len(vocab), V)) * 1.5).astype(np.float32))


def medusa_decoder(gamma: int = 6) -> SpeculativeDecoder:
    t, _ = tables(SEED)
    tc = cast(LlamaContext, ScriptedContext(t))
    heads = scripted_heads()
    return SpeculativeDecoder(tc, None, FixedGamma(gamma), [MedusaDrafter(tc, lambda: heads)])


def test_default_shape_stays_within_the_heads() -> None:
    shape = default_shape(8, 3)
    assert len(shape) == 8
    depth = [0] * len(shape)
    for i, p in enumerate(shape):
        depth[i] = 1 if p < 0 else depth[p] + 1
    assert max(depth) <= 3 and shape.count(-1) >= 2  # a tree, not a chain


def test_medusa_steps_draft_trees_from_the_hidden_state() -> None:
    run = run_to_end(medusa_decoder(), [0], T09.with_(seed=1, max_tokens=200))
    drafted = [s for s in run.steps if s.drafter == "medusa"]
    assert drafted and all(s.depth <= 3 for s in drafted)
    assert any(s.kind == "tree" for s in drafted)
    assert sum(s.accepted for s in drafted) > 0


def test_medusa_at_t09_commits_the_target_chain() -> None:
    # 250 replies × 400 tokens: 10⁵ transitions, each checked against the target's row.
    stat, crit = transition_test(transitions(medusa_decoder, T09, 250, 400), T09, SEED)
    assert stat <= crit, (stat, crit)


def _with_replacement_q(q: Distribution, k: int, rng: np.random.Generator
                        ) -> list[tuple[int, Distribution]]:
    """The wrong rule: k draws without replacement, each claiming it was drawn from q itself."""
    out = medusa_original_draw(q, k, rng)
    return [(t, q) for t, _ in out]


medusa_original_draw = medusa.draw_children


def test_control_unrenormalised_sibling_q_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(medusa, "draw_children", _with_replacement_q)
    stat, crit = transition_test(transitions(medusa_decoder, T09, 60, 400), T09, SEED)
    assert stat > crit, (stat, crit)


def test_control_stale_residual_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "next_residual", lambda p, q: p)
    stat, crit = transition_test(transitions(medusa_decoder, T09, 60, 400), T09, SEED)
    assert stat > crit, (stat, crit)


def test_greedy_medusa_is_the_target_argmax_chain() -> None:
    t, _ = tables(SEED)
    run = run_to_end(medusa_decoder(8), [0], SamplerSettings(temperature=0, max_tokens=300),
                     threading.Event())
    seq = [0, *run.tokens]
    assert all(b == int(np.argmax(t[(a + j) % V])) for j, (a, b) in enumerate(pairwise(seq)))
    assert any(s.drafter == "medusa" and s.accepted for s in run.steps)


@pytest.mark.slow
def test_greedy_medusa_equals_plain_on_the_demo_target(demo_files: tuple[object, object]) -> None:
    from pathlib import Path

    from specchat.engine.decode.plain import PlainDecoder
    from specchat.engine.llama.model import LlamaModel
    from specchat.engine.llama.model_settings import ContextSettings
    from specchat.models.heads.output_matrix import output_rows

    path = Path(str(demo_files[0]))
    model = LlamaModel(path)
    ctx = LlamaContext(model, ContextSettings(n_ctx=1024, n_batch=64, n_threads=1))
    d = 576
    rng = np.random.default_rng(0)
    vocab = np.arange(4096, dtype=np.int64)
    # Untrained heads (small random blocks): exactness must not depend on what they propose.
    heads = MedusaHeads((rng.normal(size=(3, d, d)) * 0.01).astype(np.float32),
                        np.zeros((3, d), dtype=np.float32), vocab, output_rows(path, vocab))
    prompt = model.tokenize("<|im_start|>user\nWrite a short story about a robot who learns to "
                            "paint.<|im_end|>\n<|im_start|>assistant\n")
    s = SamplerSettings(temperature=0, max_tokens=48)
    plain = run_to_end(PlainDecoder(ctx), prompt, s)
    ctx.clear()
    spec = run_to_end(SpeculativeDecoder(ctx, None, FixedGamma(6),
                                         [MedusaDrafter(ctx, lambda: heads)]), prompt, s)
    assert spec.tokens == plain.tokens
    assert any(st.drafter == "medusa" and st.kind == "tree" for st in spec.steps)


class _Alternate(FixedGamma):
    """A Medusa tree every other step, plain steps between (as the planner does when it probes)."""

    def __init__(self) -> None:
        super().__init__(6)
        self.n = 0

    def next_gamma(self) -> int:
        self.n += 1
        return 6 if self.n % 2 else 0


def test_plain_steps_keep_hidden_states_off_and_stay_exact() -> None:
    """Hidden states cost every pass they are on: only the heads' own steps read them (after a
    plain step the drafter re-reads one token for its state), and greedy output is unchanged."""
    t, _ = tables(SEED)
    tc = ScriptedContext(t)
    policy = _Alternate()
    on: list[int] = []  # the step (its γ) of every pass with hidden states on
    for name in ("decode_with_hidden", "decode_tree_with_hidden"):
        own = getattr(tc, name)

        def counted(*args, _own=own):  # type: ignore[no-untyped-def]
            on.append(6 if policy.n % 2 else 0)
            return _own(*args)

        setattr(tc, name, counted)
    ctx = cast(LlamaContext, tc)
    heads = scripted_heads()
    s = SamplerSettings(temperature=0, max_tokens=60)
    run = run_to_end(SpeculativeDecoder(ctx, None, policy, [MedusaDrafter(ctx, lambda: heads)]),
                     [0], s)
    planned = sum(1 for st in run.steps if st.plan_size > 0)  # the heads' steps
    assert planned > 5 and len(run.steps) - planned > 5
    assert on and all(g == 6 for g in on)  # never during a plain step
    assert len(on) >= 2 * planned - 1  # per heads' step: a re-read and its own pass
    seq = [0, *run.tokens]
    assert all(b == int(np.argmax(t[(a + j) % V])) for j, (a, b) in enumerate(pairwise(seq)))
