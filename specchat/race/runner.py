"""Run a race: warm up, then plain, then speculative — one after the other, never together.

Both runs share the CPU/GPU, so running them at once would slow each by the other; run in
turn, each gets the whole machine, and the replay puts them side by side afterwards. Before
each timed run both KV caches are cleared, so neither profits from the other's prompt.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from specchat.engine.chat import ChatEngine
from specchat.engine.chat_template import Message
from specchat.engine.decoding import Decoder
from specchat.engine.sampling import SamplerSettings
from specchat.errors import SpecchatError
from specchat.race.result import RaceResult
from specchat.race.timeline import RaceTimeline, record
from specchat.runtime import Runtime

WARMUP_TOKENS = 8


@dataclass(frozen=True)
class RaceSetup:
    prompt: str
    settings: SamplerSettings
    system: str | None = None
    category: str | None = None


class RaceCancelled(SpecchatError):
    pass


def run_race(runtime: Runtime, setup: RaceSetup, spec: Decoder, plain: Decoder | None = None,
             progress: Callable[[str], None] = lambda _m: None,
             cancel: threading.Event | None = None) -> RaceResult:
    """Race ``plain`` (default: the runtime's plain decoder) against ``spec`` on one prompt."""
    if spec.name == "plain":
        raise SpecchatError("a race needs a draft model (a pair) or n-gram drafting: "
                            "pick a pair with --pair")
    plain = plain or runtime.decoder(plain=True)
    cancel = cancel or threading.Event()
    messages = ([Message("system", setup.system)] if setup.system else []) + [
        Message("user", setup.prompt)]
    tokens = ChatEngine(plain).fit(messages, setup.settings.max_tokens).tokens
    warm = replace(setup.settings, max_tokens=min(WARMUP_TOKENS, setup.settings.max_tokens))
    runs: list[RaceTimeline] = []
    # Warm-up (untimed): pages the weights in and lets the CPU clock up, for both decoders.
    steps: list[tuple[str, str, Decoder, SamplerSettings]] = [
        ("warm-up", "warm-up", plain, warm), ("warm-up", "warm-up", spec, warm),
        ("plain", "recording the plain run (1/2)…", plain, setup.settings),
        ("speculative", "recording the speculative run (2/2)…", spec, setup.settings)]
    for label, message, decoder, settings in steps:
        if cancel.is_set():
            raise RaceCancelled("race cancelled")
        progress(message)
        runtime.clear_caches()
        timeline = record(label, decoder, tokens, settings, cancel)
        if timeline.stats.stop_reason == "cancelled":
            raise RaceCancelled("race cancelled")
        if label != "warm-up":
            runs.append(timeline)
    runtime.clear_caches()
    return RaceResult(setup.prompt, runtime.selection.label, setup.settings, runs[0], runs[1],
                      setup.category)
