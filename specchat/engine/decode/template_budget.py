"""A chat template's render budget: time and characters, checked before a value is built.

A render thread cannot be killed in CPython, so a render is bounded from inside: the sandbox
(:mod:`.template_sandbox`) calls :meth:`Budget.step` on every loop step, call, attribute
lookup, operator and filter (it checks a deadline and the caller's cancel event), and
:meth:`Budget.build` with the size of each value it is about to build (it checks that value
against a cap, and all values built in the render against ``PRODUCED_FACTOR`` times it). The
helpers here estimate those sizes — of a value's text, of a width or repeat count, of a
``%`` or ``str.format`` field — without building anything. A refusal is :class:`Refused`, which
a template cannot catch; a set cancel event is :class:`~specchat.errors.Cancelled`.
"""

from __future__ import annotations

import re
import string
import threading
import time
from collections.abc import Sequence
from typing import Any

from specchat.errors import Cancelled

PRODUCED_FACTOR = 64  # all values built during one render: at most this many times that cap

_DIGITS = re.compile(r"\d+")
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")


class Refused(Exception):
    """The template went over its budget (not a TemplateError: templates cannot catch it)."""


class Budget:
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
            raise Refused(f"it ran for more than {self.seconds:g} s")

    def build(self, n: int) -> None:
        """About to build a value of ``n`` characters (or items)."""
        if n > self.max_chars:
            raise Refused(f"it builds a value of {n:,} characters (the limit is "
                          f"{self.max_chars:,})")
        self.produced += n
        if self.produced > self.max_produced:
            raise Refused(f"it builds more than {self.max_produced:,} characters in all")


def weight(value: Any, limit: int) -> int:
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


def size(value: Any, limit: int) -> int:
    """A string's length, else :func:`weight`."""
    return len(value) if isinstance(value, str) else weight(value, limit)


def check_ints(budget: Budget, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """A width, count or repeat argument over the cap builds a value over the cap."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > budget.max_chars:
            budget.build(abs(a))


def check_width(budget: Budget, digits: str) -> None:
    if len(digits) > 12 or int(digits) > budget.max_chars:
        raise Refused(f"it formats a value {digits[:20]} characters wide (the limit is "
                      f"{budget.max_chars:,})")


def check_percent(budget: Budget, fmt: str, args: Any) -> None:
    """Widths and precisions of ``fmt % args`` (``%999999999d``; ``%*d`` takes one from args)."""
    star = False
    for m in _PERCENT.finditer(fmt):
        for g in m.groups():
            if g == "*":
                star = True
            elif g:
                check_width(budget, g)
    if star:
        check_ints(budget, args if isinstance(args, tuple) else (args,), {})


def check_format(budget: Budget, fmt: str, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """Widths in ``fmt.format(...)``'s fields (``{:>999999999}``; ``{:{}}`` takes one from
    the arguments); the literal text between fields may hold any digits."""
    try:
        fields = [spec for _, _, spec, _ in string.Formatter().parse(fmt) if spec]
    except ValueError:
        return  # malformed: format() itself raises
    for spec in fields:
        for m in _DIGITS.finditer(spec):
            check_width(budget, m.group())
        if "{" in spec:
            check_ints(budget, args, kwargs)

