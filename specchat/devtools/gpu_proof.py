"""The GPU proof run: write a tiny-but-not-trivial pair, load it with every layer offloaded, check
greedy speculative output token for token against plain output, and time plain vs speculative.

``scripts/gpu_check.sh`` runs this after building a CUDA llama-cpp-python; it also runs on a CPU
build (``--scale cpu``), which is how it is tested where there is no GPU. Figures are printed as
a table and, with ``--json``, written to a file. Exit status: 0 when every check passed, 1 when
output differed or offload was required and did not happen, 2 on a usage error.

    python -m specchat.devtools.gpu_proof --scale gpu --require-gpu --json out.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specchat.devtools.tiny_models import TinySpec, vocabulary, write_tiny_model
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.decoding import Decoder, run_to_end
from specchat.engine.decode.events import GenerationStats
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.stats import acceptance, tokens_per_pass
from specchat.engine.llama.hardware import backend_label, devices
from specchat.engine.llama.memory_plan import fmt_bytes
from specchat.engine.llama.model_settings import ContextSettings, ModelSettings
from specchat.loading import RuntimeOptions, Selection
from specchat.models.catalog import load_catalog
from specchat.models.resolver import ModelResolver, model_from_ref
from specchat.paths import AppPaths
from specchat.runtime.opening import Runtime


@dataclass(frozen=True)
class Scale:
    # residual_scale is set so the early-exit draft agrees with the target about 70% of the
    # time (Σ min(p, q) at T = 0.7, measured on narrower models of the same depth), like a
    # real draft model.
    target: TinySpec
    draft_layers: int  # the draft is the target's first blocks (an early-exit draft)
    extra_tokens: int  # filler tokens so the output layer and sampling have real width


SCALES = {
    # Seconds on two CPU cores; what the test suite and --cpu-dry-run use.
    "cpu": Scale(TinySpec(n_embd=128, n_head=4, n_head_kv=2, n_layer=8, n_ff=256,
                          residual_scale=0.15, seed=11), 2, 200),
    # ~1.7 GB of F32 weights, 0.42 B parameters: real work for a GPU, written in seconds.
    "gpu": Scale(TinySpec(n_embd=1536, n_head=12, n_head_kv=4, n_layer=16, n_ff=4096,
                          n_ctx_train=4096, residual_scale=0.1, seed=11), 2, 4000),
    # ~4.3 GB, 1.1 B parameters (TinyLlama's shape).
    "large": Scale(TinySpec(n_embd=2048, n_head=32, n_head_kv=4, n_layer=22, n_ff=5632,
                            n_ctx_train=4096, residual_scale=0.08, seed=11), 3, 4000),
}

PROMPTS = [
    "write a short story about a robot who learns to paint.",
    "explain why the sky is blue, in three sentences.",
    "list five things to pack for a trip to the mountains.",
    "what is the difference between a list and a tuple?",
]


def write_pair(out: Path, scale: Scale) -> tuple[Path, Path]:
    tokens = vocabulary(extra=scale.extra_tokens)
    target = write_tiny_model(out / "proof-target.gguf", scale.target, tokens=tokens,
                              name="proof-target")
    draft = write_tiny_model(out / "proof-draft.gguf", scale.target, tokens=tokens,
                             keep_layers=scale.draft_layers, name="proof-draft")
    return target, draft


def open_pair(target: Path, draft: Path, home: Path, n_ctx: int, threads: int) -> Runtime:
    catalog = load_catalog()
    selection = Selection(model_from_ref(catalog, str(target)), model_from_ref(catalog, str(draft)))
    every_layer = ModelSettings(n_gpu_layers=-1, fit_layers=False)
    options = RuntimeOptions(context=ContextSettings(n_ctx=n_ctx, n_threads=threads),
                             target=every_layer, draft=every_layer)
    return Runtime.open(selection, ModelResolver(catalog, AppPaths(home, home, home)), options)


def speculative_decoder(runtime: Runtime, gamma: int) -> Decoder | None:
    """The speculative decoder, or None where this build has only plain decoding."""
    params = inspect.signature(runtime.decoder).parameters
    dec = runtime.decoder(plain=False, gamma=gamma) if "gamma" in params else runtime.decoder()
    return None if isinstance(dec, PlainDecoder) else dec


def run_once(decoder: Decoder, prompt: list[int],
             settings: SamplerSettings) -> tuple[list[int], GenerationStats]:
    run = run_to_end(decoder, prompt, settings)
    return run.tokens, run.stats


def near_tie(runtime: Runtime, prefix: list[int]) -> float:
    """The target's top-1 minus top-2 logit after ``prefix`` (fresh prefill)."""
    ctx = runtime.target_ctx
    ctx.clear()
    row = np.sort(ctx.decode(prefix)[0].astype(np.float64))
    ctx.clear()
    return float(row[-1] - row[-2])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_proof", description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", choices=SCALES, default="gpu")
    ap.add_argument("--out", type=Path, help="folder for the models (default: a temp folder)")
    ap.add_argument("--tokens", type=int, default=128, help="tokens per reply")
    ap.add_argument("--prompts", type=int, default=len(PROMPTS))
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--require-gpu", action="store_true",
                    help="fail unless every layer of both models is on a GPU")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="specchat-proof-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        return _prove(args, out)


def _prove(args: argparse.Namespace, out: Path) -> int:
    say = print
    report: dict[str, Any] = {"scale": args.scale, "backend": backend_label(), "devices": [
        {"name": d.name, "description": d.description, "kind": d.kind, "free": d.free,
         "total": d.total} for d in devices()]}
    say(f"backend: {report['backend']}")
    for d in report["devices"]:
        mem = f"{fmt_bytes(d['free'])} free of {fmt_bytes(d['total'])}" if d["total"] else ""
        say(f"  device {d['name']:8} {d['kind']:5} {d['description']} {mem}")
    t0 = time.perf_counter()
    target, draft = write_pair(out, SCALES[args.scale])
    report["write_s"] = round(time.perf_counter() - t0, 2)
    say(f"pair written in {report['write_s']} s: target {fmt_bytes(target.stat().st_size)}, "
        f"draft {fmt_bytes(draft.stat().st_size)}")
    t0 = time.perf_counter()
    runtime = open_pair(target, draft, out / "home", 1024 + args.tokens, args.threads)
    report["load_s"] = round(time.perf_counter() - t0, 2)
    placement = runtime.placement
    report["placement"] = placement.label
    report["models"] = [{"role": m.role, "gpu_layers": m.gpu_layers, "layers": m.layers,
                         "flash_attn": m.flash_attn, "gpu_bytes": m.gpu_bytes,
                         "host_bytes": m.host_bytes} for m in placement.models]
    say(f"loaded in {report['load_s']} s: {placement.label}")
    for m in placement.models:
        say(f"  {m.role}: {m.where}, flash attention {m.flash_attn}, "
            f"{fmt_bytes(m.gpu_bytes)} on GPU, {fmt_bytes(m.host_bytes)} on host")
    failures = []
    if args.require_gpu and not all(m.gpu_layers == m.layers for m in placement.models):
        failures.append("not every layer was offloaded to the GPU")

    plain = runtime.decoder(plain=True)
    spec = speculative_decoder(runtime, args.gamma)
    if spec is None:
        say("speculative decoder: not in this build (plain figures only)")
    engine = ChatEngine(plain)
    prompts = [engine.tokenize_chat([Message("user", p)])
               for p in (PROMPTS * 4)[: args.prompts]]
    rows = []
    for label, settings in (("greedy", SamplerSettings(temperature=0, max_tokens=args.tokens)),
                            ("T=0.7", SamplerSettings(temperature=0.7, seed=7,
                                                      max_tokens=args.tokens))):
        run_once(plain, prompts[0], settings.with_(max_tokens=8))  # warm-up (kernels, graphs)
        figures: dict[str, list[GenerationStats]] = {"plain": [], "speculative": []}
        for i, prompt in enumerate(prompts):
            p_ids, p_stats = run_once(plain, prompt, settings)
            figures["plain"].append(p_stats)
            if spec is None:
                continue
            s_ids, s_stats = run_once(spec, prompt, settings)
            figures["speculative"].append(s_stats)
            if label == "greedy" and s_ids != p_ids:
                at = next((j for j, (a, b) in enumerate(zip(p_ids, s_ids, strict=False))
                           if a != b), min(len(p_ids), len(s_ids)))
                gap = near_tie(runtime, prompt + p_ids[:at])
                failures.append(f"prompt {i}: greedy speculative output differs from plain at "
                                f"token {at} (target's top-2 logit gap there: {gap:.2e})")
        rows += [_row(label, mode, st) for mode, st in figures.items() if st]
    runtime.close()
    report["rows"] = rows
    say("")
    say(f"{'sampling':8} {'decoder':12} {'tokens':>7} {'tok/s':>8} {'α':>5} {'τ':>5} {'× plain':>8}")
    base = {r["sampling"]: r["tok_s"] for r in rows if r["decoder"] == "plain"}
    for r in rows:
        ratio = r["tok_s"] / base[r["sampling"]] if base.get(r["sampling"]) else 0.0
        r["vs_plain"] = round(ratio, 3)
        alpha = f"{r['alpha']:.2f}" if r["alpha"] is not None else "-"
        tau = f"{r['tau']:.2f}" if r["tau"] is not None else "-"
        say(f"{r['sampling']:8} {r['decoder']:12} {r['tokens']:>7} {r['tok_s']:>8.1f} "
            f"{alpha:>5} {tau:>5} {ratio:>8.2f}")
    exact = spec is not None and not any("differs" in f for f in failures)
    report["greedy_exact"] = exact if spec is not None else None
    report["failures"] = failures
    say("")
    if spec is not None:
        say("greedy exactness: " + ("speculative == plain on every prompt" if exact else "FAILED"))
    for f in failures:
        say(f"FAIL: {f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 1 if failures else 0


def _row(sampling: str, decoder: str, stats: list[GenerationStats]) -> dict[str, Any]:
    tokens = sum(s.generated_tokens for s in stats)
    decode_s = sum(s.decode_s for s in stats)
    accepted = sum(s.accepted for s in stats)
    rejections = sum(s.rejections for s in stats)
    forwards = sum(s.target_forwards for s in stats)
    n = tokens - len(stats)  # decode time runs from the first token to the last
    return {"sampling": sampling, "decoder": decoder, "tokens": tokens,
            "tok_s": round(n / decode_s, 1) if decode_s > 0 else 0.0,
            "alpha": acceptance(accepted, rejections), "tau": tokens_per_pass(tokens, forwards)}


if __name__ == "__main__":
    sys.exit(main())
