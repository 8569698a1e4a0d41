"""``specchat serve``: the models behind an OpenAI-compatible HTTP API (see specchat.serve)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from specchat.cli.ask import sampler_from_args
from specchat.cli.common import (
    GAMMA_OPTION_HELP,
    Env,
    add_drafter_args,
    add_model_args,
    add_sampling_args,
    gamma_arg,
)
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.llama.model_settings import ContextSettings
from specchat.engine.llama.slots import MAX_SEQUENCES, share
from specchat.engine.policy.in_force import in_force
from specchat.loading import RuntimeOptions, Selection, select
from specchat.models.catalog import ModelEntry, PathSource
from specchat.models.progress import TextProgress
from specchat.runtime.decoders import drafter_names, unshared_drafter
from specchat.runtime.opening import Runtime
from specchat.serve.cors import CorsPolicy, check_origin
from specchat.serve.server import Serving, bind, is_loopback
from specchat.serve.worker import ModelHost, Served
from specchat.textsafe import safe_text


def port_arg(text: str) -> int:
    if text.isdigit() and int(text) <= 65535:
        return int(text)
    raise argparse.ArgumentTypeError(f"'{text}' is not a port number (0 to 65535; 0: any free one)")


# Two slots unless asked, as llama-server's -np: a second request (an editor's completion
# while a chat streams) starts at the next step instead of after the whole reply. A lone client
# pays nothing for it now that one thread runs the slots' passes: paired with one slot, the
# defaults ran at 0.97-1.11x llama-server plain against one slot's 0.97-1.11x (qwen-coder, 2
# CPU threads; docs/performance.md). A drafter that cannot share a batch gets one slot.
DEFAULT_PARALLEL = 2
# Each slot keeps the sequences a token tree needs (ContextSettings.n_seq_max), and a context
# has at most MAX_SEQUENCES.
SLOT_SEQUENCES = 16
MAX_PARALLEL = MAX_SEQUENCES // SLOT_SEQUENCES


def parallel_arg(text: str) -> int:
    if text.strip().isdigit() and 1 <= int(text) <= MAX_PARALLEL:
        return int(text)
    raise argparse.ArgumentTypeError(f"'{text}' is not a number of slots (1 to {MAX_PARALLEL}: "
                                     "how many requests are generated at once)")


def slots_for(asked: int | None, plain: bool, drafters: Sequence[str] | None,
              ngram: bool | None, has_draft: bool) -> tuple[int, str | None]:
    """The slots to serve with: ``asked`` (``--parallel``), else ``DEFAULT_PARALLEL``, or 1
    where a drafter the server runs cannot share a batch — that drafter's name comes back
    beside it (said in the log). Asked for N, such a drafter is refused at load, by name."""
    if asked is not None:
        return asked, None
    alone = None if plain else unshared_drafter(drafter_names(drafters, ngram, has_draft))
    return (DEFAULT_PARALLEL, None) if alone is None else (1, alone)


def megabytes_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 4096:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size in MB (more than 0, at most 4096)")
    return value


def alias_arg(text: str) -> str:
    if text.strip() and len(text) <= 200 and text.isprintable() and text == text.strip():
        return text
    raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a model id (1 to 200 printable "
                                     "characters, no space at either end)")


def cors_arg(text: str) -> str:
    try:
        return check_origin(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve the models over an OpenAI-compatible HTTP API",
                       description="An OpenAI-compatible endpoint (/v1/chat/completions, "
                       "/v1/completions, /v1/responses, /v1/models, /infill) over the same "
                       "engine, sampling and chat template as the app. Sampling options set the "
                       "defaults a request's own fields override.")
    add_model_args(p)
    add_sampling_args(p)
    p.add_argument("--plain", action="store_true", help="no speculation, even with a pair")
    p.add_argument("--gamma", type=gamma_arg, metavar="plan|auto|pair|N", help=GAMMA_OPTION_HELP)
    add_drafter_args(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; another "
                   "one lets anyone who can reach it use the models, with no password)")
    p.add_argument("--port", type=port_arg, default=8000, help="port (default 8000)")
    p.add_argument("--parallel", type=parallel_arg, default=None, metavar="N",
                   help=f"requests generated at once (default {DEFAULT_PARALLEL}, or 1 with a "
                   f"drafter that cannot share a batch; at most {MAX_PARALLEL}): each gets a "
                   "slot with the whole --ctx-size (the KV cache holds N times it) and the "
                   "slots' steps run as one batch; more requests wait for a free slot. 1: one "
                   "at a time")
    p.add_argument("--max-body-mb", type=megabytes_arg, default=8.0, metavar="MB",
                   help="largest request body accepted (default 8; larger: 413)")
    p.add_argument("--alias", type=alias_arg, metavar="NAME",
                   help="the model id the API lists and answers with (default: the model "
                   "file's name without .gguf, or its catalog id); the others still work")
    p.add_argument("--cors-origin", dest="cors_origins", type=cors_arg, action="append",
                   default=[], metavar="ORIGIN",
                   help="let web pages from ORIGIN (http://host:port) call the server from a "
                   "browser; repeatable; * allows any page (pages on localhost and 127.0.0.1 "
                   "are allowed by default)")
    p.add_argument("--no-access-log", dest="access_log", action="store_false",
                   help="do not log each request")
    p.set_defaults(func=run)


def run(env: Env, args: argparse.Namespace) -> int:
    serving = build(env, args)
    sys.stderr.write(f"specchat: serving {safe_text(serving.host.model_id)} at {serving.url}/v1 "
                     "(OpenAI API; Ctrl-C stops); loading the models…\n")
    sys.stderr.flush()
    try:
        serving.run()
    except KeyboardInterrupt:  # uvicorn passes Ctrl-C on once it has stopped: the usual end
        sys.stderr.write("specchat: server stopped\n")
    return 0


def short_id(entry: ModelEntry) -> str:
    """A model's id as clients write it: a catalog id, or a file's name without ``.gguf``
    (llama-server's default id is the file's name too)."""
    if isinstance(entry.source, PathSource) and entry.id == str(entry.source.path):
        return entry.source.path.stem
    return entry.id


def model_names(selection: Selection, alias: str | None) -> tuple[str, tuple[str, ...]]:
    """The id the API lists (``--alias``, else a catalog pair's id, else the target's short
    id) and the other names a request's ``model`` may say: the target's file name, path and
    short id, and the label earlier versions listed (a pair's paths joined by " + ")."""
    target = selection.target
    names = [selection.label, short_id(target), target.id]
    if isinstance(target.source, PathSource):
        names.append(target.source.path.name)
    model_id = alias or (selection.pair.id if selection.pair else short_id(target))
    return model_id, tuple(n for n in dict.fromkeys(names) if n != model_id)


def slot_options(options: RuntimeOptions, parallel: int) -> RuntimeOptions:
    """The contexts ``parallel`` slots share: each slot keeps the whole window asked for (the
    cache holds ``parallel`` times it; llama-server's ``-np`` splits ``-c`` instead) and the
    sequences a token tree needs. A window of 0 (the model's training length) is split."""
    if parallel == 1:
        return options

    def widen(ctx: ContextSettings) -> ContextSettings:
        return replace(ctx, n_ctx=ctx.n_ctx * parallel,
                       n_seq_max=SLOT_SEQUENCES * parallel)

    draft = options.draft_context
    return replace(options, context=widen(options.context),
                   draft_context=widen(draft) if draft is not None else None)


def build(env: Env, args: argparse.Namespace) -> Serving:
    """The server the command line asks for, on its bound socket, not yet started."""
    # Everything that can be wrong with the command is said before the port is taken.
    defaults = sampler_from_args(env, args)
    selection = select(env.catalog, args.pair, args.model, env.config.default_pair,
                       getattr(args, "draft", None))
    gamma, ngram, drafters = env.gamma(args), env.ngram(args), env.drafters(args)
    parallel, alone = slots_for(args.parallel, args.plain, drafters, ngram,
                                selection.draft is not None)
    options = slot_options(env.runtime_options(args), parallel)
    if not is_loopback(args.host):
        sys.stderr.write(f"specchat: warning: listening on {safe_text(args.host)}: anyone who "
                         "can reach this machine there can use the models (no password; "
                         "requests are not encrypted)\n")
    cors = CorsPolicy.of(args.cors_origins)
    if cors.any:
        sys.stderr.write("specchat: warning: --cors-origin *: any web page a browser on this "
                         "machine opens can use the models\n")
    sock = bind(args.host, args.port)

    def load() -> Served:  # on the server's generation thread, while it already answers 503
        runtime = Runtime.open(selection, env.resolver, options, TextProgress(),
                               with_draft=not args.plain)
        try:
            notes = [f"note: {w.message}" for w in runtime.pair_warnings] + runtime.notices()
            if alone is not None:
                notes.append(f"one request at a time: the '{alone}' drafter cannot share a "
                             "batch with another request's")
            # Any request may carry a predicted output: its drafter is always there (it
            # proposes nothing without one, and its steps are then plain ones).
            if parallel == 1:
                decoder = runtime.decoder(plain=args.plain, gamma=gamma, ngram=ngram,
                                          drafters=drafters, prediction=True)
                return Served(ChatEngine(decoder), in_force(decoder), runtime.close, notes)
            slots = share(runtime.target_ctx, runtime.draft_ctx, parallel)
            decoders = [runtime.decoder(plain=args.plain, gamma=gamma, ngram=ngram,
                                        drafters=drafters, prediction=True, slot=slot)
                        for slot in slots.contexts]
        except BaseException:
            runtime.close()
            raise
        engines = [ChatEngine(d) for d in decoders]
        notes.append(f"{parallel} slots of {engines[0].n_ctx} tokens each (a KV cache of "
                     f"{runtime.target_ctx.n_ctx} tokens)")

        def close() -> None:
            slots.close()
            runtime.close()

        return Served(engines[0], in_force(decoders[0]), close, notes, engines=engines,
                      member=slots.rendezvous.member, passes=slots.rendezvous.log,
                      park=slots.park)

    model_id, aliases = model_names(selection, args.alias)
    host = ModelHost(load, model_id, aliases=aliases, defaults=defaults, parallel=parallel)
    return Serving(host, sock, int(args.max_body_mb * 1024 * 1024), access_log=args.access_log,
                   cors=cors)
