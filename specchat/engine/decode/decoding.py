"""What every decoder shares: the interface, prompt prefill with KV-prefix reuse, the clock, and
the text of a prompt's new part (for the γ policy's `begin`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from specchat.engine.decode.events import Event, GenerationStats, StepEvent
from specchat.engine.decode.fold import EventFold
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama.context import LlamaContext


class Decoder(Protocol):
    """Generates a reply to a tokenised prompt, streaming events; the last is GenerationStats."""

    name: str
    target: LlamaContext

    def run(self, prompt: Sequence[int], settings: SamplerSettings,
            cancel: threading.Event) -> Iterator[Event]: ...


def hold_prefix(ctx: LlamaContext, seq: Sequence[int], known: int = 0) -> int:
    """Bring the cache to exactly ``seq[:-1]``: every decoder's invariant between steps (the
    last token is evaluated by the next batch, whose first row is the next token's distribution).

    Evaluates only what differs from what the cache holds; ``known`` leading tokens are trusted
    to match already. Returns how many tokens were reused.
    """
    want = len(seq) - 1
    if known:
        reuse = min(want, known)
        ctx.truncate(reuse)
    else:  # a slot of a shared cache may take a start another slot holds (reuse_prefix)
        reuse = ctx.reuse_prefix(seq[:want])
    if reuse < want:
        ctx.decode(seq[reuse:want], logits="none")
    return reuse


def prefill(ctx: LlamaContext, prompt: Sequence[int]) -> tuple[npt.NDArray[np.float32], int]:
    """Bring the cache to exactly ``prompt``, evaluating only what differs from what it holds.

    Returns the logits row for the prompt's last token and how many tokens were reused. The
    last token is evaluated on its own, as a speculative decoder's plain first step evaluates
    it: the target's reply as calibration and the replays trace it. Plain decoding reads the
    whole prompt in one pass instead (:func:`read_prompt`).
    """
    reuse = hold_prefix(ctx, prompt)
    return ctx.decode(prompt[-1:], logits="last")[0], reuse


def read_prompt(ctx: LlamaContext, prompt: Sequence[int]
                ) -> tuple[npt.NDArray[np.float32], int]:
    """Bring the cache to exactly ``prompt`` and return the logits row for its last token and
    how many tokens were reused, reading what differs in one pass: llama-server's read, for
    plain decoding, which has no first step to share it with. (Where the whole prompt is
    cached, its last token is read again for its row.) Not a speculative decoder's way: that
    leaves the last token to its first step (:func:`hold_prefix`), so the read costs no pass
    of its own; :func:`prefill` reads it alone, as such a step does.
    """
    reuse = ctx.reuse_prefix(prompt[:-1])
    return ctx.decode(prompt[reuse:], logits="last")[0], reuse


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
    fold = EventFold()
    stats = fold.run(decoder.run(prompt, settings, cancel or threading.Event()), decoder.name)
    return FinishedRun(fold.token_ids, fold.steps, stats)


def new_text(detokenize: Callable[[Sequence[int]], str], tokens: Sequence[int], head: int = 160,
             tail: int = 96) -> str:
    """``tokens`` as text, the middle left out when there are more than ``head + tail``."""
    if len(tokens) <= head + tail:
        return detokenize(tokens)
    return detokenize(tokens[:head]) + " … " + detokenize(tokens[-tail:])
