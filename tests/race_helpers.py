"""Fixed race timelines (no models, no clocks) and a decoder double that changes one token."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace

from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.events import (
    Event,
    GenerationStats,
    RejectedEvent,
    StepEvent,
    TokenEvent,
    TokenOrigin,
)
from specchat.engine.decode.sampling import SamplerSettings
from specchat.race.result import RaceResult
from specchat.race.timeline import RaceTimeline, TimedEvent

WORDS = ["Red", ",", " yellow", " and", " blue", " are", " the", " primary", " colours", "."]
A, C, B = TokenOrigin.ACCEPTED, TokenOrigin.CORRECTED, TokenOrigin.BONUS


def plain_timeline(words: Sequence[str] = WORDS, per_token: float = 0.1,
                   ttft: float = 0.2) -> RaceTimeline:
    events = [TimedEvent(ttft + i * per_token,
                         TokenEvent(i, w, TokenOrigin.PLAIN, i, ttft + i * per_token))
              for i, w in enumerate(words)]
    end = ttft + len(words) * per_token
    stats = GenerationStats(prompt_tokens=12, generated_tokens=len(words), ttft_s=ttft,
                            total_s=end, target_forwards=len(words), stop_reason="eos")
    return RaceTimeline("plain", (*events, TimedEvent(end, stats)))


def spec_timeline(words: Sequence[str] = WORDS, step_s: float = 0.15, ttft: float = 0.25,
                  ids: Sequence[int] | None = None) -> RaceTimeline:
    """Steps of γ = 4: 3 accepted + a correction (with its rejected draft), then a full
    accept + bonus, repeating; every token of a step arrives at the step's time."""
    ids = list(range(len(words))) if ids is None else list(ids)
    events: list[TimedEvent] = []
    pos, t, k, acc, rej = 0, ttft, 0, 0, 0
    while pos < len(words):
        full = k % 2 == 1
        n = min(5 if full else 4, len(words) - pos)
        for j in range(n):
            last = j == n - 1
            origin = (B if full else C) if last else A
            if last and not full:
                events.append(TimedEvent(t, RejectedEvent(90 + pos, " green", pos + j, 0.1,
                                                          0.6)))
            events.append(TimedEvent(t, TokenEvent(ids[pos + j], words[pos + j], origin,
                                                   pos + j, t)))
        accepted = n - 1
        acc += accepted
        rej += 0 if full else 1
        events.append(TimedEvent(t, StepEvent(4, accepted, 0.01, 0.02, "draft", pos, n)))
        pos, t, k = pos + n, t + step_s, k + 1
    end = t - step_s + 0.01
    stats = GenerationStats(prompt_tokens=12, generated_tokens=len(words), ttft_s=ttft,
                            total_s=end, steps=k, drafted=4 * k, accepted=acc, rejections=rej,
                            target_forwards=k, stop_reason="eos")
    return RaceTimeline("speculative", (*events, TimedEvent(end, stats)))


def fixed_result(spec_ids: Sequence[int] | None = None) -> RaceResult:
    return RaceResult("Name the primary colours.", "tiny", SamplerSettings(temperature=0, seed=1,
                      max_tokens=10), plain_timeline(), spec_timeline(ids=spec_ids), "qa")


class ChangeOneToken:
    """Wraps a decoder and replaces the token at ``position`` with another id: a speculative
    decoder with a bug, to see the race report one."""

    def __init__(self, inner: Decoder, position: int = 3) -> None:
        self.inner = inner
        self.name = inner.name
        self.target = inner.target
        self.position = position

    def run(self, prompt: Sequence[int], settings: SamplerSettings,
            cancel: threading.Event) -> Iterator[Event]:
        for ev in self.inner.run(prompt, settings, cancel):
            if isinstance(ev, TokenEvent) and ev.position == self.position:
                other = (ev.token_id + 1) % self.target.model.n_vocab
                text = self.target.model.piece(other).decode("utf-8", errors="replace")
                ev = replace(ev, token_id=other, text=text)
            yield ev
