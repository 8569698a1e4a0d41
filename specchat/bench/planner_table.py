"""The planner's table in ``specchat bench``: per category, plain, the best fixed chain and the
planner — tokens/s, τ, α — and the planner's realised speed against its predicted ideal.

The ideal is predicted from curves measured in the same run: the target's verify cost T(n) for
n = 1..32 and the draft's cost per token, timed once at the start on the first prompt's greedy
reply, with the per-position acceptance that the longest fixed chain saw in the category. On a
shared machine the load moves between the timing and the runs, so the curve is used for its
shape: scaled by k = (1 / plain's tokens/s) / T(1), so that plain's measured step is T(1),

    ideal = max(plain, max_γ E(γ) / (k·(γ·t_d + T(γ + 1)))),   E(γ) = 1 + Σ_{i ≤ γ} Π_{j ≤ i} α_j.

So a planner that picked the best chain length (or plain) every step, knowing the category's
acceptance in advance, would reach the ideal; ≥ 0.9× is the target.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.stats import expected_tokens, step_seconds
from specchat.engine.drafters._cross_vocab import in_draft_vocab
from specchat.engine.policy.costs import CostCurve, draft_step_cost, verify_costs
from specchat.runtime.opening import Runtime

PLAN = "plan"


def measure_curve(runtime: Runtime, prompt: Sequence[int], points: int = 32) -> CostCurve:
    """T(1..points) of the target and a draft token's cost, after ``prompt`` and its greedy
    reply (fastest of three, round-robin over batch sizes)."""
    runtime.clear_caches()
    reply = run_to_end(runtime.decoder(plain=True), prompt,
                       SamplerSettings(temperature=0, max_tokens=points + 4))
    tokens = list(reply.tokens)
    if len(tokens) < points:
        tokens += tokens[: points - len(tokens)] * (points // max(len(tokens), 1) + 1)
    verify = verify_costs(runtime.target_ctx, list(prompt), tokens, points, repeats=5)
    draft = 0.0
    if runtime.draft_ctx is not None and runtime.draft is not None:
        # A draft of another vocabulary (TLI) is timed on its own tokens of the same text.
        d_prompt, d_tokens = (in_draft_vocab(runtime.target, runtime.draft, t)
                              for t in (prompt, tokens[:8]))
        draft = draft_step_cost(runtime.draft_ctx, d_prompt, d_tokens or d_prompt[-1:])
    runtime.clear_caches()
    return CostCurve(draft, verify)


def ideal_rate(plain_tps: float, curve: CostCurve, alphas: Sequence[float]) -> tuple[float, int]:
    """(tokens/s, γ) of the best fixed choice per step for these acceptance rates (γ 0: plain),
    on ``curve`` scaled so that its T(1) is plain's measured time per token."""
    if plain_tps <= 0:
        return 0.0, 0
    k = (1.0 / plain_tps) / curve.verify_s[0]  # this run's load against the curve's
    best, best_g = plain_tps, 0
    for g in range(1, min(len(alphas), len(curve.verify_s) - 1) + 1):
        rate = expected_tokens(alphas, g) / (k * step_seconds(g, curve.draft_s, curve.verify_s[g]))
        if rate > best:
            best, best_g = rate, g
    return best, best_g


def _alphas(row: dict[str, Any]) -> list[float]:
    """Per-position acceptance of a fixed-chain row; positions never reached take the last."""
    out: list[float] = []
    for a in row["acceptance_by_position"]:
        out.append(a if a is not None else (out[-1] if out else row["alpha"] or 0.0))
    return out


def planner_rows(rows: Sequence[dict[str, Any]], curve: CostCurve) -> list[dict[str, Any]]:
    """One row per (temperature, category) that has plain, a fixed chain and the planner."""
    groups: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["temperature"], r["category"]), []).append(r)
    out = []
    for (temp, cat), group in groups.items():
        plain = next((r for r in group if r["mode"] == "plain"), None)
        plan = next((r for r in group if r["gamma"] == PLAN), None)
        fixed = [r for r in group if isinstance(r["gamma"], int) and r["gamma"] > 0
                 and r["tok_s"] is not None]
        if plain is None or plan is None or not fixed or not plain["tok_s"]:
            continue
        best = max(fixed, key=lambda r: r["tok_s"])
        longest = max(fixed, key=lambda r: r["gamma"])
        ideal, ideal_g = ideal_rate(plain["tok_s"], curve, _alphas(longest))
        out.append({
            "temperature": temp, "category": cat, "plain_tok_s": plain["tok_s"],
            "chain_gamma": best["gamma"], "chain_tok_s": best["tok_s"], "chain_tau": best["tau"],
            "chain_alpha": best["alpha"], "plan_tok_s": plan["tok_s"], "plan_tau": plan["tau"],
            "plan_alpha": plan["alpha"], "plan_drafted": plan["drafted"],
            "ideal_tok_s": ideal, "ideal_gamma": ideal_g,
            "plan_vs_plain": plan["tok_s"] / plain["tok_s"],
            "plan_vs_ideal": plan["tok_s"] / ideal if ideal else None,
        })
    return out


def _f(v: float | None, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def markdown(table: Sequence[dict[str, Any]], curve: CostCurve) -> str:
    lines = ["### Planner vs plain and the best fixed chain", "",
             "Target verify cost T(n), ms (n = 1..32, measured at the start of this run): "
             + ", ".join(f"{n}: {s * 1000:.1f}" for n, s in enumerate(curve.verify_s, 1)),
             f"Draft cost per token: {curve.draft_s * 1000:.2f} ms "
             f"({curve.draft_s / curve.verify_s[0]:.0%} of T(1)).", "",
             "| T | category | plain tok/s | best chain γ | tok/s | τ | α | planner tok/s | τ | α "
             "| drafted | ideal tok/s (γ) | planner/plain | planner/ideal |",
             "|" + "|".join("---" for _ in range(14)) + "|"]
    for r in table:
        lines.append("| " + " | ".join([
            f"{r['temperature']:g}", r["category"], _f(r["plain_tok_s"], ".1f"),
            str(r["chain_gamma"]), _f(r["chain_tok_s"], ".1f"), _f(r["chain_tau"], ".2f"),
            _f(r["chain_alpha"], ".2f"), _f(r["plan_tok_s"], ".1f"), _f(r["plan_tau"], ".2f"),
            _f(r["plan_alpha"], ".2f"), str(r["plan_drafted"]),
            f"{r['ideal_tok_s']:.1f} ({r['ideal_gamma']})", f"{r['plan_vs_plain']:.2f}×",
            _f(r["plan_vs_ideal"], ".2f") + "×"]) + " |")
    return "\n".join(lines) + "\n"
