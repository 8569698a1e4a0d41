"""What the models layer provides for the drafters' needs, one module per drafter that needs
something from above the engine, found by scanning this package as the registry finds the
drafters: the runtime names none of them.

A drafter lives in the engine, which cannot import the stores above it (heads trained in the data
folder, cuts of the target in the catalog, what :mod:`specchat.models.mtp` reads from a file's
header). So it declares a typed ``Need`` (:mod:`specchat.engine.decode.registry`), and its module
here defines ``SOURCE``: a :class:`Source` of that need, whose ``find`` looks for the value from
the loaded target (:class:`Target`). The runtime offers every source to each drafter environment
(``DrafterEnv.offer``), so a search runs only for a drafter being built, and keeps what was found
(:class:`Found`). A drafter without one of its needs says how to get it (its ``build``).
Modules whose name starts with ``_`` are helpers.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from specchat.engine.decode.registry import DrafterEnv, Need
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.models.catalog import ModelEntry
from specchat.models.resolver import ModelResolver
from specchat.paths import AppPaths

T = TypeVar("T")


@dataclass(frozen=True)
class Target:
    """The loaded target and where it came from: what a source searches from."""

    model: LlamaModel
    entry: ModelEntry  # its catalog entry
    paths: AppPaths | None  # the data folder (None: a runtime made without one, as tests do)
    resolver: ModelResolver | None  # the catalog it was opened from (None: made by hand)
    # A cut of the target (a GGUF of some of its blocks) loaded like it, with a context of its
    # size; the runtime clears it with its own caches and closes it when it closes.
    open_cut: Callable[[Path], LlamaContext]
    # The drafter is being chosen, not only listed as usable: a slow search (hashing the target)
    # is worth it, and what is missing is said rather than passed over.
    thorough: bool


@dataclass(frozen=True)
class Source(Generic[T]):
    """Where the value of ``need`` comes from: ``find`` returns it, or None when it is not there
    (the drafter then says how to get it); a store's own failure (a damaged file) is raised."""

    need: Need[T]
    find: Callable[[Target], T | None]


def sources() -> tuple[Source[Any], ...]:
    """Every source of this package, in module order."""
    found: list[Source[Any]] = []
    for info in sorted(pkgutil.iter_modules(importlib.import_module(__name__).__path__)):
        if info.name.startswith("_"):
            continue
        source = getattr(importlib.import_module(f"{__name__}.{info.name}"), "SOURCE", None)
        if isinstance(source, Source):
            found.append(source)
    return tuple(found)


class Found:
    """What the sources found for one runtime, kept for its life: heads loaded once, one context
    per cut. What was not found is looked for again next time (a quick search, made only to list
    the usable drafters, may miss what a thorough one finds)."""

    def __init__(self) -> None:
        self._values: dict[Need[object], object] = {}

    def get(self, source: Source[T], target: Target) -> T | None:
        key = cast(Need[object], source.need)
        if key not in self._values:
            value = source.find(target)
            if value is None:
                return None
            self._values[key] = value
        return cast(T, self._values[key])

    def offer(self, env: DrafterEnv, target: Target) -> None:
        """Offer every source's value to ``env``, found when a drafter first asks for it."""
        for source in sources():
            env.offer(source.need, partial(self.get, source, target))

    def clear(self) -> None:
        self._values.clear()
