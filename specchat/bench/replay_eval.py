"""Replay evaluation of γ policies over recorded conversations, with the measured costs.

Per policy: tokens/s over every conversation (total tokens / total replayed seconds). The
yardsticks: the best fixed γ in hindsight (one γ for everything, chosen after the fact), the
per-segment oracle (the best fixed γ of each turn, chosen after the fact), and the clairvoyant
bound (the best γ of every single step, knowing the future). Also how quickly auto-γ settles
after each topic switch, and — when live runs are given — whether replaying each fixed γ
reproduces the live run's step count exactly.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from specchat.bench.chained import RecordedTurn
from specchat.bench.policies import AUTO, PolicyFactory, fixed_gamma_of
from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.policy.costs import draft_step_cost, verify_costs
from specchat.engine.policy.replay import (
    ReplayCosts,
    TurnReplay,
    clairvoyant_seconds,
    replay_conversation,
    segment_oracle,
)
from specchat.runtime.opening import Runtime


def measure_costs(runtime: Runtime, turn: RecordedTurn, gamma_max: int) -> ReplayCosts:
    """This machine's costs, taken on one recorded turn: a draft token, a target pass over
    1..γ_max + 2 tokens (fastest of three), a confidence read, and the loop's overhead per step
    (from a short live run: its step time not spent in drafting or verifying)."""
    tctx, dctx = runtime.target_ctx, runtime.draft_ctx
    assert dctx is not None
    prompt, reply = list(turn.tokens), list(turn.reply)
    n = gamma_max + 2
    if len(reply) < max(n, 16):
        raise ValueError("the turn's reply is too short to time the costs on")
    draft_s = draft_step_cost(dctx, prompt, reply[:16])
    verify_s = verify_costs(tctx, prompt, reply, n)
    row = np.array(dctx.decode(reply[:1], logits="last")[0])  # the cache held the prompt
    dctx.truncate(len(prompt))
    buf = np.empty(row.shape, dtype=np.float32)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        np.subtract(row, row.max(), out=buf)
        np.exp(buf, out=buf)
        float(buf.sum(dtype=np.float64))
        times.append(time.perf_counter() - t0)
    run = run_to_end(SpeculativeDecoder(tctx, dctx, FixedGamma(3)), prompt,
                     SamplerSettings(temperature=0, max_tokens=48))
    steps, stats = run.steps, run.stats
    busy = sum(s.draft_s + s.verify_s for s in steps)
    overhead = max(0.0, (stats.total_s - stats.prompt_s - busy) / max(len(steps), 1))
    return ReplayCosts(draft_s, verify_s, overhead, min(times))


def _topic(labels: Sequence[str]) -> str:
    """The topic auto-γ spent most of a turn in (its labels read "auto · <topic>")."""
    topics = [lab.split("·")[-1].strip() for lab in labels if "warm-up" not in lab]
    return max(set(topics), key=topics.count) if topics else "warm-up"


def _total(runs: Sequence[TurnReplay]) -> tuple[int, float]:
    return sum(r.tokens for r in runs), sum(r.seconds for r in runs)


def settle_steps(planned: Sequence[int]) -> int | None:
    """Steps until γ* stays within ±1 of where the turn ends up (the median of its second
    half); None for a turn too short to tell."""
    if len(planned) < 6:
        return None
    final = statistics.median_low(planned[len(planned) // 2:])
    for i in range(len(planned)):
        if all(abs(p - final) <= 1 for p in planned[i:]):
            return i
    return None


def evaluate(recordings: Sequence[tuple[int, Sequence[RecordedTurn]]], costs: ReplayCosts,
             policies: dict[str, PolicyFactory], gamma_max: int,
             live: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    totals: dict[str, list[float]] = {name: [0, 0.0] for name in policies}
    per_turn: list[dict[str, Any]] = []
    oracle = [0, 0.0]
    clairvoyant = 0.0
    settle: list[dict[str, Any]] = []
    exact_turns = exact_matched = 0
    mismatches: list[dict[str, Any]] = []
    live_steps = {(r["seed"], r["turn"], r["policy"]): r["steps"] for r in live}
    for seed, turns in recordings:
        traces = [t.trace for t in turns]
        runs = {name: replay_conversation(make, traces, costs) for name, make in policies.items()}
        for name, rs in runs.items():
            tok, sec = _total(rs)
            totals[name][0] += tok
            totals[name][1] += sec
            g = fixed_gamma_of(name)
            for k, r in enumerate(rs):
                key = (seed, k, name)
                if g is not None and key in live_steps:
                    exact_turns += 1
                    if live_steps[key] == r.steps:
                        exact_matched += 1
                    else:
                        mismatches.append({"seed": seed, "turn": k, "policy": name,
                                                    "live": live_steps[key], "replay": r.steps})
        best = segment_oracle(traces, costs, range(gamma_max + 1))
        o_tok, o_sec = _total([r for _, r in best])
        oracle[0] += o_tok
        oracle[1] += o_sec
        clair = [clairvoyant_seconds(t, costs, gamma_max) for t in traces]
        clairvoyant += sum(clair)
        seen: set[str] = set()
        for k, t in enumerate(traces):
            row = {"seed": seed, "turn": k, "category": t.category, "positions": t.positions,
                   "alpha": t.alpha, "oracle_gamma": best[k][0],
                   "oracle_tok_s": best[k][1].tok_s, "clairvoyant_tok_s":
                   t.positions / clair[k] if clair[k] > 0 else None,
                   "tok_s": {name: runs[name][k].tok_s for name in runs}}
            per_turn.append(row)
            if AUTO in runs:
                r = runs[AUTO][k]
                topic = _topic(r.labels)
                settle.append({"seed": seed, "turn": k, "category": t.category, "topic": topic,
                               "returning": topic in seen, "steps": settle_steps(r.planned),
                               "planned": r.planned, "drafted": r.drafted})
                seen.add(topic)
    tok_s = {name: tok / sec if sec > 0 else 0.0 for name, (tok, sec) in totals.items()}
    fixed = {n: v for n, v in tok_s.items() if fixed_gamma_of(n) is not None}
    best_fixed = max(fixed, key=lambda n: fixed[n]) if fixed else None
    return {
        "costs": {"draft_ms": costs.draft_s * 1000,
                  "verify_ms": [v * 1000 for v in costs.verify_s],
                  "overhead_ms": costs.overhead_s * 1000,
                  "confidence_ms": costs.confidence_s * 1000},
        "tok_s": tok_s, "tokens": {n: int(v[0]) for n, v in totals.items()},
        "best_fixed": best_fixed,
        "oracle_tok_s": oracle[0] / oracle[1] if oracle[1] > 0 else None,
        "clairvoyant_tok_s": oracle[0] / clairvoyant if clairvoyant > 0 else None,
        "turns": per_turn, "settle": settle,
        "exactness": {"turns": exact_turns, "matched": exact_matched, "mismatches": mismatches}
        if exact_turns else None,
    }

