"""Writing the user's catalog (``<config>/models.yaml``) without losing what is in it.

Entries are added or replaced by id; everything else in the file is kept. The new text is
validated together with the shipped catalog before it replaces the old file (temp file +
rename, so a crash never leaves half a file), and the previous version is kept as
``models.yaml.bak`` — YAML comments do not survive a rewrite, the backup does. A file the user
broke by hand is never overwritten: the error says where it is broken.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from specchat.errors import CatalogError
from specchat.models.catalog import (
    Catalog,
    ModelEntry,
    PairEntry,
    check_references,
    parse_catalog,
    shipped_catalog_text,
)
from specchat.models.entries import entry_to_dict

HEADER = ("# Your models and pairs, merged over specchat's shipped catalog (ids here win).\n"
          "# Written by `specchat models pull|pair|self-draft` and the pairing wizard; you may\n"
          "# edit it by hand. The previous version is kept as models.yaml.bak.\n")


def pair_to_dict(pair: PairEntry) -> dict[str, object]:
    d: dict[str, object] = {"id": pair.id, "target": pair.target, "draft": pair.draft}
    if pair.gamma is not None:
        d["gamma"] = pair.gamma
    if pair.notes:
        d["notes"] = pair.notes
    return d


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    parse_catalog(text, str(path))  # a broken file raises with file:line — we do not touch it
    doc = yaml.safe_load(text) or {}
    if not isinstance(doc, dict):
        raise CatalogError(f"{path}: expected a mapping with 'models' and 'pairs'")
    return doc


def _upsert(items: list[Any], new: dict[str, object]) -> None:
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("id") == new["id"]:
            items[i] = new
            return
    items.append(new)


def update_user_catalog(path: Path, models: Iterable[ModelEntry] = (),
                        pairs: Iterable[PairEntry] = (), remove_pairs: Iterable[str] = (),
                        remove_models: Iterable[str] = ()) -> Catalog:
    """Add/replace these entries (by id), drop the named ones; returns the merged catalog.

    Read, changed and written under the file's lock: two processes adding entries at once
    (two pulls, a calibration saving its γ) both keep theirs."""
    from specchat.errors import BusyError
    from specchat.locks import held

    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with held(path, f"writing {path.name}", timeout_s=LOCK_S):
            return _update(path, models, pairs, remove_pairs, remove_models)
    except BusyError as e:
        raise CatalogError(f"not saved: {e}") from None


LOCK_S = 30.0  # a write takes milliseconds; a validation of a big catalog, a little more


def _update(path: Path, models: Iterable[ModelEntry], pairs: Iterable[PairEntry],
            remove_pairs: Iterable[str], remove_models: Iterable[str]) -> Catalog:
    doc = _read(path)
    model_list: list[Any] = list(doc.get("models") or [])
    pair_list: list[Any] = list(doc.get("pairs") or [])
    for m in models:
        _upsert(model_list, entry_to_dict(m))
    for p in pairs:
        _upsert(pair_list, pair_to_dict(p))
    gone_p, gone_m = set(remove_pairs), set(remove_models)
    pair_list = [p for p in pair_list if not (isinstance(p, dict) and p.get("id") in gone_p)]
    model_list = [m for m in model_list if not (isinstance(m, dict) and m.get("id") in gone_m)]
    out: dict[str, Any] = {k: v for k, v in doc.items() if k not in ("models", "pairs")}
    if model_list:
        out["models"] = model_list
    if pair_list:
        out["pairs"] = pair_list
    text = HEADER + yaml.safe_dump(out, sort_keys=False, allow_unicode=True, width=100)
    merged = parse_catalog(shipped_catalog_text(), "models.yaml", Path.cwd())
    try:  # never write a catalog that would not load
        merged.merge(parse_catalog(text, str(path)))
        check_references(merged)
    except CatalogError as e:
        raise CatalogError(f"not saved (the catalog would not load): {e}") from None
    _write(path, text)
    return merged


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        backup = path.with_name(path.name + ".bak")
        btmp = backup.with_name(f"{backup.name}.{os.getpid()}.tmp")
        btmp.write_bytes(path.read_bytes())
        os.replace(btmp, backup)  # a crash mid-copy never leaves a torn backup either
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
