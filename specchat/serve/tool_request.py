"""A chat request's tools: the tool list and choice checked, the tool calls of earlier assistant
messages read, and the grammar that makes a required or named call a valid one."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from specchat.engine.decode.grammar import GrammarError
from specchat.engine.decode.messages import ToolCall
from specchat.engine.decode.tool_calls import call_grammar
from specchat.serve.api_errors import bad_request
from specchat.serve.fields import flag, unicode_text, wrong_type

TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # OpenAI's rule for a function's name
MAX_TOOLS = 128


def _function(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise wrong_type(where, "an object", value)
    name = value.get("name")
    if name is None:
        raise bad_request(f"'{where}.name' is required", f"{where}.name",
                          "missing_required_parameter")
    if not isinstance(name, str):
        raise wrong_type(f"{where}.name", "a string", name)
    if not TOOL_NAME.fullmatch(name):
        raise bad_request(f"'{where}.name' must be 1 to 64 letters, digits, '_' or '-', not "
                          f"{name[:70]!r}", f"{where}.name")
    out: dict[str, Any] = {"name": name}
    desc = value.get("description")
    if desc is not None:
        if not isinstance(desc, str):
            raise wrong_type(f"{where}.description", "a string", desc)
        out["description"] = unicode_text(desc, f"{where}.description")
    params = value.get("parameters")
    if params is not None:
        if not isinstance(params, dict):
            raise wrong_type(f"{where}.parameters", "a JSON Schema object", params)
        out["parameters"] = params
    return out


def tools(doc: Mapping[str, Any]) -> tuple[tuple[dict[str, Any], ...], str, bool]:
    """A chat's tools, its choice (auto, none, required or a function's name) and whether
    several calls may come in one reply."""
    value = doc.get("tools")
    listed: list[dict[str, Any]] = []
    if value is not None:
        if not isinstance(value, list):
            raise wrong_type("tools", "an array of tools", value)
        if len(value) > MAX_TOOLS:
            raise bad_request(f"'tools' holds {len(value)} tools: at most {MAX_TOOLS}", "tools")
        for i, t in enumerate(value):
            where = f"tools[{i}]"
            if not isinstance(t, dict):
                raise wrong_type(where, "an object", t)
            if t.get("type") != "function":
                raise bad_request(f"'{where}.type' must be 'function'", f"{where}.type")
            fn = _function(t.get("function"), f"{where}.function")
            if any(x["function"]["name"] == fn["name"] for x in listed):
                raise bad_request(f"two tools are named {fn['name']!r}", f"{where}.function.name")
            listed.append({"type": "function", "function": fn})
    choice = doc.get("tool_choice")
    if choice is None:
        name = "auto" if listed else "none"
    elif isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise bad_request(f"'tool_choice' must be auto, none, required or a function, not "
                              f"{choice[:40]!r}", "tool_choice")
        name = choice
    elif isinstance(choice, dict):
        if choice.get("type") != "function":
            raise bad_request("'tool_choice.type' must be 'function'", "tool_choice.type")
        chosen = choice.get("function")
        if not isinstance(chosen, dict) or not isinstance(chosen.get("name"), str):
            raise bad_request("'tool_choice.function.name' is required",
                              "tool_choice.function.name", "missing_required_parameter")
        name = chosen["name"]
        if not any(t["function"]["name"] == name for t in listed):
            raise bad_request(f"'tool_choice' names {name[:70]!r}, which is not in 'tools'",
                              "tool_choice.function.name")
    else:
        raise wrong_type("tool_choice", "a string or an object", choice)
    if name != "none" and not listed:
        raise bad_request("'tool_choice' needs 'tools'", "tool_choice")
    return tuple(listed), name, flag(doc, "parallel_tool_calls", True)


def _of_type(value: Any, kind: type, param: str, expected: str) -> Any:
    if not isinstance(value, kind):
        raise wrong_type(param, expected, value)
    return value


def tool_calls(value: Any, where: str) -> tuple[ToolCall, ...]:
    out = []
    for j, c in enumerate(_of_type(value, list, where, "an array of tool calls")):
        w = f"{where}[{j}]"
        call_id = _of_type(_of_type(c, dict, w, "an object").get("id"), str, f"{w}.id",
                           "a string")
        fn = _of_type(c.get("function"), dict, f"{w}.function", "an object")
        name = _of_type(fn.get("name"), str, f"{w}.function.name", "a string")
        args = _of_type(fn.get("arguments", ""), str, f"{w}.function.arguments",
                        "a string of JSON")
        out.append(ToolCall(call_id, unicode_text(name, f"{w}.function.name"),
                            unicode_text(args, f"{w}.function.arguments")))
    return tuple(out)


def tool_grammar(listed: Sequence[Mapping[str, Any]], choice: str) -> str | None:
    """For a call the reply must make (``required``, a named function): the grammar of what
    follows the call's opening that the worker puts after the prompt (``reply_start``), as
    :func:`~specchat.engine.decode.tool_calls.call_grammar` builds it; a 400 naming the tool's
    parameters when they are not a schema a call can follow. None for ``auto`` and ``none``."""
    try:
        return call_grammar(listed, choice)
    except GrammarError as e:
        param = "tools" if choice == "required" else next(
            f"tools[{i}].function.parameters" for i, t in enumerate(listed)
            if t["function"]["name"] == choice)
        raise bad_request(f"a tool's parameters are not a schema a call can follow: {e}", param,
                          "invalid_json_schema") from None
