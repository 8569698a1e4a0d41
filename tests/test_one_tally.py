"""One tally, one trace (issue 39): the stats bar counts a reply with the decoder's own tally,
so its α and τ at the reply's end are the saved reply's; the fate trace is kept once, by the
session, from the segments the worker sends."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.events import GenerationStats, StepEvent
from specchat.engine.decode.messages import Message
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.session.live import EventBatcher
from specchat.session.worker import ReplyChunk, ReplyDone, ReplyJob, run_reply
from specchat.store.fates import FateTrace

SAMPLED = SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=48)
GREEDY = SamplerSettings(temperature=0, max_tokens=48)


def _ctx(path: Path) -> LlamaContext:
    return LlamaContext(LlamaModel(path), ContextSettings(n_ctx=512, n_threads=1))


@pytest.mark.parametrize(("drafter", "gamma", "settings"), [
    ("model", 3, SAMPLED), ("tree", 8, SAMPLED), ("ngram", 3, GREEDY)])
def test_the_live_figures_at_the_end_are_the_saved_ones(tiny_target: Path, tiny_draft: Path,
                                                       drafter: str, gamma: int,
                                                       settings: SamplerSettings) -> None:
    target = _ctx(tiny_target)
    dec = SpeculativeDecoder(target, _ctx(tiny_draft) if drafter != "ngram" else None,
                             FixedGamma(gamma), [drafter])
    prompt = target.model.tokenize("the cat sat on the mat, the cat sat on the mat, the cat",
                                   add_special=False, parse_special=False)
    final: GenerationStats | None = None
    drafted_by: set[str] = set()
    for seed in (1, 2):
        batcher = EventBatcher(interval=3600.0)
        for ev in dec.run(prompt, settings.with_(seed=seed), threading.Event()):
            if isinstance(ev, GenerationStats):
                final = ev
                live = batcher.snapshot()  # the bar just before the reply's own stats
                break
            if isinstance(ev, StepEvent) and ev.gamma:
                drafted_by.add(ev.drafter)
            batcher.add(ev)
        assert final is not None and final.drafted > 0 and final.rejections > 0
        assert (live.alpha, live.tau) == (final.alpha, final.tau)
        assert live.tau is not None and live.tau > 1.0
    assert drafted_by == {drafter}


def test_the_trace_is_the_segments_the_session_was_sent(tiny_target: Path,
                                                       tiny_draft: Path) -> None:
    target = _ctx(tiny_target)
    engine = ChatEngine(SpeculativeDecoder(target, _ctx(tiny_draft), FixedGamma(4), ["model"]))
    posted: list[object] = []
    job = ReplyJob(1, [Message("user", "hello there")], SAMPLED.with_(seed=3))
    stats = run_reply(job, engine, posted.append, stats_interval=3600.0)
    assert isinstance(posted[-1], ReplyDone) and not hasattr(posted[-1], "trace")
    trace = FateTrace()
    for m in posted:
        if isinstance(m, ReplyChunk):
            trace.extend(m.segments)
    kinds = {s.kind for s in trace.segments}
    assert {"a", "x"} <= kinds and stats.rejections > 0  # accepted and rejected drafts shown
    shown = "".join(s.text for s in trace.segments if s.kind not in ("x", "y"))
    assert shown == trace.text and len(trace.text) > 0
