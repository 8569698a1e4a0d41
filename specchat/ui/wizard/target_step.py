"""Step 1: choose the target — a file on this computer, a catalog model, or any Hub repo's file."""

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

from specchat.models.catalog import Catalog, ModelEntry
from specchat.models.hub import HubFile, RepoListing
from specchat.models.local_files import LocalModel
from specchat.models.progress import format_bytes


def file_option(f: HubFile, key: str) -> Option:
    size = format_bytes(f.size) if f.size else "size unknown"
    parts = f" · {len(f.parts)} parts" if len(f.parts) > 1 else ""
    if f.is_projector:
        return Option(Text(f"  {f.name}  (vision projector: not a chat model)", style="dim"),
                      id=key, disabled=True)
    return Option(Text(f"  {f.name}  · {size}{parts}"), id=key)


def catalog_label(entry: ModelEntry, on_disk: bool) -> Text:
    size = f" · {format_bytes(entry.size)}" if entry.size else ""
    where = "on disk" if on_disk else "download" + size
    text = Text(f"  {entry.name}", style="bold" if on_disk else "")
    text.append(f"  · {entry.id} · {where}", style="dim")
    if entry.notes:
        text.append(f"\n     {entry.notes}", style="dim")
    return text


class TargetStep(Vertical):
    """Lists what can be a target; Enter on the input looks a Hub repo up (or takes a path)."""

    DEFAULT_CSS = """
    TargetStep { height: 1fr; }
    TargetStep OptionList { height: 1fr; }
    """

    @dataclass
    class Picked(Message):
        choice: str  # "local:<n>", "cat:<id>", "hub:<file>", "path:<path>"

    @dataclass
    class RepoRequested(Message):
        text: str

    def __init__(self, catalog: Catalog) -> None:
        super().__init__(id="step-target")
        self.catalog = catalog
        self.local: list[LocalModel] = []
        self.listing: RepoListing | None = None

    def compose(self) -> ComposeResult:
        yield Static("Which model do you want to chat with? This is the [b]target[/b]: the big model "
                     "whose answers you get. Pick one below (↓), or type a Hugging Face repo id "
                     "(org/name) or a path to a .gguf file and press Enter.", classes="hint")
        yield Input(placeholder="org/name on the Hub, or /path/to/model.gguf", id="target-input")
        yield OptionList(id="target-list")

    def populate(self, local: list[LocalModel], on_disk: dict[str, Path]) -> None:
        """``on_disk``: catalog ids present, with their files (listed once, by catalog name)."""
        self.local = local
        self.listing = None
        known = {p.resolve() for p in on_disk.values()}
        options: list[Option | None] = [Option(Text("Other files on this computer", style="bold"),
                                               disabled=True)]
        shown = [(i, m) for i, m in enumerate(local) if m.path.resolve() not in known]
        if not shown:
            options.append(Option(Text("  (none outside the catalog)", style="dim"),
                                  disabled=True))
        for i, m in shown:
            label = Text(f"  {m.path.name}")
            label.append(f"  · {format_bytes(m.size)} · {m.where}", style="dim")
            options.append(Option(label, id=f"local:{i}"))
        options += [None, Option(Text("From the catalog", style="bold"), disabled=True)]
        targets = {p.target for p in self.catalog.pairs.values()}
        entries = sorted(self.catalog.models.values(),
                         key=lambda e: (e.id not in targets, e.id not in on_disk, e.id))
        for e in entries:
            options.append(Option(catalog_label(e, e.id in on_disk), id=f"cat:{e.id}"))
        ol = self.query_one(OptionList)
        ol.set_options(options)
        ol.highlighted = next((i for i, o in enumerate(ol.options) if not o.disabled), None)

    def show_repo(self, listing: RepoListing) -> None:
        self.listing = listing
        gated = " · gated: accept its licence on the Hub and set HF_TOKEN" if listing.gated else ""
        options: list[Option | None] = [
            Option(Text(f"{listing.repo}{gated}", style="bold"), disabled=True)]
        if not listing.files:
            options.append(Option(Text("  (no GGUF files in this repo)", style="dim"),
                                  disabled=True))
        options += [file_option(f, f"hub:{f.name}") for f in listing.files]
        options += [None, Option("← back to the list", id="back")]
        ol = self.query_one(OptionList)
        ol.set_options(options)
        ol.highlighted = next((i for i, o in enumerate(ol.options) if not o.disabled), None)
        ol.focus()

    def on_key(self, event: events.Key) -> None:
        if event.key == "down" and isinstance(self.screen.focused, Input):
            self.query_one(OptionList).focus()  # from the box straight into the list
            event.stop()

    @on(Input.Submitted, "#target-input")
    def _submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if Path(text).expanduser().is_file():
            self.post_message(self.Picked(f"path:{text}"))
        else:
            self.post_message(self.RepoRequested(text))

    @on(OptionList.OptionSelected, "#target-list")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        key = event.option.id or ""
        if key == "back":
            self.post_message(self.Picked("back"))
        elif key:
            self.post_message(self.Picked(key))
