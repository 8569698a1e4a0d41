"""``specchat bench --report DIR``: ``report.md`` plus, per temperature, an SVG chart of tokens/s per
category (plain and every speculative mode) and one of α per category."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specchat.bench.report import ALL, markdown
from specchat.report.charts import PALETTE, Series, bar_chart
from specchat.report.race_report import REPORT, Written


def _mode_label(row: dict[str, Any]) -> str:
    return row["mode"] if row["gamma"] is None else f"{row['mode']} γ={row['gamma']}"


def _categories(rows: Sequence[dict[str, Any]]) -> list[str]:
    cats = sorted({r["category"] for r in rows if r["category"] != ALL})
    return [*cats, ALL]


def _series(rows: Sequence[dict[str, Any]], categories: list[str], key: str,
            spec_only: bool) -> list[Series]:
    modes: list[str] = []
    for r in rows:
        label = _mode_label(r)
        if label not in modes and not (spec_only and r["gamma"] is None):
            modes.append(label)
    out = []
    for i, label in enumerate(modes):
        by_cat = {r["category"]: r[key] for r in rows if _mode_label(r) == label}
        colour = PALETTE[(i + (1 if spec_only else 0)) % len(PALETTE)]
        out.append(Series(label, colour, values=[by_cat.get(c) for c in categories]))
    return out


def _temp_tag(t: float) -> str:
    return f"T{t:g}".replace(".", "_")


def write_bench_report(doc: dict[str, Any], rows: Sequence[dict[str, Any]],
                       folder: Path) -> Written:
    folder.mkdir(parents=True, exist_ok=True)
    charts: list[Path] = []
    parts = [f"# specchat bench — {doc['pair']}",
             f"{doc['threads']} threads, at most {doc['config']['max_tokens']} tokens per reply, "
             f"load average {doc['load_avg_before'][0]:.2f} → {doc['load_avg_after'][0]:.2f}. "
             "tok/s counts the tokens after the first over the time they took (decoding once "
             "the reply has started; the first token belongs to the time to first token); "
             "speedup is against plain decoding at the same temperature."]
    for temp in sorted({r["temperature"] for r in rows}):
        at = [r for r in rows if r["temperature"] == temp]
        cats = _categories(at)
        tag = _temp_tag(temp)
        name = "greedy" if temp == 0 else f"T = {temp:g}"
        parts.append(f"## {name}")
        tps = bar_chart(cats, _series(at, cats, "tok_s", False),
                        f"Tokens/s per category ({name})", "tokens/s", "Spec-Bench category")
        charts.append(tps.write(folder / f"tokens-per-s-{tag}.svg"))
        parts.append(f"![Tokens/s per category, {name}]({charts[-1].name})")
        spec = _series(at, cats, "alpha", True)
        if spec:
            alpha = bar_chart(cats, spec, f"α per category ({name})", "acceptance rate α",
                              "Spec-Bench category")
            charts.append(alpha.write(folder / f"alpha-{tag}.svg"))
            parts.append(f"![α per category, {name}]({charts[-1].name})")
        parts.append(markdown(at, f"Figures ({name})").strip())
    md = folder / REPORT
    md.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return Written(md, tuple(charts))
