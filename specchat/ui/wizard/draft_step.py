"""Step 2: choose a draft — compatible ones first, each with its reason; a file on this
computer; a Hub repo; or a draft made from the target itself.

Only a suitable draft (checked, compatible, small enough to pay) is ever highlighted for a bare
Enter; with none, the focus goes to the input box instead of the list. Drafts that are not
smaller than the target cannot be picked at all."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from specchat.models.catalog import HfSource, PypiSource
from specchat.models.compat import ModelFacts
from specchat.models.hub import RepoListing
from specchat.models.mtp import detect as detect_mtp
from specchat.models.pairing import DraftCandidate, SelfDraftOption
from specchat.models.progress import format_bytes
from specchat.models.vocab_compat import Level
from specchat.ui.wizard.target_step import file_option

MARKS = {Level.OK: ("✓", "green"), Level.WARN: ("!", "yellow"), Level.BAD: ("✗", "red"),
         None: ("·", "dim")}


def candidate_label(c: DraftCandidate) -> Text:
    mark, style = MARKS[c.level]
    text = Text(f" {mark} ", style=f"bold {style}")
    text.append(c.entry.id, style="bold" if c.level in (Level.OK, Level.WARN) else "")
    src = c.entry.source
    if c.on_disk:
        where = "on disk"
    elif c.entry.size:
        where = f"{format_bytes(c.entry.size)} to download"
    else:
        where = "to download" if isinstance(src, (HfSource, PypiSource)) else "to make"
    if c.level is None and c.report is None and not c.reason.startswith("could not"):
        text.append(f"  · {where} · {c.reason}", style="dim")  # unchecked: one quiet line
        return text
    text.append(f"  · {where}\n     {c.reason}", style="dim" if c.level is Level.BAD else "")
    return text


class DraftStep(Vertical):
    DEFAULT_CSS = """
    DraftStep { height: 1fr; }
    DraftStep OptionList { height: 1fr; }
    """

    @dataclass
    class Picked(Message):
        choice: str  # "cand:<n>", "hub:<file>", "path:<path>", "self:<quant>", "back"

    @dataclass
    class RepoRequested(Message):
        text: str

    def __init__(self) -> None:
        super().__init__(id="step-draft")
        self.candidates: list[DraftCandidate] = []
        self.self_drafts: list[SelfDraftOption] = []
        self.listing: RepoListing | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="draft-title", classes="hint")
        yield OptionList(id="draft-list")
        yield Input(placeholder="or a Hub repo (org/name) or /path/to/draft.gguf, then Enter",
                    id="draft-input")

    def populate(self, target: ModelFacts, candidates: list[DraftCandidate],
                 self_drafts: list[SelfDraftOption]) -> None:
        self.candidates, self.self_drafts, self.listing = candidates, self_drafts, None
        heads = detect_mtp(target.header)
        mtp = (f"The target {heads.line()}.\n", "green" if heads.runnable else "dim") \
            if heads is not None else ("", "")  # said only when it has some
        self.query_one("#draft-title", Static).update(Text.assemble(
            ("Drafts for ", ""), (target.name, "bold"),
            (f"  ({target.architecture}, {target.n_vocab} tokens"
             f"{'; ' + target.source_note if target.source_note else ''})\n", "dim"), mtp,
            "A draft must share the target's vocabulary and be much smaller. Compatible ones "
            "come first; the others say why not. Or type a Hub repo id or a .gguf path below."))
        self._render_list()

    def _render_list(self) -> None:
        options: list[Option | None] = []
        for i, c in enumerate(self.candidates):
            options.append(Option(candidate_label(c), id=f"cand:{i}",
                                  disabled=c.level is Level.BAD or c.too_large))
        if not any(c.suitable for c in self.candidates):
            options.insert(0, Option(Text("No suitable draft on disk or in the catalog yet: "
                                          "type a Hub repo or a .gguf path below, or make one "
                                          "from the target.", style="yellow"), disabled=True))
        options += [None, Option(Text("Make a draft from the target itself", style="bold"),
                                 disabled=True)]
        for o in self.self_drafts:
            label = Text(f"  quantize to {o.quant}  · {o.reason}",
                         style="" if o.pays else "dim")
            options.append(Option(label, id=f"self:{o.quant}", disabled=not o.pays))
        ol = self.query_one(OptionList)
        ol.set_options(options)
        ol.highlighted = next((i for i, o in enumerate(ol.options)
                               if o.id and o.id.startswith("cand:")
                               and self.candidates[int(o.id[5:])].suitable), None)
        if ol.highlighted is None:
            self.query_one("#draft-input", Input).focus()
        else:
            ol.focus()

    def update_candidate(self, c: DraftCandidate) -> None:
        for i, old in enumerate(self.candidates):
            if old.entry.id == c.entry.id:
                self.candidates[i] = c
                if self.listing is None:
                    ol = self.query_one(OptionList)
                    ol.replace_option_prompt(f"cand:{i}", candidate_label(c))
                    if c.level is Level.BAD or c.too_large:
                        ol.disable_option(f"cand:{i}")
                return
        self.candidates.append(c)

    def show_repo(self, listing: RepoListing) -> None:
        self.listing = listing
        options: list[Option | None] = [Option(Text(listing.repo, style="bold"), disabled=True)]
        options += [file_option(f, f"hub:{f.name}") for f in listing.files]
        options += [None, Option("← back to the drafts", id="back")]
        ol = self.query_one(OptionList)
        ol.set_options(options)
        ol.highlighted = next((i for i, o in enumerate(ol.options) if not o.disabled), None)
        ol.focus()

    def back_to_list(self) -> None:
        self.listing = None
        self._render_list()

    def on_key(self, event: events.Key) -> None:
        if event.key in ("up", "down") and isinstance(self.screen.focused, Input):
            ol = self.query_one(OptionList)  # from the box into the list, as in the target step
            ol.focus()
            if ol.highlighted is None:
                ol.action_first()
            event.stop()

    @on(Input.Submitted, "#draft-input")
    def _submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if Path(text).expanduser().is_file():  # a file on this computer, as the target step
            self.post_message(self.Picked(f"path:{text}"))
        else:
            self.post_message(self.RepoRequested(text))

    @on(OptionList.OptionSelected, "#draft-list")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id:
            self.post_message(self.Picked(event.option.id))
