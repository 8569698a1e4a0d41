"""Plain decoding on tiny real GGUF models through llama.cpp."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.events import GenerationStats, NoticeEvent, TokenEvent, TokenOrigin
from specchat.engine.decode.messages import Message, ToolCall
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.errors import ContextFullError, ModelFileError

GREEDY = SamplerSettings(temperature=0, max_tokens=24)


@pytest.fixture(scope="module")
def model(tiny_target: Path) -> LlamaModel:
    return LlamaModel(tiny_target)


def engine(model: LlamaModel, n_ctx: int = 512) -> ChatEngine:
    return ChatEngine(PlainDecoder(LlamaContext(model, ContextSettings(n_ctx=n_ctx))))


def run(eng: ChatEngine, msgs: list[Message], s: SamplerSettings = GREEDY,
        cancel: threading.Event | None = None) -> tuple[list[TokenEvent], GenerationStats, list]:
    events = list(eng.reply(msgs, s, cancel))
    stats = events[-1]
    assert isinstance(stats, GenerationStats)
    return [e for e in events if isinstance(e, TokenEvent)], stats, events


def test_model_facts(model: LlamaModel) -> None:
    assert model.n_vocab == 52
    assert model.is_eog(2) and not model.is_eog(5)
    assert model.chat_template and "im_start" in model.chat_template
    ids = model.tokenize("<|im_start|>user\nthe cat")
    assert ids[0] == 1  # the special token is parsed
    assert model.detokenize(ids[1:]) == "user\nthe cat"


def test_greedy_reply_is_deterministic_and_consistent(model: LlamaModel) -> None:
    eng = engine(model)
    msgs = [Message("user", "hello there")]
    toks, stats, _ = run(eng, msgs)
    toks2, _, _ = run(engine(model), msgs)
    assert [t.token_id for t in toks] == [t.token_id for t in toks2]
    assert all(t.origin is TokenOrigin.PLAIN for t in toks)
    assert [t.position for t in toks] == list(range(len(toks)))
    ids = [t.token_id for t in toks]
    assert "".join(t.text for t in toks) == model.detokenize(ids)
    assert stats.generated_tokens in (len(toks), len(toks) + 1)  # + the EOG token, if any
    assert stats.prompt_tokens > 0 and stats.ttft_s > 0


def test_greedy_equals_argmax_of_fresh_prefill(model: LlamaModel) -> None:
    eng = engine(model)
    msgs = [Message("user", "a b c")]
    toks, _, _ = run(eng, msgs, GREEDY.with_(max_tokens=6))
    prompt = eng.tokenize_chat(msgs)
    ctx = LlamaContext(model, ContextSettings(n_ctx=256))
    seq = list(prompt)
    for t in toks:
        row = ctx.decode(seq[len(ctx.tokens):])[0]
        assert int(np.argmax(row)) == t.token_id
        seq.append(t.token_id)


def test_a_prompt_is_read_in_one_pass_as_llama_server_reads_it(model: LlamaModel) -> None:
    """Plain decoding has no first step to share a prompt's last token with: the prompt is one
    pass whose last row gives the first token (an extra 1-row pass costs a whole step on a
    CPU); a prompt the cache holds whole has its last token read again, for its row."""
    ctx = LlamaContext(model, ContextSettings(n_ctx=256))
    passes: list[tuple[int, int]] = []
    ctx.on_decode = lambda start, chunk: passes.append((start, len(chunk)))
    prompt = model.tokenize("<|im_start|>user\nthe cat sat on the mat<|im_end|>")
    stats = next(e for e in PlainDecoder(ctx).run(prompt, GREEDY.with_(max_tokens=1),
                                                  threading.Event())
                 if isinstance(e, GenerationStats))
    assert passes == [(0, len(prompt))] and stats.cached_tokens == 0
    passes.clear()
    toks = [e for e in PlainDecoder(ctx).run(prompt, GREEDY.with_(max_tokens=2),
                                             threading.Event()) if isinstance(e, TokenEvent)]
    assert passes[0] == (len(prompt) - 1, 1)  # the cached prompt: its last token again
    other = LlamaContext(model, ContextSettings(n_ctx=256))  # alive: its row is a view
    assert toks[0].token_id == int(np.argmax(other.decode(prompt)[0]))


def test_second_turn_reuses_the_cached_prefix(model: LlamaModel) -> None:
    eng = engine(model)
    msgs = [Message("system", "be brief"), Message("user", "hello")]
    toks, _, _ = run(eng, msgs)
    reply = model.detokenize([t.token_id for t in toks])
    msgs2 = [*msgs, Message("assistant", reply), Message("user", "and then?")]
    _, stats2, _ = run(eng, msgs2)
    first_prompt = len(eng.tokenize_chat(msgs))
    assert stats2.cached_tokens >= first_prompt


def test_seeded_sampling_is_reproducible(model: LlamaModel) -> None:
    s = SamplerSettings(temperature=1.0, seed=42, max_tokens=16, top_k=0, top_p=1, min_p=0)
    a, _, _ = run(engine(model), [Message("user", "x")], s)
    b, _, _ = run(engine(model), [Message("user", "x")], s)
    assert [t.token_id for t in a] == [t.token_id for t in b]


def test_max_tokens_and_stop_strings(model: LlamaModel) -> None:
    eng = engine(model)
    msgs = [Message("user", "hello there")]
    s = SamplerSettings(temperature=1.0, seed=3, max_tokens=40, top_k=0, top_p=1, min_p=0)
    toks, stats, _ = run(eng, msgs, s)
    text = "".join(t.text for t in toks)
    if stats.stop_reason == "length":
        assert stats.generated_tokens == 40
    assert len(text) >= 3
    stop = text[1:3]
    toks2, stats2, _ = run(eng, msgs, s.with_(stop=(stop,)))
    assert stats2.stop_reason == "stop"
    assert "".join(t.text for t in toks2) == text[: text.find(stop)]


def test_cancel_before_start(model: LlamaModel) -> None:
    cancel = threading.Event()
    cancel.set()
    _, stats, _ = run(engine(model), [Message("user", "hi")], cancel=cancel)
    assert stats.stop_reason == "cancelled"


def test_cancel_mid_reply_keeps_the_cache_usable(model: LlamaModel) -> None:
    eng = engine(model)
    cancel = threading.Event()
    s = SamplerSettings(temperature=1.0, seed=5, max_tokens=200, top_k=0, top_p=1, min_p=0)
    seen = 0
    for ev in eng.reply([Message("user", "hi")], s, cancel):
        if isinstance(ev, TokenEvent):
            seen += 1
            if seen == 3:
                cancel.set()
        if isinstance(ev, GenerationStats):
            stats = ev
    assert stats.stop_reason == "cancelled" and seen <= 4
    toks, _stats2, _ = run(eng, [Message("user", "hi")])
    fresh, _, _ = run(engine(model), [Message("user", "hi")])
    assert [t.token_id for t in toks] == [t.token_id for t in fresh]


def test_full_context_drops_old_turns_then_refuses(model: LlamaModel) -> None:
    eng = engine(model, n_ctx=128)
    long = "the cat sat on the mat " * 6
    msgs = [Message("system", "sys"), Message("user", long), Message("assistant", long),
            Message("user", "and now?")]
    _, _, events = run(eng, msgs, GREEDY.with_(max_tokens=8))
    notices = [e for e in events if isinstance(e, NoticeEvent)]
    assert notices and "dropped the 2 oldest messages" in notices[0].message
    with pytest.raises(ContextFullError, match="shorten it or raise the context size"):
        list(eng.reply([Message("user", long * 4)], GREEDY))


def test_dropping_a_turn_drops_its_tool_calls_and_results_with_it(model: LlamaModel) -> None:
    eng = engine(model, n_ctx=128)
    long = "the cat sat on the mat " * 6
    call = ToolCall("call_1", "look", "{}")
    msgs = [Message("system", "sys"), Message("user", long * 2),
            Message("assistant", "", (call,)), Message("tool", "a cat", tool_call_id="call_1"),
            Message("assistant", "ok"), Message("user", "and now?")]
    fitted = eng.fit(msgs, 8)
    # The user's message, the call, its result and the answer: never a result without its call.
    assert fitted.dropped == 4
    assert [m.role for m in fitted.messages] == ["system", "user"]


def test_generation_stops_at_a_full_context(model: LlamaModel) -> None:
    eng = engine(model, n_ctx=64)
    s = SamplerSettings(temperature=1.0, seed=9, max_tokens=500, top_k=0, top_p=1, min_p=0)
    eng.model  # noqa: B018
    events = list(eng.reply([Message("user", "hi")], s))
    stats = events[-1]
    assert isinstance(stats, GenerationStats)
    if stats.stop_reason != "eos":
        assert stats.stop_reason == "context"
        assert any(isinstance(e, NoticeEvent) and "context window is full" in e.message
                   for e in events)


def test_loading_bad_files_gives_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="not found"):
        LlamaModel(tmp_path / "missing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 100)
    with pytest.raises(ModelFileError):
        LlamaModel(junk)


def test_a_long_decode_stops_mid_way_and_short_ones_run_free(model: LlamaModel) -> None:
    from specchat.engine.llama.context import ABORTABLE_BATCH, DecodeCancelled

    ctx = LlamaContext(model, ContextSettings(n_ctx=512))
    ctx.decode([5, 6, 7])
    ctx.cancel.set()
    with pytest.raises(DecodeCancelled):
        ctx.decode([10 + i % 30 for i in range(ABORTABLE_BATCH + 10)])
    assert ctx.tokens == [5, 6, 7]  # nothing of the aborted batch is left in the cache
    # A short decode (one generation step) carries no Python callback: it completes, and the
    # decoders see the cancel flag between steps instead.
    assert ctx.decode([8]).shape == (1, model.n_vocab)
    assert ctx.tokens == [5, 6, 7, 8]
