"""specchat's engine against llama.cpp's own tools on the same model file and the same sources:
the verify curve, a plain reply, and a long prompt read, per choice of CPU kernels.

In one process, one copy of the model per choice (see ``engine.llama.cpu_kernels``):

- ``default``: llama.cpp's own choice (AMX where it works, else its repacked kernels);
- ``repack``: what specchat loads where the AMX kernels crash: extra buffer types off, the
  weights CPU_REPACK takes pointed at it by buffer overrides;
- ``plain``: extra buffer types off, what specchat loaded before where AMX crashed.

Where the AMX kernels crash, ``default`` would die with them: run ``--choices repack,plain``.
A choice ends in ``+fa`` for a context with flash attention on (``default+fa``); without it
flash attention is off, as specchat resolves "auto" on a CPU for float weights.

Each round measures every choice in turn (the order alternating): the verify curve (ms for one
batch of 1, 2, 4, 8, 16, 32 rows after a 64-token prefix, logits on every row, as verification
asks), a greedy plain reply of ``--max-tokens`` tokens (the engine's loop: one row per step),
and the read of a ``--prompt-tokens`` prompt (``prefill``: what the first token waits for).
It prints medians, each round's load average (``os.getloadavg``: other programs on the machine
weigh on every figure), and with ``--llama-bench BIN`` the same file through llama-bench
(``-p 1,2,4,8,16,32,N -n M``, repacking on and off), and with ``--llama-server BIN`` its
prompt read (``timings.prompt_ms`` of a completion of the same tokens, cache off);
``--paired-reads N`` adds N reads of the first choice and of llama-server's defaults in turn,
the server kept up, for a time-to-first-token ratio taken seconds apart (``--rounds 0`` skips
the rest).

    python scripts/engine_vs_llama_bench.py --model ~/.cache/specchat-qwen/home/data/...gguf \\
        --llama-bench ~/.cache/specchat-tests/llama-cpp-0.3.36/bin/llama-bench --rounds 3

Build the binaries with scripts/build_llama_cpp.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, not another one installed

import numpy as np  # noqa: E402

from specchat.engine.decode.decoding import prefill  # noqa: E402
from specchat.engine.llama import amx, cpu_kernels  # noqa: E402
from specchat.engine.llama.context import LlamaContext  # noqa: E402
from specchat.engine.llama.cpu_kernels import Kernels  # noqa: E402
from specchat.engine.llama.model import LlamaModel  # noqa: E402
from specchat.engine.llama.model_settings import ContextSettings, ModelSettings  # noqa: E402
from specchat.formats.gguf_file import GgufHeader  # noqa: E402

ROWS = (1, 2, 4, 8, 16, 32)
CHOICES = ("default", "repack", "plain")
TEXT = (REPO / "specchat" / "engine" / "decode" / "speculative.py").read_text()


def chooser(kind: str) -> Callable[..., Kernels]:
    """``amx.kernels_for`` made to answer ``kind`` whatever this machine's AMX does."""
    def choose(_path: Path | str, header: GgufHeader, n_gpu_layers: int = 0) -> Kernels:
        if kind == "repack":
            plan = tuple(cpu_kernels.repacked_plan(header, n_gpu_layers))
            return Kernels("repack", "repack", "forced", plan)
        return Kernels(kind, kind, "forced")
    return choose


def load(path: Path, choice: str, threads: int, n_ctx: int) -> LlamaContext:
    """``choice``: a kind of CPU kernels, with ``+fa`` for flash attention on (else off)."""
    kind, _, fa = choice.partition("+")
    amx.kernels_for = chooser(kind)  # type: ignore[assignment]
    model = LlamaModel(path, ModelSettings(n_gpu_layers=0))
    buffers = {b.device: b.bytes >> 20 for b in model.load_report.buffers if b.kind == "model"}
    print(f"  {choice}: model buffers (MiB) {buffers}", flush=True)
    return LlamaContext(model, ContextSettings(n_ctx=n_ctx, n_threads=threads,
                                               flash_attn="on" if fa == "fa" else "off"))


def curve(ctx: LlamaContext, prefix: list[int], reps: int) -> dict[int, float]:
    ctx.clear()
    ctx.decode(prefix, logits="none")
    out = {}
    for rows in ROWS:
        times = []
        for _ in range(reps):
            ctx.truncate(len(prefix))
            t0 = time.perf_counter()
            ctx.decode(prefix[:rows], logits="all")
            times.append(time.perf_counter() - t0)
        out[rows] = statistics.median(times) * 1000
    ctx.truncate(len(prefix))
    return out


def reply(ctx: LlamaContext, prompt: list[int], n: int) -> float:
    """Tokens per second of a greedy plain reply of ``n`` tokens (EOS not stopping it)."""
    ctx.clear()
    row = prefill(ctx, prompt)[0]
    t0 = time.perf_counter()
    for _ in range(n):
        row = ctx.decode((int(np.argmax(row)),), logits="last")[0]
    return n / (time.perf_counter() - t0)


def read(ctx: LlamaContext, prompt: list[int]) -> float:
    ctx.clear()
    t0 = time.perf_counter()
    prefill(ctx, prompt)
    return time.perf_counter() - t0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A llama-server kept up for prompt reads: ``read`` gives its prompt_ms for ``tokens`` (no
    prompt cache), after a short warm-up read at start."""

    def __init__(self, binary: str, model: Path, threads: int, n_ctx: int,
                 extra: list[str]) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.proc = subprocess.Popen(
            [binary, "-m", str(model), "--port", self.url.rsplit(":", 1)[1], "-c", str(n_ctx),
             "-t", str(threads), "-tb", str(threads), "-np", "1", "--no-webui", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def __enter__(self) -> Server:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise SystemExit("llama-server did not come up") from None
                time.sleep(0.3)
        self.read(list(range(100, 132)))  # a warm-up: its first decode pays the buffers
        return self

    def __exit__(self, *_: object) -> None:
        self.proc.terminate()
        self.proc.wait(30)

    def read(self, tokens: list[int]) -> float:
        body = json.dumps({"prompt": tokens, "n_predict": 1, "cache_prompt": False,
                           "temperature": 0}).encode()
        req = urllib.request.Request(self.url + "/completion", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return float(json.load(r)["timings"]["prompt_ms"]) / 1000


def server_read(binary: str, model: Path, tokens: list[int], threads: int, n_ctx: int,
                rounds: int, extra: list[str]) -> list[float]:
    """llama-server's prompt_ms for ``tokens`` (no prompt cache), one per round."""
    with Server(binary, model, threads, n_ctx, extra) as server:
        return [server.read(tokens) for _ in range(rounds)]


def paired_reads(ctx: LlamaContext, binary: str, model: Path, tokens: list[int], threads: int,
                 n_ctx: int, rounds: int) -> None:
    """specchat's read and llama-server's (its defaults) in turn, the order alternating, with
    the server kept up: each round's ratio is taken seconds apart, so the machine's drift over
    minutes moves both sides of it."""
    ratios = []
    with Server(binary, model, threads, n_ctx, []) as server:
        for r in range(rounds):
            if r % 2 == 0:
                ours, theirs = read(ctx, tokens), server.read(tokens)
            else:
                theirs, ours = server.read(tokens), read(ctx, tokens)
            ratios.append(ours / theirs)
            print(f"  paired read {r + 1}: specchat {ours:.2f} s, llama-server defaults "
                  f"{theirs:.2f} s: {ratios[-1]:.3f}×", flush=True)
    print(f"  paired reads: specchat / llama-server defaults, median of {rounds}: "
          f"{statistics.median(ratios):.3f}× (range {min(ratios):.3f}–{max(ratios):.3f})")


def bench(binary: str, model: Path, threads: int, n_prompt: int, n_gen: int,
          extra: list[str]) -> dict[str, float]:
    ps = ",".join(str(r) for r in (*ROWS, n_prompt))
    out = subprocess.run([binary, "-m", str(model), "-t", str(threads), "-p", ps, "-n",
                          str(n_gen), "-r", "2", "-o", "json", *extra],
                         capture_output=True, text=True, check=True).stdout
    res = {}
    for row in json.loads(out):
        key = f"pp{row['n_prompt']}" if row["n_prompt"] else f"tg{row['n_gen']}"
        res[key] = float(row["avg_ts"])
    return res


def load_avg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5, help="passes per curve point per round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=2000)
    ap.add_argument("--choices", default=",".join(CHOICES))
    ap.add_argument("--llama-bench", metavar="BIN")
    ap.add_argument("--llama-server", metavar="BIN")
    ap.add_argument("--paired-reads", type=int, default=0, metavar="N",
                    help="with --llama-server: N prompt reads of the first choice and of "
                         "llama-server's defaults in turn, the server kept up")
    args = ap.parse_args()
    choices = [c for c in args.choices.split(",") if c]
    n_ctx = args.prompt_tokens + args.max_tokens + 64

    print(f"{args.model.name}, {args.threads} threads; load average at start {load_avg()}")
    ctxs = {k: load(args.model, k, args.threads, n_ctx) for k in choices}
    some = next(iter(ctxs.values()))
    words = some.model.tokenize(TEXT)
    prompt = (words * (1 + args.prompt_tokens // max(1, len(words))))[: args.prompt_tokens]
    chat = some.model.tokenize("<|im_start|>user\nWrite a long story about a lighthouse keeper."
                               "<|im_end|>\n<|im_start|>assistant\n")
    prefix = words[:64]
    curves: dict[str, list[dict[int, float]]] = {k: [] for k in choices}
    tps: dict[str, list[float]] = {k: [] for k in choices}
    reads: dict[str, list[float]] = {k: [] for k in choices}
    for r in range(args.rounds):
        order = choices if r % 2 == 0 else choices[::-1]
        for k in order:
            before = load_avg()
            curves[k].append(curve(ctxs[k], prefix, args.reps))
            tps[k].append(reply(ctxs[k], chat, args.max_tokens))
            reads[k].append(read(ctxs[k], prompt))
            print(f"  round {r + 1} {k}: load {before} → {load_avg()}; "
                  f"{tps[k][-1]:.1f} tok/s, read {reads[k][-1]:.2f} s, curve "
                  + " ".join(f"{n}:{curves[k][-1][n]:.0f}" for n in ROWS), flush=True)

    if args.rounds:
        print(f"\nverify curve, ms per pass (logits on every row), median of {args.rounds} rounds "
              f"× {args.reps}; × one row in brackets")
        print("| choice | " + " | ".join(f"{n} rows" for n in ROWS) + " |")
        print("|---|" + "---|" * len(ROWS))
        for k in choices:
            med = {n: statistics.median(c[n] for c in curves[k]) for n in ROWS}
            print(f"| {k} | " + " | ".join(f"{med[n]:.0f} ({med[n] / med[1]:.2f}×)" for n in ROWS)
                  + " |")
        print(f"\nplain reply ({args.max_tokens} tokens) and a {args.prompt_tokens}-token prompt "
              "read, median of rounds")
        for k in choices:
            print(f"  {k}: {statistics.median(tps[k]):.1f} tok/s; read "
                  f"{statistics.median(reads[k]):.2f} s "
                  f"({args.prompt_tokens / statistics.median(reads[k]):.1f} tok/s)")
    if args.llama_bench:
        for label, extra in (("repack on", []), ("repack off", ["--repack", "0"])):
            before = load_avg()
            res = bench(args.llama_bench, args.model, args.threads, args.prompt_tokens,
                        args.max_tokens, extra)
            pp = {n: res[f"pp{n}"] for n in ROWS}
            print(f"  llama-bench {label} (load {before} → {load_avg()}): tg{args.max_tokens} "
                  f"{res[f'tg{args.max_tokens}']:.1f} tok/s; pp{args.prompt_tokens} "
                  f"{res[f'pp{args.prompt_tokens}']:.1f} tok/s "
                  f"({args.prompt_tokens / res[f'pp{args.prompt_tokens}']:.2f} s); rows "
                  + " ".join(f"{n}:{1000 * n / pp[n]:.0f} ms" for n in ROWS), flush=True)
    if args.llama_server and args.paired_reads:
        paired_reads(ctxs[choices[0]], args.llama_server, args.model, prompt, args.threads,
                     n_ctx, args.paired_reads)
    if args.llama_server and args.rounds:
        for label, extra in (("flash attention off", ["-fa", "off"]),
                             ("its defaults", [])):
            before = load_avg()
            secs = server_read(args.llama_server, args.model, prompt, args.threads, n_ctx,
                               args.rounds, extra)
            print(f"  llama-server {label} (load {before} → {load_avg()}): prompt read "
                  f"{statistics.median(secs):.2f} s (median of {len(secs)}: "
                  + ", ".join(f"{s:.2f}" for s in secs) + ")", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
