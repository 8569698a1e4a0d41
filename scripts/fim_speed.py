"""Fill-in-the-middle throughput of `specchat serve`, with and without speculation.

Three servers of one pair run side by side — plain (``--plain``), the draft model
(``--gamma N``) and the n-gram lookup before the draft model (``--drafter ngram,model``,
whose lookup reads the prefix and the suffix) — and each code sample with a hole goes to each
through ``/infill`` in turn (greedy, the order rotating, so a busy moment on the machine weighs
on all three). The script prints decode tokens per second (llama-server's
``predicted_per_second``), the speed-up over plain, α and whether the greedy middles agree.

It fetches nothing: the pair must be in the specchat home already
(``SPECCHAT_HOME=DIR python -m specchat models pull PAIR``). A target without FIM tokens is
said and nothing is measured (exit status 2).

    SPECCHAT_HOME=/tmp/fimhome python scripts/fim_speed.py --pair qwen-coder
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, not another one installed

from specchat.models.catalog import load_catalog  # noqa: E402
from specchat.models.resolver import ModelResolver  # noqa: E402
from specchat.paths import app_paths  # noqa: E402

# (prefix, suffix): code with a hole where a function body or a block goes.
SAMPLES = [
    ("def fibonacci(n: int) -> list[int]:\n    \"\"\"The first n Fibonacci numbers.\"\"\"\n",
     "\n\n\nif __name__ == \"__main__\":\n    print(fibonacci(10))\n"),
    ("import json\n\n\ndef load_config(path):\n    with open(path) as f:\n",
     "\n    return config\n\n\ndef save_config(path, config):\n    with open(path, \"w\") as f:\n"
     "        json.dump(config, f, indent=2)\n"),
    ("function debounce(fn, ms) {\n  let timer;\n  return function (...args) {\n",
     "\n  };\n}\n\nmodule.exports = { debounce };\n"),
    ("class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n"
     "        self.items.append(x)\n\n    def pop(self):\n",
     "\n\n    def peek(self):\n        return self.items[-1]\n\n    def __len__(self):\n"
     "        return len(self.items)\n"),
]
CONFIGS = {"plain": ["--plain"], "draft": ["--gamma", "{gamma}"],
           "ngram+draft": ["--gamma", "{gamma}", "--drafter", "ngram,model"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class Server:
    def __init__(self, name: str, pair: str, extra: list[str], args: argparse.Namespace) -> None:
        self.name = name
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "specchat", "serve", "--pair", pair, "--threads",
               str(args.threads), "--ctx-size", str(args.ctx), "--port", str(port),
               "--no-access-log", *(a.format(gamma=args.gamma) for a in extra)]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.tokens, self.seconds, self.drafted, self.kept = 0, 0.0, 0, 0
        self.middles: list[str] = []

    def wait(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the {self.name} server exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise SystemExit(f"the {self.name} server did not come up in {timeout:.0f} s")

    def infill(self, prefix: str, suffix: str, n: int) -> dict[str, Any]:
        status, doc = post(self.url + "/infill", {"input_prefix": prefix, "input_suffix": suffix,
                                                  "n_predict": n, "temperature": 0})
        if status != 200:
            raise RuntimeError(doc["error"]["message"])
        return doc

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="demo")
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--ctx", type=int, default=2048)
    args = p.parse_args()

    paths = app_paths()
    catalog = load_catalog(paths.user_catalog)
    pair = catalog.pair(args.pair)
    resolver = ModelResolver(catalog, paths)
    for mid in (pair.target, pair.draft):
        if not resolver.state(catalog.model(mid)).present:
            raise SystemExit(f"{mid} is not in {paths.data}: run `specchat models pull "
                             f"{args.pair}` first (with the same SPECCHAT_HOME)")
    print(f"pair {args.pair} ({pair.target} drafted by {pair.draft}), {len(SAMPLES)} samples x "
          f"{args.rounds} rounds, greedy, {args.max_tokens} tokens, γ {args.gamma}, "
          f"{args.threads} threads")
    servers = [Server(name, args.pair, extra, args) for name, extra in CONFIGS.items()]
    try:
        for s in servers:
            s.wait()
        try:
            servers[0].infill(*SAMPLES[0], 4)  # warm-up, and: can this model fill in?
        except RuntimeError as e:
            print(f"nothing measured: {e}")
            return 2
        for s in servers[1:]:
            s.infill(*SAMPLES[0], 4)
        for r in range(args.rounds):
            for i, (prefix, suffix) in enumerate(SAMPLES):
                k = (r * len(SAMPLES) + i) % len(servers)
                for s in servers[k:] + servers[:k]:
                    doc = s.infill(prefix, suffix, args.max_tokens)
                    t = doc["timings"]
                    s.tokens += t["predicted_n"]
                    s.seconds += t["predicted_ms"] / 1000
                    s.drafted += t["draft_n"]
                    s.kept += t["draft_n_accepted"]
                    if r == 0:
                        s.middles.append(doc["content"])
    finally:
        for s in servers:
            s.stop()
    base = servers[0].tokens / servers[0].seconds
    for s in servers:
        rate = s.tokens / s.seconds
        alpha = f"α {s.kept / s.drafted:.2f}" if s.drafted else "no drafts"
        same = sum(a == b for a, b in zip(s.middles, servers[0].middles, strict=True))
        print(f"{s.name:12s} {s.tokens:5d} tokens in {s.seconds:7.2f} s = {rate:6.1f} tok/s "
              f"({rate / base:.2f}x plain; {alpha}; {s.drafted} drafted; greedy middles equal "
              f"to plain's: {same} of {len(SAMPLES)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
