"""A small SVG document written as text: shapes and real text, escaped, nothing to install.

Any browser opens the file, text stays selectable and searchable, and a label is never cut to fit
a bitmap font.
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

FONT = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, 'DejaVu Sans', sans-serif"
CHAR_W = 0.58  # average glyph width per unit of font size, for laying text out before a browser


def text_width(text: str, size: float) -> float:
    """About how wide ``text`` is at ``size`` px in a sans-serif font."""
    return len(text) * size * CHAR_W


def _num(v: float) -> str:
    return f"{v:.1f}".removesuffix(".0")


class Svg:
    def __init__(self, width: int, height: int, title: str) -> None:
        self.width, self.height = width, height
        self._parts: list[str] = [f"<title>{escape(title)}</title>",
                                  f'<rect width="{width}" height="{height}" fill="#ffffff"/>']

    def rect(self, x: float, y: float, w: float, h: float, fill: str,
             tooltip: str = "") -> None:
        shape = (f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(max(w, 0))}" '
                 f'height="{_num(max(h, 0))}" fill={quoteattr(fill)}')
        if tooltip:  # shown on hover: the exact figure behind the bar
            self._parts.append(f"{shape}><title>{escape(tooltip)}</title></rect>")
        else:
            self._parts.append(shape + "/>")

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str,
             width: float = 1) -> None:
        self._parts.append(f'<line x1="{_num(x1)}" y1="{_num(y1)}" x2="{_num(x2)}" '
                           f'y2="{_num(y2)}" stroke={quoteattr(stroke)} '
                           f'stroke-width="{_num(width)}"/>')

    def polyline(self, points: list[tuple[float, float]], stroke: str, width: float = 2,
                 label: str = "") -> None:
        pts = " ".join(f"{_num(x)},{_num(y)}" for x, y in points)
        attr = f" data-series={quoteattr(label)}" if label else ""
        self._parts.append(f'<polyline points="{pts}" fill="none" stroke={quoteattr(stroke)} '
                           f'stroke-width="{_num(width)}" stroke-linejoin="round"{attr}/>')

    def text(self, x: float, y: float, text: str, size: float = 13, fill: str = "#222222",
             anchor: str = "start", rotate: float = 0, bold: bool = False,
             role: str = "") -> None:
        """``y`` is the baseline; ``anchor`` is SVG's start / middle / end."""
        attrs = [f'x="{_num(x)}"', f'y="{_num(y)}"', f'font-size="{_num(size)}"',
                 f"fill={quoteattr(fill)}", f'text-anchor="{anchor}"']
        if bold:
            attrs.append('font-weight="bold"')
        if rotate:
            attrs.append(f'transform="rotate({_num(rotate)} {_num(x)} {_num(y)})"')
        if role:
            attrs.append(f"class={quoteattr(role)}")
        self._parts.append(f"<text {' '.join(attrs)}>{escape(text)}</text>")

    def document(self) -> str:
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" '
                f'height="{self.height}" viewBox="0 0 {self.width} {self.height}" '
                f"font-family={quoteattr(FONT)}>")
        return "\n".join([head, *self._parts, "</svg>"]) + "\n"

    def write(self, path: Path) -> Path:
        path.write_text(self.document(), encoding="utf-8")
        return path
