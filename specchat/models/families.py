"""Model families in the catalog: which family a file belongs to, and its smaller siblings.

A draft must share the target's vocabulary, which in practice means the same family (Llama 3.x,
Qwen2.5, Gemma 3, ...). Files do not say their family in a standard way, so we match the
catalog's family names against the file's name and its ``general.name``/``basename``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from specchat.models.catalog import Catalog, HfSource, ModelEntry

_NORM = re.compile(r"[^a-z0-9]+")
_PARAMS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMBT])\s*$", re.IGNORECASE)
_SCALE = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def _norm(text: str) -> str:
    return _NORM.sub("", text.lower())


def guess_family(texts: Iterable[str], catalog: Catalog) -> str | None:
    """The longest catalog family name found in any of ``texts`` ("qwen2.5-coder" beats
    "qwen2.5")."""
    families = sorted({m.family for m in catalog.models.values() if m.family},
                      key=lambda f: -len(_norm(f)))
    normed = [_norm(t) for t in texts if t]
    for fam in families:
        key = _norm(fam)
        if key and any(key in t for t in normed):
            return fam
    return None


def params_value(params: str) -> float | None:
    """``"1.7B"`` → 1.7e9; None when the text is not a size."""
    m = _PARAMS.match(params or "")
    return float(m[1]) * _SCALE[m[2].upper()] if m else None


def format_params(n: float) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}".replace(".0", "")
    return str(int(n))


def smaller_siblings(catalog: Catalog, family: str, target_params: float | None,
                     exclude: Iterable[str] = ()) -> list[ModelEntry]:
    """Catalog models of ``family`` under half the target's size: draft candidates, confirmed
    names first, then the smallest."""
    skip = set(exclude)
    out = []
    for m in catalog.models.values():
        if m.family != family or m.id in skip:
            continue
        p = params_value(m.params)
        if target_params is not None and (p is None or p > 0.5 * target_params):
            continue
        out.append(m)
    return sorted(out, key=lambda m: (not _confirmed(m), params_value(m.params) or 0, m.id))


def _confirmed(m: ModelEntry) -> bool:
    return not isinstance(m.source, HfSource) or m.source.confirmed
