"""What the target's file says of its MTP layers, for the "mtp" drafter: why it cannot draft
with them (no layers, left out at conversion, an architecture llama.cpp does not run them for),
from its header (:mod:`specchat.models.mtp`)."""

from __future__ import annotations

from specchat.engine.drafters.mtp import FILE_SAYS
from specchat.models.drafter_sources import Source, Target
from specchat.models.mtp import detect, no_heads


def find(target: Target) -> str | None:
    """Why ``--drafter mtp`` cannot run on the target's file; None when it can."""
    heads = detect(target.model.header)
    if heads is None:
        return no_heads(target.model.name)
    return heads.why_not(target.model.name)


SOURCE = Source(FILE_SAYS, find)
