"""Every key the chat screen answers to, in one table: the bindings, the footer and the help
screen are all made from it, so they cannot disagree.

Keys are chosen to work while the message box has focus (so no bare letters) and in ordinary
terminals: Ctrl+J arrives as a distinct key everywhere, Shift+Enter only where the terminal
speaks the kitty keyboard protocol (kitty, WezTerm, foot, Ghostty, recent iTerm2). Ctrl+B is
left alone for tmux users.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding


@dataclass(frozen=True)
class Key:
    keys: str  # Textual key names, comma-separated
    action: str
    label: str  # short, for the footer
    help: str  # one line, for the help screen
    show: bool = True  # in the footer
    priority: bool = False  # before the focused widget sees it


CHAT_KEYS: tuple[Key, ...] = (
    Key("escape", "stop", "Stop", "Stop the reply being generated (what was written is kept)",
        priority=True),
    Key("ctrl+n", "new_chat", "New", "Start a new chat"),
    Key("ctrl+t", "toggle_view", "Tokens/MD",
        "Switch finished replies between Markdown and the token-fate colours", priority=True),
    Key("ctrl+r", "toggle_rejected", "Drafts",
        "Show or hide the rejected draft tokens (struck through)", priority=True),
    Key("ctrl+l", "toggle_chats", "Chats",
        "Show or hide the list of past chats (typing there goes to the message box)",
        priority=True),
    Key("ctrl+s", "settings", "Settings", "Settings: system prompt, sampling, γ, drafter, seed",
        priority=True),
    Key("ctrl+o", "export", "Export", "Export this chat to a Markdown file", priority=True),
    # F2: the message box (a TextArea) takes F6 and F7, terminals F11; in the chat list F2
    # stays its rename (the focused list's binding comes first), as Delete is its own there.
    Key("f2", "attach_file", "Attach",
        "Attach a text file to the message: a chip shows its size and tokens (press it to "
        "remove it); the model reads it as a fenced block with its path (in the chat list, "
        "F2 renames the chat)"),
    Key("f3", "pair_models", "Pair",
        "Pair models: choose, download, check, calibrate and switch to a target + draft",
        show=False),  # the footer is full at 120 columns: Attach (F2) took its place
    Key("f5", "race", "Race", "Race: this pair's target plain vs speculative, side by side"),
    Key("f1", "help", "Help", "This list of keys"),
    Key("ctrl+f", "search", "Search",
        "Search the messages of every chat; Enter opens the chat at that message",
        priority=True),
    Key("f8", "switch_pair", "Switch",
        "Switch to another pair or model on disk (it loads; this chat stays open)",
        show=False),  # F1 and the palette list it: the footer is full at 80 columns
    Key("f12", "stop_calibration", "Stop calibrating",
        "Stop calibrating this pair in the background (shown while it runs); it does not start "
        "on its own again: `specchat models calibrate PAIR` measures it later"),
    Key("f9", "pick_preset", "Prompt",
        "This chat's system prompt: a named preset (yours: config.yaml's presets), one of "
        "its own, or the Settings' one", show=False),
    Key("f10", "reply_format", "Format",
        "This chat's reply format: free text, any JSON object, a JSON schema or a grammar "
        "(Lark, GBNF) that every reply follows", show=False),
    # One message: the cursor moves from the message box (typing still goes there).
    Key("ctrl+up", "select_previous", "", "Select the message above (the message keys below "
        "then act on it; without a selection they act on the last reply)", show=False),
    Key("ctrl+down", "select_next", "", "Select the message below (past the last: none)",
        show=False),
    Key("f4", "message_menu", "Message",
        "Message actions: copy it, copy a code block, regenerate, edit and resend, delete",
        show=False),  # the footer is full at 80 columns: F1 and the palette list it
    Key("ctrl+g", "regenerate", "", "Regenerate the reply; the old one stays as an "
        "alternative (‹ 2/2 ›)", show=False),
    Key("alt+left", "previous_alternative", "", "Show the previous alternative of the "
        "message (a reply regenerated, a message edited): ‹", show=False),
    Key("alt+right", "next_alternative", "", "Show the next alternative: ›", show=False),
)

# The chat keys the footer keeps in a narrow terminal (the others: F1, Ctrl+P).
NARROW_FOOTER = frozenset({"stop", "new_chat", "toggle_view", "toggle_chats", "settings", "help"})

RACE_KEYS: tuple[Key, ...] = (
    Key("r", "run_again", "Run again", "Record both runs again and replay them"),
    Key("p", "pick_prompt", "Prompt", "Switch prompt: a built-in one or your own"),
    Key("s", "swap_pair", "Pair", "Race another pair (pairs whose models are on disk)"),
    Key("d", "pick_drafter", "Drafter",
        "Race another drafter: the draft model, n-gram lookup, a tree, the planner's choice…"),
    Key("x", "toggle_rejected", "Drafts", "Show or hide the rejected draft tokens"),
    Key("e", "export", "Export", "Write report.md and race.svg to a new folder"),
    Key("space", "skip", "Skip", "Skip the replay to the end"),
    Key("escape", "back", "Back", "Back to the chat"),
)

INPUT_KEYS: tuple[tuple[str, str], ...] = (
    ("Enter", "Send the message"),
    ("Shift+Enter / Ctrl+J", "New line in the message (Ctrl+J works in every terminal)"),
    ("Tab / Shift+Tab", "Move between the message box, the transcript and the chat list"),
    ("@path then Tab", "Complete the path; once it names one file, attach it (as F2 does)"),
)

LIST_KEYS: tuple[tuple[str, str], ...] = (
    ("Enter", "Open the highlighted chat"),
    ("F2", "Rename the highlighted chat"),
    ("Delete", "Delete the highlighted chat (asks first)"),
    ("Any letter", "Goes to the message box, which takes the focus (so does a paste)"),
)

APP_KEYS: tuple[tuple[str, str], ...] = (
    ("Ctrl+P", "Command palette: every action by name"),
    ("Ctrl+Q", "Quit"),
)


def bindings(keys: tuple[Key, ...]) -> list[Binding]:
    return [Binding(k.keys, k.action, k.label, show=k.show, priority=k.priority) for k in keys]


def display(keys: str) -> str:
    """``ctrl+n,f1`` → ``Ctrl+N / F1``"""
    out = []
    for key in keys.split(","):
        parts = key.split("+")
        out.append("+".join(p.capitalize() if len(p) > 1 else p.upper() for p in parts))
    return " / ".join(out).replace("Escape", "Esc")
