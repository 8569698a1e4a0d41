"""The target's Medusa heads (``specchat models train-heads TARGET --kind medusa``) for the
"medusa" drafter, from the data folder."""

from __future__ import annotations

from collections.abc import Callable

from specchat.engine.drafters.medusa import LOADER, MedusaHeads
from specchat.models.drafter_sources import Source, Target


def find(target: Target) -> Callable[[], MedusaHeads] | None:
    """The heads trained for the target's file (hashed the first time), loaded now so a damaged
    file is said before anything runs; None when there are none."""
    # The trainer's modules load only when the drafter is built (numpy-heavy, and most runs
    # never need them).
    from specchat.models.heads.medusa import heads_file, load
    from specchat.models.heads.store import target_sha256

    if target.paths is None:
        return None
    path = target.model.path
    sha = target_sha256(target.paths, path)
    file = heads_file(target.paths, sha)
    if not file.exists():
        return None
    heads = load(file, sha, path)
    return lambda: heads


SOURCE = Source(LOADER, find)
