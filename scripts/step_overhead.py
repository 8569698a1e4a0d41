"""The speculative loop's own time per step against the time inside llama.cpp's decode calls.

On the tiny pair (real GGUF models of ~100 KB written by ``specchat.devtools.tiny_models``, so a
decode call costs little and the loop's Python is a large share of a step), each round runs the
same greedy reply once per setup — a draft-model chain, the n-gram lookup beside the draft
model, a token tree, Lookahead — the order alternating between rounds so a busy moment weighs
on every setup alike. The decoder's own figures (``SpecDetail.step_s`` and ``llama_s``) split
each step into time inside ``llama_decode`` (both models) and the rest: the loop's overhead, in
milliseconds per step and as a ratio to the decode time of the same run. A benchmark, not a test:
it checks only that every setup's output equals plain greedy decoding's.

    python scripts/step_overhead.py                      # 3 rounds of 96 tokens
    python scripts/step_overhead.py --rounds 5 --max-tokens 200
    python scripts/step_overhead.py --repeat 12   # a longer conversation (~600 prompt tokens)

With ``--target``/``--draft`` (GGUF files) it runs a real pair instead, such as qwen-coder's
(a 151,936-token vocabulary, where a full-vocabulary step in numpy costs more): there a greedy
output may part from plain decoding's after a near-tie (batched and single-token logits differ in
the last bits), which it reports rather than stops at.

    python scripts/step_overhead.py --threads 2 \
        --target ~/.cache/specchat-qwen/home/data/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
        --draft ~/.cache/specchat-qwen/home/data/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, not another one installed

from specchat.devtools.tiny_models import TinySpec, write_tiny_model  # noqa: E402
from specchat.engine.decode.decoding import Decoder, run_to_end  # noqa: E402
from specchat.engine.decode.plain import PlainDecoder  # noqa: E402
from specchat.engine.decode.sampling import SamplerSettings  # noqa: E402
from specchat.engine.decode.speculative import SpeculativeDecoder  # noqa: E402
from specchat.engine.decode.step_policy import FixedGamma  # noqa: E402
from specchat.engine.llama.context import LlamaContext  # noqa: E402
from specchat.engine.llama.model import LlamaModel  # noqa: E402
from specchat.engine.llama.model_settings import ContextSettings  # noqa: E402


def tiny_pair(where: Path) -> tuple[LlamaModel, LlamaModel]:
    """The tests' tiny pair (tests/conftest.py): a target and a noisy copy as its draft."""
    target = write_tiny_model(where / "target.gguf", TinySpec(seed=1), name="tiny-target")
    draft = write_tiny_model(where / "draft.gguf", TinySpec(seed=2), noise_from=TinySpec(seed=1),
                             noise=0.6, name="tiny-draft")
    return LlamaModel(target), LlamaModel(draft)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1,
                    help="the prompt's sentence this many times (costs that grow with the "
                    "conversation show up)")
    ap.add_argument("--target", type=Path, help="a real pair's target (GGUF) instead of the tiny one")
    ap.add_argument("--draft", type=Path, help="... and its draft")
    a = ap.parse_args()
    if (a.target is None) != (a.draft is None):
        raise SystemExit("--target and --draft go together")
    with tempfile.TemporaryDirectory() as tmp:
        real = a.target is not None
        tm, dm = (LlamaModel(a.target), LlamaModel(a.draft)) if real else tiny_pair(Path(tmp))
        settings = ContextSettings(n_ctx=2048 if real else 1024, n_threads=a.threads)
        tc, dc = LlamaContext(tm, settings), LlamaContext(dm, settings)
        prompt = tm.tokenize("the cat sat on the mat. " * a.repeat + "the cat sat on the")
        s = SamplerSettings(temperature=0, max_tokens=a.max_tokens)
        setups: dict[str, Callable[[], Decoder]] = {
            "model chain γ4": lambda: SpeculativeDecoder(tc, dc, FixedGamma(4)),
            "ngram,model γ4": lambda: SpeculativeDecoder(tc, dc, FixedGamma(4),
                                                         drafters=("ngram", "model")),
            "tree 8": lambda: SpeculativeDecoder(tc, dc, FixedGamma(8), drafters=("tree",)),
            "lookahead": lambda: SpeculativeDecoder(tc, None, FixedGamma(8),
                                                    drafters=("lookahead",)),
        }

        def once(decoder: Decoder) -> tuple[float, float, int, list[int]]:
            tc.clear()  # every run reads the prompt itself
            dc.clear()
            run = run_to_end(decoder, prompt, s, threading.Event())
            d = run.stats.detail
            steps = max(1, run.stats.steps)
            return ((d.step_s - d.llama_s) / steps * 1000, d.llama_s / steps * 1000,
                    run.stats.steps, run.tokens)

        _, _, _, plain = once(PlainDecoder(tc))
        for make in setups.values():  # warm every path's first shapes
            once(make())
        loop: dict[str, list[float]] = {m: [] for m in setups}
        ratio: dict[str, list[float]] = {m: [] for m in setups}
        pair = f"{a.target.name} + {a.draft.name}" if real else "tiny pair"
        print(f"{pair}, {len(prompt)} prompt tokens, {a.max_tokens} generated, greedy, "
              f"{a.threads} thread(s); per step: "
              "loop ms (outside llama_decode) / decode ms (inside) = overhead ratio")
        for r in range(a.rounds):
            names = list(setups) if r % 2 == 0 else list(reversed(setups))
            line = [f"round {r + 1}:"]
            for name in names:
                loop_ms, llama_ms, steps, tokens = once(setups[name]())
                if tokens != plain and not real:
                    raise SystemExit(f"{name}: output differs from plain greedy decoding")
                if tokens != plain:
                    line.append("(output parts from plain's after a near-tie)")
                loop[name].append(loop_ms)
                ratio[name].append(loop_ms / llama_ms if llama_ms > 0 else float("inf"))
                line.append(f"{name} {loop_ms:.3f}/{llama_ms:.3f} ms ({steps} steps)")
            print("  ".join(line), flush=True)
        for name in setups:
            print(f"{name:16} loop {statistics.median(loop[name]):.3f} ms/step, "
                  f"overhead {statistics.median(ratio[name]):.2f}× the decode time "
                  f"(median of {a.rounds}; min {min(ratio[name]):.2f}, max {max(ratio[name]):.2f})")
        tc.close()
        dc.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
