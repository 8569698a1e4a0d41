"""``specchat ask`` with files (``--file``) and tools (``--tools``, ``--allow``).

Files are read, and the servers started and their tools listed, before any model loads: a
missing file or a server that is not installed costs no load. A call to a tool that was not
allowed is refused, never run: the model is told, and stderr says which tool and how to allow
it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from specchat.cli.common import Env, add_tool_limit_args
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.messages import Message
from specchat.engine.decode.tool_calls import OPEN
from specchat.errors import SpecchatError
from specchat.textsafe import safe_text
from specchat.tools.files import Attachment, measure_fit, read_attachment
from specchat.tools.hub import McpHub
from specchat.tools.offer import OfferedTool, ToolSet
from specchat.tools.turn import ToolCallEvent, ToolResultEvent


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--file", action="append", default=[], metavar="PATH", dest="files",
                   help="attach a text file (repeatable): the model reads it as a fenced block "
                        "with its path, and a reply that rewrites it drafts from it")
    p.add_argument("--tools", action="store_true",
                   help="offer the tools of the MCP servers in config.yaml (specchat mcp list); "
                        "a call runs only if --allow names its tool")
    p.add_argument("--server", action="append", default=[], metavar="NAME", dest="servers",
                   help="with --tools: offer only this server's tools (repeatable; default: "
                        "every configured server)")
    p.add_argument("--allow", action="append", default=[], metavar="TOOL",
                   help="with --tools: let the model run this tool (repeatable)")
    add_tool_limit_args(
        p, max_rounds="with --tools: replies that call tools before the turn is stopped "
                      "(default: the config file's max_tool_rounds, else 8)",
        file_limit="the largest file --file takes, in KB (default: the config file's "
                   "file_limit_kb, else 256)")
    p.add_argument("--tool-choice", metavar="auto|required|TOOL",
                   help="with --tools: auto (the default), required (the first reply must call "
                        "a tool) or a tool's name (it must call that one)")


def check_args(args: argparse.Namespace) -> None:
    if not args.tools:
        for flag, given in (("--allow", args.allow), ("--tool-choice", args.tool_choice),
                            ("--server", args.servers),
                            ("--max-tool-rounds", args.max_tool_rounds)):
            if given:
                raise SpecchatError(f"{flag} needs --tools (which offers the configured MCP "
                                    "servers' tools)")
    elif getattr(args, "json_schema", None) or getattr(args, "grammar", None):
        raise SpecchatError("--tools and a constrained reply (--json-schema, --grammar) do not "
                            "go together: a reply held to a schema cannot call tools")


def read_files(env: Env, paths: list[str], limit_kb: int | None = None) -> list[Attachment]:
    limit = (limit_kb or env.config.file_limit_kb) * 1024
    out = []
    for p in paths:
        try:
            out.append(read_attachment(p, limit))
        except SpecchatError as e:
            raise SpecchatError(f"--file: {e}") from None
    return out


@dataclass
class Tools:
    """The tools of this run: the hub, what is offered, what the user allowed."""

    hub: McpHub
    toolset: ToolSet
    allowed: frozenset[str]
    choice: str
    refused: list[str] = field(default_factory=list)

    def approve(self, tool: OfferedTool, arguments: dict[str, object]) -> bool:
        if tool.name in self.allowed:
            return True
        self.refused.append(tool.name)
        sys.stderr.write(f"specchat: refused a call to {safe_text(tool.name)} (server "
                         f"{tool.server}): it was not allowed, and did not run; allow it with "
                         f"--allow {safe_text(tool.name)}\n")
        return False


def open_tools(env: Env, args: argparse.Namespace) -> Tools:
    servers = env.config.mcp_servers
    if not servers:
        raise SpecchatError(f"--tools: no MCP servers are configured: add them under "
                            f"'mcp_servers:' in {env.paths.config_file}, or import Claude "
                            "Desktop's with specchat mcp import FILE")
    for name in args.servers:
        if name not in servers:
            raise SpecchatError(f"--server {safe_text(name)}: no such MCP server (servers: "
                                f"{', '.join(servers)})")
    hub = McpHub(servers)
    try:
        toolset, failed = ToolSet.gather(hub, list(dict.fromkeys(args.servers)) or None)
        for line in failed:
            sys.stderr.write(f"specchat: note: {safe_text(line)}\n")
        if not toolset:
            raise SpecchatError("--tools: no server offered a tool (see specchat mcp list)")
        names = ", ".join(sorted(toolset.names))
        for name in args.allow:
            if name not in toolset.names:
                raise SpecchatError(f"--allow {safe_text(name)}: no such tool (the tools: "
                                    f"{names})")
        choice = args.tool_choice or "auto"
        if choice not in ("auto", "required", "none") and choice not in toolset.names:
            raise SpecchatError(f"--tool-choice {safe_text(choice)}: no such tool (auto, "
                                f"required, or one of: {names})")
        return Tools(hub, toolset, frozenset(args.allow), choice)
    except BaseException:
        hub.close()
        raise


def check_tools_template(engine: ChatEngine) -> None:
    if not engine.template.takes_tools:
        raise SpecchatError(f"this model's chat template does not take tools (it has no {OPEN} "
                            "format to call them with): ask without --tools, or use a model "
                            "whose template has them (Qwen2.5, Hermes; e.g. --pair qwen-coder)")


def check_fits(engine: ChatEngine, messages: list[Message], files: list[Attachment],
               max_tokens: int, tools: list[dict[str, Any]] | None) -> None:
    """Refuse, with the numbers, a message whose files would overflow the context."""
    fit = measure_fit(engine, messages, files, max_tokens, tools)
    if not fit.fits:
        raise SpecchatError(fit.refusal("attach less, or raise --ctx-size"))


def tool_event_json(ev: ToolCallEvent | ToolResultEvent) -> dict[str, Any]:
    if isinstance(ev, ToolCallEvent):
        return {"type": "tool_call", "id": ev.id, "name": ev.name, "arguments": ev.arguments,
                "round": ev.round}
    return {"type": "tool_result", "id": ev.id, "name": ev.name, "status": ev.status,
            "content": ev.text, "round": ev.round, "seconds": round(ev.seconds, 3)}


def tool_event_line(ev: ToolCallEvent | ToolResultEvent) -> str:
    """What stderr says of a call and its result (the reply itself goes to stdout)."""
    if isinstance(ev, ToolCallEvent):
        args = ev.arguments if len(ev.arguments) <= 200 else ev.arguments[:197] + "..."
        return f"[tool call: {safe_text(ev.name)} {safe_text(args)}]"
    lines = ev.text.count("\n") + 1 if ev.text else 0
    detail = (f"{len(ev.text):,} characters, {lines} line{'s' if lines != 1 else ''}"
              if ev.status == "ok" else safe_text(ev.text.splitlines()[0][:200]))
    return f"[tool result: {safe_text(ev.name)}: {ev.status} · {detail} · {ev.seconds:.1f} s]"


def json_line(doc: dict[str, Any]) -> str:
    from specchat.textsafe import safe_json

    return safe_json(json.dumps(doc, ensure_ascii=False))
