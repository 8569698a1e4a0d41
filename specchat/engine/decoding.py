"""What every decoder shares: the interface, prompt prefill with KV-prefix reuse, and the clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from specchat.engine.events import Event, GenerationStats, StepEvent, TokenEvent
from specchat.engine.model import LlamaContext
from specchat.engine.sampling import SamplerSettings


class Decoder(Protocol):
    """Generates a reply to a tokenised prompt, streaming events; the last is GenerationStats."""

    name: str
    target: LlamaContext

    def run(self, prompt: Sequence[int], settings: SamplerSettings,
            cancel: threading.Event) -> Iterator[Event]: ...


def prefill(ctx: LlamaContext, prompt: Sequence[int]) -> tuple[npt.NDArray[np.float32], int]:
    """Bring the cache to exactly ``prompt``, evaluating only what differs from what it holds.

    Returns the logits row for the prompt's last token and how many tokens were reused.
    """
    reuse = ctx.common_prefix(prompt)
    if reuse == len(prompt):
        reuse -= 1  # the last token must be evaluated again for its logits
    ctx.truncate(reuse)
    rows = ctx.decode(prompt[reuse:], logits="last")
    return rows[0], reuse


class Clock:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.start


@dataclass(frozen=True)
class FinishedRun:
    """What a decoder produced, run to its end: the token ids, the steps, the stats."""

    tokens: list[int]
    steps: list[StepEvent]
    stats: GenerationStats


def run_to_end(decoder: Decoder, prompt: Sequence[int], settings: SamplerSettings,
               cancel: threading.Event | None = None) -> FinishedRun:
    tokens: list[int] = []
    steps: list[StepEvent] = []
    for ev in decoder.run(prompt, settings, cancel or threading.Event()):
        if isinstance(ev, TokenEvent):
            tokens.append(ev.token_id)
        elif isinstance(ev, StepEvent):
            steps.append(ev)
        elif isinstance(ev, GenerationStats):
            return FinishedRun(tokens, steps, ev)
    raise RuntimeError(f"the {decoder.name} decoder ended without its stats")
