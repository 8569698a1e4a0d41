"""Render a conversation with the model's own chat template (from its GGUF metadata).

Templates are untrusted input from model files, so they run in Jinja's immutable sandbox, with
the helpers Hugging Face templates expect (``raise_exception``, ``strftime_now``), as
llama-cpp-python does. Models without a template fall back to ChatML.

The sandbox stops a template from reaching Python internals, not from spending time or memory:
nested ``range(100000)`` loops run for hours and ``'x' * 300000000`` takes gigabytes. A render
thread cannot be killed in CPython, so the render itself is bounded instead: every loop step,
call, attribute lookup, operator and filter checks a deadline (and the caller's cancel event),
and every operation that can build a large value (``*``, ``+``, ``%``, ``**``, ``~``, the
string-building filters and methods, joining a block's output) checks the size of what it is
about to build against a cap before building it. Refusals are :class:`ModelFileError`.
"""

from __future__ import annotations

import json
import re
import string
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from specchat.errors import Cancelled, ModelFileError

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Real templates are a few KB and render in milliseconds; these limits are far above that.
MAX_SOURCE_CHARS = 1_000_000
RENDER_SECONDS = 3.0
BASE_VALUE_CHARS = 1_000_000  # plus 8 × the conversation's length: the largest value built
PRODUCED_FACTOR = 64  # all values built during one render: at most this many times that cap

_LOOP_FILTER = "specchat_loop_guard"
_JOIN_FILTER = "specchat_concat_guard"
_DIGITS = re.compile(r"\d+")
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")
# Methods and filters whose integer arguments are sizes: a width, a count of columns or rows.
_WIDTH_METHODS = frozenset(["center", "ljust", "rjust", "zfill", "expandtabs"])
_WIDTH_FILTERS = frozenset(["center", "indent", "batch", "slice", "wordwrap"])


@dataclass(frozen=True)
class ToolCall:
    """A function call an assistant message made, as OpenAI's API carries it."""

    id: str
    name: str
    arguments: str  # JSON text


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant" | "tool"
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant message's calls
    tool_call_id: str | None = None  # a tool message: the call it answers

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            # Templates take arguments as a mapping (Hugging Face's convention: Qwen's writes
            # `arguments | tojson`); OpenAI sends JSON text.
            d["tool_calls"] = [{"id": c.id, "type": "function",
                                "function": {"name": c.name, "arguments": _arguments(c.arguments)}}
                               for c in self.tool_calls]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        return d


def _arguments(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # Hugging Face's tojson, which templates are written for: keys in their order and no HTML
    # escapes (Jinja's own sorts keys and writes `<` as \u003c, unlike what the model saw).
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, separators=separators,
                      sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _Refused(Exception):
    """The template went over its budget (not a TemplateError: templates cannot catch it)."""


class _Budget:
    """One render's allowance of time and characters."""

    def __init__(self, seconds: float, max_chars: int, cancel: threading.Event | None) -> None:
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.max_chars = max_chars
        self.max_produced = PRODUCED_FACTOR * max_chars
        self.produced = 0
        self.cancel = cancel

    def step(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("stopped")
        if time.monotonic() > self.deadline:
            raise _Refused(f"it ran for more than {self.seconds:g} s")

    def build(self, n: int) -> None:
        """About to build a value of ``n`` characters (or items)."""
        if n > self.max_chars:
            raise _Refused(f"it builds a value of {n:,} characters (the limit is "
                           f"{self.max_chars:,})")
        self.produced += n
        if self.produced > self.max_produced:
            raise _Refused(f"it builds more than {self.max_produced:,} characters in all")


def _weight(value: Any, limit: int) -> int:
    """About how many characters ``str(value)`` has, counting shared items once per use;
    stops counting past ``limit`` (a list of 10⁵ references to one 1 MB string is 10¹¹)."""
    total = 0
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (str, bytes)):
            total += len(v) + 2
        elif isinstance(v, int) and not isinstance(v, bool):
            total += v.bit_length() // 3 + 2
        elif isinstance(v, (dict, list, tuple, set, frozenset)):
            total += 2 * len(v) + 2
            if total > limit:  # before putting its items on the stack
                return total
            stack.extend(v.keys() if isinstance(v, dict) else v)
            if isinstance(v, dict):
                stack.extend(v.values())
        else:
            total += 8
        if total > limit:
            return total
    return total


def _size(value: Any, limit: int) -> int:
    """A string's length, else :func:`_weight`."""
    return len(value) if isinstance(value, str) else _weight(value, limit)


def _check_ints(budget: _Budget, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """A width, count or repeat argument over the cap builds a value over the cap."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > budget.max_chars:
            budget.build(abs(a))


def _check_width(budget: _Budget, digits: str) -> None:
    if len(digits) > 12 or int(digits) > budget.max_chars:
        raise _Refused(f"it formats a value {digits[:20]} characters wide (the limit is "
                       f"{budget.max_chars:,})")


def _check_percent(budget: _Budget, fmt: str, args: Any) -> None:
    """Widths and precisions of ``fmt % args`` (``%999999999d``; ``%*d`` takes one from args)."""
    star = False
    for m in _PERCENT.finditer(fmt):
        for g in m.groups():
            if g == "*":
                star = True
            elif g:
                _check_width(budget, g)
    if star:
        _check_ints(budget, args if isinstance(args, tuple) else (args,), {})


def _check_format(budget: _Budget, fmt: str, args: Sequence[Any], kwargs: dict[str, Any]
                  ) -> None:
    """Widths in ``fmt.format(...)``'s fields (``{:>999999999}``; ``{:{}}`` takes one from
    the arguments); the literal text between fields may hold any digits."""
    try:
        fields = [spec for _, _, spec, _ in string.Formatter().parse(fmt) if spec]
    except ValueError:
        return  # malformed: format() itself raises
    for spec in fields:
        for m in _DIGITS.finditer(spec):
            _check_width(budget, m.group())
        if "{" in spec:
            _check_ints(budget, args, kwargs)


class _Guards(NodeTransformer):
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

    def __init__(self, env: _BoundedEnvironment, iterable: Any) -> None:
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


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
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
    def budget(self) -> _Budget:
        # Thread-local: unset in a thread that has not rendered yet.
        b: _Budget | None = getattr(self._local, "budget", None)
        if b is None:
            # Outside a render means at compile time, where Jinja folds constant expressions
            # (``{{ 'x'|center(10**9) }}``) unless that fails: leave them to the render.
            raise _Refused("not rendering")
        return b

    def bounded(self, budget: _Budget | None) -> None:
        self._local.budget = budget

    def step(self) -> None:
        b: _Budget | None = getattr(self._local, "budget", None)  # thread-local, as above
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
                    b.build(_size(seq, b.max_chars) * max(n, 0))
            if isinstance(left, int) and isinstance(right, int):
                b.build((left.bit_length() + right.bit_length()) // 3)
        elif operator == "+" and isinstance(left, (str, list, tuple)):
            b.build(_size(left, b.max_chars) + _size(right, b.max_chars))
        elif operator == "%" and isinstance(left, str):
            _check_percent(b, left, right)
            b.build(len(left) + _weight(right, b.max_chars))
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
            _check_ints(b, args, kwargs)
        if isinstance(owner, str):
            if name in _WIDTH_METHODS:
                _check_ints(b, args, kwargs)
            if name == "join" and args:
                items = list(args[0])
                args = (items, *args[1:])
                b.build(_weight(items, b.max_chars) + len(owner) * len(items))
            elif name == "replace" and len(args) >= 2:
                old, new = str(args[0]), str(args[1])
                b.build(len(owner) + (owner.count(old) if old else len(owner) + 1) * len(new))
            elif name == "expandtabs":
                b.build(len(owner) * (int(args[0]) if args else 8))
            elif name in ("format", "format_map"):
                _check_format(b, owner, args, kwargs)
                b.build(len(owner) + _weight([args, kwargs], b.max_chars))
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
        b.build(_weight(value, b.max_chars))
        return value

    def _join(self, parts: list[Any]) -> str:
        """``a ~ b ~ …``."""
        b = self.budget
        b.step()
        b.build(_weight(parts, b.max_chars))
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
                _check_ints(b, rest, kwargs)
            if name == "replace" and len(rest) >= 2:
                s, old, new = str(value), str(rest[0]), str(rest[1])
                b.build(len(s) + (s.count(old) if old else len(s) + 1) * len(new))
            elif name == "indent":
                width = rest[0] if rest else kwargs.get("width", 4)
                lines = str(value).count("\n") + 1
                b.build(len(str(value)) + lines * (len(width) if isinstance(width, str)
                                                  else int(width)))
            elif name == "format":
                _check_percent(b, str(value), tuple(rest) or kwargs)
                b.build(len(str(value)) + _weight([rest, kwargs], b.max_chars))
            elif name in _SIZED_FILTERS:
                b.build(_weight(value, b.max_chars) * (2 if name == "wordwrap" else 1))
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


class ChatTemplate:
    def __init__(self, source: str | None, bos_token: str, eos_token: str) -> None:
        self.is_fallback = not source
        self.source = source or CHATML
        self.bos_token = bos_token
        self.eos_token = eos_token
        if len(self.source) > MAX_SOURCE_CHARS:
            raise ModelFileError(f"the model's chat template is {len(self.source):,} characters "
                                 f"long (the limit is {MAX_SOURCE_CHARS:,}): refused")
        self._env = _BoundedEnvironment()
        try:
            tree = _Guards().visit(self._env.parse(self.source))
            self._template = self._env.from_string(tree)
        except jinja2.TemplateError as e:
            raise ModelFileError(f"the model's chat template does not compile: {e}") from None
        except Exception as e:  # e.g. RecursionError on absurdly nested syntax
            raise ModelFileError(f"the model's chat template does not compile: "
                                 f"{type(e).__name__}") from None

    @property
    def takes_tools(self) -> bool:
        """Whether the template renders a tool list and writes calls in a format specchat
        reads back (:mod:`specchat.engine.decode.tool_calls`)."""
        return not self.is_fallback and "tools" in self.source and "<tool_call>" in self.source

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True,
               cancel: threading.Event | None = None,
               tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        """The prompt text; raises :class:`ModelFileError` if the template fails or goes over
        its time or size budget, :class:`Cancelled` if ``cancel`` is set meanwhile. ``tools``:
        OpenAI's tool list, handed to the template as ``tools`` (as Hugging Face does)."""
        ctx: dict[str, Any] = {
            "messages": [m.as_dict() for m in messages],
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "raise_exception": _raise,
            "strftime_now": _strftime_now,
        }
        if tools:
            ctx["tools"] = [dict(t) for t in tools]
        size = sum(len(m.content) + len(m.role) for m in messages) \
            + sum(len(json.dumps(t)) for t in tools or ())
        budget = _Budget(RENDER_SECONDS, BASE_VALUE_CHARS + 8 * size, cancel)
        self._env.bounded(budget)
        try:
            out: list[str] = []
            n = 0
            for chunk in self._template.generate(**ctx):
                n += len(chunk)
                if n > budget.max_chars:
                    raise _Refused(f"its output passed {budget.max_chars:,} characters")
                budget.step()
                out.append(chunk)
            return "".join(out)
        except _Refused as e:
            raise ModelFileError(f"the model's chat template was stopped: {e}") from None
        except Cancelled:
            raise
        except jinja2.TemplateError as e:
            raise ModelFileError(f"the model's chat template rejected the conversation: {e}") from None
        except MemoryError:
            raise ModelFileError("the model's chat template ran out of memory") from None
        except Exception as e:  # a template can fail in any way; the user still gets a sentence
            raise ModelFileError(f"the model's chat template failed: {e}") from None
        finally:
            self._env.bounded(None)
