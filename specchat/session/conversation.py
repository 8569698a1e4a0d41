"""A chat as data: its turns, their token fates and stats, and how they map to the engine's
messages and to the store's rows. Only :class:`~specchat.session.controller.ChatSession`
changes a turn; widgets read them. No Textual here.

A chat is a tree: each turn follows its ``parent`` (None: the first turn). Turns with the same
parent are *alternatives*: a regenerated reply next to the old one, an edited message next to
the one it replaced (with the turns that followed each, their branch). One alternative of each
group is ``active``; following the active ones from the first turn gives the shown branch,
``turns``, which is what the screen draws and the model reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specchat.engine.decode.messages import Message, ToolCall
from specchat.store import ChatStore, FateTrace, ReplyFormat, ReplyStats, StoredMessage
from specchat.store.chat_tools import NO_TOOLS, ChatTools
from specchat.store.reply_format import TEXT
from specchat.store.tool_parts import CallRecord, ToolPart, prose


@dataclass(eq=False)  # a turn is itself: two equal texts are still two turns
class Turn:
    role: str  # "user" | "assistant" | "tool" (a call's result, as the model read it)
    trace: FateTrace
    stats: ReplyStats | None = None
    status: str = "done"  # done | cancelled | error | interrupted (still streaming, or killed)
    message_id: int | None = None  # its row, once written
    saved: bool = False  # the row holds what the turn holds now
    parent: Turn | None = field(default=None, repr=False)  # the turn it follows
    active: bool = True  # the shown one among its alternatives
    # An assistant turn's tool calls; a tool turn's answer (which call, how it ended).
    tool: ToolPart | None = None

    @property
    def text(self) -> str:
        return self.trace.text

    @property
    def said(self) -> str:
        """What the turn says in words: a reply that called tools, without its calls."""
        return prose(self.text, self.tool) if self.role == "assistant" else self.text

    @property
    def calls(self) -> tuple[CallRecord, ...]:
        return self.tool.calls if self.tool is not None else ()

    def call(self) -> CallRecord | None:
        """A tool turn's call: found in the reply that made it, up its branch."""
        if self.tool is None or self.tool.call_id is None:
            return None
        up = self.parent
        while up is not None and up.role == "tool":
            up = up.parent
        if up is None:
            return None
        return next((c for c in up.calls if c.id == self.tool.call_id), None)

    @classmethod
    def user(cls, text: str) -> Turn:
        return cls("user", FateTrace.plain(text))

    @classmethod
    def from_stored(cls, m: StoredMessage) -> Turn:
        trace = FateTrace.decode(m.content, m.fates) if m.role == "assistant" else \
            FateTrace.plain(m.content)
        return cls(m.role, trace, m.stats, m.status, m.id, saved=True, active=m.active,
                   tool=m.tool)


@dataclass(frozen=True)
class Deletion:
    """What deleting a turn takes away, and what it relinks (see :meth:`Conversation.deletion`)."""

    turn: Turn
    removed: list[Turn]  # in the order of the chat
    relinked: list[tuple[Turn, Turn | None, bool]]  # (turn, its new parent, shown)
    question: str  # for the confirmation dialog


@dataclass
class Conversation:
    chat_id: int | None = None  # None until the first message is saved
    title: str = "New chat"
    nodes: list[Turn] = field(default_factory=list)  # every branch; a parent before its children
    pair: str = ""  # the pair (or model) the chat was last continued with, as saved
    preset: str | None = None  # the system-prompt preset chosen for this chat, by name
    system_prompt: str | None = None  # this chat's own system prompt (None: the settings')
    reply_format: ReplyFormat = TEXT  # what its replies follow: free text, JSON, a grammar
    tools: ChatTools = NO_TOOLS  # the servers whose tools it offers; what it always allows

    @classmethod
    def load(cls, store: ChatStore, chat_id: int) -> Conversation:
        chat = store.get_chat(chat_id)
        rows = store.messages(chat_id)
        by_id = {m.id: m for m in rows}
        turns: dict[int, Turn] = {}
        nodes: list[Turn] = []
        for m in rows:  # seq order: a parent was written before its children
            if m.role == "system":
                continue
            turn = Turn.from_stored(m)
            parent_id, hops = m.parent_id, 0
            while parent_id is not None and parent_id not in turns and hops < len(rows):
                # a system row (or a damaged link) in between: follow it up
                up = by_id.get(parent_id)
                parent_id, hops = (up.parent_id if up is not None else None), hops + 1
            turn.parent = turns.get(parent_id) if parent_id is not None else None
            turns[m.id] = turn
            nodes.append(turn)
        return cls(chat.id, chat.title, nodes, chat.pair, chat.preset, chat.system_prompt,
                   chat.reply_format, chat.tools)

    # --- the tree -----------------------------------------------------------------------------

    @property
    def turns(self) -> tuple[Turn, ...]:
        """The shown branch, first turn first (a tuple: change the chat through the methods)."""
        children = self._children()
        out: list[Turn] = []
        parent: Turn | None = None
        while (kids := children.get(id(parent))):
            shown = [k for k in kids if k.active] or kids
            parent = shown[-1]
            out.append(parent)
        return tuple(out)

    def _children(self) -> dict[int, list[Turn]]:
        out: dict[int, list[Turn]] = {}
        for t in self.nodes:
            out.setdefault(id(t.parent), []).append(t)
        return out

    def children(self, parent: Turn | None) -> list[Turn]:
        return [t for t in self.nodes if t.parent is parent]

    def alternatives(self, turn: Turn) -> list[Turn]:
        """``turn`` and the turns in its place on other branches, oldest first."""
        return self.children(turn.parent)

    def position(self, turn: Turn) -> tuple[int, int]:
        """(which, of how many) alternatives ``turn`` is, counting from 1."""
        alts = self.alternatives(turn)
        return (alts.index(turn) + 1 if turn in alts else 1), max(len(alts), 1)

    def branch(self, turn: Turn) -> list[Turn]:
        """``turn`` and every turn after it, on all its branches, in the order of the chat."""
        out: set[int] = {id(turn)}
        for t in self.nodes:  # parents come first, so one pass finds every descendant
            if t.parent is not None and id(t.parent) in out:
                out.add(id(t))
        return [t for t in self.nodes if id(t) in out]

    def attach(self, turn: Turn, parent: Turn | None) -> list[Turn]:
        """Add ``turn`` after ``parent`` as the shown alternative; returns the turns whose
        shown flag changed (the caller saves them again)."""
        turn.parent = parent
        turn.active = True
        changed = [t for t in self.children(parent) if t.active]
        for t in changed:
            t.active = False
            t.saved = False
        self.nodes.append(turn)
        return changed

    def add(self, turn: Turn) -> None:
        """Add ``turn`` after the shown branch's last turn."""
        path = self.turns
        self.attach(turn, path[-1] if path else None)

    def select(self, turn: Turn) -> list[Turn]:
        """Show ``turn`` instead of its alternatives; returns the turns whose flag changed."""
        changed = []
        for t in self.alternatives(turn):
            if t.active != (t is turn):
                t.active = t is turn
                t.saved = False
                changed.append(t)
        return changed

    def remove(self, turn: Turn, show_instead: Turn | None = None) -> None:
        """Take away a turn that nothing follows (a reply that ended with nothing); the
        alternative shown before it (``show_instead``) is shown again."""
        self.nodes.remove(turn)
        alts = self.children(turn.parent)
        if turn.active and alts:
            self.select(show_instead if show_instead in alts else alts[-1])

    def engine_messages(self, system_prompt: str, upto: Turn | None = None) -> list[Message]:
        """The conversation as the model sees it: the shown branch (up to and including
        ``upto``, when given). A stopped reply stays in (the user saw it); a reply that
        failed with no text is left out. A reply that called tools is its words and its calls;
        a tool result answers its call, and one whose call is gone (deleted) is left out."""
        msgs = [Message("system", system_prompt)] if system_prompt.strip() else []
        unanswered: set[str] = set()  # the calls of the reply before, not answered yet
        for t in self.turns:
            if t.role == "tool":
                call_id = t.tool.call_id if t.tool is not None else None
                if call_id is not None and call_id in unanswered:
                    unanswered.discard(call_id)
                    msgs.append(Message("tool", t.text, tool_call_id=call_id))
            elif t.role == "assistant" and t.calls:
                msgs.append(Message("assistant", t.said, tuple(
                    ToolCall(c.id, c.name, c.arguments) for c in t.calls)))
                unanswered = {c.id for c in t.calls}
            elif not (t.role == "assistant" and not t.text.strip()):
                msgs.append(Message(t.role, t.text))
                unanswered = set()
            if t is upto:
                break
        return msgs

    def assistant_stats(self) -> Sequence[ReplyStats]:
        return [t.stats for t in self.turns if t.role == "assistant" and t.stats]

    # --- deleting -----------------------------------------------------------------------------

    def deletion(self, turn: Turn) -> Deletion:
        """What deleting ``turn`` does, and the question that says so.

        - A turn with alternatives: it goes with its branch (the turns that followed it
          there); the alternative next to it is shown instead.
        - Otherwise: it goes, and a message its replies with it (every alternative reply);
          the turns after them stay, now following the turn before.
        """
        alts = self.alternatives(turn)
        if len(alts) > 1:
            removed = self.branch(turn)
            i = alts.index(turn)
            instead = alts[i + 1] if i + 1 < len(alts) else alts[i - 1]
            relinked = [(instead, instead.parent, True)] if turn.active else []
            n_after = len(removed) - 1
            what = "reply" if turn.role == "assistant" else "message"
            tail = (f" and the {n_after} message{'s' if n_after > 1 else ''} after it on its "
                    "branch" if n_after else "")
            question = (f"Delete this {what} (alternative {i + 1} of {len(alts)}){tail}? "
                        "The other alternatives stay.")
            return Deletion(turn, removed, relinked, question)
        replies = self.children(turn) if turn.role == "user" else []
        gone = [turn, *replies]
        removed = [t for t in self.nodes if any(t is g for g in gone)]
        shown = set(map(id, self.turns))
        later = [t for g in gone for t in self.children(g) if not any(t is x for x in gone)]
        keep = next((t for t in later if id(t) in shown), later[-1] if later else None)
        relinked = [(t, turn.parent, t is keep) for t in later]
        n = len(replies)
        if turn.role == "user":
            what = ("this message" if not n else "this message and its reply" if n == 1
                    else f"this message and its {n} replies (alternatives)")
        else:
            what = "this tool result" if turn.role == "tool" else "this reply"
        after = " The messages after it stay." if later else ""
        return Deletion(turn, removed, relinked, f"Delete {what}?{after}")

    def apply(self, deletion: Deletion) -> None:
        gone = set(map(id, deletion.removed))
        self.nodes = [t for t in self.nodes if id(t) not in gone]
        for t, parent, active in deletion.relinked:
            t.parent, t.active = parent, active
