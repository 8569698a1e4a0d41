"""``specchat models train-heads TARGET --kind kangaroo``: train Kangaroo's adapter here.

The ``train-heads`` command (:mod:`specchat.cli.models_cmd`) hands ``--kind kangaroo`` to
:func:`train_kangaroo`; :func:`add_arguments` adds the options only Kangaroo has.
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path
from typing import Any

from specchat.cli.common import Env
from specchat.config import cap_threads
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.models.progress import TextProgress


def add_arguments(p: Any) -> None:
    p.add_argument("--layers", type=int, metavar="L",
                   help="kangaroo: the target's first L blocks make the shallow model "
                   "(default: a sixth of them)")
    p.add_argument("--rank", type=int, default=128,
                   help="kangaroo: the adapter's width r (128; its cost per draft token is "
                   "vocabulary × r)")
    p.add_argument("--eta", type=float, default=None,
                   help="kangaroo: stop drafting below this top-1 probability (0.6)")


def train_kangaroo(env: Env, target: Path, args: argparse.Namespace,
                   cancel: threading.Event | None = None) -> int:
    from specchat.models.heads.data import DataSpec
    from specchat.models.heads.kangaroo import ETA, OutputRows, train
    from specchat.models.heads.kangaroo_fit import KangarooSpec

    OutputRows(target)  # an output matrix gguf cannot dequantize is refused before any work

    threads, note = cap_threads(getattr(args, "threads", None) or env.config.n_threads)
    if note:
        print(f"specchat: note: {note}")
    minutes = getattr(args, "minutes", None)
    spec = KangarooSpec(rank=args.rank, minutes=3.0 if minutes is None else float(minutes),
                        eta=ETA if args.eta is None else args.eta)
    # The same data as Medusa's heads for the same options (so its cache is shared).
    text = getattr(args, "text", None)
    base = DataSpec()
    data = DataSpec(prompts=getattr(args, "prompts", None) or base.prompts,
                    reply_tokens=getattr(args, "reply_tokens", None) or base.reply_tokens,
                    text_file=Path(text) if text else None)
    cancel = cancel or threading.Event()
    model = LlamaModel(target)
    try:
        ctx = LlamaContext(model, ContextSettings(n_ctx=2048, n_batch=64, n_threads=threads))
        try:
            done = train(env.paths, target, ctx, spec, data, args.layers, report=TextProgress(),
                         cancel=cancel)
        except KeyboardInterrupt:
            cancel.set()
            print("cancelled: no adapter was saved; what was complete (the replies, the hidden "
                  "states, the shallow model) is cached and the next run goes on from there")
            return 130
        finally:
            ctx.close()
    finally:
        model.close()
    acc, fit = done.fit.accuracy, done.fit
    print(f"Kangaroo adapter for {target.name}: the first {done.layers} of {done.n_layer} blocks "
          f"+ a rank-{spec.rank} adapter, trained in {fit.seconds:.0f} s ({fit.steps} steps on "
          f"{fit.train_positions} positions)")
    print(f"  held-out top-1 agreement with the target: {acc.top1:.1%} (the shallow model alone: "
          f"{acc.shallow_top1:.1%}), top-3 {acc.top3:.1%}, on {acc.positions} positions")
    print(f"  saved: {done.path}\n  use it: specchat ask --model {target} --drafter kangaroo")
    return 0
