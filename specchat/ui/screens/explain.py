"""The help screen's first page: what the numbers and colours on screen mean, in a few lines.

Kept apart from the key tables so the words can be read (and tested) on their own; the token
colours are drawn with the same styles the transcript uses.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from specchat.store.fates import REJECTED
from specchat.ui.fate_style import NAMES, STYLES

INTRO = ("Speculative decoding: a small draft model guesses the next few tokens; the big target "
         "checks them all in one pass and keeps those it would have written itself. A greedy "
         "reply is exactly the target's own, a sampled one follows the target's own "
         "distribution; only the speed changes.")

NUMBERS: tuple[tuple[str, str], ...] = (
    ("tok/s", "decode tokens/s, first token left out (live, then whole reply)"),
    ("α", "acceptance: the share of draft tokens the target kept (0.8 = four in five)"),
    ("τ", "tokens per target pass: accepted drafts plus the target's own one; plain is 1.0, "
          "higher is faster"),
    ("acc.len", "acceptance length, 1 + accepted / steps: what τ is without the reply's first "
                "token (from the prompt's pass), as vLLM reports it"),
    ("γ", "draft length: tokens guessed per pass, on the stats bar's second line. First what "
          "chooses it: fixed at N (your setting), the pair's N (its calibrated γ), auto, or the "
          "planner (step by step, with its reason); then its value: this step's while a reply "
          "streams, drafted per step for a finished one. Off, or 0 per step, is plain decoding"),
    ("draft/verify", "time spent drafting vs checking (where the bar is narrow: the draft's "
                     "share alone, or nothing)"),
    ("ctx", "context window: tokens used / size"),
)

FATES: tuple[tuple[str, str], ...] = (
    ("a", "the draft guessed it and the target agreed"),
    ("c", "the target disagreed and wrote its own token instead"),
    ("b", "the target took every draft token and added one of its own, for free"),
    ("p", "the target alone, no draft"),
    (REJECTED, "a draft token the target threw away (Ctrl+R); in a token tree, also the "
               "losing branches the target did not follow"),
)

PLANNER = ("Each step the planner picks who drafts (the draft model, n-gram lookup in the "
           "prompt, a token tree, or nobody) and how many tokens, from what a target pass "
           "costs at each length on this machine and how often recent drafts were accepted. "
           "Its choice and reason follow γ on the stats bar; when drafting does not pay it "
           "takes plain steps (γ 0) rather than slower ones.")


def _rows(rows: list[tuple[Text | str, str]]) -> Table:
    table = Table(box=None, show_header=False, pad_edge=False, expand=True)
    table.add_column("what", style="bold", no_wrap=True, width=15)
    table.add_column("means", ratio=1)
    for name, text in rows:
        table.add_row(name, text)
    return table


def explain() -> RenderableType:
    heading = "bold underline"
    return Group(
        Text(INTRO), Text(""),
        Text("The stats bar", style=heading),
        _rows(list(NUMBERS)), Text(""),
        Text("The four fates of a token (the colours in the token view, Ctrl+T)", style=heading),
        _rows([(Text(NAMES[k], style=STYLES[k]), what) for k, what in FATES]), Text(""),
        Text("What the planner chose, and why", style=heading),
        Text(PLANNER),
    )
