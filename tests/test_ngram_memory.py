"""The n-gram drafter's memory of earlier requests: what it keeps, what a long match proposes,
and a regenerated reply drafted from it, token-identical to plain decoding."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from specchat.engine.decode.events import GenerationStats, StepEvent, TokenEvent
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.registry import DrafterEnv
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.drafters._ngram_memory import NgramMemory
from specchat.engine.drafters.ngram import MEMORY, NgramDrafter, build
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings

GREEDY = SamplerSettings(temperature=0, max_tokens=48)


def test_a_long_match_proposes_what_followed_it() -> None:
    m = NgramMemory(n=4)
    m.remember([1, 2, 3, 4, 5, 6, 7, 8])
    assert m.follows([9, 9, 1, 2, 3, 4], 3)[0] == [5, 6, 7]
    assert m.follows([2, 3, 4, 5], 10)[0] == [6, 7, 8]
    assert m.follows([1, 2, 3, 9], 3)[0] == []  # the last n tokens must all repeat
    assert m.follows([2, 3, 4], 3)[0] == []  # shorter than a match
    assert m.follows([5, 6, 7, 8], 3)[0] == []  # nothing followed it
    assert m.follows([1, 2, 3, 4], 0)[0] == []


def test_the_most_recent_occurrence_wins_and_a_repeat_adds_nothing() -> None:
    m = NgramMemory(n=2)
    m.remember([1, 2, 3, 4])
    m.remember([1, 2, 5, 6])
    assert m.follows([1, 2], 2)[0] == [5, 6]
    m.remember([1, 2, 5, 6])
    assert m.tokens == 8
    m.remember([7, 8])  # no longer than a match: nothing to propose from
    assert m.tokens == 8


def test_the_oldest_sequences_go_first_when_full() -> None:
    m = NgramMemory(n=2, max_tokens=10)
    m.remember([1, 2, 3, 4])
    m.remember([5, 6, 7, 8])
    m.remember([9, 10, 11, 12])  # 12 tokens: the first sequence goes
    assert m.tokens == 8
    assert m.follows([1, 2], 2)[0] == []
    assert m.follows([5, 6], 2)[0] == [7, 8]
    assert m.follows([9, 10], 2)[0] == [11, 12]
    m.remember(list(range(100, 130)))  # longer than the whole memory: its end is kept
    assert m.tokens == 10 and m.follows([120, 121], 3)[0] == [122, 123, 124]
    assert m.follows([9, 10], 2)[0] == []


def test_bad_sizes() -> None:
    with pytest.raises(ValueError):
        NgramMemory(n=1)
    with pytest.raises(ValueError):
        NgramMemory(n=8, max_tokens=4)


def test_the_drafter_remembers_the_sequence_it_lets_go() -> None:
    memory = NgramMemory(n=4)
    d = NgramDrafter(n_min=2, memory=memory)
    prompt = [10, 11, 12, 13, 14]
    reply = [20, 21, 22, 23, 24, 25]
    d.reset(prompt)
    d.extend(reply)
    assert d.lookup(3) == []  # nothing repeats in this request, and nothing was said before
    d.reset([30, 31, 32])  # another request: the first is kept
    assert memory.tokens == len(prompt) + len(reply)
    d.reset(prompt)  # the first asked again: its reply is proposed from the prompt's end
    assert d.lookup(4) == reply[:4]
    d.extend(reply[:2])
    assert d.lookup(10) == reply[2:]


def test_a_short_match_of_an_earlier_request_is_not_proposed() -> None:
    memory = NgramMemory(n=4)
    d = NgramDrafter(n_min=2, memory=memory)
    d.reset([10, 11, 12, 13, 14, 20, 21, 22])
    d.reset([99, 98, 13, 14])  # ends as the first did, two tokens only
    assert d.lookup(3) == []


def test_without_a_memory_nothing_is_kept() -> None:
    d = NgramDrafter(n_min=2)
    d.reset([10, 11, 12, 13, 14, 20, 21, 22])
    d.reset([1])
    d.reset([10, 11, 12, 13, 14])
    assert d.lookup(3) == []


def test_drafters_of_one_runtime_share_one_memory(tiny_target: Path) -> None:
    model = LlamaModel(tiny_target)
    c = LlamaContext(model, ContextSettings(n_ctx=256, n_threads=1))
    try:
        kept: dict = {}
        a, b = (build(DrafterEnv(c, keep=kept)) for _ in range(2))
        assert a.memory is not None and a.memory is b.memory is kept[MEMORY]
        own = build(DrafterEnv(c))  # an environment nobody keeps for: a memory of its own
        assert own.memory is not None and own.memory is not a.memory
    finally:
        c.close()


def _run(dec: SpeculativeDecoder | PlainDecoder, prompt: list[int]
         ) -> tuple[list[int], GenerationStats, list[StepEvent]]:
    events = list(dec.run(prompt, GREEDY, threading.Event()))
    stats = events[-1]
    assert isinstance(stats, GenerationStats)
    return ([e.token_id for e in events if isinstance(e, TokenEvent)], stats,
            [e for e in events if isinstance(e, StepEvent)])


def test_a_regenerated_reply_is_drafted_from_memory_and_stays_exact(tiny_target: Path) -> None:
    model = LlamaModel(tiny_target)
    ctxs = [LlamaContext(model, ContextSettings(n_ctx=512, n_threads=1)) for _ in range(3)]
    try:
        first = model.tokenize("sun river stone cloud apple window thunder paper candle "
                               "garden silver morning")
        other = model.tokenize("blue green")
        assert len(first) > 16
        plain, _, _ = _run(PlainDecoder(ctxs[0]), first)

        def decoder(c: LlamaContext, memory: NgramMemory | None) -> SpeculativeDecoder:
            drafter = NgramDrafter(n_min=2, is_eog=model.is_eog, memory=memory)
            return SpeculativeDecoder(c, None, FixedGamma(4), [drafter])

        memory = NgramMemory()
        dec = decoder(ctxs[1], memory)
        once, s1, _ = _run(dec, first)
        _run(dec, other)
        again, s2, steps = _run(dec, first)
        assert once == again == plain  # greedy: the reply plain decoding writes, every time
        # The first time, the tiny model's reply repeats little of itself; asked again, the
        # whole reply is drafted from memory and kept (4 drafts a step, and the step's bonus).
        assert s2.drafted == s2.accepted >= 0.7 * len(plain), (s2.drafted, s2.accepted)
        assert s2.accepted > s1.accepted + 16, (s1.accepted, s2.accepted)
        assert all(s.drafter == "ngram" for s in steps if s.gamma > 0)
        # The control: the same three requests without a memory draft no more the third time.
        control = decoder(ctxs[2], None)
        _run(control, first)
        _run(control, other)
        _, s3, _ = _run(control, first)
        assert s3.accepted <= s1.accepted + 4, (s1.accepted, s3.accepted)
    finally:
        for c in ctxs:
            c.close()


def test_letting_the_oldest_go_keeps_what_later_sequences_say() -> None:
    m = NgramMemory(n=2, max_tokens=12)
    m.remember([1, 2, 3, 4, 5])
    m.remember([6, 7, 1, 2, 9])  # [1, 2] now points here
    m.remember([10, 11, 12, 13])  # 14 tokens: the first goes
    assert m.tokens == 9
    assert m.follows([1, 2], 2)[0] == [9]  # still there: a later sequence said it
    assert m.follows([3, 4], 1)[0] == []  # only the first said it
    assert m.follows([11, 12], 1)[0] == [13]
    assert len(m._index) == 3 + 2  # no run of the first is left behind


def test_a_request_with_a_seed_is_drafted_from_its_own_tokens_alone() -> None:
    memory = NgramMemory(n=4)
    d = NgramDrafter(n_min=2, memory=memory)
    d.reset([10, 11, 12, 13, 14, 20, 21, 22])
    d.reset([1])
    d.reset([10, 11, 12, 13, 14])
    d.configure(SamplerSettings(temperature=0.8, seed=3))
    assert d.lookup(3) == []
    d.configure(SamplerSettings(temperature=0.8))
    assert d.lookup(3) == [20, 21, 22]


def test_a_seed_reproduces_a_sampled_reply_after_the_memory_has_it(tiny_target: Path) -> None:
    model = LlamaModel(tiny_target)
    c = LlamaContext(model, ContextSettings(n_ctx=512, n_threads=1))
    try:
        prompt = model.tokenize("sun river stone cloud apple window thunder paper candle "
                                "garden silver morning")
        seeded = SamplerSettings(temperature=0.9, top_k=0, min_p=0.0, seed=5, max_tokens=40)
        drafter = NgramDrafter(n_min=2, is_eog=model.is_eog, memory=NgramMemory())
        dec = SpeculativeDecoder(c, None, FixedGamma(4), [drafter])

        def reply(s: SamplerSettings) -> list[int]:
            return [e.token_id for e in dec.run(prompt, s, threading.Event())
                    if isinstance(e, TokenEvent)]

        first = reply(seeded)
        assert reply(GREEDY) and reply(seeded) == first  # the memory held both replies
        # Without a seed the memory drafts it (the control: the memory did have it).
        _, s, _ = _run(dec, prompt)
        assert s.accepted > 0
    finally:
        c.close()


def test_a_reply_that_departed_re_joins_near_where_it_left() -> None:
    m = NgramMemory(n=4)
    old = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
    m.remember(old)
    said, place = m.follows([0, 1, 2, 3, 4], 3)
    assert said == [5, 6, 7] and place is not None
    # The reply wrote 5, then 99 for 6 and 7, then went on as before: 8 9 10 11.
    reply = [0, 1, 2, 3, 4, 5, 99, 8, 9, 10]
    assert m.follows(reply, 3) == ([], None)  # no long match
    assert m.near(reply, place, 3) == ([], None)  # three tokens of the old text: not yet
    reply.append(11)
    said, again = m.near(reply, place, 3)
    assert said == [12, 13, 14] and again is not None and again.at == 11
    # Far from where it left, the same short run is no evidence.
    far = [7] * 60 + [8, 9, 10, 11]
    assert m.near(far, place, 3) == ([], None)


def test_the_drafter_follows_a_remembered_reply_past_a_change() -> None:
    memory = NgramMemory(n=4)
    d = NgramDrafter(n_min=2, memory=memory)
    prompt = [50, 51, 52, 53, 54]
    reply = [20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]
    d.reset(prompt + reply)
    d.reset([1])
    d.reset(prompt)
    assert d.lookup(3) == [20, 21, 22]
    d.extend([20, 21, 77, 23, 24, 25])  # one token changed
    assert d.lookup(3) == []  # three tokens of the remembered reply since: not yet
    d.extend([26])
    assert d.lookup(3) == [27, 28, 29]  # re-joined on four tokens, near where it left


def test_a_conversation_is_kept_once_and_its_next_turn_replaces_it() -> None:
    m = NgramMemory(n=2)
    first = m.remember([1, 2, 3, 4])
    assert first is not None
    assert m.remember([1, 2, 3, 4, 5, 6], replacing=first) == first  # the next turn
    assert m.tokens == 6 and m.follows([4, 5], 1)[0] == [6]
    other = m.remember([1, 2, 9, 9], replacing=first)  # not a continuation: kept beside it
    assert other is not None and other != first and m.tokens == 10


def test_a_reply_is_found_by_the_other_slot_once_it_ended() -> None:
    memory = NgramMemory(n=4)
    a, b = NgramDrafter(n_min=2, memory=memory), NgramDrafter(n_min=2, memory=memory)
    prompt, reply = [50, 51, 52, 53, 54], [20, 21, 22, 23]
    a.reset(prompt)
    a.extend(reply)
    a.settle(prompt + reply)  # the request on slot a ended
    b.reset(prompt)  # the same prompt, served on slot b
    assert b.lookup(3) == [20, 21, 22]
    a.reset(prompt + reply + [7, 8])  # a's conversation goes on: held once, not twice
    a.settle(prompt + reply + [7, 8, 9])
    assert memory.tokens == len(prompt + reply) + 3
