"""Report writers: SVG charts that parse as XML with every label whole, Markdown with the right
structure."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from race_helpers import fixed_result

from specchat.bench.report import summarize
from specchat.engine.decode.events import SpecDetail
from specchat.report.bench_report import write_bench_report
from specchat.report.charts import PALETTE, SPEC_COLOUR, Series, bar_chart, nice_ticks
from specchat.report.markdown import fence
from specchat.report.race_report import write_race_report

SVG = "{http://www.w3.org/2000/svg}"


def svg_texts(path: Path, role: str | None = None) -> list[str]:
    """The text elements of an SVG file (parsed as XML: it must be well-formed), by class."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    return [t.text or "" for t in root.iter(f"{SVG}text")
            if role is None or t.get("class") == role]


def test_ticks() -> None:
    assert nice_ticks(37) == [0, 10, 20, 30, 40]
    assert nice_ticks(0.8) == pytest.approx([0, 0.2, 0.4, 0.6, 0.8])
    assert nice_ticks(0) == [0.0, 1.0]


def test_bar_chart_keeps_every_label_whole_and_escapes_text(tmp_path: Path) -> None:
    cats = ["math", "math_reasoning", "retrieval-augmented generation", "all"]
    series = [Series("plain", PALETTE[0], values=[10.0, 12.5, None, 11.0]),
              Series("draft γ=3 <fixed> & \"fast\"", PALETTE[1], values=[20.0, 18.0, 9.0, 16.0])]
    path = bar_chart(cats, series, "Tokens/s per category", "tokens/s",
                     "Spec-Bench category").write(tmp_path / "c.svg")
    assert svg_texts(path, "category") == cats  # distinct, in full, in order
    assert svg_texts(path, "legend") == ["plain", "draft γ=3 <fixed> & \"fast\""]
    assert svg_texts(path, "title") == ["Tokens/s per category"]
    assert svg_texts(path, "y-label") == ["tokens/s"]
    assert svg_texts(path, "x-label") == ["Spec-Bench category"]
    assert "0" in svg_texts(path, "tick") and "20" in svg_texts(path, "tick")
    root = ET.parse(path).getroot()
    bars = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(bars) == 7  # one per value, none for None
    heights = {r.find(f"{SVG}title").text: float(r.get("height")) for r in bars}
    plain_math = heights["math · plain: 10"]
    assert heights["math · draft γ=3 <fixed> & \"fast\": 20"] == pytest.approx(2 * plain_math, abs=0.2)


def test_long_category_names_slant_instead_of_overlapping(tmp_path: Path) -> None:
    short = bar_chart(["qa", "math"], [Series("a", PALETTE[0], values=[1.0, 2.0])], "t",
                      "y").write(tmp_path / "s.svg")
    many = [f"category_number_{i}" for i in range(12)]
    long = bar_chart(many, [Series("a", PALETTE[0], values=[1.0] * 12)], "t",
                     "y").write(tmp_path / "l.svg")

    def rotated(path: Path) -> list[bool]:
        return [t.get("transform") is not None for t in ET.parse(path).getroot().iter(f"{SVG}text")
                if t.get("class") == "category"]

    assert rotated(short) == [False, False] and all(rotated(long))
    assert svg_texts(long, "category") == many


def md_tables(md: str) -> list[list[str]]:
    """The tables of a Markdown text, each as its lines; each line checked for cell counts."""
    tables, current = [], []
    for line in [*md.splitlines(), ""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    for t in tables:
        assert re.fullmatch(r"\|(---\|)+", t[1]), t[1]
        widths = {len(re.split(r"(?<!\\)\|", row)) for row in t}
        assert len(widths) == 1, t
    return tables


def test_race_report(tmp_path: Path) -> None:
    written = write_race_report(fixed_result(), tmp_path / "r")
    chart = written.charts[0]
    assert chart.name == "race.svg"
    root = ET.parse(chart).getroot()
    assert (root.get("width"), root.get("height")) == ("900", "520")
    lines = {p.get("data-series"): p for p in root.iter(f"{SVG}polyline")}
    assert len(lines) == 2 and all(k.startswith(("plain ", "speculative ")) for k in lines)
    spec = next(p for k, p in lines.items() if k.startswith("speculative"))
    assert spec.get("stroke") == SPEC_COLOUR and len(spec.get("points").split()) == 1 + 2 * 10
    assert svg_texts(chart, "x-label") == ["time since start (s)"]
    assert svg_texts(chart, "y-label") == ["tokens generated"]
    assert [t.split()[0] for t in svg_texts(chart, "legend")] == ["plain", "speculative"]
    md = written.markdown.read_text(encoding="utf-8")
    headings = re.findall(r"^(#+) (.*)$", md, flags=re.M)
    assert [h for _, h in headings] == ["specchat race — tiny", "Prompt (Spec-Bench qa)",
                                        "Result", "Plain output", "Speculative output"]
    [table] = md_tables(md)
    assert table[2].startswith("| plain | 10 |") and table[3].startswith("| speculative | 10 |")
    assert "- **decode speedup** (once the replies started): 3.00× · **overall speedup:** 2.14×" in md
    assert "plain 10 tokens  TTFT 0.20 s  decode 10.0 tok/s" in md
    assert "outputs identical ✓" in md and "![Cumulative tokens over time" in md
    assert "(race.svg)" in md
    assert md.count("```text") == 2


def test_fence_outgrows_backticks_inside() -> None:
    assert fence("a ```py``` b").startswith("````text\n")


def test_bench_report(tmp_path: Path) -> None:
    def rec(cat: str, mode: str, gamma: int | None, temp: float, secs: float) -> dict:
        return {"question_id": "1", "category": cat, "mode": mode, "gamma": gamma,
                "temperature": temp, "generated_tokens": 40, "total_s": secs + 1,
                "prompt_s": 1.0, "ttft_s": 1.05, "decode_s": secs - 0.05,
                "accepted": 30 if gamma else 0, "rejections": 5 if gamma else 0,
                "target_forwards": 12, "steps": 10 if gamma else 0, "drafted": 40,
                "draft_s": 0.1, "detail": SpecDetail().as_dict()}

    records = [rec(c, m, g, t, s) for t in (0.0, 0.7) for c in ("coding", "writing")
               for m, g, s in (("plain", None, 4.0), ("draft", 3, 2.0), ("draft", 5, 2.5))]
    rows = summarize(records)
    doc = {"pair": "tiny", "threads": 1, "config": {"max_tokens": 40},
           "load_avg_before": (0.5, 0, 0), "load_avg_after": (0.6, 0, 0)}
    written = write_bench_report(doc, rows, tmp_path / "b")
    names = [p.name for p in written.charts]
    assert names == ["tokens-per-s-T0.svg", "alpha-T0.svg", "tokens-per-s-T0_7.svg",
                     "alpha-T0_7.svg"]
    for p in written.charts:
        assert svg_texts(p, "category") == ["coding", "writing", "all"]
    assert svg_texts(written.charts[0], "legend") == ["plain", "draft γ=3", "draft γ=5"]
    assert svg_texts(written.charts[1], "legend") == ["draft γ=3", "draft γ=5"]
    md = written.markdown.read_text(encoding="utf-8")
    assert re.findall(r"^## (.*)$", md, flags=re.M) == ["greedy", "T = 0.7"]
    for name in names:
        assert f"]({name})" in md
    tables = md_tables(md)
    assert len(tables) == 2 and len(tables[0]) == 2 + 9  # 3 modes × (2 categories + all)
