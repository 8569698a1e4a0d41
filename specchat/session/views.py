"""What a chat session tells the screen: every :class:`~specchat.session.controller.
ChatSession` method returns a list of these view updates, the only way it talks to the UI."""

from __future__ import annotations

from dataclasses import dataclass

from specchat.session.conversation import Turn
from specchat.session.live import LiveStats
from specchat.store import Segment
from specchat.store.tool_parts import CallRecord


@dataclass(frozen=True)
class Streamed:
    """New segments of ``turn`` (already added to it): draw them."""

    turn: Turn
    segments: list[Segment]


@dataclass(frozen=True)
class Figures:
    stats: LiveStats
    busy: bool


@dataclass(frozen=True)
class Ended:
    """The reply ended (``turn.status`` says how); ``dropped``: it had nothing, remove it."""

    turn: Turn
    dropped: bool


@dataclass(frozen=True)
class Notice:
    text: str
    severity: str = "information"  # information | warning | error
    title: str = ""


@dataclass(frozen=True)
class Failed:
    """The reply could not be generated: say so in a dialog."""

    title: str
    text: str


@dataclass(frozen=True)
class SaveState:
    """How many turns are in memory only (0: everything is saved)."""

    unsaved: int


@dataclass(frozen=True)
class Redraw:
    """The shown branch changed (another alternative, a deleted turn): draw it again."""


@dataclass(frozen=True)
class CallShown:
    """``turn`` (the reply being written) called a tool: show the call."""

    turn: Turn
    call: CallRecord


@dataclass(frozen=True)
class CallAsked:
    """Call ``call_id`` waits for the user's answer (``always`` False), or runs now because
    the user always allows ``name`` in this chat."""

    call_id: str
    name: str
    server: str
    always: bool


@dataclass(frozen=True)
class ResultShown:
    """A call's result, a ``tool`` turn (its ``tool.call_id`` names the call)."""

    turn: Turn


@dataclass(frozen=True)
class NewRound:
    """The reply ``ended`` made calls and is whole; the model replies again in ``turn``."""

    ended: Turn
    turn: Turn


@dataclass(frozen=True)
class TranscriptNote:
    """One line for the transcript under the turn (a server that did not start, the cap)."""

    text: str


View = (Streamed | Figures | Ended | Notice | Failed | SaveState | Redraw | CallShown
        | CallAsked | ResultShown | NewRound | TranscriptNote)
