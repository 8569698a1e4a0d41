"""A generation's events as OpenAI's JSON: a whole response, or streamed chunks for
server-sent events, each carrying what llama-server reports beside it (``timings``) and
specchat's own figures (``specchat``: α, τ, the γ mode, and on request each token's fate)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specchat.engine.decode.events import GenerationStats, TokenEvent
from specchat.engine.policy.in_force import InForce
from specchat.runtime import PREDICTION
from specchat.serve.api_errors import ApiError
from specchat.serve.worker import Finished

DONE = b"data: [DONE]\n\n"

# The engine's stop reasons in OpenAI's words. A cancelled reply has no reader, except at
# shutdown, where "length" says it was cut short.
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "context": "length",
                  "cancelled": "length"}


def dumps(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def sse(doc: Any) -> bytes:
    """One server-sent event. JSON escapes newlines, so one ``data:`` line always holds it."""
    return b"data: " + dumps(doc).encode("utf-8") + b"\n\n"


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _rate(n: int, ms: float) -> float:
    return round(n * 1000 / ms, 3) if ms > 0 else 0.0


def timings(stats: GenerationStats) -> dict[str, Any]:
    """llama-server's ``timings`` object: the prompt's evaluation (tokens not found in the KV
    cache) and the generation after it, and how many drafted tokens the target kept."""
    prompt_n = stats.prompt_tokens - stats.cached_tokens
    prompt_ms = _ms(stats.prompt_s)
    predicted_ms = _ms(max(0.0, stats.total_s - stats.prompt_s))
    predicted_n = stats.generated_tokens
    return {
        "cache_n": stats.cached_tokens,
        "prompt_n": prompt_n, "prompt_ms": prompt_ms,
        "prompt_per_token_ms": round(prompt_ms / prompt_n, 3) if prompt_n else 0.0,
        "prompt_per_second": _rate(prompt_n, prompt_ms),
        "predicted_n": predicted_n, "predicted_ms": predicted_ms,
        "predicted_per_token_ms": round(predicted_ms / predicted_n, 3) if predicted_n else 0.0,
        "predicted_per_second": _rate(predicted_n, predicted_ms),
        "draft_n": stats.drafted, "draft_n_accepted": stats.accepted,
    }


def usage(stats: GenerationStats, prediction_tokens: int | None = None) -> dict[str, Any]:
    """OpenAI's usage; with a predicted output, its tokens the reply kept (drafted from it and
    accepted) and the rest of it, as OpenAI's ``completion_tokens_details`` count them."""
    doc: dict[str, Any] = {
        "prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.generated_tokens,
        "total_tokens": stats.prompt_tokens + stats.generated_tokens}
    if prediction_tokens is not None:
        kept = min(stats.detail.accepted_by_drafter.get(PREDICTION, 0), prediction_tokens)
        doc["completion_tokens_details"] = {"accepted_prediction_tokens": kept,
                                            "rejected_prediction_tokens": prediction_tokens - kept}
    return doc


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def extension(done: Finished, setup: InForce) -> dict[str, Any]:
    """What speculation did for this reply: α (drafted tokens kept / (kept + rejections)), τ
    (tokens per target pass), the decoder, drafters and γ mode in force, and the last step's
    choice as the planner labelled it ("plan · code")."""
    s, step = done.stats, done.last_step
    return {
        "alpha": _round(s.alpha), "tau": _round(s.tau), "decoder": setup.decoder,
        "drafters": list(setup.drafters), "gamma_mode": setup.gamma_mode,
        "mode": step.mode if step is not None else None,
        "plan": step.reason if step is not None else None,
        "steps": s.steps, "steps_by_drafter": dict(s.detail.steps_by_drafter),
        "drafted": s.drafted, "accepted": s.accepted, "target_passes": s.target_forwards,
        "stop_reason": s.stop_reason, "notices": list(done.notices),
    }


def fates(tokens: Sequence[TokenEvent]) -> list[dict[str, Any]]:
    """Each token's text and fate (accepted, corrected, bonus, plain), for colouring."""
    return [{"id": t.token_id, "text": t.text, "fate": t.origin.value} for t in tokens]


@dataclass
class ReplyWriter:
    """The OpenAI JSON of one reply, chat or text completion, whole or as chunks."""

    chat: bool
    model: str
    setup: InForce
    with_fates: bool = False
    include_usage: bool = False
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if not self.id:
            self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]

    @property
    def _object(self) -> str:
        return "chat.completion" if self.chat else "text_completion"

    def _head(self, chunk: bool) -> dict[str, Any]:
        obj = self._object + (".chunk" if chunk and self.chat else "")
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": None}

    def _choice(self, text: str | None, finish: str | None, chunk: bool) -> dict[str, Any]:
        if not self.chat:
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        if chunk:
            delta = {} if text is None else {"content": text}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "message": {"role": "assistant", "content": text or ""},
                "logprobs": None, "finish_reason": finish}

    def first_chunk(self) -> dict[str, Any] | None:
        """A chat stream opens with the assistant's role, as OpenAI's does."""
        if not self.chat:
            return None
        doc = self._head(True)
        doc["choices"] = [{"index": 0, "delta": {"role": "assistant", "content": ""},
                           "logprobs": None, "finish_reason": None}]
        return doc

    def chunk(self, tokens: Sequence[TokenEvent]) -> dict[str, Any] | None:
        """The text of tokens committed together (None when they add no text and no fates
        were asked for: a character still incomplete)."""
        text = "".join(t.text for t in tokens)
        if not text and not self.with_fates:
            return None
        doc = self._head(True)
        doc["choices"] = [self._choice(text, None, True)]
        if self.with_fates:
            doc["specchat"] = {"tokens": fates(tokens)}
        return doc

    def final_chunk(self, done: Finished) -> dict[str, Any]:
        """The last chunk: why it ended, the usage, llama-server's timings and ours."""
        doc = self._head(True)
        doc["choices"] = [self._choice(None, FINISH_REASONS[done.stats.stop_reason], True)]
        doc["usage"] = usage(done.stats, done.prediction_tokens)
        doc["timings"] = timings(done.stats)
        doc["specchat"] = extension(done, self.setup)
        return doc

    def usage_chunk(self, done: Finished) -> dict[str, Any]:
        """OpenAI's ``stream_options.include_usage`` chunk: no choices, the usage."""
        doc = self._head(True)
        doc["choices"] = []
        doc["usage"] = usage(done.stats, done.prediction_tokens)
        return doc

    def response(self, tokens: Sequence[TokenEvent], done: Finished) -> dict[str, Any]:
        doc = self._head(False)
        text = "".join(t.text for t in tokens)
        doc["choices"] = [self._choice(text, FINISH_REASONS[done.stats.stop_reason], False)]
        doc["usage"] = usage(done.stats, done.prediction_tokens)
        doc["timings"] = timings(done.stats)
        ext = extension(done, self.setup)
        if self.with_fates:
            ext["tokens"] = fates(tokens)
        doc["specchat"] = ext
        return doc


def error_event(error: ApiError) -> bytes:
    """A failure after the stream began (its status is already 200): an error event, as
    llama-server sends one, then the stream ends."""
    return sse(error.body())
