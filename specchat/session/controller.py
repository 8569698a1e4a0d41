"""One owner for a chat and the reply in flight: :class:`ChatSession`. No Textual here.

The chat screen drives it from the UI thread and renders what it returns:

- ``send(text, ...)`` adds the user's turn and an empty reply, saves, and sets ``job`` (a
  :class:`~specchat.session.worker.ReplyJob`) for the screen to run in its worker thread
  (``run_reply``); ``cancel()`` stops it.
- ``apply(update)`` takes the worker's updates (posted back to the UI thread) and
  ``failed(job, error)`` ends a reply when the worker raised: see
  :mod:`~specchat.session.reply_events`.
- ``regenerate(reply, ...)`` starts a new reply in place of one (the old one stays, an
  alternative), ``edit(message, text, ...)`` sends an edited message in place of one (what
  followed the old one stays on its branch); ``flip(turn, step)`` shows another alternative,
  ``delete(turn)`` takes a turn away (``deletion(turn)`` says what that does, for the
  confirmation). See :mod:`~specchat.session.conversation` for the tree.
- Which chat is shown and its settings (``new_chat``, ``open_chat``, ``set_tools``...) are
  :mod:`~specchat.session.chat_choice`; saving, with its retries, is
  :mod:`~specchat.session.saving`.
- Every method returns a list of view updates (:mod:`~specchat.session.views`: ``Streamed``,
  ``Figures``, ``Ended``, ``Notice``, ``Failed``, ``SaveState``, ``Redraw``): the only way the
  session talks to the screen.

Saving never loses a turn: a write that fails is kept in memory and retried (see
:mod:`~specchat.session.saving`). A chat another specchat owns opens read-only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from specchat.engine.decode.sampling import SamplerSettings
from specchat.errors import StoreError
from specchat.session.chat_choice import ChatChoice
from specchat.session.conversation import Conversation, Deletion, Turn
from specchat.session.reply_events import CHECKPOINT_S, ReplyEvents
from specchat.session.tool_reply import ToolJob
from specchat.session.views import Notice, Redraw, View
from specchat.session.worker import ReplyJob
from specchat.store import ChatStore, FateTrace, ReplyStats, title_from
from specchat.store.ownership import Owner
from specchat.tools.files import files_in
from specchat.tools.hub import McpHub
from specchat.tools.turn import DEFAULT_MAX_ROUNDS


class ChatSession(ChatChoice, ReplyEvents):
    def __init__(self, store: ChatStore, pair_label: str = "",
                 clock: Callable[[], float] = time.monotonic,
                 checkpoint_s: float = CHECKPOINT_S,
                 hub: Callable[[], McpHub | None] = lambda: None,
                 max_tool_rounds: int = DEFAULT_MAX_ROUNDS) -> None:
        self.store = store
        # The configured MCP servers (started when a chat with tools first replies; None when
        # none are configured), and the cap on a turn's rounds of tool calls.
        self.hub = hub
        self.max_tool_rounds = max_tool_rounds
        self.pair_label = pair_label
        self.clock = clock
        self.checkpoint_s = checkpoint_s
        self.conversation = Conversation()
        self.owner: Owner | None = None  # another specchat writing this chat: read-only here
        self.job: ReplyJob | None = None
        self.reply: Turn | None = None
        self._shown_before: Turn | None = None  # the alternative a regenerated reply replaced
        self._tail: Turn | None = None  # a tool turn's last result: the next round follows it
        self._meta = ReplyStats()
        self._jobs = 0
        self._last_checkpoint = 0.0
        self._problem: StoreError | None = None  # the last write failure, until one succeeds
        self._backlog: list[Conversation] = []  # chats left with turns still unsaved
        self._last_renew = clock()

    @property
    def busy(self) -> bool:
        return self.job is not None

    def answer(self, call_id: str, name: str, decision: str) -> list[View]:
        """The user's answer to a call (once, always, deny), for the reply's worker. "always"
        is this chat's from now on, saved with it."""
        job = self.job
        if job is None or job.tools is None:
            return []
        job.tools.approvals.answer(call_id, name, decision)
        if decision != "always":
            return []
        try:
            self.set_tools(self.conversation.tools.allowing(name))
        except StoreError as e:
            return [Notice(f"{e}; {name} is always allowed until this chat is closed", "error")]
        return []

    def send(self, text: str, system_prompt: str, sampling: SamplerSettings,
             meta: ReplyStats | None = None, title: str | None = None) -> list[View]:
        """Add the user's message and start a reply: ``job`` is then set for the worker.

        ``meta`` is saved with the reply's stats (decoder, γ mode, context size, pair; its
        generation figures and γ are replaced by the reply's own). ``title``: what a new
        chat's title is made from (default ``text``; the typed words, not a file). In a
        read-only chat nothing is added and ``job`` stays None (the text stays with the user).
        """
        refused = self._refused()
        if refused:
            return refused
        user = Turn.user(text)
        if self.conversation.chat_id is None and not self.conversation.nodes:
            self.conversation.title = title_from(title or text)
        self.conversation.add(user)
        return self._start(user, system_prompt, sampling, meta)

    def _refused(self, what: str = "") -> list[View]:
        if self.job is not None:
            return [Notice(f"Still replying: press Esc to stop it first{what}.", "warning")]
        if self.owner is not None:
            return [Notice(self.read_only_reason or "", "warning", "Read-only")]
        return []

    def _start(self, after: Turn, system_prompt: str, sampling: SamplerSettings,
               meta: ReplyStats | None, shown_before: Turn | None = None) -> list[View]:
        """A reply to the shown branch up to ``after``: ``reply`` and ``job`` are set."""
        messages = self.conversation.engine_messages(system_prompt, upto=after)
        self.reply = Turn("assistant", FateTrace(), status="interrupted")
        self.conversation.attach(self.reply, after)
        self._shown_before = shown_before
        self._jobs += 1
        # The chat's format goes with the job: its worker compiles it into the reply's
        # sampler settings (``reply_sampling``), off this thread. So do the files the message
        # carries (attached, see session.attachments): the reply's predicted output, whether
        # it is sent, regenerated or edited.
        predicted = tuple(files_in(after.text)) if after.role == "user" else ()
        tools, notes = self._tool_job()
        self.job = ReplyJob(self._jobs, messages, sampling,
                            reply_format=self.conversation.reply_format, predicted=predicted,
                            tools=tools)
        self._tail = None
        self._meta = meta or ReplyStats()
        self._last_checkpoint = self.clock()
        return [*notes, *self.flush()]

    def _tool_job(self) -> tuple[ToolJob | None, list[View]]:
        """The reply's tools, when the chat offers some (and why not, when it cannot)."""
        c = self.conversation
        if not c.tools.on:
            return None, []
        if c.reply_format.constrained:
            return None, [Notice(f"This chat's replies follow its {c.reply_format.label}, "
                                 "which a tool call cannot: this reply offers no tools (F10 "
                                 "sets free text).", "warning", "Tools")]
        hub = self.hub()
        if hub is None:
            return None, [Notice("This chat offers tools, but no MCP servers are configured: "
                                 "add them under mcp_servers: in config.yaml.", "warning",
                                 "Tools")]
        return ToolJob(hub, c.tools, self.max_tool_rounds), []

    def regenerate(self, reply: Turn | None, system_prompt: str, sampling: SamplerSettings,
                   meta: ReplyStats | None = None) -> list[View]:
        """A new reply in place of ``reply`` (default: the last one shown); the old one stays
        as an alternative, with whatever followed it. When the shown branch ends in a message
        with no reply (it failed), this replies to it."""
        refused = self._refused(" before regenerating")
        if refused:
            return refused
        path = self.conversation.turns
        if reply is None:
            reply = path[-1] if path else None
        if reply is None:
            return [Notice("Nothing to regenerate yet: send a message first.")]
        if reply.role in ("user", "tool"):  # (a turn that ended on a tool's result)
            return self._start(reply, system_prompt, sampling, meta)
        if reply not in path or reply.parent is None:
            return [Notice("Only a reply in the chat shown can be regenerated.", "warning")]
        n = len(self.conversation.alternatives(reply))
        if sampling.seed is not None:  # a fixed seed would draw the same reply again
            sampling = sampling.with_(seed=sampling.seed + n)
        views = self._start(reply.parent, system_prompt, sampling, meta, shown_before=reply)
        if sampling.temperature == 0:
            views.append(Notice("Temperature is 0 (greedy): the new reply comes out the same "
                                "as the old one. Ctrl+S changes it."))
        return views

    def edit(self, message: Turn, text: str, system_prompt: str, sampling: SamplerSettings,
             meta: ReplyStats | None = None) -> list[View]:
        """Send ``text`` in place of the user's ``message``: the old message and what followed
        it stay, another branch the user can flip back to."""
        refused = self._refused(" before editing")
        if refused:
            return refused
        if message.role != "user" or message not in self.conversation.turns:
            return [Notice("Only a message of yours in the chat shown can be edited.",
                           "warning")]
        if not text.strip():
            return [Notice("An edited message cannot be empty.", "warning")]
        edited = Turn.user(text)
        self.conversation.attach(edited, message.parent)
        return self._start(edited, system_prompt, sampling, meta)

    def flip(self, turn: Turn, step: int) -> list[View]:
        """Show the alternative ``step`` places from ``turn`` (-1: the one before)."""
        if self.job is not None:
            return [Notice("Wait for the reply to finish (Esc stops it) before switching "
                           "alternatives.", "warning")]
        alts = self.conversation.alternatives(turn)
        if turn not in alts or len(alts) < 2:
            return [Notice("This message has no alternatives.")]
        i = max(0, min(len(alts) - 1, alts.index(turn) + step))
        if alts[i] is turn:
            return []
        self.conversation.select(alts[i])
        return [Redraw(), *self.flush()]

    def deletion(self, turn: Turn) -> Deletion:
        return self.conversation.deletion(turn)

    def delete(self, deletion: Deletion) -> list[View]:
        """Delete a turn as ``deletion`` (from :meth:`deletion`) says; nothing changes when the
        store refuses."""
        refused = self._refused(" before deleting")
        if refused:
            return refused
        if not any(t is deletion.turn for t in self.conversation.nodes):
            return []
        chat_id = self.conversation.chat_id
        ids = [t.message_id for t in deletion.removed if t.message_id is not None]
        relink = [(t.message_id, p.message_id if p else None, active)
                  for t, p, active in deletion.relinked if t.message_id is not None]
        if chat_id is not None and (ids or relink):
            try:
                self.store.delete_messages(chat_id, ids, relink)
            except StoreError as e:
                return [Notice(str(e), "error", "Not deleted")]
        self.conversation.apply(deletion)
        return [Redraw(), *self.flush(), Notice("Deleted.", title="Message")]
