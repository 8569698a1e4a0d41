"""The default against plain on one fixed cost curve: the real decoder, models and planner, each
step charged what the curve says it costs instead of what the clock said.

This machine's speed moves by ±10 % over seconds, so a cold ratio of the default to plain needs
many rounds to show a 2-point change in the planner. Here the decisions are the planner's own
(the default decoder, a fresh planner per prompt, as a cold ``specchat ask`` gets), the tokens
are the models' own (greedy, checked against plain decoding), and only the times it learns
from are replaced: a verification of n rows costs T(n) of a curve measured once on this box
(the median of 15 rounds; ``--curve FILE`` keeps it, so two builds are judged on one curve), a
draft token t_d, a token the draft reads to catch up r_d, and each batch size's first decode
in a process ``--first`` × that. A reply's cost is the sum of its steps' costs; plain's is the
same loop's planning plain steps only. ``--noise σ`` multiplies the times the planner is told
by a mean-one log-normal factor per step (``--seeds`` of them): it then reacts to noise as it
does live, while the ratio still counts the noiseless costs, so it prices the decisions alone.
Last, the T(1)s each kind of step lost or won against plain, over all prompts. ``--warm P``
keeps one planner over P passes through the prompts, as a server or the app does, and reports
the last pass; with ``--tag`` each pass's prompts start with its number, "(1) ", "(2) " …, as
``serve_vs_llama_server.py`` sends them, so a reply the n-gram drafter remembers from an earlier
pass is near the new one, not the same.

    python scripts/default_on_curve.py --curve /tmp/curve.json            # measure once, keep
    python scripts/default_on_curve.py --curve /tmp/curve.json --noise 0.1 --seeds 4
    python scripts/default_on_curve.py --curve /tmp/curve.json --noise 0.1 --warm 2
    python scripts/default_on_curve.py --curve /tmp/curve.json --warm 3 --tag
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, not another one installed

from specchat.bench.prompts import load_prompts  # noqa: E402
from specchat.engine.decode.chat import ChatEngine  # noqa: E402
from specchat.engine.decode.decoding import run_to_end  # noqa: E402
from specchat.engine.decode.events import StepEvent  # noqa: E402
from specchat.engine.decode.messages import Message  # noqa: E402
from specchat.engine.decode.plain import PlainDecoder  # noqa: E402
from specchat.engine.decode.plan import Plan, plain  # noqa: E402
from specchat.engine.decode.sampling import SamplerSettings  # noqa: E402
from specchat.engine.decode.speculative import SpeculativeDecoder  # noqa: E402
from specchat.engine.decode.step_policy import ReplyStart  # noqa: E402
from specchat.engine.llama.model_settings import ContextSettings  # noqa: E402
from specchat.engine.policy.costs import draft_step_cost, non_decreasing  # noqa: E402
from specchat.engine.policy.planner import Planner  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
from default_vs_plain import EXTRA  # noqa: E402  (the two copy-with-changes prompts)


def measure(rt: Any, prompt: list[int], points: int, repeats: int = 15) -> dict[str, Any]:
    """T(1..points) with logits on every row, a draft token, and per-token reads of a 64-token
    batch by each model."""
    rt.clear_caches()
    reply = run_to_end(PlainDecoder(rt.target_ctx), prompt,
                       SamplerSettings(temperature=0, max_tokens=points + 4)).tokens
    tokens = (list(reply) * (points // max(len(reply), 1) + 2))[: max(points, 64)]
    # The median of ``repeats``, round-robin over sizes (a calibration keeps the fastest: what a
    # step costs at best; a replay wants what one costs as a rule).
    ctx = rt.target_ctx
    ctx.truncate(0)
    ctx.decode(prompt, logits="last")
    times: list[list[float]] = [[] for _ in range(points)]
    for _ in range(repeats):
        for n in range(1, points + 1):
            t0 = time.perf_counter()
            ctx.decode(tokens[:n], logits="all" if n > 1 else "last")
            times[n - 1].append(time.perf_counter() - t0)
            ctx.truncate(len(prompt))
    verify = non_decreasing([statistics.median(t) for t in times])
    draft = draft_step_cost(rt.draft_ctx, prompt, tokens[:8])

    def read(ctx: Any) -> float:
        best = math.inf
        for _ in range(5):
            ctx.truncate(len(prompt))
            t0 = time.perf_counter()
            ctx.decode(tokens[:64], logits="last")
            best = min(best, (time.perf_counter() - t0) / 64)
        ctx.truncate(len(prompt))
        return best

    out = {"verify_s": list(verify), "draft_s": draft, "draft_read_s": read(rt.draft_ctx),
           "target_read_s": read(rt.target_ctx)}
    rt.clear_caches()
    return out


class CurveClock:
    """Charges each step the curve's cost and tells the planner those times instead."""

    def __init__(self, curve: dict[str, Any], first: float, noise: float, seed: int) -> None:
        self.c = curve
        self.first = first
        self.noise = noise
        self.rng = np.random.default_rng(seed)
        self.now = 0.0
        self.seen: set[int] = set()  # batch sizes decoded (0: the draft) in this "process"
        self.steps: list[float] = []  # each step's noiseless seconds

    def _factor(self) -> float:
        if self.noise <= 0:
            return 1.0
        return float(math.exp(self.rng.normal(0.0, self.noise) - self.noise ** 2 / 2))

    def charge(self, step: StepEvent) -> StepEvent:
        verify = self.c["verify_s"][step.batch - 1]  # a batch is at most the table's 32 rows
        if step.batch not in self.seen:
            verify *= self.first
            self.seen.add(step.batch)
        draft = 0.0
        if step.drafter in ("model", "tree") and step.gamma > 0:
            draft = step.gamma * self.c["draft_s"] + step.read_tokens * self.c["draft_read_s"]
            if 0 not in self.seen:
                draft *= self.first
                self.seen.add(0)
        self.steps.append(verify + draft)
        f = self._factor()
        told = replace(step, verify_s=verify * f, draft_s=draft * f,
                       read_s=step.read_tokens * self.c["draft_read_s"] * f)
        self.now += told.verify_s + told.draft_s
        return told


class AlwaysPlain(Planner):
    """Plain decoding through the same loop, charged on the same curve: the baseline."""

    def next_plan(self, available: tuple[str, ...]) -> Plan:
        return plain("plain")


class Session:
    """One decoder and its planner, charged on the curve: a fresh one per reply is a cold
    ``specchat ask``; one kept over several replies is a server or the app (``--warm``)."""

    def __init__(self, rt: Any, curve: dict[str, Any], first: float, noise: float, seed: int,
                 baseline: bool = False) -> None:
        self.rt = rt
        self.dec = rt.decoder() if not baseline else SpeculativeDecoder(
            rt.target_ctx, rt.draft_ctx, AlwaysPlain())
        planner = self.dec.policy
        self.clock = clock = CurveClock(curve, first, noise, seed)
        planner.clock = lambda: clock.now
        observe, start = planner.observe, planner.start_reply

        def told(step: StepEvent) -> None:
            observe(clock.charge(step))

        def started(info: ReplyStart) -> None:
            start(replace(info, target_read_s=curve["target_read_s"]
                          if info.target_read_s is not None else None))

        planner.observe = told  # type: ignore[method-assign]
        planner.start_reply = started  # type: ignore[method-assign]

    def run(self, prompt: list[int], settings: SamplerSettings) -> dict[str, Any]:
        self.rt.clear_caches()
        clock = self.clock
        clock.steps = []
        done = run_to_end(self.dec, prompt, settings, threading.Event())
        steps = done.steps
        t1 = clock.c["verify_s"][0]
        return {"tokens": list(done.tokens), "cost": sum(clock.steps), "steps": len(steps),
                "drafted": sum(s.gamma for s in steps), "kept": sum(s.accepted for s in steps),
                "trace": [(s.position, s.drafter, s.gamma, s.accepted, s.committed, c / t1,
                           s.reason) for s, c in zip(steps, clock.steps, strict=True)]}


def kind(reason: str) -> str:
    """A step's reason without its figures: what the losses are summed by."""
    head = reason.split(" · ")
    words = " ".join(w for w in head[0].split() if not w[0].isdigit())
    if words.startswith("plain"):
        return "plain"
    return words + (" · " + head[1] if len(head) > 1 and "timing" in head[1] else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path,
                    default=Path.home() / ".cache/specchat-qwen/home/data/models")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--curve", type=Path, help="JSON curve: read when present, else measured "
                    "and written")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--first", type=float, default=1.15,
                    help="a batch size's first decode in a process costs this × (default 1.15)")
    ap.add_argument("--noise", type=float, default=0.0, help="σ of a step's log-normal factor")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated prompt names")
    ap.add_argument("--warm", type=int, default=0, metavar="PASSES",
                    help="one planner over PASSES passes through the prompts (a server's or the "
                    "app's), the last one reported; default: a fresh planner per reply (cold)")
    ap.add_argument("--tag", action="store_true",
                    help="with --warm: each pass's prompts start with the pass's number")
    ap.add_argument("--trace", type=Path, help="write each run's steps into this folder (a "
                    "line: position, drafter, drafted, kept, T(1)s a committed token, why)")
    a = ap.parse_args()
    target, draft = a.models / a.target, a.models / a.draft
    for p in (target, draft):
        if not p.is_file():
            raise SystemExit(f"missing model file: {p}")
    home = tempfile.mkdtemp(prefix="specchat-curve-")
    os.environ["SPECCHAT_HOME"] = home  # a new user's home: nothing calibrated, nothing learnt
    try:
        return _run(a, target, draft)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _run(a: argparse.Namespace, target: Path, draft: Path) -> int:
    from specchat.loading import RuntimeOptions, select
    from specchat.models.catalog import load_catalog
    from specchat.models.resolver import ModelResolver
    from specchat.paths import app_paths
    from specchat.runtime.opening import Runtime

    cat = load_catalog()
    opts = RuntimeOptions(context=ContextSettings(n_ctx=4096, n_threads=a.threads))
    rt = Runtime.open(select(cat, model=str(target), draft=str(draft)), ModelResolver(cat, app_paths()), opts,
                      fetch=False)
    chat = ChatEngine(PlainDecoder(rt.target_ctx))
    prompts = [(p.category, p.text) for p in load_prompts(None, (), 1)] + list(EXTRA.items())
    only = {x for x in a.only.split(",") if x}
    prompts = [(n, t) for n, t in prompts if not only or n in only]

    def encode(pass_: int) -> list[tuple[str, list[int]]]:
        tag = f"({pass_ + 1}) " if a.tag else ""
        return [(n, chat.tokenize_chat([Message("user", tag + t)])) for n, t in prompts]

    encoded = encode(0)
    if a.curve is not None and a.curve.is_file():
        curve = json.loads(a.curve.read_text())
    else:
        curve = measure(rt, encoded[0][1], 32)
        if a.curve is not None:
            a.curve.write_text(json.dumps(curve))
    v = curve["verify_s"]
    print(f"curve: T(1) {v[0] * 1000:.1f} ms; T(n)/T(1) " + " ".join(
        f"{n}:{v[n - 1] / v[0]:.2f}" for n in (2, 4, 8, 16, 32)) +
        f"; draft token {curve['draft_s'] / v[0]:.2f}, draft read {curve['draft_read_s'] / v[0]:.2f}"
        f" of T(1); first decode of a size ×{a.first}; noise σ {a.noise}")
    settings = SamplerSettings(temperature=0, max_tokens=a.max_tokens)
    print(f"{'prompt':<15} {'tokens':>6} {'steps':>5} {'drafted/kept':>12}  ratio (seeds)")
    ratios = []
    losses: dict[str, list[float]] = {}
    wants: dict[tuple[int, str], list[int]] = {}  # (pass, prompt) → plain decoding's tokens
    # Warm: one session each (the baseline's and a seed's) over every pass through the
    # prompts, the last pass reported; cold: new sessions for each reply.
    def new_sessions() -> list[Session]:
        return [Session(rt, curve, a.first, 0.0, 0, baseline=True)] + [
            Session(rt, curve, a.first, a.noise, seed) for seed in range(a.seeds)]

    warm = new_sessions() if a.warm else []
    for pass_ in range(max(a.warm, 1)):
        last = pass_ == max(a.warm, 1) - 1
        for name, prompt in encode(pass_):
            key = (pass_ if a.tag else 0, name)
            want = wants.get(key)
            if want is None:
                rt.clear_caches()
                want = wants[key] = list(
                    run_to_end(PlainDecoder(rt.target_ctx), prompt, settings).tokens)
            sessions = warm or new_sessions()
            base, *got = [sess.run(prompt, settings) for sess in sessions]
            if base["tokens"] != want:
                raise SystemExit(f"{name}: the loop's plain steps differ from plain decoding")
            if not last:
                continue
            for seed, r in enumerate(got):
                if a.trace is not None:
                    a.trace.mkdir(parents=True, exist_ok=True)
                    (a.trace / f"{name}-{seed + 1}.txt").write_text("\n".join(
                        f"{p:5d} {d:<6} {g:3d} {k:3d} {c / cmt if cmt else 0:6.2f}  {why}"
                        for p, d, g, k, cmt, c, why in r["trace"]))
                for _, _, _, _, cmt, c, why in r["trace"]:
                    lost = losses.setdefault(kind(why), [0, 0.0])
                    lost[0] += 1
                    lost[1] += (c - cmt) / a.seeds  # T(1)s spent beyond one a token
            rs = [base["cost"] / r["cost"] for r in got]
            same = all(r["tokens"] == want for r in got)
            ratios.append(statistics.median(rs))
            r0 = got[0]
            print(f"{name:<15} {len(want):>6} {r0['steps']:>5} {r0['drafted']:>5}/{r0['kept']:<6} "
                  f"{statistics.median(rs):.3f}× ({' '.join(f'{x:.3f}' for x in rs)})"
                  f"{'' if same else '  output differs from plain'}", flush=True)
    print(f"median over prompts {statistics.median(ratios):.3f}×; lowest {min(ratios):.3f}×")
    print("T(1)s lost (+) or won (−) against one a token, by kind of step, over the prompts "
          "(a seed's mean):")
    for k, (n, lost) in sorted(losses.items(), key=lambda kv: -kv[1][1]):
        print(f"  {k:<36} {int(n):5d} steps  {lost:+8.2f}")
    rt.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
