"""One turn with tools: the model replies; each tool call it writes is checked, put to the user
(an approval callback), run on its MCP server and its result sent back as a ``tool`` message;
the model replies again — until it answers in text or ``max_rounds`` replies have called tools.

Nothing runs without the approval callback's yes. A call to a tool that was not offered, with
arguments that are not JSON or do not match the tool's schema, or that the user refused, goes
back to the model as an error result (the MCP spec's advice: the model may correct itself). A
server that fails gives a one-line notice and an error result; the turn goes on.

Attached files and each file-like tool result are given to the prediction drafter as the
reply's predicted output (``SamplerSettings.prediction``): a reply that rewrites one drafts at
prediction depth from its first token. The reply stays the target's whatever they hold.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.events import Event, GenerationStats, NoticeEvent, TokenEvent
from specchat.engine.decode.fold import EventFold
from specchat.engine.decode.messages import Message, ToolCall
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.tool_calls import ToolCallStream, call_grammar, call_start
from specchat.engine.llama.model import LlamaModel
from specchat.errors import Cancelled, ContextFullError
from specchat.tools.hub import McpHub, ToolServerError
from specchat.tools.offer import OfferedTool, ToolSet
from specchat.tools.results import clip, looks_like_file

DEFAULT_MAX_ROUNDS = 8


@dataclass(frozen=True)
class ReplyText:
    """Content of the reply (what is not a tool call), as it streams."""

    text: str


@dataclass(frozen=True)
class ToolCallEvent:
    """The model called a tool (``arguments``: the JSON text it wrote)."""

    id: str
    name: str
    arguments: str
    round: int


@dataclass(frozen=True)
class ToolResultEvent:
    """A call's result as the model reads it; ``status``: ok, error (the tool or the server
    failed, or the call was malformed), refused (the user did not allow it), cancelled."""

    id: str
    name: str
    text: str
    status: str
    round: int
    seconds: float = 0.0


@dataclass
class TurnResult:
    """The turn's messages after the prompt (assistant replies, tool results), its rounds and
    its stats summed over them (tokens, drafts and time; the last round's prompt)."""

    messages: list[Message] = field(default_factory=list)
    rounds: int = 0
    stats: GenerationStats = field(default_factory=GenerationStats)
    stopped: str = ""  # "max_rounds" when the model was still calling tools


TurnEvent = Event | ReplyText | ToolCallEvent | ToolResultEvent
# (tool offered, the checked arguments) → True to run it
Approve = Callable[[OfferedTool, dict[str, object]], bool]


def add_stats(a: GenerationStats, b: GenerationStats) -> GenerationStats:
    """Two replies' stats as one: counts and times summed, ``b``'s prompt and stop reason."""
    return replace(b, generated_tokens=a.generated_tokens + b.generated_tokens,
                   prompt_s=a.prompt_s + b.prompt_s, decode_s=a.decode_s + b.decode_s,
                   total_s=a.total_s + b.total_s, steps=a.steps + b.steps,
                   drafted=a.drafted + b.drafted, accepted=a.accepted + b.accepted,
                   rejections=a.rejections + b.rejections, draft_s=a.draft_s + b.draft_s,
                   verify_s=a.verify_s + b.verify_s,
                   target_forwards=a.target_forwards + b.target_forwards,
                   ttft_s=a.ttft_s if a.generated_tokens else b.ttft_s)


class _Round(EventFold):
    """One round's engine events, its text fed, token by token, to the reader of the calls
    (``stream``; None: no tools offered, all of it is content); what each token added to the
    reply's content waits for :meth:`take`."""

    def __init__(self, stream: ToolCallStream | None) -> None:
        super().__init__()
        self.stream = stream
        self.text: list[str] = []  # every token's text
        self._content = ""

    def on_token(self, ev: TokenEvent) -> None:
        self.text.append(ev.text)
        self._content = self.stream.feed(ev.text)[0] if self.stream is not None else ev.text

    def take(self) -> str:
        """The content the last token added (once: "" until another token adds some)."""
        got, self._content = self._content, ""
        return got


class ToolTurn:
    """Runs turns on ``engine`` with ``tools`` from ``hub``."""

    def __init__(self, engine: ChatEngine, hub: McpHub, tools: ToolSet, approve: Approve,
                 max_rounds: int = DEFAULT_MAX_ROUNDS) -> None:
        self.engine = engine
        self.hub = hub
        self.tools = tools
        self.approve = approve
        self.max_rounds = max_rounds

    def run(self, messages: Sequence[Message], settings: SamplerSettings,
            cancel: threading.Event | None = None, tool_choice: str = "auto",
            predicted: Sequence[str] = (), result: TurnResult | None = None
            ) -> Iterator[TurnEvent]:
        """The turn's events; ``result`` (when given) is filled as it goes. ``tool_choice``
        (auto, required or a tool's name) holds for the first reply; later ones are auto.
        ``predicted``: texts the reply may copy (attached files)."""
        cancel = cancel or threading.Event()
        out = result if result is not None else TurnResult()
        tools = self.tools.as_openai()
        history = list(messages)
        predictions = list(predicted)
        choice = tool_choice
        total: GenerationStats | None = None
        previous: set[tuple[str, str]] = set()  # the last round's calls (name, arguments)
        while True:
            out.rounds += 1
            offered = tools if choice != "none" else []
            round_settings = self._settings(settings, predictions, offered, choice)
            start = call_start(choice) if offered else ""
            stream = ToolCallStream(names=self.tools.names if offered else frozenset())
            if start:
                stream.feed(start)
            round_ = _Round(stream if offered else None)
            for ev in round_.through(self.engine.reply(history, round_settings, cancel,
                                                       tools=offered or None,
                                                       reply_start=start),
                                     self.engine.decoder.name):
                if ev is round_.stats:
                    break  # the turn's sum goes out at its end
                content = round_.take()
                if content:
                    yield ReplyText(content)
                yield ev
            text = round_.text
            stats = round_.stats
            assert stats is not None  # through() ends at the stats or raises
            content, _ = stream.finish() if offered else ("", [])
            if content:
                yield ReplyText(content)
            total = stats if total is None else add_stats(total, stats)
            calls = list(stream.calls) if offered else []
            keys = [(c.name, _canonical(c.arguments)) for c in calls]
            if calls and all(k in previous for k in keys) and not cancel.is_set():
                # A model that loops (small ones do: Qwen2.5-Coder 1.5B calls git_log to the
                # round cap) is not run again: the call is left out, and the model answers
                # from the results it has, with no tools shown.
                names = ", ".join(dict.fromkeys(c.name for c in calls))
                yield NoticeEvent(f"the model called {names} again with the same arguments: "
                                  "not run again; it answers from the result it has")
                previous = set()
                choice = "none"
                continue
            said = "".join(text) if not calls else _content_before_calls(start + "".join(text))
            out.messages.append(Message("assistant", said, tuple(calls)))
            history.append(out.messages[-1])
            if not calls or stats.stop_reason == "cancelled":
                break
            for call in calls:
                yield ToolCallEvent(call.id, call.name, call.arguments, out.rounds)
                event, notices = self._run_call(call, out.rounds, history, settings, cancel)
                for notice in notices:
                    yield NoticeEvent(notice)
                yield event
                message = Message("tool", event.text, tool_call_id=call.id)
                out.messages.append(message)
                history.append(message)
                if event.status == "ok" and looks_like_file(event.text) \
                        and event.text not in predictions:
                    predictions.append(event.text)
                if event.status == "cancelled":
                    break
            previous = set(keys)
            if cancel.is_set():
                total = replace(total, stop_reason="cancelled")
                break
            if out.rounds >= self.max_rounds:
                out.stopped = "max_rounds"
                yield NoticeEvent(f"stopped after {self.max_rounds} rounds of tool calls "
                                  "(max_tool_rounds): the model was still calling tools")
                break
            choice = "auto"
        out.stats = total
        yield total

    def _settings(self, settings: SamplerSettings, predictions: Sequence[str],
                  offered: list[dict[str, Any]], choice: str) -> SamplerSettings:
        changes: dict[str, object] = {}
        if predictions:
            changes["prediction"] = prediction_tokens(self.engine.model, predictions)
        if offered and choice not in ("auto", "none"):
            changes["grammar"] = call_grammar(_closed(offered), choice)
        return settings.with_(**changes) if changes else settings

    def _run_call(self, call: ToolCall, rnd: int, history: list[Message],
                  settings: SamplerSettings, cancel: threading.Event
                  ) -> tuple[ToolResultEvent, list[str]]:
        checked = self.tools.check(call.name, call.arguments)
        if checked.error is not None or checked.tool is None:
            return ToolResultEvent(call.id, call.name, checked.error or "error", "error",
                                   rnd), []
        tool = checked.tool
        if not self.approve(tool, checked.arguments):
            return ToolResultEvent(call.id, call.name,
                                   f"error: the user did not allow the tool {call.name} to run",
                                   "refused", rnd), []
        t0 = time.monotonic()
        try:
            r = self.hub.call(tool.server, tool.info.name, checked.arguments, cancel)
        except Cancelled:
            return ToolResultEvent(call.id, call.name, "error: the call was cancelled by the "
                                   "user", "cancelled", rnd, time.monotonic() - t0), []
        except ToolServerError as e:
            # The result says it (one line), in the transcript and to the model alike.
            return ToolResultEvent(call.id, call.name, f"error: {e}", "error", rnd,
                                   time.monotonic() - t0), []
        seconds = time.monotonic() - t0
        text, notes = self._fit(r.text, history, settings)
        return ToolResultEvent(call.id, call.name, text, "error" if r.is_error else "ok", rnd,
                               seconds), notes

    def _fit(self, text: str, history: list[Message], settings: SamplerSettings
             ) -> tuple[str, list[str]]:
        """A result cut to the room the context has left for it (with the reply's room kept),
        so the next reply still fits."""
        engine = self.engine
        try:
            used = len(engine.tokenize_chat([*history, Message("tool", "")],
                                            tools=self.tools.as_openai()))
        except ContextFullError:
            return "error: the context is full", []
        room = engine.n_ctx - engine.reserve(settings.max_tokens) - used
        tokens = engine.model.tokenize(text, add_special=False, parse_special=False)
        if len(tokens) <= room:
            return text, []
        keep = max(0, room - 40)  # the note itself
        cut = engine.model.detokenize(tokens[:keep]) if keep else ""
        note = (f"the result was {len(tokens):,} tokens; the context had room for {room:,}: "
                f"the model saw the first {keep:,}")
        return clip(cut, len(cut)) + f"\n[… cut: {note}]", [note]


def _closed(offered: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools with their arguments held to the properties they name, for the grammar of a
    forced call: MCP servers' schemas rarely say ``additionalProperties: false``, and a model
    made to write a call should not invent arguments (llama.cpp's grammars do the same)."""
    out = []
    for t in offered:
        params = dict(t["function"].get("parameters") or {"type": "object"})
        if params.get("type") == "object":
            params.setdefault("additionalProperties", False)
        out.append({**t, "function": {**t["function"], "parameters": params}})
    return out


def prediction_tokens(model: LlamaModel, texts: Sequence[str]) -> tuple[int, ...]:
    """Texts a reply may copy (attached files, file-like results), one after another, as the
    prediction drafter takes them: it re-joins the right one after a reply's first tokens."""
    tokens: list[int] = []
    for text in texts:
        tokens += model.tokenize(text, add_special=False, parse_special=False)
    return tuple(tokens)


def _canonical(arguments: str) -> str:
    """A call's arguments in one spelling (key order and spaces aside), to spot a repeat."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        return arguments.strip()


def _content_before_calls(text: str) -> str:
    """An assistant message's own text when it made calls: what came before the first."""
    from specchat.engine.decode.tool_calls import OPEN

    return text.split(OPEN, 1)[0].strip()
