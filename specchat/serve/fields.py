"""Checks shared by every request field: a wrong type or a flag is a 400 naming the field, and
text must be Unicode the server can encode."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specchat.serve.api_errors import ApiError, bad_request


def shown(value: Any) -> str:
    """A value as an error message quotes it: a string's first 40 characters, else its kind."""
    return value[:40] if isinstance(value, str) else kind_name(value)


def kind_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__


def wrong_type(param: str, expected: str, value: Any) -> ApiError:
    return bad_request(f"'{param}' must be {expected}, not {kind_name(value)}", param,
                       "invalid_type")


def flag(doc: Mapping[str, Any], name: str, default: bool = False, where: str = "") -> bool:
    v = doc.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise wrong_type(where + name, "true or false", v)
    return v


def unicode_text(text: str, param: str) -> str:
    """``text`` if it is Unicode: JSON's \\u escapes can spell half of a UTF-16 pair (a lone
    surrogate), which is no character and cannot be encoded for the tokenizer."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise bad_request(f"'{param}' is not valid Unicode: character {e.start} is a lone "
                          f"surrogate (\\u{ord(text[e.start]):04x}), half of a UTF-16 pair",
                          param) from None
    return text
