"""Two chart kinds on a :class:`Canvas`: step lines (cumulative tokens over time) and grouped
bars (a figure per category and mode). Axes get round tick values; a legend names each series."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specchat.report.canvas import BLACK, GREY, LIGHT, Canvas, Colour, hex_colour
from specchat.report.font import HEIGHT

PLAIN_COLOUR = hex_colour("#0072B2")  # Okabe-Ito blue
SPEC_COLOUR = hex_colour("#009E73")  # bluish green, as accepted drafts in the app
PALETTE = [PLAIN_COLOUR, SPEC_COLOUR, hex_colour("#E69F00"), hex_colour("#CC79A7"),
           hex_colour("#56B4E9"), hex_colour("#D55E00"), hex_colour("#F0E442")]
SCALE = 2  # font pixels → image pixels
LINE_H = HEIGHT * SCALE


@dataclass(frozen=True)
class Series:
    label: str
    colour: Colour
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
    """Title, axes, ticks and legend around a plot area; maps data to pixels."""

    def __init__(self, canvas: Canvas, title: str, x_label: str, y_label: str,
                 y_ticks: list[float], legend: Sequence[Series]) -> None:
        self.c = canvas
        self.left, self.top = 90, 70
        self.right, self.bottom = canvas.width - 30, canvas.height - 70
        self.y_max = y_ticks[-1] or 1.0
        canvas.text(canvas.width // 2, 16, title, BLACK, SCALE, anchor="centre")
        x = self.left
        for s in legend:  # one row under the title
            canvas.rect(x, 44, x + 14, 44 + LINE_H, s.colour)
            canvas.text(x + 20, 44, s.label, BLACK, SCALE)
            x += 20 + len(s.label) * 6 * SCALE + 24
        for v in y_ticks:
            y = self.y(v)
            canvas.line(self.left, y, self.right, y, LIGHT)
            canvas.text(self.left - 8, y - LINE_H // 2, _label(v), GREY, SCALE, anchor="right")
        canvas.line(self.left, self.top, self.left, self.bottom, BLACK, 2)
        canvas.line(self.left, self.bottom, self.right, self.bottom, BLACK, 2)
        canvas.text((self.left + self.right) // 2, canvas.height - 24, x_label, BLACK, SCALE,
                    anchor="centre")
        canvas.text(24, (self.top + self.bottom) // 2, y_label, BLACK, SCALE, vertical=True)

    def y(self, v: float) -> int:
        return round(self.bottom - (self.bottom - self.top) * v / self.y_max)


def step_chart(series: Sequence[Series], title: str, x_label: str, y_label: str,
               width: int = 900, height: int = 520) -> Canvas:
    """Each series as a staircase: flat until its next point, then up (tokens arrive in jumps)."""
    c = Canvas(width, height)
    x_high = max((p[0] for s in series for p in s.points), default=1.0)
    y_high = max((p[1] for s in series for p in s.points), default=1.0)
    x_ticks, y_ticks = nice_ticks(x_high), nice_ticks(y_high)
    f = _Frame(c, title, x_label, y_label, y_ticks, series)
    x_max = x_ticks[-1] or 1.0

    def px(v: float) -> int:
        return round(f.left + (f.right - f.left) * v / x_max)

    for v in x_ticks:
        c.line(px(v), f.bottom, px(v), f.bottom + 5, BLACK)
        c.text(px(v), f.bottom + 10, _label(v), GREY, SCALE, anchor="centre")
    for s in series:
        x0, y0 = 0.0, 0.0
        for x1, y1 in s.points:
            c.line(px(x0), f.y(y0), px(x1), f.y(y0), s.colour, 3)
            c.line(px(x1), f.y(y0), px(x1), f.y(y1), s.colour, 3)
            x0, y0 = x1, y1
    return c


def bar_chart(categories: Sequence[str], series: Sequence[Series], title: str, y_label: str,
              width: int = 900, height: int = 520) -> Canvas:
    """Grouped bars: one group per category, one bar per series (None = no bar)."""
    c = Canvas(width, height)
    values = [v for s in series for v in s.values if v is not None]
    f = _Frame(c, title, "", y_label, nice_ticks(max(values, default=1.0)), series)
    n = max(len(categories), 1)
    group = (f.right - f.left) / n
    bar_w = max(2, int(group * 0.8 / max(len(series), 1)))
    for i, cat in enumerate(categories):
        gx = f.left + group * i + group * 0.1
        for j, s in enumerate(series):
            v = s.values[i] if i < len(s.values) else None
            if v is not None:
                x = round(gx + j * bar_w)
                c.rect(x, f.y(v), x + bar_w - 1, f.bottom, s.colour)
        c.text(round(f.left + group * (i + 0.5)), f.bottom + 10, cat[: int(group // 12)],
               GREY, SCALE, anchor="centre")
    return c
