"""Catalog entries to files: derive with llama.cpp's quantizer, report state, remove."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.engine.model import LlamaModel
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
