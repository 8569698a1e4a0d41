"""Sending a fuzzer's request to `specchat serve` and the check of what it answers.

Whatever a :class:`~specchat.devtools.serve_fuzz_requests.Request` carries, the server must
answer with an OpenAI error object and a 4xx status (a 403 for an origin it does not allow), or
with a valid completion or response (whole or streamed, in its route's shape), and keep
answering: :func:`problems` says what is wrong with an answer, :func:`health` whether the server
still answers. ``tests/test_serve_fuzz.py`` runs a small budget of requests,
``scripts/fuzz_serve.py`` a large one.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from specchat.devtools.serve_fuzz_requests import RESPONSES_PATHS, Request

ERROR_KEYS = {"message", "type", "param", "code"}
FINISH = {"stop", "length", "tool_calls"}


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes


def send(url: str, request: Request, timeout: float = 60.0) -> Answer:
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if request.origin is not None:
        headers["Origin"] = request.origin
    try:
        conn.request("POST", request.path, body=request.body, headers=headers)
        resp = conn.getresponse()
        return Answer(resp.status, resp.getheader("content-type", ""), resp.read())
    finally:
        conn.close()


def problems(answer: Answer, request: Request | None = None) -> list[str]:
    """What is wrong with an answer (nothing: an error object with a 4xx — a 403 where the
    request's origin is not allowed — or a completion or response in its route's shape)."""
    responses = request is not None and request.path in RESPONSES_PATHS
    if request is not None and request.refused_origin and answer.status != 403:
        return [f"status {answer.status} for a page of origin {request.origin!r}"]
    if answer.status == 200 and answer.content_type.startswith("text/event-stream"):
        return _event_problems(answer.body) if responses else _stream_problems(answer.body)
    try:
        doc = json.loads(answer.body)
    except ValueError:
        return [f"status {answer.status} with a body that is not JSON: {answer.body[:200]!r}"]
    if answer.status == 200:
        return _response_problems(doc) if responses else _completion_problems(doc, chunk=False)
    if not 400 <= answer.status < 500:
        return [f"status {answer.status}: {answer.body[:300]!r}"]
    return _error_problems(doc)


def _error_problems(doc: Any) -> list[str]:
    err = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(err, dict) or set(err) != ERROR_KEYS or set(doc) != {"error"}:
        return [f"not an OpenAI error object: {str(doc)[:300]}"]
    if not isinstance(err["message"], str) or not err["message"] or not isinstance(
            err["type"], str):
        return [f"an error object without a message or type: {err}"]
    if "Traceback" in err["message"]:
        return [f"a traceback in the message: {err['message'][:300]}"]
    return []


def _completion_problems(doc: Any, chunk: bool) -> list[str]:
    if not isinstance(doc, dict) or "error" in doc:
        return [f"not a completion: {str(doc)[:300]}"]
    if doc.get("object") not in ("chat.completion", "text_completion", "chat.completion.chunk"):
        return [f"no completion object: {str(doc)[:300]}"]
    choices = doc.get("choices")
    if not isinstance(choices, list) or len(choices) > 1 or (not chunk and len(choices) != 1):
        return [f"wrong choices: {str(doc)[:300]}"]
    if not chunk:
        usage = doc.get("usage") or {}
        if choices[0].get("finish_reason") not in FINISH or not isinstance(
                usage.get("completion_tokens"), int):
            return [f"no finish reason or usage: {str(doc)[:300]}"]
    return []


def _stream_problems(body: bytes) -> list[str]:
    events = [e for e in body.split(b"\n\n") if e.strip()]
    if not events or events[-1] != b"data: [DONE]":
        return [f"a stream that does not end with [DONE]: {body[-300:]!r}"]
    docs = []
    for e in events[:-1]:
        if not e.startswith(b"data: "):
            return [f"a stream event that is not data: {e[:200]!r}"]
        try:
            docs.append(json.loads(e[6:]))
        except ValueError:
            return [f"a stream event that is not JSON: {e[:200]!r}"]
    for d in docs:
        if found := _completion_problems(d, chunk=True):
            return found
    finals = [d for d in docs if d["choices"] and d["choices"][0].get("finish_reason")]
    if len(finals) != 1 or finals[0]["choices"][0]["finish_reason"] not in FINISH:
        return [f"a stream without one finish reason: {body[-300:]!r}"]
    return []


def _response_problems(doc: Any) -> list[str]:
    """A Responses API object: its output items and its usage."""
    if not isinstance(doc, dict) or doc.get("object") != "response":
        return [f"not a response object: {str(doc)[:300]}"]
    if doc.get("status") not in ("completed", "incomplete"):
        return [f"a response neither completed nor incomplete: {str(doc)[:300]}"]
    output = doc.get("output")
    if not isinstance(output, list) or not output or any(
            not isinstance(o, dict) or o.get("type") not in ("message", "function_call")
            for o in output):
        return [f"a response without its output items: {str(doc)[:300]}"]
    usage = doc.get("usage") or {}
    if not isinstance(usage.get("output_tokens"), int):
        return [f"a response without usage: {str(doc)[:300]}"]
    for o in output:
        for part in o.get("content") or []:
            if not _logprobs_ok(part.get("logprobs") if isinstance(part, dict) else None):
                return [f"an output text's logprobs out of shape: {str(part)[:300]}"]
    return []


def _logprobs_ok(entries: Any) -> bool:
    """An output text's ``logprobs``: each token's text, bytes, log-probability (≤ 0) and its
    alternatives in the same shape."""
    def one(e: Any) -> bool:
        return (isinstance(e, dict) and isinstance(e.get("token"), str)
                and isinstance(e.get("logprob"), (int, float)) and e["logprob"] <= 0
                and isinstance(e.get("bytes"), list))

    return isinstance(entries, list) and all(
        one(e) and isinstance(e.get("top_logprobs"), list) and all(map(one, e["top_logprobs"]))
        for e in entries)


def _event_problems(body: bytes) -> list[str]:
    """A Responses stream: named events in sequence, created first, completed (or incomplete,
    or an error event) last, no [DONE]."""
    docs = []
    for e in (e for e in body.split(b"\n\n") if e.strip()):
        lines = e.split(b"\n")
        if len(lines) != 2 or not lines[0].startswith(b"event: ") or not lines[1].startswith(
                b"data: "):
            return [f"a Responses event that is not an event and its data: {e[:200]!r}"]
        try:
            doc = json.loads(lines[1][6:])
        except ValueError:
            return [f"a stream event that is not JSON: {e[:200]!r}"]
        if not isinstance(doc, dict) or doc.get("type") != lines[0][7:].decode():
            return [f"an event whose type is not its name: {e[:200]!r}"]
        docs.append(doc)
    if not docs or docs[0]["type"] != "response.created":
        return [f"a Responses stream that does not begin with response.created: {body[:300]!r}"]
    if [d.get("sequence_number") for d in docs] != list(range(len(docs))):
        return [f"sequence numbers out of order: {body[:300]!r}"]
    last = docs[-1]
    if last["type"] == "error":
        return []  # a failure after the stream began, said as the API says it
    if last["type"] not in ("response.completed", "response.incomplete"):
        return [f"a Responses stream that does not end: {body[-300:]!r}"]
    return _response_problems(last.get("response"))


def health(url: str) -> tuple[int, dict[str, Any]]:
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request("GET", "/health")
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()
