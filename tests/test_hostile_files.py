"""Broken and hostile model files (issue 12's cases): each is a one-line message naming what is
wrong, before llama.cpp sees the file — never a traceback, an abort or gigabytes of memory."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
import yaml

from specchat.cli.main import main
from specchat.devtools.hostile_gguf import layout, set_u32, variants
from specchat.devtools.local_hub import LocalHub
from specchat.devtools.tiny_models import TinySpec, vocabulary, write_tiny_model
from specchat.errors import ModelFileError
from specchat.formats.gguf_checks import validate, vocabulary_problem
from specchat.formats.gguf_file import DamagedFile, GgufHeader, read_header
from specchat.models import remote_header
from specchat.models.catalog import HfSource
from specchat.models.compat import check_files, facts_for_hub
from specchat.models.vocab_compat import Level
from specchat.paths import AppPaths

SPEC = TinySpec(seed=1)  # the tiny_target fixture's weights: same vocabulary


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("hostile")
    base = write_tiny_model(out / "base.gguf", SPEC, name="tiny-target")
    files = variants(base, out)
    tokens = vocabulary()
    tokens[40] = tokens[10]
    files["duplicate-tokens"] = write_tiny_model(out / "duplicate-tokens.gguf", SPEC,
                                                 tokens=tokens)
    files["no-vocabulary"] = write_tiny_model(out / "no-vocabulary.gguf", SPEC,
                                              with_vocabulary=False)
    return files


EXPECTED = {
    "tensor-type-999": r"tensor 0 \('token_embd.weight'\) type at byte \d+: unknown tensor "
                       "type 999",
    "n-dims-huge": r"tensor 0 \('token_embd.weight'\) n_dims at byte \d+: 4294967295 "
                   r"dimensions \(at most 4\)",
    "nested-arrays": r"metadata 'x.nested' at byte \d+: an array of arrays",
    "alignment-0": r"metadata 'general.alignment' at byte \d+: 0 is not a power of two",
    "alignment-u64": r"metadata 'general.alignment' at byte \d+: type uint64, expected uint32",
    "string-length-huge": r"metadata key 0 \(string length\) at byte 24: length "
                          "4,611,686,018,427,387,904 does not fit",
    "tensor-count-huge": r"tensor count at byte 8: length 1,099,511,627,776 does not fit",
    "truncated-half": r"truncated GGUF file \(0.2 MB of 0.4 MB\)",
    "offset-wrong": r"tensor 20 \('blk.1.ffn_down.weight'\) offset at byte \d+: 322,848, "
                    "expected 322,816",
    "duplicate-tokens": r"the token text 'h' twice \(ids 10 and 40\), which makes llama.cpp "
                        "abort",
    "no-vocabulary": r"it has no vocabulary \(no tokenizer.ggml.tokens in its metadata\)",
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_each_broken_file_is_refused_with_the_field_and_offset(broken: dict[str, Path],
                                                               case: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ModelFileError, match=EXPECTED[case]) as e:
            validate(broken[case])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "\n" not in str(e.value)
    assert peak < 4 << 20, f"{peak >> 20} MB to read a 0.4 MB file"


def test_a_huge_n_dims_in_a_large_file_costs_nothing(broken: dict[str, Path],
                                                     tmp_path: Path) -> None:
    """The issue's case: 491 MB, n_dims = 0xFFFFFFFF in one entry → 32 s and 3.9 GB before."""
    big = tmp_path / "big.gguf"
    big.write_bytes(broken["n-dims-huge"].read_bytes())
    with big.open("r+b") as f:
        f.truncate(491_400_064)  # sparse: the header is what matters
    tracemalloc.start()
    try:
        with pytest.raises(DamagedFile, match="4294967295 dimensions"):
            read_header(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20


def test_the_good_file_still_reads(broken: dict[str, Path]) -> None:
    h = validate(broken["tensor-type-999"].with_name("base.gguf"))
    assert h.metadata["tokenizer.ggml.tokens"] is None  # texts dropped after the check
    assert h.kinds["tokenizer.ggml.tokens"][2] == len(vocabulary())


def test_the_empty_token_rule_matches_llama_cpp(tmp_path: Path) -> None:
    # llama.cpp names an empty token "[EMPTY_<id>]": that may collide with a real token.
    tokens = vocabulary()
    tokens[30], tokens[31] = "", "[EMPTY_30]"
    p = write_tiny_model(tmp_path / "empty.gguf", SPEC, tokens=tokens)
    assert "'[EMPTY_30]' twice (ids 30 and 31)" in str(vocabulary_problem(read_header(p)))
    tokens[31] = "x-ok"
    assert vocabulary_problem(read_header(write_tiny_model(tmp_path / "ok.gguf", SPEC,
                                                           tokens=tokens))) is None


def test_tokens_are_compared_as_bytes_as_llama_cpp_does(tmp_path: Path) -> None:
    """Two invalid UTF-8 tokens both read as '\ufffd' but are different tokens: llama.cpp loads
    the file, so it must not be refused."""
    tokens: list[str | bytes] = list(vocabulary())
    tokens[40], tokens[41] = b"\xff", b"\xfe"
    p = write_tiny_model(tmp_path / "bytes.gguf", SPEC, tokens=tokens)  # type: ignore[arg-type]
    assert vocabulary_problem(read_header(p)) is None
    validate(p)
    tokens[41] = b"\xff"
    p = write_tiny_model(tmp_path / "same.gguf", SPEC, tokens=tokens)  # type: ignore[arg-type]
    assert "(ids 40 and 41)" in str(vocabulary_problem(read_header(p)))


def test_a_wrongly_typed_vocabulary_is_named(broken: dict[str, Path]) -> None:
    h = read_header(broken["tensor-type-999"].with_name("base.gguf"))
    kinds = dict(h.kinds)
    kinds["tokenizer.ggml.token_type"] = (9, 5, 3)  # int32, but shorter than the vocabulary
    short = GgufHeader(h.path, h.version, h.metadata, h.tensors, h.data_start, h.file_size,
                       kinds)
    assert vocabulary_problem(short) == (f"its tokenizer.ggml.token_type has 3 entries for "
                                         f"{len(vocabulary())} tokens")


# ------------------------------------------------------------------ models check / models pair

def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("case", ["truncated-half", "tensor-type-999", "n-dims-huge",
                                  "alignment-0", "offset-wrong"])
def test_models_check_says_damaged(home: AppPaths, tiny_target: Path, broken: dict[str, Path],
                                   case: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "models", "check", str(tiny_target), str(broken[case]))
    assert rc == 1
    assert "verdict: damaged" in out and "compatible" not in out
    assert "the draft is damaged" in out and "Traceback" not in out + err
    r = check_files(broken[case], tiny_target)
    assert r.headline == "damaged" and r.verdict is Level.BAD


def test_models_pair_refuses_a_truncated_draft(home: AppPaths, tiny_target: Path,
                                               broken: dict[str, Path],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "models", "pair", "cut", str(tiny_target),
                       str(broken["truncated-half"]))
    assert rc == 1
    assert "truncated GGUF file (0.2 MB of 0.4 MB)" in err and "Traceback" not in err
    saved = yaml.safe_load(home.user_catalog.read_text()) if home.user_catalog.exists() else {}
    assert "cut" not in (saved or {}).get("pairs", {})


@pytest.mark.parametrize("case", ["duplicate-tokens", "no-vocabulary"])
def test_models_check_names_a_vocabulary_llama_cpp_cannot_load(
        home: AppPaths, tiny_target: Path, broken: dict[str, Path], case: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "models", "check", str(tiny_target), str(broken[case]))
    assert rc == 1 and "verdict: incompatible" in out
    assert "vocabulary: the draft cannot be used: " in out and "Traceback" not in out + err


# --------------------------------------------------- as a user runs it: no abort, one line

def specchat(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECCHAT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "specchat", *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def test_ask_with_a_draft_llama_cpp_would_abort_on(tmp_path: Path, tiny_target: Path,
                                                   broken: dict[str, Path]) -> None:
    r = specchat(tmp_path / "home", "ask", "hi", "--model", str(tiny_target), "--draft",
                 str(broken["duplicate-tokens"]), "--max-tokens", "4")
    assert r.returncode == 1, r.stderr  # not 134 (SIGABRT from GGML_ASSERT)
    assert "the token text 'h' twice" in r.stderr and "Traceback" not in r.stderr
    r = specchat(tmp_path / "home", "ask", "hi", "--model", str(broken["duplicate-tokens"]),
                 "--max-tokens", "4")
    assert r.returncode == 1 and "the token text 'h' twice" in r.stderr, r.stderr
    r = specchat(tmp_path / "home", "ask", "hi", "--model", str(tiny_target), "--draft",
                 str(broken["no-vocabulary"]), "--max-tokens", "4")
    assert r.returncode == 1 and "has no vocabulary" in r.stderr
    assert "Traceback" not in r.stderr and "ValueError" not in r.stderr


def test_a_removed_ggml_type_is_as_unknown_as_999(broken: dict[str, Path],
                                                  tmp_path: Path) -> None:
    good = broken["tensor-type-999"].with_name("base.gguf").read_bytes()
    p = tmp_path / "q4_2.gguf"
    p.write_bytes(set_u32(good, layout(good).tensors[0].type_at, 4))  # Q4_2: removed
    with pytest.raises(DamagedFile, match="unknown tensor type 4"):
        validate(p)


def test_a_damaged_hub_file_is_named_from_its_first_bytes(hub: LocalHub,
                                                          broken: dict[str, Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A hostile length is judged against the Hub's file size: no fetching up to 160 MB."""
    monkeypatch.setattr(remote_header, "FIRST_BYTES", 1024)
    hub.add("bad/T", {"huge.gguf": broken["string-length-huge"],
                      "cut.gguf": broken["truncated-half"]})
    with pytest.raises(DamagedFile, match="length 4,611,686,018,427,387,904 does not fit"):
        facts_for_hub(HfSource("bad/T", ("huge.gguf",)), "bad/T:huge.gguf")
    assert len(hub.gets("huge.gguf")) == 1
    with pytest.raises(DamagedFile, match=r"truncated GGUF file \(0.2 MB of 0.4 MB\)"):
        facts_for_hub(HfSource("bad/T", ("cut.gguf",)), "bad/T:cut.gguf")
