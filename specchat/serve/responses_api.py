"""OpenAI's Responses API (``POST /v1/responses``): the request read into a chat, and the
reply written as a response object or its typed stream events.

What is served: ``input`` as a string or a list of items (messages with text parts,
``function_call`` and ``function_call_output``), ``instructions``, function ``tools`` and
``tool_choice``, ``text.format`` (``json_schema``/``json_object``, masked as chat's
``response_format`` is), ``max_output_tokens``, ``temperature``, ``top_p``, ``stream``,
``previous_response_id``, and the output text's log-probabilities (``include:
["message.output_text.logprobs"]`` with ``top_logprobs``, written as chat writes them, on the
``output_text`` parts and their delta and done events). A request is checked here, then
turned into the equivalent chat completion body and read by chat's own parser, so both routes
follow the same rules; an error found there is said with this API's field names.

Earlier responses are kept in this process's memory only, the last :data:`MAX_KEPT` of them
(least recently used dropped first), for ``previous_response_id``: a restart forgets them. What
is not served — built-in tools (web search, files, computers, code), ``background``,
``conversation``, stored prompts, image or file inputs — is a 400 naming the field.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specchat.engine.decode.events import TokenEvent
from specchat.engine.decode.generic_tools import GenericCallStream, read_generic
from specchat.engine.decode.messages import Message, ToolCall
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.tool_calls import CallDelta, ToolCallStream, read_calls, read_stream
from specchat.engine.policy.in_force import InForce
from specchat.serve.api_errors import ApiError, bad_request
from specchat.serve.fields import flag, shown, unicode_text, wrong_type
from specchat.serve.parse import (
    GenerationRequest,
    chat_request,
    check_top_logprobs,
    content_text,
)
from specchat.serve.replies import call_stream, chat_logprobs, extension, split_deltas, timings
from specchat.serve.worker import Finished

MAX_KEPT = 256  # earlier responses kept for previous_response_id (a count: each is a chat)
ROLES = ("user", "system", "developer", "assistant")
# Fields whose any value other than these asks for what this server does not do.
REFUSED = {"background": (None, False), "conversation": (None,), "prompt": (None,)}
LOGPROBS = "message.output_text.logprobs"  # the ``include`` item that asks for them
# What else ``include`` may name: the outputs of what this server never makes (built-in tools,
# reasoning, image inputs), so there is nothing more to include (agents send some by default).
INCLUDABLE = (LOGPROBS, "reasoning.encrypted_content", "file_search_call.results",
              "web_search_call.results", "web_search_call.action.sources",
              "message.input_image.image_url", "computer_call_output.output.image_url",
              "code_interpreter_call.outputs")


@dataclass(frozen=True)
class ResponsesRequest:
    """A Responses request: the chat it runs and what its response object repeats."""

    generation: GenerationRequest
    conversation: tuple[Message, ...]  # the messages without the instructions (kept after)
    echo: dict[str, Any]  # the request's fields a response object shows
    store: bool = True


class ResponseStore:
    """Earlier responses' conversations by id, in memory, the last ``limit`` used."""

    def __init__(self, limit: int = MAX_KEPT) -> None:
        self.limit = limit
        self._kept: OrderedDict[str, tuple[Message, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, response_id: str) -> tuple[Message, ...] | None:
        with self._lock:
            found = self._kept.get(response_id)
            if found is not None:
                self._kept.move_to_end(response_id)
            return found

    def put(self, response_id: str, conversation: tuple[Message, ...]) -> None:
        with self._lock:
            self._kept[response_id] = conversation
            self._kept.move_to_end(response_id)
            while len(self._kept) > self.limit:
                self._kept.popitem(last=False)

    def __len__(self) -> int:
        return len(self._kept)


def _text_parts(value: Any, where: str) -> str:
    """An input item's text, read as chat's content is, with the Responses API's part types."""
    return content_text(value, where, ("input_text", "output_text", "text"),
                        "'input_text' (or an assistant's 'output_text')")


def _str_field(item: Mapping[str, Any], name: str, where: str) -> str:
    v = item.get(name)
    if v is None:
        raise bad_request(f"'{where}.{name}' is required", f"{where}.{name}",
                          "missing_required_parameter")
    if not isinstance(v, str):
        raise wrong_type(f"{where}.{name}", "a string", v)
    return unicode_text(v, f"{where}.{name}")


def input_messages(value: Any) -> list[Message]:
    """``input`` as chat messages: a string is the user's; items in order, a function call
    joining the assistant message before it."""
    if value is None:
        raise bad_request("'input' is required", "input", "missing_required_parameter")
    if isinstance(value, str):
        return [Message("user", unicode_text(value, "input"))]
    if not isinstance(value, list):
        raise wrong_type("input", "a string or an array of input items", value)
    out: list[Message] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise wrong_type(where, "an object", item)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise bad_request(f"'{where}.role' must be user, system, developer or "
                                  f"assistant, not {shown(role)!r}", f"{where}.role")
            text = _text_parts(item.get("content"), f"{where}.content")
            out.append(Message("system" if role == "developer" else role, text))
        elif kind == "function_call":
            call = ToolCall(_str_field(item, "call_id", where), _str_field(item, "name", where),
                            _str_field(item, "arguments", where))
            last = out[-1] if out else None
            if last is not None and last.role == "assistant" and not last.tool_call_id:
                out[-1] = Message("assistant", last.content, (*last.tool_calls, call))
            else:
                out.append(Message("assistant", "", (call,)))
        elif kind == "function_call_output":
            call_id = _str_field(item, "call_id", where)
            output = item.get("output")
            text = (_text_parts(output, f"{where}.output")
                    if not isinstance(output, str) else unicode_text(output, f"{where}.output"))
            out.append(Message("tool", text, (), call_id))
        elif kind == "reasoning":
            continue  # a reasoning model's notes, echoed back by clients: this model has none
        else:
            raise bad_request(f"'{where}.type' must be 'message', 'function_call' or "
                              f"'function_call_output', not {shown(kind)!r}", f"{where}.type")
    if not out:
        raise bad_request("'input' is empty: give at least one item", "input")
    return out


def _tools(value: Any) -> list[dict[str, Any]]:
    """Function tools, in chat's shape; a built-in tool is refused by name."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise wrong_type("tools", "an array of tools", value)
    out = []
    for i, t in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(t, dict):
            raise wrong_type(where, "an object", t)
        kind = t.get("type")
        if kind != "function":
            raise bad_request(f"'{where}.type' must be 'function': this server runs no "
                              f"built-in tools ({shown(kind)!r}); give the model function tools and "
                              "run them yourself", f"{where}.type", "unsupported_tool")
        fn = {k: t[k] for k in ("name", "description", "parameters") if t.get(k) is not None}
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, dict):
        raise wrong_type("tool_choice", "a string or an object", value)
    if value.get("type") != "function":
        raise bad_request("'tool_choice.type' must be 'function': this server runs no "
                          "built-in tools", "tool_choice.type")
    return {"type": "function", "function": {"name": value.get("name")}}


def _logprobs(doc: Mapping[str, Any]) -> tuple[bool, Any]:
    """Whether ``include`` asks for the output text's log-probabilities, and ``top_logprobs``
    (checked with chat's rules when they are asked for; without them it is only echoed, as
    OpenAI does)."""
    include, top = doc.get("include"), doc.get("top_logprobs")
    if include is None:
        include = []
    if not isinstance(include, list):
        raise wrong_type("include", "an array of strings", include)
    for i, item in enumerate(include):
        if item not in INCLUDABLE:
            listed = ", ".join(INCLUDABLE)
            raise bad_request(f"'include[{i}]' must be one of {listed}, not {shown(item)!r}",
                              f"include[{i}]")
    return LOGPROBS in include, top


def _format(text: Any) -> dict[str, Any] | None:
    """``text.format`` as chat's ``response_format``."""
    if text is None:
        return None
    if not isinstance(text, dict):
        raise wrong_type("text", "an object", text)
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise wrong_type("text.format", "an object", fmt)
    kind = fmt.get("type", "text")
    if kind == "json_schema":
        if fmt.get("schema") is None:
            raise bad_request("'text.format.schema' is required with type 'json_schema'",
                              "text.format.schema", "missing_required_parameter")
        return {"type": "json_schema", "json_schema": {
            "name": fmt.get("name", "reply"), "schema": fmt.get("schema"),
            "strict": fmt.get("strict")}}
    if kind in ("json_object", "text"):
        return {"type": kind}
    raise bad_request(f"'text.format.type' must be 'text', 'json_object' or 'json_schema', not "
                      f"{shown(kind)!r}", "text.format.type")


# A chat field's name in an error, as this API names it.
_RENAMES = [(re.compile(r"^response_format\.json_schema\.schema"), "text.format.schema"),
            (re.compile(r"^response_format\.json_schema"), "text.format"),
            (re.compile(r"^response_format"), "text.format"),
            (re.compile(r"^max_tokens"), "max_output_tokens"),
            (re.compile(r"^tools\[(\d+)\]\.function\."), r"tools[\1]."),
            (re.compile(r"^tool_choice\.function\.name"), "tool_choice.name"),
            (re.compile(r"^messages.*"), "input")]


def _renamed(e: ApiError) -> ApiError:
    if e.param is None:
        return e
    for pattern, name in _RENAMES:
        if pattern.match(e.param):
            param = pattern.sub(name, e.param)
            message = e.message.replace(f"'{e.param}'", f"'{param}'")
            return ApiError(e.status, message, type=e.type, param=param, code=e.code)
    return e


def responses_request(doc: Mapping[str, Any], defaults: SamplerSettings,
                      store: ResponseStore) -> ResponsesRequest:
    for name, allowed in REFUSED.items():
        if doc.get(name) not in allowed:
            raise bad_request(f"'{name}' is not supported by this server", name,
                              "unsupported_parameter")
    instructions = doc.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise wrong_type("instructions", "a string", instructions)
    keep = flag(doc, "store", True)
    earlier: tuple[Message, ...] = ()
    previous = doc.get("previous_response_id")
    if previous is not None:
        if not isinstance(previous, str):
            raise wrong_type("previous_response_id", "a string", previous)
        found = store.get(previous)
        if found is None:
            raise bad_request(f"'previous_response_id' {previous[:80]!r} is not kept here: "
                              f"this server keeps the last {store.limit} responses in memory, "
                              "until it stops; send the conversation as 'input' items instead",
                              "previous_response_id", "previous_response_not_found")
        earlier = found
    conversation = (*earlier, *input_messages(doc.get("input")))
    system = [Message("system", unicode_text(instructions, "instructions"))] \
        if instructions else []
    chat: dict[str, Any] = {k: doc[k] for k in ("model", "temperature", "top_p", "stream",
                                                "parallel_tool_calls", "seed", "specchat")
                            if k in doc}
    chat["messages"] = [{"role": "user", "content": ""}]  # read below: they are checked
    if doc.get("max_output_tokens") is not None:
        chat["max_tokens"] = doc["max_output_tokens"]
    tools = _tools(doc.get("tools"))
    if tools:
        chat["tools"] = tools
    if doc.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(doc.get("tool_choice"))
    fmt = _format(doc.get("text"))
    if fmt is not None:
        chat["response_format"] = fmt
    with_logprobs, top = _logprobs(doc)
    if top is not None:  # checked as chat checks it, asked for or not
        check_top_logprobs(top)
    if with_logprobs:
        chat["logprobs"] = True
        if top is not None:
            chat["top_logprobs"] = top
    try:
        generation = chat_request(chat, defaults)
    except ApiError as e:
        raise _renamed(e) from None
    generation = replace(generation, messages=(*system, *conversation))
    echo = {"instructions": instructions, "max_output_tokens": doc.get("max_output_tokens"),
            "previous_response_id": previous, "temperature": generation.settings.temperature,
            "top_p": generation.settings.top_p, "top_logprobs": top, "parallel_tool_calls":
            generation.parallel_tool_calls, "tool_choice": doc.get("tool_choice") or (
                "auto" if tools else "none"),
            "tools": list(doc.get("tools") or []), "text": doc.get("text") or {
                "format": {"type": "text"}}, "store": keep,
            "metadata": doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}}
    return ResponsesRequest(generation, conversation, echo, keep)


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


@dataclass
class _Open:
    """An output item being streamed."""

    index: int
    id: str
    kind: str  # message | function_call
    text: list[str] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # a message's, so far


@dataclass
class TextTokens:
    """The tokens whose log-probabilities an output text carries: the reply's tokens in order,
    each once the text given out holds its text as the next part, until the first token
    whose text is not (a call's, which no output text shows): from there on, none. A reply
    without calls thus gives every token's; whole and streamed replies give the same."""

    held: list[TokenEvent] = field(default_factory=list)
    shown: str = ""  # the output text given out so far
    at: int = 0  # how much of it the matched tokens wrote
    ended: bool = False

    def add(self, tokens: Sequence[TokenEvent]) -> None:
        if not self.ended:
            self.held += tokens

    def show(self, text: str) -> list[TokenEvent]:
        """``text`` given out: the tokens that wrote it (and any before it still held)."""
        self.shown += text
        out: list[TokenEvent] = []
        while self.held and not self.ended:
            t = self.held[0]
            if self.shown.startswith(t.text, self.at):
                out.append(self.held.pop(0))
                self.at += len(t.text)
            elif not t.text.startswith(self.shown[self.at:]):
                self.end()
            else:  # its text is not all given out yet
                break
        return out

    def end(self) -> None:
        self.ended, self.held = True, []


@dataclass
class ResponsesWriter:
    """A response object, whole or as the typed events of a stream (``event:`` lines named
    as the ``type`` they carry, no ``[DONE]``), and the conversation kept for later turns."""

    request: ResponsesRequest
    model: str
    setup: InForce
    store: ResponseStore
    tools: frozenset[str] | None = None
    reply_start: str = ""
    with_fates: bool = False
    generic: bool = False  # the calls are the generic JSON reply (engine/decode/generic_tools)
    # ``include`` asked for log-probabilities: the tokens' bytes to write them with (the
    # job's). A generic JSON reply's text is read out of the JSON its tokens wrote: none there.
    pieces: Mapping[int, bytes] | None = None
    id: str = field(default_factory=lambda: _new_id("resp_"))
    created: int = field(default_factory=lambda: int(time.time()))
    ends_with_done = False
    include_usage = False
    named_events = True
    _seq: int = 0
    _items: list[dict[str, Any]] = field(default_factory=list)  # the finished output items
    _open: _Open | None = None
    _calls: ToolCallStream | GenericCallStream | None = None
    _tokens: TextTokens | None = None

    def __post_init__(self) -> None:
        if self.tools is not None:
            self._calls = call_stream(self.tools, self.generic)
        if self.pieces is not None and not self.generic:
            self._tokens = TextTokens()

    def _logprobs(self, tokens: Sequence[TokenEvent]) -> list[dict[str, Any]]:
        return chat_logprobs(tokens, self.pieces) if self.pieces is not None else []

    # ------------------------------------------------------------------ the object

    def _object(self, status: str, output: list[dict[str, Any]],
                done: Finished | None = None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "error": None, "incomplete_details": None, "model": self.model, "output": output,
            "truncation": "disabled", "usage": None, "user": None, "reasoning": None,
            "background": False, **self.request.echo}
        if done is not None:
            s = done.stats
            if s.stop_reason in ("length", "context"):
                doc["status"] = "incomplete"
                doc["incomplete_details"] = {"reason": "max_output_tokens"}
            doc["usage"] = {
                "input_tokens": s.prompt_tokens,
                "input_tokens_details": {"cached_tokens": s.cached_tokens},
                "output_tokens": s.generated_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": s.prompt_tokens + s.generated_tokens}
            doc["timings"] = timings(s)
            doc["specchat"] = extension(done, self.setup)
        return doc

    @staticmethod
    def _message(item_id: str, text: str, status: str = "completed",
                 logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {"id": item_id, "type": "message", "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [],
                             "logprobs": logprobs or []}]}

    @staticmethod
    def _call(item_id: str, call: ToolCall, status: str = "completed") -> dict[str, Any]:
        return {"id": item_id, "type": "function_call", "status": status,
                "call_id": call.id, "name": call.name, "arguments": call.arguments}

    def _keep(self, text: str, calls: Sequence[ToolCall]) -> None:
        if self.request.store:
            reply = Message("assistant", text, tuple(calls))
            self.store.put(self.id, (*self.request.conversation, reply))

    def response(self, tokens: Sequence[TokenEvent], done: Finished) -> dict[str, Any]:
        text = "".join(t.text for t in tokens)
        calls: list[ToolCall] = []
        if self.tools is not None:
            text, calls = (read_generic(text, self.tools) if self.generic else
                           read_calls(self.reply_start + text, self.tools))
        output = []
        if text.strip() or not calls:
            logprobs: list[dict[str, Any]] = []
            if self._tokens is not None:
                self._tokens.add(tokens)
                logprobs = self._logprobs(self._tokens.show(text))
            output.append(self._message(_new_id("msg_"), text, logprobs=logprobs))
        output += [self._call(_new_id("fc_"), c) for c in calls]
        self._keep(text, calls)
        doc = self._object("completed", output, done)
        if self.with_fates:
            from specchat.serve.replies import fates

            doc["specchat"]["tokens"] = fates(tokens)
        return doc

    # ------------------------------------------------------------------ the stream

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        doc = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return doc

    def first_chunks(self) -> list[dict[str, Any]]:
        shell = self._object("in_progress", [])
        return [self._event("response.created", response=shell),
                self._event("response.in_progress", response=shell)]

    def _close(self) -> list[dict[str, Any]]:
        o, self._open = self._open, None
        if o is None:
            return []
        if o.kind == "message":
            text = "".join(o.text)
            item = self._message(o.id, text, logprobs=o.logprobs)
            part = item["content"][0]
            events = [self._event("response.output_text.done", item_id=o.id,
                                  output_index=o.index, content_index=0, text=text,
                                  logprobs=o.logprobs),
                      self._event("response.content_part.done", item_id=o.id,
                                  output_index=o.index, content_index=0, part=part)]
        else:
            args = "".join(o.text)
            item = self._call(o.id, ToolCall(o.call_id, o.name, args))
            events = [self._event("response.function_call_arguments.done", item_id=o.id,
                                  output_index=o.index, name=o.name, arguments=args)]
        self._items.append(item)
        return [*events, self._event("response.output_item.done", output_index=o.index,
                                     item=item)]

    def _text(self, text: str) -> list[dict[str, Any]]:
        events = []
        if self._open is None or self._open.kind != "message":
            events += self._close()
            o = self._open = _Open(len(self._items), _new_id("msg_"), "message")
            events += [self._event("response.output_item.added", output_index=o.index,
                                   item={**self._message(o.id, "", "in_progress"),
                                         "content": []}),
                       self._event("response.content_part.added", item_id=o.id,
                                   output_index=o.index, content_index=0,
                                   part={"type": "output_text", "text": "",
                                         "annotations": [], "logprobs": []})]
        self._open.text.append(text)
        logprobs = self._logprobs(self._tokens.show(text)) if self._tokens is not None else []
        self._open.logprobs += logprobs
        return [*events, self._event("response.output_text.delta", item_id=self._open.id,
                                     output_index=self._open.index, content_index=0,
                                     delta=text, logprobs=logprobs)]

    def _deltas(self, deltas: Sequence[CallDelta]) -> list[dict[str, Any]]:
        events = []
        if deltas and self._tokens is not None:  # a call's tokens: no output text's
            self._tokens.end()
        for d in split_deltas(deltas):
            if d.id is not None:
                events += self._close()
                o = self._open = _Open(len(self._items), _new_id("fc_"), "function_call",
                                       call_id=d.id, name=d.name or "")
                events.append(self._event(
                    "response.output_item.added", output_index=o.index,
                    item=self._call(o.id, ToolCall(d.id, o.name, ""), "in_progress")))
            elif self._open is not None and self._open.kind == "function_call":
                self._open.text.append(d.arguments)
                events.append(self._event("response.function_call_arguments.delta",
                                          item_id=self._open.id,
                                          output_index=self._open.index, delta=d.arguments))
        return events

    def _read(self, text: str, end: bool = False) -> list[dict[str, Any]]:
        if self._calls is None:
            return self._text(text) if text else []
        if self.reply_start:
            text, self.reply_start = self.reply_start + text, ""
        content, deltas = read_stream(self._calls, text, end)
        # A call's content comes before it: the text the stream held, then the call.
        return (self._text(content) if content else []) + self._deltas(deltas)

    def chunks(self, tokens: Sequence[TokenEvent]) -> list[dict[str, Any]]:
        if self._tokens is not None:
            self._tokens.add(tokens)
        return self._read("".join(t.text for t in tokens))

    def final_chunks(self, done: Finished) -> list[dict[str, Any]]:
        events = self._read("", end=True)
        if not self._items and self._open is None:  # an empty reply is an empty message
            events += self._text("")
        events += self._close()
        text = "".join(c["text"] for i in self._items if i["type"] == "message"
                       for c in i["content"])
        calls = [ToolCall(i["call_id"], i["name"], i["arguments"]) for i in self._items
                 if i["type"] == "function_call"]
        self._keep(text, calls)
        final = self._object("completed", list(self._items), done)
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        return [*events, self._event(kind, response=final)]
