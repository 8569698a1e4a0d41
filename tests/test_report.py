"""Report writers: PNGs that open with the right size, Markdown with the right structure."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from race_helpers import fixed_result

from specchat.bench.report import summarize
from specchat.engine.events import SpecDetail
from specchat.report.bench_report import write_bench_report
from specchat.report.charts import nice_ticks
from specchat.report.font import render, text_size
from specchat.report.markdown import fence
from specchat.report.png import encode_png, write_png
from specchat.report.race_report import write_race_report


def test_png_round_trips_through_pillow(tmp_path: Path) -> None:
    rgb = np.zeros((3, 5, 3), dtype=np.uint8)
    rgb[0, 0] = (255, 0, 0)
    rgb[2, 4] = (1, 2, 3)
    img = Image.open(write_png(tmp_path / "x.png", rgb))
    assert img.format == "PNG" and img.size == (5, 3) and img.mode == "RGB"
    assert np.array_equal(np.asarray(img), rgb)
    with pytest.raises(ValueError):
        encode_png(np.zeros((3, 5), dtype=np.uint8))


def test_font_and_ticks() -> None:
    assert text_size("ab", 2) == (22, 14)
    mask = render("T", 1)
    assert mask[0].all() and mask[1:, 2].all() and not mask[1:, 0].any()  # a T
    assert np.array_equal(render("a"), render("A")) and render("α").any()
    assert nice_ticks(37) == [0, 10, 20, 30, 40]
    assert nice_ticks(0.8) == pytest.approx([0, 0.2, 0.4, 0.6, 0.8])
    assert nice_ticks(0) == [0.0, 1.0]


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
    img = Image.open(written.charts[0])
    img.load()
    assert img.size == (900, 520)
    pixels = np.asarray(img)
    assert (pixels == (0, 158, 115)).all(axis=2).sum() > 100  # the speculative line is drawn
    md = written.markdown.read_text(encoding="utf-8")
    headings = re.findall(r"^(#+) (.*)$", md, flags=re.M)
    assert [h for _, h in headings] == ["specchat race — tiny", "Prompt (Spec-Bench qa)",
                                        "Result", "Plain output", "Speculative output"]
    [table] = md_tables(md)
    assert table[2].startswith("| plain | 10 |") and table[3].startswith("| speculative | 10 |")
    assert "outputs identical ✓" in md and "![Cumulative tokens over time" in md
    assert "(race.png)" in md
    assert md.count("```text") == 2


def test_fence_outgrows_backticks_inside() -> None:
    assert fence("a ```py``` b").startswith("````text\n")


def test_bench_report(tmp_path: Path) -> None:
    def rec(cat: str, mode: str, gamma: int | None, temp: float, secs: float) -> dict:
        return {"question_id": "1", "category": cat, "mode": mode, "gamma": gamma,
                "temperature": temp, "generated_tokens": 40, "total_s": secs + 1,
                "prompt_s": 1.0, "accepted": 30 if gamma else 0, "rejections": 5 if gamma else 0,
                "target_forwards": 12, "steps": 10 if gamma else 0, "drafted": 40,
                "draft_s": 0.1, "detail": SpecDetail().as_dict()}

    records = [rec(c, m, g, t, s) for t in (0.0, 0.7) for c in ("coding", "writing")
               for m, g, s in (("plain", None, 4.0), ("draft", 3, 2.0), ("draft", 5, 2.5))]
    rows = summarize(records)
    doc = {"pair": "tiny", "threads": 1, "config": {"max_tokens": 40},
           "load_avg_before": (0.5, 0, 0), "load_avg_after": (0.6, 0, 0)}
    written = write_bench_report(doc, rows, tmp_path / "b")
    names = [p.name for p in written.charts]
    assert names == ["tokens-per-s-T0.png", "alpha-T0.png", "tokens-per-s-T0_7.png",
                     "alpha-T0_7.png"]
    for p in written.charts:
        assert Image.open(p).size == (900, 520)
    md = written.markdown.read_text(encoding="utf-8")
    assert re.findall(r"^## (.*)$", md, flags=re.M) == ["greedy", "T = 0.7"]
    for name in names:
        assert f"]({name})" in md
    tables = md_tables(md)
    assert len(tables) == 2 and len(tables[0]) == 2 + 9  # 3 modes × (2 categories + all)
