"""``specchat mcp``: the MCP servers of config.yaml — list them with their tools, check one, and
import Claude Desktop's ``mcpServers`` file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specchat.cli.common import Env
from specchat.config import load_config, save_config
from specchat.errors import SpecchatError
from specchat.mcp_config import McpServer, parse_claude_desktop
from specchat.textsafe import safe_text
from specchat.tools.hub import McpHub, ToolServerError, describe_tools

NO_SERVERS = ("no MCP servers are configured: add them under 'mcp_servers:' in {path}, or "
              "import Claude Desktop's with: specchat mcp import claude_desktop_config.json")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("mcp", help="MCP servers: list, check, import")
    msub = p.add_subparsers(dest="mcp_command", metavar="ACTION", required=True)
    ls = msub.add_parser("list", help="each configured server, whether it starts, and its tools")
    ls.set_defaults(func=run_list)
    ck = msub.add_parser("check", help="start a server, list its tools, stop it; say why if it "
                                       "fails")
    ck.add_argument("name", help="the server's name in config.yaml")
    ck.set_defaults(func=run_check)
    im = msub.add_parser("import", help="add the servers of Claude Desktop's "
                                        "claude_desktop_config.json to config.yaml")
    im.add_argument("file", help="a JSON file with 'mcpServers'")
    im.add_argument("--replace", action="store_true",
                    help="replace servers of the same name (default: keep them, skip those)")
    im.set_defaults(func=run_import)


def _servers(env: Env) -> dict[str, McpServer]:
    servers = env.config.mcp_servers
    if not servers:
        raise SpecchatError(NO_SERVERS.format(path=env.paths.config_file))
    return servers


def _show(server: McpServer, hub: McpHub) -> bool:
    out = sys.stdout
    out.write(f"{server.name}  ({server.transport}: {safe_text(server.describe())})\n")
    try:
        tools = hub.tools(server.name)
    except ToolServerError as e:
        out.write(f"  does not start: {safe_text(str(e))}\n")
        return False
    out.write(f"  starts: {len(tools)} tool{'s' if len(tools) != 1 else ''}\n")
    for line in describe_tools(tools):
        out.write(f"    {safe_text(line)}\n")
    return True


def run_list(env: Env, args: argparse.Namespace) -> int:
    servers = _servers(env)
    ok = True
    with McpHub(servers) as hub:
        for i, server in enumerate(servers.values()):
            if i:
                sys.stdout.write("\n")
            ok = _show(server, hub) and ok
            sys.stdout.flush()
            hub.stop(server.name)
    return 0 if ok else 1


def run_check(env: Env, args: argparse.Namespace) -> int:
    servers = _servers(env)
    if args.name not in servers:
        raise SpecchatError(f"no MCP server named {safe_text(args.name)!r} in "
                            f"{env.paths.config_file} (servers: {', '.join(servers)})")
    with McpHub(servers) as hub:
        ok = _show(servers[args.name], hub)
    sys.stdout.write(f"{args.name}: {'ok, stopped' if ok else 'failed'}\n")
    return 0 if ok else 1


def run_import(env: Env, args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecchatError(f"no such file: {safe_text(args.file)}") from None
    except UnicodeDecodeError:
        raise SpecchatError(f"{safe_text(args.file)} is not UTF-8 text") from None
    except OSError as e:
        raise SpecchatError(f"cannot read {safe_text(args.file)}: "
                            f"{safe_text(e.strerror or str(e))}") from None
    try:
        found = parse_claude_desktop(text, safe_text(args.file))
    except ValueError as e:
        raise SpecchatError(safe_text(str(e))) from None
    if not found:
        raise SpecchatError(f"{safe_text(args.file)} names no servers under 'mcpServers'")
    config_file = env.paths.config_file
    current = load_config(config_file)  # a broken config.yaml is said, not overwritten
    servers = dict(current.mcp_servers)
    added, replaced, skipped = [], [], []
    for name, server in found.items():
        if name in servers and not args.replace:
            skipped.append(name)
            continue
        (replaced if name in servers else added).append(name)
        servers[name] = server
    if added or replaced:
        save_config(config_file, current.with_(mcp_servers=servers), keys=["mcp_servers"])
    for what, names in (("added", added), ("replaced", replaced),
                        ("kept (already configured; --replace to replace)", skipped)):
        if names:
            sys.stdout.write(f"{what}: {', '.join(names)}\n")
    if added or replaced:
        sys.stdout.write(f"saved to {config_file}; try: specchat mcp list\n")
    return 0
