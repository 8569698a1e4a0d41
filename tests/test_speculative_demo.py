"""Greedy speculative decoding is token-identical to plain greedy decoding on the demo pair
(the real SmolLM2 F32 target and its Q3_K_S draft), over Spec-Bench prompts, γ ∈ {1, 3, 6}."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from specchat.bench.prompts import load_prompts
from specchat.engine.chat import ChatEngine
from specchat.engine.chat_template import Message
from specchat.engine.events import GenerationStats, TokenEvent
from specchat.engine.gamma import FixedGamma
from specchat.engine.model import ContextSettings, LlamaContext, LlamaModel
from specchat.engine.plain import PlainDecoder
from specchat.engine.sampling import SamplerSettings
from specchat.engine.speculative import SpeculativeDecoder

pytestmark = pytest.mark.slow

CATEGORIES = ("writing", "coding", "math_reasoning", "translation")
GREEDY = SamplerSettings(temperature=0, max_tokens=48)


@pytest.fixture(scope="module")
def demo(demo_files: tuple[Path, Path]) -> tuple[LlamaContext, LlamaContext]:
    # One thread: llama.cpp's results do not depend on it, and on a busy machine a second
    # thread mostly waits. Flash attention: "auto", which is off on a CPU-only build — with it
    # on, writing #81 parts from plain output at token 6 (see model.flash_attention).
    settings = ContextSettings(n_ctx=2048, n_threads=1)
    target, draft = LlamaModel(demo_files[0]), LlamaModel(demo_files[1])
    return LlamaContext(target, settings), LlamaContext(draft, settings)


def test_greedy_speculative_equals_plain_on_the_demo_pair(
        demo: tuple[LlamaContext, LlamaContext]) -> None:
    tc, dc = demo
    engine = ChatEngine(PlainDecoder(tc))
    accepted = 0
    for prompt in load_prompts(categories=CATEGORIES, per_category=1):
        tokens = engine.tokenize_chat([Message("user", prompt.text)])
        tc.clear()
        plain = [e.token_id for e in PlainDecoder(tc).run(tokens, GREEDY, threading.Event())
                 if isinstance(e, TokenEvent)]
        assert len(plain) > 10
        for gamma in (1, 3, 6):
            tc.clear()
            dc.clear()
            events = list(SpeculativeDecoder(tc, dc, FixedGamma(gamma)).run(
                tokens, GREEDY, threading.Event()))
            spec = [e.token_id for e in events if isinstance(e, TokenEvent)]
            assert spec == plain, f"{prompt.category} #{prompt.question_id}, γ = {gamma}"
            stats = events[-1]
            assert isinstance(stats, GenerationStats)
            accepted += stats.accepted
    assert accepted > 50  # the draft did most of the work, so the test exercised acceptance
