"""What a race found: both timelines and the figures derived from them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specchat.engine.sampling import SamplerSettings
from specchat.race.timeline import RaceTimeline


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where two token sequences differ (a length counts), or None."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def gamma_runs(gammas: Sequence[int]) -> list[tuple[int, int]]:
    """``[4, 4, 4, 2, 4]`` → ``[(4, 3), (2, 1), (4, 1)]``: γ and how many steps in a row."""
    runs: list[tuple[int, int]] = []
    for g in gammas:
        if runs and runs[-1][0] == g:
            runs[-1] = (g, runs[-1][1] + 1)
        else:
            runs.append((g, 1))
    return runs


def gamma_trace_text(gammas: Sequence[int], limit: int = 8) -> str:
    """``4×12 → 2×1 → 4×3``; the first ``limit`` runs, then how many more."""
    runs = gamma_runs(gammas)
    if not runs:
        return "–"
    parts = [f"{g}×{n}" for g, n in runs[:limit]]
    if len(runs) > limit:
        parts.append(f"… (+{len(runs) - limit} changes)")
    return " → ".join(parts)


@dataclass(frozen=True)
class RaceResult:
    prompt: str
    pair: str  # what raced, e.g. "demo" or "target + draft"
    settings: SamplerSettings
    plain: RaceTimeline
    spec: RaceTimeline
    category: str | None = None  # the Spec-Bench category of a built-in prompt

    @property
    def greedy(self) -> bool:
        return self.settings.greedy

    @property
    def speedup(self) -> float | None:
        """Speculative tokens/s over plain tokens/s, prompt processing included in both."""
        return self.spec.tok_s / self.plain.tok_s if self.plain.tok_s > 0 else None

    @property
    def alpha(self) -> float | None:
        return self.spec.stats.alpha

    @property
    def tau(self) -> float | None:
        return self.spec.stats.tau

    @property
    def gammas(self) -> list[int]:
        return [s.gamma for s in self.spec.steps]

    @property
    def difference(self) -> int | None:
        """The first token position where the two replies differ; None when identical."""
        return first_difference(self.plain.token_ids, self.spec.token_ids)

    @property
    def identical(self) -> bool:
        return self.difference is None

    def verdict(self) -> str:
        """The identical-output check, in words."""
        if self.identical:
            return "outputs identical ✓" + ("" if self.greedy else " (sampled, same seed)")
        if not self.greedy:
            return (f"outputs differ from token {self.difference} on: expected when sampling "
                    f"(T={self.settings.temperature:g}); both follow the target's distribution")
        return (f"outputs differ at token {self.difference} — a bug: greedy speculative "
                "decoding must reproduce plain greedy decoding")

    @property
    def is_bug(self) -> bool:
        return self.greedy and not self.identical

    def summary_lines(self) -> list[str]:
        p, s = self.plain, self.spec
        lines = [
            f"plain        {len(p.tokens):4d} tokens  {p.tok_s:7.1f} tok/s  "
            f"TTFT {_ms(p.ttft_s)}  elapsed {p.elapsed_s:6.2f} s",
            f"speculative  {len(s.tokens):4d} tokens  {s.tok_s:7.1f} tok/s  "
            f"TTFT {_ms(s.ttft_s)}  elapsed {s.elapsed_s:6.2f} s",
            f"speedup {_x(self.speedup)}  α {_f(self.alpha)}  τ {_f(self.tau)}  "
            f"γ {gamma_trace_text(self.gammas)}",
            self.verdict(),
        ]
        return lines


def _ms(v: float | None) -> str:
    return "    –  " if v is None else f"{v * 1000:5.0f} ms"


def _f(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}×"
