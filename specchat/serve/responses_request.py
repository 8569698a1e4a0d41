"""OpenAI's Responses API (``POST /v1/responses``), its request: read into a chat, and the
earlier responses kept for ``previous_response_id``. The reply is written by
``responses_writer.py``.

What is served: ``input`` as a string or a list of items (messages with text parts,
``function_call`` and ``function_call_output``), ``instructions``, function ``tools`` and
``tool_choice``, ``text.format`` (``json_schema``/``json_object``, masked as chat's
``response_format`` is), ``max_output_tokens``, ``temperature``, ``top_p``, ``stream``,
``previous_response_id``, and the output text's log-probabilities (``include:
["message.output_text.logprobs"]`` with ``top_logprobs``). A request is checked here, then
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
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from specchat.engine.decode.messages import Message, ToolCall
from specchat.engine.decode.sampling import SamplerSettings
from specchat.serve.api_errors import ApiError, bad_request
from specchat.serve.fields import flag, shown, unicode_text, wrong_type
from specchat.serve.message_request import content_text
from specchat.serve.parse import GenerationRequest, chat_request
from specchat.serve.sampling_request import check_top_logprobs

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
