"""A race on disk: ``report.md`` (setup, figures, both outputs), ``race.svg`` (cumulative
tokens over time, both runs) and ``race.json`` (setup and figures, for scripts)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.race.result import RaceResult, gamma_trace_text
from specchat.race.timeline import RaceTimeline
from specchat.report.charts import PLAIN_COLOUR, SPEC_COLOUR, Series, step_chart
from specchat.report.markdown import fence, quote, table

CHART = "race.svg"
REPORT = "report.md"
SUMMARY = "race.json"


@dataclass(frozen=True)
class Written:
    markdown: Path
    charts: tuple[Path, ...]
    summary: Path | None = None  # race.json


def cumulative_points(run: RaceTimeline) -> list[tuple[float, float]]:
    return [(t, i + 1) for i, t in enumerate(run.token_times)]


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v * 1000:.0f} ms"


def _f(v: float | None, fmt: str = ".2f") -> str:
    return "–" if v is None else format(v, fmt)


def _runs(result: RaceResult) -> str:
    n = len(result.runs[0])
    return f"medians of {n} runs per side (min–max)" if n > 1 else "one run per side"


def race_markdown(result: RaceResult, chart: str | None = CHART) -> str:
    s = result.settings
    where = f" (Spec-Bench {result.category})" if result.category else ""
    rows = [[run.label, str(len(run.tokens)), f"{run.tok_s:.1f}", _ms(run.ttft_s),
             f"{run.elapsed_s:.2f} s", run.stats.stop_reason]
            for run in (result.plain, result.spec)]
    parts = [
        f"# specchat race — {result.pair}",
        "A synchronized replay of two sequential runs: the same target model answered the same "
        "prompt plainly, then with speculative decoding, one after the other (never at the same "
        "time, so neither slowed the other), with the same seed and sampler settings. A "
        "warm-up run before them was not timed. Times include processing the prompt.",
        f"Sampling: T = {s.temperature:g}"
        + ("" if s.greedy else f", top-k {s.top_k}, top-p {s.top_p:g}, min-p {s.min_p:g}")
        + f", seed {s.seed}, at most {s.max_tokens} tokens.",
        f"## Prompt{where}",
        quote(result.prompt),
        "## Result",
        table(["run", "tokens", "overall tok/s", "time to first token", "elapsed", "stopped"],
              rows),
        "\n".join([
            f"- **{_runs(result)}:** " + "; ".join(
                f"{name} {result.side_line(side).split(None, 1)[1]}"
                for side, name in ((0, "plain"), (1, "speculative"))),
            f"- **decode speedup** (once the replies started): {_f(result.decode_speedup)}× · "
            f"**overall speedup:** {_f(result.speedup)}×",
            f"- **α** (draft tokens accepted): {_f(result.alpha)} · **τ** (tokens per target "
            f"pass): {_f(result.tau)} · **acceptance length** (1 + accepted / steps, as vLLM "
            f"reports it): {_f(result.spec.stats.acceptance_length)}",
            f"- **γ trace** (draft length × steps): {gamma_trace_text(result.gammas, 20)}",
            *([f"- **speculative side:** drafter {', '.join(result.drafters) or '–'}, γ mode "
               f"{result.gamma_mode or '–'}"] if result.setup_line() else []),
            f"- **check:** {result.verdict()}",
            *([f"- **planner:** {result.planner_text()}"] if result.planner_text() else []),
            *([f"- **why:** {result.why}"] if result.why else []),
            *([f"- **noise:** {result.noise}"] if result.noise else []),
            *([f"- **tip:** {result.tip}"] if result.tip else []),
        ]),
    ]
    if chart:
        parts.append(f"![Cumulative tokens over time, plain vs speculative]({chart})")
    parts += ["## Plain output", fence(result.plain.text),
              "## Speculative output", fence(result.spec.text)]
    return "\n\n".join(parts) + "\n"


def write_race_report(result: RaceResult, folder: Path) -> Written:
    folder.mkdir(parents=True, exist_ok=True)
    chart = step_chart(
        [Series(f"plain {result.plain.tok_s:.1f} tok/s overall", PLAIN_COLOUR,
                cumulative_points(result.plain)),
         Series(f"speculative {result.spec.tok_s:.1f} tok/s overall", SPEC_COLOUR,
                cumulative_points(result.spec))],
        f"Cumulative tokens over time — {result.pair}" + (
            f" · drafter {', '.join(result.drafters) or '–'} · γ {result.gamma_mode or '–'}"
            if result.setup_line() else ""), "time since start (s)",
        "tokens generated")
    svg = chart.write(folder / CHART)
    md = folder / REPORT
    md.write_text(race_markdown(result), encoding="utf-8")
    summary = folder / SUMMARY
    summary.write_text(json.dumps(race_json(result), indent=2, ensure_ascii=False) + "\n",
                       encoding="utf-8")
    return Written(md, (svg,), summary)


def race_json(result: RaceResult) -> dict[str, Any]:
    """The race's setup and figures for scripts: what ran (pair, drafters, γ mode, sampling)
    and what it measured (medians over the runs)."""
    s = result.settings

    def side(n: int) -> dict[str, Any]:
        run = (result.plain, result.spec)[n]
        return {"tokens": len(run.tokens),
                "tok_s": result.spread(n, "tok_s").median,
                "decode_tok_s": result.spread(n, "decode_tok_s").median,
                "ttft_s": result.spread(n, "ttft_s").median, "runs": len(result.runs[n]),
                "stop_reason": run.stats.stop_reason}

    return {
        "pair": result.pair, "device": result.device, "category": result.category,
        "prompt": result.prompt,
        "speculative": {"drafters": list(result.drafters), "gamma_mode": result.gamma_mode},
        "sampling": {"temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p,
                     "min_p": s.min_p, "seed": s.seed, "max_tokens": s.max_tokens},
        "plain": side(0), "spec": side(1),
        "decode_speedup": result.decode_speedup, "speedup": result.speedup,
        "alpha": result.alpha, "tau": result.tau,
        "acceptance_length": result.spec.stats.acceptance_length, "identical": result.identical,
        "verdict": result.verdict(),
    }
