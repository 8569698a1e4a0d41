"""`specchat serve --parallel N` against llama-server `-np N`: requests served together.

For each N of ``--streams`` (default 1,2,4) each server is started with N slots — specchat
``--parallel N --ctx-size C``, llama-server ``-np N -c N×C`` (llama-server splits ``-c`` among
its slots, specchat gives each slot the whole ``--ctx-size``: so each slot has C tokens on
both) — and N streamed greedy chat requests (Spec-Bench prompts, one per category) are sent
at once. Per server and N it prints each stream's time to first token and tokens per second
(its tokens over its own wall time), and the total (all tokens over the wall time from the
first request to the last token), with the ratio to llama-server's total in the same round.

Then the target case, on each server with 2 slots: a 256-token chat reply streams, and after
its first 32 chunks a short fill-in-the-middle request (``/infill``, 16 tokens) arrives. It
prints that request's time to first token, alone and during the chat, and during the chat in
the chat's steps (a step: the median gap between the chat's bursts of chunks before the FIM
request came; chunks less than 2 ms apart are one burst, since llama-server sends the tokens
a speculative step keeps one chunk each), and the chat's steps that ran between the request
and its first token (the pass that brought that token counted, when the chat rode in it). A
model without FIM tokens (the demo pair) gets a short chat request there instead, and the
script says so.

``--shared-start`` runs one more case instead, on each server with 2 slots: two chat requests
whose system message is the same source file (``--shared-chars``, about 740 tokens by default)
and whose questions differ, the second sent once the first's reply streams (so it gets the
other slot). It prints each one's time to first token: where the second reads only its
question, it took the file from the first slot's cache.

It fetches nothing: the pair must be in the specchat home already
(``SPECCHAT_HOME=DIR python -m specchat models pull PAIR``). llama-server: ``--llama-server
BIN`` (default: the one the tests build, ~/.cache/specchat-tests/llama-cpp-0.3.36/bin, from
the llama.cpp sources vendored in the installed llama-cpp-python); ``--no-llama-server`` runs
specchat alone.

    SPECCHAT_HOME=~/.cache/specchat-qwen/home python scripts/serve_parallel.py \\
        --pair qwen-coder --threads 2

A quick smoke run on the demo pair:

    SPECCHAT_HOME=/root/.cache/specchat-test-models python scripts/serve_parallel.py \\
        --pair demo --streams 1,2 --max-tokens 24 --fim-chat-tokens 64
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, not another one installed

from specchat.bench.prompts import load_prompts  # noqa: E402
from specchat.models.catalog import load_catalog  # noqa: E402
from specchat.models.resolver import ModelResolver  # noqa: E402
from specchat.paths import app_paths  # noqa: E402

LLAMA_SERVER = Path.home() / ".cache/specchat-tests/llama-cpp-0.3.36/bin/llama-server"
CONFIGS = ("specchat", "specchat plain", "llama-server", "llama-server draft")
BURST_S = 0.002  # chunks closer than this are one step's
FIM_PREFIX = "def fibonacci(n):\n    \"\"\"The n-th Fibonacci number.\"\"\"\n    "
FIM_SUFFIX = "\n\n\ndef main():\n    print(fibonacci(10))\n"
CHAT_FOR_FIM = ("Write a Python module with a class for a bank account (deposit, withdraw, "
                "balance, a transaction history) and explain each method.")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(name: str, args: argparse.Namespace, target: Path, draft: Path, port: int,
            slots: int) -> list[str]:
    threads, ctx = str(args.threads), args.ctx
    if name.startswith("llama-server"):
        cmd = [args.llama_server, "-m", str(target), "--host", "127.0.0.1", "--port", str(port),
               "-c", str(ctx * slots), "-np", str(slots), "-t", threads, "-tb", threads,
               "-fa", "off", "--no-webui"]
        if name == "llama-server draft":
            cmd += ["-md", str(draft), "--spec-type", "draft-simple", "-td", threads]
        return cmd
    cmd = [sys.executable, "-m", "specchat", "serve", "--model", str(target), "--threads",
           threads, "--ctx-size", str(ctx), "--port", str(port), "--parallel", str(slots),
           "--no-access-log"]
    return [*cmd, "--plain"] if name == "specchat plain" else [*cmd, "--draft", str(draft)]


class Server:
    def __init__(self, name: str, cmd: Sequence[str], port: int) -> None:
        self.name = name
        self.port = port
        self.proc = subprocess.Popen(list(cmd), cwd=REPO, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 600
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"{name} exited with {self.proc.returncode}: "
                                 f"{' '.join(cmd)}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{name} did not come up in 600 s")
            time.sleep(0.2)
        self.model = json.loads(urllib.request.urlopen(
            f"http://127.0.0.1:{port}/v1/models", timeout=10).read())["data"][0]["id"]
        chat(self, "Say hello.", 8)  # warm-up: first-call costs are not throughput

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@dataclass
class Stream:
    """One streamed request as its client saw it (seconds on the client's clock)."""

    sent: float = 0.0
    first: float | None = None
    end: float = 0.0
    tokens: int = 0
    chunks: list[float] = field(default_factory=list)  # arrival of each chunk with text
    status: int = 0
    error: str = ""

    @property
    def ttft(self) -> float:
        return (self.first if self.first is not None else self.end) - self.sent

    @property
    def rate(self) -> float:
        return self.tokens / max(1e-9, self.end - self.sent)


def _sse(server: Server, path: str, body: dict[str, object], out: Stream,
         on_chunk: threading.Event | None = None, after: int = 0) -> None:
    """POST a streamed request; fill ``out`` as its chunks arrive (``on_chunk`` is set after
    ``after`` chunks with text)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=900)
    out.sent = time.perf_counter()
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    out.status = resp.status
    if resp.status != 200:
        out.error = resp.read().decode("utf-8", "replace")[:200]
        out.end = time.perf_counter()
        conn.close()
        return
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        doc = json.loads(line[5:])
        text = doc.get("content") or ""
        for choice in doc.get("choices") or ():
            text += (choice.get("delta") or {}).get("content") or choice.get("text") or ""
        usage = doc.get("usage")
        if usage:
            out.tokens = int(usage.get("completion_tokens") or 0)
        if "tokens_predicted" in doc:  # llama-server's /infill final chunk
            out.tokens = int(doc["tokens_predicted"])
        if text:
            now = time.perf_counter()
            out.first = out.first or now
            out.chunks.append(now)
            if on_chunk is not None and len(out.chunks) >= after:
                on_chunk.set()
    out.end = time.perf_counter()
    if not out.tokens:  # no usage sent: one token a chunk (llama-server's /infill)
        out.tokens = len(out.chunks)
    conn.close()


def chat_body(server: Server, text: str, max_tokens: int) -> dict[str, object]:
    return {"model": server.model, "messages": [{"role": "user", "content": text}],
            "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}


def chat(server: Server, text: str, max_tokens: int) -> Stream:
    out = Stream()
    _sse(server, "/v1/chat/completions", chat_body(server, text, max_tokens), out)
    return out


def together(server: Server, texts: Sequence[str], max_tokens: int) -> list[Stream]:
    """The texts as streamed chat requests sent at once."""
    outs = [Stream() for _ in texts]
    go = threading.Barrier(len(texts))

    def one(i: int) -> None:
        go.wait()
        _sse(server, "/v1/chat/completions", chat_body(server, texts[i], max_tokens), outs[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outs


def fim_request(server: Server, fim: bool, out: Stream) -> None:
    if fim:
        _sse(server, "/infill", {"input_prefix": FIM_PREFIX, "input_suffix": FIM_SUFFIX,
                                 "n_predict": 16, "temperature": 0, "stream": True}, out)
    else:
        _sse(server, "/v1/chat/completions", chat_body(server, "Name a colour.", 16), out)


def burst_times(chunks: Sequence[float]) -> list[float]:
    """When each burst of chunks (a step's) began."""
    bursts: list[float] = []
    for t in chunks:
        if not bursts or t - bursts[-1] > BURST_S:
            bursts.append(t)
    return bursts


def step_time(chunks: Sequence[float]) -> float | None:
    """The median gap between bursts of chunks (see the module's docstring)."""
    bursts = burst_times(chunks)
    gaps = [b - a for a, b in itertools.pairwise(bursts)]
    return statistics.median(gaps) if gaps else None


def fim_case(server: Server, args: argparse.Namespace) -> dict[str, object]:
    probe = Stream()
    fim_request(server, True, probe)
    fim = probe.status == 200
    alone = Stream()
    fim_request(server, fim, alone)
    chat_out, short = Stream(), Stream()
    started = threading.Event()
    body = chat_body(server, CHAT_FOR_FIM, args.fim_chat_tokens)
    reader = threading.Thread(target=_sse, args=(server, "/v1/chat/completions", body, chat_out,
                                                 started, args.fim_after))
    reader.start()
    started.wait(900)
    before = list(chat_out.chunks)
    fim_request(server, fim, short)
    reader.join()
    step = step_time(before)
    return {"fim": fim, "alone_ms": alone.ttft * 1000, "during_ms": short.ttft * 1000,
            "step_ms": step * 1000 if step else None,
            "steps": short.ttft / step if step else None,
            # The chat's steps, as they ran, that ended between the request and its first
            # token (the shared pass that brought it, if the chat's rows rode in it, included).
            "waited": sum(short.sent < b <= (short.first or short.end)
                          for b in burst_times(chat_out.chunks)),
            "chat_done_first": chat_out.end < (short.first or short.end),
            "error": short.error}


SHARED_FILE = REPO / "specchat" / "engine" / "llama" / "slots.py"  # a system message to share


def shared_start_case(server: Server, args: argparse.Namespace) -> tuple[Stream, Stream]:
    """Two requests with one system message (a file), the second sent once the first streams."""
    system = "You review this file.\n\n" + SHARED_FILE.read_text(encoding="utf-8")[
        : args.shared_chars]

    def body(question: str, max_tokens: int) -> dict[str, object]:
        return {"model": server.model, "max_tokens": max_tokens, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True},
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": question}]}

    first, second = Stream(), Stream()
    streaming = threading.Event()
    reader = threading.Thread(target=_sse, args=(
        server, "/v1/chat/completions", body("What does the Rendezvous do?", 160), first,
        streaming, 1))
    reader.start()
    streaming.wait(900)
    _sse(server, "/v1/chat/completions", body("List the public classes.", 32), second)
    reader.join()
    return first, second


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="qwen-coder", help="the pair to serve (default qwen-coder)")
    p.add_argument("--streams", default="1,2,4", help="concurrent streams, comma-separated")
    p.add_argument("--max-tokens", type=int, default=128, help="each stream's reply")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--ctx", type=int, default=2048, help="tokens per slot")
    p.add_argument("--configs", default="specchat,llama-server,llama-server draft",
                   help="servers, comma-separated, of: " + ", ".join(CONFIGS))
    p.add_argument("--llama-server", default=str(LLAMA_SERVER), metavar="BIN")
    p.add_argument("--no-llama-server", action="store_true")
    p.add_argument("--fim-chat-tokens", type=int, default=256)
    p.add_argument("--fim-after", type=int, default=32,
                   help="chat chunks before the FIM request is sent")
    p.add_argument("--no-fim", action="store_true", help="skip the FIM-during-chat case")
    p.add_argument("--shared-start", action="store_true",
                   help="only the case of two requests sharing a long system message")
    p.add_argument("--shared-chars", type=int, default=3000,
                   help="characters of the shared file in the system message")
    args = p.parse_args()

    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        raise SystemExit(f"--configs: unknown {', '.join(sorted(unknown))}")
    if args.no_llama_server:
        configs = [c for c in configs if not c.startswith("llama-server")]
    elif any(c.startswith("llama-server") for c in configs) and not Path(
            args.llama_server).is_file():
        raise SystemExit(f"no llama-server at {args.llama_server} (--llama-server BIN, or "
                         "--no-llama-server)")
    streams = [int(n) for n in args.streams.split(",") if n.strip()]
    paths = app_paths()
    catalog = load_catalog(paths.user_catalog)
    pair = catalog.pair(args.pair)
    resolver = ModelResolver(catalog, paths)
    files = []
    for mid in (pair.target, pair.draft):
        state = resolver.state(catalog.model(mid)) if mid else None
        if state is None or not state.present or state.path is None:
            raise SystemExit(f"{mid} is not in {paths.data}: run `specchat models pull "
                             f"{args.pair}` first (with the same SPECCHAT_HOME)")
        files.append(state.path)
    target, draft = files
    if args.shared_start:
        print(f"{target.name}: two requests, one system message ({args.shared_chars} characters "
              f"of {SHARED_FILE.name}), the second sent once the first streams; 2 slots, "
              f"{args.threads} threads\n")
        print("| server | first: TTFT s | first: total s | second: TTFT s | second: total s |")
        print("|---|---|---|---|---|")
        for name in configs:
            port = free_port()
            server = Server(name, command(name, args, target, draft, port, 2), port)
            try:
                first, second = shared_start_case(server, args)
            finally:
                server.stop()
            bad = [o.error for o in (first, second) if o.status != 200]
            if bad:
                raise SystemExit(f"{name}: {bad[0]}")
            print(f"| {name} | {first.ttft:.2f} | {first.end - first.sent:.2f} | "
                  f"{second.ttft:.2f} | {second.end - second.sent:.2f} |", flush=True)
        return 0
    texts = [q.text for q in load_prompts(per_category=1)]
    print(f"{target.name} + {draft.name}; greedy chat, max_tokens {args.max_tokens}, "
          f"{args.threads} threads, {args.ctx} tokens a slot; servers one at a time")
    print("\n| streams | server | TTFT s (each) | tok/s (each) | total tok/s | vs llama-server |")
    print("|---|---|---|---|---|---|")
    for n in streams:
        totals: dict[str, float] = {}
        lines: list[tuple[str, list[Stream], float]] = []
        for name in configs:
            port = free_port()
            server = Server(name, command(name, args, target, draft, port, n), port)
            try:
                outs = together(server, [texts[i % len(texts)] for i in range(n)],
                                args.max_tokens)
            finally:
                server.stop()
            bad = [o.error for o in outs if o.status != 200]
            if bad:
                raise SystemExit(f"{name}: {bad[0]}")
            total = sum(o.tokens for o in outs) / (max(o.end for o in outs)
                                                    - min(o.sent for o in outs))
            totals[name] = total
            lines.append((name, outs, total))
        base = totals.get("llama-server")
        for name, outs, total in lines:
            ratio = f"{total / base:.2f}" if base else "—"
            print(f"| {n} | {name} | {' '.join(f'{o.ttft:.2f}' for o in outs)} | "
                  f"{' '.join(f'{o.rate:.1f}' for o in outs)} | {total:.1f} | {ratio} |",
                  flush=True)
    if args.no_fim:
        return 0
    print(f"\nA short request arriving after {args.fim_after} chunks of a "
          f"{args.fim_chat_tokens}-token chat reply (2 slots):")
    print("\n| server | request | TTFT alone ms | TTFT during the chat ms | chat step ms | "
          "in chat steps | chat steps that ran meanwhile |")
    print("|---|---|---|---|---|---|---|")
    for name in configs:
        port = free_port()
        server = Server(name, command(name, args, target, draft, port, 2), port)
        try:
            r = fim_case(server, args)
        finally:
            server.stop()
        what = "/infill" if r["fim"] else "chat (the model has no FIM tokens)"
        step = f"{r['step_ms']:.0f}" if r["step_ms"] is not None else "—"
        steps = f"{r['steps']:.1f}" if r["steps"] is not None else "—"
        late = " (after the chat ended)" if r["chat_done_first"] else ""
        print(f"| {name} | {what} | {r['alone_ms']:.0f} | {r['during_ms']:.0f}{late} | "
              f"{step} | {steps} | {r['waited']} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
