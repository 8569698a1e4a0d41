"""``specchat bench``: plain vs speculative decoding on Spec-Bench prompts; JSON + Markdown."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specchat import __version__
from specchat.bench import llama_tools
from specchat.bench.planner_table import PLAN, measure_curve, planner_rows
from specchat.bench.planner_table import markdown as planner_markdown
from specchat.bench.prompts import DEFAULT_PROMPTS, BenchPrompt, load_prompts
from specchat.bench.report import ALL, markdown, summarize
from specchat.bench.runner import BenchConfig, render_prompt, run_bench
from specchat.cli import bench_chained
from specchat.cli.common import Env, add_drafter_args, add_model_args, print_notices
from specchat.engine.llama.llama_lib import system_info
from specchat.engine.llama.machine_load import LoadWatch, load_fields, load_text
from specchat.engine.policy.gamma import GAMMA_HELP, parse_gamma
from specchat.errors import SpecchatError
from specchat.loading import select
from specchat.models.progress import TextProgress
from specchat.report.bench_report import write_bench_report
from specchat.runtime.decoders import drafter_names
from specchat.runtime.opening import Runtime
from specchat.textsafe import safe_text


def _numbers(kind: type, text: str) -> tuple[Any, ...]:
    try:
        values = tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}"
                                         ) from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected numbers ≥ 0, got {text!r}")
    return values


def _gammas(text: str) -> tuple[int | str, ...]:
    """γ settings to run, comma-separated: plan, auto, pair or draft lengths."""
    out: list[int | str] = []
    for x in (x.strip() for x in text.split(",")):
        if x:
            try:
                out.append(parse_gamma(x, "--gamma").to_config())
            except ValueError as e:
                raise argparse.ArgumentTypeError(str(e).removeprefix("--gamma ")) from None
    if not out:
        raise argparse.ArgumentTypeError(f"expected {GAMMA_HELP}, got {text!r}")
    return tuple(out)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("bench", help="measure plain vs speculative decoding on Spec-Bench prompts",
                       description="Runs plain and speculative decoding on the same prompts "
                       "(greedy and sampled), per category, and writes results.json and "
                       "results.md to --out.")
    add_model_args(p)
    p.add_argument("--prompts", type=Path, metavar="FILE",
                   help=f"Spec-Bench JSONL (default: {DEFAULT_PROMPTS.parent.name}/"
                   f"{DEFAULT_PROMPTS.name} in the source tree)")
    p.add_argument("--categories", metavar="A,B", help="only these categories")
    p.add_argument("--per-category", type=int, default=1, metavar="N",
                   help="prompts per category (default 1)")
    p.add_argument("--max-tokens", type=int, default=128, metavar="N")
    p.add_argument("--runs", type=int, default=1, metavar="N",
                   help="timed rounds of every mode on each prompt, interleaved; the median "
                   "run is kept and the spread recorded (default 1; 3 on a busy machine)")
    p.add_argument("--control", action="store_true",
                   help="also run plain decoding a second time in every round (\"plain "
                   "again\"): its speed-up against plain shows how far this machine's noise "
                   "alone moves a figure")
    p.add_argument("--gamma", type=_gammas, metavar="G[,G...]",
                   help="γ settings to run, e.g. 1,3,6,plan (plan: the planner, the default; "
                   "auto: the adaptive chain length; pair: the pair's γ). With plan and fixed "
                   "lengths together, results.md gains the planner's table (realised vs its "
                   "predicted ideal on the measured cost curve)")
    p.add_argument("--temperature", type=lambda t: _numbers(float, t), default=(0.0, 0.7),
                   metavar="T[,T...]", help="temperatures (default 0,0.7; 0 = greedy)")
    p.add_argument("--seed", type=int, default=1)
    add_drafter_args(p)
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="results folder (default: bench-results/<date-time>)")
    p.add_argument("--report", type=Path, metavar="DIR",
                   help="also write report.md with SVG charts (tokens/s and α per category) "
                   "to DIR")
    p.add_argument("--llama-bin", type=Path, metavar="DIR",
                   help="also run llama.cpp's llama-speculative-simple and llama-bench from DIR")
    bench_chained.add_args(p)
    p.set_defaults(func=run)


def run(env: Env, args: argparse.Namespace) -> int:
    if bench_chained.wanted(args):
        out = args.out or Path("bench-results") / time.strftime("chained-%Y%m%d-%H%M%S")
        return bench_chained.run(env, args, out)
    if args.per_category < 1 or args.max_tokens < 1 or args.runs < 1:
        raise SpecchatError("--per-category, --max-tokens and --runs must be ≥ 1")
    cats = tuple(c.strip() for c in args.categories.split(",")) if args.categories else ()
    prompts = load_prompts(args.prompts, cats, args.per_category)
    selection = select(env.catalog, args.pair, args.model, env.config.default_pair, args.draft)
    bar = TextProgress()  # the load's progress, then the runs' bar with their lines above it
    runtime = Runtime.open(selection, env.resolver, env.runtime_options(args), bar)
    print_notices(runtime)
    try:
        drafters = env.drafters(args)
        if not drafter_names(drafters, bool(args.ngram), runtime.draft_ctx is not None):
            raise SpecchatError("nothing to compare: give a pair, --model with --draft, "
                                "or --drafter ngram")
        gammas = args.gamma or (PLAN,)
        cfg = BenchConfig(gammas=gammas, temperatures=args.temperature,
                          max_tokens=args.max_tokens, seed=args.seed, ngram=bool(args.ngram),
                          drafters=drafters,
                          system=env.config.system_prompt or None, runs=args.runs,
                          control=args.control)
        out_dir = args.out or Path("bench-results") / time.strftime("%Y%m%d-%H%M%S")
        out_dir.mkdir(parents=True, exist_ok=True)
        load_before = os.getloadavg()
        watch = LoadWatch()
        started = time.time()
        ref = LlamaReference(runtime, cfg, args.llama_bin, bar.say) if args.llama_bin else None
        curve = None
        if PLAN in gammas and any(isinstance(g, int) for g in gammas) and runtime.draft_ctx:
            curve = measure_curve(runtime, render_prompt(runtime, prompts[0], cfg)[1])
            print("verify cost T(n), ms: " + ", ".join(
                f"{n}: {t * 1000:.1f}" for n, t in enumerate(curve.verify_s, 1))
                + f"; draft {curve.draft_s * 1000:.2f} ms/token", file=sys.stderr)
        records = run_bench(runtime, prompts, cfg, bar.say, ref.after_prompt if ref else None,
                            bar)
        rows = summarize(records)
        plan_table = planner_rows(rows, curve) if curve is not None else []
        llama = ref.finish(rows) if ref else None
        doc = {
            "specchat": __version__, "started": started, "seconds": time.time() - started,
            "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
            **load_fields(watch.done()),
            "pair": selection.label, "target": str(runtime.target.path),
            "draft": str(runtime.draft.path) if runtime.draft else None,
            "threads": runtime.target_ctx.n_threads, "n_ctx": runtime.target_ctx.n_ctx,
            "system_info": system_info(),
            "config": {"gammas": cfg.gammas, "temperatures": cfg.temperatures,
                       "max_tokens": cfg.max_tokens, "seed": cfg.seed, "ngram": cfg.ngram,
                       "drafters": cfg.drafters,
                       "prompts": str(args.prompts or DEFAULT_PROMPTS),
                       "per_category": args.per_category, "categories": cats,
                       "runs": cfg.runs, "control": cfg.control},
            "rows": rows, "llama_cpp": llama, "records": records,
            "cost_curve": None if curve is None else {"draft_s": curve.draft_s,
                                                      "verify_s": list(curve.verify_s)},
            "planner": plan_table,
        }
        (out_dir / "results.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False),
                                              encoding="utf-8")
        md = _markdown(doc, rows, llama)
        if curve is not None:
            md += "\n" + planner_markdown(plan_table, curve)
        (out_dir / "results.md").write_text(md, encoding="utf-8")
        print(safe_text(md))
        print(f"written: {out_dir / 'results.json'}, {out_dir / 'results.md'}", file=sys.stderr)
        if args.report:
            report = write_bench_report(doc, rows, args.report)
            print(f"report: {report.markdown} ({', '.join(p.name for p in report.charts)})",
                  file=sys.stderr)
    finally:
        runtime.close()
    return 0


class LlamaReference:
    """llama.cpp's tools on the same files, prompts and γ (greedy), and our/their ratios.

    ``llama-speculative-simple`` runs right after specchat's own runs of each prompt, so both
    see the same machine conditions.
    """

    def __init__(self, runtime: Runtime, cfg: BenchConfig, bin_dir: Path,
                 say: Callable[[str], None]) -> None:
        self.runtime, self.cfg, self.bin_dir, self.say = runtime, cfg, bin_dir, say
        llama_tools.tool(bin_dir, "llama-speculative-simple")  # fail early if missing
        llama_tools.tool(bin_dir, "llama-bench")
        self.threads = runtime.target_ctx.n_threads
        # llama.cpp's tool has a fixed draft length only
        self.runs: dict[int, list[dict[str, Any]]] = {g: [] for g in cfg.gammas
                                                      if isinstance(g, int)}

    def after_prompt(self, temperature: float, prompt: BenchPrompt, text: str) -> None:
        rt = self.runtime
        if temperature != 0.0 or rt.draft is None:
            return
        for gamma in self.runs:
            r = llama_tools.speculative_simple(self.bin_dir, rt.target.path, rt.draft.path, text,
                                               gamma, self.cfg.max_tokens, self.threads)
            self.runs[gamma].append({
                "question_id": prompt.question_id, "category": prompt.category,
                "tokens": r.tokens, "seconds": r.seconds, "drafted": r.drafted,
                "accepted": r.accepted, "prompt_tokens": r.prompt_tokens})
            self.say(f"    llama-speculative-simple γ={gamma}: {r.tokens} tokens, "
                     f"{r.tok_s:.1f} tok/s")

    def finish(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"bin": str(self.bin_dir), "threads": self.threads,
                               "speculative_simple": []}
        for gamma, runs in self.runs.items():
            if not runs:
                continue
            tokens = sum(r["tokens"] for r in runs)
            seconds = sum(r["seconds"] for r in runs)
            drafted = sum(r["drafted"] for r in runs)
            theirs = tokens / seconds if seconds else None
            row = next((r for r in rows if r["temperature"] == 0.0 and r["category"] == ALL
                        and r["mode"].startswith("draft") and r["gamma"] == gamma), None)
            ours = row["tok_s"] if row else None
            out["speculative_simple"].append({
                "gamma": gamma, "tok_s": theirs, "runs": runs,
                "accept": sum(r["accepted"] for r in runs) / drafted if drafted else None,
                "ours_tok_s": ours, "ours_accept": row["accepted_per_drafted"] if row else None,
                "ratio": ours / theirs if ours and theirs else None})
        rt, n = self.runtime, self.cfg.max_tokens
        out["llama_bench_target_tok_s"] = llama_tools.llama_bench(self.bin_dir, rt.target.path,
                                                                  n, self.threads)
        if rt.draft is not None:
            out["llama_bench_draft_tok_s"] = llama_tools.llama_bench(self.bin_dir,
                                                                     rt.draft.path, n,
                                                                     self.threads)
        plain = [r["tok_s"] for r in rows if r["mode"] == "plain" and r["category"] == ALL
                 and r["temperature"] == 0.0]
        out["plain_ours_tok_s"] = plain[0] if plain else None
        return out


def _markdown(doc: dict[str, Any], rows: list[dict[str, Any]], llama: dict[str, Any] | None) -> str:
    head = (f"# specchat bench — {doc['pair']}\n\n{doc['threads']} threads, "
            f"{doc['config']['max_tokens']} tokens max, load average "
            f"{doc['load_avg_before'][0]:.2f} → {doc['load_avg_after'][0]:.2f}"
            + load_text(doc)
            + (f"; each figure the median of {runs} interleaved runs" if (
                runs := doc['config'].get('runs', 1)) > 1 else "")
            + ". \"paired\": each run's speed over plain decoding's in the same round (run"
            " back to back), the median round per prompt, the geometric mean over prompts"
            + ("; \"plain again\" is plain decoding run a second time in every round: how far"
               " this machine's noise alone moves a figure" if doc["config"].get("control")
               else "") + "\n\n")
    parts = [head, markdown([r for r in rows if r["category"] == ALL], "All categories"),
             markdown([r for r in rows if r["category"] != ALL], "Per category")]
    if llama:
        lines = ["### llama.cpp in the same run (greedy)", "",
                 "| tool | γ | their tok/s | their accepted/drafted | specchat tok/s | "
                 "specchat accepted/drafted | specchat / theirs |",
                 "|---|---|---|---|---|---|---|"]
        for s in llama["speculative_simple"]:
            lines.append(f"| llama-speculative-simple | {s['gamma']} | {_n(s['tok_s'])} | "
                         f"{_n(s['accept'], '.2f')} | {_n(s['ours_tok_s'])} | "
                         f"{_n(s['ours_accept'], '.2f')} | {_n(s['ratio'], '.2f')}× |")
        tb, ours = llama.get("llama_bench_target_tok_s"), llama.get("plain_ours_tok_s")
        lines.append(f"| llama-bench (target, plain) | – | {_n(tb)} | – | {_n(ours)} (plain) | "
                     f"– | {_n(ours / tb if ours and tb else None, '.2f')}× |")
        if "llama_bench_draft_tok_s" in llama:
            lines.append(f"| llama-bench (draft, plain) | – | "
                         f"{_n(llama['llama_bench_draft_tok_s'])} | – | – | – | – |")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def _n(v: float | None, fmt: str = ".1f") -> str:
    return "–" if v is None else format(v, fmt)
