"""A chat's reply with tools: :class:`~specchat.tools.turn.ToolTurn` run for the chat screen,
with each call put to the user. No Textual here.

The reply worker (:func:`~specchat.session.worker.run_reply`) takes the events of
:func:`tool_events`: the engine's own (batched into the reply's text as usual) and typed
updates for the screen, in order — a call the model wrote (:class:`ToolCalled`), the question
put to the user or the "always" that answered it (:class:`ToolAsked`), the result
(:class:`ToolAnswered`), the next reply of the turn beginning (:class:`RoundStarted`) and lines
for the transcript (:class:`TurnNote`: a server that did not start, the round cap).

Nothing runs without the user's answer, given on the UI thread through :class:`Approvals`,
unless the user answered "always" for that tool in this chat. The worker waits for it; Esc
(the reply's cancel event) ends the wait as a cancelled call, and a running call's MCP
request is cancelled (:meth:`McpHub.call`). The turn then ends with what it has.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.events import (
    Event,
    GenerationStats,
    RejectedEvent,
    StepEvent,
    TokenEvent,
)
from specchat.engine.decode.fold import EventFold
from specchat.engine.decode.messages import Message
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.tool_calls import OPEN
from specchat.errors import Cancelled
from specchat.store.chat_tools import ChatTools
from specchat.textsafe import safe_text
from specchat.tools.hub import McpHub
from specchat.tools.offer import OfferedTool, ToolSet
from specchat.tools.turn import (
    DEFAULT_MAX_ROUNDS,
    ReplyText,
    ToolCallEvent,
    ToolResultEvent,
    ToolTurn,
    TurnResult,
    prediction_tokens,
)

NO_TOOL_FORMAT = ("this model's chat template does not take tools (it has no " + OPEN
                  + " format to call them with): it replies without them. Use a model whose "
                  "template has one (Qwen2.5, Hermes; e.g. --pair qwen-coder)")
CANCELLED_BEFORE = "error: the call was cancelled by the user before it was allowed to run"


@dataclass(frozen=True)
class ToolCalled:
    """The model wrote a call (``arguments``: its JSON text); it is checked, then asked."""

    job: int
    id: str
    name: str
    arguments: str
    round: int


@dataclass(frozen=True)
class ToolAsked:
    """The call is put to the user (``always`` False), or runs now because the user always
    allows this tool in this chat (``always`` True)."""

    job: int
    id: str
    name: str
    server: str
    always: bool


@dataclass(frozen=True)
class ToolAnswered:
    """A call's result as the model reads it (``status``: ok, error, refused, cancelled)."""

    job: int
    id: str
    name: str
    text: str
    status: str
    seconds: float


@dataclass(frozen=True)
class RoundStarted:
    """The model replies again, after the results (the turn's next assistant message)."""

    job: int
    round: int


@dataclass(frozen=True)
class TurnNote:
    """A line the transcript shows under the turn (a server that did not start, the cap)."""

    job: int
    text: str


ToolUpdate = ToolCalled | ToolAsked | ToolAnswered | RoundStarted | TurnNote
TOOL_UPDATES = (ToolCalled, ToolAsked, ToolAnswered, RoundStarted, TurnNote)
DECISIONS = ("once", "always", "deny")


class Approvals:
    """The user's answers to one reply's calls, from the UI thread to the worker's."""

    def __init__(self, always: Iterable[str] = ()) -> None:
        self._cond = threading.Condition()
        self._always = set(always)
        self._answers: dict[str, str] = {}

    def always(self, name: str) -> bool:
        with self._cond:
            return name in self._always

    def answer(self, call_id: str, name: str, decision: str) -> None:
        """The user's answer (once, always, deny) to call ``call_id`` of tool ``name``."""
        if decision not in DECISIONS:
            raise ValueError(f"unknown answer {decision!r}")
        with self._cond:
            self._answers[call_id] = decision
            if decision == "always":
                self._always.add(name)
            self._cond.notify_all()

    def wait(self, call_id: str, cancel: threading.Event, poll_s: float = 0.1) -> str | None:
        """The answer to ``call_id``; None when ``cancel`` was set first."""
        with self._cond:
            while call_id not in self._answers:
                if cancel.is_set():
                    return None
                self._cond.wait(poll_s)
            return self._answers[call_id]


@dataclass
class ToolJob:
    """What a reply with tools needs beyond a plain one: the servers, what the chat chose,
    the round cap, and the answers' channel."""

    hub: McpHub
    tools: ChatTools
    max_rounds: int = DEFAULT_MAX_ROUNDS
    approvals: Approvals = field(init=False)

    def __post_init__(self) -> None:
        self.approvals = Approvals(self.tools.always)


def tool_events(job_id: int, tools: ToolJob, engine: ChatEngine, messages: Sequence[Message],
                settings: SamplerSettings, cancel: threading.Event,
                predicted: Sequence[str], emit: Callable[[ToolUpdate], object]
                ) -> Iterator[Event | ToolUpdate]:
    """The reply's events with tools offered: the engine's, and the updates above in order.

    ``emit`` posts an update at once (the question to the user is asked from inside the
    turn, while this generator waits); every other update is yielded in its place among the
    engine's events, so the worker can send the text before it first.
    """
    if not engine.template.takes_tools:
        yield TurnNote(job_id, NO_TOOL_FORMAT)
        yield from _plain(engine, messages, settings, cancel, predicted)
        return
    try:
        toolset, failed = ToolSet.gather(tools.hub, list(tools.tools.servers), cancel)
    except Cancelled:  # Esc while a server was starting: the turn ends before it began
        yield GenerationStats(stop_reason="cancelled")
        return
    for line in failed:
        yield TurnNote(job_id, safe_text(line))
    chosen = tools.tools
    toolset = ToolSet(t.info for t in toolset.tools.values()
                      if chosen.offers(t.server, t.info.name))
    if not toolset:
        yield TurnNote(job_id, "no tools to offer (no server of this chat offered one): the "
                       "model replies without them")
        yield from _plain(engine, messages, settings, cancel, predicted)
        return
    choice = tools.tools.choice
    if choice not in ("auto", "required", "none") and choice not in toolset.names:
        yield TurnNote(job_id, f"the chat's tool choice {safe_text(choice)!r} is not a tool "
                       "offered now: the model chooses (auto)")
        choice = "auto"
    asked: dict[str, bool] = {}  # call id → whether Esc came before the call was allowed
    current: list[ToolCallEvent] = []  # the call being checked and run now

    def approve(tool: OfferedTool, arguments: dict[str, object]) -> bool:
        call = current[-1]
        if cancel.is_set():  # Esc came first: nothing more runs, "always" or not
            asked[call.id] = True
            return False
        if tools.approvals.always(tool.name):
            emit(ToolAsked(job_id, call.id, tool.name, tool.server, True))
            return True
        emit(ToolAsked(job_id, call.id, tool.name, tool.server, False))
        decision = tools.approvals.wait(call.id, cancel)
        asked[call.id] = decision is None
        return decision in ("once", "always")

    turn = ToolTurn(engine, tools.hub, toolset, approve, tools.max_rounds)
    result = TurnResult()
    relay = _Relayed()
    for ev in turn.run(messages, settings, cancel, choice, predicted, result):
        if isinstance(ev, ReplyText):
            continue  # the tokens carry the text (and their fates)
        if isinstance(ev, ToolCallEvent):
            current.append(ev)
            yield ToolCalled(job_id, ev.id, ev.name, ev.arguments, ev.round)
            continue
        if isinstance(ev, ToolResultEvent):
            text, status = ev.text, ev.status
            if asked.get(ev.id):  # Esc before it was allowed: not the user's "no"
                text, status = CANCELLED_BEFORE, "cancelled"
            yield ToolAnswered(job_id, ev.id, ev.name, safe_text(text), status, ev.seconds)
            relay.new_round = True
            continue
        relay.add(ev)
        if relay.take_started():
            yield RoundStarted(job_id, result.rounds)
        if ev is relay.stats and result.stopped == "max_rounds":
            # (before the turn's stats: they end the worker's reading)
            yield TurnNote(job_id, f"stopped after {tools.max_rounds} rounds of tool calls "
                           "(max_tool_rounds): the model was still calling tools")
        yield ev


class _Relayed(EventFold):
    """The turn's engine events as the relay passes them on: after a tool's result
    (``new_round``), the reply's next output — a token, a rejected draft or a step — starts a
    new round (:meth:`take_started` says so once)."""

    def __init__(self) -> None:
        super().__init__()
        self.new_round = False
        self._started = False

    def _output(self) -> None:
        if self.new_round:
            self.new_round, self._started = False, True

    def on_token(self, ev: TokenEvent) -> None:
        self._output()

    def on_rejected(self, ev: RejectedEvent) -> None:
        self._output()

    def on_step(self, ev: StepEvent) -> None:
        self._output()

    def take_started(self) -> bool:
        got, self._started = self._started, False
        return got


def _plain(engine: ChatEngine, messages: Sequence[Message], settings: SamplerSettings,
           cancel: threading.Event, predicted: Sequence[str]) -> Iterator[Event]:
    if predicted:
        settings = settings.with_(prediction=prediction_tokens(engine.model, predicted))
    yield from engine.reply(without_tools(messages), settings, cancel)


def without_tools(messages: Sequence[Message]) -> list[Message]:
    """A history with tool calls and results, for a template that has no tool format: each
    call written out in the assistant's words, each result as a user message that says what
    it is (a template may refuse a ``tool`` role it does not know)."""
    out: list[Message] = []
    for m in messages:
        if m.role == "tool":
            out.append(Message("user", f"[tool result]\n{m.content}"))
        elif m.tool_calls:
            calls = "\n".join(f"[tool call: {c.name} {c.arguments}]" for c in m.tool_calls)
            out.append(Message("assistant", f"{m.content}\n{calls}".strip()))
        else:
            out.append(m)
    return out
