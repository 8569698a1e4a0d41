"""One owner for a chat and the reply in flight: :class:`ChatSession`. No Textual here.

The chat screen drives it from the UI thread and renders what it returns:

- ``send(text, ...)`` adds the user's turn and an empty reply, saves, and sets ``job`` (a
  :class:`~specchat.session.worker.ReplyJob`) for the screen to run in its worker thread
  (``run_reply``); ``cancel()`` stops it.
- ``apply(update)`` takes the worker's updates (posted back to the UI thread): the reply's
  :class:`Turn` grows, is checkpointed to the store every ``checkpoint_s`` while it streams
  (status ``interrupted`` until it ends, so a kill keeps it, marked), and ends with its stats;
  ``failed(job, error)`` ends it when the worker raised.
- ``regenerate(reply, ...)`` starts a new reply in place of one (the old one stays, an
  alternative), ``edit(message, text, ...)`` sends an edited message in place of one (what
  followed the old one stays on its branch); ``flip(turn, step)`` shows another alternative,
  ``delete(turn)`` takes a turn away (``deletion(turn)`` says what that does, for the
  confirmation). See :mod:`~specchat.session.conversation` for the tree.
- Every method returns a list of view updates (:mod:`~specchat.session.views`: ``Streamed``,
  ``Figures``, ``Ended``, ``Notice``, ``Failed``, ``SaveState``, ``Redraw``): the only way the
  session talks to the screen.

Saving never loses a turn: a write that fails (disk full, locked, read-only...) leaves the
turn in memory with ``saved`` false, says so once (a notice, and ``SaveState``), and is
retried in order on the next write and on ``tick()`` (the screen's timer), which also renews
this instance's ownership of the chat. A chat another specchat owns opens read-only.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from specchat.engine.decode.sampling import SamplerSettings
from specchat.errors import SpecchatError, StoreError
from specchat.session.conversation import Conversation, Deletion, Turn
from specchat.session.tool_reply import (
    RoundStarted,
    ToolAnswered,
    ToolAsked,
    ToolCalled,
    ToolJob,
    TurnNote,
)
from specchat.session.views import (
    CallAsked,
    CallShown,
    Ended,
    Failed,
    Figures,
    NewRound,
    Notice,
    Redraw,
    ResultShown,
    SaveState,
    Streamed,
    TranscriptNote,
    View,
)
from specchat.session.worker import ReplyChunk, ReplyDone, ReplyFigures, ReplyJob, ReplyUpdate
from specchat.store import (
    ChatStore,
    FateTrace,
    ReplyFormat,
    ReplyStats,
    chat_to_markdown,
    title_from,
)
from specchat.store.chat_tools import ChatTools
from specchat.store.ownership import Owner
from specchat.store.records import ChatSummary, StoredMessage
from specchat.store.tool_parts import CallRecord, ToolPart
from specchat.textsafe import safe_text
from specchat.tools.files import files_in
from specchat.tools.hub import McpHub
from specchat.tools.turn import DEFAULT_MAX_ROUNDS

CHECKPOINT_S = 1.0  # a streaming reply is written at most this often (and kept on a kill)
RENEW_S = 30.0  # how often tick() renews the chat's ownership (the store's LEASE_S is 120)


def failure_text(error: BaseException) -> tuple[str, str]:
    """A worker's error as (title, message) for the user: a bug says it is one."""
    if isinstance(error, SpecchatError):
        return "The reply could not be generated", str(error)
    return ("Something went wrong (a bug in specchat)",
            f"{type(error).__name__}: {error}\nThe chat so far is kept; you can go on.")


class ChatSession:
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

    # --- state ------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.job is not None

    @property
    def unsaved(self) -> int:
        """Turns in memory only, in this chat and in chats left before they were saved."""
        return sum(1 for c in self._conversations() for t in c.nodes if self._pending(t))

    def unsaved_turns(self) -> list[Turn]:
        """This chat's turns that are in memory only (the screen marks them)."""
        return [t for t in self.conversation.nodes if self._pending(t)]

    def _conversations(self) -> list[Conversation]:
        return [*self._backlog, self.conversation]

    @property
    def read_only_reason(self) -> str | None:
        if self.owner is None:
            return None
        return (f"This chat is open in another specchat ({self.owner.describe()}): it is "
                "read-only here. Ctrl+N starts a new chat.")

    # --- which chat -------------------------------------------------------------------------

    def new_chat(self) -> list[View]:
        """An empty chat (saved once its first message is)."""
        self._leave()
        self.conversation = Conversation()
        return [self._save_state()]

    def open_chat(self, chat_id: int) -> list[View]:
        """Show a saved chat; raises StoreError if it cannot be read (nothing changes then)."""
        conversation = Conversation.load(self.store, chat_id)
        self._leave()
        self.conversation = conversation
        try:
            self.owner = self.store.claim(chat_id)
        except StoreError:
            self.owner = None  # cannot tell now: each write checks the owner again anyway
        views: list[View] = [self._save_state()]
        if self.owner is not None:
            views.append(Notice(self.read_only_reason or "", "warning", "Read-only"))
        if any(t.status == "interrupted" for t in conversation.turns):
            views.append(Notice("A reply here was interrupted (specchat was closed while it "
                                "was being written); what was shown is kept.",
                                title="Interrupted reply"))
        return views

    def _leave(self) -> None:
        c = self.conversation
        if self.owner is None and any(self._pending(t) for t in c.nodes):
            self._backlog.append(c)  # still saved in order, by flush(), after this
        elif c.chat_id is not None and self.owner is None:
            with contextlib.suppress(StoreError):  # the row goes stale on its own
                self.store.release(c.chat_id)
        self.owner = None

    def delete_chat(self, chat_id: int) -> list[View]:
        """Delete a saved chat; the current one is replaced by an empty chat. Its unsaved turns
        go with it (the user asked for that)."""
        self.store.delete_chat(chat_id)
        self._backlog = [c for c in self._backlog if c.chat_id != chat_id]
        if chat_id != self.conversation.chat_id:
            return [self._save_state()]
        self.conversation, self.owner = Conversation(), None
        return [self._save_state()]

    def rename(self, title: str) -> None:
        chat_id = self.conversation.chat_id
        if chat_id is None:
            raise StoreError("this chat is not saved yet: send a message first")
        self.store.rename_chat(chat_id, title)
        self.conversation.title = " ".join(title.split())

    def set_prompt(self, preset: str | None, system_prompt: str | None) -> None:
        """This chat's system prompt from now on (None, None: the settings' one). Kept in
        memory even if saving it fails (StoreError); a chat not saved yet gets it when its
        first message is."""
        c = self.conversation
        c.preset, c.system_prompt = preset, system_prompt
        if c.chat_id is not None:
            self.store.set_prompt(c.chat_id, preset, system_prompt)

    def set_format(self, reply_format: ReplyFormat) -> None:
        """What this chat's replies follow from now on (the next reply on; one in flight keeps
        its own). Checked by the caller (``reply_format.compile_format``, in a worker); kept in
        memory even if saving it fails (StoreError); a chat not saved yet gets it when its
        first message is."""
        c = self.conversation
        c.reply_format = reply_format
        if c.chat_id is not None:
            self.store.set_format(c.chat_id, reply_format)

    def set_tools(self, tools: ChatTools) -> None:
        """Which servers' tools this chat offers from now on (the next reply on), and what it
        always allows. Kept in memory even if saving it fails (StoreError); a chat not saved
        yet gets it when its first message is."""
        c = self.conversation
        c.tools = tools
        if c.chat_id is not None:
            self.store.set_tools(c.chat_id, tools)

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

    def summaries(self) -> list[ChatSummary]:
        return self.store.list_chats()

    # --- a reply ----------------------------------------------------------------------------

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

    def cancel(self) -> bool:
        """Ask the reply in flight to stop; whether there was one still running."""
        if self.job is None or self.job.cancel.is_set():
            return False
        self.job.cancel.set()
        return True

    def apply(self, update: ReplyUpdate) -> list[View]:
        """A worker update, on the UI thread. Updates of an older job are ignored."""
        job, reply = self.job, self.reply
        if job is None or reply is None or update.job != job.id:
            return []
        if isinstance(update, ReplyFigures):
            return [Figures(update.stats, busy=True)]
        if isinstance(update, (ToolCalled, ToolAsked, ToolAnswered, RoundStarted, TurnNote)):
            return self._tool_update(update, reply)
        if isinstance(update, ReplyChunk):
            views: list[View] = []
            if update.segments:
                reply.trace.extend(update.segments)
                reply.saved = False
                views.append(Streamed(reply, update.segments))
            views += [Notice(n, "warning") for n in update.notices]
            # While writes fail, only tick() and the reply's end retry: each failed try can
            # wait the store's busy timeout on the UI thread.
            if self._problem is None and self.clock() - self._last_checkpoint >= self.checkpoint_s:
                self._last_checkpoint = self.clock()
                views += self.flush()
            return views
        assert isinstance(update, ReplyDone)
        s = update.stats
        # What ran: a reply that drafted nothing was decoded plainly, whatever the decoder;
        # the drafters are those that proposed tokens, not those the decoder could try.
        decoder = self._meta.decoder if s.drafted else "plain"
        stats = replace(self._meta, generation=s, gamma=update.live.gamma, decoder=decoder,
                        drafters=s.detail.drafters_used,
                        gamma_mode=update.live.mode or self._meta.gamma_mode)
        status = "cancelled" if s.stop_reason == "cancelled" else "done"
        return [*self._end(status, stats), Figures(update.live, busy=False)]

    def _tool_update(self, update: ToolCalled | ToolAsked | ToolAnswered | RoundStarted | TurnNote,
                     reply: Turn) -> list[View]:
        """A tool turn's step: a call joins the reply that made it, a result becomes a
        ``tool`` turn after it, and the next round's reply follows the last result."""
        if isinstance(update, ToolCalled):
            call = CallRecord(update.id, update.name, update.arguments)
            reply.tool = ToolPart(calls=(*reply.calls, call))
            reply.status, reply.saved = "done", False  # its text is whole: the calls end it
            return [*self.flush(), CallShown(reply, call)]
        if isinstance(update, ToolAsked):
            return [CallAsked(update.id, update.name, update.server, update.always)]
        if isinstance(update, ToolAnswered):
            result = Turn("tool", FateTrace.plain(safe_text(update.text)),
                          tool=ToolPart(call_id=update.id, name=update.name,
                                        status=update.status, seconds=update.seconds))
            self.conversation.attach(result, self._tail or reply)
            self._tail = result
            return [*self.flush(), ResultShown(result)]
        if isinstance(update, RoundStarted):
            after = self._tail or reply
            self.reply = Turn("assistant", FateTrace(), status="interrupted")
            self.conversation.attach(self.reply, after)
            self._tail = None
            return [NewRound(reply, self.reply)]
        return [TranscriptNote(update.text)]

    def failed(self, job_id: int, error: BaseException) -> list[View]:
        """The worker raised: end the reply as failed (its text, if any, is kept)."""
        if self.job is None or job_id != self.job.id:
            return []
        title, text = failure_text(error)
        return [*self._end("error", self.reply.stats if self.reply else None),
                Failed(title, text)]

    def _end(self, status: str, stats: ReplyStats | None) -> list[View]:
        reply, self.reply, self.job = self.reply, None, None
        if reply is None:
            return []
        reply.status, reply.stats, reply.saved = status, stats, False
        # (a reply whose calls have results after it is never dropped: they follow it)
        dropped = not reply.text and status != "cancelled" and reply.tool is None
        views: list[View] = []
        if dropped:  # never written: a reply's row exists only once it has text
            self.conversation.remove(reply, show_instead=self._shown_before)
            if self._shown_before is not None:
                views.append(Redraw())  # the reply it was to replace is shown again
        return [*self.flush(), Ended(reply, dropped), *views]

    def stop_for_exit(self) -> list[View]:
        """Quitting (the worker has stopped): keep the reply shown so far, as stopped."""
        reply = self.reply
        views: list[View] = []
        if reply is not None:
            views = self._end("cancelled" if reply.text else "error", reply.stats)
        return views + self.flush()

    def close(self) -> None:
        self._leave()

    # --- saving -----------------------------------------------------------------------------

    def _pending(self, turn: Turn) -> bool:
        if turn.saved:
            return False
        # A reply with no text yet has nothing to keep (a cancelled empty one is kept).
        return (bool(turn.text) or turn.role in ("user", "tool") or turn.status == "cancelled"
                or turn.tool is not None)

    def flush(self) -> list[View]:
        """Write what is not saved yet, in order; stop at the first failure (kept, retried)."""
        before = self._problem
        current = False
        try:
            for conv in list(self._backlog):
                self._write_all(conv)
                self._backlog.remove(conv)
                if conv.chat_id is not None and conv.chat_id != self.conversation.chat_id:
                    with contextlib.suppress(StoreError):
                        self.store.release(conv.chat_id)
            if self.owner is None:
                current = True
                self._write_all(self.conversation)
        except StoreError as e:
            self._problem = e
            views: list[View] = []
            if before is None or before.kind != e.kind:
                views.append(Notice(f"{e}. Kept on screen; saving again every few seconds.",
                                    "error", "Not saved"))
            if e.kind == "owned" and current and self.conversation.chat_id is not None:
                with contextlib.suppress(StoreError):  # another specchat took this chat over
                    self.owner = self.store.owner_of(self.conversation.chat_id)
            return [*views, self._save_state()]
        self._problem = None
        views = []
        if before is not None:
            views.append(Notice("Everything is saved again.", "information", "Saved"))
        return [*views, self._save_state()]

    def _write_all(self, c: Conversation) -> None:
        for turn in c.nodes:
            if self._pending(turn):
                self._write(c, turn)

    def _write(self, c: Conversation, turn: Turn) -> None:
        if c.chat_id is None:
            c.chat_id = self.store.create_chat(c.title, self.pair_label, preset=c.preset,
                                               system_prompt=c.system_prompt,
                                               reply_format=c.reply_format, tools=c.tools)
            c.pair = self.pair_label
        elif turn.role == "user" and c.pair != self.pair_label:
            # The chat goes on with another pair: the list says which one it is on now.
            self.store.set_pair(c.chat_id, self.pair_label)
            c.pair = self.pair_label
        parent = turn.parent
        while parent is not None and parent.message_id is None and not self._pending(parent):
            parent = parent.parent  # a turn never written (a failed empty reply): skip it
        if parent is not None and parent.message_id is None:
            self._write(c, parent)  # (nodes are in order: only a safety net)
        parent_id = parent.message_id if parent is not None else None
        fates = turn.trace.encode() if turn.role == "assistant" else None
        if turn.message_id is None:
            turn.message_id = self.store.add_message(c.chat_id, turn.role, turn.text,
                                                     fates=fates, stats=turn.stats,
                                                     status=turn.status, parent_id=parent_id,
                                                     active=turn.active, tool=turn.tool)
        else:
            self.store.update_message(turn.message_id, turn.text, fates=fates,
                                      stats=turn.stats, status=turn.status,
                                      parent_id=parent_id, active=turn.active, tool=turn.tool)
        turn.saved = True

    def _save_state(self) -> SaveState:
        return SaveState(self.unsaved)

    def tick(self) -> list[View]:
        """The screen's timer: renew this chat's ownership, retry what is unsaved, and take a
        read-only chat over once the other specchat has let go of it."""
        views: list[View] = []
        if self.owner is not None and self.conversation.chat_id is not None:
            with contextlib.suppress(StoreError):
                self.owner = self.store.claim(self.conversation.chat_id)
            if self.owner is None:
                views.append(Notice("The other specchat let go of this chat: you can write "
                                    "in it now.", title="Chat"))
        if self.clock() - self._last_renew >= RENEW_S:
            self._last_renew = self.clock()
            with contextlib.suppress(StoreError):  # the next write says what is wrong
                self.store.renew()
        return views + (self.flush() if self.unsaved or views else [])

    def rescue(self, folder: Path) -> Path | None:
        """On quitting with turns still unsaved: those chats, whole, as Markdown in ``folder``."""
        if not self.unsaved:
            return None
        now = time.time()
        parts = []
        for c in self._conversations():
            if not any(self._pending(t) for t in c.nodes):
                continue
            rows = [StoredMessage(0, c.chat_id or 0, i, t.role, t.text, None, t.stats,
                                  t.status, now, tool=t.tool) for i, t in enumerate(c.turns)]
            chat = ChatSummary(c.chat_id or 0, c.title, self.pair_label, now, now, len(rows))
            parts.append(chat_to_markdown(chat, rows))
        path = folder / time.strftime("unsaved-chat-%Y%m%d-%H%M%S.md")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text("\n\n".join(parts), encoding="utf-8")
        except OSError:
            return None
        return path
