"""The hidden-state API: llama.cpp's post-norm final states beside the logits, on real models."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.hidden_output import HiddenStateError
from specchat.engine.llama.hidden_states import states_over
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.errors import Cancelled
from specchat.models.heads.output_matrix import output_rows


def _output_matrix(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The output matrix as the heads read it, and the final norm's gain (F32 in these files)."""
    from specchat.formats.gguf_file import read_header

    header = read_header(path, token_texts=False)
    norm = next(t for t in header.tensors if t.name == "output_norm.weight")
    g = np.memmap(path, dtype=np.float32, mode="r", offset=header.data_start + norm.offset,
                  shape=norm.shape)
    return output_rows(path), np.array(g)


def _ctx(path: Path) -> LlamaContext:
    return LlamaContext(LlamaModel(path), ContextSettings(n_ctx=256, n_batch=64, n_threads=1))


def _check_post_norm(path: Path, text: str) -> None:
    ctx = _ctx(path)
    tokens = ctx.model.tokenize(text)
    plain = ctx.decode(tokens, logits="all").copy()
    ctx.truncate(0)
    d = ctx.n_embd
    logits, hidden = ctx.decode_with_hidden(tokens)
    assert hidden.shape == (len(tokens), d)
    np.testing.assert_array_equal(logits, plain)  # turning hidden states on changes no logit
    w, g = _output_matrix(path)
    # hidden @ Wᵀ is the logits: the state is the one the output matrix reads (post-norm) ...
    recon = hidden.astype(np.float64) @ w.T.astype(np.float64)
    scale = float(np.abs(logits).max())
    assert float(np.abs(recon - logits).max()) < 1e-4 * max(scale, 1.0)
    assert (recon.argmax(1) == logits.argmax(1)).all()
    # ... and RMS-normalised: divided by the norm's gain, every row has RMS 1.
    rms = np.sqrt(((hidden / g) ** 2).mean(axis=1))
    np.testing.assert_allclose(rms, 1.0, rtol=1e-3)
    assert ctx.last_hidden() is not None
    # Embeddings are off again: a last-row decode reads the last row (with them on,
    # llama.cpp would output every row and the first would be read as the last).
    ctx.truncate(0)
    np.testing.assert_allclose(ctx.decode(tokens, logits="last")[0], plain[-1], atol=1e-4)
    assert ctx.last_hidden() is None  # that decode made the states stale


def test_tiny_model_states_are_post_norm(tiny_target: Path) -> None:
    _check_post_norm(tiny_target, "the cat sat on a mat. then it ran off")


def test_demo_target_states_are_post_norm(demo_files: tuple[Path, Path]) -> None:
    _check_post_norm(demo_files[0], "The quick brown fox jumps over the lazy dog. Once upon")


def test_tree_rows_match_linear_rows(tiny_target: Path) -> None:
    ctx = _ctx(tiny_target)
    tokens = ctx.model.tokenize("the cat sat on the mat")
    _, lin = ctx.decode_with_hidden(tokens)
    lin = lin.copy()
    ctx.truncate(3)
    # Nodes 1 and 2 both follow node 0: node 1 is tokens[4] after tokens[3], as in the line.
    logits, tree = ctx.decode_tree_with_hidden((-1, 0, 0), [0, 1, 2],
                                           [tokens[3], tokens[4], tokens[5]])
    assert tree.shape[0] == logits.shape[0] == 3
    np.testing.assert_allclose(tree[0], lin[3], atol=1e-5)
    np.testing.assert_allclose(tree[1], lin[4], atol=1e-5)
    assert not np.allclose(tree[2], lin[5])  # tokens[5] after tokens[3], not after tokens[4]


def test_states_over_chunks_match_one_batch(tiny_target: Path) -> None:
    ctx = _ctx(tiny_target)
    tokens = ctx.model.tokenize("the cat sat on a mat and then the dog ran after it, fast")
    logits, whole = ctx.decode_with_hidden(tokens)
    whole, best = whole.copy(), logits.argmax(1)
    seen: list[tuple[int, int]] = []
    chunks = list(states_over(ctx, tokens, chunk=5, top=3,
                              progress=lambda done, total: seen.append((done, total))))
    assert [c.start for c in chunks] == list(range(0, len(tokens), 5))
    hidden = np.concatenate([c.hidden for c in chunks])
    np.testing.assert_allclose(hidden, whole, atol=1e-4)
    ids = np.concatenate([c.top_ids for c in chunks])
    probs = np.concatenate([c.top_probs for c in chunks])
    assert (ids[:, 0] == best).all()
    assert (np.diff(probs, axis=1) <= 0).all() and (probs.sum(1) <= 1.0 + 1e-5).all()
    assert seen[-1] == (len(tokens), len(tokens))
    assert ctx.tokens == []


def test_states_over_cancels_between_chunks(tiny_target: Path) -> None:
    ctx = _ctx(tiny_target)
    cancel = threading.Event()
    tokens = ctx.model.tokenize("the cat sat on a mat and then the dog ran")
    it = states_over(ctx, tokens, chunk=4, cancel=cancel)
    next(it)
    cancel.set()
    with pytest.raises(Cancelled):
        next(it)
    assert ctx.tokens == []


def test_no_hidden_states_is_a_clear_error(tiny_target: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import llama_cpp

    ctx = _ctx(tiny_target)
    assert ctx.last_hidden() is None
    monkeypatch.setattr(llama_cpp, "llama_get_embeddings", lambda _ctx: None)
    with pytest.raises(HiddenStateError, match="returned no hidden states for target.gguf"):
        ctx.decode_with_hidden(ctx.model.tokenize("the cat"))
