"""The pair check on real (tiny) GGUF files: verdicts, plain-words reasons, advice."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.devtools.local_hub import LocalHub
from specchat.devtools.tiny_models import (
    TinySpec,
    few_shared_vocabulary,
    vocabulary,
    write_tiny_model,
)
from specchat.models import remote_header
from specchat.models.catalog import HfSource, load_catalog
from specchat.models.compat import check_files, check_pair, facts_for_hub, facts_for_path
from specchat.models.vocab_compat import Level

SMALL = TinySpec(n_embd=32, n_head=2, n_head_kv=2, n_layer=1, n_ff=64, seed=7)


@pytest.fixture(scope="module")
def small_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("c") / "small.gguf", SMALL, name="small")


def test_smaller_draft_with_the_same_vocabulary_is_compatible(tiny_target: Path,
                                                               small_draft: Path) -> None:
    r = check_files(tiny_target, small_draft)
    assert r.verdict is Level.OK and r.headline == "compatible"
    assert r.size_ratio is not None and r.size_ratio < 0.3
    whats = {f.what for f in r.findings}
    assert {"vocabulary", "size"} <= whats and not r.problems
    assert not r.suggestions


def test_a_draft_as_large_as_the_target_is_flagged(tiny_target: Path, tiny_draft: Path) -> None:
    r = check_files(tiny_target, tiny_draft)
    assert r.verdict is Level.WARN and r.headline == "compatible with warnings"
    (size,) = r.problems
    assert size.what == "size" and "as large as the target" in size.message
    assert r.suggestions  # always something to try instead


def test_small_padding_difference_is_a_warning(tiny_target: Path, tmp_path: Path) -> None:
    other = write_tiny_model(tmp_path / "pad.gguf", SMALL, tokens=vocabulary(extra=8))
    r = check_files(tiny_target, other)
    assert r.verdict is Level.WARN
    assert r.problems[0].what == "vocab size" and "52 target, 60 draft" in r.problems[0].message


def test_a_larger_other_vocabulary_drafts_through_the_shared_tokens(tiny_target: Path,
                                                                    tmp_path: Path) -> None:
    other = write_tiny_model(tmp_path / "big.gguf", SMALL,
                             tokens=[*vocabulary(), *(f"word{i}" for i in range(400))])
    r = check_files(tiny_target, other)
    assert r.verdict is Level.WARN and r.headline == "compatible with warnings"
    assert r.problems[0].message.startswith(
        "different vocabularies: drafting through their 52 shared tokens (")


def test_same_size_different_texts_drafts_through_the_shared_tokens(tiny_target: Path,
                                                                    tmp_path: Path) -> None:
    toks = vocabulary()
    toks[20], toks[21] = toks[21], toks[20]
    other = write_tiny_model(tmp_path / "swap.gguf", SMALL, tokens=toks)
    r = check_files(tiny_target, other)
    assert r.verdict is Level.WARN
    assert "drafting through their 52 shared tokens" in r.problems[0].message


def test_too_few_shared_tokens_is_incompatible(tiny_target: Path, tmp_path: Path) -> None:
    other = write_tiny_model(tmp_path / "few.gguf", SMALL, tokens=few_shared_vocabulary())
    r = check_files(tiny_target, other)
    assert r.verdict is Level.BAD and r.headline == "incompatible"
    bad = r.problems[0]
    assert bad.what == "token texts" and "sharing only 18 of the target's 52 tokens" in bad.message


def test_different_bos_is_a_warning(tiny_target: Path, tmp_path: Path) -> None:
    other = write_tiny_model(tmp_path / "bos.gguf", SMALL, bos_id=1)
    r = check_files(tiny_target, other)
    assert r.verdict is Level.WARN
    assert [f.what for f in r.problems] == ["BOS"]
    assert "BOS token differs (target 0, draft 1)" in r.problems[0].message


def test_not_a_gguf_file_is_incompatible_with_the_reason(tiny_target: Path,
                                                         tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"<!doctype html><p>Not found</p>" * 4)
    r = check_files(tiny_target, junk)
    assert r.verdict is Level.BAD and r.draft is None
    assert "the draft cannot be read" in r.findings[0].message
    assert "not a GGUF file" in r.findings[0].message


def test_chat_template_and_context_differences_are_warnings(tiny_target: Path,
                                                            tmp_path: Path) -> None:
    spec = TinySpec(n_embd=32, n_head=2, n_head_kv=2, n_layer=1, n_ff=64, n_ctx_train=256)
    other = write_tiny_model(tmp_path / "tmpl.gguf", spec, chat_template="{{ messages }}")
    r = check_files(tiny_target, other)
    assert {f.what for f in r.problems} == {"chat template", "context"}
    assert "past 256 tokens" in next(f.message for f in r.problems if f.what == "context")


def test_advice_names_smaller_models_of_the_family() -> None:
    cat = load_catalog()
    # A header whose name says Qwen2.5 7B: the catalog's 0.5B Qwen2.5 drafts are suggested.
    from specchat.formats.gguf_file import GgufHeader
    from specchat.models.compat import ModelFacts

    h = GgufHeader(Path("Qwen2.5-7B-Instruct-Q4_K_M.gguf"), 3,
                   {"general.name": "Qwen2.5 7B Instruct", "tokenizer.ggml.tokens": ["a"]})
    t = ModelFacts("Qwen2.5-7B-Instruct-Q4_K_M.gguf", h, 7_600_000_000, 4_700_000_000)
    d = ModelFacts("other", h, 7_000_000_000, 4_000_000_000)
    r = check_pair(t, d, cat)
    assert any("same family (qwen2.5), smaller size: try qwen2.5-0.5b-instruct-q4_k_m" in s
               for s in r.suggestions)


def test_a_hub_file_is_checked_from_its_header_alone(hub: LocalHub, tiny_target: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote_header, "FIRST_BYTES", 1024)  # force the prefix to grow
    hub.add("tiny/T", {"t.gguf": tiny_target})
    remote = facts_for_hub(HfSource("tiny/T", ("t.gguf",)), "tiny/T:t.gguf")
    local = facts_for_path(tiny_target)
    assert remote.n_params == local.n_params and remote.weight_bytes == local.weight_bytes
    assert remote.header.metadata["tokenizer.ggml.tokens"] == \
        local.header.metadata["tokenizer.ggml.tokens"]
    gets = hub.gets("t.gguf")
    assert len(gets) >= 2 and all(g.range for g in gets)
    fetched = sum(int(g.range.split("-")[1]) + 1 - int(g.range[6:].split("-")[0]) for g in gets)
    assert fetched < tiny_target.stat().st_size
