"""Write tiny, real GGUF models (random weights, small vocabulary) that llama.cpp loads.

A 64-token vocabulary gives next-token distributions that a χ² test can count, and a whole
model is ~100 KB, so unit tests run real llama.cpp inference in milliseconds. A *draft* for a
tiny target is the same network with noise added to its weights: same vocabulary, a tunable
acceptance rate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# A template that takes tools, in the format of Qwen2.5's and Hermes' (written for the tests:
# the tool list in the system turn, each call in <tool_call> tags, results in <tool_response>).
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "Tools:\n<tools>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>\n"
    "Call one as <tool_call>\n{\"name\": ..., \"arguments\": {...}}\n</tool_call><|im_end|>\n"
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first %}"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n"
    "</tool_response><|im_end|>\n"
    "{% elif m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n"
    "{% for c in m.tool_calls %}<tool_call>\n{\"name\": \"{{ c.function.name }}\", "
    "\"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Byte-level BPE spells ' ' as 'Ġ' and '\n' as 'Ċ'.
CHARS = list("abcdefghijklmnopqrstuvwxyz") + list("ĠĊ.,!?'") + list("0123456789")
MERGES = ["Ġ t", "t h", "Ġ a", "e r", "i n", "o n"]
# Qwen2.5-Coder's fill-in-the-middle tokens, by their GGUF key (tokenizer.ggml.fim_KEY_token_id).
FIM_TOKENS = {"pre": "<|fim_prefix|>", "suf": "<|fim_suffix|>", "mid": "<|fim_middle|>",
              "pad": "<|fim_pad|>", "rep": "<|repo_name|>", "sep": "<|file_sep|>"}


@dataclass(frozen=True)
class TinySpec:
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 4
    n_layer: int = 2
    n_ff: int = 128
    n_ctx_train: int = 1024
    logit_scale: float = 6.0  # larger → peakier next-token distributions
    special_scale: float = 0.05  # output rows of special tokens: small → replies rarely end
    seed: int = 0
    # Size of each block's writes to the residual stream (attn_output, ffn_down): small → every
    # block nudges the prediction a little, so a draft made of the first blocks often agrees.
    residual_scale: float = 1.0


def vocabulary(extra: int = 0) -> list[str]:
    """The token texts: specials, characters, merge results, then ``extra`` filler tokens."""
    merged = [m.replace(" ", "") for m in MERGES]
    base = SPECIALS + CHARS + merged
    return base + [f"<x{i}>" for i in range(extra)]


# JSON's punctuation, alone and in the pairs a JSON reply is made of (keys' quotes and colons):
# a vocabulary a grammar-constrained reply can be written in.
JSON_TOKENS = [*'{}[]":-', '{"', '":', '",', '"}', '","', '":"', "true", "false", "null"]


def json_vocabulary() -> list[str]:
    """:func:`vocabulary` plus JSON's punctuation (:data:`JSON_TOKENS`) at its end."""
    return vocabulary() + JSON_TOKENS


def fim_vocabulary(texts: dict[str, str] | None = None) -> list[str]:
    """:func:`vocabulary` plus fill-in-the-middle tokens (Qwen's by default) at its end."""
    return vocabulary() + list((texts or FIM_TOKENS).values())


def fim_ids(tokens: list[str], texts: dict[str, str] | None = None) -> dict[str, int]:
    """The ids of ``texts``' FIM tokens in ``tokens``, by GGUF key, for ``write_tiny_model``."""
    return {k: tokens.index(t) for k, t in (texts or FIM_TOKENS).items()}


def few_shared_vocabulary(own: int = 40) -> list[str]:
    """A vocabulary sharing with :func:`vocabulary` only the specials, the pieces of the merges
    and their results (18 tokens), plus ``own`` tokens of its own: too few to draft through."""
    needed = sorted({c for m in MERGES for c in m.split(" ")})
    return SPECIALS + needed + [m.replace(" ", "") for m in MERGES] + [f"<z{i}>"
                                                                      for i in range(own)]


def _weights(spec: TinySpec, n_vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(spec.seed)
    e, f = spec.n_embd, spec.n_ff
    kv = e // spec.n_head * spec.n_head_kv

    def mat(rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)

    w: dict[str, np.ndarray] = {
        "token_embd.weight": mat(n_vocab, e, np.sqrt(e)),
        "output_norm.weight": np.ones(e, dtype=np.float32),
        "output.weight": mat(n_vocab, e, spec.logit_scale),
    }
    w["output.weight"][: len(SPECIALS)] *= spec.special_scale
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = np.ones(e, dtype=np.float32)
        w[p + "ffn_norm.weight"] = np.ones(e, dtype=np.float32)
        w[p + "attn_q.weight"] = mat(e, e)
        w[p + "attn_k.weight"] = mat(kv, e)
        w[p + "attn_v.weight"] = mat(kv, e)
        w[p + "attn_output.weight"] = mat(e, e, spec.residual_scale)
        w[p + "ffn_gate.weight"] = mat(f, e)
        w[p + "ffn_up.weight"] = mat(f, e)
        w[p + "ffn_down.weight"] = mat(e, f, spec.residual_scale)
    return w


def write_tiny_model(
    path: Path | str,
    spec: TinySpec = TinySpec(),
    *,
    noise_from: TinySpec | None = None,
    noise: float = 0.0,
    tokens: list[str] | None = None,
    bos_id: int = 0,
    eos_id: int = 2,
    add_bos: bool = False,
    chat_template: str | None = CHATML_TEMPLATE,
    name: str = "tiny",
    keep_layers: int | None = None,
    weights_hook: Callable[[dict[str, np.ndarray]], None] | None = None,
    with_vocabulary: bool = True,
    output_rows: dict[int, float] | None = None,
    fim: dict[str, int] | None = None,
) -> Path:
    """Write a tiny llama-architecture GGUF.

    With ``noise_from`` the weights are those of that spec plus Gaussian noise of relative size
    ``noise`` (``spec.seed`` seeds the noise): a draft model for that target. With
    ``keep_layers`` only the first blocks are written: an early-exit draft that is much cheaper
    than its target (the GPU check's bench pair). ``with_vocabulary=False`` leaves the
    tokenizer out of the metadata (a broken file, for tests); ``output_rows`` fills rows of the
    output matrix with a value (``{10: nan}``: token 10's logit is NaN, a broken model).
    ``weights_hook`` may change the weights in place before they are written (a model made to
    say something in particular). ``fim`` writes fill-in-the-middle token ids
    (``{"pre": id, "suf": id, "mid": id, ...}``, see :func:`fim_ids`) into the metadata; those
    tokens are control tokens, as rare in replies as the other specials.
    """
    path = Path(path)
    tokens = tokens if tokens is not None else vocabulary()
    n_vocab = len(tokens)
    if noise_from is not None:
        weights = _weights(noise_from, n_vocab)
        rng = np.random.default_rng(10_000 + spec.seed)
        for k, v in weights.items():
            if v.ndim == 2:
                weights[k] = (v + rng.standard_normal(v.shape) * noise * v.std()).astype(np.float32)
        spec = noise_from
    else:
        weights = _weights(spec, n_vocab)
    control = set(SPECIALS) | {tokens[i] for i in (fim or {}).values()}
    for i in (fim or {}).values():
        weights["output.weight"][i] *= spec.special_scale
    for row, value in (output_rows or {}).items():
        weights["output.weight"][row] = value
    if keep_layers is not None:
        spec = replace(spec, n_layer=keep_layers)
        weights = {k: v for k, v in weights.items()
                   if not k.startswith("blk.") or int(k.split(".")[1]) < keep_layers}

    if weights_hook is not None:
        weights_hook(weights)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_context_length(spec.n_ctx_train)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(spec.n_embd // spec.n_head)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(0)  # all F32
    if with_vocabulary:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        types = [
            gguf.TokenType.CONTROL if t in control else gguf.TokenType.NORMAL for t in tokens
        ]
        w.add_token_types(types)
        w.add_token_merges(MERGES)
        w.add_bos_token_id(bos_id)
        w.add_eos_token_id(eos_id)
        w.add_add_bos_token(add_bos)
        for key, token in (fim or {}).items():
            w.add_uint32(f"tokenizer.ggml.fim_{key}_token_id", token)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    for k, v in weights.items():
        w.add_tensor(k, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


MTP_ARCH = "glm4moe"  # the simplest architecture llama.cpp 0.3.36 runs MTP layers for


def write_tiny_mtp_model(path: Path | str, spec: TinySpec = TinySpec(), *, n_nextn: int = 1,
                         n_expert: int = 2, strip: bool = False, name: str = "tiny-mtp") -> Path:
    """Write a tiny GLM-4.5-style (``glm4moe``) GGUF whose last ``n_nextn`` blocks are MTP
    ("NextN") layers, stored as llama.cpp expects (see :mod:`specchat.models.mtp`).

    The trunk is ``spec.n_layer`` dense blocks; an MTP block is a mixture-of-experts block (the
    architecture requires it) plus its ``nextn.*`` tensors. ``strip=True`` keeps the metadata
    key but leaves the MTP blocks out, as some conversions do.
    """
    path = Path(path)
    tokens = vocabulary()
    n_vocab = len(tokens)
    rng = np.random.default_rng(spec.seed)
    e, f, hd = spec.n_embd, spec.n_ff, spec.n_embd // spec.n_head
    kv = hd * spec.n_head_kv
    total = spec.n_layer + n_nextn

    def mat(rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    t: dict[str, np.ndarray] = {"token_embd.weight": mat(n_vocab, e, np.sqrt(e)),
                                "output_norm.weight": ones(e),
                                "output.weight": mat(n_vocab, e, spec.logit_scale)}
    t["output.weight"][: len(SPECIALS)] *= spec.special_scale
    for i in range(total if not strip else spec.n_layer):
        p = f"blk.{i}."
        t |= {p + "attn_norm.weight": ones(e), p + "post_attention_norm.weight": ones(e),
              p + "attn_q.weight": mat(e, e), p + "attn_k.weight": mat(kv, e),
              p + "attn_v.weight": mat(kv, e), p + "attn_q.bias": np.zeros(e, np.float32),
              p + "attn_k.bias": np.zeros(kv, np.float32),
              p + "attn_v.bias": np.zeros(kv, np.float32),
              p + "attn_output.weight": mat(e, e, spec.residual_scale)}
        if i < spec.n_layer:
            t |= {p + "ffn_gate.weight": mat(f, e), p + "ffn_up.weight": mat(f, e),
                  p + "ffn_down.weight": mat(e, f, spec.residual_scale)}
            continue
        t |= {p + "ffn_gate_inp.weight": mat(n_expert, e),
              p + "exp_probs_b.bias": np.zeros(n_expert, np.float32),
              p + "ffn_gate_exps.weight": np.stack([mat(f, e) for _ in range(n_expert)]),
              p + "ffn_up_exps.weight": np.stack([mat(f, e) for _ in range(n_expert)]),
              p + "ffn_down_exps.weight": np.stack([mat(e, f) for _ in range(n_expert)]),
              p + "ffn_gate_shexp.weight": mat(f, e), p + "ffn_up_shexp.weight": mat(f, e),
              p + "ffn_down_shexp.weight": mat(e, f),
              p + "nextn.eh_proj.weight": mat(e, 2 * e), p + "nextn.enorm.weight": ones(e),
              p + "nextn.hnorm.weight": ones(e), p + "nextn.shared_head_norm.weight": ones(e)}
    w = gguf.GGUFWriter(str(path), MTP_ARCH)
    w.add_name(name)
    w.add_context_length(spec.n_ctx_train)
    w.add_embedding_length(e)
    w.add_block_count(total)
    w.add_feed_forward_length(f)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd // 2)
    w.add_rope_freq_base(10000.0)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(1)
    w.add_expert_shared_count(1)
    w.add_leading_dense_block_count(spec.n_layer)
    w.add_expert_feed_forward_length(f)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_uint32(f"{MTP_ARCH}.nextn_predict_layers", n_nextn)
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if x in SPECIALS else gguf.TokenType.NORMAL
                       for x in tokens])
    w.add_token_merges(MERGES)
    w.add_bos_token_id(0)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML_TEMPLATE)
    for k, v in t.items():
        w.add_tensor(k, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
