"""How each token fate looks: the Okabe-Ito colour-blind-safe palette plus a cue that is not
colour (underline, italic, strikethrough), so the meaning survives any colour vision, a
monochrome terminal, or a screenshot printed in grey.

    accepted draft   bluish green                    (the usual case in a speculative reply)
    corrected        vermillion, underlined          (the target overruled the draft)
    bonus            sky blue, bold italic           (free token after a fully accepted draft)
    plain target     the normal text colour          (no draft model involved)
    rejected draft   reddish purple, dim, struck out (shown only when asked)
    losing branch    reddish purple, dim, italic, after a ⎇ (a token tree's other drafts;
                     shown only when asked)

Accepted and plain tokens never share a reply (a reply is either speculative or plain), and the
message header says which it is, so their difference never rests on colour alone.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from specchat.store.fates import BRANCH, REJECTED

OKABE_ITO = {
    "orange": "#E69F00", "sky_blue": "#56B4E9", "bluish_green": "#009E73", "yellow": "#F0E442",
    "blue": "#0072B2", "vermillion": "#D55E00", "reddish_purple": "#CC79A7",
}

STYLES: dict[str, Style] = {
    "p": Style(),
    "a": Style(color=OKABE_ITO["bluish_green"]),
    "c": Style(color=OKABE_ITO["vermillion"], underline=True),
    "b": Style(color=OKABE_ITO["sky_blue"], bold=True, italic=True),
    REJECTED: Style(color=OKABE_ITO["reddish_purple"], dim=True, strike=True),
    BRANCH: Style(color=OKABE_ITO["reddish_purple"], dim=True, italic=True),
}

NAMES = {"a": "accepted draft", "c": "corrected", "b": "bonus", "p": "plain target",
         REJECTED: "rejected draft", BRANCH: "losing branch"}


SHORT_NAMES = {"a": "accepted", "c": "corrected", "b": "bonus", "p": "plain",
               REJECTED: "rejected", BRANCH: "branch"}


def legend(show_rejected: bool, view: str) -> Text:
    """One line naming every style, each drawn in its own style, and the two view toggles."""
    out = Text()
    for kind in ("a", "c", "b", "p", REJECTED):
        if out:
            out.append(" ")
        out.append(SHORT_NAMES[kind], STYLES[kind])
    dim = Style(dim=True)
    out.append("  │ ^R drafts ", dim)
    out.append("shown" if show_rejected else "hidden")
    out.append(" │ ^T view ", dim)
    out.append(view)
    return out
