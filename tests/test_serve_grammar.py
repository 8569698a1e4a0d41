"""`specchat serve`'s constrained output (``response_format`` json_object and json_schema,
llama-server's ``grammar``), through the official openai client, on the tiny pair whose
vocabulary has JSON's punctuation, with γ fixed at 3 so that drafts really happen."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from specchat.serve.server import Serving
from tests.serve_helpers import cli_server, client
from tests.test_grammar import RECORD, is_record

HI = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def server(tiny_json_target: Path, tiny_json_draft: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    home = tmp_path_factory.mktemp("serve-grammar-home")
    with cli_server(home, "--model", str(tiny_json_target), "--draft", str(tiny_json_draft),
                    "--gamma", "3", "--ctx-size", "512") as s:
        assert s.host.state == "ready", s.host.error
        yield s


@pytest.fixture(scope="module")
def api(server: Serving) -> openai.OpenAI:
    return client(server.url)


def chat(api: openai.OpenAI, **kw: Any) -> Any:
    kw.setdefault("messages", HI)
    kw.setdefault("max_tokens", 80)
    return api.chat.completions.create(model=api.models.list().data[0].id, **kw)


def record_format(strict: bool | None = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "record", "schema": RECORD}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}


def test_a_json_schema_reply_parses_and_was_drafted(api: openai.OpenAI) -> None:
    for seed in range(8):
        r = chat(api, response_format=record_format(), temperature=1.0, seed=seed)
        text = r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop" and is_record(text), text
    greedy = chat(api, response_format=record_format(strict=None), temperature=0)
    assert is_record(greedy.choices[0].message.content)
    t = greedy.timings
    assert t["draft_n"] > 0 and t["draft_n_accepted"] > 0  # keys and punctuation are drafted


def test_a_streamed_json_reply_is_the_whole_one(api: openai.OpenAI) -> None:
    chunks = list(chat(api, response_format=record_format(), temperature=0, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop" and is_record(text)
    whole = chat(api, response_format=record_format(), temperature=0)
    assert whole.choices[0].message.content == text


def test_json_object_and_llama_servers_schema_beside_it(api: openai.OpenAI) -> None:
    r = chat(api, response_format={"type": "json_object"}, temperature=0, max_tokens=6)
    assert r.choices[0].message.content.startswith("{")
    with_schema = chat(api, response_format={"type": "json_object", "schema": RECORD},
                       temperature=0)
    assert is_record(with_schema.choices[0].message.content)


def test_a_lark_or_gbnf_grammar_constrains_the_reply(api: openai.OpenAI) -> None:
    for grammar in ('start: ("yes" | "no") "."', 'root ::= ("yes" | "no") "."'):
        for seed in range(4):
            r = chat(api, extra_body={"grammar": grammar}, temperature=1.0, seed=seed)
            assert r.choices[0].message.content in ("yes.", "no."), grammar
            assert r.choices[0].finish_reason == "stop"
    text = api.completions.create(model=api.models.list().data[0].id, prompt="the cat", max_tokens=20,
                                  extra_body={"grammar": 'start: "a" "b"*'}).choices[0].text
    assert text.startswith("a") and set(text[1:]) <= {"b"}, text


def _error(e: pytest.ExceptionInfo[openai.BadRequestError]) -> dict[str, Any]:
    body = e.value.body
    assert isinstance(body, dict)
    return body.get("error", body)


@pytest.mark.parametrize(("kw", "param", "code", "says"), [
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "foo"}}}},
     "response_format.json_schema.schema", "invalid_json_schema", "Invalid type: foo"),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"$ref": "#/nowhere"}}}},
     "response_format.json_schema.schema", "invalid_json_schema", "does not compile"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}},
     "response_format.json_schema.schema", "invalid_type", "JSON schema"),
    ({"response_format": {"type": "json_schema"}},
     "response_format.json_schema", "missing_required_parameter", "required"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": 1}}},
     "response_format.json_schema.strict", "invalid_type", "true or false"),
    ({"response_format": {"type": "yaml"}}, "response_format.type", "invalid_value", "yaml"),
    ({"response_format": "json"}, "response_format", "invalid_type", "an object"),
    ({"response_format": {"type": "json_object", "schema": {"type": "nope"}}},
     "response_format.schema", "invalid_json_schema", "Invalid type"),
    ({"extra_body": {"grammar": "start: foo"}}, "grammar", "invalid_grammar", "unknown name"),
    ({"extra_body": {"grammar": 'root ::= "a" | ['}}, "grammar", "invalid_grammar", "grammar"),
    ({"extra_body": {"grammar": 5}}, "grammar", "invalid_type", "Lark or GBNF"),
    ({"extra_body": {"grammar": 'start: "a"'}, "response_format": {"type": "json_object"}},
     "grammar", "invalid_value", "not both"),
    # Compiles, but no token of this vocabulary writes a tilde: refused before the reply.
    ({"extra_body": {"grammar": 'start: "~"'}}, "grammar", "invalid_grammar", "vocabulary"),
])
def test_bad_formats_and_grammars_are_400_naming_the_field(
        api: openai.OpenAI, kw: dict[str, Any], param: str, code: str, says: str) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        chat(api, **kw)
    err = _error(e)
    assert (err["param"], err["code"], err["type"]) == (param, code, "invalid_request_error")
    assert says in err["message"] and "\n" not in err["message"], err
    # The server goes on serving.
    assert is_record(chat(api, response_format=record_format(), temperature=0)
                     .choices[0].message.content)


def test_text_format_is_free_text(api: openai.OpenAI) -> None:
    r = chat(api, response_format={"type": "text"}, temperature=0, max_tokens=5)
    assert r.usage.completion_tokens == 5 and r.choices[0].message.content
