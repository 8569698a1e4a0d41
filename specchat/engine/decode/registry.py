"""Drafters by name: what ``--drafter`` and the app's settings choose from.

The drafters are plug-ins, each one module of :mod:`specchat.engine.drafters` defining ``NAME``
and ``build(env) -> Drafter | None`` (:class:`DrafterModule`): None when it is not usable with
what is loaded for want of a draft model, or a ``SpecchatError`` saying what it lacks (trained
heads, a cut of the target). This registry finds them at run time by scanning that package, so
the decoder depends on no drafter, and a new drafter is a new file there. Modules whose name
starts with ``_`` are the drafters' helpers.

What a drafter needs from above the engine (weights kept in specchat's stores, what the target's
file says) it declares as a typed :class:`Need`; whoever loads the models provides it, at once
(:meth:`DrafterEnv.provide`) or when a drafter first asks (:meth:`DrafterEnv.offer`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Generic, Protocol, TypeVar, cast

from specchat.engine.decode.arms import CHAIN, Arm
from specchat.engine.decode.drafting import Drafter
from specchat.engine.llama.context import LlamaContext
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
    ngram_n_min: int | None = None  # None: 2 (see drafters.ngram.build)
    # What the user calls the target (its catalog id), for a drafter's messages; None: the
    # model's own name.
    target_name: str | None = None
    # What drafters keep across the decoders built over the same loaded models (a runtime's
    # requests and slots; see kept); None: this environment's own.
    keep: dict[Need[object], object] | None = None
    _provided: dict[Need[object], object] = field(default_factory=dict, repr=False)
    _offered: dict[Need[object], Callable[[], object | None]] = field(default_factory=dict,
                                                                      repr=False)

    def provide(self, need: Need[T], value: T) -> None:
        """Make ``value`` available to the drafters that ``get`` this need."""
        self._provided[cast(Need[object], need)] = value

    def offer(self, need: Need[T], find: Callable[[], T | None]) -> None:
        """Provide ``need`` when a drafter first asks for it: ``find`` looks for it then (None:
        not there), so a search that hashes the target or loads weights is paid only by a
        drafter that is built."""
        self._offered[cast(Need[object], need)] = find

    def get(self, need: Need[T]) -> T | None:
        """What was provided for ``need``; None when nothing was (the drafter is not usable)."""
        key = cast(Need[object], need)
        find = self._offered.pop(key, None)  # looked for once per environment
        if find is not None and key not in self._provided:
            found = find()
            if found is not None:
                self._provided[key] = found
        return cast("T | None", self._provided.get(key))

    def kept(self, need: Need[T], make: Callable[[], T]) -> T:
        """What drafters keep under ``need`` across the decoders built over the same loaded
        models (the n-gram drafter's memory of earlier requests), made by ``make`` the first
        time; this environment's own when no one keeps such things (``keep`` is None)."""
        store = self.keep if self.keep is not None else self._provided
        key = cast(Need[object], need)
        if key not in store:
            store[key] = make()
        return cast(T, store[key])

    def target_label(self) -> str:
        """The target as a message names it: :attr:`target_name`, else its model's name."""
        if self.target_name is not None:
            return self.target_name
        return self.target.model.name


class DrafterModule(Protocol):
    """What a drafter module of :mod:`specchat.engine.drafters` defines (and, optionally,
    ``ARM``: how the planner treats it, :mod:`specchat.engine.decode.arms`; read by
    :func:`arm`)."""

    NAME: str

    def build(self, env: DrafterEnv) -> Drafter | None:
        """The drafter, built from ``env``; None when it needs a draft model and none is
        loaded; raises a ``SpecchatError`` saying what else it lacks."""
        ...


def names() -> tuple[str, ...]:
    """Every drafter of the drafters package, by name."""
    return tuple(sorted(_modules()))


def _modules() -> dict[str, str]:
    found: dict[str, str] = {}
    for info in pkgutil.iter_modules(_package().__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{PACKAGE}.{info.name}")
        # Discovery: a module of the package is a drafter when it defines NAME and build.
        name = getattr(mod, "NAME", None)
        if isinstance(name, str) and callable(getattr(mod, "build", None)):
            found[name] = mod.__name__
    return found


def _module(path: str) -> DrafterModule:
    return cast(DrafterModule, importlib.import_module(path))  # _modules checked what it defines


def arms() -> dict[str, Arm]:
    """Every drafter's arm, by name (see :func:`arm`)."""
    return {name: arm(name) for name in _modules()}


def arm(name: str) -> Arm:
    """How the planner treats drafter ``name``: its module's ``ARM``; a chain drafter's
    (``arms.CHAIN``) for a module that declares none and for a name no module defines."""
    path = _modules().get(name)
    if path is None:
        return CHAIN
    # Discovery: ARM is optional (a drafter module declares it where CHAIN is not its arm).
    got = getattr(importlib.import_module(path), "ARM", CHAIN)
    if not isinstance(got, Arm):
        raise SpecchatError(f"the '{name}' drafter's ARM is not an engine.decode.arms.Arm")
    return got


def build(name: str, env: DrafterEnv) -> Drafter:
    """The drafter called ``name``; a clear error when it is unknown or cannot run here."""
    mods = _modules()
    if name not in mods:
        raise SpecchatError(f"unknown drafter '{name}' (choose from {', '.join(sorted(mods))})")
    drafter = _module(mods[name]).build(env)  # a drafter that needs something else says what
    if drafter is None:
        raise SpecchatError(f"the '{name}' drafter needs a draft model (--draft)")
    return drafter


def usable(names: Sequence[str], env: DrafterEnv) -> tuple[str, ...]:
    """Of ``names``, those that can run in ``env`` (e.g. not "tree" without a draft model)."""
    mods = _modules()

    def builds(name: str) -> bool:
        try:
            return _module(mods[name]).build(env) is not None
        except SpecchatError:  # it said what it lacks: not usable here
            return False

    return tuple(n for n in names if n in mods and builds(n))


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
