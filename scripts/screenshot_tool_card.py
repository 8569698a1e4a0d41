#!/usr/bin/env python
"""Save an SVG screenshot of a tool call's card in the chat (for docs/tools.md / assets).

Runs the app headless on a pair whose template takes tools (default: qwen-coder) with
``mcp-server-git`` on a throwaway repository as the chat's one server, asks what the last
commit was with the ``git_log`` tool forced (the model must call it), and saves the screen
while the card asks Allow once / Always allow this tool in this chat / Deny. Nothing runs:
the reply is stopped after the shot.

    python scripts/screenshot_tool_card.py [--pair qwen-coder] [--out assets/tool-card.svg]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, whatever else is installed

from specchat.devtools.demo_home import linked_home  # noqa: E402

QUESTION = "What was my last commit message?"
QWEN_MODELS = Path(os.environ.get("SPECCHAT_QWEN_MODELS",
                                  Path.home() / ".cache/specchat-qwen/home/data/models"))


def make_repo(folder: Path) -> None:
    """A repository with two commits, the last one a rename."""
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True,
                       env={**os.environ, "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL":
                            "ada@example.com", "GIT_COMMITTER_NAME": "Ada",
                            "GIT_COMMITTER_EMAIL": "ada@example.com"})

    git("init", "-q")
    (folder / "orders.py").write_text("def total(items):\n    return sum(items)\n")
    git("add", ".")
    git("commit", "-q", "-m", "orders: add total()")
    (folder / "orders.py").write_text("def subtotal(items):\n    return sum(items)\n")
    git("commit", "-q", "-am", "orders: rename total to subtotal")


async def shoot(args: argparse.Namespace) -> None:
    from specchat.cli.app import build_services
    from specchat.cli.common import make_env
    from specchat.store.chat_tools import ChatTools
    from specchat.ui.app import SpecchatApp
    from specchat.ui.screens.chat import ChatScreen
    from specchat.ui.widgets.tool_card import ToolCard

    cli = argparse.Namespace(pair=args.pair, model=None, ctx_size=None, threads=None,
                             gpu_layers=None)
    services = build_services(make_env(), cli)
    app = SpecchatApp(services)
    async with app.run_test(size=(args.width, args.height)) as pilot:
        while not (isinstance(app.screen, ChatScreen) and app.screen.filled):
            await asyncio.sleep(0.1)
        await pilot.pause()
        chat = app.screen
        chat.session.set_tools(ChatTools(("git",), (), "git_log"))
        chat.retitled()
        chat.replies.send_text(QUESTION)
        while not any(c.asking for c in chat.query(ToolCard)):
            if chat.job is None:
                raise SystemExit("the reply ended without asking: see the app's notices")
            await asyncio.sleep(0.1)
        await pilot.pause(0.3)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(args.out.name, path=str(args.out.parent))
        await pilot.press("escape")  # stop the reply: nothing ran
        while chat.job is not None:
            await asyncio.sleep(0.1)
    services.store.close()
    print(f"wrote {args.out}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="qwen-coder")
    p.add_argument("--out", type=Path, default=REPO / "assets" / "tool-card.svg")
    p.add_argument("--width", type=int, default=120)
    p.add_argument("--height", type=int, default=36)
    p.add_argument("--models", type=Path, default=QWEN_MODELS)
    args = p.parse_args()
    server = shutil.which("mcp-server-git")
    if server is None:
        raise SystemExit("mcp-server-git is not on PATH: pip install mcp-server-git")
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "shop"
        repo.mkdir()
        make_repo(repo)
        config = (f"auto_calibrate: false\nsampling:\n  temperature: 0\n  max_tokens: 160\n"
                  f"mcp_servers:\n  git:\n    command: {server}\n"
                  f"    args: [--repository, {repo}]\n    timeout: 120\n")
        with linked_home(args.models, config):
            asyncio.run(shoot(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
