"""A whole-file edit with the file in the context, the defaults against plain decoding, cold.

The reply a user waits longest for in a chat with files and tools: "rename X to Y everywhere,
reply with the whole file". Two ways the file reaches the model:

- ``file``: attached to the message (``specchat ask --file``);
- ``tool``: read through an MCP tool (``@modelcontextprotocol/server-filesystem`` through
  ``npx``, its ``read_text_file`` called on the first reply, allowed with ``--allow``).

Each round runs ``specchat ask --json`` in a fresh process and a fresh home, once with
``--plain`` and once with the defaults (the order alternating), greedy, and prints decode
tokens per second (tokens after the first over the time from the first to the last, summed
over the turn's replies: a tool turn's call and its answer) and the ratio, the median over
rounds, and whether the two replies were the same tokens. The file is ``scripts/data/charts.py``
(141 lines, a frozen copy of a specchat module), the rename ``series`` to ``datasets``.

    python scripts/context_edit_speed.py --rounds 3

It fetches nothing but what npx has cached: the model files must be in ``--models``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from default_vs_plain import read_ask_json

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "scripts" / "data" / "charts.py"
ASK = ("Rename `series` to `datasets` everywhere in {where}: names, parameters, attributes, "
       "docstrings and comments. Reply with the whole file in one code block, nothing else.")
READ = (" Read it with read_text_file first. Do not write or edit any file: the reply is the "
        "renamed file.")


def run(way: str, plain: bool, models: Path, target: str, draft: str, threads: int,
        max_tokens: int, rt: bool) -> dict[str, object]:
    home = Path(tempfile.mkdtemp(prefix="specchat-ces-"))
    work = Path(tempfile.mkdtemp(prefix="specchat-ces-files-"))
    try:
        source = work / "charts.py"
        shutil.copyfile(SOURCE, source)
        cmd = [sys.executable, "-m", "specchat", "ask", "", "--model", str(models / target),
               "--draft", str(models / draft), "--temperature", "0", "--max-tokens",
               str(max_tokens), "--threads", str(threads), "--ctx-size", "8192", "--json"]
        if way == "file":
            cmd[4] = ASK.format(where="the attached file")
            cmd += ["--file", str(source)]
        else:
            cmd[4] = ASK.format(where=f"the file {source}") + READ
            config = home / "config"
            config.mkdir(parents=True)
            server = ["npx", "-y", "@modelcontextprotocol/server-filesystem", str(work)]
            if rt:  # the server at normal priority: a real-time node process can starve the box
                server = ["chrt", "-o", "0", *server]
            (config / "config.yaml").write_text(yaml.safe_dump({"mcp_servers": {"fs": {
                "command": server[0], "args": server[1:]}}}))
            cmd += ["--tools", "--allow", "read_text_file", "--tool-choice", "read_text_file",
                    "--max-tool-rounds", "2"]
        if plain:
            cmd.append("--plain")
        if rt:  # real-time priority: other work on the box does not stall llama.cpp's threads
            cmd = ["chrt", "-f", "10", *cmd]
        env = {**os.environ, "SPECCHAT_HOME": str(home), "PYTHONPATH": str(REPO)}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        if out.returncode != 0:
            raise SystemExit(f"specchat ask failed: {out.stderr.strip()[-600:]}")
        stats = read_ask_json(out.stdout)
        stats["calls"] = [f"{r['name']}:{r['status']}"  # type: ignore[index]
                          for r in stats["tool_results"]]  # type: ignore[attr-defined]
        return stats
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def tps(s: dict[str, object]) -> float:
    dec = float(s["decode_s"])  # type: ignore[arg-type]
    n = int(s["generated_tokens"])  # type: ignore[call-overload]
    return (n - 1) / dec if dec > 0 else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path,
                    default=Path.home() / ".cache/specchat-qwen/home/data/models")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=2500)
    ap.add_argument("--ways", default="file,tool", help="file, tool or both (comma-separated)")
    ap.add_argument("--no-rt", action="store_true", help="do not ask for real-time priority")
    a = ap.parse_args()
    rt = not a.no_rt and shutil.which("chrt") is not None and os.geteuid() == 0
    ways = [w.strip() for w in a.ways.split(",") if w.strip()]
    if set(ways) - {"file", "tool"}:
        raise SystemExit("--ways: file, tool")
    if "tool" in ways and shutil.which("npx") is None:
        raise SystemExit("the tool way needs node's npx (server-filesystem)")
    print(f"{a.target} + {a.draft}: {SOURCE.name} ({len(SOURCE.read_text().splitlines())} "
          f"lines), cold `specchat ask`, greedy, {a.threads} threads, {a.rounds} rounds"
          + (" (real-time priority)" if rt else ""))
    print(f"{'way':<5} {'tokens':>6} {'plain tok/s':>11} {'default tok/s':>13} {'ratio':>6}  "
          "same  rounds  α  τ  drafted/accepted  by drafter (kept)  calls")
    for way in ways:
        ratios, plain_tps, dflt_tps, same = [], [], [], True
        last: dict[str, object] = {}
        for r in range(a.rounds):
            order = [True, False] if r % 2 == 0 else [False, True]
            got = {p: run(way, p, a.models, a.target, a.draft, a.threads, a.max_tokens, rt)
                   for p in order}
            plain_tps.append(tps(got[True]))
            dflt_tps.append(tps(got[False]))
            ratios.append(dflt_tps[-1] / plain_tps[-1] if plain_tps[-1] else 0.0)
            same = same and got[True]["tokens"] == got[False]["tokens"]
            last = got[False]
            print(f"  round {r + 1}: plain {plain_tps[-1]:.1f}, default {dflt_tps[-1]:.1f} "
                  f"tok/s ({ratios[-1]:.2f}×)", flush=True)
        detail = last.get("detail") or {}
        kept = detail.get("accepted_by_drafter", {}) if isinstance(detail, dict) else {}
        print(f"{way:<5} {last['generated_tokens']!s:>6} {statistics.median(plain_tps):>11.1f} "
              f"{statistics.median(dflt_tps):>13.1f} {statistics.median(ratios):>5.2f}×  "
              f"{'yes' if same else 'NO':>4}  {' '.join(f'{x:.2f}' for x in ratios)}  "
              f"{float(last['alpha']):.2f} {float(last['tau']):.2f}  "  # type: ignore[arg-type]
              f"{last['drafted']}/{last['accepted']}  {kept}  {last['calls']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
