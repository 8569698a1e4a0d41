"""Plain and speculative speed with the target on two loopback rpc-servers, against local.

Starts two llama.cpp rpc-servers on 127.0.0.1 (built from the installed llama-cpp-python's
sources, see specchat.devtools.rpc_server), then runs `specchat bench` on the Spec-Bench prompts
alternately without and with `--rpc`, ROUNDS times, and prints per category the decode speed of
each mode here and over RPC, and their ratio (median over the rounds).

    python scripts/rpc_loopback.py --pair demo --max-tokens 64 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from specchat.devtools import rpc_server


def bench(args: argparse.Namespace, out: Path, servers: str | None) -> dict[tuple[str, str], float]:
    cmd = [sys.executable, "-m", "specchat", "bench", "--pair", args.pair, "--per-category",
           str(args.per_category), "--max-tokens", str(args.max_tokens), "--temperature", "0",
           "--gamma", args.gamma, "--out", str(out)]
    if servers:
        cmd += ["--rpc", servers]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = json.loads((out / "results.json").read_text())["rows"]
    return {(r["category"], f"{r['mode']} {r['gamma'] or ''}".strip()): r["tok_s"] for r in rows}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--pair", default="demo")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--per-category", type=int, default=1)
    p.add_argument("--gamma", default="plan,3")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--server-threads", type=int, default=2)
    a = p.parse_args()
    binary = rpc_server.build()
    ports = [rpc_server.free_port() for _ in range(2)]
    procs = [rpc_server.start(binary, port, a.server_threads) for port in ports]
    servers = ",".join(f"127.0.0.1:{port}" for port in ports)
    runs: dict[str, list[dict[tuple[str, str], float]]] = {"local": [], "rpc": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(a.rounds):
                for where in ("local", "rpc"):
                    out = Path(tmp) / f"{where}{i}"
                    runs[where].append(bench(a, out, servers if where == "rpc" else None))
    finally:
        for pr in procs:
            pr.terminate()
    keys = sorted(runs["local"][0], key=lambda k: (k[0] != "all", k))
    print(f"decode tok/s, median of {a.rounds} alternating rounds; target on 2 loopback "
          f"rpc-servers ({a.server_threads} threads each) vs local; draft local")
    print("| category | mode | local | RPC | RPC / local |")
    print("|---|---|---|---|---|")
    for k in keys:
        loc = statistics.median(r[k] for r in runs["local"])
        rem = statistics.median(r[k] for r in runs["rpc"])
        print(f"| {k[0]} | {k[1]} | {loc:.1f} | {rem:.1f} | {rem / loc:.2f}× |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
