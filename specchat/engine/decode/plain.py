"""Plain (non-speculative) decoding: one target forward pass per token."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from specchat.engine.decode.decoding import Clock, read_prompt
from specchat.engine.decode.events import Event, GenerationStats, NoticeEvent, TokenOrigin
from specchat.engine.decode.grammar import start
from specchat.engine.decode.reply import Reply
from specchat.engine.decode.sampling import (
    SamplerSettings,
    distribution,
    greedy_token,
    make_rng,
    token_logprobs,
)
from specchat.engine.llama.context import DecodeCancelled, LlamaContext


class PlainDecoder:
    name = "plain"

    def __init__(self, target: LlamaContext) -> None:
        self.target = target

    def run(self, prompt: Sequence[int], settings: SamplerSettings,
            cancel: threading.Event) -> Iterator[Event]:
        ctx = self.target
        clock = Clock()
        ctx.cancel = cancel
        reply = Reply(ctx.model, settings.stop)
        grammar = start(ctx.model, settings.grammar)
        try:
            row, reused = read_prompt(ctx, prompt)
        except DecodeCancelled:
            yield GenerationStats(prompt_tokens=len(prompt), total_s=clock.now(),
                                  stop_reason="cancelled")
            return
        prompt_s = clock.now()
        rng = make_rng(settings.seed)
        greedy = settings.greedy
        forwards = 0
        t_first = t_last = prompt_s
        reason = "length"
        while True:
            if grammar is not None:  # the masked row is the target's distribution here
                row = grammar.mask(row)
            dist = None if greedy else distribution(row, settings)
            token = greedy_token(row) if dist is None else dist.sample(rng)
            logprob = None if settings.logprobs is None else \
                token_logprobs(row, token, settings, dist)
            t_last = clock.now()
            if not reply.tokens:
                t_first = t_last
            yield from reply.add(token, TokenOrigin.PLAIN, t_last, logprob)
            if grammar is not None and not reply.done:
                grammar.advance((token,))
            if reply.done:
                reason = reply.stop_reason or "eos"
                break
            if reply.n_generated >= settings.max_tokens:
                break
            if cancel.is_set():
                reason = "cancelled"
                break
            if len(ctx.tokens) + 1 > ctx.n_ctx:
                reason = "context"
                yield NoticeEvent(f"the context window is full ({ctx.n_ctx} tokens): reply cut short")
                break
            try:
                row = ctx.decode((token,), logits="last")[0]
            except DecodeCancelled:
                reason = "cancelled"
                break
            forwards += 1
        yield from reply.flush()
        yield GenerationStats(
            prompt_tokens=len(prompt), cached_tokens=reused, generated_tokens=reply.n_generated,
            prompt_s=prompt_s, ttft_s=t_first, decode_s=t_last - t_first, total_s=clock.now(),
            stop_reason=reason, target_forwards=forwards + 1,
        )
