"""The Jinja sandbox a chat template renders in: immutable, and bounded in time and size.

Templates are untrusted input from model files, so they run in Jinja's immutable sandbox, as
llama-cpp-python does. The sandbox stops a template from reaching Python internals, not from
spending time or memory: nested ``range(100000)`` loops run for hours and ``'x' * 300000000``
takes gigabytes. So :class:`BoundedEnvironment` checks a per-render :class:`Budget`
(:mod:`.template_budget`) wherever work or size can grow: every loop step, call, attribute
lookup, operator and filter checks the deadline (and the caller's cancel event), and every
operation that can build a large value (``*``, ``+``, ``%``, ``**``, ``~``, the
string-building filters and methods, joining a block's output) checks the size of what it is
about to build against the cap before building it. A template's syntax tree goes through
:class:`Guards` before it is compiled, which routes its loops and ``~`` through the budget.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

from jinja2 import nodes
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from specchat.engine.decode.template_budget import (
    Budget,
    Refused,
    check_format,
    check_ints,
    check_percent,
    size,
    weight,
)

_LOOP_FILTER = "specchat_loop_guard"
_JOIN_FILTER = "specchat_concat_guard"
# Methods and filters whose integer arguments are sizes: a width, a count of columns or rows.
_WIDTH_METHODS = frozenset(["center", "ljust", "rjust", "zfill", "expandtabs"])
_WIDTH_FILTERS = frozenset(["center", "indent", "batch", "slice", "wordwrap"])


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # Hugging Face's tojson, which templates are written for: keys in their order and no HTML
    # escapes (Jinja's own sorts keys and writes `<` as \u003c, unlike what the model saw).
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, separators=separators,
                      sort_keys=sort_keys)


class Guards(NodeTransformer):
    """Route every loop's iterable and every ``~`` through the budget."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        loop = self.generic_visit(node)
        assert isinstance(loop, nodes.For)
        loop.iter = nodes.Filter(loop.iter, _LOOP_FILTER, [], [], None, None,
                                 lineno=loop.lineno)
        return loop

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        cat = self.generic_visit(node)
        assert isinstance(cat, nodes.Concat)
        return nodes.Filter(nodes.List(cat.nodes, lineno=cat.lineno), _JOIN_FILTER, [], [],
                            None, None, lineno=cat.lineno)


class _Steps:
    """An iterable that costs one budget step per item (and keeps ``len`` for ``loop``)."""

    def __init__(self, env: BoundedEnvironment, iterable: Any) -> None:
        self._env = env
        self._iterable = iterable
        self._it: Iterator[Any] | None = None

    def __iter__(self) -> _Steps:
        self._it = iter(self._iterable)
        return self

    def __next__(self) -> Any:
        self._env.step()
        assert self._it is not None
        return next(self._it)

    def __len__(self) -> int:
        return len(self._iterable)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with a per-render budget checked wherever work or size can grow."""

    intercepted_binops = frozenset(["*", "+", "%", "**"])

    def __init__(self) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, finalize=self._finalize)
        self._local = threading.local()
        self.filters["tojson"] = _tojson
        for name, func in list(self.filters.items()):
            self.filters[name] = self._guard_filter(name, func)
        self.filters[_LOOP_FILTER] = lambda iterable: _Steps(self, iterable)
        self.filters[_JOIN_FILTER] = self._join
        self.concat = self._concat  # type: ignore[method-assign]

    # -------------------------------------------------------------------------- the budget

    @property
    def budget(self) -> Budget:
        # Thread-local: unset in a thread that has not rendered yet.
        b: Budget | None = getattr(self._local, "budget", None)
        if b is None:
            # Outside a render means at compile time, where Jinja folds constant expressions
            # (``{{ 'x'|center(10**9) }}``) unless that fails: leave them to the render.
            raise Refused("not rendering")
        return b

    def bounded(self, budget: Budget | None) -> None:
        self._local.budget = budget

    def step(self) -> None:
        b: Budget | None = getattr(self._local, "budget", None)  # thread-local, as above
        if b is not None:
            b.step()

    def _built(self, value: Any) -> Any:
        if isinstance(value, (str, list, tuple, dict)):
            self.budget.build(len(value))
        return value

    # ----------------------------------------------------------------- the sandbox's hooks

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        b = self.budget
        b.step()
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    b.build(size(seq, b.max_chars) * max(n, 0))
            if isinstance(left, int) and isinstance(right, int):
                b.build((left.bit_length() + right.bit_length()) // 3)
        elif operator == "+" and isinstance(left, (str, list, tuple)):
            b.build(size(left, b.max_chars) + size(right, b.max_chars))
        elif operator == "%" and isinstance(left, str):
            check_percent(b, left, right)
            b.build(len(left) + weight(right, b.max_chars))
        elif (operator == "**" and isinstance(left, int) and isinstance(right, int)
              and abs(left) > 1 and right > 0):
            b.build(right * left.bit_length() // 3)
        return self._built(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any,
             **kwargs: Any) -> Any:
        b = __self.budget
        b.step()
        method = getattr(__obj, "__wrapped__", __obj)  # str.format comes wrapped by the sandbox
        # Any Python callable a template reaches: a bound method says its owner and name.
        owner = getattr(method, "__self__", None)
        name = getattr(method, "__name__", "")
        if name == "generate_lorem_ipsum":  # the lipsum global: n paragraphs of min…max words
            check_ints(b, args, kwargs)
        if isinstance(owner, str):
            if name in _WIDTH_METHODS:
                check_ints(b, args, kwargs)
            if name == "join" and args:
                items = list(args[0])
                args = (items, *args[1:])
                b.build(weight(items, b.max_chars) + len(owner) * len(items))
            elif name == "replace" and len(args) >= 2:
                old, new = str(args[0]), str(args[1])
                b.build(len(owner) + (owner.count(old) if old else len(owner) + 1) * len(new))
            elif name == "expandtabs":
                b.build(len(owner) * (int(args[0]) if args else 8))
            elif name in ("format", "format_map"):
                check_format(b, owner, args, kwargs)
                b.build(len(owner) + weight([args, kwargs], b.max_chars))
        if isinstance(__obj, LoopContext) and args:
            args = (_Steps(__self, args[0]), *args[1:])  # a recursive loop's next level
        return __self._built(super().call(__context, __obj, *args, **kwargs))

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.step()
        return super().getitem(obj, argument)

    def _finalize(self, value: Any) -> Any:
        """Each ``{{ … }}`` value, before it becomes text."""
        b = self.budget
        b.step()
        b.build(weight(value, b.max_chars))
        return value

    def _join(self, parts: list[Any]) -> str:
        """``a ~ b ~ …``."""
        b = self.budget
        b.step()
        b.build(weight(parts, b.max_chars))
        return "".join(str(p) for p in parts)

    def _concat(self, parts: Any) -> str:
        """Joins a macro's, a ``{% set %}`` block's or a filter block's output."""
        parts = list(parts)
        b = self.budget
        b.step()
        b.build(sum(len(p) for p in parts))
        return "".join(parts)

    def _guard_filter(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        pass_arg = getattr(func, "jinja_pass_arg", None)  # Jinja marks only pass_* filters
        skip = 1 if pass_arg is not None else 0

        def guarded(*args: Any, **kwargs: Any) -> Any:
            b = self.budget
            b.step()
            value, rest = (args[skip], args[skip + 1:]) if len(args) > skip else (None, ())
            if name in _WIDTH_FILTERS:
                check_ints(b, rest, kwargs)
            if name == "replace" and len(rest) >= 2:
                s, old, new = str(value), str(rest[0]), str(rest[1])
                b.build(len(s) + (s.count(old) if old else len(s) + 1) * len(new))
            elif name == "indent":
                width = rest[0] if rest else kwargs.get("width", 4)
                lines = str(value).count("\n") + 1
                b.build(len(str(value)) + lines * (len(width) if isinstance(width, str)
                                                  else int(width)))
            elif name == "format":
                check_percent(b, str(value), tuple(rest) or kwargs)
                b.build(len(str(value)) + weight([rest, kwargs], b.max_chars))
            elif name in _SIZED_FILTERS:
                b.build(weight(value, b.max_chars) * (2 if name == "wordwrap" else 1))
            return self._built(func(*args, **kwargs))

        if pass_arg is not None:
            guarded.jinja_pass_arg = pass_arg  # type: ignore[attr-defined]
        return guarded


# Filters whose result is about as large as their input's text, which may be far larger than
# the input in memory (a list of 10⁵ references to one long string).
_SIZED_FILTERS = frozenset(["join", "tojson", "pprint", "string", "sum", "list", "wordwrap",
                            "urlize", "xmlattr", "center", "e", "escape", "forceescape",
                            "title", "upper", "lower", "capitalize", "trim", "striptags",
                            "urlencode"])
