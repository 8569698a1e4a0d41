"""``specchat race``: the same prompt, plain then speculative, replayed side by side.

Both runs are recorded one after the other (never together: they would compete for the same
CPU/GPU), then replayed in real time as two live progress bars, then shown in full with a text
chart and the figures. ``--ui`` opens the app on its race screen instead.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any, TextIO

from specchat.cli.common import (
    GAMMA_OPTION_HELP,
    Env,
    add_drafter_args,
    add_model_args,
    add_sampling_args,
    add_system_arg,
    gamma_arg,
    print_notices,
    sampling_changes,
)
from specchat.engine.decode.fold import EventFold
from specchat.errors import SpecchatError
from specchat.loading import select
from specchat.models.progress import TextProgress
from specchat.race.prompts import DEFAULT_KIND, RacePrompt, prompt_from
from specchat.race.replay import Due, play, schedule
from specchat.race.result import RaceResult, recorded_with
from specchat.race.runner import DEFAULT_RUNS, RaceSetup, race_decoder, run_race
from specchat.race.text_chart import bar, cumulative_chart
from specchat.report.race_report import write_race_report
from specchat.runtime.decoders import drafter_names
from specchat.runtime.opening import Runtime
from specchat.textsafe import safe_text

DEFAULT_MAX_TOKENS = 128


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "race", help="plain vs speculative on one prompt, replayed side by side",
        description="Answers one prompt with the same target model twice — plain, then "
        "speculative — one run after the other so they never compete for the hardware, then "
        "replays both together in real time. Greedy by default, where both outputs must be "
        "identical.")
    p.add_argument("prompt", nargs="?", help="the question (default: a built-in coding prompt)")
    p.add_argument("--prompt-from", metavar="KIND",
                   help="a built-in prompt: code, list, prose, translation, math, qa, "
                   "extraction, summary, rag; copy, reformat, edit-code (replies that repeat "
                   "the prompt, where prompt lookup pays); or any Spec-Bench category")
    add_model_args(p)
    add_sampling_args(p, temperature="0, greedy, where both outputs must match",
                      max_tokens=str(DEFAULT_MAX_TOKENS))  # one seed for both runs (default 1)
    add_system_arg(p)
    p.add_argument("--gamma", type=gamma_arg, metavar="plan|auto|pair|N",
                   help=GAMMA_OPTION_HELP)
    add_drafter_args(p)
    p.add_argument("--runs", type=int, default=DEFAULT_RUNS, metavar="N",
                   help=f"timed runs per side, alternating (each pair of runs the other way "
                   f"round); medians and spreads are reported (default {DEFAULT_RUNS})")
    p.add_argument("--report", type=Path, metavar="DIR",
                   help="write report.md and race.svg (cumulative tokens over time) to DIR")
    p.add_argument("--no-replay", action="store_true",
                   help="print the results at once instead of replaying the race")
    p.add_argument("--ui", action="store_true", help="open the app on its race screen")
    p.set_defaults(func=run)


def race_setup(env: Env, args: argparse.Namespace) -> RaceSetup:
    if args.prompt is not None and args.prompt_from:
        raise SpecchatError("give a prompt or --prompt-from, not both")
    if args.prompt is not None and not args.prompt.strip():
        raise SpecchatError("the prompt is empty")
    chosen: RacePrompt | None = None
    if args.prompt is None:
        chosen = prompt_from(args.prompt_from or DEFAULT_KIND)
    runs = getattr(args, "runs", DEFAULT_RUNS)
    if not 1 <= runs <= 20:
        raise SpecchatError(f"--runs must be between 1 and 20 (got {runs})")
    changes = sampling_changes(args)
    # Greedy and 128 tokens unless asked otherwise; one seed for both runs (--seed none: a
    # new one for this race).
    changes.setdefault("temperature", 0.0)
    changes.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
    if "seed" not in changes:
        changes["seed"] = env.config.sampling.seed or 1
    elif changes["seed"] is None:
        changes["seed"] = random.randrange(1, 2**31)
    try:
        settings = env.config.sampling.with_(**changes).validate()
    except ValueError as e:
        raise SpecchatError(str(e)) from None
    system = args.system if getattr(args, "system", None) is not None else env.config.system_prompt
    return RaceSetup(chosen.text if chosen else args.prompt, settings, system or None,
                     chosen.category if chosen else None, runs)


def run(env: Env, args: argparse.Namespace) -> int:
    setup = race_setup(env, args)
    if args.ui:
        from specchat.cli.app import launch  # Textual loads only when the app runs

        return launch(env, args, race=setup)
    selection = select(env.catalog, args.pair, args.model, env.config.default_pair, args.draft)
    bar = TextProgress()  # the load's progress, then the runs' bar with their lines above it
    runtime = Runtime.open(selection, env.resolver, env.runtime_options(args), bar)
    print_notices(runtime)
    try:
        if not drafter_names(env.drafters(args), env.ngram(args), runtime.draft_ctx is not None):
            raise SpecchatError("a race needs a draft model: give a pair (--pair), --model with "
                                "--draft, or --drafter ngram")
        spec = race_decoder(runtime, env.gamma(args), env.ngram(args), env.drafters(args))
        result = recorded_with(run_race(runtime, setup, spec, progress=lambda m: bar.say(
            f"[{m}]"), report=bar), spec)
    finally:
        runtime.close()
    out = sys.stdout
    if not args.no_replay and out.isatty():
        replay_bars(result, out)
    print_result(result, out)
    if args.report:
        written = write_race_report(result, args.report)
        print(f"report: {written.markdown}, {written.charts[0]}, {written.summary}",
              file=sys.stderr)
    if result.is_bug:  # scripts (and CI) must see it, not only a person reading the output
        print(f"specchat: error: {safe_text(result.verdict())}", file=sys.stderr)
        return 1
    return 0


def replay_bars(result: RaceResult, out: TextIO, width: int = 30) -> None:
    """Both runs as two progress bars on one line, advancing as they did when recorded."""
    most = max(len(result.plain.tokens), len(result.spec.tokens), 1)
    sides = (EventFold(), EventFold())

    def emit(now: float, dues: list[Due]) -> None:
        for d in dues:
            sides[d.side].add(d.event)
        counts = [s.tokens for s in sides]
        out.write(f"\r{now:6.2f} s  plain {bar(counts[0] / most, width)} {counts[0]:4d}  "
                  f"spec {bar(counts[1] / most, width)} {counts[1]:4d}")
        out.flush()

    print("synchronized replay of two sequential runs:", file=out)
    play(schedule(result.plain.events, result.spec.events), emit)
    out.write("\n\n")


def print_result(result: RaceResult, out: TextIO) -> None:
    for title, run in (("plain", result.plain), ("speculative", result.spec)):
        print(f"── {title} " + "─" * (60 - len(title)), file=out)
        print(safe_text(run.text.rstrip()), file=out)
        print(file=out)
    print("\n".join(cumulative_chart(result.plain, result.spec)), file=out)
    print(file=out)
    print(safe_text("\n".join(result.summary_lines())), file=out)
