"""`specchat serve`'s log-probabilities and fill-in-the-middle, through the openai client and
raw HTTP, on a tiny pair whose vocabulary has Qwen2.5-Coder's FIM tokens (γ fixed at 3, so
drafts happen) and on the tiny target without them."""

from __future__ import annotations

import http.client
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import openai
import pytest

from specchat.cli.main import main
from specchat.devtools.tiny_models import TinySpec, fim_ids, fim_vocabulary, write_tiny_model
from specchat.engine.decode.fim import ExtraFile, fim_prompt
from specchat.engine.llama.model import LlamaModel
from specchat.serve.server import Serving
from tests.serve_helpers import cli_server, client, raw

CTX = 512
HI = [{"role": "user", "content": "hello there"}]
PREFIX, SUFFIX = "def add(a, b):\n    return", "\n\nprint(add(1, 2))\n"


@pytest.fixture(scope="module")
def fim_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("fim")
    tokens = fim_vocabulary()
    target = write_tiny_model(d / "fim-target.gguf", TinySpec(seed=1), tokens=tokens,
                              fim=fim_ids(tokens), name="tiny-fim")
    draft = write_tiny_model(d / "fim-draft.gguf", TinySpec(seed=2), noise_from=TinySpec(seed=1),
                             noise=0.25, tokens=tokens, fim=fim_ids(tokens), name="tiny-fim-d")
    return target, draft


@pytest.fixture(scope="module")
def fim_server(fim_files: tuple[Path, Path],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    home = tmp_path_factory.mktemp("fim-home")
    target, draft = fim_files
    with cli_server(home, "--model", str(target), "--draft", str(draft), "--gamma", "3",
                    "--ctx-size", str(CTX)) as s:
        assert s.host.state == "ready", s.host.error
        yield s


@pytest.fixture(scope="module")
def plain_server(tiny_target: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[Serving]:
    """A model without FIM tokens."""
    home = tmp_path_factory.mktemp("nofim-home")
    with cli_server(home, "--model", str(tiny_target), "--plain", "--ctx-size", str(CTX)) as s:
        assert s.host.state == "ready", s.host.error
        yield s


@pytest.fixture(scope="module")
def api(fim_server: Serving) -> openai.OpenAI:
    return client(fim_server.url)


def post(url: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, doc, _ = raw(url, "POST", path, json.dumps(body).encode(),
                         {"Content-Type": "application/json"})
    return status, doc


def events(url: str, path: str, body: dict[str, Any]) -> list[str]:
    """A stream's ``data:`` payloads, as sent."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    try:
        conn.request("POST", path, json.dumps({**body, "stream": True}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        text = resp.read().decode()
    finally:
        conn.close()
    return [line[len("data: "):] for line in text.split("\n") if line.startswith("data: ")]


def _error(excinfo: Any) -> dict[str, Any]:
    return excinfo.value.body


# ------------------------------------------------------------------- log-probabilities


def test_chat_logprobs_whole_and_streamed(api: openai.OpenAI, fim_server: Serving) -> None:
    r = api.chat.completions.create(model=fim_server.host.model_id, messages=HI, max_tokens=16,
                                    temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 16
    assert "".join(bytes(e.bytes).decode() for e in content) == r.choices[0].message.content
    for e in content:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        assert e.top_logprobs[0].token == e.token  # greedy: the likeliest is the one chosen
        assert e.top_logprobs[0].logprob == pytest.approx(e.logprob)
        assert [t.logprob for t in e.top_logprobs] == sorted(
            (t.logprob for t in e.top_logprobs), reverse=True)
    assert r.timings["draft_n"] > 0  # speculation ran
    chunks = list(api.chat.completions.create(
        model=fim_server.host.model_id, messages=HI, max_tokens=16, temperature=0,
        logprobs=True, top_logprobs=3, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs
                for e in c.choices[0].logprobs.content]
    assert [(e.token, round(e.logprob, 4)) for e in streamed] == [
        (e.token, round(e.logprob, 4)) for e in content]
    only = api.chat.completions.create(model=fim_server.host.model_id, messages=HI,
                                       max_tokens=4, temperature=0, logprobs=True)
    assert [e.top_logprobs for e in only.choices[0].logprobs.content] == [[]] * 4
    none = api.chat.completions.create(model=fim_server.host.model_id, messages=HI,
                                       max_tokens=4)
    assert none.choices[0].logprobs is None


def test_greedy_logprobs_through_the_server_are_plain_decodings(
        api: openai.OpenAI, fim_server: Serving, fim_files: tuple[Path, Path], home: Any,
        capsys: Any) -> None:
    """The speculative server's figures are those `specchat ask --plain` reports."""
    rc = main(["ask", "name three colours", "--model", str(fim_files[0]), "--plain",
               "--temperature", "0", "--max-tokens", "12", "--system", "", "--ctx-size",
               str(CTX), "--json", "--logprobs", "2"])
    assert rc == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    asked = [x for x in lines if x["type"] == "token"]
    r = api.chat.completions.create(
        model=fim_server.host.model_id, messages=[{"role": "user", "content": "name three "
                                                   "colours"}],
        max_tokens=12, temperature=0, logprobs=True, top_logprobs=2)
    served = r.choices[0].logprobs.content
    assert len(served) == len(asked) == 12
    for a, s in zip(asked, served, strict=True):
        assert s.logprob == pytest.approx(a["logprob"], abs=1e-3)
        assert [t.logprob for t in s.top_logprobs] == pytest.approx(
            [t["logprob"] for t in a["top_logprobs"]], abs=1e-3)


def test_completion_logprobs_are_the_legacy_lists(api: openai.OpenAI,
                                                  fim_server: Serving) -> None:
    r = api.completions.create(model=fim_server.host.model_id, prompt="the cat sat on",
                               max_tokens=10, temperature=0.8, seed=5, logprobs=2)
    lp, text = r.choices[0].logprobs, r.choices[0].text
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 10
    assert "".join(lp.tokens) == text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(10)]
    for token, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert 1 <= len(top) <= 2 and value <= 0
        # sampled: the processed distribution the token was drawn from, which holds it
        assert value > -1000 and (token not in top or top[token] == pytest.approx(value))
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-6


def test_bad_logprob_fields_are_400_naming_them(api: openai.OpenAI,
                                                fim_server: Serving) -> None:
    model = fim_server.host.model_id
    chat_cases = [({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "invalid_value"),
                  ({"logprobs": True, "top_logprobs": -1}, "top_logprobs", "invalid_value"),
                  ({"logprobs": True, "top_logprobs": "3"}, "top_logprobs", "invalid_type"),
                  ({"top_logprobs": 2}, "top_logprobs", "invalid_value"),
                  ({"logprobs": 3}, "logprobs", "invalid_type")]
    for body, param, code in chat_cases:
        with pytest.raises(openai.BadRequestError) as e:
            api.chat.completions.create(model=model, messages=HI, max_tokens=2,
                                        extra_body=body)
        err = _error(e)
        assert (err["param"], err["code"], err["type"]) == (param, code,
                                                            "invalid_request_error"), body
        assert param in err["message"]
    completion_cases = [({"logprobs": 21}, "logprobs", "invalid_value"),
                        ({"logprobs": True}, "logprobs", "invalid_type"),
                        ({"logprobs": 2.5}, "logprobs", "invalid_type"),
                        ({"top_logprobs": 2}, "top_logprobs", "invalid_value")]
    for body, param, code in completion_cases:
        with pytest.raises(openai.BadRequestError) as e:
            api.completions.create(model=model, prompt="the", max_tokens=2, extra_body=body)
        assert (_error(e)["param"], _error(e)["code"]) == (param, code), body
    status, doc = post(fim_server.url, "/infill", {"input_prefix": "a", "n_probs": 99})
    assert status == 400 and doc["error"]["param"] == "n_probs"


# ------------------------------------------------------------------- fill-in-the-middle


def test_a_completion_with_a_suffix_is_the_models_fim_prompt(api: openai.OpenAI,
                                                             fim_server: Serving) -> None:
    model = fim_server.host.model_id
    r = api.completions.create(model=model, prompt=PREFIX, suffix=SUFFIX, max_tokens=12,
                               temperature=0)
    # the same tokens as the FIM markers written out, which the prompt's text may hold
    spelled = api.completions.create(
        model=model, prompt=f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>",
        max_tokens=12, temperature=0)
    assert r.choices[0].text == spelled.choices[0].text
    assert r.usage.prompt_tokens == spelled.usage.prompt_tokens
    assert r.timings["draft_n"] > 0  # speculation over the FIM prompt
    streamed = list(api.completions.create(model=model, prompt=PREFIX, suffix=SUFFIX,
                                           max_tokens=12, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == r.choices[0].text
    plain = api.completions.create(model=model, prompt=PREFIX, max_tokens=12, temperature=0)
    assert plain.usage.prompt_tokens == r.usage.prompt_tokens - 3 - len(
        fim_server.host.served.engine.model.tokenize(SUFFIX))  # type: ignore[union-attr]


def test_infill_answers_in_llama_servers_shape(fim_server: Serving,
                                               fim_files: tuple[Path, Path]) -> None:
    url = fim_server.url
    extra = [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}]
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": extra,
            "prompt": " a", "n_predict": 10, "temperature": 0, "n_probs": 2}
    status, doc = post(url, "/infill", body)
    assert status == 200, doc
    assert doc["stop"] is True and doc["tokens_predicted"] == 10
    assert doc["stop_type"] == "limit" and doc["timings"]["predicted_n"] == 10
    assert doc["specchat"]["decoder"] == "speculative"
    assert len(doc["completion_probabilities"]) == 10
    assert {"id", "token", "bytes", "logprob", "top_logprobs"} <= set(
        doc["completion_probabilities"][0])
    model = LlamaModel(fim_files[0])
    expected = fim_prompt(model, PREFIX + " a", SUFFIX, repo_level=True, limit=CTX - 10,
                          extra=[ExtraFile("util.py", extra[0]["text"])])
    assert doc["tokens_evaluated"] == len(expected)
    assert model.token_text(expected[0]) == "<|repo_name|>"
    lines = events(url, "/infill", body)
    chunks = [json.loads(x) for x in lines]
    assert "[DONE]" not in lines and chunks[-1]["stop"] is True
    assert all(c["stop"] is False for c in chunks[:-1])
    assert "".join(c["content"] for c in chunks) == doc["content"]
    # the repository part fills what the context leaves: a long one is cut from its front
    big = [{"filename": f"f{i}.py", "text": "x = 1\n" * 40} for i in range(20)]
    status, doc = post(url, "/infill", {**body, "input_extra": big, "n_predict": 100})
    assert status == 200 and CTX - 100 - 3 <= doc["tokens_evaluated"] <= CTX - 100


def test_infill_without_files_is_the_completions_prompt_and_stops_alike(
        api: openai.OpenAI, fim_server: Serving) -> None:
    """The same prefix and suffix through both routes: the same prompt, so the same middle and
    the same stop (a stop string here; the model's end-of-generation token alike)."""
    model = fim_server.host.model_id
    free = api.completions.create(model=model, prompt=PREFIX, suffix=SUFFIX, max_tokens=16,
                                  temperature=0).choices[0].text
    stop = free[len(free) // 2:][:2]
    r = api.completions.create(model=model, prompt=PREFIX, suffix=SUFFIX, max_tokens=16,
                               temperature=0, stop=[stop])
    status, doc = post(fim_server.url, "/infill", {
        "input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 16, "temperature": 0,
        "stop": [stop]})
    assert status == 200 and doc["tokens_evaluated"] == r.usage.prompt_tokens
    assert doc["content"] == r.choices[0].text and r.choices[0].finish_reason == "stop"
    assert doc["stop_type"] == "word" and doc["tokens_predicted"] < 16
    status, doc = post(fim_server.url, "/infill", {
        "input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 16, "temperature": 0})
    assert doc["content"] == free


def test_fim_on_a_model_without_fim_tokens_says_so(plain_server: Serving) -> None:
    api = client(plain_server.url)
    model = plain_server.host.model_id
    with pytest.raises(openai.BadRequestError) as e:
        api.completions.create(model=model, prompt="the cat", suffix=" sat", max_tokens=4)
    err = _error(e)
    assert (err["param"], err["code"]) == ("suffix", "fim_not_supported")
    assert "FIM tokens" in err["message"] and "tiny-target" in err["message"]
    # nothing after the gap: an ordinary completion, as an empty suffix asks
    ok = api.completions.create(model=model, prompt="the cat", suffix="", max_tokens=4)
    assert ok.usage.completion_tokens == 4
    status, doc = post(plain_server.url, "/infill", {"input_prefix": "a", "input_suffix": "b"})
    assert status == 501 and doc["error"]["type"] == "not_supported_error"
    assert doc["error"]["code"] == "fim_not_supported"


def test_bad_fim_fields_are_errors_naming_them(api: openai.OpenAI, fim_server: Serving) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        api.completions.create(model=fim_server.host.model_id, prompt="a", max_tokens=2,
                               extra_body={"suffix": 5})
    assert (_error(e)["param"], _error(e)["code"]) == ("suffix", "invalid_type")
    cases = [({"input_prefix": 3}, "input_prefix", "invalid_type"),
             ({"input_suffix": ["b"]}, "input_suffix", "invalid_type"),
             ({"input_extra": "x"}, "input_extra", "invalid_type"),
             ({"input_extra": ["x"]}, "input_extra[0]", "invalid_type"),
             ({"input_extra": [{"text": 3}]}, "input_extra[0].text", "invalid_type"),
             ({"input_extra": [{"filename": None, "text": ""}]}, "input_extra[0].filename",
              "invalid_type"),
             ({"n_predict": "ten"}, "n_predict", "invalid_type"),
             ({"n_predict": 0}, "n_predict", "invalid_value"),
             ({"repeat_penalty": 1.1}, "repeat_penalty", "invalid_value"),
             ({"temperature": -1}, "temperature", "invalid_value")]
    for body, param, code in cases:
        status, doc = post(fim_server.url, "/infill", {"input_prefix": "a", **body})
        assert status == 400, body
        assert (doc["error"]["param"], doc["error"]["code"]) == (param, code), body
    status, doc = post(fim_server.url, "/infill", {"input_prefix": "the cat " * 300})
    assert status == 400 and doc["error"]["code"] == "context_length_exceeded"
    assert doc["error"]["param"] == "input_prefix"
