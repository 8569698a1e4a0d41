"""``specchat bench --chained`` / ``--replay``: γ policies over multi-topic conversations.

``--chained`` runs every policy live over the recorded conversations and then replays them;
``--replay`` only records and replays (no live timing: quick, and immune to other load);
``--replay-from FILE`` re-evaluates the traces and costs stored in an earlier results.json
without loading any model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from specchat import __version__
from specchat.bench.chained import (
    DEFAULT_TOPICS,
    PLAIN,
    RecordedTurn,
    chained_conversations,
    live_decoders,
    record_conversation,
    run_live,
)
from specchat.bench.chained_report import headline, live_summary, markdown
from specchat.bench.policies import AUTO, PLAN, PolicyFactory, roster
from specchat.bench.prompts import BenchPrompt
from specchat.bench.replay_eval import evaluate, measure_costs
from specchat.cli.common import Env, print_notices
from specchat.engine.drafters._cross_vocab import cross_map
from specchat.engine.llama.machine_load import LoadWatch, load_fields
from specchat.engine.policy.auto_gamma import AutoGamma, AutoGammaSeed
from specchat.engine.policy.costs import CostCurve
from specchat.engine.policy.planner import Planner
from specchat.engine.policy.replay import ReplayCosts, TurnTrace
from specchat.errors import SpecchatError
from specchat.loading import select
from specchat.models.progress import Steps, TextProgress
from specchat.runtime.opening import Runtime
from specchat.textsafe import safe_text

GAMMA_MAX = 10


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("γ policies over chained conversations")
    g.add_argument("--chained", action="store_true",
                   help="multi-topic conversations (see --topics), greedy: auto γ vs every "
                   "fixed γ, the HF heuristic and p_min cutoffs, live and replayed")
    g.add_argument("--replay", action="store_true",
                   help="like --chained but replay only: record the conversations once and "
                   "replay every policy on measured costs (no live timing)")
    g.add_argument("--replay-from", type=Path, metavar="FILE",
                   help="replay the traces and costs stored in an earlier results.json")
    g.add_argument("--seeds", type=int, default=3, metavar="N",
                   help="conversations (seeds 1..N; default 3)")
    g.add_argument("--topics", metavar="A,B,...",
                   help=f"Spec-Bench categories of the turns (default {','.join(DEFAULT_TOPICS)})")
    g.add_argument("--p-min", metavar="P[,P...]", default="0.5,0.7",
                   help="p_min cutoff policies to compare (default 0.5,0.7)")


def wanted(args: argparse.Namespace) -> bool:
    return bool(args.chained or args.replay or args.replay_from)


def _p_mins(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SpecchatError(f"--p-min: expected numbers between 0 and 1, got {text!r}") from None
    if any(not 0 <= v <= 1 for v in values):
        raise SpecchatError(f"--p-min: expected numbers between 0 and 1, got {text!r}")
    return values


def _policies(args: argparse.Namespace, auto: PolicyFactory) -> dict[str, PolicyFactory]:
    gammas = [g for g in (args.gamma or ()) if g != AUTO] or list(range(1, GAMMA_MAX + 1))
    if any(g > GAMMA_MAX for g in gammas):
        raise SpecchatError(f"--chained compares γ up to {GAMMA_MAX}")
    return roster(auto, gammas, _p_mins(args.p_min), GAMMA_MAX)


def run(env: Env, args: argparse.Namespace, out_dir: Path) -> int:
    if args.seeds < 1 or args.max_tokens < 16:
        raise SpecchatError("--seeds must be ≥ 1 and --max-tokens ≥ 16")
    if args.replay_from:
        return _replay_from(args, out_dir)
    topics = tuple(t.strip() for t in args.topics.split(",")) if args.topics else DEFAULT_TOPICS
    selection = select(env.catalog, args.pair, args.model, env.config.default_pair, args.draft)
    bar = TextProgress()  # the load's progress, then the conversations' bar
    runtime = Runtime.open(selection, env.resolver, env.runtime_options(args), bar)
    print_notices(runtime)
    try:
        if runtime.draft_ctx is None or runtime.draft is None:
            raise SpecchatError("--chained needs a pair: --pair NAME, or --model with --draft")
        if cross_map(runtime.target, runtime.draft) is not None:
            raise SpecchatError("--chained replays the draft on the target's own tokens: it "
                                "needs a draft with the same vocabulary (this pair drafts "
                                "through their shared tokens; use the plain bench for it)")
        seed = runtime.auto_seed()
        auto: PolicyFactory = lambda clock: AutoGamma(seed=seed, clock=clock)  # noqa: E731
        policies = _policies(args, auto)
        policies[PLAN] = lambda clock: Planner(seed=seed, clock=clock)
        exclude = _calibration_ids(runtime)
        convs = chained_conversations(topics, range(1, args.seeds + 1), args.prompts, exclude)
        system = env.config.system_prompt or None
        load_before = os.getloadavg()
        watch = LoadWatch()
        started = time.time()
        say = bar.say
        recordings: list[tuple[int, list[RecordedTurn]]] = []
        live_records: list[dict[str, Any]] = []
        with Steps("bench", len(convs) * (2 if args.chained else 1), bar,
                   "conversations") as steps:
            for conv in convs:
                say(f"recording {conv.name}: " + " → ".join(p.category for p in conv.turns))
                recordings.append((conv.seed, record_conversation(runtime, conv,
                                                                  args.max_tokens, system)))
                steps.add()
            say("measuring costs")
            costs = measure_costs(runtime, _longest(recordings), GAMMA_MAX)
            if args.chained:
                for conv, (_, rec) in zip(convs, recordings, strict=True):
                    say(f"live: {conv.name}")
                    made = {name: make(time.perf_counter) for name, make in policies.items()}
                    decoders = live_decoders(runtime, {PLAIN: None, **made})
                    live_records += run_live(decoders, conv, rec, say)
                    steps.add()
        say("replaying")
        replay = evaluate(recordings, costs, policies, GAMMA_MAX, live_records)
        doc = {"specchat": __version__, "started": started, "seconds": time.time() - started,
               "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
               **load_fields(watch.done()),
               "pair": selection.label, "target": str(runtime.target.path),
               "draft": str(runtime.draft.path) if runtime.draft else None,
               "threads": runtime.target_ctx.n_threads, "max_tokens": args.max_tokens,
               "topics": list(topics), "conversations": len(convs),
               "auto_seed": _dump_seed(seed),
               "live": live_summary(live_records) if live_records else None,
               "replay": replay, "live_records": live_records,
               "recordings": _dump(recordings), "costs": _dump_costs(costs)}
    finally:
        runtime.close()
    return _write(doc, out_dir)


def _dump_seed(seed: AutoGammaSeed | None) -> dict[str, Any] | None:
    if seed is None:
        return None
    return {"costs": None if seed.costs is None else
            {"draft_s": seed.costs.draft_s, "verify_s": list(seed.costs.verify_s)},
            "prior_alpha": seed.prior_alpha, "topic_priors": dict(seed.topic_priors),
            "confidence": [list(c) for c in seed.confidence]}


def _load_seed(d: dict[str, Any] | None) -> AutoGammaSeed | None:
    if not d:
        return None
    c = d.get("costs")
    return AutoGammaSeed(CostCurve(c["draft_s"], tuple(c["verify_s"])) if c else None,
                         d.get("prior_alpha"), dict(d.get("topic_priors") or {}),
                         tuple((float(k), float(n)) for k, n in d.get("confidence") or ()))


def _calibration_ids(runtime: Runtime) -> tuple[str, ...]:
    """Question ids of the built-in calibration prompts: kept out of the conversations, since
    a calibrated pair's topic priors came from them."""
    from specchat.models.calibration import builtin_prompts

    return tuple(str(p.question_id) for p in builtin_prompts())


def _longest(recordings: list[tuple[int, list[RecordedTurn]]]) -> RecordedTurn:
    return max((t for _, turns in recordings for t in turns), key=lambda t: len(t.reply))


def _dump(recordings: list[tuple[int, list[RecordedTurn]]]) -> list[dict[str, Any]]:
    return [{"seed": seed, "turns": [{"question_id": t.prompt.question_id,
                                      "category": t.prompt.category, "trace": t.trace.to_dict(),
                                      "reply_tokens": len(t.reply)} for t in turns]}
            for seed, turns in recordings]


def _dump_costs(c: ReplayCosts) -> dict[str, Any]:
    return {"draft_s": c.draft_s, "verify_s": list(c.verify_s), "overhead_s": c.overhead_s,
            "confidence_s": c.confidence_s}


def _replay_from(args: argparse.Namespace, out_dir: Path) -> int:
    try:
        old = json.loads(args.replay_from.read_text(encoding="utf-8"))
        costs = ReplayCosts(old["costs"]["draft_s"], tuple(old["costs"]["verify_s"]),
                            old["costs"]["overhead_s"], old["costs"]["confidence_s"])
        recordings = [(int(c["seed"]), [
            RecordedTurn(BenchPrompt(str(t["question_id"]), t["category"], ""), (), (),
                         TurnTrace.from_dict(t["trace"])) for t in c["turns"]])
            for c in old["recordings"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SpecchatError(f"{args.replay_from}: not a chained results.json ({e})") from None
    seed = _load_seed(old.get("auto_seed"))
    auto: PolicyFactory = lambda clock: AutoGamma(seed=seed, clock=clock)  # noqa: E731
    policies = _policies(args, auto)
    policies[PLAN] = lambda clock: Planner(seed=seed, clock=clock)
    replay = evaluate(recordings, costs, policies, GAMMA_MAX, old.get("live_records", ()))
    doc = {**{k: old[k] for k in ("pair", "target", "draft", "threads", "max_tokens", "topics",
                                  "conversations", "load_avg_before", "load_avg_after")},
           "auto_seed": old.get("auto_seed"),
           "replayed_from": str(args.replay_from), "live": old.get("live"), "replay": replay,
           "live_records": old.get("live_records", []), "recordings": old["recordings"],
           "costs": old["costs"]}
    return _write(doc, out_dir)


def _write(doc: dict[str, Any], out_dir: Path) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False),
                                          encoding="utf-8")
    md = markdown(doc)
    (out_dir / "results.md").write_text(md, encoding="utf-8")
    print(safe_text(md))
    for line in headline(doc.get("live"), doc.get("replay")):
        print(safe_text(line), file=sys.stderr)
    print(f"written: {out_dir / 'results.json'}, {out_dir / 'results.md'}", file=sys.stderr)
    return 0
