"""Generated request bodies for `specchat serve`: what the fuzzer sends.

Bodies for ``/v1/chat/completions``, ``/v1/completions`` and ``/v1/responses`` (and their
un-prefixed twins), some sent as a web page of another origin would send them:
valid ones with fields changed to wrong types, out-of-range or huge numbers, odd Unicode (lone
surrogates included) and nested junk, required fields missing, unknown fields, bodies that are
not JSON objects or not JSON at all, and bodies over the server's size limit. Each comes as a
:class:`Request` (its path, its bytes, what kind of body it is, its Origin); sending one and
checking what the server answers is :mod:`~specchat.devtools.serve_fuzz_answers`.
``tests/test_serve_fuzz.py`` runs a small budget of them, ``scripts/fuzz_serve.py`` a large one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
COMPLETION_PATHS = ("/v1/completions", "/completions")
RESPONSES_PATHS = ("/v1/responses", "/responses")
# Origins a browser may send: allowed by default (this machine's pages), and not.
ALLOWED_ORIGINS = ("http://localhost:5173", "http://127.0.0.1:8080", "https://localhost")
OTHER_ORIGINS = ("http://example.com", "null", "http://localhost.evil.com", "file://")

# Numbers at the edges: around the ranges the server checks, the 32/64-bit limits, and ints too
# large for a float (a 400-digit one).
EDGE_INTS = [-(1 << 63), -(1 << 31), -2, -1, 0, 1, 2, 3, 16, 17, 255, (1 << 31) - 1, 1 << 31,
             (1 << 32) - 1, 1 << 32, (1 << 63) - 1, 1 << 64, 10 ** 30, 10 ** 400]
EDGE_FLOATS = [0.0, -0.0, 1e-300, 5e-324, 0.5, 1.0, 1.0000001, 2.0, 1e300, -1e300, 1.7e308]


def _text() -> st.SearchStrategy[str]:
    """Any Unicode, lone surrogates (valid JSON escapes, invalid UTF-8) and control codes too."""
    surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
    anything = st.characters(codec=None, exclude_categories=())
    return st.one_of(
        st.text(max_size=12),
        st.text(st.one_of(anything, surrogate), max_size=12),
        st.sampled_from(["", " ", "\x00", "\u202e", "🦜" * 3, "a" * 3000, "<|im_start|>",
                         "\ud800", "x\udfffy", "{{ raise }}", "{% for %}"]),
    )


def _number() -> st.SearchStrategy[int | float]:
    return st.one_of(st.sampled_from(EDGE_INTS), st.sampled_from(EDGE_FLOATS),
                     st.integers(-1000, 1000),
                     st.floats(allow_nan=False, allow_infinity=False))


def _leaf() -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.booleans(), _number(), _text())


def junk() -> st.SearchStrategy[Any]:
    """Any JSON value, nested a few levels."""
    return st.recursive(_leaf(), lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_text(), inner, max_size=4)),
        max_leaves=12)


def _message() -> st.SearchStrategy[Any]:
    role = st.one_of(st.sampled_from(["system", "developer", "user", "assistant", "tool",
                                      "function", "USER", ""]), junk())
    part = st.one_of(st.fixed_dictionaries({"type": st.just("text"), "text": _text()}),
                     st.fixed_dictionaries({"type": st.sampled_from(["image_url", "text", 1]),
                                            "text": junk()}),
                     junk())
    content = st.one_of(_text(), st.lists(part, max_size=3), junk())
    plain = st.fixed_dictionaries({"role": st.just("user"), "content": _text()})
    wild = st.fixed_dictionaries({}, optional={"role": role, "content": content,
                                               "name": junk(), "tool_calls": junk()})
    return st.one_of(plain, plain, wild, junk())


def _messages() -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(_message(), min_size=1, max_size=4), st.just([]), junk())


def _prompt() -> st.SearchStrategy[Any]:
    ids = st.lists(st.one_of(st.integers(0, 51), st.sampled_from(EDGE_INTS)), min_size=1,
                   max_size=8)
    return st.one_of(_text(), ids, st.lists(_text(), min_size=1, max_size=3),
                     st.lists(ids, min_size=1, max_size=2), st.just([[[[[["deep"]]]]]]),
                     junk())


def _field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value: a valid one half the time, else anything."""
    return st.one_of(valid, valid, junk())


# Every field the server reads, each with values it accepts (and, through _field, any other).
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": st.sampled_from(["tiny", "gpt-4o", ""]),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans()}),
    "temperature": st.one_of(st.just(0), st.floats(0, 2)),
    "top_p": st.floats(0.01, 1),
    "top_k": st.integers(0, 100),
    "min_p": st.floats(0, 0.99),
    "max_tokens": st.integers(1, 6),
    "max_completion_tokens": st.integers(1, 6),
    "seed": st.one_of(st.integers(-1, 1 << 40), st.none()),
    "stop": st.one_of(_text(), st.lists(_text(), max_size=20)),
    "n": st.sampled_from([1, 2, None]),
    "frequency_penalty": st.sampled_from([0, 0.5, None]),
    "presence_penalty": st.sampled_from([0, -1.0, None]),
    "logit_bias": st.one_of(st.just({}), st.dictionaries(st.text(max_size=3),
                                                         st.integers(-100, 100), max_size=2)),
    "logprobs": st.sampled_from([False, True, None, 0, 3]),
    "top_logprobs": st.sampled_from([0, 2, None]),
    "tools": st.sampled_from([[], None, [{"type": "function"}], [{"type": "function",
                              "function": {"name": "f", "parameters": {"type": "object"}}}]]),
    "tool_choice": st.sampled_from(["auto", "none", "required", "nope",
                                    {"type": "function", "function": {"name": "f"}}]),
    "parallel_tool_calls": st.booleans(),
    "prediction": st.sampled_from([{"type": "content", "content": "the cat"},
                                   {"type": "content"}, "the cat"]),
    "functions": st.sampled_from([[], None]),
    "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}, {}, None,
                                        {"type": "json_schema", "json_schema": {
                                            "name": "r", "schema": {"type": "object"}}}]),
    "echo": st.booleans(),
    "suffix": st.sampled_from(["", None, "end"]),
    "best_of": st.sampled_from([1, 2, None, True]),
    "specchat": st.fixed_dictionaries({}, optional={"fates": st.booleans()}),
    "user": st.text(max_size=5),
}


# The Responses API's fields, each with values it accepts (and, through _field, any other).
RESPONSES_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": st.sampled_from(["tiny", "gpt-4o", ""]),
    "stream": st.booleans(),
    "instructions": st.one_of(_text(), st.none()),
    "temperature": st.one_of(st.just(0), st.floats(0, 2)),
    "top_p": st.floats(0.01, 1),
    "max_output_tokens": st.integers(1, 6),
    "tools": st.sampled_from([[], None, [{"type": "web_search"}], [{"type": "function"}],
                              [{"type": "function", "name": "f",
                                "parameters": {"type": "object"}}]]),
    "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "function",
                                                                 "name": "f"},
                                    {"type": "file_search"}]),
    "parallel_tool_calls": st.booleans(),
    "text": st.sampled_from([{"format": {"type": "text"}}, {"format": {"type": "json_object"}},
                             {"format": {"type": "json_schema", "name": "r",
                                         "schema": {"type": "object"}}},
                             {"format": {"type": "json_schema"}}, {"format": None}, {}]),
    "previous_response_id": st.sampled_from(["resp_nothing", "", None]),
    "store": st.booleans(),
    "background": st.sampled_from([False, True, None]),
    "conversation": st.sampled_from([None, "conv_1"]),
    "reasoning": st.sampled_from([None, {"effort": "low"}]),
    "include": st.sampled_from([[], None, ["message.output_text.logprobs"],
                                ["reasoning.encrypted_content", "message.output_text.logprobs"],
                                ["output_text"], "message.output_text.logprobs", [3]]),
    "metadata": st.sampled_from([{}, {"k": "v"}, None]),
    "top_logprobs": st.sampled_from([0, 2, 20, 21, -1, None, "3", True]),
    "specchat": st.fixed_dictionaries({}, optional={"fates": st.booleans()}),
}


def _input_item() -> st.SearchStrategy[Any]:
    text_part = st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text",
                                                                "input_image", 3]),
                                       "text": _text()})
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "developer", "assistant", "tool", ""])},
        optional={"type": st.just("message"),
                  "content": st.one_of(_text(), st.lists(text_part, max_size=2), junk())})
    call = st.fixed_dictionaries({"type": st.just("function_call")},
                                 optional={"call_id": _text(), "name": _text(),
                                           "arguments": st.one_of(_text(), junk())})
    output = st.fixed_dictionaries({"type": st.just("function_call_output")},
                                   optional={"call_id": _text(),
                                             "output": st.one_of(_text(), junk())})
    other = st.fixed_dictionaries({"type": st.sampled_from(["item_reference", "reasoning",
                                                            "web_search_call", ""])},
                                  optional={"id": _text()})
    return st.one_of(message, message, call, output, other, junk())


def _input() -> st.SearchStrategy[Any]:
    return st.one_of(_text(), st.lists(_input_item(), min_size=1, max_size=4), st.just([]),
                     junk())


@dataclass(frozen=True)
class Request:
    path: str
    body: bytes
    what: str  # for a failure's message: what kind of body this was
    origin: str | None = None  # sent as a web page's Origin

    def __repr__(self) -> str:  # hypothesis prints the falsifying example: keep it readable
        shown = self.body if len(self.body) <= 400 else self.body[:400] + b"..."
        return f"Request({self.path!r}, {shown!r}, {self.what!r}, {self.origin!r})"

    @property
    def refused_origin(self) -> bool:
        """Sent from a web page's origin the server does not allow by default (a 403)."""
        return self.origin in OTHER_ORIGINS


@st.composite
def _responses_body(draw: st.DrawFn) -> dict[str, Any]:
    """A valid Responses body, then some of its fields changed, dropped or added."""
    doc: dict[str, Any] = {"input": "hello", "max_output_tokens": draw(st.integers(1, 4))}
    if draw(st.booleans()):
        doc["stream"] = True
    names = draw(st.lists(st.sampled_from(sorted(RESPONSES_FIELDS)), max_size=3, unique=True))
    for name in names:
        doc[name] = draw(_field(RESPONSES_FIELDS[name]))
    choice = draw(st.sampled_from(["keep"] * 3 + ["change"] * 4 + ["drop", "null"]))
    if choice == "change":
        doc["input"] = draw(_input())
    elif choice == "drop":
        del doc["input"]
    elif choice == "null":
        doc["input"] = None
    for k, v in draw(st.dictionaries(_text(), junk(), max_size=2)).items():
        doc.setdefault(k, v)
    return doc


@st.composite
def _object_body(draw: st.DrawFn, chat: bool | None) -> dict[str, Any]:
    """A valid body, then some of its fields changed, dropped or added (None: a Responses
    body)."""
    if chat is None:
        return draw(_responses_body())
    doc: dict[str, Any] = ({"messages": [{"role": "user", "content": "hello"}]} if chat
                           else {"prompt": "the cat"})
    doc["max_tokens"] = draw(st.integers(1, 4))
    if draw(st.booleans()):  # half the bodies stream
        doc["stream"] = True
    names = draw(st.lists(st.sampled_from(sorted(FIELDS)), max_size=3, unique=True))
    for name in names:
        doc[name] = draw(_field(FIELDS[name]))
    main = "messages" if chat else "prompt"
    choice = draw(st.sampled_from(["keep"] * 3 + ["text"] * 3 + ["change"] * 2
                                  + ["drop", "null", "other"]))
    if choice == "text":  # the right shape, any text in it
        texts = draw(st.lists(_text(), min_size=1, max_size=3))
        roles = (["user"], ["system", "user"], ["user", "assistant", "user"])[len(texts) - 1]
        doc[main] = ([{"role": r, "content": t} for r, t in zip(roles, texts, strict=True)]
                     if chat else texts[0])
    elif choice == "change":
        doc[main] = draw(_messages() if chat else _prompt())
    elif choice == "drop":
        del doc[main]
    elif choice == "null":
        doc[main] = None
    elif choice == "other":  # the other endpoint's field instead
        del doc[main]
        doc["prompt" if chat else "messages"] = draw(_prompt() if chat else _messages())
    extra = draw(st.dictionaries(_text(), junk(), max_size=2))
    for k, v in extra.items():
        doc.setdefault(k, v)
    return doc


def _dump(doc: Any) -> bytes:
    # ASCII escapes: a lone surrogate travels as JSON's \\udXXX, which is valid JSON.
    return json.dumps(doc, ensure_ascii=True).encode("ascii")


@st.composite
def requests(draw: st.DrawFn, max_body: int) -> Request:
    """One request for a server whose body limit is ``max_body`` bytes, now and then from a
    web page's origin."""
    request = draw(_requests(max_body))
    origin = draw(st.one_of(st.none(), st.none(), st.none(), st.sampled_from(ALLOWED_ORIGINS),
                            st.sampled_from(OTHER_ORIGINS)))
    return Request(request.path, request.body, request.what, origin)


@st.composite
def _requests(draw: st.DrawFn, max_body: int) -> Request:
    route = draw(st.sampled_from(["chat", "completion", "responses"]))
    chat = {"chat": True, "completion": False, "responses": None}[route]
    path = draw(st.sampled_from(CHAT_PATHS if route == "chat" else COMPLETION_PATHS
                                if route == "completion" else RESPONSES_PATHS))
    kind = draw(st.sampled_from(["object"] * 12 + ["value", "bytes", "cut", "huge", "number",
                                                   "deep"]))
    if kind == "object":
        return Request(path, _dump(draw(_object_body(chat))), "a changed body")
    if kind == "value":
        return Request(path, _dump(draw(junk())), "a JSON value")
    if kind == "bytes":
        return Request(path, draw(st.binary(max_size=64)), "bytes")
    if kind == "cut":
        whole = _dump(draw(_object_body(chat)))
        return Request(path, whole[: draw(st.integers(0, max(0, len(whole) - 1)))],
                       "a cut body")
    if kind == "huge":  # over the limit, or just under it
        size = draw(st.sampled_from([max_body + 1, max_body * 2, max_body - 200]))
        doc = draw(_object_body(chat))
        doc["padding"] = ""
        room = size - len(_dump(doc))
        doc["padding"] = "x" * max(0, room)
        return Request(path, _dump(doc), f"a body of about {size} bytes")
    if kind == "number":  # numbers JSON allows that no float holds
        field = draw(st.sampled_from(["temperature", "top_p", "top_k", "min_p", "max_tokens",
                                      "seed", "n", "frequency_penalty"]))
        number = draw(st.sampled_from(["1e400", "-1e400", "1e-400", "123456789" * 30, "-0",
                                       "0.0e0", "1" + "0" * 5000]))
        base = _dump(draw(_object_body(chat)))
        return Request(path, base[:-1] + f', "{field}": {number}}}'.encode(),
                       f"{field} = {number[:20]}")
    depth = draw(st.sampled_from([50, 500, 990, 5000]))
    key = {"chat": "messages", "completion": "prompt", "responses": "input"}[route]
    return Request(path, f'{{"{key}": {"[" * depth}1{"]" * depth}}}'.encode(),
                   f"{key} nested {depth} deep")
