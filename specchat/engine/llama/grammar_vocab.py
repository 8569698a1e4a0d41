"""A model's vocabulary as llguidance's tokenizer: what a grammar's matcher masks tokens of.

Built once per loaded model (llguidance reads every token's bytes, ~1 s on a 150k vocabulary)
and kept while the model lives. Its end tokens are all the model's end-of-generation tokens,
so a reply whose grammar is complete may end with any of them (``<|im_end|>``, ``<|eot_id|>``).
"""

from __future__ import annotations

import threading
import warnings
import weakref

import llguidance
from llguidance.llamacpp import lltokenizer_from_vocab

from specchat.engine.llama.model import LlamaModel

_lock = threading.Lock()
_built: weakref.WeakKeyDictionary[LlamaModel, llguidance.LLTokenizer] = weakref.WeakKeyDictionary()


def grammar_tokenizer(model: LlamaModel) -> llguidance.LLTokenizer:
    """llguidance's tokenizer for ``model`` (built on first use, then cached)."""
    with _lock:
        tok = _built.get(model)
        if tok is None:
            ends = sorted(t for t in range(model.n_vocab) if model.is_eog(t))
            with warnings.catch_warnings():  # it reads attributes by a name llama-cpp-python
                # deprecates (llama_token_get_attr), once per token
                warnings.simplefilter("ignore", DeprecationWarning)
                tok = _built[model] = lltokenizer_from_vocab(
                    model.vocab, n_vocab=model.n_vocab, eos_token=ends or None)
        return tok
