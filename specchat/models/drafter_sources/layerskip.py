"""The target's layer-skip cut (``specchat models self-draft TARGET``) for the "layerskip"
drafter, from the catalog."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, partial

from specchat.engine.drafters.layerskip import LOADER
from specchat.engine.llama.context import LlamaContext
from specchat.models.drafter_sources import Source, Target
from specchat.models.self_draft import layerskip_entry


def find(target: Target) -> Callable[[], LlamaContext] | None:
    """A loader of the cut's context (loaded on the drafter's first step), when a cut was made
    and is on disk; None otherwise."""
    if target.resolver is None:
        return None
    entry = layerskip_entry(target.resolver.catalog, target.entry)
    if entry is None:
        return None
    st = target.resolver.state(entry)
    if not st.present or st.path is None:
        return None
    return cache(partial(target.open_cut, st.path))  # one context, on first use


SOURCE = Source(LOADER, find)
