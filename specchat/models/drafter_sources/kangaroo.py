"""The target's Kangaroo adapter and shallow model (``specchat models train-heads TARGET --kind
kangaroo``) for the "kangaroo" drafter, from the data folder."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from specchat.engine.drafters.kangaroo import LOADER, KangarooAdapter
from specchat.engine.llama.context import LlamaContext
from specchat.errors import SpecchatError
from specchat.models.drafter_sources import Source, Target


def find(target: Target) -> Callable[[], tuple[LlamaContext, KangarooAdapter]] | None:
    """The adapter trained for the target's file and a loader of its shallow model (loaded on
    the drafter's first step); None when there is none. Listing the usable drafters only looks
    for an adapter known without hashing the target (see models.heads.kangaroo.known_adapter)."""
    # The trainer's modules load only when the drafter is built (numpy-heavy).
    from specchat.models.heads.kangaroo import adapter_file, known_adapter, load
    from specchat.models.heads.store import target_sha256

    if target.paths is None:
        if target.thorough:
            raise SpecchatError("the kangaroo drafter needs specchat's data folder")
        return None
    path = target.model.path
    if not target.thorough and known_adapter(target.paths, path) is None:
        return None
    sha = target_sha256(target.paths, path)
    file = adapter_file(target.paths, sha)
    if not file.exists():
        return None
    adapter, shallow = load(file, sha, path)
    open_shallow = cache(lambda: target.open_cut(shallow))  # one context, on first use
    return lambda: (open_shallow(), adapter)


SOURCE = Source(LOADER, find)
