"""User catalog writes, new entries, local model discovery, draft candidates, pair saving."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specchat.devtools.tiny_models import (
    TinySpec,
    few_shared_vocabulary,
    write_tiny_model,
)
from specchat.errors import CatalogError
from specchat.models.catalog import HfSource, ModelEntry, PairEntry, PathSource, load_catalog
from specchat.models.compat import facts_for_path
from specchat.models.entries import file_slug, hub_entry, path_entry
from specchat.models.families import guess_family, params_value
from specchat.models.hub import HubRef
from specchat.models.local_files import find_local_models
from specchat.models.pairing import (
    draft_candidates,
    save_pair,
    self_draft_options,
    suggest_pair_name,
)
from specchat.models.resolver import ModelResolver, model_from_ref
from specchat.models.user_catalog import update_user_catalog
from specchat.models.vocab_compat import Level
from specchat.paths import AppPaths

SMALL = TinySpec(n_embd=32, n_head=2, n_head_kv=2, n_layer=1, n_ff=64, seed=7)


def entry(mid: str, path: str = "/x/m.gguf") -> ModelEntry:
    return ModelEntry(mid, mid, PathSource(Path(path)))


def test_user_catalog_keeps_entries_and_replaces_by_id(tmp_path: Path) -> None:
    f = tmp_path / "models.yaml"
    f.write_text("# my notes\nmodels:\n  - id: mine\n    source: {kind: path, path: /a.gguf}\n")
    update_user_catalog(f, models=[entry("new")], pairs=[PairEntry("p", "mine", "new", 3)])
    cat = load_catalog(f)
    assert {"mine", "new"} <= set(cat.models) and cat.pair("p").gamma == 3
    update_user_catalog(f, pairs=[PairEntry("p", "mine", "new", 5)])
    assert load_catalog(f).pair("p").gamma == 5
    assert (tmp_path / "models.yaml.bak").read_text().count("id: p") == 1
    update_user_catalog(f, remove_pairs=["p"])
    assert "p" not in load_catalog(f).pairs and "mine" in load_catalog(f).models


def test_a_broken_user_catalog_is_never_overwritten(tmp_path: Path) -> None:
    f = tmp_path / "models.yaml"
    f.write_text("models: [oops\n")
    with pytest.raises(CatalogError, match="not valid YAML"):
        update_user_catalog(f, models=[entry("new")])
    assert f.read_text() == "models: [oops\n"


def test_a_catalog_that_would_not_load_is_not_written(tmp_path: Path) -> None:
    f = tmp_path / "models.yaml"
    with pytest.raises(CatalogError, match="not saved .* draft 'ghost' is not a known model"):
        update_user_catalog(f, pairs=[PairEntry("p", "smollm2-135m-instruct-f32", "ghost")])
    assert not f.exists()


def test_new_entries_reuse_catalog_ids_and_never_clash() -> None:
    cat = load_catalog()
    known = hub_entry(cat, HubRef("Qwen/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf"))
    assert known.id == "qwen3-0.6b-q8_0"  # the catalog's own entry, not a duplicate
    split = hub_entry(cat, HubRef("me/X-GGUF", "x-7B-Q4_K_M-00001-of-00003.gguf"))
    assert isinstance(split.source, HfSource) and len(split.source.files) == 3
    assert split.id == "x-7b-q4_k_m" and split.params == "7B"
    assert file_slug("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf") == "meta-llama-3.1-8b-instruct-q4_k_m"
    assert guess_family(["Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"], cat) == "llama3"
    assert guess_family(["qwen2.5-coder-7b-instruct-q4_k_m.gguf"], cat) == "qwen2.5-coder"
    assert params_value("0.5B") == 5e8 and params_value("big") is None
    cat.models["x-7b-q4_k_m"] = split
    other = hub_entry(cat, HubRef("you/X-GGUF", "x-7B-Q4_K_M-00001-of-00003.gguf"))
    assert other.id == "x-7b-q4_k_m-2"
    assert model_from_ref(cat, "Qwen/Qwen3-0.6B-GGUF:Qwen3-0.6B-Q8_0.gguf").id == known.id


def test_local_models_are_found_and_odd_files_skipped(tmp_path: Path, tiny_target: Path,
                                                      home: AppPaths,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    extra = tmp_path / "my models" / "org" / "repo"
    extra.mkdir(parents=True)
    shutil.copy(tiny_target, extra / "a.gguf")
    (extra / "mmproj-a-f16.gguf").write_bytes(b"x")
    (extra / "b-00001-of-00002.gguf").write_bytes(b"1" * 10)
    (extra / "b-00002-of-00002.gguf").write_bytes(b"2" * 5)
    (extra / "c-00001-of-00002.gguf").write_bytes(b"lonely")  # its second part is missing
    (extra / "d.gguf.partial").write_bytes(b"x")
    monkeypatch.setenv("SPECCHAT_MODEL_DIRS", str(tmp_path / "my models"))
    found = {m.path.name: m for m in find_local_models(home)}
    assert set(found) == {"a.gguf", "b-00001-of-00002.gguf"}
    assert found["b-00001-of-00002.gguf"].size == 15


def test_draft_candidates_put_compatible_drafts_first(tmp_path: Path, tiny_target: Path,
                                                      tiny_draft: Path, home: AppPaths,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # catalog models are not looked up on the Hub
    d = tmp_path / "models"
    d.mkdir()
    write_tiny_model(d / "small.gguf", SMALL)
    write_tiny_model(d / "alien.gguf", SMALL, tokens=few_shared_vocabulary())
    shutil.copy(tiny_draft, d / "same-size.gguf")
    shutil.copy(tiny_target, d / "target.gguf")
    monkeypatch.setenv("SPECCHAT_MODEL_DIRS", str(d))
    cat = load_catalog()
    resolver = ModelResolver(cat, home)
    target = path_entry(cat, d / "target.gguf")
    facts = facts_for_path(d / "target.gguf")
    cands = draft_candidates(resolver, target, facts, find_local_models(home))
    local = [c for c in cands if c.on_disk]
    assert [c.entry.name for c in local] == ["small.gguf", "same-size.gguf", "alien.gguf"]
    assert [c.level for c in local] == [Level.OK, Level.WARN, Level.BAD]
    assert "as large as the target" in local[1].reason and "token" in local[2].reason
    unchecked = [c for c in cands if c.level is None]
    assert unchecked and all("pick it to check" in c.reason for c in unchecked)
    q4 = next(o for o in self_draft_options(facts) if o.quant == "Q4_0")
    assert q4.pays and q4.ratio < 0.2  # an F32 target: a 4-bit copy is tiny next to it


def test_save_pair_validates_the_name(home: AppPaths, tiny_target: Path) -> None:
    cat = load_catalog()
    t = path_entry(cat, tiny_target)
    with pytest.raises(CatalogError, match="not a usable pair name"):
        save_pair(home, cat, "Bad Name!", t, t)
    pair, merged = save_pair(home, cat, "ok+name", t, t, gamma=2)
    assert merged.pair("ok+name") == pair and pair.gamma == 2


def test_suggested_pair_names_say_model_and_sizes_not_file_names() -> None:
    cat = load_catalog()
    target = path_entry(cat, Path("/m/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
    assert target.id == "qwen2.5-coder-1.5b-instruct-q4_k_m-2"  # the catalog has the first
    draft = path_entry(cat, Path("/m/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    assert suggest_pair_name(cat, target, draft) == "qwen2.5-coder-1.5b+0.5b"
    assert suggest_pair_name(cat, cat.model("gemma-3-4b-it-q4_k_m"),
                             cat.model("gemma-3-270m-it-q8_0")) == "gemma-3-4b+270m"
    nameless = path_entry(cat, Path("/m/mymodel-Q8_0.gguf"))
    assert suggest_pair_name(cat, nameless, entry("x")) == "mymodel+draft"
