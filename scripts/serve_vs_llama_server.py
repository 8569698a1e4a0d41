"""`specchat serve` against llama-cpp-python's own server on the same model, plain decoding, and
(``--llama-server BIN``) against llama.cpp's own `llama-server`, with and without speculation.

Both servers run the demo pair's target (or another pair's, --pair) with the same threads and
context, side by side; each Spec-Bench prompt goes to one, then the other (greedy, through the
openai client, the order alternating), and the script prints end-to-end tokens per second for
each and their ratio, overall and per request pair: a busy moment on the machine weighs on
both sides of a pair.

It fetches nothing: the model must be in the specchat home already
(``SPECCHAT_HOME=DIR python -m specchat models pull demo``), and llama-cpp-python's server
needs its extras (fastapi, sse-starlette, starlette-context, pydantic-settings), importable by
``--llama-python`` (default: this Python).

    SPECCHAT_HOME=/tmp/servehome python scripts/serve_vs_llama_server.py

With ``--llama-server BIN`` (built from the llama.cpp sources vendored in the installed
llama-cpp-python, so both run the same kernels; where a native build stops with an illegal
instruction in its AMX kernel, build it with ``-mno-amx-tile -mno-amx-int8 -mno-amx-bf16`` in
CMAKE_C_FLAGS and CMAKE_CXX_FLAGS) it serves the pair's target six ways, one
server at a time: llama-server plain, with the draft (``-md … --spec-type draft-simple``;
without a type it loads the draft and does not speculate) and with ``--spec-type ngram-mod``;
specchat plain, with its defaults, and with ``--drafter ngram``. Each round starts each server
in turn (the order alternating) and sends it every prompt (one Spec-Bench prompt per category,
plus a copy with a change and a code edit); it prints client-clock tokens per second per
prompt as a ratio to llama-server plain in the same round (the median over rounds), whether
the greedy replies matched llama-server plain's, and then, at T 0.8 with the same draft length
(3) on both, each side's share of drafted tokens kept: llama-server keeps a draft token only
when its own sample equals it, specchat with probability min(1, p/q).

    SPECCHAT_HOME=~/.cache/specchat-qwen/home python scripts/serve_vs_llama_server.py \
        --pair qwen-coder --llama-server /path/to/llama-server --rounds 2 --max-tokens 96

``--configs "specchat plain,specchat"`` runs only those servers (and llama-server plain, the
base), so more rounds fit the same time; with both specchat ones it also prints the defaults'
ratio to specchat's own plain decoding.

``--together`` starts the chosen servers once, side by side, and sends each prompt to each of
them in turn (the order rotating by round and prompt), so a pair of requests is seconds apart:
this box's speed drifts by ±10 % over seconds, and pairing by request, not by round, takes most
of that drift out of the ratios. Each round's prompts carry the round's number, so no server
answers from its prompt cache; the servers' planners stay warm from round to round, as a
server's do.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, not another one installed

from default_vs_plain import EXTRA  # noqa: E402 (its copy and code-edit prompts)
from openai import OpenAI  # noqa: E402

from specchat.bench.prompts import load_prompts  # noqa: E402
from specchat.models.catalog import load_catalog  # noqa: E402
from specchat.models.resolver import ModelResolver  # noqa: E402
from specchat.paths import app_paths  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 300) -> None:
    """Until it answers: specchat's /health is 503 while it loads (its model list is not);
    llama_cpp.server listens only once loaded, and has no /health."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server at {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the server at {url} did not come up in {timeout:.0f} s")


def commands(name: str, args: argparse.Namespace, model_id: str, path: Path,
             port: int) -> list[str]:
    threads, ctx = str(args.threads), str(args.ctx)
    if name == "specchat":
        return [sys.executable, "-m", "specchat", "serve", "--model", model_id, "--plain",
                "--threads", threads, "--ctx-size", ctx, "--port", str(port),
                "--no-access-log"]
    # logits_all off: its default computes the output layer on every prompt token, work
    # specchat does not do; flash attention is off in both (specchat's CPU default).
    return [args.llama_python, "-m", "llama_cpp.server", "--model", str(path), "--host",
            "127.0.0.1", "--port", str(port), "--n_ctx", ctx, "--n_threads", threads,
            "--n_threads_batch", threads, "--logits_all", "False", "--flash_attn", "False",
            "--verbose", "False"]


class Server:
    """One server process and an openai client for it."""

    def __init__(self, name: str, cmd: Sequence[str], port: int) -> None:
        self.name = name
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(list(cmd), cwd=REPO, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.tokens = 0
        self.seconds = 0.0
        self.texts: dict[int, str] = {}

    def start(self) -> None:
        wait_ready(self.url + ("/health" if self.name.startswith(("specchat", "llama-server"))
                               else "/v1/models"), self.proc)
        self.api = OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0,
                          timeout=600)
        self.model = self.api.models.list().data[0].id
        self.ask("Say hello.", 16)  # warm-up: first-call costs are not throughput

    def ask(self, text: str, max_tokens: int) -> tuple[int, float, str]:
        t0 = time.perf_counter()
        r = self.api.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": text}],
            max_tokens=max_tokens, temperature=0,
            # llama-cpp-python's default repeat penalty (1.1) changes the distribution: off,
            # as specchat samples the model's own (and ignores the field).
            extra_body={"repeat_penalty": 1.0})
        return r.usage.completion_tokens, time.perf_counter() - t0, r.choices[0].message.content or ""

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


CONFIGS = ("llama-server", "llama-server draft", "llama-server ngram", "specchat plain",
           "specchat", "specchat ngram", "specchat plain np2", "specchat np2",
           "specchat plain np1", "specchat np1", "llama-server np2")


def six_ways(name: str, args: argparse.Namespace, target: Path, draft: Path,
             port: int) -> list[str]:
    threads, ctx = str(args.threads), str(args.ctx)
    if name.startswith("llama-server"):
        # "np2": two slots laid out as specchat's default two are, each with the whole window
        # in one unified KV cache of twice the size.
        slots = 2 if name.endswith(" np2") else 1
        cmd = [args.llama_server, "-m", str(target), "--host", "127.0.0.1", "--port", str(port),
               "-c", str(int(ctx) * slots), "-t", threads, "-tb", threads, "-fa", "off",
               "-np", str(slots), "--no-webui"]
        if slots > 1:
            cmd.append("--kv-unified")
        if name == "llama-server draft":
            cmd += ["-md", str(draft), "--spec-type", "draft-simple", "-td", threads]
        elif name == "llama-server ngram":
            cmd += ["--spec-type", "ngram-mod"]
        return cmd
    cmd = [sys.executable, "-m", "specchat", "serve", "--model", str(target), "--threads",
           threads, "--ctx-size", ctx, "--port", str(port), "--no-access-log"]
    if name.endswith((" np1", " np2")):  # one or two slots (--parallel), whatever the default
        cmd += ["--parallel", name[-1]]
        name = name[:-4]
    if name == "specchat plain":
        return [*cmd, "--plain"]
    if name == "specchat ngram":
        return [*cmd, "--drafter", "ngram"]
    return [*cmd, "--draft", str(draft)]


def chosen_configs(text: str) -> tuple[str, ...]:
    """The servers to run, in CONFIGS' order; llama-server plain always (the base)."""
    if not text:
        return CONFIGS[:6]  # the two-slot ones only when asked for
    want = {c.strip() for c in text.split(",") if c.strip()}
    unknown = want - set(CONFIGS)
    if unknown:
        raise SystemExit(f"--configs: unknown {', '.join(sorted(unknown))} "
                         f"(known: {', '.join(CONFIGS)})")
    return tuple(c for c in CONFIGS if c in want or c == "llama-server")


def ask_timed(api: OpenAI, model: str, text: str, max_tokens: int, temperature: float,
              seed: int | None = None) -> tuple[int, float, str, dict[str, float]]:
    """(tokens, client seconds, text, the server's own ``timings``: drafts and milliseconds)."""
    t0 = time.perf_counter()
    raw = api.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], max_tokens=max_tokens,
        temperature=temperature, seed=seed, extra_body={"repeat_penalty": 1.0})
    secs = time.perf_counter() - t0
    r = raw.parse()
    timings = (r.model_extra or {}).get("timings") or {}
    drafts = {"drafted": int(timings.get("draft_n", 0) or 0),
              "accepted": int(timings.get("draft_n_accepted", 0) or 0),
              "prompt_ms": float(timings.get("prompt_ms", 0.0) or 0.0),
              "predicted_ms": float(timings.get("predicted_ms", 0.0) or 0.0)}
    return r.usage.completion_tokens, secs, r.choices[0].message.content or "", drafts


def together(args: argparse.Namespace, target: Path, draft: Path,
             prompts: Sequence[tuple[str, str]], configs: Sequence[str],
             rates: dict[tuple[str, str], list[float]], texts: dict[tuple[str, str], str],
             parts: dict[tuple[str, str], list[tuple[float, float, float, int]]]) -> None:
    """All servers up at once; each prompt to each in a rotating order (see the docstring).
    ``parts`` gets each request's (client ms, the server's prompt ms, its generation ms,
    tokens)."""
    servers = []
    try:
        for name in configs:
            port = free_port()
            servers.append(Server(name, six_ways(name, args, target, draft, port), port))
        for s in servers:
            s.start()
        for r in range(args.rounds):
            for i, (cat, text) in enumerate(prompts):
                k = (r + i) % len(servers)
                for s in servers[k:] + servers[:k]:
                    n, secs, reply, t = ask_timed(s.api, s.model, f"({r + 1}) {text}",
                                                  args.max_tokens, 0.0)
                    rates.setdefault((s.name, cat), []).append(n / secs)
                    parts.setdefault((s.name, cat), []).append(
                        (secs * 1000, t["prompt_ms"], t["predicted_ms"], n))
                    texts.setdefault((s.name, cat), reply)
            print(f"  round {r + 1} done", flush=True)
    finally:
        for s in servers:
            s.stop()


def against_llama_server(args: argparse.Namespace, target: Path, draft: Path) -> int:
    prompts = [(q.category, q.text) for q in load_prompts(per_category=1)] + list(EXTRA.items())
    if args.only:
        keep = {c.strip() for c in args.only.split(",")}
        prompts = [p for p in prompts if p[0] in keep]
    print(f"{target.name} + {draft.name}: {len(prompts)} prompts × {args.rounds} rounds, "
          f"greedy, max_tokens {args.max_tokens}, {args.threads} threads, "
          + ("servers side by side, requests paired" if args.together else "one server at a time"))
    configs = chosen_configs(args.configs)
    rates: dict[tuple[str, str], list[float]] = {}
    texts: dict[tuple[str, str], str] = {}
    parts: dict[tuple[str, str], list[tuple[float, float, float, int]]] = {}
    if args.together:
        together(args, target, draft, prompts, configs, rates, texts, parts)
    for r in range(0 if args.together else args.rounds):
        order = configs if r % 2 == 0 else configs[::-1]
        for name in order:
            port = free_port()
            s = Server(name, six_ways(name, args, target, draft, port), port)
            try:
                s.start()
                for cat, text in prompts:
                    n, secs, reply, _ = ask_timed(s.api, s.model, text, args.max_tokens, 0.0)
                    rates.setdefault((name, cat), []).append(n / secs)
                    texts.setdefault((name, cat), reply)
            finally:
                s.stop()
            print(f"  round {r + 1}: {name} done", flush=True)
    head = "| prompt | " + " | ".join(configs[1:]) + " |"
    print("\nclient-clock tok/s as a ratio to llama-server plain (median of rounds; * = greedy "
          "reply differs from llama-server plain's)\n")
    print(head)
    print("|" + "---|" * len(configs))
    cols: dict[str, list[float]] = {c: [] for c in configs[1:]}
    for cat, _ in prompts:
        base = rates[("llama-server", cat)]
        row = []
        for c in configs[1:]:
            ratio = statistics.median(x / b for x, b in zip(rates[(c, cat)], base, strict=True))
            cols[c].append(ratio)
            same = texts[(c, cat)] == texts[("llama-server", cat)]
            row.append(f"{ratio:.2f}×{'' if same else '*'}")
        print(f"| {cat} | " + " | ".join(row) + " |")
    print("| median | " + " | ".join(f"{statistics.median(v):.2f}×" for v in cols.values()) + " |")
    base_tps = statistics.median(x for (c, _), v in rates.items() if c == "llama-server"
                                 for x in v)
    print(f"\nllama-server plain: median {base_tps:.1f} tok/s")
    if "specchat" in configs and "specchat plain" in configs:
        # The target the defaults answer to: plain decoding through the same server.
        own = [statistics.median(x / b for x, b in zip(rates[("specchat", cat)],
                                                       rates[("specchat plain", cat)],
                                                       strict=True)) for cat, _ in prompts]
        print("specchat defaults / specchat plain (median of rounds): " + ", ".join(
            f"{cat} {x:.2f}×" for (cat, _), x in zip(prompts, own, strict=True))
            + f"; median {statistics.median(own):.2f}×")
    if parts:
        where_the_time_goes(configs, prompts, parts)
    if args.sampled_rounds:
        acceptance(args, target, draft, prompts[: args.sampled_prompts])
    return 0


def where_the_time_goes(configs: Sequence[str], prompts: Sequence[tuple[str, str]],
                        parts: dict[tuple[str, str], list[tuple[float, float, float, int]]]
                        ) -> None:
    """Each server's own clock (``timings``): its prompt read and its milliseconds per generated
    token as a ratio to llama-server plain's in the same request pair (median over rounds and
    prompts), and the client's milliseconds per token beyond both (HTTP, templating, the
    stream's chunks)."""
    print("\nby the servers' own timings, as a ratio to llama-server plain's in the same pair "
          "(median over rounds and prompts):")
    for c in configs:
        pr, gen, beyond = [], [], []
        for cat, _ in prompts:
            for (cl, p, g, n), (_, bp, bg, bn) in zip(parts[(c, cat)], parts[("llama-server", cat)],
                                                      strict=True):
                if p > 0 and g > 0 and bp > 0 and bg > 0:
                    pr.append(p / bp)
                    gen.append((g / max(1, n)) / (bg / max(1, bn)))
                    beyond.append((cl - p - g) / max(1, n))
        if not pr:
            print(f"  {c}: no timings")
            continue
        print(f"  {c}: prompt read {statistics.median(pr):.3f}×, ms per generated token "
              f"{statistics.median(gen):.3f}×; the client's ms per token beyond them "
              f"{statistics.median(beyond):.2f}")


def acceptance(args: argparse.Namespace, target: Path, draft: Path,
               prompts: Sequence[tuple[str, str]]) -> None:
    """Drafted tokens kept at T 0.8, γ 3 on both sides, on the same prompts and seeds."""
    print(f"\nT 0.8, draft length 3 on both: drafted tokens kept (accepted / drafted), "
          f"{args.sampled_rounds} rounds")
    sides = ("llama-server draft", "specchat")
    got: dict[tuple[str, str], list[int]] = {}
    for name in sides:
        port = free_port()
        cmd = six_ways(name, args, target, draft, port)
        if name == "specchat":
            cmd += ["--gamma", "3", "--drafter", "model"]
        else:
            cmd += ["--spec-draft-n-max", "3", "--spec-draft-n-min", "0"]
        s = Server(name, cmd, port)
        try:
            s.start()
            for r in range(args.sampled_rounds):
                for cat, text in prompts:
                    _, _, _, d = ask_timed(s.api, s.model, text, args.max_tokens, 0.8,
                                           seed=1000 + r)
                    acc = got.setdefault((name, cat), [0, 0])
                    acc[0] += int(d["accepted"])
                    acc[1] += int(d["drafted"])
        finally:
            s.stop()
    print("| prompt | llama-server (match rule) | specchat (min(1, p/q)) |")
    print("|---|---|---|")
    for cat, _ in prompts:
        row = []
        for name in sides:
            a, d = got[(name, cat)]
            row.append(f"{a / d:.2f} ({a}/{d})" if d else "-")
        print(f"| {cat} | " + " | ".join(row) + " |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="demo", help="whose target to serve (default demo)")
    p.add_argument("--prompts", type=int, default=5, help="Spec-Bench prompts, one per category")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3, help="times each prompt is sent to each")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--llama-python", default=sys.executable,
                   help="a Python that can run llama_cpp.server (its extras installed)")
    p.add_argument("--llama-server", metavar="BIN",
                   help="llama.cpp's llama-server: compare six ways against it (see above)")
    p.add_argument("--only", default="", help="with --llama-server: these categories only")
    p.add_argument("--configs", default="",
                   help="with --llama-server: these servers only, comma-separated (of: "
                        + ", ".join(CONFIGS) + "; llama-server plain always runs)")
    p.add_argument("--together", action="store_true",
                   help="with --llama-server: all servers up at once, requests paired (see above)")
    p.add_argument("--sampled-rounds", type=int, default=2,
                   help="with --llama-server: rounds of the T 0.8 acceptance comparison (0: none)")
    p.add_argument("--sampled-prompts", type=int, default=5)
    args = p.parse_args()

    paths = app_paths()
    catalog = load_catalog(paths.user_catalog)
    entry = catalog.model(catalog.pair(args.pair).target)
    state = ModelResolver(catalog, paths).state(entry)
    if not state.present or state.path is None:
        raise SystemExit(f"{entry.id} is not in {paths.data}: run `specchat models pull "
                         f"{args.pair}` first (with the same SPECCHAT_HOME)")
    if args.llama_server:
        pair = catalog.pair(args.pair)
        dstate = ModelResolver(catalog, paths).state(catalog.model(pair.draft)) \
            if pair.draft else None
        if dstate is None or dstate.path is None:
            raise SystemExit(f"{args.pair} has no draft model on disk")
        return against_llama_server(args, state.path, dstate.path)
    prompts = [q.text for q in load_prompts(per_category=1)[: args.prompts]]
    print(f"model {entry.id} ({state.path}), {len(prompts)} prompts x {args.rounds} rounds, "
          f"greedy, max_tokens {args.max_tokens}, {args.threads} threads")
    servers = []
    try:
        for name in ("specchat", "llama-cpp-python"):
            port = free_port()
            servers.append(Server(name, commands(name, args, entry.id, state.path, port), port))
        for s in servers:
            s.start()
        ratios = []
        for r in range(args.rounds):
            for i, text in enumerate(prompts):
                # Both are up; each prompt goes to one then the other (the order alternates),
                # so a busy moment on the machine weighs on both sides of each pair.
                order = servers if (r + i) % 2 == 0 else servers[::-1]
                rate = {}
                for s in order:
                    n, secs, reply = s.ask(text, args.max_tokens)
                    s.tokens, s.seconds = s.tokens + n, s.seconds + secs
                    s.texts.setdefault(i, reply)
                    rate[s.name] = n / secs
                ratios.append(rate["specchat"] / rate["llama-cpp-python"])
    finally:
        for s in servers:
            s.stop()
    for s in servers:
        print(f"{s.name:17s} {s.tokens:5d} tokens in {s.seconds:7.2f} s = "
              f"{s.tokens / s.seconds:6.1f} tok/s")
    same = sum(servers[0].texts[i] == servers[1].texts[i] for i in range(len(prompts)))
    print(f"identical greedy replies: {same} of {len(prompts)}")
    q = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    overall = (servers[0].tokens / servers[0].seconds) / (servers[1].tokens / servers[1].seconds)
    print(f"specchat serve / llama_cpp.server: {overall:.2f} overall; per request pair median "
          f"{statistics.median(ratios):.2f} (quartiles {q[0]:.2f}-{q[2]:.2f}, "
          f"{len(ratios)} pairs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
