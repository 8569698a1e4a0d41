"""How far a model's logits move with batch shape on this build, flash attention off and on.

For each model file and each flash-attention setting, one context (2 threads by default) reads a
prefix of docs/performance.md of ``--contexts`` tokens, then the next 32 tokens three ways (one
at a time, as plain decoding does; as one batch; in verification-sized batches), and prints
:func:`specchat.engine.llama.batch_rounding.measure`'s bound: the most the gap between a
position's best token and its top candidates moved, and how many best tokens flipped. That
bound is what a greedy speculative reply may part from a plain one by (docs/exactness.md);
flash attention is off on a CPU where it would raise it (``engine/llama/model_settings.py``).

    python scripts/batch_rounding.py MODEL.gguf [MODEL.gguf ...] --contexts 100,800
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, not another one installed

from specchat.engine.llama import batch_rounding  # noqa: E402
from specchat.engine.llama.context import LlamaContext  # noqa: E402
from specchat.engine.llama.model import LlamaModel  # noqa: E402
from specchat.engine.llama.model_settings import ContextSettings, ModelSettings  # noqa: E402

TEXT = (REPO / "docs" / "performance.md").read_text()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--contexts", default="100,800", help="prefix lengths, comma-separated")
    ap.add_argument("--flash-attn", default="off,on")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    contexts = [int(x) for x in args.contexts.split(",") if x]
    print("| model | flash attention | prefix | top-token gap moved (logits) | one logit moved "
          "| best token flipped |")
    print("|---|---|---|---|---|---|")
    for path in args.models:
        model = LlamaModel(path, ModelSettings(n_gpu_layers=0))
        tokens = model.tokenize(TEXT)
        for fa in args.flash_attn.split(","):
            ctx = LlamaContext(model, ContextSettings(n_ctx=max(contexts) + 64,
                                                      n_threads=args.threads, flash_attn=fa))
            for n in contexts:
                b = batch_rounding.measure(ctx, tokens[:n], tokens[n:n + 32])
                print(f"| {path.name} | {fa} | {n} | {b.gap:.3f} | {b.logit:.3f} "
                      f"| {b.flips} of {b.positions} |", flush=True)
            ctx.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
