"""Fuzz `python -m specchat serve` (a real server process on the tiny pair) with generated
request bodies (specchat.devtools.serve_fuzz_requests): every answer is an OpenAI error object with a 4xx
status or a valid completion, never a 500 or a traceback, and the server keeps answering.
200 examples here, derandomized so CI sees the same ones; scripts/fuzz_serve.py runs more."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from specchat.devtools.serve_fuzz_answers import health, problems, send
from specchat.devtools.serve_fuzz_requests import Request, requests
from tests.serve_helpers import ServerProcess, raw, wait_until

MAX_BODY = 64 * 1024  # bytes (--max-body-mb 0.0625): oversized bodies stay small
FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def server(tiny_target: Path, tiny_draft: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("serve-fuzz")
    # A small context and reply cap: a request that asks for many tokens ends at the context.
    proc = ServerProcess(home, "--model", str(tiny_target), "--draft", str(tiny_draft),
                         "--gamma", "3", "--ctx-size", "256", "--max-tokens", "4",
                         "--max-body-mb", str(MAX_BODY / (1024 * 1024)))
    try:
        wait_until(lambda: raw(proc.url or "", "GET", "/health")[0] == 200, "the load")
        yield proc
    finally:
        assert proc.stop() in (0, -15), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


@FUZZ
@given(request=requests(MAX_BODY))
def test_any_body_gets_an_error_object_or_a_completion(server: ServerProcess,
                                                       request: Request) -> None:
    url = server.url or ""
    answer = send(url, request)
    found = problems(answer, request)
    assert not found, (request.what, found)
    status, doc = health(url)
    assert status == 200 and doc["queued"] == 0, doc
    assert "Traceback" not in server.stderr, server.stderr[-3000:]


# ---------------------------------------------------------- what the fuzzer found, each fixed

CHAT, TEXT = "/v1/chat/completions", "/v1/completions"
HI = '{"role": "user", "content": "hi"}'


@pytest.mark.parametrize(("path", "body", "param"), [
    (CHAT, '{"messages": [{"role": "user", "content": "a\\ud800b"}]}', "messages[0].content"),
    (CHAT, '{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]}',
     "messages[0].content[0].text"),
    (TEXT, '{"prompt": "the cat \\udbff"}', "prompt"),
    (TEXT, '{"prompt": ["\\ud800"]}', "prompt"),
    (CHAT, '{"messages": [' + HI + '], "stop": ["ok", "\\ud800"]}', "stop"),
])
def test_a_lone_surrogate_is_a_400_naming_the_field(server: ServerProcess, path: str,
                                                    body: str, param: str) -> None:
    """JSON's \\u escapes can spell half a UTF-16 pair, which the tokenizer cannot encode: it
    was a 500 with a UnicodeEncodeError traceback."""
    status, doc, _ = raw(server.url or "", "POST", path, body.encode())
    assert status == 400, doc
    assert doc["error"]["param"] == param and "not valid Unicode" in doc["error"]["message"]
    assert "lone surrogate" in doc["error"]["message"]


def test_a_prompt_nested_past_a_batch_of_one_is_a_400(server: ServerProcess) -> None:
    """Each level of [[...]] was unwrapped as "a batch of one", recursively: deep enough it
    would exhaust the stack; OpenAI's forms nest one level."""
    url = server.url or ""
    status, doc, _ = raw(url, "POST", TEXT, b'{"prompt": [[["the cat"]]], "max_tokens": 2}')
    assert status == 400 and doc["error"]["param"] == "prompt", doc
    assert doc["error"]["code"] == "invalid_type"
    deep = b'{"prompt": ' + b"[" * 400 + b'"x"' + b"]" * 400 + b"}"
    assert raw(url, "POST", TEXT, deep)[0] == 400
    for ok in (b'{"prompt": ["the cat"], "max_tokens": 2}', b'{"prompt": [[5, 6]], "max_tokens": 2}'):
        status, doc, _ = raw(url, "POST", TEXT, ok)
        assert status == 200 and doc["usage"]["completion_tokens"] == 2, doc


def test_a_stop_string_over_the_limit_is_a_400(server: ServerProcess) -> None:
    """The reply checks each stop string's prefixes at every token: a 30,000-character one
    took 80 ms a token (a few in a body could hold the one generation thread for hours)."""
    long = '"' + "x" * 1001 + '"'
    status, doc, _ = raw(server.url or "", "POST", CHAT,
                         f'{{"messages": [{HI}], "stop": ["a", {long}]}}'.encode())
    assert status == 400 and doc["error"]["param"] == "stop", doc
    assert doc["error"]["message"] == "a stop string of 1,001 characters: at most 1,000"
    status, _, _ = raw(server.url or "", "POST", CHAT,
                       f'{{"messages": [{HI}], "stop": "{"x" * 1000}", "max_tokens": 2}}'.encode())
    assert status == 200


def test_a_wrong_include_usage_names_its_full_path(server: ServerProcess) -> None:
    status, doc, _ = raw(server.url or "", "POST", CHAT,
                         f'{{"messages": [{HI}], "stream": true, '
                         '"stream_options": {"include_usage": "yes"}}'.encode())
    assert status == 400 and doc["error"]["param"] == "stream_options.include_usage", doc


@pytest.mark.parametrize(("extra", "param"), [
    ('"tools": [{"type": "function", "function": {"name": "f"}}]', "tools"),
    ('"response_format": {"type": "json_object"}', "response_format"),
])
def test_a_grammar_the_vocabulary_cannot_write_is_a_400_naming_its_field(
        server: ServerProcess, extra: str, param: str) -> None:
    """The tiny target's vocabulary has no JSON punctuation (and its template no tool format,
    so tools are the generic JSON reply): llguidance's mask let a token through that its
    matcher then refused, a 500 (ValueError or "a committed token breaks the grammar")."""
    status, doc, _ = raw(server.url or "", "POST", CHAT,
                         f'{{"messages": [{HI}], "max_tokens": 8, {extra}}}'.encode())
    assert status == 400, doc
    assert (doc["error"]["param"], doc["error"]["code"]) == (param, "invalid_grammar"), doc
    assert "vocabulary cannot write" in doc["error"]["message"]
