"""Speculative decoding end to end on tiny real GGUF pairs (52-token vocabulary)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from specchat.bench.chi2 import chi_square
from specchat.devtools.tiny_models import TinySpec, vocabulary, write_tiny_model
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.events import (
    Event,
    GenerationStats,
    NoticeEvent,
    RejectedEvent,
    StepEvent,
    TokenEvent,
    TokenOrigin,
)
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.plan import Plan, chain
from specchat.engine.decode.sampling import SamplerSettings, distribution
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma, PolicyBase
from specchat.engine.drafters.ngram import NgramDrafter
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.hardware import local_gpu_offload
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings, flash_attention

GREEDY = SamplerSettings(temperature=0, max_tokens=40)
T1 = SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
FILTERED = SamplerSettings(temperature=0.7, top_k=12, top_p=0.9, min_p=0.02)


@pytest.fixture(scope="module")
def target(tiny_target: Path) -> LlamaModel:
    return LlamaModel(tiny_target)


@pytest.fixture(scope="module")
def close_draft(tmp_path_factory: pytest.TempPathFactory) -> LlamaModel:
    """A draft that agrees with the target about half the time (α ≈ 0.55 at T = 1)."""
    path = tmp_path_factory.mktemp("close") / "close.gguf"
    write_tiny_model(path, TinySpec(seed=2), noise_from=TinySpec(seed=1), noise=0.25)
    return LlamaModel(path)


@pytest.fixture(scope="module")
def far_draft(tiny_draft: Path) -> LlamaModel:
    return LlamaModel(tiny_draft)


def ctx(model: LlamaModel, n_ctx: int = 512, **settings: str) -> LlamaContext:
    # One thread: these models are tiny, and on a busy machine a second thread only waits.
    return LlamaContext(model, ContextSettings(n_ctx=n_ctx, n_threads=1, **settings))


# llama.cpp's logits depend slightly on how tokens were batched: with flash attention on the
# CPU a prefill and token-by-token decoding differ by ~1e-3 (relative); without it and with an
# F32 KV cache, by ~1e-6. Comparisons of caches use the latter, so that a tight tolerance
# separates rounding from a rollback that left a wrong token behind (an O(1) difference).
EXACT_KV = {"flash_attn": "off", "type_k": "f32", "type_v": "f32"}


def test_flash_attention_is_off_by_default_on_a_cpu() -> None:
    cpu_only = not local_gpu_offload()  # (llama.cpp's own answer is yes on any RPC build)
    assert flash_attention("auto") == ("off" if cpu_only else "auto")
    assert flash_attention("on") == "on" and flash_attention("off") == "off"
    assert flash_attention("sideways") == flash_attention("auto")


def prompt_of(model: LlamaModel, text: str = "hello there") -> list[int]:
    return model.tokenize(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n")


def run(dec: Decoder, prompt: Sequence[int], s: SamplerSettings,
        cancel: threading.Event | None = None) -> tuple[list[Event], GenerationStats]:
    events = list(dec.run(prompt, s, cancel or threading.Event()))
    stats = events[-1]
    assert isinstance(stats, GenerationStats)
    return events, stats


def token_ids(events: list[Event]) -> list[int]:
    return [e.token_id for e in events if isinstance(e, TokenEvent)]


# --------------------------------------------------------------------------- exactness


def exact_joint(model: LlamaModel, prompt: list[int], s: SamplerSettings, depth: int,
                prune: float = 1e-4) -> dict[object, float]:
    """P(first ``depth`` tokens) under plain sampling, from the target's own logits.

    Paths below ``prune`` are not expanded; their mass goes to the outcome "other".
    """
    c = ctx(model)
    out: dict[object, float] = {}

    def walk(prefix: tuple[int, ...], mass: float) -> None:
        c.truncate(0)
        row = c.decode([*prompt, *prefix])[0]
        d = distribution(row, s)
        for t, p in zip(d.ids.tolist(), d.probs.tolist(), strict=True):
            path, m = (*prefix, t), mass * p
            if len(path) == depth:
                out[path] = m
            elif m >= prune and not model.is_eog(t):
                walk(path, m)
            else:
                out["other"] = out.get("other", 0.0) + m

    walk((), 1.0)
    return out


def sampled_joint(dec: Decoder, prompt: list[int], s: SamplerSettings, depth: int, n: int,
                  known: dict[object, float]) -> Counter[object]:
    counts: Counter[object] = Counter()
    for seed in range(n):
        events, _ = run(dec, prompt, s.with_(seed=seed, max_tokens=depth))
        path = tuple(token_ids(events))
        counts[path if path in known else "other"] += 1
    return counts


@pytest.mark.parametrize("settings", [T1, FILTERED], ids=["T=1", "T=0.7,top-k,top-p,min-p"])
def test_first_tokens_are_distributed_as_plain_sampling(target: LlamaModel,
                                                        close_draft: LlamaModel,
                                                        settings: SamplerSettings) -> None:
    prompt = prompt_of(target)
    exact = exact_joint(target, prompt, settings, depth=3)
    dec = SpeculativeDecoder(ctx(target), ctx(close_draft), FixedGamma(2))
    counts = sampled_joint(dec, prompt, settings, depth=3, n=3000, known=exact)
    result = chi_square(counts, exact)
    assert result.ok, str(result)


def test_ngram_then_draft_is_exact_too(target: LlamaModel, close_draft: LlamaModel) -> None:
    # A prompt that repeats itself, so the n-gram drafter proposes some of the steps.
    prompt = prompt_of(target, "abab abab abab ab")
    exact = exact_joint(target, prompt, T1, depth=2)
    dec = SpeculativeDecoder(ctx(target), ctx(close_draft), FixedGamma(3),
                             [NgramDrafter(n_min=1, is_eog=target.is_eog), "model"])
    counts = sampled_joint(dec, prompt, T1, depth=2, n=2000, known=exact)
    result = chi_square(counts, exact)
    assert result.ok, str(result)


def test_the_chi_square_check_catches_a_biased_decoder(target: LlamaModel,
                                                       far_draft: LlamaModel) -> None:
    """Control: the draft model's own samples are far from the target's distribution."""
    prompt = prompt_of(target)
    exact = exact_joint(target, prompt, T1, depth=2)
    counts = sampled_joint(PlainDecoder(ctx(far_draft)), prompt, T1, depth=2, n=1500, known=exact)
    assert not chi_square(counts, exact).ok


# ------------------------------------------------------------------------------ greedy


@pytest.mark.parametrize("gamma", [0, 1, 3, 6])
def test_greedy_is_token_identical_to_plain(target: LlamaModel, far_draft: LlamaModel,
                                            gamma: int) -> None:
    tc, dc = ctx(target), ctx(far_draft)
    for text in ("hello there", "the cat sat", "0123 abc"):
        prompt = prompt_of(target, text)
        plain, _ = run(PlainDecoder(ctx(target)), prompt, GREEDY)
        spec, stats = run(SpeculativeDecoder(tc, dc, FixedGamma(gamma)), prompt, GREEDY)
        assert token_ids(spec) == token_ids(plain), (text, gamma)
        if gamma == 0:
            assert stats.drafted == 0
            assert all(e.origin is TokenOrigin.PLAIN for e in spec if isinstance(e, TokenEvent))


def test_plain_steps_sample_what_plain_decoding_samples(target: LlamaModel,
                                                        far_draft: LlamaModel) -> None:
    """A step without drafts is plain decoding's step: with the same seed, a reply of plain
    steps through the speculative loop draws the very tokens plain decoding draws (the same
    row, the same sampler, one draw from the generator per token), and its events and caches
    are a plain step's."""
    for s in (T1, FILTERED):
        for seed in (3, 11):
            settings = SamplerSettings(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
                                       min_p=s.min_p, seed=seed, max_tokens=40)
            prompt = prompt_of(target, "the cat sat")
            plain, _ = run(PlainDecoder(ctx(target)), prompt, settings)
            tc = ctx(target)
            spec, stats = run(SpeculativeDecoder(tc, ctx(far_draft), FixedGamma(0)), prompt,
                              settings)
            assert token_ids(spec) == token_ids(plain), (s, seed)
            assert stats.drafted == 0 and stats.generated_tokens == len(token_ids(plain))
            steps = [e for e in spec if isinstance(e, StepEvent)]
            # the first step takes the prompt read's row: no pass of its own
            assert [(e.gamma, e.committed, e.batch) for e in steps] == \
                [(0, 1, 0)] + [(0, 1, 1)] * (len(steps) - 1)
            # the cache holds the reply but its last token, as after any step
            whole = [*prompt, *token_ids(spec)]
            assert tc.tokens == whole[:len(tc.tokens)] and len(tc.tokens) >= len(whole) - 2


def test_the_prompt_is_read_whole_and_its_last_row_held_for_the_first_step(
        target: LlamaModel, far_draft: LlamaModel) -> None:
    """The prompt is one pass, as plain decoding and llama-server read it: a plain first step
    takes its last row and makes no pass (a 1-row pass is a whole token's time on a CPU); a
    first step that drafts reads the last token again in its own batch, the cache cut back by
    one first. Greedy, both reply as plain decoding does."""
    prompt = prompt_of(target, "the cat sat on the mat")
    plain, _ = run(PlainDecoder(ctx(target)), prompt, GREEDY.with_(max_tokens=6))
    n = len(prompt)
    for gamma, second in ((0, (n, 1)), (4, (n - 1, 5))):
        tc = ctx(target)
        passes: list[tuple[int, int]] = []
        tc.on_decode = lambda start, chunk, passes=passes: passes.append((start, len(chunk)))
        spec, stats = run(SpeculativeDecoder(tc, ctx(far_draft), FixedGamma(gamma)), prompt,
                          GREEDY.with_(max_tokens=6))
        assert token_ids(spec) == token_ids(plain), gamma
        assert passes[:2] == [(0, n), second], gamma
        first = next(e for e in spec if isinstance(e, StepEvent))
        assert (first.gamma, first.batch) == ((0, 0) if gamma == 0 else (4, 5))
        assert stats.target_forwards == sum(isinstance(e, StepEvent) for e in spec)


def test_ngram_alone_greedy_is_identical_and_drafts(target: LlamaModel) -> None:
    prompt = prompt_of(target, "the cat sat on the mat, the cat sat on the mat, the cat")
    plain, _ = run(PlainDecoder(ctx(target)), prompt, GREEDY.with_(max_tokens=60))
    dec = SpeculativeDecoder(ctx(target), None, FixedGamma(4), ["ngram"])
    assert dec.name == "speculative"  # the decoder's kind; what drafted is in the stats
    spec, stats = run(dec, prompt, GREEDY.with_(max_tokens=60))
    assert token_ids(spec) == token_ids(plain)
    steps = [e for e in spec if isinstance(e, StepEvent)]
    assert any(s.drafter == "ngram" and s.gamma > 0 for s in steps)
    assert stats.detail.steps_by_drafter.get("ngram", 0) > 0
    assert stats.detail.drafters_used == ("ngram",)


# ----------------------------------------------------------------- caches and rollback


def test_rollback_leaves_the_target_as_a_fresh_prefill_would(target: LlamaModel,
                                                             far_draft: LlamaModel) -> None:
    tc, dc = ctx(target, **EXACT_KV), ctx(far_draft, **EXACT_KV)
    prompt = prompt_of(target)
    s = T1.with_(seed=21, max_tokens=120)
    events, stats = run(SpeculativeDecoder(tc, dc, FixedGamma(4)), prompt, s)
    assert stats.stop_reason == "length" and stats.steps > 20 and stats.rejections > 5
    seq = prompt + token_ids(events)
    assert tc.tokens == seq[:-1]
    assert seq[: len(dc.tokens)] == dc.tokens
    got = tc.decode(seq[-1:])[0].copy()
    fresh_ctx = ctx(target, **EXACT_KV)  # kept alive: decode returns a view into its buffer
    fresh = fresh_ctx.decode(seq)[0].copy()
    np.testing.assert_allclose(got, fresh, atol=1e-4)
    dc.truncate(len(seq) - 1)
    got_d = dc.decode(seq[len(dc.tokens):])[0].copy()
    fresh_draft = ctx(far_draft, **EXACT_KV)
    np.testing.assert_allclose(got_d, fresh_draft.decode(seq)[0], atol=1e-4)
    # Control: one stale token left in the cache moves the logits far beyond the tolerance.
    fresh_ctx.truncate(len(seq) - 2)
    fresh_ctx.decode([seq[-1] ^ 1, seq[-1]])
    leaked = fresh_ctx.decode([seq[-1]])[0]
    assert np.abs(leaked - fresh).max() > 1e-2


def test_every_draft_accepted_keeps_the_draft_in_sync(target: LlamaModel) -> None:
    """A draft identical to the target accepts everything: the bonus-token path every step."""
    tc, dc = ctx(target), ctx(target)
    prompt = prompt_of(target)
    s = T1.with_(seed=3, max_tokens=40)
    events, stats = run(SpeculativeDecoder(tc, dc, FixedGamma(3)), prompt, s)
    assert stats.rejections == 0 and stats.accepted == stats.drafted > 0
    assert [e.origin for e in events if isinstance(e, TokenEvent)][:4] == [
        TokenOrigin.ACCEPTED] * 3 + [TokenOrigin.BONUS]
    assert stats.tau == 4.0 and stats.steps == 10
    seq = prompt + token_ids(events)
    assert tc.tokens == seq[:-1] and seq[: len(dc.tokens)] == dc.tokens


def test_events_add_up(target: LlamaModel, close_draft: LlamaModel) -> None:
    prompt = prompt_of(target)
    events, stats = run(SpeculativeDecoder(ctx(target), ctx(close_draft), FixedGamma(4)), prompt,
                        T1.with_(seed=4, max_tokens=100))
    assert stats.stop_reason == "length"
    toks = [e for e in events if isinstance(e, TokenEvent)]
    steps = [e for e in events if isinstance(e, StepEvent)]
    rejected = [e for e in events if isinstance(e, RejectedEvent)]
    assert "".join(t.text for t in toks) == target.detokenize([t.token_id for t in toks])
    assert [t.position for t in toks] == list(range(100))
    origins = Counter(t.origin for t in toks)
    assert origins[TokenOrigin.ACCEPTED] == stats.accepted == sum(s.accepted for s in steps)
    assert origins[TokenOrigin.CORRECTED] == stats.rejections
    assert origins[TokenOrigin.BONUS] + origins[TokenOrigin.PLAIN] + stats.rejections == stats.steps
    assert stats.drafted == sum(s.gamma for s in steps)
    assert len(rejected) == stats.drafted - stats.accepted
    assert sum(s.committed for s in steps) == stats.generated_tokens == 100
    assert stats.target_forwards == stats.steps == len(steps)
    assert stats.alpha == pytest.approx(stats.accepted / (stats.accepted + stats.rejections))
    # The first rejected token of a step sits where the corrected token went; it was drawn
    # from q (q > 0) and rejected, which needs p < q.
    block: list[Event] = []
    for ev in events:
        block.append(ev)
        if isinstance(ev, StepEvent):
            rej = [e for e in block if isinstance(e, RejectedEvent)]
            fixed = [e for e in block if isinstance(e, TokenEvent)
                     and e.origin is TokenOrigin.CORRECTED]
            assert len(rej) == ev.gamma - ev.accepted and len(fixed) == (1 if rej else 0)
            if rej:
                assert rej[0].position == fixed[0].position
                assert rej[0].q > 0 and rej[0].p < rej[0].q
                assert [r.position for r in rej] == list(range(fixed[0].position,
                                                               fixed[0].position + len(rej)))
            block = []
    x = stats.detail
    assert sum(x.position_accepted) == stats.accepted
    assert sum(x.position_drafted) == stats.drafted
    assert x.exact_match_alpha is not None and x.overlap_mean is not None
    assert 0 < x.exact_match_alpha <= x.overlap_mean <= 1
    assert sum(b.count for b in x.verify_batches) == stats.steps


def test_cancel_mid_reply_then_the_next_turn_equals_a_fresh_run(target: LlamaModel,
                                                                far_draft: LlamaModel) -> None:
    tc, dc = ctx(target), ctx(far_draft)
    eng = ChatEngine(SpeculativeDecoder(tc, dc, FixedGamma(3)))
    cancel = threading.Event()
    seen = 0
    for ev in eng.reply([Message("user", "hi")], T1.with_(seed=5, max_tokens=200), cancel):
        if isinstance(ev, TokenEvent):
            seen += 1
            if seen == 3:
                cancel.set()
        stats = ev
    assert isinstance(stats, GenerationStats) and stats.stop_reason == "cancelled"
    assert seen <= 3 + 4
    msgs = [Message("user", "hi")]
    again = list(eng.reply(msgs, GREEDY))
    fresh = list(ChatEngine(SpeculativeDecoder(ctx(target), ctx(far_draft), FixedGamma(3))).reply(
        msgs, GREEDY))
    assert token_ids(again) == token_ids(fresh)


def test_cancel_before_start_aborts_the_prefill(target: LlamaModel, far_draft: LlamaModel) -> None:
    tc, dc = ctx(target), ctx(far_draft)
    cancel = threading.Event()
    cancel.set()
    prompt = prompt_of(target)
    _, stats = run(SpeculativeDecoder(tc, dc, FixedGamma(3)), prompt, GREEDY, cancel)
    assert stats.stop_reason == "cancelled" and stats.generated_tokens == 0
    assert prompt[: len(tc.tokens)] == tc.tokens and prompt[: len(dc.tokens)] == dc.tokens
    events, _ = run(SpeculativeDecoder(tc, dc, FixedGamma(3)), prompt, GREEDY)
    plain, _ = run(PlainDecoder(ctx(target)), prompt, GREEDY)
    assert token_ids(events) == token_ids(plain)


def test_second_turn_reuses_both_caches(target: LlamaModel, far_draft: LlamaModel) -> None:
    tc, dc = ctx(target), ctx(far_draft)
    decoded: list[int] = []
    real_decode = dc.decode

    def recording_decode(tokens: Sequence[int], *, logits: str = "last") -> np.ndarray:
        decoded.append(len(tokens))
        return real_decode(tokens, logits=logits)

    dc.decode = recording_decode  # type: ignore[method-assign]
    eng = ChatEngine(SpeculativeDecoder(tc, dc, FixedGamma(3)))
    msgs = [Message("system", "be brief"), Message("user", "hello")]
    first = list(eng.reply(msgs, GREEDY))
    reply = target.detokenize(token_ids(first))
    msgs2 = [*msgs, Message("assistant", reply), Message("user", "and then?")]
    decoded.clear()
    second = list(eng.reply(msgs2, GREEDY))
    stats = second[-1]
    assert isinstance(stats, GenerationStats)
    prompt2 = eng.tokenize_chat(msgs2)
    assert stats.cached_tokens >= len(eng.tokenize_chat(msgs))
    # The draft reused its prefix too (its catch-up, at its first step, includes the last token,
    # which the target evaluates in its first verify batch instead).
    assert decoded[0] <= len(prompt2) - stats.cached_tokens + 1
    fresh = list(ChatEngine(PlainDecoder(ctx(target))).reply(msgs2, GREEDY))
    assert token_ids(second) == token_ids(fresh)


def test_stop_strings_and_max_tokens(target: LlamaModel, close_draft: LlamaModel) -> None:
    dec = SpeculativeDecoder(ctx(target), ctx(close_draft), FixedGamma(5))
    prompt = prompt_of(target)
    events, stats = run(dec, prompt, T1.with_(seed=8, max_tokens=7))
    assert stats.generated_tokens == 7 and stats.stop_reason == "length"
    events, _ = run(dec, prompt, T1.with_(seed=8, max_tokens=60))
    text = "".join(e.text for e in events if isinstance(e, TokenEvent))
    stop = text[10:12]
    events, stats = run(dec, prompt, T1.with_(seed=8, max_tokens=60, stop=(stop,)))
    assert stats.stop_reason == "stop"
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == text[: text.find(stop)]


def test_full_context_ends_the_reply(target: LlamaModel, far_draft: LlamaModel) -> None:
    prompt = prompt_of(target)
    dec = SpeculativeDecoder(ctx(target, 64), ctx(far_draft, 64), FixedGamma(6))
    n_ctx = dec.target.n_ctx  # llama.cpp rounds the window up (to 256 here)
    events, stats = run(dec, prompt, T1.with_(seed=9, max_tokens=n_ctx))
    if stats.stop_reason != "eos":
        assert stats.stop_reason == "context"
        assert any(isinstance(e, NoticeEvent) for e in events)
        assert len(prompt) + stats.generated_tokens == n_ctx + 1  # the last needs no slot


# ------------------------------------------------------------------ vocabulary padding


def test_draft_with_a_larger_vocabulary_only_proposes_shared_ids(
        target: LlamaModel, tiny_other_vocab: Path) -> None:
    draft = LlamaModel(tiny_other_vocab)  # 60 tokens: the target's 52 plus 8 more
    dec = SpeculativeDecoder(ctx(target), ctx(draft), FixedGamma(4))
    assert dec.n_shared == 52
    prompt = prompt_of(target)
    for seed in range(5):
        events, _ = run(dec, prompt, T1.with_(seed=seed, max_tokens=30))
        assert all(e.token_id < 52 for e in events if isinstance(e, (TokenEvent, RejectedEvent)))
    plain, _ = run(PlainDecoder(ctx(target)), prompt, GREEDY)
    spec, _ = run(dec, prompt, GREEDY)
    assert token_ids(spec) == token_ids(plain)


def test_target_with_a_larger_vocabulary_stops_drafting_past_the_draft(
        tmp_path: Path, target: LlamaModel) -> None:
    big = LlamaModel(write_tiny_model(tmp_path / "big.gguf", TinySpec(seed=1),
                                      tokens=vocabulary(extra=8)))
    dec = SpeculativeDecoder(ctx(big), ctx(target), FixedGamma(3))
    prompt = prompt_of(big)
    past = 0
    for seed in range(10):
        events, stats = run(dec, prompt, T1.with_(seed=seed, max_tokens=40))
        ids = token_ids(events)
        past += any(t >= 52 for t in ids)
        assert stats.generated_tokens == 40
    assert past > 0  # the target did produce ids the draft cannot read, and nothing broke


# ----------------------------------------------------------------------- the γ policy


class StopAtTwo(PolicyBase):
    """A policy that asks for 5 but stops drafting after 2, recording what it is told."""

    def __init__(self) -> None:
        self.seen: list[StepEvent] = []
        self.confidences: list[float] = []

    def next_gamma(self) -> int:
        return 5

    def keep_drafting(self, drafted: int, top_prob: Callable[[], float]) -> bool:
        self.confidences.append(top_prob())
        return drafted < 2

    def observe(self, step: StepEvent) -> None:
        self.seen.append(step)


@pytest.mark.parametrize("settings", [GREEDY, T1.with_(seed=2, max_tokens=40)],
                         ids=["greedy", "sampled"])
def test_policy_can_stop_drafting_early_and_sees_every_step(
        target: LlamaModel, close_draft: LlamaModel, settings: SamplerSettings) -> None:
    policy = StopAtTwo()
    events, stats = run(SpeculativeDecoder(ctx(target), ctx(close_draft), policy),
                        prompt_of(target), settings)
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert policy.seen == steps and len(steps) == stats.steps
    assert max(s.gamma for s in steps) == 2
    assert all(0 < c <= 1 for c in policy.confidences)
    if settings.greedy:
        plain, _ = run(PlainDecoder(ctx(target)), prompt_of(target), settings)
        assert token_ids(events) == token_ids(plain)


class RecordsAvailable(PolicyBase):
    """A planner-like policy: n-gram chains when offered, else the draft model; records what
    the decoder offered each step."""

    plans_steps = True

    def __init__(self) -> None:
        self.offered: list[tuple[str, ...]] = []
        self.seen: list[StepEvent] = []

    def next_gamma(self) -> int:
        return 3

    def next_plan(self, available: tuple[str, ...]) -> Plan:
        self.offered.append(available)
        return chain("ngram" if "ngram" in available else "model", 3)

    def observe(self, step: StepEvent) -> None:
        self.seen.append(step)


def test_the_planner_is_offered_ngram_only_when_the_lookup_has_a_match(
        target: LlamaModel, close_draft: LlamaModel) -> None:
    policy = RecordsAvailable()
    # A prompt that repeats itself, so some steps have a match and some do not.
    prompt = prompt_of(target, "one two three one two three one two three four")
    dec = SpeculativeDecoder(ctx(target), ctx(close_draft), policy, drafters=("ngram", "model"))
    events, _ = run(dec, prompt, GREEDY.with_(max_tokens=40))
    assert len(policy.offered) == len(policy.seen)
    kinds = {("ngram" in a) for a in policy.offered}
    assert kinds == {True, False}, "the fixture should give steps with and without a match"
    for offered, step in zip(policy.offered, policy.seen, strict=True):
        assert "model" in offered
        # A step planned on n-gram always had something to propose: never an empty n-gram step.
        if "ngram" in offered:
            assert step.drafter == "ngram" and step.gamma > 0
        else:
            assert step.drafter == "model"
    plain, _ = run(PlainDecoder(ctx(target)), prompt, GREEDY.with_(max_tokens=40))
    assert token_ids(events) == token_ids(plain)


def test_ngram_can_propose_follows_the_sequence() -> None:
    d = NgramDrafter(n_min=2)
    d.reset([1, 2, 3, 4])
    assert not d.can_propose([1, 2, 3, 4])
    assert d.can_propose([1, 2, 3, 4, 1, 2])  # (1, 2) was followed by 3
    assert not d.can_propose([9, 9])  # a new sequence is indexed afresh


class RecordsLag(PolicyBase):
    def __init__(self) -> None:
        self.lags: list[int] = []

    def next_gamma(self) -> int:
        return 2

    def draft_lag(self, tokens: int) -> None:
        self.lags.append(tokens)


def test_the_policy_is_told_what_the_draft_has_not_read(target: LlamaModel,
                                                       close_draft: LlamaModel) -> None:
    policy = RecordsLag()
    dec = SpeculativeDecoder(ctx(target), ctx(close_draft), policy)
    prompt = prompt_of(target)
    events, _ = run(dec, prompt, GREEDY.with_(max_tokens=12))
    assert policy.lags == [len(prompt)]  # a fresh draft cache lacks the whole prompt
    longer = [*prompt, *token_ids(events), *prompt_of(target, "and again")]
    run(dec, longer, GREEDY.with_(max_tokens=4))
    # The draft kept what it read of the first reply: it lacks only the new turn (and at most
    # the reply's last tokens, which it never drafted after).
    assert 0 < policy.lags[1] < len(longer) - len(prompt)
