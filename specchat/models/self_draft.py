"""A draft made from the target itself, when no smaller model of its family is at hand.

Two kinds: a quantized copy (below), and a layer-skip cut holding some of the target's own
blocks (:func:`make_layerskip_draft`, see :mod:`specchat.models.layer_cut`).

A 4-bit (or 3-/2-bit) copy of an F16/Q8_0 target shares its vocabulary exactly and agrees with
it most of the time, at a quarter of the memory traffic per token. The copy is written by
llama.cpp's quantizer into specchat's models folder and recorded in the user catalog as a
``derived`` model, so ``specchat models pull`` can remake it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specchat.errors import ModelFileError
from specchat.models.catalog import Catalog, DerivedSource, ModelEntry
from specchat.models.entries import file_slug, self_draft_entry, unique_id
from specchat.models.layer_cut import open_source, parse_layers, write_cut
from specchat.models.layer_search import SearchOptions, SearchResult, format_layers, search
from specchat.models.progress import ProgressFn, no_progress
from specchat.models.quantize import FTYPES, quantize
from specchat.models.resolver import ModelResolver


def make_self_draft(resolver: ModelResolver, target: ModelEntry, quant: str,
                    report: ProgressFn = no_progress, cancel: threading.Event | None = None
                    ) -> ModelEntry:
    """Quantize the target to ``quant``; on success record target (if new) and draft in the
    user catalog and return the draft's entry. Nothing is recorded if it fails or is cancelled."""
    from specchat.models.user_catalog import update_user_catalog

    if quant not in FTYPES:
        raise ModelFileError(f"unknown quantization type {quant}; try Q4_0, Q3_K_S or Q2_K")
    cat = resolver.catalog
    target_path = resolver.ensure(target, report, cancel=cancel)
    draft = self_draft_entry(cat, target, quant)
    assert isinstance(draft.source, DerivedSource)
    dest = resolver.paths.models_dir / draft.source.filename
    if not dest.exists():
        resolver.paths.ensure()
        quantize(target_path, dest, quant, report, cancel=cancel)
    new = [m for m in (target, draft) if cat.models.get(m.id) != m]
    merged = update_user_catalog(resolver.paths.user_catalog, models=new)
    resolver.catalog.models.update({m.id: merged.models[m.id] for m in new})
    return merged.models[draft.id]


@dataclass(frozen=True)
class LayerSkipDraft:
    entry: ModelEntry
    path: Path
    size: int  # bytes on disk
    kept: tuple[int, ...]
    n_layer: int
    search: SearchResult | None = None  # when the blocks were chosen here


def layerskip_entry(catalog: Catalog, target: ModelEntry) -> ModelEntry | None:
    """The catalog's layer-skip draft of ``target`` (named by its id, or given as the same
    file the catalog knows under another id), if one was made."""
    from specchat.models.entries import find_entry

    ids = {target.id}
    known = find_entry(catalog, target.source)
    if known is not None:
        ids.add(known.id)
    for m in catalog.models.values():
        src = m.source
        if isinstance(src, DerivedSource) and src.layers is not None and src.base in ids:
            return m
    return None


def make_layerskip_draft(resolver: ModelResolver, target: ModelEntry, layers: str,
                         say: Callable[[str], None] = lambda _m: None,
                         report: ProgressFn = no_progress,
                         cancel: threading.Event | None = None,
                         options: SearchOptions | None = None) -> LayerSkipDraft:
    """Cut the target to the blocks ``layers`` names ("auto": chosen by a measured search) and
    record the cut in the user catalog as a ``derived`` model with its kept blocks (replacing
    an earlier cut of the same target). Nothing is written under the final name or recorded
    unless the cut is complete."""
    from specchat.models.user_catalog import update_user_catalog

    target_path = resolver.ensure(target, report, cancel=cancel)
    src = open_source(target_path)
    found: SearchResult | None = None
    if layers.strip().lower() == "auto":
        found = search(src, resolver.paths.models_dir, options or SearchOptions(), say, cancel)
        kept = found.best.kept
    else:
        kept = parse_layers(layers, src.n_layer)
    cat = resolver.catalog
    old = layerskip_entry(cat, target)
    # An ad-hoc target's id is its path: the draft's id (and file name) is made from its name.
    stem = file_slug(Path(target.id).name) if "/" in target.id else target.id
    new_id = old.id if old is not None else unique_id(cat, f"{stem}-layerskip")
    filename = f"{new_id}.gguf"
    entry = ModelEntry(
        id=new_id, name=f"{target.name} → {len(kept)} of {src.n_layer} blocks (layer-skip)",
        source=DerivedSource(target.id, "", filename, kept), family=target.family,
        params=target.params, license=target.license,
        notes=f"The target's own blocks {format_layers(kept)} (of 0-{src.n_layer - 1}), to "
              "draft for it (specchat --drafter layerskip).",
        origin="self-draft")
    resolver.paths.ensure()
    dest = resolver.paths.models_dir / filename
    size = write_cut(src, dest, kept, cancel.is_set if cancel is not None else None)
    new = [m for m in (target, entry) if cat.models.get(m.id) != m]
    merged = update_user_catalog(resolver.paths.user_catalog, models=new)
    cat.models.update({m.id: merged.models[m.id] for m in new})
    return LayerSkipDraft(merged.models[entry.id], dest, size, kept, src.n_layer, found)
