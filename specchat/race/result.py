"""What a race found: both timelines and the figures derived from them."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama.batch_rounding import Parting, first_difference
from specchat.engine.llama.machine_load import MachineLoad
from specchat.engine.policy.in_force import in_force
from specchat.race.noise import Spread, noise_note
from specchat.race.timeline import RaceTimeline
from specchat.race.why import Costs, explain


def recorded_with(result: RaceResult, spec: Decoder) -> RaceResult:
    """``result`` with what its speculative side ran with: its drafters and γ mode."""
    setup = in_force(spec)
    return replace(result, drafters=setup.drafters, gamma_mode=setup.gamma_mode)


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


Divergence = Parting  # where greedy outputs part, examined (engine.llama.batch_rounding)


@dataclass(frozen=True)
class RaceResult:
    prompt: str
    pair: str  # what raced, e.g. "demo" or "target + draft"
    settings: SamplerSettings
    plain: RaceTimeline  # the median run of each side (the one replayed)
    spec: RaceTimeline
    category: str | None = None  # the Spec-Bench category of a built-in prompt
    plain_runs: tuple[RaceTimeline, ...] = ()  # every timed run, in the order they ran
    spec_runs: tuple[RaceTimeline, ...] = ()
    load: MachineLoad | None = None
    divergence: Divergence | None = None
    costs: Costs | None = None  # what a target token, a check and a draft token cost here
    device: str = "CPU"
    # What the speculative side ran with (engine.policy.in_force, read from its decoder).
    drafters: tuple[str, ...] = ()
    gamma_mode: str = ""
    # The load while the pair's stored calibration was timed (None: none, or not recorded).
    calibration_load: MachineLoad | None = None
    # Whether the pair had a stored calibration (None: not a pair, or not known).
    calibrated: bool | None = None

    @property
    def greedy(self) -> bool:
        return self.settings.greedy

    @property
    def runs(self) -> tuple[tuple[RaceTimeline, ...], tuple[RaceTimeline, ...]]:
        return (self.plain_runs or (self.plain,), self.spec_runs or (self.spec,))

    def spread(self, side: int, figure: str) -> Spread:
        """``figure``: tok_s (whole run), decode_tok_s or ttft_s, over every run of a side."""
        values = [getattr(t, figure) for t in self.runs[side]]
        return Spread.of([v for v in values if v is not None] or [0.0])

    def _ratio(self, figure: str) -> float | None:
        """Speculative over plain: the median of each round's ratio when the sides ran in
        rounds (plain, then speculative, back to back: a minute when the machine was busy
        weighs on both, where it stays in a ratio of the two sides' medians), else the ratio
        of the medians."""
        plains, specs = self.runs
        if len(plains) == len(specs) > 1:
            pairs = [b / a for a, b in ((getattr(p, figure), getattr(s, figure))
                                        for p, s in zip(plains, specs, strict=True))
                     if a and b]  # a one-token run has no decode speed: it reads 0
            if pairs:
                return statistics.median(pairs)
        p, s = self.spread(0, figure).median, self.spread(1, figure).median
        return s / p if p > 0 and s > 0 else None

    @property
    def speedup(self) -> float | None:
        """Speculative tokens/s over plain's, prompt included in both (see ``_ratio``)."""
        return self._ratio("tok_s")

    @property
    def decode_speedup(self) -> float | None:
        """The same once the replies have started: decoding alone, the prompt left out."""
        return self._ratio("decode_tok_s")

    @property
    def realised_vs_predicted(self) -> tuple[float, float] | None:
        """(median realised/predicted decode speed, the median forecast in tokens/s) over the
        speculative runs a planner chose the steps of: how well it knew this machine."""
        pairs = sorted((t.decode_tok_s / t.predicted_tok_s, t.predicted_tok_s)
                       for t in self.runs[1] if t.predicted_tok_s and t.decode_tok_s > 0)
        return pairs[(len(pairs) - 1) // 2] if pairs else None

    def planner_text(self) -> str:
        got = self.realised_vs_predicted
        if got is None:
            return ""
        ratio, forecast = got
        return (f"realised/predicted {ratio:.2f} (it forecast {forecast:.1f} tok/s from the "
                "costs and acceptance it measured)")

    @property
    def tip(self) -> str | None:
        """What would help the planner, when it chose the steps of an uncalibrated pair: it
        knew only the checks it had timed as it went, and guessed the others along a line
        through them (on a CPU, whose curve bends, too dear: it tries longer ones only where
        the guess costs little, so a copy's first replies used shorter lookups)."""
        if self.calibrated is not False or self.realised_vs_predicted is None:
            return None
        what = self.pair if " " not in self.pair else "TARGET DRAFT"
        return (f"the pair is not calibrated, so the planner timed its checks as it went: "
                f"`specchat models calibrate {what}` (about a minute) measures them all "
                "beforehand")

    @property
    def why(self) -> str:
        return explain(self.costs, self.device) if self.costs is not None else ""

    @property
    def noise(self) -> str | None:
        spreads = [self.spread(side, "tok_s") for side in (0, 1)]
        return noise_note(self.load, spreads, self.calibration_load)

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
        if self.divergence is not None and self.divergence.bound is not None:
            return self.divergence.verdict()
        return (f"outputs differ at token {self.difference} — a bug: greedy speculative "
                "decoding must reproduce plain greedy decoding")

    @property
    def is_bug(self) -> bool:
        near_tie = self.divergence is not None and self.divergence.near_tie
        return self.greedy and not self.identical and not near_tie

    def side_line(self, side: int) -> str:
        run = (self.plain, self.spec)[side]
        n = len(self.runs[side])
        tok_s, dec = self.spread(side, "tok_s"), self.spread(side, "decode_tok_s")
        ttft = self.spread(side, "ttft_s")
        name = ("plain", "speculative")[side]
        runs = f"  [{n} runs: median (min–max)]" if n > 1 else ""
        return (f"{name:12} {len(run.tokens):4d} tokens  TTFT {ttft.text('{:.2f}')} s  "
                f"decode {dec.text()} tok/s  overall {tok_s.text()} tok/s{runs}")

    def ratio_line(self) -> str:
        p_ttft, s_ttft = self.spread(0, "ttft_s").median, self.spread(1, "ttft_s").median
        ttft = f"{s_ttft / p_ttft:.2f}×" if p_ttft > 0 else "–"
        return (f"decode speedup {_x(self.decode_speedup)}  ·  overall {_x(self.speedup)}  ·  "
                f"TTFT speculative/plain {ttft}  ·  α {_f(self.alpha)}  τ {_f(self.tau)}  "
                f"γ {gamma_trace_text(self.gammas)}")

    def setup_line(self) -> str:
        """``speculative side: drafter ngram, model · γ mode plan`` ("" when not recorded)."""
        if not self.drafters and not self.gamma_mode:
            return ""
        return (f"speculative side: drafter {', '.join(self.drafters) or '–'} · γ mode "
                f"{self.gamma_mode or '–'}")

    def summary_lines(self) -> list[str]:
        lines = [self.side_line(0), self.side_line(1), self.ratio_line()]
        if self.setup_line():
            lines.append(self.setup_line())
        if self.planner_text():
            lines.append(f"planner: {self.planner_text()}")
        if self.tip:
            lines.append(f"tip: {self.tip}")
        if self.why:
            lines.append(f"why: {self.why}")
        if self.noise:
            lines.append(f"noise: {self.noise}")
        lines.append(self.verdict())
        return lines


def _ms(v: float | None) -> str:
    return "    –  " if v is None else f"{v * 1000:5.0f} ms"


def _f(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}×"
