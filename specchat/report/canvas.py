"""An RGB pixel canvas with the few primitives charts need: rectangles, lines, text."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from specchat.report import font

Colour = tuple[int, int, int]
WHITE: Colour = (255, 255, 255)
BLACK: Colour = (0, 0, 0)
GREY: Colour = (120, 120, 120)
LIGHT: Colour = (225, 225, 225)


def hex_colour(text: str) -> Colour:
    """``#009E73`` → (0, 158, 115)"""
    h = text.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


class Canvas:
    def __init__(self, width: int, height: int, background: Colour = WHITE) -> None:
        self.width, self.height = width, height
        self.pixels: npt.NDArray[np.uint8] = np.empty((height, width, 3), dtype=np.uint8)
        self.pixels[:] = background

    def rect(self, x0: int, y0: int, x1: int, y1: int, colour: Colour) -> None:
        """Fill [x0, x1) × [y0, y1), clipped to the canvas."""
        x0, x1 = max(0, min(x0, x1)), min(self.width, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.height, max(y0, y1))
        if x0 < x1 and y0 < y1:
            self.pixels[y0:y1, x0:x1] = colour

    def line(self, x0: float, y0: float, x1: float, y1: float, colour: Colour,
             thickness: int = 1) -> None:
        """A straight line, drawn as square dots along it."""
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        xs = np.rint(np.linspace(x0, x1, n)).astype(int)
        ys = np.rint(np.linspace(y0, y1, n)).astype(int)
        lo = thickness // 2
        for x, y in zip(xs, ys, strict=True):
            self.rect(x - lo, y - lo, x - lo + thickness, y - lo + thickness, colour)

    def text(self, x: int, y: int, text: str, colour: Colour = BLACK, scale: int = 1,
             anchor: str = "left", vertical: bool = False) -> None:
        """Draw ``text`` with its top at ``y``; ``anchor`` says where ``x`` is: left, centre,
        right. ``vertical`` turns it to read bottom-up (a y-axis label), centred on (x, y)."""
        mask = font.render(text, scale)
        if vertical:
            mask = np.rot90(mask)
            h, w = mask.shape
            x, y = x - w // 2, y - h // 2
        else:
            w = mask.shape[1]
            x -= {"left": 0, "centre": w // 2, "right": w}[anchor]
        self._blit(x, y, mask, colour)

    def _blit(self, x: int, y: int, mask: npt.NDArray[np.bool_], colour: Colour) -> None:
        h, w = mask.shape
        sx0, sy0 = max(0, -x), max(0, -y)
        sx1, sy1 = min(w, self.width - x), min(h, self.height - y)
        if sx0 >= sx1 or sy0 >= sy1:
            return
        region = self.pixels[y + sy0:y + sy1, x + sx0:x + sx1]
        region[mask[sy0:sy1, sx0:sx1]] = colour
