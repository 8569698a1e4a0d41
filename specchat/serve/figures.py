"""What a reply carries beside its text: llama-server's ``timings``, OpenAI's ``usage``,
specchat's own figures (``specchat``: α, τ, the γ mode, and on request each token's fate), and
on request each token's log-probability, in OpenAI's two shapes (chat's ``content`` list, the
completions' parallel lists) and llama-server's (``completion_probabilities``). The writers
(chat and completions, ``/infill``, the Responses API) take what their shape has from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specchat.engine.decode.events import GenerationStats, TokenEvent, TokenLogprob
from specchat.engine.policy.in_force import InForce
from specchat.serve.job import Finished


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


def usage(stats: GenerationStats, prediction: dict[str, int] | None = None) -> dict[str, Any]:
    """OpenAI's usage; with a predicted output, its tokens that appear in the reply and the
    rest of it, as OpenAI's ``completion_tokens_details`` count them."""
    doc: dict[str, Any] = {
        "prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.generated_tokens,
        "total_tokens": stats.prompt_tokens + stats.generated_tokens}
    if prediction is not None:
        doc["completion_tokens_details"] = dict(prediction)
    return doc


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def extension(done: Finished, setup: InForce) -> dict[str, Any]:
    """What speculation did for this reply: α (drafted tokens kept / (kept + rejections)), τ
    (tokens per target pass) and beside it the acceptance length (1 + accepted / steps, as
    vLLM reports it), the decoder, drafters and γ mode in force, and the last step's
    choice as the planner labelled it ("plan · code")."""
    s, step = done.stats, done.last_step
    return {
        "alpha": _round(s.alpha), "tau": _round(s.tau),
        "acceptance_length": _round(s.acceptance_length), "decoder": setup.decoder,
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


def _token(pieces: Mapping[int, bytes], token: int, logprob: float) -> dict[str, Any]:
    """One token as OpenAI writes it in log-probabilities: its text (what it adds, a special
    token's marker), its UTF-8 bytes (a token may hold part of a character) and the figure."""
    data = pieces.get(token, b"")
    return {"token": data.decode("utf-8", errors="replace"), "logprob": logprob,
            "bytes": list(data)}


def chat_logprobs(tokens: Sequence[TokenEvent], pieces: Mapping[int, bytes]
                  ) -> list[dict[str, Any]]:
    """Chat's ``logprobs.content``: each token with its ``top_logprobs``."""
    return [{**_token(pieces, t.token_id, t.logprob.logprob),
             "top_logprobs": [_token(pieces, i, lp) for i, lp in t.logprob.top]}
            for t in tokens if t.logprob is not None]


def completion_logprobs(tokens: Sequence[TokenEvent], pieces: Mapping[int, bytes],
                        offset: int = 0) -> dict[str, Any]:
    """The completions API's ``logprobs``: parallel lists, ``text_offset`` counted in
    characters from the start of the completion (``offset``: the characters before)."""
    out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                                 "text_offset": []}
    for t in tokens:
        if t.logprob is not None:
            out["tokens"].append(_token(pieces, t.token_id, 0.0)["token"])
            out["token_logprobs"].append(t.logprob.logprob)
            out["top_logprobs"].append({_token(pieces, i, 0.0)["token"]: lp
                                        for i, lp in t.logprob.top})
            out["text_offset"].append(offset)
        offset += len(t.text)
    return out


def server_probabilities(tokens: Sequence[TokenEvent], pieces: Mapping[int, bytes]
                         ) -> list[dict[str, Any]]:
    """llama-server's ``completion_probabilities`` (its ``n_probs``), ids included."""
    def entry(token: int, lp: TokenLogprob | float) -> dict[str, Any]:
        value = lp.logprob if isinstance(lp, TokenLogprob) else lp
        return {"id": token, **_token(pieces, token, value)}

    return [{**entry(t.token_id, t.logprob),
             "top_logprobs": [entry(i, lp) for i, lp in t.logprob.top]}
            for t in tokens if t.logprob is not None]
