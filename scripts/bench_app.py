#!/usr/bin/env python
"""Tokens/s of a reply generated inside the app vs ``specchat ask``, same prompt, same pair.

The app runs in a real terminal (tmux, 120x36) so its drawing costs what it costs a user;
each round starts a new chat there (Ctrl+N) so the prompt is the same one ``ask`` gets. The
two alternate, round by round, so a machine that gets busier or quieter affects both alike.
Decode speed (first token to last) is read from each side's own GenerationStats: the app's
from the chat database, ``ask``'s from its ``--json`` output.

    python scripts/bench_app.py [--pair demo] [--rounds 5] [--max-tokens 128] [--threads N]
                                [--models DIR]

Prints one line per round, the medians and the ratio app / ask.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, whatever else is installed

from specchat.devtools.demo_home import default_models_dir, linked_home  # noqa: E402

PROMPT = "Write a short story about a robot who learns to paint."


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def wait(check, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_app: timed out waiting for {what}")
        time.sleep(0.2)


def replies(db: Path) -> list[dict]:
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT stats FROM messages WHERE role = 'assistant' "
                            "ORDER BY id").fetchall()
    finally:
        conn.close()
    return [json.loads(r[0]) for r in rows if r[0]]


def ask_once(env: dict[str, str], args: argparse.Namespace) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "specchat", "ask", PROMPT, "--pair", args.pair, "--temperature",
         "0", "--max-tokens", str(args.max_tokens), "--json",
         *(["--threads", str(args.threads)] if args.threads else [])],
        cwd=REPO, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="demo")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads for both (0: llama.cpp's default); 1 gives steadier "
                        "figures on a small shared machine")
    p.add_argument("--models", type=Path, default=default_models_dir(),
                   help="folder with the pair's model files (linked, not copied)")
    args = p.parse_args()

    config = f"sampling:\n  temperature: 0\n  max_tokens: {args.max_tokens}\n"
    with linked_home(args.models, config) as home:
        env = {**os.environ, "SPECCHAT_HOME": str(home)}
        db = home / "data" / "chats.sqlite3"
        session = f"specchat-bench-{os.getpid()}"
        tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "36",
             f"cd '{REPO}' && SPECCHAT_HOME='{home}' '{sys.executable}' -m specchat "
             f"--pair {args.pair}" + (f" --threads {args.threads}" if args.threads else "")
             + "; sleep 600")
        try:
            wait(lambda: "palette" in tmux("capture-pane", "-p", "-t", session), 120,
                 "the app to open")
            rows = []
            for r in range(1, args.rounds + 1):
                ask = ask_once(env, args)
                before = len(replies(db))
                tmux("send-keys", "-t", session, "C-n")
                time.sleep(0.3)
                tmux("send-keys", "-t", session, PROMPT)
                tmux("send-keys", "-t", session, "Enter")
                wait(lambda n=before: len(replies(db)) > n, 600, "the app's reply")
                app = replies(db)[-1]
                rows.append((ask["decode_tps"], app["decode_tps"]))
                print(f"round {r}: ask {ask['decode_tps']:6.1f} tok/s "
                      f"({ask['generated_tokens']} tokens)   app {app['decode_tps']:6.1f} tok/s "
                      f"({app['generated_tokens']} tokens)", flush=True)
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    ask_med = statistics.median(a for a, _ in rows)
    app_med = statistics.median(b for _, b in rows)
    print(f"median: ask {ask_med:.1f} tok/s, app {app_med:.1f} tok/s, "
          f"app/ask = {app_med / ask_med:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
