"""This chat's reply format (F10 on the chat screen): free text, any JSON object, a JSON schema or
a grammar (Lark, or llama.cpp's GBNF) that every reply of the chat follows.

The schema or grammar is typed or pasted in the editor, or loaded from a file (its text goes
into the editor; the chat keeps the text, not the path). Save compiles it first, in a worker
thread (llguidance can take a moment on a large schema): one that does not compile says why on
the dialog's error line and nothing is saved; the text stays in the editor to fix. Dismisses
with the new :class:`ReplyFormat`, or None when cancelled.
"""

from __future__ import annotations

from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Select, Static, TextArea

from specchat.engine.decode.grammar import GrammarError
from specchat.errors import SpecchatError
from specchat.session.reply_format import compile_format, read_format_file
from specchat.store.reply_format import FormatKind, ReplyFormat
from specchat.ui.messages import FormatChecked

KIND_CHOICES: tuple[tuple[str, FormatKind], ...] = (
    ("Text: replies as usual", "text"),
    ("JSON object: any JSON object", "json_object"),
    ("JSON schema: JSON that follows a schema", "json_schema"),
    ("Grammar: Lark or GBNF", "grammar"),
)
KIND_HINTS: dict[FormatKind, str] = {
    "text": "Replies are free text (a schema or grammar below is kept, unused).",
    "json_object": "Every reply is one JSON object, keys of the model's choosing: say in your "
                   "message what it should hold.",
    "json_schema": "Every reply is JSON that follows this JSON Schema: paste it, or load a "
                   "file.",
    "grammar": "Every reply follows this grammar: Lark (start: ...) or llama.cpp's GBNF "
               "(root ::= ...).",
}
EMPTY_SOURCE: dict[FormatKind, str] = {
    "json_schema": "paste a JSON schema first, or load one from a file",
    "grammar": "type a grammar first, or load one from a file",
}
# A file's ending → the kind its text most likely is (anything else keeps the kind chosen).
KIND_OF_SUFFIX: dict[str, FormatKind] = {".json": "json_schema", ".lark": "grammar",
                                         ".gbnf": "grammar"}


class ReplyFormatScreen(ModalScreen[ReplyFormat | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "save", "Save", priority=True),
    ]
    DEFAULT_CSS = """
    ReplyFormatScreen { align: center middle; }
    #format-box { width: 90; max-width: 95%; height: 95%; max-height: 40; padding: 1 2;
                  border: round $accent; background: $surface; }
    #format-kind { margin-bottom: 1; }
    #format-kind > SelectCurrent, #format-source, #format-file { background: $boost; }
    #format-hint { height: auto; color: $text-muted; }
    #format-source { height: 1fr; min-height: 3; }
    #format-file-row { height: auto; margin-top: 1; }
    #format-file { width: 1fr; }
    #format-load { margin-left: 1; min-width: 8; }
    #format-error { height: auto; color: $error; }
    #format-error.-checking { color: $text-muted; }
    ReplyFormatScreen .dialog-buttons { margin-top: 0; }
    """

    def __init__(self, current: ReplyFormat) -> None:
        super().__init__()
        self.current = current
        self.checking = False  # a check is running: Save waits for it

    def compose(self) -> ComposeResult:
        with Vertical(id="format-box"):
            yield Static("Reply format for this chat", classes="dialog-title")
            yield Select([(label, kind) for label, kind in KIND_CHOICES],
                         value=self.current.kind, allow_blank=False, id="format-kind",
                         compact=True)
            yield Static(KIND_HINTS[self.current.kind], id="format-hint", markup=False)
            yield TextArea(self.current.source or "", id="format-source", soft_wrap=True,
                           tab_behavior="focus", compact=True)
            with Horizontal(id="format-file-row"):
                yield Input(placeholder="…or a file's path (Enter loads it into the editor)",
                            id="format-file", compact=True)
                yield Button("Load", id="format-load", compact=True)
            yield Static("", id="format-error", markup=False)
            yield Static("Ctrl+S checks and saves · Tab moves · Esc cancels · the chat keeps "
                         "the text, not the file", classes="dialog-hint", id="format-keys")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Save (Ctrl+S)", variant="primary", id="format-save", compact=True)
                yield Button("Cancel (Esc)", id="format-cancel", compact=True)

    def on_mount(self) -> None:
        self._kind_shown(self.current.kind)
        self.query_one("#format-kind", Select).focus()

    # --- what is on screen ----------------------------------------------------------------

    @property
    def kind(self) -> FormatKind:
        value = self.query_one("#format-kind", Select).value
        return next((k for _, k in KIND_CHOICES if k == value), "text")

    def chosen(self) -> ReplyFormat:
        """The format the dialog shows now (the editor's text kept whatever the kind)."""
        text = self.query_one("#format-source", TextArea).text
        return ReplyFormat(self.kind, text if text.strip() else None)

    def _kind_shown(self, kind: FormatKind) -> None:
        uses = ReplyFormat(kind).uses_source
        self.query_one("#format-hint", Static).update(KIND_HINTS[kind])
        self.query_one("#format-source", TextArea).disabled = not uses

    def _say(self, text: str, checking: bool = False) -> None:
        line = self.query_one("#format-error", Static)
        line.set_class(checking, "-checking")
        line.update(text)

    @on(Select.Changed, "#format-kind")
    def kind_changed(self, event: Select.Changed) -> None:
        self._kind_shown(self.kind)
        self._say("")

    # --- a file -----------------------------------------------------------------------------

    @on(Input.Submitted, "#format-file")
    def file_submitted(self) -> None:
        self.load_file()

    def load_file(self) -> None:
        """The file's text into the editor (undoable, Ctrl+Z), and the kind its ending says."""
        path = self.query_one("#format-file", Input).value
        try:
            text = read_format_file(path)
        except SpecchatError as e:
            self._say(f"✗ {e}")
            return
        suffix = "." + path.strip().rsplit(".", 1)[-1].lower() if "." in path else ""
        kind = KIND_OF_SUFFIX.get(suffix)
        select = self.query_one("#format-kind", Select)
        if kind is not None:
            select.value = kind
        elif not ReplyFormat(self.kind).uses_source:
            select.value = "json_schema" if text.lstrip().startswith("{") else "grammar"
        self._kind_shown(self.kind)
        editor = self.query_one("#format-source", TextArea)
        editor.replace(text, (0, 0), editor.document.end)
        lines = text.count("\n") + (not text.endswith("\n"))
        self._say(f"Loaded {len(text)} characters ({lines} lines) into the editor: Ctrl+S "
                  "checks and saves it.", checking=True)
        editor.focus()

    # --- saving -----------------------------------------------------------------------------

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "format-save":
            self.action_save()
        elif event.button.id == "format-load":
            self.load_file()
        elif event.button.id == "format-cancel":
            self.action_cancel()

    def action_save(self) -> None:
        if self.checking:
            return
        fmt = self.chosen()
        if fmt.uses_source and fmt.source is None:
            self._say(f"✗ {EMPTY_SOURCE[fmt.kind]}")
            return
        if not fmt.constrained:
            self.dismiss(fmt)
            return
        self._checking(True)
        self._say(f"Checking the {fmt.label}…", checking=True)
        self.check(fmt)

    def _checking(self, on: bool) -> None:
        """While a check runs, what it checks cannot change under it."""
        self.checking = on
        self.query_one("#format-source", TextArea).read_only = on
        for widget in ("#format-kind", "#format-save", "#format-load", "#format-file"):
            self.query_one(widget).disabled = on

    @work(thread=True, exit_on_error=False, group="format-check")
    def check(self, fmt: ReplyFormat) -> None:
        """Compile ``fmt`` in a thread; the verdict comes back as :class:`FormatChecked`."""
        try:
            compile_format(fmt)
            error = None
        except GrammarError as e:
            error = str(e)
        except Exception as e:  # never a traceback: the dialog says it, nothing is saved
            error = f"{type(e).__name__}: {e} (a bug in specchat)"
        self.post_message(FormatChecked(fmt, error))

    def on_format_checked(self, msg: FormatChecked) -> None:
        self._checking(False)
        self._kind_shown(self.kind)
        if msg.error is not None:
            self._say(f"✗ {msg.error}")
            self.query_one("#format-source", TextArea).focus()
            return
        self.dismiss(msg.reply_format)

    def action_cancel(self) -> None:
        self.dismiss(None)
