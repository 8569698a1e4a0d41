"""The MCP servers a user configures (``mcp_servers:`` in config.yaml, or Claude Desktop's
``mcpServers`` JSON), read into :class:`McpServer` entries with a clear message for a bad one.

A server is either a command run over stdio (``command``, ``args``, ``env``) or a Streamable
HTTP endpoint (``url``, ``headers``). The command comes only from here, that is from the user:
nothing a model writes names a process to start. ``env`` and ``headers`` may hold secrets: they
are left out of ``repr`` and of every message, and the client never logs them.

Reading only: :mod:`specchat.tools` starts the servers. A module of the config layer, below it
in the layer order (``specchat.config`` imports it).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
DEFAULT_TIMEOUT_S = 30.0  # for a server to start, and for each tool call
MAX_TIMEOUT_S = 3600.0
KEYS = ("command", "args", "env", "cwd", "url", "headers", "timeout")
# Claude Desktop's and VS Code's spellings of the transport (an optional "type" key).
TYPES = ("stdio", "http", "streamable-http", "streamableHttp")


@dataclass(frozen=True)
class McpServer:
    """One configured MCP server: stdio (``command``) or Streamable HTTP (``url``)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    # Extra environment for a stdio server, over the SDK's safe default (PATH, HOME, …).
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)  # never logged
    timeout_s: float = DEFAULT_TIMEOUT_S  # to start, to list tools, and for each call

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def describe(self) -> str:
        """What it runs, for listings: the command line or the URL (never env or headers)."""
        if self.command is not None:
            return " ".join([self.command, *self.args])
        return str(self.url)

    def to_config(self) -> dict[str, Any]:
        """As config.yaml spells it (what :func:`parse_servers` reads back)."""
        out: dict[str, Any] = {}
        if self.command is not None:
            out["command"] = self.command
            if self.args:
                out["args"] = list(self.args)
            if self.env:
                out["env"] = dict(self.env)
            if self.cwd is not None:
                out["cwd"] = self.cwd
        else:
            out["url"] = self.url
            if self.headers:
                out["headers"] = dict(self.headers)
        if self.timeout_s != DEFAULT_TIMEOUT_S:
            out["timeout"] = self.timeout_s
        return out


BadFn = Callable[[str, str], Exception]


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _strings(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping of names to text ({what}), not {_shown(value)}")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k:
            raise ValueError(f"has a name that is not text: {_shown(k)}")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ValueError(f"'{k}' must be text")  # the value is not shown: it may be a secret
        out[k] = str(v)
    return out


def parse_server(name: Any, value: Any) -> McpServer:
    """One entry, or ValueError whose message follows "MCP server 'NAME' "."""
    if not isinstance(name, str) or not SERVER_NAME.fullmatch(name):
        raise ValueError(f"!MCP server names are 1 to 64 letters, digits, '_' or '-', not "
                         f"{_shown(name)}")
    if not isinstance(value, dict):
        raise ValueError("must be a mapping with 'command' (a program to run) or 'url' (a "
                         f"Streamable HTTP endpoint), not {_shown(value)}")
    unknown = [k for k in value if k not in KEYS and k != "type"]
    if unknown:
        raise ValueError(f"has an unknown key {_shown(unknown[0])} (known: {', '.join(KEYS)})")
    kind = value.get("type")
    if kind is not None and kind not in TYPES:
        raise ValueError(f"has 'type' {_shown(kind)}: specchat speaks stdio and Streamable HTTP "
                         f"({', '.join(TYPES)})")
    command, url = value.get("command"), value.get("url")
    if command is not None and url is not None:
        raise ValueError("gives both 'command' and 'url': a server is a program to run (stdio) "
                         "or a URL (Streamable HTTP), not both")
    if command is None and url is None:
        raise ValueError("needs 'command' (a program to run, e.g. mcp-server-git) or 'url' "
                         "(e.g. http://127.0.0.1:9000/mcp)")
    timeout = value.get("timeout", DEFAULT_TIMEOUT_S)
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout) or not 0 < timeout <= MAX_TIMEOUT_S):
        raise ValueError(f"'timeout' must be seconds in (0, {MAX_TIMEOUT_S:g}], not "
                         f"{_shown(timeout)}")
    if command is not None:
        for key in ("url", "headers"):
            if key in value:
                raise ValueError(f"runs a command: '{key}' is for a URL server")
        if not isinstance(command, str) or not command.strip():
            raise ValueError(f"'command' must be the program to run, as text, not "
                             f"{_shown(command)}")
        args = value.get("args", [])
        if not isinstance(args, list) or not all(
                isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in args):
            raise ValueError(f"'args' must be a list of text, not {_shown(args)}")
        try:
            env = _strings(value.get("env") or {}, "environment variables")
        except ValueError as e:
            raise ValueError(f"'env': {e}") from None
        cwd = value.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ValueError(f"'cwd' must be a folder, as text, not {_shown(cwd)}")
        return McpServer(name, command=command, args=tuple(str(a) for a in args), env=env,
                         cwd=cwd, timeout_s=float(timeout))
    for key in ("args", "env", "cwd"):
        if key in value:
            raise ValueError(f"is a URL server: '{key}' is for a command")
    if not isinstance(url, str) or not re.match(r"https?://[^/\s]+", url):
        raise ValueError(f"'url' must be an http:// or https:// address, not {_shown(url)}")
    try:
        headers = _strings(value.get("headers") or {}, "HTTP headers")
    except ValueError as e:
        raise ValueError(f"'headers': {e}") from None
    return McpServer(name, url=url, headers=headers, timeout_s=float(timeout))


def parse_servers(value: Any, bad: BadFn, key: str = "mcp_servers") -> dict[str, McpServer]:
    """``mcp_servers:`` (a mapping of names to servers); ``bad(key, why)`` makes the error."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad(key, "!'mcp_servers' must be a mapping of server names to servers, e.g. "
                       "'git: {command: mcp-server-git}'")
    out = {}
    for name, entry in value.items():
        try:
            out[name] = parse_server(name, entry)
        except ValueError as e:
            why = str(e)
            sep = ": " if why.startswith("'") else " "
            raise bad(f"{key}.{name}", why if why.startswith("!")
                      else f"!MCP server '{name}'{sep}{why}") from None
    return out


def parse_claude_desktop(text: str, where: str) -> dict[str, McpServer]:
    """Claude Desktop's ``claude_desktop_config.json`` (``{"mcpServers": {NAME: {...}}}``, or
    the inner mapping alone); ValueError naming ``where`` and the entry."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{where}: not valid JSON ({e})") from None
    if isinstance(doc, dict) and "mcpServers" in doc:
        doc = doc["mcpServers"]
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: expected an object with 'mcpServers' (Claude Desktop's "
                         "format)")

    def bad(key: str, why: str) -> ValueError:
        return ValueError(f"{where}: {why.removeprefix('!')}")

    return parse_servers(doc, bad, "mcpServers")
