"""What a chat session tells the screen: every :class:`~specchat.session.controller.
ChatSession` method returns a list of these view updates, the only way it talks to the UI."""

from __future__ import annotations

from dataclasses import dataclass

from specchat.session.conversation import Turn
from specchat.session.live import LiveStats
from specchat.store import Segment


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


View = Streamed | Figures | Ended | Notice | Failed | SaveState | Redraw
