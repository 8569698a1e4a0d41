"""How a model and its context are loaded: the settings the user (``config.yaml``, the command
line) and the memory plan choose, with llama.cpp's names for them."""

from __future__ import annotations

from dataclasses import dataclass

import llama_cpp

from specchat.engine.llama.hardware import local_gpu_offload, math_cores


def default_threads() -> int:
    """llama.cpp's own default (llama-server, llama-bench): one thread per physical core that
    does the math, on this process's CPUs (see :func:`hardware.math_cores`)."""
    return math_cores()


@dataclass(frozen=True)
class ModelSettings:
    n_gpu_layers: int = -1  # -1 = all layers (when the build can offload), 0 = CPU only
    main_gpu: int | None = None  # None: layers spread over every GPU; N: the whole model on GPU N
    use_mmap: bool = True
    # With n_gpu_layers == -1: Runtime.open's memory check offloads only as many layers as fit.
    fit_layers: bool = True
    vocab_only: bool = False  # the tokenizer alone (no weights): for comparing vocabularies
    # Also load the file's MTP (nextn) layers, which llama.cpp skips by default: the "mtp"
    # drafter runs them (see engine.drafters.mtp).
    load_mtp: bool = False
    # llama.cpp RPC servers ("HOST:PORT") this model's offloaded layers spread over (the target's
    # --rpc); a model without them stays on this machine's devices (see engine.llama.rpc).
    rpc: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContextSettings:
    n_ctx: int = 4096  # 0 = the model's training context
    n_batch: int = 512
    n_threads: int = 0  # 0 = default_threads()
    n_threads_batch: int = 0
    flash_attn: str = "auto"  # auto (off without GPU offload, see flash_attention) | on | off
    type_k: str = "f16"
    type_v: str = "f16"
    # Sequences the KV cache can tell apart: a token tree verified in one batch gives each
    # root-to-leaf path its own sequence id, so this bounds a tree's leaves. The cache is
    # unified (one buffer shared by all sequences), so it costs no memory.
    n_seq_max: int = 16


FLASH_TYPES = {"auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
          "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
          "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED}
FLASH_ATTN_MODES = tuple(FLASH_TYPES)
# KV cache element types llama.cpp accepts (enum ggml_type values).
KV_CACHE_TYPES = {"f32": 0, "f16": 1, "bf16": 30, "q8_0": 8, "q5_1": 7, "q5_0": 6, "q4_1": 3,
                  "q4_0": 2, "iq4_nl": 20}


def flash_attention(setting: str, type_v: str = "f16") -> str:
    """Resolve "auto": off on a CPU-only build, llama.cpp's own choice otherwise.

    On the CPU, llama.cpp's flash-attention kernel makes logits depend more on how tokens are
    batched (a row verified in a batch of γ + 1 vs the same token decoded alone) where the rest
    of the model barely does: float weights (the demo's F32 target: top-token gaps move by up
    to 0.015 logits with it, 0.006 without). That is enough to flip a near-tie — seen on the
    demo pair, Spec-Bench writing #81, token 6, top-2 gap 8e-5 — so greedy speculative output
    would part from greedy plain output. Quantized weights move by 0.3–0.5 logits either way
    (Q4_K_M, Q4_1), so there it neither helps nor hurts exactness; and on a CPU it bought no
    speed: decoding and the checks ran slower with it, a 2,000-token read no faster
    (``scripts/batch_rounding.py``, ``scripts/engine_vs_llama_bench.py``; docs/performance.md).

    Models spread over RPC servers count as on the CPU here: what the servers run on is not known.
    A quantized V cache needs flash attention, so there "auto" stays llama.cpp's choice (on): the
    user picked memory over bit-for-bit batch independence.
    """
    if setting not in FLASH_TYPES:
        setting = "auto"
    quantized_v = type_v not in ("f32", "f16", "bf16")
    if setting == "auto" and not quantized_v and not local_gpu_offload():
        return "off"
    return setting
