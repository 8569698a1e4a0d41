"""A reply's token-fate text, drawn cheaply while it streams.

The text is kept in blocks that break at line ends once a block holds ``BLOCK_CHARS``: a new
chunk redraws only the last block, and the screen's layout is redone only when that block
grows a line. Redrawing the whole reply and re-laying out the screen ~10 times a second costs
the UI thread enough to slow generation (the decoder's Python steps share the GIL with it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from specchat.store.fates import Segment
from specchat.textsafe import safe_text
from specchat.ui.fate_style import STYLES

BLOCK_CHARS = 400


def split_blocks(segments: Iterable[Segment], show_rejected: bool,
                 blocks: list[Text] | None = None) -> list[Text]:
    """Append ``segments`` to ``blocks`` (the last one grows), starting a new block at a line
    break once the current one is long; returns the blocks."""
    blocks = blocks if blocks is not None else []
    if not blocks:
        blocks.append(Text())
    for seg in segments:
        if seg.rejected and not show_rejected:
            continue
        style = STYLES[seg.kind]
        text = safe_text(seg.text)  # the model's text, shown, never obeyed by the terminal
        while text:
            current = blocks[-1]
            cut = text.find("\n", max(0, BLOCK_CHARS - len(current)))
            if cut < 0:
                current.append(text, style)
                break
            current.append(text[:cut], style)
            blocks.append(Text())  # the line break itself is the boundary between blocks
            text = text[cut + 1 :]
    return blocks


class FateText(Vertical):
    DEFAULT_CSS = """
    FateText { height: auto; }
    FateText > Static { height: auto; }
    """

    def __init__(self, segments: Iterable[Segment], show_rejected: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.show_rejected = show_rejected
        self._texts = split_blocks(segments, show_rejected)

    def compose(self) -> ComposeResult:
        for text in self._texts:
            yield Static(text)

    def append(self, segments: Iterable[Segment]) -> bool:
        """Add text; return whether the reply got taller (so the transcript may scroll)."""
        before = len(self._texts)
        split_blocks(segments, self.show_rejected, self._texts)
        blocks = list(self.query_children(Static))
        if len(blocks) < before:  # not composed yet: compose() will draw everything
            return True
        last = blocks[before - 1]
        last.update(self._texts[before - 1], layout=False)
        taller = self._grew(last)
        if taller:
            last.refresh(layout=True)
        new = [Static(t) for t in self._texts[before:]]
        if new:
            self.mount_all(new)
        return taller or bool(new)

    def rebuild(self, segments: Iterable[Segment], show_rejected: bool) -> None:
        self.show_rejected = show_rejected
        self._texts = split_blocks(segments, show_rejected)
        self.remove_children()
        self.mount_all([Static(t) for t in self._texts])

    @staticmethod
    def _grew(block: Static) -> bool:
        width = block.size.width
        if not width:
            return True
        return block.get_content_height(block.size, block.app.size, width) != block.size.height
