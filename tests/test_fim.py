"""Fill-in-the-middle prompts from a model's own FIM tokens, on tiny real GGUFs: with the ids
in the metadata, found by their text (older conversions), and absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.devtools.tiny_models import (
    FIM_TOKENS,
    fim_ids,
    fim_vocabulary,
    write_tiny_model,
)
from specchat.engine.decode.fim import (
    SNIPPET,
    ExtraFile,
    FimUnsupportedError,
    fim_prompt,
)
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ModelSettings
from specchat.engine.llama.vocab import FimTokens, fim_tokens

# FIM tokens under texts llama.cpp does not know: only the metadata can name them.
ODD = {"pre": "<p>", "suf": "<s>", "mid": "<m>"}
VOCAB_ONLY = ModelSettings(vocab_only=True)


@pytest.fixture(scope="module")
def fim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fim-models")


def model(path: Path) -> LlamaModel:
    return LlamaModel(path, VOCAB_ONLY)


@pytest.fixture(scope="module")
def qwen_like(fim_dir: Path) -> LlamaModel:
    tokens = fim_vocabulary()
    return model(write_tiny_model(fim_dir / "q.gguf", tokens=tokens, fim=fim_ids(tokens)))


@pytest.fixture(scope="module")
def bare(fim_dir: Path) -> LlamaModel:
    """FIM tokens by metadata only, and no repository or file-separator token; BOS added."""
    tokens = fim_vocabulary(ODD)
    return model(write_tiny_model(fim_dir / "odd.gguf", tokens=tokens, fim=fim_ids(tokens, ODD),
                                  add_bos=True))


def ids(m: LlamaModel, text: str) -> list[int]:
    return m.tokenize(text, add_special=False, parse_special=False)


def test_the_ids_come_from_the_metadata_or_the_tokens_text(fim_dir: Path, qwen_like: LlamaModel,
                                                           bare: LlamaModel,
                                                           tiny_target: Path) -> None:
    n = len(fim_vocabulary()) - len(FIM_TOKENS)
    qwen = FimTokens(n, n + 1, n + 2, rep=n + 4, sep=n + 5)
    assert fim_tokens(qwen_like) == qwen
    # an older conversion without the keys: llama.cpp finds Qwen's tokens by their text
    tokens = fim_vocabulary()
    assert fim_tokens(model(write_tiny_model(fim_dir / "text.gguf", tokens=tokens))) == qwen
    assert fim_tokens(bare) == FimTokens(n, n + 1, n + 2)
    # the odd texts without the metadata are no FIM tokens at all, nor is a plain vocabulary
    plain_odd = write_tiny_model(fim_dir / "odd-plain.gguf", tokens=fim_vocabulary(ODD))
    assert fim_tokens(model(plain_odd)) is None
    assert fim_tokens(model(tiny_target)) is None
    # the repository and file-separator tokens end a middle, as llama.cpp counts them
    assert qwen_like.is_eog(n + 4) and qwen_like.is_eog(n + 5)


def test_the_prompt_is_prefix_suffix_middle(qwen_like: LlamaModel, bare: LlamaModel) -> None:
    f = fim_tokens(qwen_like)
    assert f is not None
    assert fim_prompt(qwen_like, "the cat", " sat") == [
        f.pre, *ids(qwen_like, "the cat"), f.suf, *ids(qwen_like, " sat"), f.mid]
    # markers in the text are text: a file may contain them
    assert fim_prompt(qwen_like, "<|fim_middle|>", "") == [
        f.pre, *ids(qwen_like, "<|fim_middle|>"), f.suf, f.mid]
    assert len(ids(qwen_like, "<|fim_middle|>")) > 1
    assert fim_prompt(qwen_like, [5, 6], "a") == [f.pre, 5, 6, f.suf, *ids(qwen_like, "a"), f.mid]
    b = fim_tokens(bare)
    assert b is not None
    assert fim_prompt(bare, "a", "b") == [bare.bos, b.pre, *ids(bare, "a"), b.suf,
                                          *ids(bare, "b"), b.mid]


def test_repository_context_where_the_vocabulary_has_its_tokens(qwen_like: LlamaModel,
                                                                bare: LlamaModel) -> None:
    f = fim_tokens(qwen_like)
    assert f is not None and f.rep is not None and f.sep is not None
    extra = [ExtraFile("a.py", "x = 1\n"), ExtraFile("b.py", "y = 2\n")]
    core = fim_prompt(qwen_like, "the", " end")
    files = [f.rep, *ids(qwen_like, "myproject\n"),
             f.sep, *ids(qwen_like, "a.py\n"), *ids(qwen_like, "x = 1\n"),
             f.sep, *ids(qwen_like, "b.py\n"), *ids(qwen_like, "y = 2\n"),
             f.sep, *ids(qwen_like, "filename\n")]
    whole = fim_prompt(qwen_like, "the", " end", extra=extra, repo_level=True, limit=1000)
    assert whole == files + core
    # a limit cuts the repository part from its front, never the prefix or the suffix
    cut = fim_prompt(qwen_like, "the", " end", extra=extra, repo_level=True,
                     limit=len(core) + 7)
    assert cut == files[-7:] + core
    assert fim_prompt(qwen_like, "the", " end", extra=extra, repo_level=True, limit=3) == core
    # no extra files: no repository header, the completion's own prompt
    assert fim_prompt(qwen_like, "the", " end", repo_level=True, limit=1000) == core
    # without a file separator, a plain-text line between the files (llama-server's)
    b = fim_tokens(bare)
    assert b is not None
    got = fim_prompt(bare, "a", "b", extra=extra[:1], repo_level=True, limit=1000)
    assert got == [bare.bos, *ids(bare, SNIPPET), *ids(bare, "x = 1\n"),
                   *fim_prompt(bare, "a", "b")[1:]]


def test_a_model_without_fim_tokens_is_refused_by_name(tiny_target: Path) -> None:
    with pytest.raises(FimUnsupportedError, match="tiny-target has none"):
        fim_prompt(model(tiny_target), "a", "b")
