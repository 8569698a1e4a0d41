"""MCP servers: the config entries and their messages, `specchat mcp import/list/check`, and
the hub against real servers over stdio — `mcp-server-git` on a temporary repository, and a
server written with the SDK (tests/fixtures/mcp_test_server.py) for each way a server fails."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from specchat.config import load_config
from specchat.errors import ConfigError
from specchat.mcp_config import McpServer, parse_claude_desktop
from specchat.tools.hub import McpHub, ToolServerError
from specchat.tools.offer import ToolSet
from specchat.tools.results import MAX_RESULT_CHARS

REPO = Path(__file__).resolve().parent.parent
TEST_SERVER = REPO / "tests" / "fixtures" / "mcp_test_server.py"
needs_git = pytest.mark.skipif(shutil.which("git") is None or shutil.which("mcp-server-git")
                               is None, reason="needs git and mcp-server-git (a test extra)")


def specchat(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECCHAT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "specchat", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, check=False, cwd=REPO)


def write_config(home: Path, doc: dict[str, Any]) -> Path:
    path = home / "config" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def make_server(name: str = "t", timeout: float = 4.0) -> McpServer:
    return McpServer(name, command=sys.executable, args=(str(TEST_SERVER),), timeout_s=timeout)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    run = {"cwd": root, "check": True, "capture_output": True}
    subprocess.run(["git", "init", "-q"], **run)  # type: ignore[call-overload]
    subprocess.run(["git", "config", "user.email", "t@example.com"], **run)  # type: ignore[call-overload]
    subprocess.run(["git", "config", "user.name", "Tess"], **run)  # type: ignore[call-overload]
    (root / "orders.py").write_text("total = 1\n", encoding="utf-8")
    subprocess.run(["git", "add", "."], **run)  # type: ignore[call-overload]
    subprocess.run(["git", "commit", "-qm", "Count the orders' total once"], **run)  # type: ignore[call-overload]
    return root


# ---------------------------------------------------------------------------------- config

def test_a_config_reads_stdio_and_http_servers_and_keeps_secrets_out_of_repr(tmp_path: Path
                                                                            ) -> None:
    path = write_config(tmp_path, {"mcp_servers": {
        "git": {"command": "mcp-server-git", "args": ["--repository", "~/shop"],
                "env": {"TOKEN": "s3cret-env"}},
        "notes": {"url": "http://127.0.0.1:9000/mcp",
                  "headers": {"Authorization": "Bearer s3cret-header"}, "timeout": 5}}})
    cfg = load_config(path)
    git, notes = cfg.mcp_servers["git"], cfg.mcp_servers["notes"]
    assert (git.transport, git.args, dict(git.env)) == ("stdio", ("--repository", "~/shop"),
                                                         {"TOKEN": "s3cret-env"})
    assert (notes.transport, notes.timeout_s) == ("http", 5.0)
    assert "s3cret" not in repr(cfg) and "s3cret" not in notes.describe()
    # Saved and read back as it was.
    assert load_config(path).mcp_servers == cfg.mcp_servers
    assert yaml.safe_load(cfg.to_yaml())["mcp_servers"]["notes"]["timeout"] == 5


@pytest.mark.parametrize(("entry", "message"), [
    ("3", "'mcp_servers' must be a mapping of server names"),
    ({"git": {}}, "MCP server 'git' needs 'command' (a program to run"),
    ({"git": {"command": "x", "url": "http://a"}}, "gives both 'command' and 'url'"),
    ({"git": {"command": 3}}, "'command' must be the program to run, as text, not 3"),
    ({"git": {"command": "x", "args": "--repository"}}, "'args' must be a list of text"),
    ({"git": {"command": "x", "env": ["A=1"]}}, "'env': must be a mapping of names to text"),
    ({"git": {"command": "x", "headers": {}}}, "runs a command: 'headers' is for a URL server"),
    ({"n": {"url": "ftp://x"}}, "'url' must be an http:// or https:// address"),
    ({"n": {"url": "http://x", "args": []}}, "is a URL server: 'args' is for a command"),
    ({"n": {"url": "http://x", "headers": {"A": ["s3cret"]}}}, "'headers': 'A' must be text"),
    ({"n": {"url": "http://x", "timeout": 0}}, "'timeout' must be seconds in (0, 3600]"),
    ({"n": {"url": "http://x", "type": "sse"}}, "has 'type' 'sse': specchat speaks stdio"),
    ({"n": {"command": "x", "cmd": "y"}}, "has an unknown key 'cmd'"),
    ({"a b": {"command": "x"}}, "MCP server names are 1 to 64 letters"),
])
def test_a_bad_server_entry_is_said_with_its_line(tmp_path: Path, entry: Any, message: str
                                                  ) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("n_ctx: 512\nmcp_servers: " + json.dumps(entry) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert message in str(e.value) and str(e.value).startswith(f"{path}:2: ")
    assert "s3cret" not in str(e.value)


def test_claude_desktops_file_is_read() -> None:
    doc = {"mcpServers": {"fs": {"command": "npx", "args": ["-y", "server-filesystem", "/tmp"]},
                          "web": {"type": "http", "url": "https://example.com/mcp"}}}
    found = parse_claude_desktop(json.dumps(doc), "claude.json")
    assert found["fs"].args == ("-y", "server-filesystem", "/tmp")
    assert found["web"].url == "https://example.com/mcp"
    with pytest.raises(ValueError, match="claude.json: MCP server 'x' needs 'command'"):
        parse_claude_desktop('{"mcpServers": {"x": {"args": []}}}', "claude.json")
    with pytest.raises(ValueError, match="claude.json: not valid JSON"):
        parse_claude_desktop("{", "claude.json")


def test_mcp_import_adds_keeps_and_replaces(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, {"n_ctx": 1024, "mcp_servers": {"git": {"command": "old-git"}}})
    src = tmp_path / "claude_desktop_config.json"
    src.write_text(json.dumps({"mcpServers": {"git": {"command": "mcp-server-git"},
                                              "test": {"command": "python3", "args": ["s.py"]}}}))
    r = specchat(home, "mcp", "import", str(src))
    assert r.returncode == 0, r.stderr
    assert "added: test" in r.stdout and "kept (already configured; --replace" in r.stdout
    cfg = load_config(home / "config" / "config.yaml")
    assert cfg.n_ctx == 1024 and cfg.mcp_servers["git"].command == "old-git"
    assert cfg.mcp_servers["test"].args == ("s.py",)
    r = specchat(home, "mcp", "import", str(src), "--replace")
    assert "replaced: git, test" in r.stdout
    assert load_config(home / "config" / "config.yaml").mcp_servers["git"].command \
        == "mcp-server-git"
    src.write_text('{"mcpServers": {"bad": {"command": "x", "url": "http://y"}}}')
    r = specchat(home, "mcp", "import", str(src))
    assert r.returncode == 1 and "gives both 'command' and 'url'" in r.stderr
    assert "Traceback" not in r.stderr


# ------------------------------------------------------------------------ real servers

@needs_git
def test_mcp_server_git_lists_its_tools_and_answers(repo: Path) -> None:
    server = McpServer("git", command="mcp-server-git", args=("--repository", str(repo)),
                       timeout_s=60)
    with McpHub({"git": server}) as hub:
        tools = {t.name: t for t in hub.tools("git")}
        assert {"git_log", "git_status", "git_show"} <= set(tools)
        assert hub.running() == ["git"]
        result = hub.call("git", "git_log", {"repo_path": str(repo), "max_count": 1})
        assert not result.is_error and "Count the orders' total once" in result.text
        # A call that breaks the schema is answered before it reaches the server.
        toolset = ToolSet(tools.values())
        bad = toolset.check("git_log", '{"repo_path": 3}')
        assert bad.error is not None and "do not match its schema" in bad.error
        assert "repo_path: 3 is not of type 'string'" in bad.error
        assert toolset.check("git_push", "{}").error == (
            "error: there is no tool named 'git_push'; the tools are: "
            + ", ".join(sorted(tools)))
        assert "not valid JSON" in (toolset.check("git_log", "{repo").error or "")
    assert hub.running() == []


@pytest.fixture(scope="module")
def failing() -> Iterator[McpHub]:
    with McpHub({"t": make_server(timeout=4.0)}) as hub:
        yield hub


def test_a_tool_that_raises_is_an_error_result(failing: McpHub) -> None:
    r = failing.call("t", "boom", {})
    assert r.is_error and "boom" in r.text
    assert failing.call("t", "echo", {"text": "still here"}).text == "echo: still here"


def test_a_tool_that_hangs_is_stopped_at_the_time_limit_and_restarted(failing: McpHub) -> None:
    with pytest.raises(ToolServerError) as e:
        failing.call("t", "hang", {})
    assert str(e.value) == ("MCP server 't': hang took more than 4 s: stopped (it starts "
                            "again on the next call)")
    assert failing.call("t", "echo", {"text": "back"}).text == "echo: back"


def test_a_5_mb_result_is_cut_with_a_line_that_says_so(failing: McpHub) -> None:
    r = failing.call("t", "huge", {})
    assert not r.is_error
    assert len(r.text) < MAX_RESULT_CHARS + 200
    assert r.text.endswith(f"[… cut: the result is {5 * 1024 * 1024:,} characters; the first "
                           f"{MAX_RESULT_CHARS:,} are shown]")


def test_junk_on_the_wire_does_not_lose_the_answer(failing: McpHub) -> None:
    assert failing.call("t", "junk", {}).text == "after the junk"


def test_a_server_that_exits_mid_call_says_so_and_restarts(failing: McpHub) -> None:
    with pytest.raises(ToolServerError) as e:
        failing.call("t", "quit", {})
    assert "MCP server 't' stopped during the call (quit)" in str(e.value)
    assert "its last words: quitting now, as asked" in str(e.value)  # its stderr, not ours
    assert "\n" not in str(e.value)
    assert failing.call("t", "echo", {"text": "again"}).text == "echo: again"


def test_a_missing_command_is_said_before_anything_runs() -> None:
    with McpHub({"gone": McpServer("gone", command="no-such-mcp-server-57")}) as hub:
        with pytest.raises(ToolServerError, match="command 'no-such-mcp-server-57' is not found "
                                                  "on PATH"):
            hub.tools("gone")
        with pytest.raises(ToolServerError, match="no MCP server named 'other'"):
            hub.tools("other")


@needs_git
def test_mcp_list_and_check_from_the_command_line(tmp_path: Path, repo: Path) -> None:
    home = tmp_path / "home"
    write_config(home, {"mcp_servers": {
        "git": {"command": "mcp-server-git", "args": ["--repository", str(repo)],
                "timeout": 60},
        "gone": {"command": "no-such-mcp-server-57"},
        # Nothing listens there: it fails at once, and its header is never shown.
        "notes": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer s3cret"},
                  "timeout": 10}}})
    r = specchat(home, "mcp", "list")
    assert r.returncode == 1, r.stderr  # one does not start
    out = r.stdout
    assert "git  (stdio: mcp-server-git --repository" in out
    assert re.search(r"^  starts: \d+ tools$", out, re.MULTILINE)
    assert "    git_log: Shows the commit logs" in out
    assert "gone  (stdio: no-such-mcp-server-57)" in out
    assert "  does not start: MCP server 'gone': command 'no-such-mcp-server-57' is not found" in out
    assert "notes  (http: http://127.0.0.1:9/mcp)" in out
    assert "  does not start: MCP server 'notes' failed to start:" in out
    assert "s3cret" not in out + r.stderr and "Traceback" not in r.stderr
    ok = specchat(home, "mcp", "check", "git")
    assert ok.returncode == 0 and ok.stdout.endswith("git: ok, stopped\n")
    bad = specchat(home, "mcp", "check", "gone")
    assert bad.returncode == 1 and "gone: failed" in bad.stdout
    missing = specchat(home, "mcp", "check", "nope")
    assert missing.returncode == 1 and "no MCP server named 'nope'" in missing.stderr
    empty = specchat(tmp_path / "empty", "mcp", "list")
    assert empty.returncode == 1 and "no MCP servers are configured" in empty.stderr


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_streamable_http_server_with_headers(tmp_path: Path) -> None:
    import time
    import urllib.request

    port = free_port()
    proc = subprocess.Popen([sys.executable, str(TEST_SERVER), "--http", str(port), "t0ken-57"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        for _ in range(200):  # until it listens
            try:
                urllib.request.urlopen(url, timeout=1)
            except urllib.error.HTTPError:
                break  # it answers (401 without the header)
            except OSError:
                time.sleep(0.1)
        good = McpServer("notes", url=url, headers={"Authorization": "Bearer t0ken-57"},
                         timeout_s=20)
        bad = McpServer("wrong", url=url, headers={"Authorization": "Bearer wr0ng-57"},
                        timeout_s=20)
        with McpHub({"notes": good, "wrong": bad}) as hub:
            assert "color" in {t.name for t in hub.tools("notes")}
            assert hub.call("notes", "color", {"name": "blue"}).text == "painted blue"
            with pytest.raises(ToolServerError) as e:
                hub.tools("wrong")
            assert str(e.value).startswith("MCP server 'wrong' failed to start: ")
            assert str(e.value).endswith("(HTTP 401: check its 'headers' in config.yaml)")
            assert "wr0ng" not in str(e.value) and "t0ken" not in str(e.value)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.skipif(shutil.which("npx") is None,
                    reason="node's npx is absent: the npm server-filesystem test needs it")
def test_the_npm_filesystem_server_through_npx(tmp_path: Path) -> None:
    """@modelcontextprotocol/server-filesystem, fetched once by npx into npm's own cache
    (outside the clone); a JavaScript server, so the SDK meets another implementation."""
    (tmp_path / "orders.py").write_text("total = 1\n", encoding="utf-8")
    server = McpServer("fs", command="npx", args=("-y", "@modelcontextprotocol/server-filesystem",
                                                  str(tmp_path)), timeout_s=180)
    with McpHub({"fs": server}) as hub:
        names = {t.name for t in hub.tools("fs")}
        assert {"read_text_file", "list_directory"} <= names
        r = hub.call("fs", "read_text_file", {"path": str(tmp_path / "orders.py")})
        assert (r.text, r.is_error) == ("total = 1\n", False)
        outside = hub.call("fs", "read_text_file", {"path": "/etc/hostname"})
        assert outside.is_error and "denied" in outside.text.lower()
