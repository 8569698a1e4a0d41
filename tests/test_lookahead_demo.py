"""Lookahead decoding on the demo target (the real SmolLM2-135M F32): greedy output is
token-identical to plain greedy over Spec-Bench prompts, and sampled output at T = 0.9 is
distributed as plain (χ² of homogeneity on 2-token continuations)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from specchat.bench.chi2 import homogeneity
from specchat.bench.prompts import load_prompts
from specchat.cli.prove_cmd import sample
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.drafters.lookahead import LookaheadDrafter, LookaheadSettings
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings

pytestmark = pytest.mark.slow

CATEGORIES = ("writing", "coding", "summarization", "rag")
GREEDY = SamplerSettings(temperature=0, max_tokens=40)


@pytest.fixture(scope="module")
def target(demo_files: tuple[Path, Path]) -> LlamaContext:
    return LlamaContext(LlamaModel(demo_files[0]), ContextSettings(n_ctx=2048, n_threads=1))


def lookahead(tc: LlamaContext, settings: LookaheadSettings, gamma: int
              ) -> tuple[SpeculativeDecoder, LookaheadDrafter]:
    d = LookaheadDrafter(tc, settings, tc.model.is_eog)
    return SpeculativeDecoder(tc, None, FixedGamma(gamma), [d]), d


def test_greedy_lookahead_equals_plain_on_the_demo_target(target: LlamaContext) -> None:
    engine = ChatEngine(PlainDecoder(target))
    accepted = rows = 0
    for prompt in load_prompts(categories=CATEGORIES, per_category=1):
        tokens = engine.tokenize_chat([Message("user", prompt.text)])
        target.clear()
        plain = run_to_end(PlainDecoder(target), tokens, GREEDY).tokens
        assert len(plain) > 10
        for settings in (LookaheadSettings(2, 3, 4), LookaheadSettings(4, 4, 2)):
            target.clear()
            dec, d = lookahead(target, settings, 8)
            run = run_to_end(dec, tokens, GREEDY)
            assert run.tokens == plain, f"{prompt.category} #{prompt.question_id}, {settings}"
            accepted += sum(s.accepted for s in run.steps)
            rows += d.window_rows
    assert accepted > 20 and rows > 500  # candidates were kept; the window ran


def test_sampled_lookahead_is_distributed_as_plain_on_the_demo_target(
        target: LlamaContext) -> None:
    target.clear()
    plain = PlainDecoder(target)
    prompt = ChatEngine(plain).tokenize_chat(
        [Message("user", "Repeat after me: the sea, the sea, the sea.")])
    s = SamplerSettings(temperature=0.9, max_tokens=2)
    cancel = threading.Event()
    a = sample(plain, prompt, lambda seed: s.with_(seed=seed), range(400), cancel)
    dec, d = lookahead(target, LookaheadSettings(2, 3, 4), 6)
    b = sample(dec, prompt, lambda seed: s.with_(seed=seed), range(400, 800), cancel)
    result = homogeneity(a.counts, b.counts)
    assert result.p_value >= 1e-3, str(result)
    assert result.df >= 3  # the continuations vary enough for the test to say something
    assert d.window_rows > 0 and len(d.pool) > 0
