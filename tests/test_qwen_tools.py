"""qwen-coder with files and tools (opt in with ``-m qwen``; the pair's files as in
tests/test_qwen.py): an attached file is drafted from by the prediction drafter from the
reply's first tokens, and `auto` tool choice calls mcp-server-git's git_log correctly and gets
the real log back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from specchat.models.catalog import load_catalog
from specchat.models.resolver import ModelResolver
from specchat.paths import AppPaths

pytestmark = pytest.mark.qwen

SOURCE = '''def order_total(items):
    total = 0
    for item in items:
        total += item.price * item.quantity
    return total


def apply_discount(total, rate):
    if rate <= 0:
        return total
    return total * (1 - rate)
'''


def pair_files(qwen_paths: AppPaths) -> list[str]:
    cat = load_catalog()
    res = ModelResolver(cat, qwen_paths)
    pair = cat.pair("qwen-coder")
    target, draft = (res.ensure(m, fetch=False) for m in (pair.target, pair.draft))
    return ["--model", str(target), "--draft", str(draft), "--temperature", "0",
            "--threads", "2"]


def ask(home: Path, *args: str) -> tuple[list[dict[str, Any]], str]:
    env = {**os.environ, "SPECCHAT_HOME": str(home)}
    r = subprocess.run([sys.executable, "-m", "specchat", "ask", *args, "--json"],
                       capture_output=True, text=True, env=env, timeout=1200, check=False)
    assert r.returncode == 0, r.stderr
    return [json.loads(x) for x in r.stdout.splitlines()], r.stderr


def test_an_attached_file_is_drafted_from_its_first_tokens(qwen_paths: AppPaths,
                                                           tmp_path: Path) -> None:
    src = tmp_path / "orders.py"
    src.write_text(SOURCE, encoding="utf-8")
    lines, _ = ask(tmp_path / "home", "Rename the variable total to subtotal everywhere. "
                   "Reply with the whole file only.", "--file", str(src), "--max-tokens", "160",
                   *pair_files(qwen_paths))
    text = "".join(x["text"] for x in lines if x["type"] == "token")
    stats = lines[-1]
    assert "subtotal" in text, text
    assert "prediction" in stats["drafters"]
    assert stats["accepted_prediction_tokens"] > 20, stats
    steps = [x for x in lines if x["type"] == "step"]
    assert steps and steps[0]["drafter"] == "prediction"  # from the reply's first step


@pytest.mark.skipif(shutil.which("mcp-server-git") is None or shutil.which("git") is None,
                    reason="needs git and mcp-server-git (a test extra)")
def test_auto_calls_git_log_and_gets_the_real_message(qwen_paths: AppPaths,
                                                      tmp_path: Path) -> None:
    repo = tmp_path / "shop"
    repo.mkdir()
    for cmd in (["init", "-q"], ["config", "user.email", "t@example.com"],
                ["config", "user.name", "Tess"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    (repo / "orders.py").write_text(SOURCE, encoding="utf-8")
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "Count each order's total once"], cwd=repo,
                   check=True)
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.yaml").write_text(yaml.safe_dump({"mcp_servers": {"git": {
        "command": "mcp-server-git", "args": ["--repository", str(repo)], "timeout": 120}}}))
    lines, err = ask(home, f"What was the last commit message in my git repository at {repo}?",
                     "--tools", "--allow", "git_log", "--max-tokens", "80", "--ctx-size", "8192",
                     *pair_files(qwen_paths))
    calls = [x for x in lines if x["type"] == "tool_call"]
    results = [x for x in lines if x["type"] == "tool_result"]
    assert calls and calls[0]["name"] == "git_log", err
    assert json.loads(calls[0]["arguments"])["repo_path"] == str(repo)
    assert results[0]["status"] == "ok"
    assert "Count each order's total once" in results[0]["content"]
