"""The figures of speculative decoding, each defined once: α, τ, acceptance length, expected
tokens per step, speed-up, and tokens per second.

Every reader of a reply's figures — the decoder's tally, the stats bar, the planner and
calibration, the race, ``prove``, the server and ``ask`` — computes them here, so the same
counts give the same numbers wherever they are shown. Pure arithmetic on counts and seconds:
nothing here knows an event type, a cost table or a drafter (``engine.decode.fold`` reads the
events; the callers bring their own costs).

- **α** (acceptance rate): accepted / (accepted + rejections), the maximum-likelihood rate of
  a cut geometric run (a step's kept drafts, ended by a rejection or by running out of drafts).
- **τ**: the reply's tokens per target verify pass (the first token, from the prompt's pass,
  included), 1.0 for plain decoding.
- **acceptance length**: 1 + accepted / steps, the mean tokens a step commits, as vLLM's
  ``SpecDecodingStats`` reports it (``mean_acceptance_length``), so the two can be compared.
  It differs from τ by the reply's first token and by a stop that cuts a step short.
- **expected tokens per step**: E(γ) = 1 + Σ_{i ≤ γ} Π_{j ≤ i} α_j; with one α for every
  position, (1 − α^(γ+1)) / (1 − α) (Leviathan et al. 2023).
- **speed-up**: E(γ) / (γ·t_draft + T_verify(γ+1)) × t_plain, the expected rate of a step
  against plain decoding's one token per pass.
- **tokens per second**: decode speed, the tokens after the first over the time from the
  first token to the last. The first token waits for the prompt, which is prompt processing,
  not decoding; every tok/s figure specchat shows is this one unless it says otherwise
  (``overall_rate``: tokens over the whole time, prompt included).
"""

from __future__ import annotations

from collections.abc import Sequence


def acceptance(accepted: int, rejections: int) -> float | None:
    """α: accepted / (accepted + rejections); None before any draft was judged."""
    n = accepted + rejections
    return accepted / n if n else None


def tokens_per_pass(tokens: int, passes: int) -> float | None:
    """τ: the reply's tokens per target verify pass (None for plain decoding: no steps)."""
    return tokens / passes if passes else None


def acceptance_length(accepted: int, steps: int) -> float | None:
    """1 + accepted / steps: the mean tokens a step commits (its kept drafts and the target's
    own token), vLLM's mean acceptance length. None with no steps (plain decoding)."""
    return 1.0 + accepted / steps if steps > 0 else None


def expected_tokens(alpha: float | Sequence[float], gamma: int) -> float:
    """Tokens a step of ``gamma`` drafts commits on average: its kept drafts plus the target's
    own token. ``alpha``: one acceptance rate for every position, or α_i per draft position
    (the chance position i is kept when 1..i−1 were; positions past the sequence's end are
    never kept)."""
    if gamma <= 0:
        return 1.0
    if isinstance(alpha, (int, float)):
        if alpha >= 1.0:
            return float(gamma + 1)
        return (1 - alpha ** (gamma + 1)) / (1 - alpha)
    total, run = 1.0, 1.0
    for a in alpha[:gamma]:
        run *= a
        total += run
    return total


def step_seconds(gamma: int, draft_token_s: float, verify_s: float) -> float:
    """A speculative step's cost: ``gamma`` draft tokens and one target pass over γ + 1."""
    return gamma * draft_token_s + verify_s


def speedup(tokens_per_step: float, step_s: float, plain_token_s: float) -> float | None:
    """Speed against plain decoding: ``tokens_per_step`` for ``step_s`` seconds, where plain
    decoding makes one token in ``plain_token_s``. None when the step costs nothing (no
    measured cost to compare)."""
    if step_s <= 0:
        return None
    return tokens_per_step / step_s * plain_token_s


def predicted_speedup(alpha: float | Sequence[float], gamma: int, draft_token_s: float,
                      verify_s: float, plain_token_s: float) -> float | None:
    """The speed-up of steps of ``gamma`` drafts at acceptance ``alpha``: a draft token costs
    ``draft_token_s``, the target's pass over γ + 1 tokens ``verify_s`` and over one token
    ``plain_token_s`` (the speed-up model of Leviathan et al. 2023, §3.4, on measured costs).
    γ = 0 is plain decoding: 1.0."""
    if gamma <= 0:
        return 1.0
    return speedup(expected_tokens(alpha, gamma), step_seconds(gamma, draft_token_s, verify_s),
                   plain_token_s)


def decode_rate(tokens: int, seconds: float) -> float:
    """Tokens per second of decoding: the ``tokens - 1`` after the first over ``seconds``, the
    time from the first token to the last (0.0 with fewer than two tokens or no time)."""
    n = tokens - 1
    return n / seconds if n > 0 and seconds > 0 else 0.0


def overall_rate(tokens: int, seconds: float) -> float:
    """Tokens over the whole time, the prompt's processing included (end to end)."""
    return tokens / seconds if seconds > 0 else 0.0
