"""A draft made from the target itself, when no smaller model of its family is at hand.

A 4-bit (or 3-/2-bit) copy of an F16/Q8_0 target shares its vocabulary exactly and agrees with
it most of the time, at a quarter of the memory traffic per token. The copy is written by
llama.cpp's quantizer into specchat's models folder and recorded in the user catalog as a
``derived`` model, so ``specchat models pull`` can remake it.
"""

from __future__ import annotations

import threading

from specchat.errors import ModelFileError
from specchat.models.catalog import DerivedSource, ModelEntry
from specchat.models.entries import self_draft_entry
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
