"""``specchat ask``: one question, the reply streamed to stdout (or JSON lines with --json)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from specchat.cli.ask_tools import (
    Tools,
    check_fits,
    check_tools_template,
    json_line,
    open_tools,
    read_files,
    tool_event_json,
    tool_event_line,
)
from specchat.cli.ask_tools import add_args as add_tool_args
from specchat.cli.ask_tools import check_args as check_tool_args
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
from specchat.cli.grammar_args import add_grammar_args, grammar_from_args, read_text
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.events import (
    GenerationStats,
    NoticeEvent,
    RejectedEvent,
    StepEvent,
    TokenEvent,
)
from specchat.engine.decode.fold import EventFold
from specchat.engine.decode.messages import Message
from specchat.engine.decode.sampling import MAX_TOP_LOGPROBS, SamplerSettings
from specchat.engine.policy.in_force import InForce, in_force
from specchat.errors import SpecchatError
from specchat.loading import select
from specchat.models.progress import TextProgress
from specchat.runtime.decoders import prediction_counts
from specchat.runtime.opening import Runtime
from specchat.textsafe import safe_text
from specchat.tools.files import Attachment, with_files
from specchat.tools.turn import ReplyText, ToolCallEvent, ToolResultEvent, ToolTurn, prediction_tokens


def add_parser(sub: Any) -> None:
    p = sub.add_parser("ask", help="answer one prompt and print the reply")
    p.add_argument("prompt", help="the question")
    add_model_args(p)
    add_sampling_args(p)
    add_system_arg(p)
    p.add_argument("--preset", metavar="NAME",
                   help="a named system prompt: built-in (concise, coder, teacher, editor) or "
                        "from config.yaml's 'presets:'")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--plain", action="store_true", help="no speculation, even with a pair")
    p.add_argument("--gamma", type=gamma_arg, metavar="plan|auto|pair|N",
                   help=GAMMA_OPTION_HELP)
    add_drafter_args(p)
    p.add_argument("--prediction", metavar="FILE",
                   help="a predicted output: text the reply is expected to be mostly (the file "
                        "an edit changes a little), drafted from; the reply is the target's "
                        "all the same")
    add_grammar_args(p)
    add_tool_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object per token (and per tool "
                   "call and result with --tools), then stats")
    p.add_argument("--logprobs", type=int, metavar="N",
                   help="with --json: each token's log-probability under the target and the N "
                        f"likeliest tokens at its position (0 to {MAX_TOP_LOGPROBS})")
    p.set_defaults(func=run)


def sampler_from_args(env: Env, args: argparse.Namespace) -> SamplerSettings:
    base = env.config.sampling
    changes = sampling_changes(args)
    if getattr(args, "stop", None):
        changes["stop"] = tuple(args.stop)
    if getattr(args, "logprobs", None) is not None:
        if not args.json:
            raise SpecchatError("--logprobs needs --json: the figures come with each token's "
                                "JSON object")
        changes["logprobs"] = args.logprobs
    grammar = grammar_from_args(args)
    if grammar is not None:
        changes["grammar"] = grammar
    try:
        return base.with_(**changes).validate()
    except ValueError as e:
        raise SpecchatError(str(e)) from None


def system_prompt(env: Env, args: argparse.Namespace) -> str:
    """--system, else --preset's prompt, else the configured one."""
    preset = getattr(args, "preset", None)
    if preset is not None:
        if args.system is not None:
            raise SpecchatError("--system and --preset both set the system prompt: give one")
        return env.config.preset(preset)
    return args.system if args.system is not None else env.config.system_prompt


def run(env: Env, args: argparse.Namespace) -> int:
    if not args.prompt.strip():
        raise SpecchatError("the prompt is empty: ask a question, e.g. specchat ask \"hello\"")
    check_tool_args(args)
    settings = sampler_from_args(env, args)
    system = system_prompt(env, args)  # before loading: a wrong name costs no model load
    predicted = read_prediction(args.prediction) if args.prediction else None
    files = read_files(env, args.files, args.file_limit_kb)  # so do a missing file and a server not installed
    tools = open_tools(env, args) if args.tools else None
    try:
        return _run(env, args, settings, system, predicted, files, tools)
    finally:
        if tools is not None:
            tools.hub.close()


def _run(env: Env, args: argparse.Namespace, settings: SamplerSettings, system: str,
         predicted: str | None, files: list[Attachment], tools: Tools | None) -> int:
    selection = select(env.catalog, args.pair, args.model, env.config.default_pair,
                       getattr(args, "draft", None))
    runtime = Runtime.open(selection, env.resolver, env.runtime_options(args), TextProgress(),
                           with_draft=not args.plain)
    print_notices(runtime)
    try:
        for w in runtime.pair_warnings:
            sys.stderr.write(f"specchat: note: {safe_text(w.message)}\n")
        # Attached files and tool results are predicted outputs: the prediction drafter runs.
        texts = ([predicted] if predicted is not None else []) + [f.text for f in files]
        decoder = runtime.decoder(plain=args.plain, gamma=env.gamma(args), ngram=env.ngram(args),
                                  drafters=env.drafters(args),
                                  prediction=bool(texts) or tools is not None)
        setup = in_force(decoder)
        engine = ChatEngine(decoder)
        if tools is not None:
            check_tools_template(engine)
        offered = tools.toolset.as_openai() if tools is not None and tools.choice != "none" \
            else None
        messages = ([Message("system", system)] if system else []) \
            + [Message("user", with_files(args.prompt, files))]
        check_fits(engine, messages, files, settings.max_tokens, offered)
        predicted_tokens: Sequence[int] | None = None
        if texts and tools is None:
            settings = settings.with_(prediction=prediction_tokens(runtime.target, texts))
            predicted_tokens = settings.prediction
        cancel = threading.Event()
        previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
        try:
            if tools is not None:
                turn = ToolTurn(engine, tools.hub, tools.toolset, tools.approve,
                                args.max_tool_rounds or env.config.max_tool_rounds)
                stats = _stream(turn.run(messages, settings, cancel, tools.choice, texts),
                                args.json, setup, turn=True)
            else:
                stats = _stream(engine.reply(messages, settings, cancel), args.json, setup,
                                predicted_tokens)
        finally:
            signal.signal(signal.SIGINT, previous)
    finally:
        runtime.close()
    return 130 if stats and stats.stop_reason == "cancelled" else 0


def read_prediction(path: str) -> str:
    """A predicted output's text, or a clear error (missing, unreadable, not text)."""
    return read_text("--prediction", path)


class _Printed(EventFold):
    """``ask``'s output of a reply's engine events as they come (the fold's hooks): JSON lines
    (``as_json``: the exact text, escaped by JSON, C1 and DEL by safe_json), or the reply's
    text on stdout and its notices on stderr. ``predicted``: the predicted output's tokens,
    whose tokens the reply kept are counted at its end; ``turn``: a turn with tools, whose text
    comes as its content (``ReplyText``), not token by token, and whose calls are counted."""

    def __init__(self, as_json: bool, setup: InForce, predicted: Sequence[int] | None,
                 turn: bool) -> None:
        super().__init__()
        self.as_json, self.setup, self.predicted, self.turn = as_json, setup, predicted, turn
        self.calls = 0  # the tool calls of a turn (counted by _stream)

    def line(self, doc: dict[str, Any]) -> None:
        sys.stdout.write(json_line(doc) + "\n")

    def on_token(self, ev: TokenEvent) -> None:
        if self.as_json:
            doc = {"type": "token", "id": ev.token_id, "text": ev.text,
                   "origin": ev.origin.value, "position": ev.position, "t": round(ev.t, 6)}
            if ev.logprob is not None:  # ids, not texts: the vocabulary is the reader's to map
                doc.update(logprob=ev.logprob.logprob,
                           top_logprobs=[{"id": i, "logprob": lp} for i, lp in ev.logprob.top])
            self.line(doc)
        elif not self.turn:
            sys.stdout.write(safe_text(ev.text))

    def on_rejected(self, ev: RejectedEvent) -> None:
        if self.as_json:
            self.line({"type": "rejected", "id": ev.token_id, "text": ev.text,
                       "position": ev.position, "p": ev.p, "q": ev.q, "branch": ev.branch})

    def on_step(self, ev: StepEvent) -> None:
        if self.as_json:
            self.line({"type": "step", "gamma": ev.gamma, "accepted": ev.accepted,
                       "draft_s": ev.draft_s, "verify_s": ev.verify_s, "drafter": ev.drafter,
                       "position": ev.position, "committed": ev.committed,
                       "overlap": list(ev.overlap), "mode": ev.mode, "kind": ev.kind,
                       "depth": ev.depth, "plan_size": ev.plan_size,
                       "accepted_ranks": list(ev.accepted_ranks), "reason": ev.reason})

    def on_notice(self, ev: NoticeEvent) -> None:
        if self.as_json:
            self.line({"type": "notice", "message": ev.message})
        else:
            sys.stderr.write(f"[{safe_text(ev.message)}]\n")

    def on_stats(self, ev: GenerationStats) -> None:
        if self.as_json:  # with what ran: the drafters and the γ mode
            doc: dict[str, Any] = {"type": "stats", **ev.as_dict(), **self.setup.as_dict()}
            if self.predicted is not None:
                doc.update(prediction_counts(self.predicted, self.token_ids))
            if self.turn:
                doc["tool_calls"] = self.calls
            self.line(doc)


def _stream(events: Any, as_json: bool, setup: InForce,
            predicted: Sequence[int] | None = None, turn: bool = False) -> GenerationStats | None:
    """Print a reply's events (see :class:`_Printed`); a tool turn's calls and results go to
    stderr, or to the JSON lines as tool_call and tool_result events."""
    out = sys.stdout
    fold = _Printed(as_json, setup, predicted, turn)
    for ev in events:
        if isinstance(ev, (ToolCallEvent, ToolResultEvent)):  # the tool turn's own events
            if isinstance(ev, ToolCallEvent):
                fold.calls += 1
            if as_json:
                fold.line(tool_event_json(ev))
            else:
                out.flush()
                sys.stderr.write(tool_event_line(ev) + "\n")
        elif isinstance(ev, ReplyText):
            if not as_json:  # (in JSON the tokens carry it)
                out.write(safe_text(ev.text))
        else:
            fold.add(ev)
        out.flush()
    stats, reply, calls = fold.stats, fold.token_ids, fold.calls
    if stats and not as_json:
        out.write("\n")
        line = summary(stats, setup)
        if predicted is not None:
            c = prediction_counts(predicted, reply)
            line = (f"{line[:-1]} · prediction: {c['accepted_prediction_tokens']} of "
                    f"{len(predicted)} tokens kept]")
        if turn:
            line = f"{line[:-1]} · {calls} tool call{'s' if calls != 1 else ''}]"
        sys.stderr.write(line + "\n")
    return stats


def summary(s: GenerationStats, setup: InForce | None = None) -> str:
    parts = [f"{s.generated_tokens} tokens", f"{s.decode_tps:.1f} tok/s decode",
             f"ttft {s.ttft_s * 1000:.0f} ms",
             f"prompt {s.prompt_tokens} ({s.cached_tokens} cached)"]
    if setup is not None and setup.decoder != "plain":
        parts.append(setup.line())  # n-gram lookup from the config file is said, not hidden
    if s.steps and not s.drafted:
        parts.append("plain: nothing was worth drafting")  # what ran, not what could have
    elif s.steps:
        parts.append(f"α {s.alpha:.2f}" if s.alpha is not None else "α -")
        if s.tau is not None:
            parts.append(f"τ {s.tau:.2f}")
    if s.stop_reason != "eos":
        parts.append(f"stopped: {s.stop_reason}")
    return "[" + " · ".join(parts) + "]"
