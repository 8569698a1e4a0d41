"""Aggregate benchmark runs per (temperature, mode, γ, category) into rows, and render them.

Rates are ratios of sums (total tokens / total seconds), not means of per-prompt rates, so a
long reply weighs what it cost. "tok/s" counts the generated tokens over the time after the
prompt was processed — the figure llama.cpp's tools print as "decoded ... t/s".
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from specchat.engine.decode.stats import acceptance, acceptance_length, tokens_per_pass

ALL = "all"


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _sum_lists(rows: Sequence[dict[str, Any]], key: str) -> list[int]:
    out: list[int] = []
    for r in rows:
        for i, v in enumerate(r["detail"][key]):
            if i == len(out):
                out.append(0)
            out[i] += v
    return out


def aggregate(group: Sequence[dict[str, Any]]) -> dict[str, Any]:
    gen = sum(r["generated_tokens"] for r in group)
    # Decoding once the reply has started: the first token belongs to the time to first token
    # (``ttft_s``), which both decoders reach differently (plain decoding samples it from the
    # prompt's pass, speculation evaluates the prompt's last token in its first step).
    dec = sum(max(r["generated_tokens"] - 1, 0) for r in group)
    dec_s = sum(r["decode_s"] for r in group)
    acc = sum(r["accepted"] for r in group)
    rej = sum(r["rejections"] for r in group)
    forwards = sum(r["target_forwards"] for r in group)
    details = [r["detail"] for r in group]  # GenerationStats.as_dict()'s SpecDetail
    n_overlap = sum(x["overlap_n"] for x in details)
    pos_d, pos_a = _sum_lists(group, "position_drafted"), _sum_lists(group, "position_accepted")
    step_s = sum(x["step_s"] for x in details)
    llama_s = sum(x["llama_s"] for x in details)
    batches: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for x in details:
        for b in x["verify_batches"]:
            batches[b["size"]][0] += b["count"]
            batches[b["size"]][1] += b["ms"] * b["count"]
    drafted_model = sum(r["drafted"] for r in group if r["mode"] != "ngram")
    return {
        "prompts": len(group),
        "tokens": gen,
        "tok_s": _ratio(dec, dec_s),
        "ttft_s": _ratio(sum(r["ttft_s"] for r in group), len(group)),
        "e2e_tok_s": _ratio(gen, sum(r["total_s"] for r in group)),
        "alpha": acceptance(acc, rej),
        "tau": tokens_per_pass(gen, forwards) if any(r["steps"] for r in group) else None,
        "acceptance_length": acceptance_length(acc, sum(r["steps"] for r in group)),
        "drafted": sum(r["drafted"] for r in group),
        "accepted": acc,
        # accepted / drafted: biased low against α at large γ, but what llama.cpp prints
        "accepted_per_drafted": _ratio(acc, sum(r["drafted"] for r in group)),
        "acceptance_by_position": [_ratio(a, d) for a, d in zip(pos_a, pos_d, strict=True)],
        "overlap_mean": _ratio(sum((x["overlap_mean"] or 0) * x["overlap_n"] for x in details),
                               n_overlap),
        "exact_match_alpha": _ratio(sum((x["exact_match_alpha"] or 0) * x["overlap_n"]
                                        for x in details), n_overlap),
        "overhead_share": 1 - llama_s / step_s if step_s > 0 else None,
        "draft_ms_per_token": _ratio(sum(r["draft_s"] for r in group) * 1000, drafted_model),
        "verify_ms_by_batch": {str(b): s / n for b, (n, s) in sorted(batches.items())},
    }


def paired_speedup(group: Sequence[dict[str, Any]]) -> float | None:
    """The speed-up from rounds paired with plain decoding's (``runner._paired``): per prompt
    the median round, then the geometric mean over prompts. Noise of a shared machine that
    outlasts a reply cancels out of it, which it does not of a ratio of sums."""
    # In logs: a ratio and its inverse are as far from 1 (the median of an even count is then
    # the geometric mean of the middle two).
    logs = [statistics.median(math.log(x) for x in r["paired"]) for r in group if r.get("paired")]
    return math.exp(statistics.fmean(logs)) if logs else None


def summarize(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (temperature, mode, γ, category), plus category "all"; with speedups."""
    groups: dict[tuple[float, str, int | str | None, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        for cat in (r["category"], ALL):
            groups[(r["temperature"], r["mode"], r["gamma"], cat)].append(r)
    rows = []
    for (temp, mode, gamma, cat), group in groups.items():
        rows.append({"temperature": temp, "mode": mode, "gamma": gamma, "category": cat,
                     **aggregate(group), "paired_speedup": paired_speedup(group)})
    plain = {(r["temperature"], r["category"]): r["tok_s"] for r in rows if r["mode"] == "plain"}
    for r in rows:
        base = plain.get((r["temperature"], r["category"]))
        r["speedup"] = r["tok_s"] / base if base and r["tok_s"] is not None else None
    order = {m: i for i, m in enumerate(("plain", "plain again", "draft", "draft+ngram",
                                         "ngram"))}
    rows.sort(key=lambda r: (r["temperature"], r["category"] != ALL, r["category"],
                             order.get(r["mode"], 9),
                             -1 if isinstance(r["gamma"], str) else r["gamma"] or 0))
    return rows


def _f(v: float | None, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def markdown(rows: Sequence[dict[str, Any]], title: str) -> str:
    depth = max((len(r["acceptance_by_position"]) for r in rows), default=0)
    head = (["T", "category", "mode", "γ", "prompts", "tokens", "decode tok/s", "speedup",
             "paired", "TTFT", "α", "τ",
             "Σmin(p,q)", "Σp·q"] + [f"acc@{i + 1}" for i in range(depth)] + ["py overhead"])
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |",
             "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        acc = list(r["acceptance_by_position"])
        acc += [None] * (depth - len(acc))
        cells = [f"{r['temperature']:g}", r["category"], r["mode"],
                 "–" if r["gamma"] is None else str(r["gamma"]), str(r["prompts"]),
                 str(r["tokens"]), _f(r["tok_s"], ".1f"),
                 "–" if r["speedup"] is None else f"{r['speedup']:.2f}×",
                 "–" if r.get("paired_speedup") is None else f"{r['paired_speedup']:.2f}×",
                 _f(None if r.get("ttft_s") is None else 1000 * r["ttft_s"], ".0f") + " ms",
                 _f(r["alpha"], ".2f"), _f(r["tau"], ".2f"), _f(r["overlap_mean"], ".2f"),
                 _f(r["exact_match_alpha"], ".2f")]
        cells += [_f(a, ".2f") for a in acc]
        cells.append(_f(None if r["overhead_share"] is None else 100 * r["overhead_share"],
                        ".1f") + "%")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
