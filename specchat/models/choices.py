"""What can be switched to: the catalog's pairs and models, each with whether its files are on
disk, and what a saved chat's pair label (``Selection.label``: a pair id, a model id or path,
or ``target + draft``) stands for now. Read only: nothing here fetches.
"""

from __future__ import annotations

from dataclasses import dataclass

from specchat.errors import SpecchatError
from specchat.models.catalog import Catalog, ModelEntry
from specchat.models.resolver import ModelResolver, model_from_ref

ADHOC_JOIN = " + "  # how Selection.label joins an ad-hoc target and draft


@dataclass(frozen=True)
class Choice:
    label: str  # what Selection.label is once it is open
    kind: str  # "pair" | "model"
    on_disk: bool  # every file it needs is there (opening it fetches nothing)
    known: bool = True  # in the catalog (or a model file that exists)
    detail: str = ""  # the models' names; the pair's calibrated γ

    @property
    def status(self) -> str:
        if not self.known:
            return "not in the catalog"
        return "on disk" if self.on_disk else "not on disk"


def _present(resolver: ModelResolver, entry: ModelEntry) -> bool:
    try:
        return resolver.state(entry).present
    except OSError:
        return False


def all_choices(catalog: Catalog, resolver: ModelResolver) -> list[Choice]:
    """Every pair, then every model, of the catalog; those on disk first (each group keeps the
    catalog's order)."""
    out: list[Choice] = []
    for p in catalog.pairs.values():
        models = [catalog.models.get(p.target), catalog.models.get(p.draft)]
        if None in models:
            continue  # the catalog's own check says so; nothing to open here
        on_disk = all(_present(resolver, m) for m in models if m is not None)
        gamma = f" · γ {p.gamma} calibrated" if p.gamma is not None else ""
        names = " + ".join(m.name for m in models if m is not None)
        out.append(Choice(p.id, "pair", on_disk, detail=names + gamma))
    for m in catalog.models.values():
        out.append(Choice(m.id, "model", _present(resolver, m), detail=m.name))
    return sorted(out, key=lambda c: not c.on_disk)  # stable: the catalog's order within


def choice_for(catalog: Catalog, resolver: ModelResolver, label: str) -> Choice:
    """What a chat's pair label stands for now (a pair, a model, an ad-hoc target + draft)."""
    if label in catalog.pairs:
        p = catalog.pairs[label]
        found = [catalog.models.get(p.target), catalog.models.get(p.draft)]
        if None in found:
            return Choice(label, "pair", False, known=False)
        return Choice(label, "pair", all(_present(resolver, m) for m in found if m))
    refs = label.split(ADHOC_JOIN) if ADHOC_JOIN in label else [label]
    try:
        entries = [model_from_ref(catalog, r) for r in refs]
    except SpecchatError:
        return Choice(label, "pair" if len(refs) > 1 else "model", False, known=False)
    kind = "pair" if len(entries) > 1 else "model"
    return Choice(label, kind, all(_present(resolver, m) for m in entries))
