from __future__ import annotations

from pathlib import Path

from specchat.devtools.tiny_models import TinySpec, vocabulary, write_tiny_model
from specchat.formats.gguf_file import read_header
from specchat.models.vocab_compat import Level, compare_vocab, verdict


def test_same_vocabulary_is_ok(tiny_target: Path, tiny_draft: Path) -> None:
    assert verdict(compare_vocab(read_header(tiny_target), read_header(tiny_draft))) is Level.OK


def test_padding_tail_is_a_warning(tiny_target: Path, tiny_other_vocab: Path) -> None:
    f = compare_vocab(read_header(tiny_target), read_header(tiny_other_vocab))
    assert verdict(f) is Level.WARN
    assert f[0].what == "vocab size" and "52 target, 60 draft" in f[0].message


def test_different_token_texts_are_refused(tmp_path: Path, tiny_target: Path) -> None:
    toks = vocabulary()
    toks[10], toks[11] = toks[11], toks[10]
    other = write_tiny_model(tmp_path / "swapped.gguf", TinySpec(seed=4), tokens=toks)
    f = compare_vocab(read_header(tiny_target), read_header(other))
    assert verdict(f) is Level.BAD
    assert f[0].what == "token texts" and "token 10" in f[0].message


def test_bos_difference_is_a_warning(tmp_path: Path, tiny_target: Path) -> None:
    other = write_tiny_model(tmp_path / "bos.gguf", TinySpec(seed=5), bos_id=1)
    f = compare_vocab(read_header(tiny_target), read_header(other))
    assert verdict(f) is Level.WARN and f[0].what == "BOS"
