"""A loaded model's vocabulary at the byte level: what cross-vocabulary drafting matches on;
and its fill-in-the-middle tokens."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import llama_cpp

from specchat.engine.llama.model import LlamaModel

_SPECIAL = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED


def is_special(model: LlamaModel, token: int) -> bool:
    """A control or user-defined token (its text is a marker, not bytes of the reply)."""
    return bool(llama_cpp.llama_vocab_get_attr(model.vocab, token) & _SPECIAL)


def piece(model: LlamaModel, token: int, special: bool) -> bytes:
    """The token's bytes (a special token's marker text when ``special``)."""
    buf = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_token_to_piece(model.vocab, token, buf, 64, 0, special)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(model.vocab, token, buf, -n, 0, special)
    return buf.raw[:n]


def tokenize_bytes(model: LlamaModel, data: bytes) -> list[int]:
    """``data`` in the model's own tokens: no BOS, special markers parsed."""
    n_max = len(data) + 8
    buf = (llama_cpp.llama_token * n_max)()
    n = llama_cpp.llama_tokenize(model.vocab, data, len(data), buf, n_max, False, True)
    if n < 0:
        n_max = -n
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(model.vocab, data, len(data), buf, n_max, False, True)
    return list(buf[:max(0, n)])


@dataclass(frozen=True)
class FimTokens:
    """A vocabulary's fill-in-the-middle tokens (Qwen2.5-Coder's ``<|fim_prefix|>``,
    ``<|fim_suffix|>``, ``<|fim_middle|>``; ``<|repo_name|>`` and ``<|file_sep|>`` for
    repository-level context, where the vocabulary has them)."""

    pre: int
    suf: int
    mid: int
    rep: int | None = None
    sep: int | None = None


def fim_tokens(model: LlamaModel) -> FimTokens | None:
    """The model's FIM tokens, None when it lacks any of prefix, suffix and middle.

    llama.cpp reads them from the GGUF's ``tokenizer.ggml.fim_{pre,suf,mid,rep,sep}_token_id``
    and, for files converted before those keys existed, finds them by their text
    (``<|fim_prefix|>``, ``<fim_prefix>``, ``<PRE>``, ...), so this asks it rather than the
    metadata alone.
    """
    v = model.vocab

    def known(t: int) -> int | None:
        return t if 0 <= t < model.n_vocab else None  # LLAMA_TOKEN_NULL is −1

    pre, suf, mid = (known(f(v)) for f in (llama_cpp.llama_vocab_fim_pre,
                                           llama_cpp.llama_vocab_fim_suf,
                                           llama_cpp.llama_vocab_fim_mid))
    if pre is None or suf is None or mid is None:
        return None
    return FimTokens(pre, suf, mid, known(llama_cpp.llama_vocab_fim_rep(v)),
                     known(llama_cpp.llama_vocab_fim_sep(v)))
