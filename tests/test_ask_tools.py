"""`specchat ask --file` and `--tools`: files read (or refused) before a model loads, the
context checked with the numbers, and tool calls through a real MCP server over stdio — run
when allowed, refused when not, a failing server said in one line, the rounds capped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from specchat.devtools.tiny_models import TOOLS_TEMPLATE, TinySpec, json_vocabulary, write_tiny_model
from specchat.tools.files import AttachError, read_attachment

REPO = Path(__file__).resolve().parent.parent
TEST_SERVER = REPO / "tests" / "fixtures" / "mcp_test_server.py"


def specchat(home: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECCHAT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "specchat", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, check=False, cwd=REPO)


def json_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in out.splitlines()]


@pytest.fixture(scope="module")
def tools_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny JSON target with a template that takes tools (as tests/test_tool_calls.py)."""
    return write_tiny_model(tmp_path_factory.mktemp("tools") / "tools.gguf", TinySpec(seed=1),
                            tokens=json_vocabulary(), chat_template=TOOLS_TEMPLATE,
                            name="tiny-tools")


@pytest.fixture
def tool_home(tmp_path: Path) -> tuple[Path, Path]:
    """A home whose config names the test server, with the file its calls are noted in."""
    home = tmp_path / "home"
    log = tmp_path / "calls.log"
    cfg = home / "config" / "config.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(yaml.safe_dump({"mcp_servers": {"t": {
        "command": sys.executable, "args": [str(TEST_SERVER)], "env": {"MCP_TEST_LOG": str(log)},
        "timeout": 20}}}), encoding="utf-8")
    return home, log


def model_args(target: Path, draft: Path, *more: str) -> list[str]:
    return ["--model", str(target), "--draft", str(draft), "--temperature", "0",
            "--max-tokens", "24", "--ctx-size", "2048", *more]


# ------------------------------------------------------------------------------- files

def test_a_file_is_read_as_a_fenced_block_with_its_path(tmp_path: Path) -> None:
    f = tmp_path / "orders.py"
    f.write_text("total = 1\ns = '```'\n\x1b]0;x\x07\n", encoding="utf-8")
    a = read_attachment(str(f), 1024)
    assert a.size == f.stat().st_size and a.name == "orders.py"
    assert "\x1b" not in a.text and "␛" in a.text  # untrusted: shown, never obeyed
    # A fence longer than the file's own backticks, so the file cannot close it.
    assert a.block() == f"{f}\n````python\n{a.text}````"


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p.mkdir(), "is a folder"),
    (lambda p: os.mkfifo(p), "is a FIFO (a pipe), not a file"),
    (lambda p: p.write_bytes(b"ab\0cd"), "looks binary (it holds NUL bytes)"),
    (lambda p: p.write_bytes(b"caf\xe9\n"), "is not UTF-8 text (byte 3)"),
    (lambda p: p.write_text("x" * 2048), "is 2 KB, over the 1 KB limit for an attached file"),
    (lambda p: None, ": no such file"),
])
def test_what_cannot_be_attached_is_refused_with_a_sentence(tmp_path: Path, make: Any,
                                                            message: str) -> None:
    p = tmp_path / "f"
    make(p)
    with pytest.raises(AttachError) as e:
        read_attachment(str(p), 1024)
    assert message in str(e.value)


def test_a_device_is_refused() -> None:
    with pytest.raises(AttachError, match="is a device, not a file"):
        read_attachment("/dev/zero", 1024)


def test_ask_with_a_file_predicts_it_and_refuses_bad_ones_before_loading(
        tiny_target: Path, tiny_draft: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    src = tmp_path / "orders.py"
    src.write_text("def f(total):\n    return total + 1\n", encoding="utf-8")
    r = specchat(home, "ask", "rename total", *model_args(tiny_target, tiny_draft),
                 "--file", str(src), "--json")
    assert r.returncode == 0, r.stderr
    stats = json_lines(r.stdout)[-1]
    plain = specchat(home, "ask", "rename total", *model_args(tiny_target, tiny_draft), "--json")
    # The model read the file, and the prediction drafter was given it.
    assert stats["prompt_tokens"] > json_lines(plain.stdout)[-1]["prompt_tokens"] + 20
    assert "prediction" in stats["drafters"]
    assert stats["accepted_prediction_tokens"] + stats["rejected_prediction_tokens"] > 20
    # Refused before any model loads (no progress lines), one line each.
    for bad, message in ((str(tmp_path / "gone.py"), "gone.py: no such file"),
                         ("/dev/null", "/dev/null is a device, not a file")):
        r = specchat(home, "ask", "hi", "--model", str(tiny_target), "--file", bad)
        assert r.returncode == 1 and r.stderr.startswith("specchat: error: --file: ")
        assert message in r.stderr and r.stderr.count("\n") == 1
        assert "Loading" not in r.stderr and "Traceback" not in r.stderr
    # The size limit, from the config file or the flag.
    r = specchat(home, "ask", "hi", "--model", str(tiny_target), "--file", str(src),
                 "--file-limit-kb", "0")
    assert r.stderr == "specchat: error: --file-limit-kb must be a whole number in [1, " \
        "1048576], not 0\n"


def test_a_file_that_overflows_the_context_is_refused_with_the_numbers(
        tiny_target: Path, tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text("hello there\n" * 100, encoding="utf-8")
    r = specchat(tmp_path / "home", "ask", "sum it up", "--model", str(tiny_target),
                 "--ctx-size", "256", "--max-tokens", "64", "--file", str(big))
    assert r.returncode == 1
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("specchat: error: the message is ")
    assert "tokens with its files (big.txt " in line
    assert "the context holds 256 with 64 kept for the reply: attach less, or raise --ctx-size" \
        in line


# ------------------------------------------------------------------------------- tools

def test_an_allowed_call_runs_and_its_result_goes_back(tools_target: Path, tiny_json_draft: Path,
                                                       tool_home: tuple[Path, Path]) -> None:
    home, log = tool_home
    r = specchat(home, "ask", "paint it", *model_args(tools_target, tiny_json_draft),
                 "--tools", "--server", "t", "--tool-choice", "color", "--allow", "color",
                 "--json")
    assert r.returncode == 0, r.stderr
    lines = json_lines(r.stdout)
    calls = [x for x in lines if x["type"] == "tool_call"]
    results = [x for x in lines if x["type"] == "tool_result"]
    assert len(calls) == 1 and calls[0]["name"] == "color"
    color = json.loads(calls[0]["arguments"])["name"]
    assert color in ("red", "blue")  # the forced call follows the tool's schema
    assert results[0]["status"] == "ok" and results[0]["content"] == f"painted {color}"
    assert results[0]["id"] == calls[0]["id"]
    assert log.read_text() == "color\n"  # it ran, once
    stats = lines[-1]
    assert stats["type"] == "stats" and stats["tool_calls"] == 1
    # The reply went on after the result: tokens of both rounds are counted.
    tokens = [x for x in lines if x["type"] == "token"]
    assert len(tokens) > 24 and stats["generated_tokens"] >= len(tokens)  # 24 a round


def test_a_call_that_was_not_allowed_never_runs(tools_target: Path, tiny_json_draft: Path,
                                                tool_home: tuple[Path, Path]) -> None:
    home, log = tool_home
    r = specchat(home, "ask", "paint it", *model_args(tools_target, tiny_json_draft),
                 "--tools", "--tool-choice", "color")
    assert r.returncode == 0, r.stderr
    assert ("specchat: refused a call to color (server t): it was not allowed, and did not "
            "run; allow it with --allow color") in r.stderr
    assert "[tool result: color: refused · error: the user did not allow the tool color to " \
        "run" in r.stderr
    assert not log.exists()  # the server never saw the call


def test_a_server_that_dies_mid_call_is_one_line_and_the_turn_goes_on(
        tools_target: Path, tiny_json_draft: Path, tool_home: tuple[Path, Path]) -> None:
    home, log = tool_home
    r = specchat(home, "ask", "stop", *model_args(tools_target, tiny_json_draft),
                 "--tools", "--tool-choice", "quit", "--allow", "quit")
    assert r.returncode == 0, r.stderr
    assert ("[tool result: quit: error · error: MCP server 't' stopped during the call (quit) "
            "(its last words: quitting now, as asked); it starts again on the next call") \
        in r.stderr
    assert "tool call]" in r.stderr.splitlines()[-1] and "Traceback" not in r.stderr
    assert log.read_text() == "quit\n"


def test_the_rounds_are_capped(tools_target: Path, tiny_json_draft: Path,
                               tool_home: tuple[Path, Path]) -> None:
    home, _ = tool_home
    cfg = home / "config" / "config.yaml"
    doc = yaml.safe_load(cfg.read_text())
    cfg.write_text(yaml.safe_dump({**doc, "max_tool_rounds": 1}))
    r = specchat(home, "ask", "paint it", *model_args(tools_target, tiny_json_draft),
                 "--tools", "--tool-choice", "color", "--allow", "color")
    assert r.returncode == 0, r.stderr
    assert ("[stopped after 1 rounds of tool calls (max_tool_rounds): the model was still "
            "calling tools]") in r.stderr
    r = specchat(home, "ask", "paint it", *model_args(tools_target, tiny_json_draft),
                 "--tools", "--max-tool-rounds", "0")
    assert r.stderr == ("specchat: error: --max-tool-rounds must be a whole number in [1, "
                        "100], not 0\n")


def test_tool_options_are_checked_before_a_model_loads(tiny_target: Path,
                                                       tool_home: tuple[Path, Path]) -> None:
    home, _ = tool_home
    r = specchat(home, "ask", "hi", "--model", str(tiny_target), "--allow", "color")
    assert r.stderr == ("specchat: error: --allow needs --tools (which offers the configured "
                        "MCP servers' tools)\n")
    r = specchat(home, "ask", "hi", "--model", str(tiny_target), "--tools", "--allow", "paint")
    assert "--allow paint: no such tool (the tools: boom, color, echo, hang, huge, junk, quit, " \
        "read)" in r.stderr
    r = specchat(home, "ask", "hi", "--model", str(tiny_target), "--tools",
                 "--tool-choice", "paint")
    assert "--tool-choice paint: no such tool (auto, required, or one of:" in r.stderr
    r = specchat(home, "ask", "hi", "--model", str(tiny_target), "--tools", "--server", "git")
    assert r.stderr == "specchat: error: --server git: no such MCP server (servers: t)\n"
    r = specchat(home, "ask", "hi", "--model", str(tiny_target), "--server", "t")
    assert "--server needs --tools" in r.stderr
    # A template with no tool format says so (the tiny target's is plain ChatML).
    r = specchat(home, "ask", "hi", "--model", str(tiny_target), "--tools")
    assert r.returncode == 1 and "this model's chat template does not take tools" in r.stderr
    empty = specchat(home.parent / "empty", "ask", "hi", "--model", str(tiny_target), "--tools")
    assert "--tools: no MCP servers are configured" in empty.stderr


def test_ctrl_c_cancels_a_running_call(tools_target: Path, tiny_json_draft: Path,
                                       tool_home: tuple[Path, Path]) -> None:
    import signal
    import time

    home, _ = tool_home
    env = {**os.environ, "SPECCHAT_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-m", "specchat", "ask", "wait",
                             *model_args(tools_target, tiny_json_draft), "--tools",
                             "--tool-choice", "hang", "--allow", "hang"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=REPO)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # until the call is made (the server then hangs for an hour)
        seen.append(line)
        if line.startswith("[tool call: hang"):
            break
    time.sleep(0.5)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(seen) + rest
    assert time.monotonic() - t0 < 15  # not the server's 20 s time limit, nor its hour
    assert "[tool result: hang: cancelled · error: the call was cancelled by the user" in rest
    assert "stopped: cancelled" in rest and "Traceback" not in rest
