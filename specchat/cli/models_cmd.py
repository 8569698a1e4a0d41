"""``specchat models list|files|pull|rm`` (and the pairing commands from :mod:`pair_cmd`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from specchat.cli import heads_kangaroo, pair_cmd
from specchat.cli.common import Env
from specchat.errors import FetchError, SpecchatError
from specchat.models.catalog import (
    DerivedSource,
    HfSource,
    PathSource,
    PypiSource,
    Source,
)
from specchat.models.entries import hub_model
from specchat.models.progress import TextProgress, format_bytes
from specchat.models.resolver import model_from_ref
from specchat.textsafe import safe_text


def add_parser(sub: Any) -> None:
    p = sub.add_parser("models", help="list, fetch, check, calibrate and pair models")
    msub = p.add_subparsers(dest="models_cmd", required=True, metavar="COMMAND")
    ls = msub.add_parser("list", help="the catalog's models and pairs, and what is on disk")
    ls.set_defaults(func=cmd_list)
    files = msub.add_parser("files", help="a Hugging Face repo's GGUF files and their sizes")
    files.add_argument("repo", metavar="REPO", help="e.g. Qwen/Qwen3-8B-GGUF")
    files.set_defaults(func=cmd_files)
    pull = msub.add_parser("pull", help="fetch (or derive) models so they are ready offline",
                           description="Fetch catalog models or pairs, or any GGUF on the Hub "
                           "as REPO:FILE (added to your catalog so you can pair it).")
    pull.add_argument("ids", nargs="+", metavar="ID|REPO[:FILE]",
                      help="model or pair ids, or Hub files")
    pull.set_defaults(func=cmd_pull)
    rm = msub.add_parser("rm", help="delete a fetched or derived model file")
    rm.add_argument("ids", nargs="+", metavar="ID")
    rm.set_defaults(func=cmd_rm)
    pair_cmd.add_parsers(msub)
    th = msub.add_parser("train-heads", help="train drafting heads for a target on this machine",
                         description="Train Medusa heads for TARGET (a catalog id or a .gguf "
                         "path) with numpy: the target reads Spec-Bench prompts and its own "
                         "replies to them (generated once and cached) or --text FILE, then the "
                         "heads learn to predict its next tokens. Use them with --drafter medusa.")
    th.add_argument("target", metavar="TARGET")
    th.add_argument("--kind", default="medusa", choices=HEAD_KINDS,
                    help="medusa (heads on the last hidden state) or kangaroo (the first blocks "
                    "+ an adapter); default medusa")
    th.add_argument("--minutes", type=float, default=3.0, help="training time budget (3)")
    th.add_argument("--heads", type=int, default=3, help="Medusa heads K: tokens drafted ahead (3)")
    th.add_argument("--prompts", type=int, default=48,
                    help="Spec-Bench prompts the target replies to (48)")
    th.add_argument("--reply-tokens", type=int, default=128, help="tokens per reply (128)")
    th.add_argument("--text", type=Path, metavar="FILE", help="train on this text file instead")
    th.add_argument("--threads", type=int, metavar="N", help="CPU threads (default: automatic)")
    heads_kangaroo.add_arguments(th)
    th.set_defaults(func=cmd_train_heads)


HEAD_KINDS = ("medusa", "kangaroo")


def cmd_train_heads(env: Env, args: argparse.Namespace) -> int:
    from specchat.models.heads.store import target_sha256, training

    for name, value in (("--minutes", args.minutes), ("--heads", args.heads),
                        ("--prompts", args.prompts), ("--reply-tokens", args.reply_tokens)):
        if not value > 0:
            raise SpecchatError(f"{name} must be more than 0")
    if args.text is not None and not args.text.is_file():
        raise SpecchatError(f"no text file at {args.text}")
    entry = model_from_ref(env.catalog, args.target)
    progress = TextProgress()
    path = env.resolver.ensure(entry, progress)
    sha = target_sha256(env.paths, path, progress)
    with training(env.paths, sha, path.name, progress):  # one training per target at a time
        if args.kind == "kangaroo":  # its own reader checks the output matrix (faster)
            return heads_kangaroo.train_kangaroo(env, path, args)
        return _train_medusa(env, args, path, sha, progress)


def _train_medusa(env: Env, args: argparse.Namespace, path: Path, sha: str,
                  progress: TextProgress) -> int:
    import threading

    from specchat.config import cap_threads
    from specchat.engine.llama.context import LlamaContext
    from specchat.engine.llama.model import LlamaModel
    from specchat.engine.llama.model_settings import ContextSettings
    from specchat.models.heads import data as heads_data
    from specchat.models.heads import medusa
    from specchat.models.heads.output_matrix import output_rows, output_type
    from specchat.models.heads.store import target_dir
    from specchat.models.progress import format_duration

    kind = output_type(path)
    output_rows(path, np.array([0]))  # a type gguf cannot dequantize is refused now, not later
    folder = target_dir(env.paths, sha)
    threads, _ = cap_threads(args.threads or env.config.n_threads)
    model = LlamaModel(path)
    ctx = LlamaContext(model, ContextSettings(n_ctx=2048, n_batch=64, n_threads=threads))
    spec = heads_data.DataSpec(prompts=args.prompts, reply_tokens=args.reply_tokens,
                               text_file=args.text)
    cancel = threading.Event()
    out = sys.stdout
    try:
        data = heads_data.collect(ctx, folder, spec, progress, cancel)
        ctx.close()
        model.close()
        result = medusa.train(data, lambda ids: output_rows(path, ids),
                              medusa.TrainSpec(heads=args.heads, minutes=args.minutes), sha,
                              progress, cancel)
    except KeyboardInterrupt:
        cancel.set()
        out.write("cancelled: nothing half-written was kept; replies already generated are "
                  f"cached in {folder} and the next run goes on from there\n")
        return 130
    dest = medusa.save(env.paths, result, path)
    out.write(safe_text(
        f"Medusa heads for {path.name} (output matrix {kind}): {result.heads.k} heads, trained "
        f"{format_duration(result.seconds)} ({result.steps} steps) on {result.train_positions:,}"
        f" positions; vocabulary {result.vocab:,} tokens ({result.coverage:.1%} of the "
        "target's top-token mass)\n"))
    test_n = result.accuracy[0].positions if result.accuracy else 0
    out.write(f"held-out text ({test_n:,} positions), the head's best token vs the target's:\n")
    for a in result.accuracy:
        out.write(f"  head {a.head} (token +{a.head + 1}): top-1 {a.top1:.1%}  "
                  f"top-3 {a.top3:.1%}\n")
    out.write(safe_text(f"saved: {dest}\n") + safe_text(
        f"use them: specchat race --model {args.target} --drafter medusa\n"))
    return 0


def describe_source(src: Source) -> str:
    if isinstance(src, PypiSource):
        return "pypi:" + "+".join(p.requirement.split("==")[0] for p in src.parts[:1]) + (
            f" (+{len(src.parts) - 1} parts)" if len(src.parts) > 1 else "")
    if isinstance(src, DerivedSource):
        if src.layers is not None:
            return f"derived:{len(src.layers)} blocks of {src.base}"
        return f"derived:{src.quant} of {src.base}"
    if isinstance(src, HfSource):
        parts = f" ({len(src.files)} parts)" if len(src.files) > 1 else ""
        return f"hf:{src.repo}{parts}"
    assert isinstance(src, PathSource)
    return f"path:{src.path}"


def cmd_list(env: Env, args: argparse.Namespace) -> int:
    out = sys.stdout
    head = ("MODEL", "ON DISK", "SIZE", "SOURCE")
    rows = []
    for m in env.catalog.models.values():
        st = env.resolver.state(m)
        if st.present:
            size = format_bytes(st.size)
        elif m.size:
            size = f"({format_bytes(m.size)})"
        else:
            size = "-"
        where = ", then ".join(describe_source(s) for s in m.sources)
        rows.append((safe_text(m.id), "yes" if st.present else "no", size, safe_text(where)))
    w = [max(len(r[i]) for r in [*rows, head]) for i in range(4)]
    out.write("  ".join(h.ljust(w[i]) for i, h in enumerate(head)).rstrip() + "\n")
    for r in rows:
        out.write("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() + "\n")
    out.write("\nPAIRS\n")
    default = env.config.default_pair or env.catalog.default_pair
    for p in env.catalog.pairs.values():
        mark = " (default)" if p.id == default else ""
        gamma = f"  γ={p.gamma}" if p.gamma is not None else ""
        out.write(safe_text(f"  {p.id}{mark}: {p.target} ← {p.draft}{gamma}") + "\n")
    out.write(f"\nmodels folder: {env.paths.models_dir}  (sizes in brackets: not downloaded)\n")
    return 0


def cmd_files(env: Env, args: argparse.Namespace) -> int:
    from specchat.models.hub import list_gguf, parse_hub_ref

    ref = parse_hub_ref(args.repo)
    if ref is None:
        raise FetchError(f"'{args.repo}' is not a Hub repo id (expected ORG/NAME)")
    listing = list_gguf(ref.repo, ref.revision)
    out = sys.stdout
    if not listing.files:
        out.write(f"{ref.repo} has no GGUF files\n")
        return 1
    if listing.gated:
        out.write(f"{ref.repo} is gated: accept its licence on the Hub and set HF_TOKEN to "
                  "download\n")
    for f in listing.files:
        size = format_bytes(f.size) if f.size else "?"
        note = " (vision projector: not a chat model)" if f.is_projector else ""
        parts = f" ({len(f.parts)} parts)" if len(f.parts) > 1 else ""
        out.write(safe_text(f"  {size:>9}  {f.quant or '-':8} {f.name}{parts}{note}") + "\n")
    first = next((f for f in listing.files if not f.is_projector), listing.files[0])
    out.write(f"\npull one with: specchat models pull {ref.repo}:{first.name}\n")
    return 0


def _expand(env: Env, ids: list[str]) -> list[str]:
    out: list[str] = []
    for i in ids:
        if i in env.catalog.pairs and i not in env.catalog.models:
            p = env.catalog.pairs[i]
            out += [p.target, p.draft]
        else:
            out.append(i)
    return out


def cmd_pull(env: Env, args: argparse.Namespace) -> int:
    from specchat.models.user_catalog import update_user_catalog

    progress = TextProgress()
    for ref in _expand(env, args.ids):
        entry = None if ref in env.catalog.models else hub_model(env.catalog, ref)
        if entry is None:
            path = env.resolver.ensure(ref, progress)
            print(f"{ref}: {path}")
            continue
        path = env.resolver.ensure(entry, progress)
        if entry.id not in env.catalog.models:
            update_user_catalog(env.paths.user_catalog, models=[entry])
            env.catalog.models[entry.id] = entry
            print(f"{entry.id}: {path}\n  added to your catalog as '{entry.id}': pair it with "
                  f"`specchat models pair NAME {entry.id} DRAFT`")
        else:
            print(f"{entry.id}: {path}")
    for i in args.ids:
        if i in env.catalog.pairs and i not in env.catalog.models:
            tip = calibration_tip(env, i)
            if tip:
                print(tip)
    return 0


def calibration_tip(env: Env, pair_id: str) -> str | None:
    """A tip for a pair never calibrated on this machine (its files, as pulled), else None."""
    from specchat.models.calibration_store import load_calibration

    pair = env.catalog.pairs[pair_id]
    t, d = (env.resolver.state(env.catalog.model(m)).path for m in (pair.target, pair.draft))
    if t is None or d is None or load_calibration(env.paths, t, d) is not None:
        return None
    by_app = ("the app calibrates it in the background, between replies, when it first opens "
              "it; or " if _auto_calibrate(env) else "")
    return (f"tip: {pair_id} is not calibrated on this machine yet, so the planner starts from "
            f"guesses: {by_app}run `specchat models calibrate {pair_id}` (a minute or more) "
            "to measure what pays here")


def _auto_calibrate(env: Env) -> bool:
    try:
        return env.config.auto_calibrate
    except SpecchatError:
        return True  # a broken settings file: the app then runs on defaults


def cmd_rm(env: Env, args: argparse.Namespace) -> int:
    for ref in _expand(env, args.ids):
        entry = model_from_ref(env.catalog, ref)
        removed = env.resolver.remove(entry)
        print(f"{ref}: " + (", ".join(str(p) for p in removed) if removed else "not on disk"))
    return 0

