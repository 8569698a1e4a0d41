"""Catalog entries for models the catalog does not know yet: a Hub file, a file on disk, a
self-made draft. Ids are readable slugs of the file name, never clashing with another model;
a file the catalog already lists gets that entry back instead of a duplicate."""

from __future__ import annotations

import re
from pathlib import Path

from specchat.errors import FetchError
from specchat.formats.gguf_checks import split_parts
from specchat.models.catalog import (
    Catalog,
    DerivedSource,
    HfSource,
    ModelEntry,
    PathSource,
    PypiSource,
    Source,
)
from specchat.models.families import guess_family
from specchat.models.hub import HubFile, HubRef, hub_config, list_gguf, params_of, parse_hub_ref
from specchat.models.progress import format_bytes

_SPLIT_SUFFIX = re.compile(r"-\d{5}-of-\d{5}$")
_SLUG = re.compile(r"[^a-z0-9._-]+")
_PAIR_SLUG = re.compile(r"[^a-z0-9._+-]+")


def slug(text: str) -> str:
    s = _SLUG.sub("-", text.lower()).strip("-.")
    return s or "model"


def pair_slug(text: str) -> str:
    """Like :func:`slug`, keeping '+' (``target+draft`` pair names)."""
    return _PAIR_SLUG.sub("-", text.lower()).strip("-.+")[:64] or "pair"


def file_slug(filename: str) -> str:
    stem = Path(filename).name
    stem = stem[:-5] if stem.lower().endswith(".gguf") else stem
    return slug(_SPLIT_SUFFIX.sub("", stem))


def _same_source(a: Source, b: Source) -> bool:
    if isinstance(a, HfSource) and isinstance(b, HfSource):
        return (a.repo, a.files[0], a.revision) == (b.repo, b.files[0], b.revision)
    if isinstance(a, PathSource) and isinstance(b, PathSource):
        return a.path.expanduser().resolve() == b.path.expanduser().resolve()
    if isinstance(a, DerivedSource) and isinstance(b, DerivedSource):
        return (a.base, a.quant, a.layers) == (b.base, b.quant, b.layers)
    return False


def find_entry(catalog: Catalog, source: Source) -> ModelEntry | None:
    for m in catalog.models.values():
        if any(_same_source(s, source) for s in m.sources):
            return m
    return None


def unique_id(catalog: Catalog, base: str) -> str:
    if base not in catalog.models and base not in catalog.pairs:
        return base
    n = 2
    while f"{base}-{n}" in catalog.models or f"{base}-{n}" in catalog.pairs:
        n += 1
    return f"{base}-{n}"


def hub_entry(catalog: Catalog, ref: HubRef, file: HubFile | None = None,
              gated: bool = False) -> ModelEntry:
    """The catalog's entry for this Hub file, or a new one (not saved: see user_catalog)."""
    assert ref.file is not None
    parts = file.parts if file is not None else tuple(
        p.name for p in split_parts(Path(ref.file)))
    if "/" in ref.file:  # a file in a folder of the repo: keep the folder on every part
        folder = ref.file.rsplit("/", 1)[0]
        parts = tuple(p if "/" in p else f"{folder}/{p}" for p in parts)
    sha = file.sha256[0] if file is not None and len(file.parts) == 1 else None
    src = HfSource(ref.repo, parts, ref.revision, sha, file.size if file else None, gated)
    found = find_entry(catalog, src)
    if found is not None:
        return found
    name = Path(parts[0]).name
    return ModelEntry(
        id=unique_id(catalog, file_slug(name)), name=f"{file_slug(name)} ({ref.repo})",
        source=src, family=guess_family([name, ref.repo], catalog) or "",
        params=params_of(name), origin="added from the Hub")


def path_entry(catalog: Catalog, path: Path) -> ModelEntry:
    src = PathSource(path.expanduser().resolve())
    found = find_entry(catalog, src)
    if found is not None:
        return found
    return ModelEntry(
        id=unique_id(catalog, file_slug(path.name)), name=path.name, source=src,
        family=guess_family([path.name], catalog) or "", params=params_of(path.name),
        origin="added from disk")


def self_draft_entry(catalog: Catalog, target: ModelEntry, quant: str) -> ModelEntry:
    src = DerivedSource(target.id, quant, "")
    found = find_entry(catalog, src)
    if found is not None:
        return found
    new_id = unique_id(catalog, f"{target.id}-self-{quant.lower()}")
    return ModelEntry(
        id=new_id, name=f"{target.name} → {quant} (self-draft)",
        source=DerivedSource(target.id, quant, f"{new_id}.gguf"), family=target.family,
        params=target.params, license=target.license,
        notes=f"Made from {target.id} by llama.cpp's quantizer, to draft for it.",
        origin="self-draft")


def entry_to_dict(entry: ModelEntry) -> dict[str, object]:
    """The YAML form of an entry (as ``models.yaml`` spells it)."""
    d: dict[str, object] = {"id": entry.id, "name": entry.name}
    for key in ("family", "params", "license", "notes"):
        value = getattr(entry, key)
        if value:
            d[key] = value
    if entry.fallbacks:
        d["source"] = [source_to_dict(s) for s in entry.sources]
    else:
        d["source"] = source_to_dict(entry.source)
    return d


def source_to_dict(src: Source) -> dict[str, object]:
    if isinstance(src, HfSource):
        d: dict[str, object] = {"kind": "hf", "repo": src.repo}
        if len(src.files) == 1:
            d["file"] = src.files[0]
        else:
            d["files"] = list(src.files)
        if src.revision != "main":
            d["revision"] = src.revision
        for key in ("sha256", "size"):
            if getattr(src, key) is not None:
                d[key] = getattr(src, key)
        if src.gated:
            d["gated"] = True
        if not src.confirmed:
            d["confirmed"] = False
        return d
    if isinstance(src, DerivedSource):
        if src.layers is not None:
            return {"kind": "derived", "from": src.base, "layers": list(src.layers),
                    "filename": src.filename}
        return {"kind": "derived", "from": src.base, "quant": src.quant, "filename": src.filename}
    if isinstance(src, PathSource):
        return {"kind": "path", "path": str(src.path)}
    assert isinstance(src, PypiSource)
    parts: list[dict[str, object]] = []
    for p in src.parts:
        part: dict[str, object] = {"package": p.requirement, "member": p.member}
        if p.size is not None:
            part["size"] = p.size
        if p.sha256:
            part["sha256"] = p.sha256
        parts.append(part)
    d = {"kind": "pypi", "parts": parts, "filename": src.filename}
    if src.sha256:
        d["sha256"] = src.sha256
    if src.size is not None:
        d["size"] = src.size
    return d


def hub_model(catalog: Catalog, ref_text: str) -> ModelEntry | None:
    """A Hub reference as a catalog entry (choosing the file when the repo has only one)."""
    ref = parse_hub_ref(ref_text)
    if ref is None or ref_text in catalog.models:
        return None
    if ref.file and hub_config().offline:
        return hub_entry(catalog, ref)  # no listing offline: the cache may still have it
    listing = list_gguf(ref.repo, ref.revision)
    models = [f for f in listing.files if not f.is_projector]
    if ref.file is None:
        if len(models) != 1:
            names = "\n".join(f"  {ref.repo}:{f.name}  ({format_bytes(f.size or 0)})"
                              for f in models)
            raise FetchError(f"{ref.repo} has {len(models)} GGUF models; pick one:\n{names}"
                             if models else f"{ref.repo} has no GGUF model files")
        file = models[0]
    else:
        found = listing.find(ref.file)
        if found is None:
            raise FetchError(f"{ref.repo} has no file {ref.file} (see `specchat models files "
                             f"{ref.repo}`)")
        file = found
    return hub_entry(catalog, HubRef(ref.repo, file.name, ref.revision), file,
                     gated=bool(listing.gated))
