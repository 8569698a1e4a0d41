"""Drafters by name: what ``--drafter`` and the app's settings choose from.

The drafters are plug-ins, each one module of :mod:`specchat.engine.drafters` defining ``NAME``
and ``build(env) -> Drafter | None`` (None: not usable with what is loaded, e.g. no draft
model). This registry finds them at run time by scanning that package, so the decoder depends on
no drafter, and a new drafter is a new file there. Modules whose name starts with ``_`` are
the drafters' helpers.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Generic, TypeVar, cast

from specchat.engine.decode.drafting import Drafter
from specchat.engine.llama.model import LlamaContext
from specchat.errors import SpecchatError

PACKAGE = "specchat.engine.drafters"

T = TypeVar("T")


@dataclass(frozen=True)
class Need(Generic[T]):
    """A typed key for something a drafter needs from whoever loads models (a loader for its
    weights, its settings) or shares with other drafters: the drafter's module defines the key,
    the loader provides the value (:meth:`DrafterEnv.provide`), and both are checked against
    ``T`` where they are written, not cast from a string-keyed dict where they are read."""

    name: str


def _package() -> ModuleType:
    return importlib.import_module(PACKAGE)


@dataclass
class DrafterEnv:
    """What drafters are built from: the target, and the draft model when one is loaded."""

    target: LlamaContext
    draft: LlamaContext | None = None
    stepwise_draft: bool = False  # see drafters._draft_model.DraftModel
    ngram_n_min: int | None = None  # None: 2 with a draft model behind it, else 1
    _provided: dict[Need[object], object] = field(default_factory=dict, repr=False)

    def provide(self, need: Need[T], value: T) -> None:
        """Make ``value`` available to the drafters that ``get`` this need."""
        self._provided[cast(Need[object], need)] = value

    def get(self, need: Need[T]) -> T | None:
        """What was provided for ``need``; None when nothing was (the drafter is not usable)."""
        return cast("T | None", self._provided.get(cast(Need[object], need)))


def names() -> tuple[str, ...]:
    """Every drafter of the drafters package, by name."""
    return tuple(sorted(_modules()))


def _modules() -> dict[str, str]:
    found: dict[str, str] = {}
    for info in pkgutil.iter_modules(_package().__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{PACKAGE}.{info.name}")
        name = getattr(mod, "NAME", None)
        if isinstance(name, str) and callable(getattr(mod, "build", None)):
            found[name] = mod.__name__
    return found


def build(name: str, env: DrafterEnv) -> Drafter:
    """The drafter called ``name``; a clear error when it is unknown or cannot run here."""
    mods = _modules()
    if name not in mods:
        raise SpecchatError(f"unknown drafter '{name}' (choose from {', '.join(sorted(mods))})")
    mod = importlib.import_module(mods[name])
    drafter: Drafter | None = mod.build(env)
    if drafter is None:
        why = getattr(mod, "why_not", None)  # a drafter that needs something else says what
        raise SpecchatError(why(env) if callable(why)
                            else f"the '{name}' drafter needs a draft model (--draft)")
    return drafter


def usable(names: Sequence[str], env: DrafterEnv) -> tuple[str, ...]:
    """Of ``names``, those that can run in ``env`` (e.g. not "tree" without a draft model)."""
    mods = _modules()
    return tuple(n for n in names if n in mods and
                 importlib.import_module(mods[n]).build(env) is not None)


def parse_names(text: str) -> tuple[str, ...]:
    """``"ngram,model"`` → ("ngram", "model"), checked against the known drafters."""
    out = tuple(n.strip().lower() for n in text.split(",") if n.strip())
    if not out:
        raise SpecchatError("--drafter needs at least one name")
    known = names()
    for n in out:
        if n not in known:
            raise SpecchatError(f"unknown drafter '{n}' (choose from {', '.join(known)})")
    if len(set(out)) != len(out):
        raise SpecchatError(f"a drafter is named twice in '{text}'")
    return out
