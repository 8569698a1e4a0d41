"""Tables of a chained benchmark: live and replayed tokens/s per policy, the yardsticks, per
topic, and how fast auto-γ settles after a topic switch."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from specchat.bench.chained import PLAIN
from specchat.bench.policies import AUTO, HF, fixed_gamma_of
from specchat.engine.llama.machine_load import load_text


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _f(v: float | None, fmt: str = ".1f", suffix: str = "") -> str:
    return "–" if v is None else format(v, fmt) + suffix


def live_summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per policy over every live run: tokens/s (total tokens / total seconds), α, steps."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[r["policy"]].append(r)
    rows: dict[str, dict[str, Any]] = {}
    for name, rs in groups.items():
        tok = sum(r["tokens"] for r in rs)
        sec = sum(r["seconds"] for r in rs)
        acc, rej = sum(r["accepted"] for r in rs), sum(r["rejections"] for r in rs)
        steps = sum(r["steps"] for r in rs)
        rows[name] = {"tokens": tok, "seconds": sec, "tok_s": tok / sec if sec > 0 else 0.0,
                      "alpha": _ratio(acc, acc + rej), "steps": steps,
                      "drafted_per_step": _ratio(sum(r["drafted"] for r in rs), steps),
                      "identical": all(r["identical"] for r in rs)}
    fixed = {n: r["tok_s"] for n, r in rows.items() if fixed_gamma_of(n) is not None}
    best = max(fixed, key=lambda n: fixed[n]) if fixed else None
    return {"policies": rows, "best_fixed": best}


def headline(live: dict[str, Any] | None, replay: dict[str, Any] | None) -> list[str]:
    """The figures the issue asks for, one line each."""
    lines = []
    if live:
        p = live["policies"]
        auto = p.get(AUTO, {}).get("tok_s")
        best = live["best_fixed"]
        if auto and best:
            lines.append(f"live: auto {auto:.1f} tok/s = {auto / p[best]['tok_s']:.3f}× the best "
                         f"fixed γ in hindsight ({best}, {p[best]['tok_s']:.1f} tok/s)")
        if auto and HF in p:
            lines.append(f"live: auto = {auto / p[HF]['tok_s']:.3f}× the HF heuristic "
                         f"({p[HF]['tok_s']:.1f} tok/s)")
        if auto and PLAIN in p:
            lines.append(f"live: auto = {auto / p[PLAIN]['tok_s']:.2f}× plain decoding "
                         f"({p[PLAIN]['tok_s']:.1f} tok/s)")
        if not all(r["identical"] for r in p.values()):
            lines.append("live: WARNING: some replies differ from the recording")
    if replay:
        t = replay["tok_s"]
        auto = t.get(AUTO)
        best = replay["best_fixed"]
        if auto and best:
            lines.append(f"replay: auto {auto:.1f} tok/s = {auto / t[best]:.3f}× the best fixed γ "
                         f"({best}, {t[best]:.1f})")
        if auto and HF in t:
            lines.append(f"replay: auto = {auto / t[HF]:.3f}× the HF heuristic ({t[HF]:.1f})")
        if auto and replay["oracle_tok_s"]:
            lines.append(f"replay: auto = {auto / replay['oracle_tok_s']:.3f}× the per-segment "
                         f"oracle ({replay['oracle_tok_s']:.1f}); clairvoyant per-step bound "
                         f"{_f(replay['clairvoyant_tok_s'])}")
        s = settle_summary(replay["settle"])
        if s:
            lines.append("replay: after a topic switch γ settles in " + s)
        ex = replay.get("exactness")
        if ex:
            lines.append(f"replay exactness: {ex['matched']}/{ex['turns']} live fixed-γ replies "
                         "have the replayed step count")
    return lines


def settle_summary(settle: Sequence[dict[str, Any]]) -> str:
    parts = []
    for returning, what in ((False, "a new topic"), (True, "a topic seen before")):
        xs = [s["steps"] for s in settle if s["turn"] > 0 and s["returning"] == returning
              and s["steps"] is not None]
        if xs:
            parts.append(f"{what}: median {statistics.median(xs):g} steps, max {max(xs)} "
                         f"({len(xs)} switches)")
    return "; ".join(parts)


def _order(names: Sequence[str]) -> list[str]:
    def key(n: str) -> tuple[int, float]:
        g = fixed_gamma_of(n)
        if n == PLAIN:
            return (0, 0)
        if n == AUTO:
            return (1, 0)
        if g is not None:
            return (2, g)
        return (3, 0) if n == HF else (4, float(n.split("=")[-1]) if "=" in n else 0)
    return sorted(names, key=key)


def markdown(doc: dict[str, Any]) -> str:
    live, replay = doc.get("live"), doc.get("replay")
    out = [f"# specchat bench --chained — {doc['pair']}", "",
           f"{doc['conversations']} conversations × {len(doc['topics'])} turns "
           f"({' → '.join(doc['topics'])}), greedy, ≤ {doc['max_tokens']} tokens per reply, "
           f"{doc['threads']} threads; load average {doc['load_avg_before'][0]:.2f} → "
           f"{doc['load_avg_after'][0]:.2f}{load_text(doc)}", ""]
    out += [f"- {line}" for line in headline(live, replay)] + [""]
    names = _order(list((live or {}).get("policies", {}) or (replay or {}).get("tok_s", {})))
    if replay:
        names = _order(sorted(set(names) | set(replay["tok_s"])))
    head = ["policy"]
    if live:
        head += ["live tok/s", "× plain", "× best fixed", "α", "drafted/step"]
    if replay:
        head += ["replay tok/s", "× best fixed", "× oracle"]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in names:
        cells = [n]
        if live:
            p = live["policies"]
            r = p.get(n)
            base = p.get(PLAIN, {}).get("tok_s")
            best = p[live["best_fixed"]]["tok_s"] if live["best_fixed"] else None
            cells += ([_f(r["tok_s"]), _f(_ratio(r["tok_s"], base), ".2f", "×"),
                       _f(_ratio(r["tok_s"], best), ".3f", "×"), _f(r["alpha"], ".2f"),
                       _f(r["drafted_per_step"], ".2f")] if r else ["–"] * 5)
        if replay:
            t = replay["tok_s"].get(n)
            best = replay["tok_s"].get(replay["best_fixed"] or "")
            cells += [_f(t), _f(_ratio(t, best), ".3f", "×"),
                      _f(_ratio(t, replay["oracle_tok_s"]), ".3f", "×")]
        out.append("| " + " | ".join(cells) + " |")
    if replay:
        out += ["", f"Replay yardsticks: per-segment oracle {_f(replay['oracle_tok_s'])} tok/s, "
                f"clairvoyant per-step {_f(replay['clairvoyant_tok_s'])} tok/s. Costs: draft "
                f"{replay['costs']['draft_ms']:.2f} ms/token, target pass over n tokens "
                + ", ".join(f"{v:.1f}" for v in replay["costs"]["verify_ms"])
                + f" ms, overhead {replay['costs']['overhead_ms']:.2f} ms/step, confidence read "
                f"{replay['costs']['confidence_ms']:.2f} ms.", ""]
        out += _per_turn(replay)
    return "\n".join(out) + "\n"


def _per_turn(replay: dict[str, Any]) -> list[str]:
    best = replay["best_fixed"]
    head = ["seed", "turn", "category", "α", "tokens", "oracle γ", "oracle tok/s",
            f"{best} tok/s", "auto tok/s", "auto topic", "auto settle", "auto γ* (start … end)"]
    lines = ["### Per turn (replay)", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    settle = {(s["seed"], s["turn"]): s for s in replay["settle"]}
    for t in replay["turns"]:
        s = settle.get((t["seed"], t["turn"]), {})
        planned = s.get("planned", [])
        path = " ".join(map(str, planned[:8])) + (" … " + " ".join(map(str, planned[-3:]))
                                                  if len(planned) > 8 else "")
        lines.append("| " + " | ".join([
            str(t["seed"]), str(t["turn"] + 1), t["category"], f"{t['alpha']:.2f}",
            str(t["positions"]), str(t["oracle_gamma"]), _f(t["oracle_tok_s"]),
            _f(t["tok_s"].get(best)), _f(t["tok_s"].get(AUTO)),
            s.get("topic", "–") + (" (again)" if s.get("returning") else ""),
            _f(s.get("steps"), "d"), path]) + " |")
    return lines
