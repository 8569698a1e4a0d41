"""A chat's messages as a tree: each names the one it follows (``parent_id``); messages with the
same parent are alternatives (a regenerated reply, an edited message), one of them ``active``.
:func:`thread` walks the branch that is shown."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar


class _Linked(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def seq(self) -> int: ...
    @property
    def parent_id(self) -> int | None: ...
    @property
    def active(self) -> bool: ...


M = TypeVar("M", bound=_Linked)


@dataclass(frozen=True)
class Link:
    """A message's place in the tree, without its text (counting a branch reads no more)."""

    id: int
    seq: int
    parent_id: int | None
    active: bool


def thread(messages: Sequence[M]) -> list[M]:
    """The shown branch of a chat's messages (in seq order): from the first message, each
    step takes the active child (the newest one if none is marked, as a damaged row may
    leave it). A message whose parent is gone counts as a first message."""
    ids = {m.id for m in messages}
    children: dict[int | None, list[M]] = {}
    for m in sorted(messages, key=lambda m: m.seq):
        parent = m.parent_id if m.parent_id in ids else None
        children.setdefault(parent, []).append(m)
    out: list[M] = []
    parent_id: int | None = None
    seen: set[int] = set()
    while (kids := children.get(parent_id)):
        shown = [k for k in kids if k.active] or kids
        pick = shown[-1]
        if pick.id in seen:  # a cycle in damaged rows: stop rather than loop
            break
        seen.add(pick.id)
        out.append(pick)
        parent_id = pick.id
    return out
