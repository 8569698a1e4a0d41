"""A loaded model's vocabulary at the byte level: what cross-vocabulary drafting matches on."""

from __future__ import annotations

import ctypes

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
