"""Soak `specchat serve`: minutes of mixed traffic from several loopback clients.

Starts ``python -m specchat serve --pair demo`` (or ``--pair``) on a free port of 127.0.0.1 and
sends it, from ``--clients`` threads at once, chat and text completions, whole and streamed,
with a share of the streams hung up after a few chunks (the server must cancel them). It stops
by itself after ``--minutes`` or ``--max-requests``, whichever comes first, and prints:
requests sent and served, outcomes and errors by kind, p50/p99 latency, the server's RSS, open
files and thread count after the load, after a warm-up and at the end (and sampled on the way),
and whether the server's own counts (served, cancelled, failed) match what the clients saw.

It fetches nothing (the pair must be in the specchat home: ``SPECCHAT_HOME=DIR python -m
specchat models pull demo``) and sends to 127.0.0.1 only. Not a test: it measures.

    SPECCHAT_HOME=/tmp/demohome nice -n 19 python scripts/soak_serve.py --minutes 10
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, not another one installed

from specchat.bench.prompts import load_prompts  # noqa: E402
from specchat.models.catalog import load_catalog  # noqa: E402
from specchat.models.resolver import ModelResolver  # noqa: E402
from specchat.paths import app_paths  # noqa: E402

HOST = "127.0.0.1"  # the only address this script sends to


@dataclass
class Tally:
    """What the clients saw, under one lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)  # completed requests, seconds
    first_token: list[float] = field(default_factory=list)  # streams: time to the first text
    tokens: int = 0
    sent: int = 0

    def add(self, outcome: str, seconds: float | None = None, tokens: int = 0,
            error: str | None = None, first: float | None = None) -> None:
        with self.lock:
            self.outcomes[outcome] += 1
            if error is not None:
                self.errors[error] += 1
            if seconds is not None:
                self.latencies.append(seconds)
            if first is not None:
                self.first_token.append(first)
            self.tokens += tokens


class Server:
    def __init__(self, pair: str, extra: list[str]) -> None:
        cmd = [sys.executable, "-m", "specchat", "serve", "--pair", pair, "--host", HOST,
               "--port", "0", "--no-access-log", *extra]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(REPO)})
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 120
        while self.port is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the server did not start:\n" + "".join(self.lines))
            time.sleep(0.05)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def port(self) -> int | None:
        m = re.search(r"at http://127\.0\.0\.1:(\d+)/v1", "".join(self.lines[:5]))
        return int(m.group(1)) if m else None

    def proc_status(self) -> dict[str, int]:
        """RSS (KiB), threads and open files of the server process."""
        text = Path(f"/proc/{self.proc.pid}/status").read_text()
        rss = int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1))  # type: ignore[union-attr]
        threads = int(re.search(r"Threads:\s+(\d+)", text).group(1))  # type: ignore[union-attr]
        return {"rss_kb": rss, "threads": threads,
                "fds": len(os.listdir(f"/proc/{self.proc.pid}/fd"))}

    def stop(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            self._reader.join(10)


def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def wait_ready(server: Server, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise SystemExit("the server exited:\n" + "".join(server.lines[-20:]))
        try:
            if get(server.port or 0, "/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("the server did not load in time")


def body(rng: random.Random, prompts: list[str], stream: bool) -> tuple[str, dict[str, Any]]:
    chat = rng.random() < 0.7
    doc: dict[str, Any] = {"max_tokens": rng.randint(8, 48), "stream": stream,
                           "temperature": rng.choice([0, 0.7, 1.0])}
    text = rng.choice(prompts)
    if chat:
        doc["messages"] = [{"role": "user", "content": text}]
    else:
        doc["prompt"] = text
    if stream and rng.random() < 0.3:
        doc["stream_options"] = {"include_usage": True}
    return ("/v1/chat/completions" if chat else "/v1/completions"), doc


def one(port: int, rng: random.Random, prompts: list[str], tally: Tally,
        stream_share: float, hangup_share: float, timeout: float) -> None:
    stream = rng.random() < stream_share
    hangup = stream and rng.random() < hangup_share
    path, doc = body(rng, prompts, stream)
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    t0 = time.perf_counter()
    with tally.lock:
        tally.sent += 1
    try:
        conn.request("POST", path, body=json.dumps(doc).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            try:
                code = json.loads(resp.read())["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = "not an error object"
            tally.add("error", error=f"{resp.status} {code}")
            return
        if not stream:
            data = json.loads(resp.read())
            n = data["usage"]["completion_tokens"]
            ok = data["choices"][0]["finish_reason"] in ("stop", "length")
            tally.add("whole" if ok else "error", time.perf_counter() - t0, n,
                      None if ok else "no finish reason")
            return
        stop_after = rng.randint(1, 4) if hangup else None
        chunks, first, finished = 0, None, False
        while True:
            line = resp.readline()
            if not line:
                break
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip()
            if payload == b"[DONE]":
                finished = True
                break
            event = json.loads(payload)
            if "error" in event:
                tally.add("error", error=f"stream error {event['error'].get('code')}")
                return
            chunks += 1
            if first is None and event.get("choices"):
                first = time.perf_counter() - t0
            if stop_after is not None and chunks >= stop_after:
                break
        if stop_after is not None and not finished:
            resp.close()  # hang up mid-reply (the finally closes the socket)
            tally.add("hung up", first=first)
        elif finished:
            tally.add("streamed", time.perf_counter() - t0, chunks, first=first)
        else:
            tally.add("error", error="stream ended without [DONE]")
    except TimeoutError:
        tally.add("error", error="timed out")
    except (OSError, http.client.HTTPException, ValueError) as e:
        tally.add("error", error=f"{type(e).__name__}")
    finally:
        conn.close()


def client(port: int, seed: int, prompts: list[str], tally: Tally, stop: threading.Event,
           args: argparse.Namespace) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        with tally.lock:
            if tally.sent >= args.max_requests:
                return
        one(port, rng, prompts, tally, args.stream_share, args.hangup_share, args.timeout)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", default="demo", help="the pair to serve (default demo)")
    ap.add_argument("--minutes", type=float, default=10.0, help="how long (10)")
    ap.add_argument("--max-requests", type=int, default=100_000, help="at most this many")
    ap.add_argument("--clients", type=int, default=4, help="clients at once (4)")
    ap.add_argument("--stream-share", type=float, default=0.5, help="streamed share (0.5)")
    ap.add_argument("--hangup-share", type=float, default=0.3,
                    help="share of the streams hung up after 1-4 chunks (0.3)")
    ap.add_argument("--timeout", type=float, default=300.0, help="per request, seconds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--every", type=float, default=60.0, help="sample the server every N s")
    ap.add_argument("serve_args", nargs="*", help="more `specchat serve` options, after --")
    args = ap.parse_args()
    if args.minutes <= 0 or args.clients < 1 or args.max_requests < 1:
        raise SystemExit("--minutes must be > 0, --clients and --max-requests ≥ 1")

    paths = app_paths()
    catalog = load_catalog(paths.user_catalog)
    pair = catalog.pair(args.pair)
    resolver = ModelResolver(catalog, paths)
    missing = [m for m in (pair.target, pair.draft) if not resolver.state(catalog.model(m)).present]
    if missing:
        raise SystemExit(f"{', '.join(missing)} not in {paths.data}: run `specchat models pull "
                         f"{args.pair}` first (with the same SPECCHAT_HOME); this script "
                         "fetches nothing")
    prompts = [p.text for p in load_prompts(per_category=2)]

    server = Server(args.pair, args.serve_args)
    port = server.port or 0
    samples: list[tuple[float, dict[str, int]]] = []
    try:
        wait_ready(server)
        loaded = server.proc_status()
        warm = Tally()
        for i in range(4):  # first generations allocate their buffers: not a leak
            one(port, random.Random(-i), prompts, warm, 0.5, 0.0, args.timeout)
        _, before = get(port, "/health")
        start = server.proc_status()
        print(f"serving {args.pair} on {HOST}:{port}; after the load {fmt(loaded)}, after "
              f"{sum(warm.outcomes.values())} warm-up requests {fmt(start)}", flush=True)
        load0 = os.getloadavg()
        tally = Tally()
        stop = threading.Event()
        threads = [threading.Thread(target=client, args=(port, args.seed * 1000 + i, prompts,
                                                         tally, stop, args), daemon=True)
                   for i in range(args.clients)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        deadline = t0 + args.minutes * 60
        next_sample = t0 + args.every
        while time.monotonic() < deadline and any(t.is_alive() for t in threads):
            time.sleep(0.5)
            if time.monotonic() >= next_sample:
                s = server.proc_status()
                samples.append((time.monotonic() - t0, s))
                with tally.lock:
                    done = sum(tally.outcomes.values())
                print(f"  {time.monotonic() - t0:6.0f} s: {done} requests, {fmt(s)}", flush=True)
                next_sample += args.every
        stop.set()  # no new requests; those under way may finish, within --timeout in all
        drain = time.monotonic() + args.timeout
        for t in threads:
            t.join(max(0.0, drain - time.monotonic()))
        took = time.monotonic() - t0
        running = sum(t.is_alive() for t in threads)
        time.sleep(1.0)  # the last hang-ups' cancels reach the generation thread
        _, after = get(port, "/health")
        end = server.proc_status()
    finally:
        rc = server.stop()
    log = "".join(server.lines)
    served = after["served"] - before["served"]
    cancelled = after["cancelled"] - before["cancelled"]
    failed = after["failed"] - before["failed"]
    completed = tally.outcomes["whole"] + tally.outcomes["streamed"]
    print(f"\n{tally.sent} requests in {took / 60:.1f} min from {args.clients} clients "
          f"({tally.tokens} tokens completed, {tally.tokens / took:.1f} tok/s overall)")
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in tally.outcomes.most_common()))
    print("errors by kind: " + (", ".join(f"{k}: {v}" for k, v in tally.errors.most_common())
                                or "none"))
    print(f"latency of completed requests: p50 {pct(tally.latencies, 50):.2f} s, "
          f"p99 {pct(tally.latencies, 99):.2f} s; first text of a stream: p50 "
          f"{pct(tally.first_token, 50):.2f} s, p99 {pct(tally.first_token, 99):.2f} s")
    print(f"the server counted {served} served, {cancelled} cancelled, {failed} failed "
          f"(the clients: {completed} completed, {tally.outcomes['hung up']} hung up)")
    print(f"server process: after the warm-up {fmt(start)}; at the end {fmt(end)}; "
          f"RSS {end['rss_kb'] - start['rss_kb']:+,} KiB, threads "
          f"{end['threads'] - start['threads']:+d}, open files {end['fds'] - start['fds']:+d}")
    if samples:
        print("RSS on the way (MiB): " + ", ".join(
            f"{t / 60:.0f}m {s['rss_kb'] / 1024:.0f}" for t, s in samples))
    lost = tally.sent - sum(tally.outcomes.values()) - running
    tracebacks = log.count("Traceback")
    print(f"lost (sent, no outcome): {lost}; still running when it stopped: {running}; "
          f"tracebacks in the server's log: {tracebacks}; server exit status {rc}")
    print(f"load average at the start {load0[0]:.2f}, at the end {os.getloadavg()[0]:.2f} "
          f"({os.cpu_count()} CPUs)")
    # A hang-up after the last token counts as served: only the sum must match.
    ok = (lost == 0 and not running and not tally.errors and failed == 0 and tracebacks == 0
          and served + cancelled == completed + tally.outcomes["hung up"])
    print("OK" if ok else "PROBLEMS (see above)")
    if tracebacks:
        print(log[-4000:])
    return 0 if ok else 1


def fmt(s: dict[str, int]) -> str:
    return f"RSS {s['rss_kb'] / 1024:.1f} MiB, {s['threads']} threads, {s['fds']} open files"


if __name__ == "__main__":
    raise SystemExit(main())
