"""A conversation-level engine: render the chat with the model's template, fit it into the
context (dropping the oldest turns, never the system prompt), and run a decoder on it.

The conversation itself belongs to the caller (CLI, app); the engine holds only the models and
their KV caches, which carry the shared prefix over from one turn to the next.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specchat.engine.decode.chat_template import ChatTemplate
from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.events import Event, GenerationStats, NoticeEvent
from specchat.engine.decode.messages import Message
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama.model import LlamaModel
from specchat.errors import Cancelled, ContextFullError


@dataclass(frozen=True)
class FittedPrompt:
    tokens: list[int]
    messages: list[Message]
    dropped: int  # messages left out to make room


class ChatEngine:
    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder
        self.model: LlamaModel = decoder.target.model
        m = self.model
        self.template = ChatTemplate(m.chat_template, _special_text(m, m.bos), _special_text(m, m.eos))

    @property
    def n_ctx(self) -> int:
        return self.decoder.target.n_ctx

    def tokenize_chat(self, messages: Sequence[Message],
                      cancel: threading.Event | None = None,
                      tools: Sequence[Mapping[str, Any]] | None = None,
                      reply_start: str = "") -> list[int]:
        """The conversation as the model's prompt; ``tools`` go to the template, and
        ``reply_start`` is text the reply is made to begin with (a forced tool call's opening),
        tokenized with the prompt so its tokens are the ones the model would write."""
        text = self.template.render(messages, add_generation_prompt=True, cancel=cancel,
                                    tools=tools) + reply_start
        tokens = self.model.tokenize(text, add_special=self.model.add_bos, parse_special=True)
        bos = self.model.bos
        if len(tokens) >= 2 and tokens[0] == bos and tokens[1] == bos:
            tokens = tokens[1:]  # the template wrote BOS itself and the tokenizer added another
        return tokens

    def reserve(self, max_tokens: int) -> int:
        """The room kept for a reply of at most ``max_tokens``: a quarter of the context, at
        least 16 tokens, at most ``max_tokens``."""
        return min(max_tokens, max(16, self.n_ctx // 4))

    def fit(self, messages: Sequence[Message], max_tokens: int,
            cancel: threading.Event | None = None,
            tools: Sequence[Mapping[str, Any]] | None = None,
            reply_start: str = "") -> FittedPrompt:
        """Drop the oldest non-system turns until the prompt and some room for the reply fit
        (``tools`` and ``reply_start`` as :meth:`tokenize_chat` takes them)."""
        reserve = self.reserve(max_tokens)
        system = [m for m in messages[:1] if m.role == "system"]
        rest = list(messages[len(system):])
        dropped = 0
        while True:
            tokens = self.tokenize_chat(system + rest, cancel, tools=tools,
                                        reply_start=reply_start)
            if len(tokens) + reserve <= self.n_ctx:
                return FittedPrompt(tokens, system + rest, dropped)
            if len(rest) <= 1:
                raise ContextFullError(
                    f"the message is {len(tokens)} tokens and the context holds {self.n_ctx} "
                    f"(with {reserve} kept for the reply): shorten it or raise the context size")
            # drop the oldest turn: a user message and the assistant reply after it, with the
            # tool calls and results between (a result never goes without its call)
            n = 1
            while n < len(rest) - 1 and rest[n].role in ("assistant", "tool"):
                n += 1
            rest = rest[n:]
            dropped += n

    def reply(self, messages: Sequence[Message], settings: SamplerSettings,
              cancel: threading.Event | None = None,
              tools: Sequence[Mapping[str, Any]] | None = None,
              reply_start: str = "") -> Iterator[Event]:
        """The reply's events; ``tools`` are shown to the template, and ``reply_start`` is
        what the reply is made to begin with (see :meth:`tokenize_chat`)."""
        cancel = cancel or threading.Event()
        try:
            fitted = self.fit(messages, settings.max_tokens, cancel, tools, reply_start)
        except Cancelled:  # stopped while the template rendered: nothing was generated
            yield GenerationStats(stop_reason="cancelled")
            return
        if fitted.dropped:
            yield NoticeEvent(f"dropped the {fitted.dropped} oldest messages to fit the "
                              f"{self.n_ctx}-token context")
        yield from self.decoder.run(fitted.tokens, settings, cancel)


def _special_text(model: LlamaModel, token: int) -> str:
    return model.token_text(token) if 0 <= token < model.n_vocab else ""
