"""Two chart kinds as SVG: step lines (cumulative tokens over time) and grouped bars (a figure
per category and mode). Axes get round tick values and a label each; a legend names each series.
Every label is written in full: long category names are slanted rather than cut."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specchat.report.svg import Svg, text_width

PLAIN_COLOUR = "#0072B2"  # Okabe-Ito blue
SPEC_COLOUR = "#009E73"  # bluish green, as accepted drafts in the app
PALETTE = [PLAIN_COLOUR, SPEC_COLOUR, "#E69F00", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442"]
INK, GREY, GRID = "#222222", "#555555", "#e4e4e4"
TITLE_SIZE, TEXT_SIZE, TICK_SIZE = 18, 13, 12


@dataclass(frozen=True)
class Series:
    label: str
    colour: str
    points: Sequence[tuple[float, float]] = ()  # line charts
    values: Sequence[float | None] = ()  # bar charts, one per category


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``high``."""
    if high <= 0 or not math.isfinite(high):
        return [0.0, 1.0]
    raw = high / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(high / step - 1e-9)
    return [i * step for i in range(n + 1)]


def _label(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:g}"


class _Frame:
    """Title, legend, y axis with grid and label, x axis label; maps data to the plot area."""

    def __init__(self, svg: Svg, title: str, x_label: str, y_label: str, y_ticks: list[float],
                 legend: Sequence[Series], bottom_room: float) -> None:
        self.svg = svg
        svg.text(svg.width / 2, 28, title, TITLE_SIZE, INK, "middle", bold=True, role="title")
        tick_w = max((text_width(_label(v), TICK_SIZE) for v in y_ticks), default=0)
        self.left = 40 + tick_w + 10
        self.right = svg.width - 24
        y = self._legend(legend, 50)
        self.top = y + 14
        self.bottom = svg.height - bottom_room - (34 if x_label else 8)
        self.y_max = y_ticks[-1] or 1.0
        for v in y_ticks:
            yy = self.y(v)
            svg.line(self.left, yy, self.right, yy, GRID)
            svg.text(self.left - 8, yy + TICK_SIZE * 0.35, _label(v), TICK_SIZE, GREY, "end",
                     role="tick")
        svg.line(self.left, self.top, self.left, self.bottom, INK, 1.5)
        svg.line(self.left, self.bottom, self.right, self.bottom, INK, 1.5)
        mid_y = (self.top + self.bottom) / 2
        svg.text(20, mid_y, y_label, TEXT_SIZE, INK, "middle", rotate=-90, role="y-label")
        if x_label:
            svg.text((self.left + self.right) / 2, svg.height - 14, x_label, TEXT_SIZE, INK,
                     "middle", role="x-label")

    def _legend(self, legend: Sequence[Series], y: float) -> float:
        """Swatch and name per series, wrapping onto more rows; the y below the last row."""
        x = self.left
        for s in legend:
            w = 18 + text_width(s.label, TEXT_SIZE) + 22
            if x + w > self.right and x > self.left:
                x, y = self.left, y + 20
            self.svg.rect(x, y, 12, 12, s.colour)
            self.svg.text(x + 18, y + 11, s.label, TEXT_SIZE, INK, role="legend")
            x += w
        return y + 12

    def y(self, v: float) -> float:
        return self.bottom - (self.bottom - self.top) * v / self.y_max


def step_chart(series: Sequence[Series], title: str, x_label: str, y_label: str,
               width: int = 900, height: int = 520) -> Svg:
    """Each series as a staircase: flat until its next point, then up (tokens arrive in jumps)."""
    svg = Svg(width, height, title)
    x_high = max((p[0] for s in series for p in s.points), default=1.0)
    y_high = max((p[1] for s in series for p in s.points), default=1.0)
    x_ticks, y_ticks = nice_ticks(x_high), nice_ticks(y_high)
    f = _Frame(svg, title, x_label, y_label, y_ticks, series, TICK_SIZE + 10)
    x_max = x_ticks[-1] or 1.0

    def px(v: float) -> float:
        return f.left + (f.right - f.left) * v / x_max

    for v in x_ticks:
        svg.line(px(v), f.bottom, px(v), f.bottom + 5, INK)
        svg.text(px(v), f.bottom + 8 + TICK_SIZE, _label(v), TICK_SIZE, GREY, "middle",
                 role="tick")
    for s in series:
        pts = [(px(0), f.y(0))]
        y0 = 0.0
        for x1, y1 in s.points:
            pts += [(px(x1), f.y(y0)), (px(x1), f.y(y1))]
            y0 = y1
        svg.polyline(pts, s.colour, 2.5, s.label)
    return svg


def bar_chart(categories: Sequence[str], series: Sequence[Series], title: str, y_label: str,
              x_label: str = "", width: int = 900, height: int = 520) -> Svg:
    """Grouped bars: one group per category, one bar per series (None = no bar)."""
    svg = Svg(width, height, title)
    values = [v for s in series for v in s.values if v is not None]
    n = max(len(categories), 1)
    longest = max((text_width(c, TICK_SIZE) for c in categories), default=0)
    group_guess = (width - 120) / n
    slant = longest > group_guess * 0.9  # too long to sit level under its group
    room = (longest * 0.6 + TICK_SIZE + 12) if slant else TICK_SIZE + 12
    f = _Frame(svg, title, x_label, y_label, nice_ticks(max(values, default=1.0)), series,
               min(room, height * 0.3))
    group = (f.right - f.left) / n
    bar_w = max(2.0, group * 0.8 / max(len(series), 1))
    for i, cat in enumerate(categories):
        gx = f.left + group * i + group * 0.1
        for j, s in enumerate(series):
            v = s.values[i] if i < len(s.values) else None
            if v is not None:
                svg.rect(gx + j * bar_w, f.y(v), bar_w - 1, f.bottom - f.y(v), s.colour,
                         tooltip=f"{cat} · {s.label}: {v:.3g}")
        cx = f.left + group * (i + 0.5)
        if slant:
            svg.text(cx, f.bottom + 6 + TICK_SIZE, cat, TICK_SIZE, GREY, "end", rotate=-35,
                     role="category")
        else:
            svg.text(cx, f.bottom + 6 + TICK_SIZE, cat, TICK_SIZE, GREY, "middle",
                     role="category")
    return svg
