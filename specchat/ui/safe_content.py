"""Every text Textual draws, held to the terminal-safety rule of :mod:`specchat.textsafe`.

Textual already drops BEL, BS, VT, FF and CR from each ``Content`` it builds (every Static,
Label, Markdown block, toast and option list goes through it) but lets ESC, the other C0
codes, DEL and C1 through, so a reply, a chat title or a file name could rename the terminal or
write the clipboard. :func:`guard_textual_content` extends Textual's own table with
:mod:`specchat.textsafe`'s stand-ins: one place that also covers widgets specchat does not
write itself. Widgets still pass model and file text through ``safe_text`` where it enters
them (that shows BEL and CR as ␇ and ␍ rather than dropping them).
"""

from __future__ import annotations

from textual import content as _content

from specchat.textsafe import control_table


def guard_textual_content() -> None:
    """Idempotent; called when an app is made. Textual's own entries are kept."""
    table: dict[int, str | None] = _content._CONTROL_STRIP_TRANSLATE  # type: ignore[assignment]
    for code, shown in control_table().items():
        table.setdefault(code, shown)
