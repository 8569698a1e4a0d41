"""The tools a turn offers the model: the chosen servers' tools under names the model can write,
in OpenAI's format for the chat template, and each call the model makes checked — a tool it
invented, arguments that are not JSON or do not match the tool's schema — before anything runs.

A tool keeps its own name unless two servers offer the same one or the name is not one a tool
call can carry (``[a-zA-Z0-9_-]{1,64}``); then it is ``SERVER_TOOL``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specchat.tools.hub import McpHub, ToolInfo, ToolServerError

CALL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


@dataclass(frozen=True)
class OfferedTool:
    """A server's tool as the model sees it (``name``)."""

    name: str
    info: ToolInfo

    @property
    def server(self) -> str:
        return self.info.server

    def as_openai(self) -> dict[str, Any]:
        fn: dict[str, Any] = {"name": self.name, "parameters": dict(self.info.input_schema)}
        if self.info.description:
            fn["description"] = self.info.description
        return {"type": "function", "function": fn}


@dataclass(frozen=True)
class CheckedCall:
    """A call the model made, checked: ``tool`` and ``arguments`` when it may run, else
    ``error``, the text the model is sent back as the call's result."""

    tool: OfferedTool | None
    arguments: dict[str, Any]
    error: str | None = None


def _call_name(server: str, tool: str) -> str:
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", f"{server}_{tool}")
    return name[:64]


class ToolSet:
    """The offered tools, by the name the model calls them."""

    def __init__(self, tools: Iterable[ToolInfo]) -> None:
        infos = list(tools)
        counts: dict[str, int] = {}
        for t in infos:
            counts[t.name] = counts.get(t.name, 0) + 1
        self.tools: dict[str, OfferedTool] = {}
        for t in infos:
            name = t.name if counts[t.name] == 1 and CALL_NAME.fullmatch(t.name) \
                else _call_name(t.server, t.name)
            self.tools.setdefault(name, OfferedTool(name, t))

    @classmethod
    def gather(cls, hub: McpHub, servers: Sequence[str] | None = None,
               cancel: threading.Event | None = None) -> tuple[ToolSet, list[str]]:
        """The tools of ``servers`` (all configured ones when None), starting them; with a
        line for each server that did not start (its tools are left out)."""
        infos: list[ToolInfo] = []
        failed: list[str] = []
        for name in servers if servers is not None else list(hub.servers):
            try:
                infos += hub.tools(name, cancel)
            except ToolServerError as e:
                failed.append(str(e))
        return cls(infos), failed

    def __bool__(self) -> bool:
        return bool(self.tools)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.tools)

    def as_openai(self) -> list[dict[str, Any]]:
        return [t.as_openai() for t in self.tools.values()]

    def check(self, name: str, arguments: str) -> CheckedCall:
        """A call the model wrote, checked against the offered tools and the tool's schema."""
        tool = self.tools.get(name)
        if tool is None:
            return CheckedCall(None, {}, f"error: there is no tool named {name!r}; the tools "
                               f"are: {', '.join(sorted(self.tools)) or 'none'}")
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except ValueError as e:
            return CheckedCall(tool, {}, f"error: the arguments of {name} are not valid JSON "
                               f"({e}); send them as a JSON object")
        if not isinstance(args, dict):
            return CheckedCall(tool, {}, f"error: the arguments of {name} must be a JSON "
                               "object")
        problem = schema_problem(args, tool.info.input_schema)
        if problem is not None:
            return CheckedCall(tool, args, f"error: the arguments of {name} do not match its "
                               f"schema: {problem}")
        return CheckedCall(tool, args)


def schema_problem(value: Any, schema: Mapping[str, Any]) -> str | None:
    """Why ``value`` does not match the JSON Schema ``schema`` (None when it does, or when the
    schema itself is broken: the server is then the judge)."""
    import jsonschema

    try:
        validator_cls = jsonschema.validators.validator_for(schema)
        validator_cls.check_schema(schema)
    except (jsonschema.SchemaError, TypeError):
        return None
    error = jsonschema.exceptions.best_match(validator_cls(schema).iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where + ': ' if where else ''}{error.message}"
